"""Every read and write of Spark's checkpoint files, in one place.

A Structured Streaming checkpoint (``LAKEHOUSE_HOME/checkpoints/<stream>``) holds, per micro-batch, an
offset entry written *before* the batch runs (``offsets/<batch>``: a version line, the batch's metadata
with its event-time watermark, then one line per source with the position the batch reads up to) and a
commit entry written *after* it (``commits/<batch>``). A file source keeps its own log of the files it
took (``sources/0``); a stateful operator keeps its state and its metadata under ``state/``. Anything
the lakehouse needs to know of a stream's progress (which batches finished, where in its source it
stands, which files or offsets it took, a batch re-run after a crash) is read here, from those files
alone, without a Spark session. If Spark changes its format, this module is the one to change.
"""

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from warehouse.catalog import BRONZE_EVENTS, tumbling_table
from warehouse.delta import commit_of
from warehouse.settings import Settings
from warehouse.storage import Location, is_remote, move_tree, names, write_atomically

#: The streams' names: each is its checkpoint folder's name (and its lock's and its progress rows'
#: ``stream``). The windows stream's name follows its table (``gold_user_spend_5m`` for 5-minute
#: windows): :func:`windows_stage_name`.
LANDING_STAGE = "bronze_events"
KAFKA_STAGE = "bronze_events_kafka"
SILVER_STAGE = "silver_events"
ORDER_PAYMENTS_STAGE = "gold_order_payments"
FRAUD_STAGE = "gold_fraud_alerts"
UNIQUE_URLS_STAGE = "gold_unique_urls"
RECONCILE_STAGE = "reconcile_late_events"


def windows_stage_name(settings: Settings) -> str:
    return tumbling_table(settings).name.replace(".", "_")


def derived_stage_name(settings: Settings) -> str:
    """The stream that keeps hopping, session and global windows in line with the tumbling table."""
    return f"{windows_stage_name(settings)}_derived"


def checkpoint_dir(settings: Settings, stream: object) -> Path:
    """A stream's checkpoint folder; ``stream`` is its name or anything with a ``name`` (a stage)."""
    return settings.checkpoints_dir / (stream if isinstance(stream, str) else stream.name)


#: Where the Delta source's position says "every commit before ``reservoirVersion`` is read": no file of
#: that version is read yet.
_WHOLE_COMMITS = -1


def _entry(checkpoint: Path, batch_id: int) -> tuple[dict[str, Any], list[Any]]:
    """(metadata, source offsets) of a batch's offset entry; a source without an offset yet is None."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    sources = [None if line.strip() in {"", "-"} else json.loads(line) for line in lines[2:]]
    return json.loads(lines[1]), sources


def query_id(checkpoint: Path) -> str:
    """The query's id: fixed for the life of a checkpoint, new when it is reset (a replay)."""
    return json.loads((checkpoint / "metadata").read_text())["id"]


def writer_id(stream: str, checkpoint: Path) -> str:
    """The Delta transaction app id a stream writes under (with its batch id as the version): stable for the
    life of its checkpoint, new when a replay resets it."""
    return f"lakehouse:{stream}:{query_id(checkpoint)}"


def _numbered(folder: Path) -> list[int]:
    return sorted(int(name) for name in names(folder) if name.isdigit())


def committed_batches(checkpoint: Path) -> list[int]:
    """The micro-batches a query has finished (its commit log), oldest first."""
    return _numbered(checkpoint / "commits")


def is_committed(checkpoint: Path, batch_id: int) -> bool:
    return (checkpoint / "commits" / str(batch_id)).exists()


def committed_at(checkpoint: Path, batch_id: int) -> float:
    """When (epoch seconds, processing time) the query recorded ``batch_id`` as finished."""
    return (checkpoint / "commits" / str(batch_id)).stat().st_mtime


def uncommitted_batch(checkpoint: Path) -> int | None:
    """The batch a crash left planned but not committed (its offsets are logged, its commit is not):
    the next start re-runs it from those offsets. None when every planned batch is committed."""
    planned = _numbered(checkpoint / "offsets")
    if planned and not is_committed(checkpoint, planned[-1]):
        return planned[-1]
    return None


