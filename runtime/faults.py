"""Faults the lakehouse recognises, each told in one line that ends with the command that recovers.

Checked before any stream starts (:func:`check_home`), from files alone, so that no stream runs on a
damaged or lost position:

- A stream whose checkpoint is gone (or holds no finished batch) but which has run in this home would
  read its source again from the start under a new query id, and the exactly-once tags of its writes
  (``lakehouse:<stream>:<query id>``) would not match the old ones: every line would be written twice.
- A checkpoint file that is truncated or missing (an offset entry, its file-source log, its metadata,
  the ledger of carried batch numbers) stops Spark with a page of stack trace, or, worse, restarts the
  stream's numbering.
- A Delta log whose versions have a gap, or whose newest commit does not parse, stops every reader.

Any other failure is read by :func:`explain`: a full disk, a read-only or unwritable home and the damaged
files Spark or delta-rs met while running get their one line; the rest stays the error's own text.
"""

import errno
import json
import re
import sys
from collections.abc import Callable, Iterable

from deltalake import QueryBuilder

from runtime import checkpoints
from runtime.checkpoints import KAFKA_STAGE, LANDING_STAGE, SILVER_STAGE, checkpoint_dir, windows_stage_name
from warehouse.catalog import OPS_STREAM_PROGRESS, SILVER_EVENTS, Table
from warehouse.delta import latest_version
from warehouse.settings import Settings
from warehouse.storage import Location, names, open_delta

#: The command that rebuilds what a stream wrote from what it read (its position lost or damaged).
_RECOVERY = {
    LANDING_STAGE: "lakehouse replay --source landing",
    KAFKA_STAGE: "lakehouse replay --source kafka",
}


class Fault(RuntimeError):
    """A fault the lakehouse recognises; its message is one line that names the recovery."""


def recovery(stream: str) -> str:
    """The command that rebuilds a stream's output on a new checkpoint: the source streams from their
    source (the landing zone, the topic), every other stream from bronze."""
    return _RECOVERY.get(stream, "lakehouse replay")


def check_home(
    settings: Settings,
    streams: Iterable[str],
    tables: Iterable[Table],
    skip: Iterable[str] = (),
    reads: dict[str, list[str]] | None = None,
) -> None:
    """Raise :class:`Fault` for the first damaged or lost checkpoint among ``streams`` (except ``skip``,
    which the caller rebuilds) and the first damaged Delta log among ``tables``; ``reads`` (table name →
    the streams reading it as a Delta stream) lets a reader's position tell of commits gone from a log."""
    skipped = set(skip)
    wanted = [stream for stream in streams if stream not in skipped]
    for stream in wanted:
        problem = damaged_checkpoint(checkpoint_dir(settings, stream))
        if problem:
            raise Fault(
                f"the checkpoint of the {stream} stream is damaged ({problem}); it cannot say what was read, "
                f"so the stream does not start. Recover with `{recovery(stream)}`"
            )
    for stream in lost_checkpoints(settings, wanted):
        raise Fault(
            f"the checkpoint of the {stream} stream is gone but the stream has run in this home; starting "
            f"over would read its source again and write every line twice, so it does not start. Recover "
            f"with `{recovery(stream)}`"
        )
    for table in tables:
        readers = [stream for stream in (reads or {}).get(table.name, []) if stream not in skipped]
        problem = damaged_log(table.path(settings)) or _read_past_newest(settings, table, readers)
        if problem:
            raise Fault(
                f"the Delta log of {table.name} is damaged ({problem}); restore that file from a backup, or "
                f"move the table's folder aside and run {_table_recovery(table)} to rebuild it"
            )


def _read_past_newest(settings: Settings, table: Table, readers: list[str]) -> str | None:
    """A stream that has read a version of ``table`` its log no longer has: its newest commits were deleted.
    Spark writes a checksum beside each commit, which :func:`damaged_log` misses when its commit is gone;
    delta-rs writes none, so a commit of its gone from the end of the log leaves only the readers' word."""
    log = table.path(settings) / "_delta_log"
    versions = [int(name[:20]) for name in names(log) if name.endswith(".json") and name[:20].isdigit()]
    ends = f"ends at {max(versions)}" if versions else "has no commit"
    for stream in readers:
        needed = checkpoints.newest_source_version(checkpoint_dir(settings, stream))
        if needed is not None and needed > max(versions, default=-1):
            return f"the {stream} stream has read version {needed}, but the log {ends}"
    return None


def _table_recovery(table: Table) -> str:
    if table.layer == "bronze":
        return "`lakehouse replay --source landing` (and `--source kafka` for the topic's lines)"
    return "`lakehouse replay`"


# Checkpoints -----------------------------------------------------------------------------------------

#: Spark's Kafka source starts its initial-offsets file with a NUL byte (an old format's mark).
_VERSION_LINE = re.compile(r"^\x00?v\d+$")


