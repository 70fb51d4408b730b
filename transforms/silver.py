"""Silver: parse and validate bronze lines, quarantine the invalid, deduplicate by event_id over history."""

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from transforms.events import parse_events
from warehouse.catalog import SILVER_DUPLICATES, SILVER_EVENTS, SILVER_QUARANTINE
from warehouse.delta import append_once, read_table
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
    parsed.persist()
    classified: DataFrame | None = None
    try:
        rows_in = parsed.count()
        if rows_in == 0:
            return {"rows_in": 0, "rows_written": 0, "quarantined": 0, "duplicates": 0, "conflicting": 0}

        quarantined = parsed.where(F.col("reason").isNotNull())

        by_arrival = Window.partitionBy("event_id").orderBy(*ARRIVAL_ORDER)
        ranked = parsed.where(F.col("reason").isNull()).withColumns(
            {
                "arrival_rank": F.row_number().over(by_arrival),
                "first_hash_in_batch": F.first("payload_hash").over(by_arrival),
            }
        )
        history = (
            read_table(spark, settings, SILVER_EVENTS)
            .where(F.col("silver_batch") < batch_id)
            .select("event_id", F.col("payload_hash").alias("history_hash"))
        )
        classified = ranked.join(history, "event_id", "left").withColumn(
            "is_new", (F.col("arrival_rank") == 1) & F.col("history_hash").isNull()
        )
        classified.persist()

        new_events = classified.where("is_new").withColumn("event_date", F.to_date("event_time"))
        duplicates = (
            classified.where(~F.col("is_new"))
            .withColumn("first_payload_hash", F.coalesce("history_hash", "first_hash_in_batch"))
            .withColumn("conflicting", ~F.col("payload_hash").eqNullSafe(F.col("first_payload_hash")))
        )

        figures = (
            quarantined.agg(F.count("*")).first()[0],
            duplicates.agg(F.count("*"), F.coalesce(F.sum(F.col("conflicting").cast("long")), F.lit(0))).first(),
        )
        n_quarantined, (n_duplicates, n_conflicting) = figures

        if n_quarantined:
            append_once(quarantined, settings, SILVER_QUARANTINE, writer_id, batch_id)
        if n_duplicates:
            append_once(duplicates, settings, SILVER_DUPLICATES, writer_id, batch_id)
        n_new = rows_in - n_quarantined - n_duplicates
        if n_new:
            append_once(new_events, settings, SILVER_EVENTS, writer_id, batch_id)
    finally:
        if classified is not None:
            classified.unpersist()
        parsed.unpersist()
    return {
        "rows_in": rows_in,
        "rows_written": n_new,
        "quarantined": n_quarantined,
        "duplicates": n_duplicates,
        "conflicting": n_conflicting,
    }