def record_finished(checkpoint: Path, batch_id: int) -> None:
    """Write ``batch_id``'s commit entry as Spark writes it once the batch is done: the next start goes on
    after the batch instead of re-running it. Only for a stateless stream (the source streams) whose batch
    left all its effects in place; the entry repeats the previous one's (no watermark moves)."""
    previous = checkpoint / "commits" / str(batch_id - 1)
    content = previous.read_text() if previous.exists() else 'v1\n{"nextBatchWatermarkMs":0}'
    write_atomically(checkpoint / "commits" / str(batch_id), content)


def batch_earliest_start(checkpoint: Path, batch_id: int) -> float:
    """An instant (epoch seconds) before which no attempt of ``batch_id`` can have started: when the
    checkpoint recorded the previous batch as finished, or, for its first batch, when it was created.
    Neither file is ever rewritten, so a batch re-run after a crash gets the same instant as its first try."""
    previous = checkpoint / "commits" / str(batch_id - 1)
    anchor = previous if batch_id > 0 and previous.exists() else checkpoint / "metadata"
    return anchor.stat().st_mtime


def batch_watermark(checkpoint: Path, batch_id: int) -> datetime | None:
    """The event-time watermark Spark ran ``batch_id`` with (its stateful operators evict by it); None
    before any watermark."""
    millis = int(_entry(checkpoint, batch_id)[0].get("batchWatermarkMs", 0))
    return datetime.fromtimestamp(millis / 1000, UTC) if millis > 0 else None


# Delta sources ---------------------------------------------------------------------------------------


def completed_source_version(checkpoint: Path, batch_id: int) -> int | None:
    """The newest Delta source version that batches up to ``batch_id`` have read completely.

    Delta's offset is the position after the last file read; ``index == -1`` means every commit before
    ``reservoirVersion`` is done. None when the batch stopped inside a commit or inside the initial
    snapshot.
    """
    offset = _entry(checkpoint, batch_id)[1][0]
    if offset is None or offset.get("isStartingVersion") or int(offset.get("index", -1)) != _WHOLE_COMMITS:
        return None
    return int(offset["reservoirVersion"]) - 1


def consumed_source_version(checkpoint: Path) -> tuple[int, int] | None:
    """(batch, version) of the newest finished batch that ended on a whole commit of its Delta source:
    every source commit up to ``version`` is read and written by batches up to ``batch``. None when no
    finished batch has read one whole commit yet."""
    for batch_id in reversed(committed_batches(checkpoint)):
        version = completed_source_version(checkpoint, batch_id)
        if version is not None:
            return batch_id, version
    return None


def read_before_version(checkpoint: Path) -> int:
    """Every Delta source commit up to the returned version has been read by a finished batch (-1: none;
    a batch still inside the initial snapshot counts as none)."""
    finished = committed_batches(checkpoint)
    if not finished:
        return -1
    offset = _entry(checkpoint, finished[-1])[1][0]
    if offset is None or offset.get("isStartingVersion"):
        return -1
    return int(offset["reservoirVersion"]) - 1


def newest_source_version(checkpoint: Path) -> int | None:
    """The newest Delta source version the stream's finished batches have read from (a file of it, or all
    of it); None when no finished batch has read one."""
    finished = committed_batches(checkpoint)
    if not finished:
        return None
    offset = _entry(checkpoint, finished[-1])[1][0]
    if offset is None or "reservoirVersion" not in offset:
        return None
    version = int(offset["reservoirVersion"])
    whole = not offset.get("isStartingVersion") and int(offset.get("index", -1)) == _WHOLE_COMMITS
    return version - 1 if whole else version


def starting_version_file(checkpoints_dir: Path, stream: str) -> Path:
    """The lakehouse's own marker beside a reset checkpoint: the Delta source version it starts from."""
    return checkpoints_dir / f"{stream}.starting-version"


def starting_version(checkpoints_dir: Path, stream: str) -> int | None:
    """Where a reset checkpoint starts reading its Delta source (set by a replay); Spark ignores it
    once the checkpoint has offsets of its own."""
    marker = starting_version_file(checkpoints_dir, stream)
    return int(marker.read_text().strip()) if marker.exists() else None


