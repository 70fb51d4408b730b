"""Placing files into the landing zone (``lakehouse ingest``, ``generate``, the benches): whatever name or
link a caller or a planted file offers, the bytes land as one new file directly in the landing zone, or
nothing is written and the refusal is one line. No Spark: the placement is plain file work."""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from runtime.sources import landing
from runtime.sources.landing import place_in_landing
from warehouse.settings import Settings

LINE = '{"event_id": "e"}\n'


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})


@pytest.mark.parametrize("name", ["../../tables/x.jsonl", "/etc/x.jsonl", "a/../../b.jsonl", "..", "."])
def test_a_name_with_folders_or_dots_lands_directly_in_the_landing_zone(settings: Settings, name: str) -> None:
    placed = place_in_landing(settings, name, lambda handle: handle.write(LINE))
    assert placed.parent == settings.landing_dir
    assert [p.name for p in settings.landing_dir.iterdir() if not p.name.startswith(".")] == [placed.name]
    assert placed.read_text() == LINE
    assert sorted(p.name for p in settings.home.iterdir()) == ["landing"], "nothing beside the landing zone"


def test_a_link_planted_at_the_partial_name_is_refused_and_its_target_untouched(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("keep me\n")
    arrival = 1_700_000_000_000 * 1_000_000
    monkeypatch.setattr(landing, "_next_arrival_ns", lambda _settings: arrival)
    settings.landing_dir.mkdir(parents=True)
    (settings.landing_dir / f".{arrival:020d}-x.jsonl.partial").symlink_to(target)
    with pytest.raises(FileExistsError, match=r"exists \(a link or a stray file\); nothing was placed"):
        place_in_landing(settings, "x.jsonl", lambda handle: handle.write("overwritten\n"))
    assert target.read_text() == "keep me\n"
    assert [p.name for p in settings.landing_dir.iterdir() if not p.name.startswith(".")] == []


def test_ingest_refuses_what_is_not_a_regular_file_in_one_line(settings: Settings, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    refusals = {fifo: "not a regular file", folder: "not a regular file", tmp_path / "missing.jsonl": "no such file"}
    for source, refusal in refusals.items():
        result = CliRunner().invoke(app, ["ingest", str(source)], env={"LAKEHOUSE_HOME": str(settings.home)})
        assert result.exit_code == 1
        assert result.stderr.count("\n") == 1 and f"{refusal}: {source}" in result.stderr, result.stderr
    assert not settings.landing_dir.exists() or list(settings.landing_dir.iterdir()) == []


def test_a_clock_that_jumps_back_does_not_date_a_new_file_before_the_landed_ones(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock set back an hour between two `ingest` processes: the second file's stamp (its name and
    modification time, Spark's arrival order and the landing sensor's cursor) still comes after the first's."""
    now = [1_800_000_000_000_000_000]
    monkeypatch.setattr(landing.time, "time_ns", lambda: now[0])
    # Put back afterwards what this process had handed out: the stamps below are a year ahead.
    monkeypatch.setattr(landing, "_last_arrival_ms", landing._last_arrival_ms)
    first = place_in_landing(settings, "first.jsonl", lambda handle: handle.write(LINE))
    now[0] -= 3_600 * 1_000_000_000
    monkeypatch.setattr(landing, "_last_arrival_ms", 0)  # a new process: nothing in memory
    second = place_in_landing(settings, "second.jsonl", lambda handle: handle.write(LINE))
    assert os.stat(second).st_mtime_ns > os.stat(first).st_mtime_ns
    assert sorted(p.name for p in settings.landing_dir.iterdir() if not p.name.startswith(".")) == [
        first.name,
        second.name,
    ]
    now[0] += 7_200 * 1_000_000_000  # the clock caught up: stamps follow it again
    third = place_in_landing(settings, "third.jsonl", lambda handle: handle.write(LINE))
    assert os.stat(third).st_mtime_ns == now[0] // 1_000_000 * 1_000_000
