"""``runtime/checkpoints.py`` (and the backlog readers of ``runtime/progress.py``) on Spark's own files.

The fixtures under ``fixtures/spark-checkpoints`` are the small text files of a real run (see their README); a
test copies the streams it needs into ``tmp_path`` and changes them there (a crash is a missing commit, a
stream inside a Delta commit is an offset line with ``index`` >= 0). No Spark session is started: reading
these files without one is the module's point.
"""

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from expectations.suites import _in_flight
from runtime.checkpoints import (
    batch_earliest_start,
    batch_watermark,
    checkpoint_dir,
    committed_at,
    committed_batches,
    completed_source_version,
    consumed_offsets,
    consumed_source_version,
    continue_after,
    files_of_batch,
    files_read,
    is_committed,
    move_checkpoint,
    query_id,
    read_before_version,
    record_finished,
    source_log,
    starting_version,
    starting_version_file,
    uncommitted_batch,
    windows_stage_name,
)
from runtime.progress import pending_landing_files, pending_source_commits
from warehouse.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures" / "spark-checkpoints"

#: The landing files of the run, in the order the landing stream took them (one per batch).
LANDING_FILES = [
    "01795613020922000000-synthetic-seed7-part0000.jsonl",
    "01795613020929000000-synthetic-seed7-part0001.jsonl",
    "01795613020940000000-synthetic-seed7-part0002.jsonl",
    "01795613022544000000-synthetic-orders-seed7-part0000.jsonl",
    "01795613022567000000-synthetic-orders-seed7-part0001.jsonl",
    "01795613022642000000-synthetic-orders-seed7-part0002.jsonl",
    "01795613022660000000-synthetic-orders-seed7-part0003.jsonl",
]
LOGGED = [f"file:///lakehouse/landing/{name}" for name in LANDING_FILES]
BRONZE_TABLE_ID = "9b84bc7d-67d5-42e3-93d6-bf8fbaf025c3"
SILVER_TABLE_ID = "4e80bb52-6647-4202-b04e-bec0f2b0f379"
STATE_SCHEMA = "state/0/_stateSchema/default/0_7f34885b-dfd9-4d2a-a39b-0cb6c9c382dc"


def settings_in(home: Path, **env: str) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(home), **{f"LAKEHOUSE_{k}": v for k, v in env.items()}})


def copy(stream: str, tmp_path: Path) -> Path:
    """A copy of a fixture stream's checkpoint, free to change."""
    target = tmp_path / "checkpoints" / stream
    shutil.copytree(FIXTURES / stream, target)
    return target


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def set_source(checkpoint: Path, batch_id: int, **offset: object) -> None:
    """Change fields of the (first) source offset of a batch's offset entry, as Spark would have written it."""
    entry = checkpoint / "offsets" / str(batch_id)
    text = lines(entry)
    source = json.loads(text[2])
    source.update(offset)
    text[2] = json.dumps(source, separators=(",", ":"))
    entry.write_text("\n".join(text))


def plan(checkpoint: Path, batch_id: int, source_line: str, watermark_ms: int = 0) -> None:
    """Write an offset entry (Spark's version line, the batch metadata, one source line)."""
    metadata = json.loads(lines(checkpoint / "offsets" / "0")[1])
    metadata["batchWatermarkMs"] = watermark_ms
    text = ["v1", json.dumps(metadata, separators=(",", ":")), source_line]
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(text))


