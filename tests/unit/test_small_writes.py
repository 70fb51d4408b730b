"""Small writes committed by delta-rs (decision 43): exactly once, tagged as a Spark write would be."""

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import deltalake
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from transforms.gold.watermarks import Watermark, mark_row
from warehouse.catalog import OPS_WATERMARKS
from warehouse.delta import (
    MergeSpec,
    append_rows_once,
    batch_scope,
    committed_version,
    merge_rows_once,
    transaction_version,
)
from warehouse.settings import Settings

WRITER = "lakehouse:test:small"


def _settings(tmp_path: Path) -> Settings:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    schema = to_arrow_schema(OPS_WATERMARKS.schema)
    deltalake.write_deltalake(str(OPS_WATERMARKS.path(settings)), schema.empty_table())
    return settings


def _mark(batch_id: int) -> dict:
    at = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
    mark = Watermark(at, at - timedelta(minutes=2))
    return mark_row("gold_q", WRITER, batch_id, mark, at, "events", timedelta(minutes=2), None, 5, (batch_id, batch_id))


def _rows(path: Path) -> list[dict]:
    return deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def test_a_row_is_appended_once_in_a_stream_batch_and_tagged_with_the_batch(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = OPS_WATERMARKS.path(settings)
    with batch_scope(WRITER, 7, time.time()):
        append_rows_once([_mark(7)], settings, OPS_WATERMARKS, WRITER, 7)
        append_rows_once([_mark(7)], settings, OPS_WATERMARKS, WRITER, 7)  # the re-run after a crash
    rows = _rows(path)
    assert len(rows) == 1
    assert rows[0]["batch_id"] == 7 and rows[0]["watermark"] == datetime(2026, 11, 25, 9, 58, tzinfo=UTC)
    version = committed_version(path, WRITER, 7)
    assert version == 1
    log = (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    assert json.loads(json.loads(log[0])["commitInfo"]["userMetadata"]) == {"writer": WRITER, "batch": 7}
    assert transaction_version(settings, OPS_WATERMARKS, WRITER) is None  # as a Spark write in a batch


def test_outside_a_stream_batch_a_row_carries_delta_s_transaction_id(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    for batch_id in (3, 3, 2, 4):  # a re-run of 3, then an older batch: neither is written
        append_rows_once([_mark(batch_id)], settings, OPS_WATERMARKS, WRITER, batch_id)
    assert sorted(row["batch_id"] for row in _rows(OPS_WATERMARKS.path(settings))) == [3, 4]
    assert transaction_version(settings, OPS_WATERMARKS, WRITER) == 4


def test_a_merge_of_rows_applies_once_with_its_delete_and_insert_conditions(tmp_path: Path) -> None:
    path = tmp_path / "counts"
    deltalake.write_deltalake(str(path), pa.table({"user_id": ["a", "b", "c"], "n": pa.array([1, 2, 3], pa.int64())}))
    spec = MergeSpec(
        "t.user_id = s.user_id",
        update={"n": "t.n + s.delta"},
        insert={"user_id": "s.user_id", "n": "s.delta"},
        delete_when="s.delta = 0",
        insert_when="s.delta > 0",
    )
    changes = pa.table({"user_id": ["a", "b", "d", "e"], "delta": pa.array([10, 0, 4, -1], pa.int64())})
    for _ in range(2):  # the second is a re-run of the same batch
        merge_rows_once(changes, path, WRITER, 1, spec, {"note": "test"})
    counts = {row["user_id"]: row["n"] for row in _rows(path)}
    # a revised, b deleted, c untouched, d inserted, e not inserted (its condition fails)
    assert counts == {"a": 11, "c": 3, "d": 4}
    assert deltalake.DeltaTable(str(path)).transaction_version(WRITER) == 1
    assert json.loads(deltalake.DeltaTable(str(path)).history(1)[0]["userMetadata"]) == {"note": "test"}


def _commit(log: Path, version: int, writer: str, batch: int, written: float) -> None:
    """A commit file as a batch's write leaves it (its tags in ``userMetadata``), dated ``written``."""
    info = {"commitInfo": {"userMetadata": json.dumps({"writer": writer, "batch": batch})}}
    commit = log / f"{version:020d}.json"
    commit.write_text(json.dumps(info) + "\n")
    os.utime(commit, (written, written))


def test_a_batch_s_commit_is_found_when_the_clock_went_back_and_the_search_stops_at_its_earlier_batch(
    tmp_path: Path,
) -> None:
    """Batch 5 began at ``since``; the clock then went back an hour and batch 5 committed, dated before
    ``since``; another writer committed after it. The re-run after a crash must still find batch 5's commit."""
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    now = time.time()
    since = now - 60
    _commit(log, 0, WRITER, 4, since - 1)  # the previous batch, before the anchor
    _commit(log, 1, WRITER, 5, since - 3_600)  # written after the clock went back an hour
    assert committed_version(tmp_path / "t", WRITER, 5, since) == 1
    assert committed_version(tmp_path / "t", WRITER, 6, since) is None
    # A commit of an earlier batch of the same writer ends the search, whatever the times say.
    _commit(log, 2, "lakehouse:other", 0, now)
    _commit(log, 3, WRITER, 6, now)
    assert committed_version(tmp_path / "t", WRITER, 7) is None
    assert committed_version(tmp_path / "t", WRITER, 5) == 1
    # With the clock now behind the batch's start, the times bound nothing: batch 5 is found again
    # though every commit looks older than ``since``.
    assert committed_version(tmp_path / "t", WRITER, 5, now + 3_600) == 1
