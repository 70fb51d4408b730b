"""Sources: the landing folder of JSON Lines files, read as a stream of raw lines with their position."""

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


_last_arrival_ms = 0
_arrival_lock = threading.Lock()


def _next_arrival_ns() -> int:
    """A wall-clock stamp, strictly later (by at least 1 ms) than the last one this process handed out."""
    global _last_arrival_ms
    with _arrival_lock:
        _last_arrival_ms = max(time.time_ns() // 1_000_000, _last_arrival_ms + 1)
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
    arrival = _next_arrival_ns()
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