def continue_after(checkpoint: Path, table_id: str, version: int) -> None:
    """Point a finished checkpoint of a stream reading a Delta table at another table (``table_id``), right
    after its ``version``: the stream's state (Spark's state store) and watermark stay as they are.

    A keyed stream's state is what it has seen of silver; the staging stream saw all of the rebuilt silver,
    which the swap commit (``version``) put in place of the live one's rows. Only the source positions
    change, in the newest offset entry and the one before it: on restart Spark asks the source for the
    newest committed batch again (from the entry before to the newest, now an empty range), then goes on
    from the newest.
    """
    newest = committed_batches(checkpoint)[-1]
    for batch_id in (newest - 1, newest):
        entry = checkpoint / "offsets" / str(batch_id)
        if not entry.exists():
            continue
        lines = entry.read_text().splitlines()
        offset = json.loads(lines[2])
        offset.update(reservoirId=table_id, reservoirVersion=version + 1, index=_WHOLE_COMMITS, isStartingVersion=False)
        lines[2] = json.dumps(offset, separators=(",", ":"))
        _rewrite(entry, lines)


# The landing folder's file source --------------------------------------------------------------------


def source_log(checkpoint: Path) -> dict[str, int]:
    """Every file the landing stream's file source has taken, with its batch: the source's own log
    (``sources/0``: a JSON line per file, compacted every few batches into ``N.compact``)."""
    log = checkpoint / "sources" / "0"
    taken: dict[str, int] = {}
    for name in names(log):
        if name.startswith("."):
            continue
        entry = log / name
        for line in entry.read_text(encoding="utf-8").splitlines()[1:]:
            if line.strip():
                record = json.loads(line)
                taken[record["path"]] = int(record["batchId"])
    return taken


def files_read(checkpoint: Path, last_batch: int) -> list[str]:
    """Paths (as Spark's log names them, ``file:///…``) of the files the landing stream took in batches
    up to ``last_batch``."""
    return sorted(path for path, batch_id in source_log(checkpoint).items() if batch_id <= last_batch)


def files_of_batch(checkpoint: Path, batch_id: int) -> list[str]:
    """Paths of the files the landing stream took in ``batch_id``."""
    return sorted(path for path, taken in source_log(checkpoint).items() if taken == batch_id)


# Kafka sources ---------------------------------------------------------------------------------------


def consumed_offsets(checkpoint: Path, batch_id: int | None = None) -> dict[int, int]:
    """partition → next offset to read after micro-batch ``batch_id`` (default: the newest the stream
    finished): Spark writes a batch's end offsets before running it, and its commit after. Empty when no
    batch has finished."""
    if not (checkpoint / "offsets").is_dir():
        return {}
    if batch_id is None:
        finished = committed_batches(checkpoint)
        if not finished:
            return {}
        batch_id = finished[-1]
    offsets = _entry(checkpoint, batch_id)[1][0] or {}
    return {int(partition): int(offset) for topic in offsets.values() for partition, offset in topic.items()}


# Moving a checkpoint ---------------------------------------------------------------------------------


def move_checkpoint(source: Path, target: Path) -> None:
    """Move a stream's checkpoint folder, state store included.

    A stateful operator's metadata (``state/<op>/_metadata/v2/<batch>``, written by transformWithState)
    names its state schema files by absolute path; left as they are, the moved query fails at its next start
    ("File …/_stateSchema/… does not exist") once the old folder is gone. They are pointed at the new place.
    """
    move_tree(source, target)
    folder = str(target) if is_remote(target) else f"file:{target.resolve()}"
    for entry in target.glob("state/*/_metadata/v2/*"):
        if entry.name.startswith(".") or not entry.is_file():
            continue
        lines = entry.read_text().splitlines()
        metadata = json.loads(lines[1])
        for store in metadata.get("stateStoreInfo", []):
            store["stateSchemaFilePaths"] = [
                f"{folder}{path[path.rindex('/state/') :]}" for path in store.get("stateSchemaFilePaths", [])
            ]
        lines[1] = json.dumps(metadata, separators=(",", ":"))
        _rewrite(entry, lines)


