"""The faults ``runtime.faults`` recognises, on checkpoint folders and Delta logs laid out by hand as
Spark and Delta write them, and the failures it puts in words. No Spark: the checks read files only."""

import errno
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from runtime.checkpoints import KAFKA_STAGE, LANDING_STAGE, SILVER_STAGE
from runtime.faults import Fault, check_home, damaged_checkpoint, damaged_log, explain, lost_checkpoints, recovery
from warehouse.catalog import OPS_STREAM_PROGRESS, SILVER_EVENTS
from warehouse.settings import Settings

OFFSETS = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"logOffset":3}\n'
COMMIT = 'v1\n{"nextBatchWatermarkMs":0}\n'
SOURCE_LOG = 'v1\n{"path":"file:/landing/a.jsonl","timestamp":1,"batchId":3}\n'


def _checkpoint(root: Path, batches: int = 4) -> Path:
    """A finished file-source stream's checkpoint: metadata, offsets and commits 0..batches-1, its source log."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "sources" / "0").mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": "6c1b"}))
    for batch in range(batches):
        (root / "offsets" / str(batch)).write_text(OFFSETS)
        (root / "commits" / str(batch)).write_text(COMMIT)
        (root / "sources" / "0" / str(batch)).write_text(SOURCE_LOG)
    return root


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})


def test_a_sound_checkpoint_and_an_absent_one_have_no_fault(tmp_path: Path) -> None:
    assert damaged_checkpoint(_checkpoint(tmp_path / "stream")) is None
    assert damaged_checkpoint(tmp_path / "never-ran") is None


#: Each damage to a checkpoint (its folder, as :func:`_checkpoint` lays it out) and the words that name it.
DAMAGES = [
    (lambda c: (c / "offsets" / "3").write_text(""), "offsets/3 is empty"),
    (lambda c: (c / "offsets" / "3").write_text("v1\n"), "offsets/3 is truncated"),
    (lambda c: (c / "offsets" / "3").write_text(OFFSETS[:60]), "offsets/3 is truncated or corrupt"),
    (lambda c: (c / "offsets" / "3").unlink(), "offsets/3 is missing"),
    (lambda c: (c / "commits" / "3").write_text('{"nextBatch'), "commits/3 has no version line"),
    (lambda c: (c / "metadata").unlink(), "metadata is missing"),
    (lambda c: (c / "metadata").write_text('{"id": "6c'), "metadata is truncated or corrupt"),
    (lambda c: (c / "sources" / "0" / "3").write_text('v1\n{"path":'), "sources/0/3 is truncated or corrupt"),
]


@pytest.mark.parametrize(("damage", "named"), DAMAGES)
def test_each_damaged_checkpoint_file_is_named(tmp_path: Path, damage, named: str) -> None:
    checkpoint = _checkpoint(tmp_path / "stream")
    damage(checkpoint)
    assert damaged_checkpoint(checkpoint) == named


def test_the_newest_commit_file_missing_is_a_crash_not_a_fault(tmp_path: Path) -> None:
    """Batch 3 planned but not committed is what a crash leaves: Spark re-runs it, the tags skip what it wrote."""
    checkpoint = _checkpoint(tmp_path / "stream")
    (checkpoint / "commits" / "3").unlink()
    assert damaged_checkpoint(checkpoint) is None


def test_a_compacted_source_log_is_read_at_its_compact_file(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "stream")
    (checkpoint / "sources" / "0" / "3").rename(checkpoint / "sources" / "0" / "3.compact")
    assert damaged_checkpoint(checkpoint) is None
    (checkpoint / "sources" / "0" / "3.compact").write_text("v1\n{")
    assert damaged_checkpoint(checkpoint) == "sources/0/3.compact is truncated or corrupt"


def test_a_ledger_needs_its_writer_and_batch_numbers(tmp_path: Path) -> None:
    ledger = tmp_path / "silver" / "carried"
    ledger.mkdir(parents=True)
    (ledger / "bronze_events.0").write_text("0")
    assert damaged_checkpoint(tmp_path / "silver") == "carried/writer is missing"
    (ledger / "writer").write_text("9f2e")
    assert damaged_checkpoint(tmp_path / "silver") is None
    (ledger / "bronze_events.1").write_text("")
    assert damaged_checkpoint(tmp_path / "silver") == "carried/bronze_events.1 is not a batch number"


def _progress(settings: Settings, streams: list[str]) -> None:
    rows = pa.table({"stream": pa.array(streams, pa.string()), "batch_id": pa.array(range(len(streams)), pa.int64())})
    write_deltalake(str(OPS_STREAM_PROGRESS.path(settings)), rows)


def test_a_stream_without_a_finished_batch_is_lost_only_when_it_ran_here(settings: Settings) -> None:
    """No checkpoint and no progress rows: a first start. No checkpoint but progress rows: lost. A replay's
    starting-version file is a position of its own."""
    streams = [LANDING_STAGE, KAFKA_STAGE, "gold_unique_urls"]
    assert lost_checkpoints(settings, streams) == []
    _progress(settings, [LANDING_STAGE, "gold_unique_urls"])
    assert lost_checkpoints(settings, streams) == [LANDING_STAGE, "gold_unique_urls"]
    settings.checkpoints_dir.mkdir(parents=True)
    (settings.checkpoints_dir / "gold_unique_urls.starting-version").write_text("7")
    _checkpoint(settings.checkpoints_dir / LANDING_STAGE)
    assert lost_checkpoints(settings, streams) == []


def test_silver_is_lost_when_its_ledger_is_gone_but_the_source_carried_batches_into_it(settings: Settings) -> None:
    _checkpoint(settings.checkpoints_dir / LANDING_STAGE)
    silver = pa.table({"event_id": pa.array(["e1"], pa.string())})
    write_deltalake(str(SILVER_EVENTS.path(settings)), silver.slice(0, 0))
    assert lost_checkpoints(settings, [LANDING_STAGE, SILVER_STAGE]) == []  # created, no rows yet
    write_deltalake(str(SILVER_EVENTS.path(settings)), silver, mode="append")
    assert lost_checkpoints(settings, [LANDING_STAGE, SILVER_STAGE]) == [SILVER_STAGE]
    (settings.checkpoints_dir / SILVER_STAGE / "carried").mkdir(parents=True)
    (settings.checkpoints_dir / SILVER_STAGE / "carried" / "writer").write_text("9f2e")
    assert lost_checkpoints(settings, [LANDING_STAGE, SILVER_STAGE]) == []


def _table(path: Path, commits: int = 3) -> Path:
    for version in range(commits):
        write_deltalake(str(path), pa.table({"n": [version]}), mode="append")
    return path / "_delta_log"


def test_a_sound_delta_log_has_no_fault(tmp_path: Path) -> None:
    _table(tmp_path / "t")
    assert damaged_log(tmp_path / "t") is None
    assert damaged_log(tmp_path / "never-created") is None


def test_a_missing_commit_a_lost_newest_one_and_a_cut_one_are_named(tmp_path: Path) -> None:
    log = _table(tmp_path / "gap")
    (log / f"{1:020d}.json").unlink()
    assert damaged_log(tmp_path / "gap") == f"{1:020d}.json is missing"
    log = _table(tmp_path / "newest")
    (log / f"{3:020d}.crc").write_text("{}")  # Spark writes a checksum after each commit it makes
    assert damaged_log(tmp_path / "newest") == f"{3:020d}.json is missing ({3:020d}.crc is there)"
    log = _table(tmp_path / "cut")
    newest = log / f"{2:020d}.json"
    newest.write_bytes(newest.read_bytes()[:50])
    assert damaged_log(tmp_path / "cut") == f"{2:020d}.json is truncated or corrupt"


def test_commits_before_a_delta_checkpoint_may_be_gone(tmp_path: Path) -> None:
    """Log retention removes commits a checkpoint covers: that is not a gap."""
    log = _table(tmp_path / "t", commits=4)
    (log / f"{2:020d}.checkpoint.parquet").write_bytes(b"PAR1")
    for version in (0, 1):
        (log / f"{version:020d}.json").unlink()
    assert damaged_log(tmp_path / "t") is None


def test_check_home_refuses_with_the_recovery_and_skips_what_a_replay_rebuilds(settings: Settings) -> None:
    _checkpoint(settings.checkpoints_dir / LANDING_STAGE)
    (settings.checkpoints_dir / LANDING_STAGE / "offsets" / "3").write_text("")
    with pytest.raises(Fault) as refused:
        check_home(settings, [LANDING_STAGE], [])
    assert "\n" not in str(refused.value)
    assert str(refused.value).endswith("Recover with `lakehouse replay --source landing`")
    check_home(settings, [LANDING_STAGE], [], skip=[LANDING_STAGE])
    assert recovery(KAFKA_STAGE) == "lakehouse replay --source kafka"
    assert recovery("gold_fraud_alerts") == "lakehouse replay"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/home/x/tables/part-0.parquet"), "the disk is full"),
        (RuntimeError("java.io.IOException: No space left on device"), "the disk is full"),
        (OSError(errno.EROFS, "Read-only file system", "/home/x"), "read-only file system (/home/x)"),
        (PermissionError(errno.EACCES, "Permission denied", "/home/x/locks"), "permission denied (/home/x/locks)"),
        (RuntimeError("Failed to read log file file:/h/checkpoints/s/offsets/1. Incomplete log file"), "offsets/1"),
        (
            RuntimeError(
                "[STREAM_FAILED] Query terminated with exception: Partition events-2's offset was changed from "
                "400 to 12, some data may have been missed. Some data may have been lost because they are not "
                "available in Kafka any more"
            ),
            "partition events-2 went back from offset 400 to 12: its topic was deleted and created again",
        ),
        (
            RuntimeError(
                "An exception was raised by the Python Proxy. Traceback: File x.py, line 3\n runtime.faults.Fault: "
                "the Kafka topic events was deleted and created again (...). Read it with `lakehouse replay "
                "--source kafka`\n\tat py4j.Protocol"
            ),
            "Kafka topic events was deleted and created again (...). Read it with `lakehouse replay --source kafka`",
        ),
    ],
)
def test_failures_met_while_running_are_put_in_one_line_with_their_recovery(error: Exception, words: str) -> None:
    told = explain(error)
    assert words in told and "\n" not in told


def test_an_error_from_a_cause_chain_is_found_and_others_keep_their_text() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("the batch failed") from inner
    except RuntimeError as outer:
        assert explain(outer).startswith("the disk is full")
    assert explain(ValueError("bad   value\n here")) == "bad value here"


def test_the_kafka_sources_initial_offsets_file_with_its_leading_nul_is_sound(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path / "stream")
    (checkpoint / "sources" / "0" / "3").write_bytes(b'\x00v1\n{"lakehouse-events":{"0":0,"1":0}}')
    assert damaged_checkpoint(checkpoint) is None