def damaged_checkpoint(checkpoint: Location) -> str | None:
    """What is wrong with a stream's checkpoint files, if anything: its metadata, its newest offset and
    commit entries, its sources' newest log entries, its carried ledger. None when sound or absent."""
    offsets, commits = _numbered(checkpoint / "offsets"), _numbered(checkpoint / "commits")
    if (offsets or commits) and "metadata" not in names(checkpoint):
        return "metadata is missing"
    if "metadata" in names(checkpoint):
        problem = _json_problem(checkpoint / "metadata", lambda text: "id" in json.loads(text))
        if problem:
            return f"metadata {problem}"
    if commits and (not offsets or commits[-1] > offsets[-1]):
        return f"offsets/{commits[-1]} is missing"
    for folder, numbers in (("offsets", offsets), ("commits", commits)):
        if numbers:
            problem = _log_problem(checkpoint / folder / str(numbers[-1]))
            if problem:
                return f"{folder}/{numbers[-1]} {problem}"
    for source in names_of_folders(checkpoint / "sources"):
        log = checkpoint / "sources" / source
        newest = max(_numbered(log, compact=True), default=None)
        if newest is not None:
            name = str(newest) if str(newest) in names(log) else f"{newest}.compact"
            problem = _log_problem(log / name)
            if problem:
                return f"sources/{source}/{name} {problem}"
    ledger = checkpoint / "carried"
    ledger_names = names(ledger)
    if ledger_names and "writer" not in ledger_names:
        return "carried/writer is missing"
    for name in ledger_names:
        text = (ledger / name).read_text().strip()
        if name != "writer" and not name.startswith(".") and not text.isdigit():
            return f"carried/{name} is not a batch number"
        if name == "writer" and not text:
            return "carried/writer is empty"
    return None


def lost_checkpoints(settings: Settings, streams: list[str]) -> list[str]:
    """The streams among ``streams`` that have no finished batch although they ran in this home: a stream
    of its own has progress rows (``ops.stream_progress``); a carried stage (silver, the windows) has a
    table with rows while the source stream that carries it has finished batches."""
    windows = windows_stage_name(settings)
    without = [stream for stream in streams if not _has_position(settings, stream)]
    own = [stream for stream in without if stream not in (SILVER_STAGE, windows)]
    lost = [stream for stream in own if stream in _streams_with_progress(settings)] if own else []
    sources = [s for s in (LANDING_STAGE, KAFKA_STAGE) if checkpoints.committed_batches(checkpoint_dir(settings, s))]
    if sources and SILVER_STAGE in without and latest_version(SILVER_EVENTS.path(settings) / "_delta_log") > 0:
        lost.append(SILVER_STAGE)
    return lost


def _has_position(settings: Settings, stream: str) -> bool:
    """A finished batch, a carried ledger, or the starting version a replay left for the stream."""
    checkpoint = checkpoint_dir(settings, stream)
    if checkpoints.committed_batches(checkpoint) or names(checkpoint / "carried"):
        return True
    return checkpoints.starting_version_file(settings.checkpoints_dir, stream).name in names(settings.checkpoints_dir)


def _streams_with_progress(settings: Settings) -> set[str]:
    path = OPS_STREAM_PROGRESS.path(settings)
    if latest_version(path / "_delta_log") < 0:
        return set()
    # DataFusion, not pyarrow's scanner: its read-ahead threads aborted a refusing command at exit (134).
    query = QueryBuilder().register("progress", open_delta(path))
    return set(query.execute("SELECT DISTINCT stream FROM progress").read_all().column(0).to_pylist())


def _numbered(folder: Location, compact: bool = False) -> list[int]:
    found = []
    for name in names(folder):
        stem = name.removesuffix(".compact") if compact else name
        if stem.isdigit():
            found.append(int(stem))
    return sorted(found)