def commit(checkpoint: Path, batch_id: int) -> None:
    (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


# --- names and folders ---------------------------------------------------------------------------------


def test_checkpoint_dir_is_under_the_home_by_stream_name(tmp_path: Path) -> None:
    settings = settings_in(tmp_path / "home")
    assert checkpoint_dir(settings, "silver_events") == tmp_path / "home" / "checkpoints" / "silver_events"
    assert checkpoint_dir(settings, SimpleNamespace(name="gold_fraud_alerts")) == (
        tmp_path / "home" / "checkpoints" / "gold_fraud_alerts"
    )


def test_the_windows_stream_is_named_after_its_table(tmp_path: Path) -> None:
    assert windows_stage_name(settings_in(tmp_path)) == "gold_user_spend_5m"
    assert windows_stage_name(settings_in(tmp_path, WINDOW_MINUTES="15")) == "gold_user_spend_15m"


def test_query_id_is_the_checkpoint_s_metadata_id() -> None:
    assert query_id(FIXTURES / "bronze_events") == "6109d425-efb6-4b18-88f1-bb6f0a8cf974"
    assert query_id(FIXTURES / "gold_fraud_alerts") == "bcc7e826-b0e1-43e5-aba6-d948756c22cb"


# --- the commit log ------------------------------------------------------------------------------------


def test_committed_batches_oldest_first() -> None:
    assert committed_batches(FIXTURES / "bronze_events") == [0, 1, 2, 3, 4, 5, 6]
    assert committed_batches(FIXTURES / "gold_fraud_alerts") == [0, 1]
    assert committed_batches(FIXTURES / "silver_events") == [0]


def test_committed_batches_sort_by_number_and_skip_spark_s_other_files(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    for batch_id in (7, 8, 9, 10, 11):
        commit(checkpoint, batch_id)
    (checkpoint / "commits" / ".11.crc").write_bytes(b"crc")
    (checkpoint / "commits" / ".12.tmp").write_text("partial")
    assert committed_batches(checkpoint) == list(range(12))  # 10 after 9, not after 1


def test_no_commit_log_yet(tmp_path: Path) -> None:
    assert committed_batches(tmp_path / "never-started") == []
    assert uncommitted_batch(tmp_path / "never-started") is None
    assert consumed_source_version(tmp_path / "never-started") is None
    assert read_before_version(tmp_path / "never-started") == -1


def test_is_committed() -> None:
    bronze = FIXTURES / "bronze_events"
    assert is_committed(bronze, 0) and is_committed(bronze, 6)
    assert not is_committed(bronze, 7)


def test_every_planned_batch_committed_leaves_none_uncommitted() -> None:
    assert uncommitted_batch(FIXTURES / "bronze_events") is None
    assert uncommitted_batch(FIXTURES / "gold_fraud_alerts") is None


def test_a_crash_leaves_the_last_planned_batch_uncommitted(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    (checkpoint / "commits" / "6").unlink()
    assert uncommitted_batch(checkpoint) == 6
    assert committed_batches(checkpoint) == [0, 1, 2, 3, 4, 5]
    assert not is_committed(checkpoint, 6)


def test_a_cut_off_batch_recorded_as_finished_reads_as_Spark_commits_it(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    written = (checkpoint / "commits" / "6").read_text()
    (checkpoint / "commits" / "6").unlink()
    record_finished(checkpoint, 6)
    assert uncommitted_batch(checkpoint) is None
    assert (checkpoint / "commits" / "6").read_text() == written
    first = copy("silver_events", tmp_path / "first")
    (first / "commits" / "0").unlink()
    record_finished(first, 0)
    assert (first / "commits" / "0").read_text() == 'v1\n{"nextBatchWatermarkMs":0}'


def test_a_checkpoint_with_offsets_but_no_commit_at_all(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    (checkpoint / "commits" / "0").unlink()
    assert uncommitted_batch(checkpoint) == 0
    assert consumed_source_version(checkpoint) is None
    assert read_before_version(checkpoint) == -1


def test_committed_at_is_the_commit_file_s_time(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    os.utime(checkpoint / "commits" / "3", (1_700_000_000, 1_700_000_123.5))
    assert committed_at(checkpoint, 3) == 1_700_000_123.5


def test_batch_earliest_start_is_the_previous_commit_or_the_checkpoint_s_creation(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    os.utime(checkpoint / "metadata", (1_700_000_000, 1_700_000_000))
    for batch_id in range(7):
        os.utime(checkpoint / "commits" / str(batch_id), (0, 1_700_000_100 + batch_id))
    assert batch_earliest_start(checkpoint, 0) == 1_700_000_000  # the first batch: the metadata file
    assert batch_earliest_start(checkpoint, 1) == 1_700_000_100  # commit 0
    assert batch_earliest_start(checkpoint, 4) == 1_700_000_103  # commit 3
    assert batch_earliest_start(checkpoint, 7) == 1_700_000_106  # the next batch: after the newest commit
    # A re-run of a batch after a crash gets the same instant as its first try (neither file changes).
    (checkpoint / "commits" / "6").unlink()
    assert batch_earliest_start(checkpoint, 6) == 1_700_000_105


def test_batch_watermark_from_the_offset_entry() -> None:
    assert batch_watermark(FIXTURES / "bronze_events", 0) is None  # batchWatermarkMs 0: no watermark yet
    assert batch_watermark(FIXTURES / "gold_fraud_alerts", 0) is None
    # 1704067225852 ms = 2024-01-01T00:00:00Z (1704067200 s) + 25.852 s
    assert batch_watermark(FIXTURES / "gold_fraud_alerts", 1) == datetime(2024, 1, 1, 0, 0, 25, 852000, tzinfo=UTC)
    # The join: 1704067279000 ms = 00:01:19
    assert batch_watermark(FIXTURES / "gold_order_payments", 1) == datetime(2024, 1, 1, 0, 1, 19, tzinfo=UTC)


def test_batch_watermark_of_an_entry_without_the_field(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    entry = checkpoint / "offsets" / "0"
    text = lines(entry)
    metadata = json.loads(text[1])
    del metadata["batchWatermarkMs"]
    entry.write_text("\n".join([text[0], json.dumps(metadata), *text[2:]]))
    assert batch_watermark(checkpoint, 0) is None


# --- Delta sources ---------------------------------------------------------------------------------------


def test_a_batch_ending_on_a_whole_commit_completed_the_version_before_reservoir_version() -> None:
    # silver's batch 0 read bronze up to reservoirVersion 8, index -1: versions 0-7 done.
    assert completed_source_version(FIXTURES / "silver_events", 0) == 7
    assert consumed_source_version(FIXTURES / "silver_events") == (0, 7)
    assert read_before_version(FIXTURES / "silver_events") == 7
    # The keyed stream read silver up to reservoirVersion 2 in both batches (the second ran no data).
    assert completed_source_version(FIXTURES / "gold_fraud_alerts", 0) == 1
    assert completed_source_version(FIXTURES / "gold_fraud_alerts", 1) == 1
    assert consumed_source_version(FIXTURES / "gold_fraud_alerts") == (1, 1)
    # The join has two sources (silver, read once per side); the first one's position counts.
    assert completed_source_version(FIXTURES / "gold_order_payments", 1) == 1
    assert read_before_version(FIXTURES / "gold_order_payments") == 1


def test_a_batch_that_stopped_inside_a_commit_completed_no_version(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    # Batch 1 stops after file 3 of version 9 (Delta's offset: the position after the last file read).
    source = {"sourceVersion": 1, "reservoirId": BRONZE_TABLE_ID, "reservoirVersion": 9, "index": 3}
    plan(checkpoint, 1, json.dumps({**source, "isStartingVersion": False}, separators=(",", ":")))
    commit(checkpoint, 1)
    assert completed_source_version(checkpoint, 1) is None
    # The newest finished batch on a whole commit is batch 0.
    assert consumed_source_version(checkpoint) == (0, 7)
    # Every commit before 9 is read: batch 1 is inside version 9.
    assert read_before_version(checkpoint) == 8
    # index 0 is inside the commit too (its first file read), not a whole commit.
    set_source(checkpoint, 1, index=0)
    assert completed_source_version(checkpoint, 1) is None


def test_a_batch_inside_the_initial_snapshot_completed_nothing(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    set_source(checkpoint, 0, isStartingVersion=True, index=-1)
    assert completed_source_version(checkpoint, 0) is None
    assert consumed_source_version(checkpoint) is None
    assert read_before_version(checkpoint) == -1
    set_source(checkpoint, 0, isStartingVersion=True, index=41)
    assert completed_source_version(checkpoint, 0) is None
    assert read_before_version(checkpoint) == -1


def test_a_source_without_an_offset_yet(tmp_path: Path) -> None:
    # Spark writes "-" for a source that has no offset yet.
    checkpoint = copy("silver_events", tmp_path)
    entry = checkpoint / "offsets" / "0"
    entry.write_text("\n".join([*lines(entry)[:2], "-"]))
    assert completed_source_version(checkpoint, 0) is None
    assert read_before_version(checkpoint) == -1
    # The join's two sources: the first without an offset (as "-" or an empty line), the second with one.
    join = copy("gold_order_payments", tmp_path)
    entry = join / "offsets" / "1"
    for void in ("-", ""):
        text = lines(entry)
        entry.write_text("\n".join([*text[:2], void, text[3]]))
        assert completed_source_version(join, 1) is None
        assert read_before_version(join) == -1


def test_consumed_source_version_skips_back_over_batches_inside_a_commit_and_uncommitted_ones(
    tmp_path: Path,
) -> None:
    checkpoint = copy("silver_events", tmp_path)
    source = {"sourceVersion": 1, "reservoirId": BRONZE_TABLE_ID, "isStartingVersion": False}
    plan(checkpoint, 1, json.dumps({**source, "reservoirVersion": 10, "index": -1}))  # 8, 9 read whole
    plan(checkpoint, 2, json.dumps({**source, "reservoirVersion": 11, "index": 4}))  # inside 11
    plan(checkpoint, 3, json.dumps({**source, "reservoirVersion": 13, "index": -1}))  # planned, not committed
    for batch_id in (1, 2):
        commit(checkpoint, batch_id)
    assert [completed_source_version(checkpoint, b) for b in range(4)] == [7, 9, None, 12]
    assert consumed_source_version(checkpoint) == (1, 9)
    assert read_before_version(checkpoint) == 10
    commit(checkpoint, 3)
    assert consumed_source_version(checkpoint) == (3, 12)
    assert read_before_version(checkpoint) == 12


def test_starting_version_marker(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    assert starting_version_file(folder, "gold_user_spend_5m") == folder / "gold_user_spend_5m.starting-version"
    assert starting_version(folder, "gold_user_spend_5m") is None
    starting_version_file(folder, "gold_user_spend_5m").write_text("12\n")
    assert starting_version(folder, "gold_user_spend_5m") == 12
    assert starting_version(folder, "silver_events") is None


def test_continue_after_points_the_newest_two_entries_at_another_table(tmp_path: Path) -> None:
    checkpoint = copy("gold_fraud_alerts", tmp_path)
    before = {entry.name: lines(entry) for entry in (checkpoint / "offsets").iterdir()}
    commits_before = {entry.name: entry.read_bytes() for entry in (checkpoint / "commits").iterdir()}
    for name in ("0", "1"):
        (checkpoint / "offsets" / f".{name}.crc").write_bytes(b"stale checksum")
    (checkpoint / "commits" / ".1.crc").write_bytes(b"commit checksum")

    continue_after(checkpoint, "11111111-2222-3333-4444-555555555555", 41)

    expected = (
        '{"sourceVersion":1,"reservoirId":"11111111-2222-3333-4444-555555555555","reservoirVersion":42,'
        '"index":-1,"isStartingVersion":false}'
    )
    for name in ("0", "1"):
        now = lines(checkpoint / "offsets" / name)
        assert now[:2] == before[name][:2]  # version line and batch metadata (watermark, conf) kept
        assert now[2:] == [expected]
        assert not (checkpoint / "offsets" / f".{name}.crc").exists()  # the old checksum would fail
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir()) == ["0", "1"]  # no partial file left
    assert {e.name: e.read_bytes() for e in (checkpoint / "commits").iterdir() if e.name.isdigit()} == commits_before
    assert (checkpoint / "commits" / ".1.crc").exists()
    # Read back: the stream has read the new table up to the swap commit, and kept its watermark.
    assert completed_source_version(checkpoint, 1) == 41
    assert consumed_source_version(checkpoint) == (1, 41)
    assert read_before_version(checkpoint) == 41
    assert batch_watermark(checkpoint, 1) == datetime(2024, 1, 1, 0, 0, 25, 852000, tzinfo=UTC)


def test_continue_after_touches_only_the_newest_committed_entry_and_the_one_before(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    source = {"sourceVersion": 1, "reservoirId": BRONZE_TABLE_ID, "reservoirVersion": 9, "index": 2}
    for batch_id in (1, 2, 3):
        plan(checkpoint, batch_id, json.dumps({**source, "isStartingVersion": batch_id == 1}))
    commit(checkpoint, 1)
    commit(checkpoint, 2)  # batch 3 is planned only
    untouched = {name: (checkpoint / "offsets" / name).read_text() for name in ("0", "3")}

    continue_after(checkpoint, SILVER_TABLE_ID, 5)

    for name in ("1", "2"):
        offset = json.loads(lines(checkpoint / "offsets" / name)[2])
        assert offset == {
            "sourceVersion": 1,
            "reservoirId": SILVER_TABLE_ID,
            "reservoirVersion": 6,
            "index": -1,
            "isStartingVersion": False,
        }
    assert {name: (checkpoint / "offsets" / name).read_text() for name in ("0", "3")} == untouched


def test_continue_after_with_a_single_batch(tmp_path: Path) -> None:
    checkpoint = copy("silver_events", tmp_path)
    continue_after(checkpoint, SILVER_TABLE_ID, 0)
    assert json.loads(lines(checkpoint / "offsets" / "0")[2])["reservoirVersion"] == 1
    assert completed_source_version(checkpoint, 0) == 0


# --- the landing folder's file source ------------------------------------------------------------------


def test_source_log_maps_every_file_to_its_batch() -> None:
    assert source_log(FIXTURES / "bronze_events") == {path: batch for batch, path in enumerate(LOGGED)}
    assert source_log(FIXTURES / "silver_events") == {}  # a Delta source keeps no such log


def test_files_read_and_files_of_batch() -> None:
    bronze = FIXTURES / "bronze_events"
    assert files_read(bronze, -1) == []
    assert files_read(bronze, 0) == [LOGGED[0]]
    assert files_read(bronze, 2) == LOGGED[:3]
    assert files_read(bronze, 6) == files_read(bronze, 99) == LOGGED
    assert files_of_batch(bronze, 4) == [LOGGED[4]]  # orders part0001
    assert files_of_batch(bronze, 7) == []


def compacted_log(tmp_path: Path, keep_old_files: bool) -> Path:
    """The landing log as Spark leaves it after batch 9 of compactInterval 10: ``9.compact`` holds every
    file of batches 0-9 (here 7 real ones, and three more), then plain files for batches 10 and 11."""
    checkpoint = copy("bronze_events", tmp_path)
    log = checkpoint / "sources" / "0"
    entries = [json.loads(lines(log / str(batch))[1]) for batch in range(7)]
    extra = [
        {"path": f"file:///lakehouse/landing/extra-{batch}.jsonl", "timestamp": 1795613030000 + batch, "batchId": batch}
        for batch in (7, 8, 9, 10, 11)
    ]
    # Batch 8 took two files.
    extra.insert(2, {"path": "file:///lakehouse/landing/extra-8b.jsonl", "timestamp": 1795613030008, "batchId": 8})
    compacted = entries + extra[:4]
    (log / "9.compact").write_text("\n".join(["v1", *(json.dumps(e, separators=(",", ":")) for e in compacted)]))
    for entry in extra[4:]:
        (log / str(entry["batchId"])).write_text("v1\n" + json.dumps(entry, separators=(",", ":")))
    (log / ".9.compact.crc").write_bytes(b"\x00\x01checksum")
    if not keep_old_files:  # Spark deletes the files before a compaction later on
        for batch in range(7):
            (log / str(batch)).unlink()
    return checkpoint


@pytest.mark.parametrize("keep_old_files", [True, False])
def test_source_log_reads_a_compacted_log(tmp_path: Path, keep_old_files: bool) -> None:
    checkpoint = compacted_log(tmp_path, keep_old_files)
    taken = source_log(checkpoint)
    assert len(taken) == 7 + 6
    assert taken[LOGGED[3]] == 3
    assert taken["file:///lakehouse/landing/extra-8b.jsonl"] == 8
    assert taken["file:///lakehouse/landing/extra-11.jsonl"] == 11
    assert files_of_batch(checkpoint, 8) == [
        "file:///lakehouse/landing/extra-8.jsonl",
        "file:///lakehouse/landing/extra-8b.jsonl",
    ]
    extra = [f"file:///lakehouse/landing/extra-{n}.jsonl" for n in ("7", "8", "8b", "9")]
    assert files_read(checkpoint, 9) == sorted([*LOGGED, *extra])
    assert files_of_batch(checkpoint, 10) == ["file:///lakehouse/landing/extra-10.jsonl"]


def test_source_log_skips_blank_lines(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events", tmp_path)
    entry = checkpoint / "sources" / "0" / "0"
    entry.write_text(entry.read_text() + "\n\n")
    assert source_log(checkpoint)[LOGGED[0]] == 0


# --- Kafka sources ---------------------------------------------------------------------------------------


def test_consumed_offsets_of_the_newest_finished_batch() -> None:
    kafka = FIXTURES / "bronze_events_kafka"
    # Batch 2 is planned (its end offsets written) but not committed: batch 1's end counts.
    assert uncommitted_batch(kafka) == 2
    assert consumed_offsets(kafka) == {0: 12, 1: 7}


def test_consumed_offsets_of_a_given_batch() -> None:
    kafka = FIXTURES / "bronze_events_kafka"
    assert consumed_offsets(kafka, 0) == {0: 5, 1: 3}
    assert consumed_offsets(kafka, 2) == {0: 20, 1: 9}


def test_consumed_offsets_before_any_finished_batch(tmp_path: Path) -> None:
    assert consumed_offsets(tmp_path / "never-started") == {}
    checkpoint = copy("bronze_events_kafka", tmp_path)
    shutil.rmtree(checkpoint / "commits")
    assert consumed_offsets(checkpoint) == {}
    assert consumed_offsets(checkpoint, 1) == {0: 12, 1: 7}


def test_consumed_offsets_written_by_spark_s_kafka_source_format(tmp_path: Path) -> None:
    checkpoint = copy("bronze_events_kafka", tmp_path)
    plan(checkpoint, 3, '{"events":{"2":0,"0":25,"1":10}}')
    commit(checkpoint, 2)
    commit(checkpoint, 3)
    assert consumed_offsets(checkpoint) == {0: 25, 1: 10, 2: 0}


# --- moving a checkpoint ---------------------------------------------------------------------------------


def test_move_checkpoint_points_the_state_schema_paths_at_the_new_folder(tmp_path: Path) -> None:
    source = copy("gold_fraud_alerts", tmp_path)
    metadata = source / "state" / "0" / "_metadata" / "v2"
    original = lines(metadata / "0")
    (metadata / ".0.crc").write_bytes(b"stale checksum")
    target = tmp_path / "elsewhere" / "gold_fraud_alerts"
    target.parent.mkdir()

    move_checkpoint(source, target)

    assert not source.exists()
    assert query_id(target) == "bcc7e826-b0e1-43e5-aba6-d948756c22cb"
    assert committed_batches(target) == [0, 1]
    moved = lines(target / "state" / "0" / "_metadata" / "v2" / "0")
    assert moved[0] == original[0] == "v2"
    before, after = json.loads(original[1]), json.loads(moved[1])
    assert after["stateStoreInfo"][0]["stateSchemaFilePaths"] == [f"file:{target.resolve()}/{STATE_SCHEMA}"]
    # Nothing else changes.
    after["stateStoreInfo"][0]["stateSchemaFilePaths"] = before["stateStoreInfo"][0]["stateSchemaFilePaths"]
    assert after == before
    assert sorted(p.name for p in (target / "state" / "0" / "_metadata" / "v2").iterdir()) == ["0"]


def test_move_checkpoint_of_a_stream_without_state(tmp_path: Path) -> None:
    source = copy("bronze_events", tmp_path)
    contents = {p.relative_to(source): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    target = tmp_path / "moved"
    move_checkpoint(source, target)
    assert {p.relative_to(target): p.read_bytes() for p in target.rglob("*") if p.is_file()} == contents


def test_move_checkpoint_rewrites_every_store_and_path(tmp_path: Path) -> None:
    source = copy("gold_fraud_alerts", tmp_path)
    entry = source / "state" / "0" / "_metadata" / "v2" / "0"
    text = lines(entry)
    metadata = json.loads(text[1])
    store = metadata["stateStoreInfo"][0]
    metadata["stateStoreInfo"] = [
        {**store, "stateSchemaFilePaths": [*store["stateSchemaFilePaths"], "file:/old/home/x/state/0/_stateSchema/b"]},
        {**store, "storeName": "second", "stateSchemaFilePaths": []},
    ]
    entry.write_text("\n".join([text[0], json.dumps(metadata)]))
    (source / "state" / "0" / "_metadata" / "v2" / "1").write_text("\n".join([text[0], text[1]]))
    target = tmp_path / "new"
    move_checkpoint(source, target)
    root = target.resolve()
    first, second = json.loads(lines(target / "state" / "0" / "_metadata" / "v2" / "0")[1])["stateStoreInfo"]
    assert first["stateSchemaFilePaths"] == [f"file:{root}/{STATE_SCHEMA}", f"file:{root}/state/0/_stateSchema/b"]
    assert second["stateSchemaFilePaths"] == []
    other = json.loads(lines(target / "state" / "0" / "_metadata" / "v2" / "1")[1])
    assert other["stateStoreInfo"][0]["stateSchemaFilePaths"] == [f"file:{root}/{STATE_SCHEMA}"]


# --- backlogs (runtime/progress.py) ----------------------------------------------------------------------


def test_pending_landing_files_are_those_the_source_log_has_not_taken(tmp_path: Path) -> None:
    settings = settings_in(tmp_path / "home")
    checkpoint = copy("bronze_events", tmp_path)
    assert pending_landing_files(settings, checkpoint) == []  # no landing folder yet
    landing = settings.landing_dir
    landing.mkdir(parents=True)
    for name in LANDING_FILES:
        (landing / name).write_text("{}\n")
    assert pending_landing_files(settings, checkpoint) == []
    (landing / "02000000000000000000-new.jsonl").write_text("{}\n")
    os.utime(landing / "02000000000000000000-new.jsonl", (0, 1_700_000_042))
    (landing / ".02000000000000000001-partial.jsonl.tmp").write_text("{")  # being placed
    (landing / "_SUCCESS").write_text("")
    (landing / "folder").mkdir()
    assert pending_landing_files(settings, checkpoint) == [("02000000000000000000-new.jsonl", 1_700_000_042)]


def test_pending_landing_files_reads_spark_s_url_encoded_names(tmp_path: Path) -> None:
    settings = settings_in(tmp_path / "home")
    checkpoint = copy("bronze_events", tmp_path)
    (checkpoint / "sources" / "0" / "7").write_text(
        'v1\n{"path":"file:///lakehouse/landing/with%20space%23and%25.jsonl","timestamp":1795613030000,"batchId":7}'
    )
    settings.landing_dir.mkdir(parents=True)
    (settings.landing_dir / "with space#and%.jsonl").write_text("{}\n")
    (settings.landing_dir / "with%20space%23and%25.jsonl").write_text("{}\n")  # a name that is the encoding
    assert [name for name, _ in pending_landing_files(settings, checkpoint)] == ["with%20space%23and%25.jsonl"]


def delta_commit(log: Path, version: int, *actions: dict, at: float | None = None) -> None:
    text = "\n".join(json.dumps(action, separators=(",", ":")) for action in actions) + "\n"
    path = log / f"{version:020d}.json"
    path.write_text(text)
    if at is not None:
        os.utime(path, (at, at))


def add(name: str, data_change: bool = True) -> dict:
    return {
        "add": {
            "path": f"part-{name}.snappy.parquet",
            "partitionValues": {},
            "size": 1234,
            "modificationTime": 1795613100000,
            "dataChange": data_change,
            "stats": '{"numRecords":10}',
        }
    }


def remove(name: str, data_change: bool) -> dict:
    return {
        "remove": {"path": f"part-{name}.snappy.parquet", "deletionTimestamp": 1795613100000, "dataChange": data_change}
    }


def commit_info(operation: str) -> dict:
    return {"commitInfo": {"timestamp": 1795613100000, "operation": operation, "isBlindAppend": True}}


@pytest.fixture
def bronze_table(tmp_path: Path) -> Path:
    """A tiny bronze table's log: its creation (no data), then two appends."""
    table = tmp_path / "tables" / "bronze" / "events"
    log = table / "_delta_log"
    log.mkdir(parents=True)
    delta_commit(
        log,
        0,
        commit_info("CREATE TABLE"),
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": BRONZE_TABLE_ID, "format": {"provider": "parquet", "options": {}}, "partitionColumns": []}},
        at=1_700_000_000,
    )
    delta_commit(log, 1, commit_info("WRITE"), add("a"), at=1_700_000_001)
    delta_commit(log, 2, commit_info("WRITE"), add("b"), add("c"), at=1_700_000_002)
    return table


def reading(tmp_path: Path, reservoir_version: int, index: int = -1, starting: bool = False) -> Path:
    """A stream's checkpoint whose one finished batch read ``bronze_table`` up to that position."""
    checkpoint = copy("silver_events", tmp_path)
    set_source(checkpoint, 0, reservoirVersion=reservoir_version, index=index, isStartingVersion=starting)
    return checkpoint


def test_pending_source_commits_are_the_data_commits_not_read_yet(tmp_path: Path, bronze_table: Path) -> None:
    one, two = f"{1:020d}.json", f"{2:020d}.json"
    assert pending_source_commits(bronze_table, tmp_path / "never-started") == [
        (one, 1_700_000_001),
        (two, 1_700_000_002),
    ]
    assert pending_source_commits(bronze_table, reading(tmp_path / "a", 1)) == [
        (one, 1_700_000_001),
        (two, 1_700_000_002),
    ]
    assert pending_source_commits(bronze_table, reading(tmp_path / "b", 2)) == [(two, 1_700_000_002)]
    assert pending_source_commits(bronze_table, reading(tmp_path / "c", 3)) == []
    # Inside version 2: 0-1 are read, 2 is not finished.
    assert pending_source_commits(bronze_table, reading(tmp_path / "d", 2, index=0)) == [(two, 1_700_000_002)]
    # Inside the initial snapshot: nothing counts as read.
    assert len(pending_source_commits(bronze_table, reading(tmp_path / "e", 2, index=5, starting=True))) == 2


def test_commits_without_new_data_are_no_backlog(tmp_path: Path, bronze_table: Path) -> None:
    log = bronze_table / "_delta_log"
    # OPTIMIZE: files rewritten, no data changed.
    delta_commit(log, 3, commit_info("OPTIMIZE"), remove("b", False), remove("c", False), add("bc", data_change=False))
    delta_commit(log, 4, commit_info("DELETE"), remove("a", True))  # a deletion adds nothing to read
    delta_commit(log, 5, commit_info("WRITE"), add("d"), at=1_700_000_005)
    assert pending_source_commits(bronze_table, reading(tmp_path, 3)) == [(f"{5:020d}.json", 1_700_000_005)]


def test_pending_source_commits_after_delta_s_log_clean_up(tmp_path: Path, bronze_table: Path) -> None:
    log = bronze_table / "_delta_log"
    for version in range(3, 11):
        delta_commit(log, version, commit_info("WRITE"), add(f"v{version}"))
    # Delta checkpointed version 10 and cleaned up the commits before it; 11 came after.
    (log / "_last_checkpoint").write_text('{"version":10,"size":12}')
    (log / f"{10:020d}.checkpoint.parquet").write_bytes(b"PAR1")
    for version in range(10):
        (log / f"{version:020d}.json").unlink()
    delta_commit(log, 11, commit_info("WRITE"), add("v11"), at=1_700_000_011)
    got = pending_source_commits(bronze_table, reading(tmp_path, 2))
    assert [name for name, _ in got] == [f"{10:020d}.json", f"{11:020d}.json"]


def test_no_delta_log_no_backlog(tmp_path: Path) -> None:
    assert pending_source_commits(tmp_path / "no-table", tmp_path / "never-started") == []


def test_conservation_counts_a_cut_off_source_batch_in_flight(tmp_path: Path) -> None:
    """A Kafka batch a crash cut off (planned, not committed) while the landing stream's are all committed:
    its (batch, planned time) is in flight, whose bronze rows wait for its re-run, not a difference."""
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    assert _in_flight(settings) == set()
    copy("bronze_events", tmp_path)
    kafka = copy("bronze_events_kafka", tmp_path)
    planned = json.loads((kafka / "offsets" / "2").read_text().splitlines()[1])["batchTimestampMs"]
    assert _in_flight(settings) == {(2, int(planned))}
