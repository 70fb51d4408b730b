"""Bronze: append every received line, raw, with its source position and ingest time."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from transforms.landing import batch_has_glob_names
from warehouse.catalog import BRONZE_EVENTS
from warehouse.delta import append_once
from warehouse.settings import Settings

#: The landing → bronze stream's name (and checkpoint folder).
LANDING_STAGE = "bronze_events"


def land_lines(lines: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Append one micro-batch of raw lines to ``bronze.events`` exactly once.

    Time semantics: ``ingest_time`` is processing time, one instant per micro-batch; ``ingest_batch``
    orders arrivals across batches (a later batch arrived later), source position orders them within one.
    """
    if batch_has_glob_names(settings.checkpoints_dir / LANDING_STAGE, batch_id):
        # Spark read the batch's other files more than once (SPARK-58518); a line is received once.
        lines = lines.dropDuplicates(["source_file", "source_line"])
    return land_messages(lines, batch_id, settings, writer_id)


def land_messages(lines: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Append one micro-batch of raw lines (landing lines or Kafka messages) to ``bronze.events`` exactly
    once: a batch re-run after a crash reads the same lines or offsets and writes nothing twice."""
    stamped = lines.withColumns(
        {
            "ingest_time": F.current_timestamp(),
            "ingest_batch": F.lit(batch_id).cast("long"),
        }
    ).withColumn("ingest_date", F.to_date("ingest_time"))
    stamped.persist()
    try:
        rows = stamped.count()
        if rows:
            append_once(stamped, settings, BRONZE_EVENTS, writer_id, batch_id)
    finally:
        stamped.unpersist()
    return {"rows_in": rows, "rows_written": rows}