def _rewrite(entry: Location, lines: list[str]) -> None:
    """Replace a checkpoint file's content atomically."""
    # Hadoop's local file system checks a file against its ``.<name>.crc`` when one exists; without it,
    # the file is read unchecked. The old checksum would fail the new content.
    if not is_remote(entry):
        entry.with_name(f".{entry.name}.crc").unlink(missing_ok=True)
    write_atomically(entry, "\n".join(lines))


# The batches the source stream carries through silver and gold ---------------------------------------

#: Entries of the ledger kept per carried stage (the newest ones; older batches are long committed).
_LEDGER_KEEP = 200


def batch_timestamp(checkpoint: Path, batch_id: int) -> datetime:
    """The processing time Spark planned ``batch_id`` at (its offset entry): the same on a re-run."""
    millis = int(_entry(checkpoint, batch_id)[0]["batchTimestampMs"])
    return datetime.fromtimestamp(millis / 1000, UTC)


def _ledger(stage_checkpoint: Path) -> Path:
    return stage_checkpoint / "carried"


def carried_writer(stage_checkpoint: Path) -> str:
    """The writer id the carried stage's writes use: the old stream's query id when it ran as a stream of
    its own (so its batches and watermark rows go on as one writer), else one made once and kept."""
    ledger = _ledger(stage_checkpoint)
    kept = ledger / "writer"
    if kept.exists():
        return kept.read_text().strip()
    writer = query_id(stage_checkpoint) if (stage_checkpoint / "metadata").exists() else uuid.uuid4().hex
    ledger.mkdir(parents=True, exist_ok=True)
    write_atomically(kept, writer)
    return writer


def carried_batch(stage_checkpoint: Path, source: str, batch_id: int) -> int:
    """The stage's own batch number for the source stream's ``batch_id``: assigned once (a re-run after a
    crash gets the same) and increasing, continuing the old stream's numbering when it had one."""
    ledger = _ledger(stage_checkpoint)
    entry = ledger / f"{source}.{batch_id}"
    if entry.exists():
        return int(entry.read_text())
    ledger.mkdir(parents=True, exist_ok=True)
    numbered = [ledger / name for name in names(ledger) if name[:1] != "." and name != "writer"]
    assigned = [int(e.read_text()) for e in numbered]
    legacy = committed_batches(stage_checkpoint)
    number = max([*assigned, legacy[-1] if legacy else -1]) + 1
    write_atomically(entry, str(number))
    for _, old in sorted(zip(assigned, numbered, strict=True), key=lambda pair: pair[0])[: -_LEDGER_KEEP + 1]:
        old.unlink()
    return number


def is_carried(stage_checkpoint: Path) -> bool:
    """Whether the source stream carries this stage (its ledger exists): its own old stream must not run."""
    return _ledger(stage_checkpoint).is_dir()


def carried_batches(stage_checkpoint: Path) -> list[tuple[str, int, int]]:
    """(source stream, its batch, the stage's batch) of the ledger, by the stage's batch."""
    ledger = _ledger(stage_checkpoint)
    found = []
    for name in names(ledger):
        source, _, batch = name.rpartition(".")
        if source and batch.isdigit():
            found.append((source, int(batch), int((ledger / name).read_text())))
    return sorted(found, key=lambda e: e[2])


def silver_consumption(settings: Settings) -> tuple[int, int] | None:
    """(silver batch, bronze version) such that every bronze commit up to the version is classified into
    silver by batches up to the silver batch: from the newest source batch that carried its lines through
    silver and finished; for a home whose silver stream has not been carried yet, from that stream's own
    checkpoint. None when nothing has been classified yet."""
    silver = checkpoint_dir(settings, SILVER_STAGE)
    for source, source_batch, silver_batch in reversed(carried_batches(silver)):
        source_checkpoint = checkpoint_dir(settings, source)
        if not is_committed(source_checkpoint, source_batch):
            continue
        writer = writer_id(source, source_checkpoint)
        version = commit_of(BRONZE_EVENTS.path(settings), writer, source_batch)
        if version is not None:
            return silver_batch, version
    return consumed_source_version(silver)