def names_of_folders(folder: Location) -> list[str]:
    """The sub-folders of a checkpoint folder (its sources' logs: ``0``, ``1``)."""
    try:
        return sorted(child.name for child in folder.iterdir() if child.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _log_problem(entry: Location) -> str | None:
    """Spark's metadata-log entry: a version line (``v1``), then one JSON value per line (``-`` or an
    empty line for a source without an offset)."""
    lines = entry.read_text(errors="replace").splitlines()
    if not lines:
        return "is empty"
    if not _VERSION_LINE.match(lines[0]):
        return "has no version line"
    if len(lines) < 2:
        return "is truncated"
    for line in lines[1:]:
        if line.strip() in {"", "-"}:
            continue
        try:
            json.loads(line)
        except ValueError:
            return "is truncated or corrupt"
    return None


def _json_problem(entry: Location, valid: Callable[[str], bool]) -> str | None:
    try:
        return None if valid(entry.read_text()) else "lacks its fields"
    except ValueError:
        return "is truncated or corrupt"


# Delta logs ------------------------------------------------------------------------------------------


def damaged_log(table: Location) -> str | None:
    """What is wrong with a table's ``_delta_log``: a version missing after its newest checkpoint, a
    checksum or checkpoint of a version whose commit is gone, or a newest commit that does not parse."""
    log = table / "_delta_log"
    listed = names(log)
    commits = sorted(int(name[:20]) for name in listed if name.endswith(".json") and name[:20].isdigit())
    if not commits:
        return None
    checkpointed = [int(n[:20]) for n in listed if ".checkpoint" in n and n[:20].isdigit()]
    start = max([v for v in checkpointed if v <= commits[-1]], default=commits[0])
    expected = set(range(start + 1 if checkpointed else commits[0], commits[-1] + 1))
    gap = sorted(expected - set(commits))
    if gap:
        return f"{gap[0]:020d}.json is missing"
    beyond = [n for n in listed if n[:20].isdigit() and int(n[:20]) > commits[-1] and not n.endswith(".tmp")]
    if beyond:
        return f"{commits[-1] + 1:020d}.json is missing ({beyond[0]} is there)"
    newest = log / f"{commits[-1]:020d}.json"
    for line in newest.read_text(errors="replace").splitlines():
        try:
            json.loads(line)
        except ValueError:
            return f"{newest.name} is truncated or corrupt"
    return None


# Failures while running ------------------------------------------------------------------------------


def explain(error: BaseException) -> str:
    """One line for a failure: the faults above and the file-system faults in words with their recovery,
    anything else as its own text."""
    if isinstance(error, Fault):
        return str(error)
    text = " ".join(str(error).split())
    raised = re.search(r"Fault: (.+?`lakehouse [^`]+`)", text)  # raised in a batch, wrapped by Spark
    if raised:
        return raised.group(1)
    went_back = re.search(r"Partition (\S+)'s offset was changed from (\d+) to (\d+)", text)
    if went_back:
        return (
            f"the Kafka partition {went_back.group(1)} went back from offset {went_back.group(2)} to "
            f"{went_back.group(3)}: its topic was deleted and created again, and the stream stopped before "
            "reading it. Bronze keeps the old topic's messages; read the new topic from its start with "
            "`lakehouse replay --source kafka`"
        )
    os_error = next((e for e in _chain(error) if isinstance(e, OSError) and e.errno), None)
    code = os_error.errno if os_error else None
    where = f" ({os_error.filename})" if os_error and os_error.filename else ""
    if code == errno.ENOSPC or "No space left on device" in text:
        return (
            f"the disk is full{where}: nothing of the batch in flight was committed, and the stream resumes "
            "from its last finished batch. Free space (`lakehouse maintain` VACUUMs old files) and run the "
            "same command again"
        )
    if code == errno.EROFS or "Read-only file system" in text:
        return (
            f"the home is on a read-only file system{where}: remount it writable (or set LAKEHOUSE_HOME) and run again"
        )
    if code == errno.EACCES or "Permission denied" in text:
        return f"permission denied{where}: LAKEHOUSE_HOME must be writable by this user; fix its mode, run again"
    if "Incomplete log file" in text or "Failed to read log file" in text:
        found = re.search(r"log file (\S+?)\.? ", text)
        return (
            f"a checkpoint file is damaged ({found.group(1) if found else 'see the log'}); "
            "`lakehouse status` names the stream, and `lakehouse replay` (--source landing or kafka for a "
            "source stream) rebuilds it"
        )
    if "DELTA_VERSIONS_NOT_CONTIGUOUS" in text or ("Json error" in text and "Kernel error" in text):
        return f"a Delta log is damaged ({text[:160]}); run the command again to have it named, with its recovery"
    return text or type(error).__name__


#: Failures of a query's start that another start does not meet: Spark waits 10 s, not configurable, for
#: a Python worker (transformWithState's) to connect back (SPARK-45245), and on two busy cores it can take
#: longer. Nothing of the batch was written; its re-run is exactly once like any other.
TRANSIENT = ("Python worker failed to connect back",)
#: How long, in pauses, a start failing for a ``TRANSIENT`` reason is tried again before the run stops: a
#: soak saw three tries in 30 s miss while tests ran beside it (decision 59).
RETRY_BUDGET_SECONDS = 300


def retry_slow_start(drain: Callable[[], None], name: str, pause: Callable[[float], object]) -> None:
    """``drain()``, started again while its query fails to start for a ``TRANSIENT`` reason, each time told in
    one line, after pauses of 5, 10, 20, 40, then 60 s, until the pauses reach ``RETRY_BUDGET_SECONDS``; any
    other failure is raised at once."""
    waited, seconds = 0, 5
    while True:
        try:
            drain()
            return
        except Exception as error:
            if waited >= RETRY_BUDGET_SECONDS or not any(words in str(error) for words in TRANSIENT):
                raise
            notice(f"the {name} stream failed to start ({str(error).splitlines()[0][:120]}); trying again")
            pause(seconds)
            waited, seconds = waited + seconds, min(60, 2 * seconds)


def notice(line: str) -> None:
    """A fault the streams go on past (a landing file removed before it was read): one line on stderr,
    which the terminal, the service's log and Dagster's run log all show."""
    sys.stderr.write(f"lakehouse: {line}\n")
    sys.stderr.flush()


def _chain(error: BaseException) -> Iterable[BaseException]:
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__
