"""The baselines: bare Spark jobs doing the pipeline's core work, and nothing more.

Streaming (default): text file source → ``from_json`` → event-time parse → drop invalid → watermark →
streaming dedup on ``event_id`` → 5-minute tumbling windows per user (update mode) → ``foreachBatch``
MERGE into one Delta table keyed by ``(user_id, window_start)``, with ``availableNow``.

``--aggregate-only``: one batch job that only parses, windows and aggregates the same lines and writes
the result once (no dedup, no state, no per-batch commits): the floor any streaming pipeline pays.

The SparkSession is built by the project's own factory so jars and configs match; ``LAKEHOUSE_HOME``
should point at a scratch home.
"""

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType, TimestampType

from warehouse.session import spark_session
from warehouse.settings import Settings

MONEY = DecimalType(18, 2)
EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("user_id", StringType()),
        StructField("event_time", StringType()),
        StructField("amount", MONEY),
    ]
)
OUTPUT_SCHEMA = StructType(
    [
        StructField("user_id", StringType(), False),
        StructField("window_start", TimestampType(), False),
        StructField("window_end", TimestampType(), False),
        StructField("total_amount", MONEY, False),
        StructField("event_count", LongType(), False),
    ]
)


def event_time(raw: Column) -> Column:
    """Epoch milliseconds when the text is all digits, else an ISO-8601 timestamp (Z or an offset)."""
    return F.when(raw.rlike(r"^-?[0-9]+$"), F.timestamp_millis(raw.try_cast("long"))).otherwise(F.try_to_timestamp(raw))


def parsed_events(lines: DataFrame) -> DataFrame:
    """Typed events from text lines; lines that do not parse into all four fields are dropped."""
    return (
        lines.select(F.from_json("value", EVENT_SCHEMA).alias("e"))
        .select("e.event_id", "e.user_id", event_time(F.col("e.event_time")).alias("event_time"), "e.amount")
        .dropna(subset=["event_id", "user_id", "event_time", "amount"])
    )


def windowed_spend(spark: SparkSession, landing: Path, files_per_trigger: int) -> DataFrame:
    """The streaming plan: parse, dedup with state, and sum per user and 5-minute window."""
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", files_per_trigger).load(str(landing))
    events = parsed_events(lines).withWatermark("event_time", "2 minutes").dropDuplicates(["event_id"])
    return windowed_sums(events)


def windowed_sums(events: DataFrame) -> DataFrame:
    """Sum and count per user and 5-minute tumbling window."""
    return (
        events.groupBy(F.window("event_time", "5 minutes"), "user_id")
        .agg(F.sum("amount").alias("total_amount"), F.count(F.lit(1)).alias("event_count"))
        .select(
            "user_id",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            F.col("total_amount").cast(MONEY).alias("total_amount"),
            "event_count",
        )
    )


def merge_into(target: DeltaTable) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function that upserts each batch's updated windows into ``target``."""

    def merge(batch: DataFrame, _batch_id: int) -> None:
        (
            target.alias("t")
            .merge(batch.alias("s"), "t.user_id = s.user_id AND t.window_start = s.window_start")
            .whenMatchedUpdate(set={"total_amount": "s.total_amount", "event_count": "s.event_count"})
            .whenNotMatchedInsertAll()
            .execute()
        )

    return merge


def run(landing: Path, out: Path, files_per_trigger: int) -> float:
    """Run the query once over everything in ``landing``; return the seconds the query itself took."""
    settings = Settings.from_env()
    spark = spark_session(settings, app_name="bench-bare")
    target = DeltaTable.createIfNotExists(spark).location(str(out)).addColumns(OUTPUT_SCHEMA).execute()
    started = time.monotonic()
    query = (
        windowed_spend(spark, landing, files_per_trigger)
        .writeStream.queryName("bare_user_spend")
        .outputMode("update")
        .option("checkpointLocation", str(settings.checkpoints_dir / "bare_user_spend"))
        .foreachBatch(merge_into(target))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - started
    progress = query.lastProgress
    batches = progress["batchId"] + 1 if progress else 0
    print(f"bare: {batches} micro-batches in {seconds:.1f}s (query only)", flush=True)
    spark.stop()
    return seconds


def run_aggregate_only(landing: Path, out: Path) -> float:
    """Parse, window and aggregate every line in one batch job and write the result once."""
    settings = Settings.from_env()
    spark = spark_session(settings, app_name="bench-aggregate-only")
    started = time.monotonic()
    windowed_sums(parsed_events(spark.read.text(str(landing)))).write.format("delta").mode("overwrite").save(str(out))
    seconds = time.monotonic() - started
    print(f"aggregate-only: {seconds:.1f}s (job only)", flush=True)
    spark.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", type=Path, required=True, help="folder of JSON Lines files to read")
    parser.add_argument("--out", type=Path, required=True, help="Delta table to MERGE the windows into")
    parser.add_argument("--files-per-trigger", type=int, default=5, help="maxFilesPerTrigger of the file source")
    parser.add_argument("--aggregate-only", action="store_true", help="one batch job: parse, window, aggregate")
    args = parser.parse_args()
    if args.aggregate_only:
        run_aggregate_only(args.landing.resolve(), args.out.resolve())
    else:
        run(args.landing.resolve(), args.out.resolve(), args.files_per_trigger)


if __name__ == "__main__":
    main()
