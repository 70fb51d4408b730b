"""Sources: the landing folder of JSON Lines files, read as a stream of raw lines with their position."""

import fcntl
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession

from runtime.checkpoints import files_of_batch
from runtime.faults import notice
from transforms.bronze import file_columns, split_lines
from warehouse.settings import Settings
from warehouse.storage import Location, ensure_folder, is_remote

#: The binaryFile source's fixed columns (a stream must be given its schema).
_BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def read_landing(spark: SparkSession, settings: Settings) -> DataFrame:
    """Stream every file that appears in the landing folder, one row per line, in arrival order.

    Time semantics: none yet. A file's arrival is processing time (its modification time when it was
    placed atomically); Spark's file source takes new files oldest first, ``maxFilesPerTrigger`` at a time,
    and remembers in its checkpoint which files it has read. Names starting with ``.`` or ``_`` (partial
    files still being written) are ignored by Spark.
    """
    ensure_folder(settings.landing_dir)
    # Files are read as bytes (one row per file keeps every line's position exact): Spark's text source
    # would replace bytes that are not UTF-8 before anything could keep them.
    files = (
        spark.readStream.format("binaryFile")
        .schema(_BINARY_FILE_SCHEMA)
        .option("maxFilesPerTrigger", settings.streams.max_files_per_trigger)
        .load(str(settings.landing_dir))
    )
    return split_lines(file_columns(files))


def batch_has_glob_names(checkpoint: Path, batch_id: int) -> bool:
    """Whether a batch took a file whose name looks like a glob (``[``, ``{``, ``*``, ``?``).

    Spark 4.1 reads every *other* file of such a batch more than once (SPARK-58518: with globbing
    disabled, each glob-looking path adds the whole path list again), so the batch must be deduplicated.
    """
    names = (unquote(path.rsplit("/", 1)[-1]) for path in files_of_batch(checkpoint, batch_id))
    return any(_GLOB_CHARACTERS.search(name) for name in names)


_GLOB_CHARACTERS = re.compile(r"[\[\]{}*?\\]")


def report_files_gone(
    settings: Settings, checkpoint: Path, batch_id: int, lines: DataFrame, figures: dict[str, float]
) -> dict[str, float]:
    """Tell of the files the stream listed for ``batch_id`` but that were removed before Spark read them.

    Spark's file source drops a listed file it can no longer find and says nothing; its lines never reach
    bronze, and the file stays recorded as taken. Each such file is one line on stderr (with the way to
    receive its lines: ingest a copy, which is a new arrival) and counts in the batch's ``files_missing``.
    Only a batch that read fewer files than it listed is looked at (an empty file reads as none)."""
    listed = [_file_name(path) for path in files_of_batch(checkpoint, batch_id)]
    if figures.get("files_read", 0) >= len(listed):
        return figures
    read = {_file_name(row.source_file) for row in lines.select("source_file").distinct().collect()}
    gone = [name for name in listed if name not in read and not (settings.landing_dir / name).exists()]
    for name in gone:
        notice(
            f"landing file {name} was removed after the landing stream listed it (batch {batch_id}) and before "
            "it was read: its lines are not in bronze. To receive them, `lakehouse ingest` a copy of it"
        )
    return {**figures, "files_missing": float(len(gone))} if gone else figures


def _file_name(path: str) -> str:
    return unquote(path.rsplit("/", 1)[-1])


_last_arrival_ms = 0
_arrival_lock = threading.Lock()


def _next_arrival_ns(settings: Settings) -> int:
    """A wall-clock stamp, strictly later (by at least 1 ms) than the last one handed out, by this process
    and, on local disk, by any process of this home (``landing/.arrival-clock``, under a lock).

    The clock jumping back must not date a new file before the files already landed: Spark's file source
    would still take it, but out of order, and past ``maxFileAge`` (seven days) behind the newest file it
    would skip it; the landing sensor's cursor would pass it by. So the stamps go on from the last one
    until the clock catches up. On object storage the server's clock dates the files."""
    global _last_arrival_ms
    with _arrival_lock:
        _last_arrival_ms = max(time.time_ns() // 1_000_000, _last_arrival_ms + 1)
        if not is_remote(settings.landing_dir):
            settings.landing_dir.mkdir(parents=True, exist_ok=True)
            with open(settings.landing_dir / ".arrival-clock", "a+", encoding="ascii") as clock:
                fcntl.flock(clock, fcntl.LOCK_EX)
                clock.seek(0)
                last = clock.read().strip()
                _last_arrival_ms = max(_last_arrival_ms, int(last) + 1 if last.isdigit() else 0)
                clock.seek(0)
                clock.truncate()
                clock.write(str(_last_arrival_ms))
        return _last_arrival_ms * 1_000_000


def place_in_landing(settings: Settings, name: str, write: Callable[[IO[str]], None]) -> Location:
    """Write a file into the landing zone atomically: a hidden temp name first, then one rename (on object
    storage, one PUT of the whole file, which readers see whole or not at all).

    Arrival order is the file's modification time (Spark's file source takes files oldest first and sees
    milliseconds), so each file gets a distinct millisecond stamp as its modification time, and the same
    stamp starts its name: names never collide (a re-sent file is a new arrival) and sort in arrival order.
    Spark ignores names starting with ``.``. On object storage the modification time is the server's
    (seconds): files of one second are ordered by their names, which S3 lists in order.
    """
    arrival = _next_arrival_ns(settings)
    final = settings.landing_dir / f"{arrival:020d}-{Path(name).name}"
    if is_remote(final):
        with final.open("w", encoding="utf-8", newline="\n") as handle:
            write(handle)
        return final
    settings.landing_dir.mkdir(parents=True, exist_ok=True)
    temp = settings.landing_dir / f".{final.name}.partial"
    try:  # created new, never through a link planted at its name: the bytes land in the landing zone or nowhere
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise FileExistsError(f"landing zone: {temp} exists (a link or a stray file); nothing was placed") from None
    with open(descriptor, "w", encoding="utf-8", newline="\n") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    # Files written within one millisecond would tie, and Spark would order the tie as the listing happens to.
    os.utime(temp, ns=(arrival, arrival))
    os.replace(temp, final)
    return final


def ingest_file(settings: Settings, source: Path) -> Location:
    """Copy a JSON Lines file into the landing zone atomically (readers never see half a file)."""
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")

    def copy(handle: IO[str]) -> None:
        with source.open("r", encoding="utf-8", errors="surrogateescape", newline="") as src:
            shutil.copyfileobj(src, handle)

    return place_in_landing(settings, source.name, copy)
