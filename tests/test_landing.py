"""Landing placement: atomic, unique names, and arrival order that Spark's file source can see."""

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.sources.landing import place_in_landing
from warehouse.settings import Settings

#: Seconds each, no process of their own: part of `make test-fast`.
pytestmark = pytest.mark.quick


def test_files_placed_in_a_burst_keep_their_order_in_names_and_millisecond_mtimes(tmp_path: Path) -> None:
    settings = replace(Settings(), home=tmp_path)
    placed = [place_in_landing(settings, "same.jsonl", lambda h, n=n: h.write(f"{n}\n")) for n in range(50)]
    assert len({p.name for p in placed}) == 50
    assert sorted(placed) == placed
    # Spark reads modification times in milliseconds: ties would let it order a burst arbitrarily.
    millis = [p.stat().st_mtime_ns // 1_000_000 for p in placed]
    assert all(a < b for a, b in itertools.pairwise(millis))
    assert [p.read_text() for p in placed] == [f"{n}\n" for n in range(50)]
    partial = [p for p in tmp_path.joinpath("landing").iterdir() if p.name.startswith(".")]
    assert [p.name for p in partial] == [".arrival-clock"], "no partial file is left, only the arrival clock"
