"""Sources: the landing folder of JSON Lines files, read as a stream of raw lines with their position."""

import json
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
from pyspark.sql import functions as F

from transforms.events import line_text
from warehouse.settings import Settings

#: The binaryFile source's fixed columns (a stream must be given its schema).
_BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


def read_landing(spark: SparkSession, settings: Settings) -> DataFrame:
    """Stream every file that appears in the landing folder, one row per line, in arrival order.

    Time semantics: none yet. A file's arrival is processing time (its modification time when it was
    placed atomically); Spark's file source takes new files oldest first, ``maxFilesPerTrigger`` at a time,
    and remembers in its checkpoint which files it has read. Names starting with ``.`` or ``_`` (partial
    files still being written) are ignored by Spark.
    """
    settings.landing_dir.mkdir(parents=True, exist_ok=True)
    # Files are read as bytes (one row per file keeps every line's position exact): Spark's text source
    # would replace bytes that are not UTF-8 before anything could keep them.
    files = (
        spark.readStream.format("binaryFile")
        .schema(_BINARY_FILE_SCHEMA)
        .option("maxFilesPerTrigger", settings.max_files_per_trigger)
        .load(str(settings.landing_dir))
    )
    return split_lines(_file_columns(files))


def read_landing_files(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every file now in the landing folder as one batch, in the shape :func:`split_lines` takes."""
    return _file_columns(spark.read.format("binaryFile").load(str(settings.landing_dir)))


def _file_columns(files: DataFrame) -> DataFrame:
    return files.select(
        F.col("content"),
        F.col("_metadata.file_path").alias("source_file"),
        F.col("_metadata.file_modification_time").alias("file_modified_at"),
    )


def split_lines(files: DataFrame) -> DataFrame:
    """One row per line of each file's bytes (``content``): ``raw`` without its line break, ``source_line``
    1-based, ``raw_bytes`` only for a line that is not UTF-8.

    The empty string after a file's final line break is not a line; every other empty line is kept (it
    is received, so bronze has it, and silver quarantines it). A CR before the LF is part of the line
    break, and a UTF-8 byte order mark at the start of a file is not part of its first line.
    """
    # ISO-8859-1 maps each byte to one character and back, so the bytes are split at LF without being
    # decoded; each line is re-encoded to its exact bytes afterwards. Split once into a column: written
    # inline, Spark would re-split the whole file for every line it emits.
    split = files.select(
        "source_file", "file_modified_at", F.split(F.decode("content", "ISO-8859-1"), "\n").alias("lines")
    )
    lines = split.select(
        "source_file",
        "file_modified_at",
        F.posexplode("lines").alias("position", "text"),
        F.size("lines").alias("parts"),
    ).where(~((F.col("position") == F.col("parts") - 1) & (F.col("text") == "")))
    text = F.regexp_replace("text", "\r$", "")
    text = F.when(F.col("position") == 0, F.regexp_replace(text, "^\u00ef\u00bb\u00bf", "")).otherwise(text)
    raw, raw_bytes = line_text(F.encode(text, "ISO-8859-1"))
    return lines.select(
        raw.alias("raw"),
        F.lit("file").alias("source"),
        "source_file",
        (F.col("position") + 1).cast("long").alias("source_line"),
        "file_modified_at",
        F.lit(None).cast("string").alias("kafka_topic"),
        F.lit(None).cast("int").alias("kafka_partition"),
        F.lit(None).cast("long").alias("kafka_offset"),
        F.lit(None).cast("timestamp").alias("kafka_timestamp"),
        F.lit(None).cast("string").alias("kafka_key"),
        raw_bytes.alias("raw_bytes"),
    )


def source_log(checkpoint: Path) -> dict[str, int]:
    """Every file the landing stream's file source has taken, with its batch: the source's own log
    (``sources/0``: a JSON line per file, compacted every few batches into ``N.compact``)."""
    log = checkpoint / "sources" / "0"
    if not log.is_dir():
        return {}
    taken: dict[str, int] = {}
    for entry in log.iterdir():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text(encoding="utf-8").splitlines()[1:]:
            if line.strip():
                record = json.loads(line)
                taken[record["path"]] = int(record["batchId"])
    return taken


def files_read(checkpoint: Path, last_batch: int) -> list[str]:
    """Paths (as Spark's log names them, ``file:///…``) of the files the landing stream took in batches
    up to ``last_batch``."""
    return sorted(path for path, batch_id in source_log(checkpoint).items() if batch_id <= last_batch)


def batch_has_glob_names(checkpoint: Path, batch_id: int) -> bool:
    """Whether a batch took a file whose name looks like a glob (``[``, ``{``, ``*``, ``?``).

    Spark 4.1 reads every *other* file of such a batch more than once (SPARK-58518: with globbing
    disabled, each glob-looking path adds the whole path list again), so the batch must be deduplicated.
    """
    return any(
        _GLOB_CHARACTERS.search(unquote(path.rsplit("/", 1)[-1]))
        for path, taken in source_log(checkpoint).items()
        if taken == batch_id
    )


_GLOB_CHARACTERS = re.compile(r"[\[\]{}*?\\]")


_last_arrival_ms = 0
_arrival_lock = threading.Lock()


def _next_arrival_ns() -> int:
    """A wall-clock stamp, strictly later (by at least 1 ms) than the last one this process handed out."""
    global _last_arrival_ms
    with _arrival_lock:
        _last_arrival_ms = max(time.time_ns() // 1_000_000, _last_arrival_ms + 1)
        return _last_arrival_ms * 1_000_000


def place_in_landing(settings: Settings, name: str, write: Callable[[IO[str]], None]) -> Path:
    """Write a file into the landing zone atomically: a hidden temp name first, then one rename.

    Arrival order is the file's modification time (Spark's file source takes files oldest first and sees
    milliseconds), so each file gets a distinct millisecond stamp as its modification time, and the same
    stamp starts its name: names never collide (a re-sent file is a new arrival) and sort in arrival order.
    Spark ignores names starting with ``.``.
    """
    settings.landing_dir.mkdir(parents=True, exist_ok=True)
    arrival = _next_arrival_ns()
    final = settings.landing_dir / f"{arrival:020d}-{Path(name).name}"
    temp = settings.landing_dir / f".{final.name}.partial"
    with temp.open("w", encoding="utf-8", newline="\n") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    # Files written within one millisecond would tie, and Spark would order the tie as the listing happens to.
    os.utime(temp, ns=(arrival, arrival))
    os.replace(temp, final)
    return final


def ingest_file(settings: Settings, source: Path) -> Path:
    """Copy a JSON Lines file into the landing zone atomically (readers never see half a file)."""
    if not source.is_file():
        raise FileNotFoundError(f"no such file: {source}")

    def copy(handle: IO[str]) -> None:
        with source.open("r", encoding="utf-8", errors="surrogateescape", newline="") as src:
            shutil.copyfileobj(src, handle)

    return place_in_landing(settings, source.name, copy)
