"""Bronze: append every received line, raw, with its source position and ingest time."""

from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.events import line_text
from transforms.latency import arrival_figures, arrival_quantiles
from warehouse.catalog import BRONZE_EVENTS
from warehouse.delta import append_once
from warehouse.settings import Settings


def land_lines(
    lines: DataFrame, batch_id: int, settings: Settings, writer_id: str, reread_positions: bool = False
) -> dict[str, float]:
    """Append one micro-batch of raw lines to ``bronze.events`` exactly once.

    Time semantics: ``ingest_time`` is processing time, one instant per micro-batch; ``ingest_batch``
    orders arrivals across batches (a later batch arrived later), source position orders them within one.
    ``reread_positions``: the source read some lines of the batch more than once (see
    ``runtime.sources.landing.batch_has_glob_names``).
    """
    if reread_positions:
        # Spark read the batch's other files more than once (SPARK-58518); a line is received once.
        lines = lines.dropDuplicates(["source_file", "source_line"])
    return land_messages(lines, batch_id, settings, writer_id)


def land_messages(lines: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Append one micro-batch of raw lines (landing lines or Kafka messages) to ``bronze.events`` exactly
    once: a batch re-run after a crash reads the same lines or offsets and writes nothing twice."""
    stamped = stamp(lines, batch_id)
    stamped.persist()
    try:
        return append_lines(stamped, batch_id, settings, writer_id)
    finally:
        stamped.unpersist()


def stamp(lines: DataFrame, batch_id: int, ingest_time: datetime | None = None) -> DataFrame:
    """Lines with their arrival in bronze: ``ingest_time`` (the batch's planned time when given, which a
    re-run after a crash sees again; else now) and ``ingest_batch``."""
    at = F.lit(ingest_time).cast("timestamp") if ingest_time is not None else F.current_timestamp()
    stamped = lines.withColumns({"ingest_time": at, "ingest_batch": F.lit(batch_id).cast("long")})
    return stamped.withColumn("ingest_date", F.to_date("ingest_time"))


def spread(stamped: DataFrame, slots: int) -> DataFrame:
    """The batch's lines hashed by their position in their file or Kafka partition over ``slots`` partitions,
    one a task slot: Spark reads a landing file whole, so a batch of three or five files (or one Kafka
    partition's messages) would leave a core idle for much of the parse and the writes. Deterministic (a
    task retried gets the same lines), no sort."""
    return stamped.repartition(slots, F.coalesce("source_line", "kafka_offset"))


def append_lines(stamped: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Append stamped lines to ``bronze.events`` exactly once per (writer, batch); their figures."""
    figures = lines_figures(stamped)
    if figures["rows_in"]:
        write_lines(stamped, batch_id, settings, writer_id, figures["rows_in"])
    return figures


def lines_figures(stamped: DataFrame) -> dict[str, float]:
    """A batch's line count, files read and arrival figures (one job)."""
    rows, files, quantiles, earliest = stamped.agg(
        F.count("*"),
        F.count_distinct("source_file"),
        *arrival_quantiles(F.coalesce("kafka_timestamp", "file_modified_at")),
    ).first()
    return {"rows_in": rows, "rows_written": rows, "files_read": files, **arrival_figures(quantiles, earliest)}


def write_lines(stamped: DataFrame, batch_id: int, settings: Settings, writer_id: str, rows: int) -> None:
    """Append ``rows`` stamped lines to ``bronze.events`` exactly once per (writer, batch)."""
    append_once(stamped, settings, BRONZE_EVENTS, writer_id, batch_id, rows)


def read_landing_files(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every file now in the landing folder as one batch, in the shape :func:`split_lines` takes."""
    return file_columns(spark.read.format("binaryFile").load(str(settings.landing_dir)))


def file_columns(files: DataFrame) -> DataFrame:
    """Spark's ``binaryFile`` rows as (content, source_file, file_modified_at)."""
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
        F.lit(None).cast("string").alias("kafka_topic_id"),
        raw_bytes.alias("raw_bytes"),
    )
