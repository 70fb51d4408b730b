"""Which tables `maintain` vacuums: only those with a data file VACUUM may delete now (referenced by no live
version and written before the retention). A table written with delta-rs, its files' times set by hand."""

import os
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from warehouse.maintenance import deletable_files

HOUR = 3600.0


def _replaced_once(path: Path) -> tuple[Path, Path]:
    """A table whose first file an overwrite replaced: (the replaced file, the live one)."""
    write_deltalake(str(path), pa.table({"n": [1]}))
    (first,) = DeltaTable(str(path)).file_uris()
    write_deltalake(str(path), pa.table({"n": [2]}), mode="overwrite")
    (live,) = DeltaTable(str(path)).file_uris()
    return Path(first.removeprefix("file://")), Path(live.removeprefix("file://"))


def _age(file: Path, hours: float) -> None:
    then = time.time() - hours * HOUR
    os.utime(file, (then, then))


def test_a_replaced_file_is_deletable_only_once_older_than_the_retention(tmp_path: Path) -> None:
    replaced, _ = _replaced_once(tmp_path / "t")
    assert deletable_files(tmp_path / "t", 168) == 0  # replaced a moment ago: VACUUM would keep it
    assert deletable_files(tmp_path / "t", 0) == 1
    _age(replaced, 169)
    assert deletable_files(tmp_path / "t", 168) == 1


def test_a_live_file_is_never_deletable_however_old(tmp_path: Path) -> None:
    _, live = _replaced_once(tmp_path / "t")
    _age(live, 1000)
    assert deletable_files(tmp_path / "t", 168) == 0
    assert deletable_files(tmp_path / "t", 0) == 1  # the replaced one only


def test_an_orphan_a_killed_writer_left_counts_and_the_log_does_not(tmp_path: Path) -> None:
    """A file no commit names (a writer killed before its commit) is VACUUM's too, by its own age."""
    _replaced_once(tmp_path / "t")
    orphan = tmp_path / "t" / "part-00000-orphan.snappy.parquet"
    orphan.write_bytes(b"PAR1")
    assert deletable_files(tmp_path / "t", 1) == 0
    _age(orphan, 2)
    for entry in (tmp_path / "t" / "_delta_log").iterdir():
        _age(entry, 2)
    assert deletable_files(tmp_path / "t", 1) == 1
