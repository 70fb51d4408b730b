"""Silver: parse and validate bronze lines, quarantine the invalid, deduplicate by event_id over history."""

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from transforms.events import parse_events
from warehouse.catalog import SILVER_DUPLICATES, SILVER_EVENTS, SILVER_QUARANTINE
from warehouse.delta import append_all_once, materialized, read_table
from warehouse.settings import Settings

#: Arrival order: an earlier bronze batch arrived earlier; within a batch, older files first, then the
#: line order within a file (Kafka: partition offset order).
ARRIVAL_ORDER = ("ingest_batch", "file_modified_at", "source_file", "source_line", "kafka_partition", "kafka_offset")


def source_position() -> F.Column:
    """``file#line`` for landing files, ``kafka:topic/partition@offset`` for Kafka records."""
    return F.when(
        F.col("source") == "kafka",
        F.format_string("kafka:%s/%d@%d", "kafka_topic", "kafka_partition", "kafka_offset"),
    ).otherwise(F.format_string("%s#%d", "source_file", "source_line"))


def refine_events(bronze: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Split one micro-batch of bronze lines into new events, duplicates and quarantined lines.

    Time semantics: none of event time; "first" means first to *arrive* (see ``ARRIVAL_ORDER``), however
    late or early its event time is. History is every silver batch before this one, so a batch re-run
    after a crash classifies exactly as its first attempt did.
    """
    spark = bronze.sparkSession
    parsed = parse_events(bronze).withColumns(
        {"source_position": source_position(), "silver_batch": F.lit(batch_id).cast("long")}
    )
    valid = F.col("reason").isNull()
    # Quarantined lines ride along (ranked apart from valid ones), so one pass classifies every line.
    by_arrival = Window.partitionBy("event_id", valid).orderBy(*ARRIVAL_ORDER)
    ranked = parsed.withColumns(
        {
            "arrival_rank": F.when(valid, F.row_number().over(by_arrival)),
            "first_hash_in_batch": F.when(valid, F.first("payload_hash").over(by_arrival)),
        }
    )
    history = (
        read_table(spark, settings, SILVER_EVENTS)
        .where(F.col("silver_batch") < batch_id)
        .select("event_id", F.col("payload_hash").alias("history_hash"))
    )
    classified = (
        ranked.join(history, "event_id", "left")
        .withColumn("is_new", valid & (F.col("arrival_rank") == 1) & F.col("history_hash").isNull())
        .withColumn("is_duplicate", valid & ~F.col("is_new"))
        .withColumn("first_payload_hash", F.coalesce("history_hash", "first_hash_in_batch"))
        .withColumn(
            "conflicting", F.col("is_duplicate") & ~F.col("payload_hash").eqNullSafe(F.col("first_payload_hash"))
        )
    )
    with materialized(classified) as classified:
        counts = classified.agg(
            F.count("*"),
            F.count_if(~valid),
            F.count_if("is_duplicate"),
            F.count_if("conflicting"),
        ).first()
        rows_in, n_quarantined, n_duplicates, n_conflicting = (int(v) for v in counts)
        n_new = rows_in - n_quarantined - n_duplicates
        writes = []
        if n_quarantined:
            writes.append((classified.where(~valid), SILVER_QUARANTINE))
        if n_duplicates:
            writes.append((classified.where("is_duplicate"), SILVER_DUPLICATES))
        if n_new:
            writes.append((classified.where("is_new").withColumn("event_date", F.to_date("event_time")), SILVER_EVENTS))
        append_all_once(writes, settings, writer_id, batch_id)
    return {
        "rows_in": rows_in,
        "rows_written": n_new,
        "quarantined": n_quarantined,
        "duplicates": n_duplicates,
        "conflicting": n_conflicting,
    }
