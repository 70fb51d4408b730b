"""The fourteen-table bare twin (issue 50, part 1): what a capable user would write without this project to
keep the same fourteen tables as ``lakehouse run --once`` from the same landing files, with ``availableNow``.
It is ``bench.run``'s anchor for a backlog, beside the one-table jobs of ``bench.bare_spark``.

Plain Structured Streaming in one JVM, each query straight off the landing folder, written to Delta the plain
way (no shared parse, no kept state across queries, no delta-rs):
- bronze: every line as it arrived, with its file and the time it was read, appended;
- silver (one ``foreachBatch``): lines that do not parse into an event are quarantined with a reason; of the
  rest, an event whose id silver holds already (or that repeats within the batch) goes to the duplicates,
  one more than the allowed lateness behind the watermark (the newest event time of earlier batches minus
  2 minutes) to the late events, and the others to the events;
- gold: ``bench.twin``'s nine outputs (the tumbling, hopping, session and global windows, the firings, the
  fraud alerts and the amount rule, distinct URLs, orders ⋈ payments), the tumbling table's MERGE also
  appending a correction for each window it changes.

    .venv/bin/python -m bench.twin_tables --landing DIR --out DIR [--files-per-trigger 5]
"""

import argparse
from datetime import datetime, timedelta
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from bench.bare_spark import event_time
from bench.twin import SCHEMA, start_all
from warehouse.session import spark_session
from warehouse.settings import Settings

#: The lakehouse's defaults: watermark delay and allowed lateness.
DELAY, LATENESS = timedelta(minutes=2), timedelta(minutes=1)


def start_bronze(spark: SparkSession, landing: Path, out: Path, files: int):
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", files).load(str(landing))
    raw = lines.select(
        F.col("value").alias("raw"), F.col("_metadata.file_path").alias("source_file"),
        F.current_timestamp().alias("ingest_time"),
    )  # fmt: skip
    return (
        raw.writeStream.queryName("twin_bronze")
        .option("checkpointLocation", str(out / "checkpoints" / "bronze_events"))
        .trigger(availableNow=True)
        .format("delta")
        .start(str(out / "tables" / "bronze_events"))
    )


def start_silver(spark: SparkSession, landing: Path, out: Path, files: int):
    tables = out / "tables"
    newest: dict[str, datetime] = {}

    def split(batch: DataFrame, batch_id: int) -> None:
        parsed = batch.select("value", F.from_json("value", SCHEMA).alias("e")).select(
            "value", "e.event_id", "e.user_id", event_time(F.col("e.event_time")).alias("event_time"), "e.amount",
            "e.event_type", "e.url", "e.order_id",
        )  # fmt: skip
        reason = (
            F.when(F.col("event_id").isNull(), "missing_event_id")
            .when(F.col("user_id").isNull(), "missing_user_id")
            .when(F.col("event_time").isNull(), "bad_event_time")
            .when(F.col("amount").isNull(), "bad_amount")
        )
        parsed = parsed.withColumn("reason", reason).withColumn("silver_batch", F.lit(batch_id)).cache()
        quarantined = parsed.where(F.col("reason").isNotNull()).select(F.col("value").alias("raw"), "reason")
        quarantined.write.format("delta").mode("append").save(str(tables / "silver_quarantine"))
        valid = parsed.where(F.col("reason").isNull()).drop("reason")
        first = Window.partitionBy("event_id").orderBy("event_time")
        valid = valid.withColumn("arrival", F.row_number().over(first))
        events = tables / "silver_events"
        if DeltaTable.isDeltaTable(spark, str(events)):
            seen = spark.read.format("delta").load(str(events)).select("event_id").withColumn("seen", F.lit(True))
            valid = valid.join(seen, "event_id", "left")
        else:
            valid = valid.withColumn("seen", F.lit(False))
        repeated = F.coalesce(F.col("seen"), F.lit(False)) | (F.col("arrival") > 1)
        duplicates = valid.where(repeated).select("event_id", F.col("value").alias("raw"), "silver_batch")
        duplicates.write.format("delta").mode("append").save(str(tables / "silver_duplicates"))
        fresh = valid.where(~repeated).drop("seen", "arrival", "value")
        if "max" in newest:
            late = F.col("event_time") < F.lit(newest["max"] - DELAY - LATENESS)
            fresh.where(late).write.format("delta").mode("append").save(str(tables / "silver_late_events"))
        fresh.write.format("delta").mode("append").save(str(events))
        batch_max = fresh.agg(F.max("event_time")).first()[0]
        if batch_max is not None:
            newest["max"] = max(batch_max, newest.get("max", batch_max))
        parsed.unpersist()

    lines = spark.readStream.format("text").option("maxFilesPerTrigger", files).load(str(landing))
    return (
        lines.writeStream.queryName("twin_silver")
        .option("checkpointLocation", str(out / "checkpoints" / "silver"))
        .trigger(availableNow=True)
        .foreachBatch(split)
        .start()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", type=Path, required=True, help="the landing folder to read")
    parser.add_argument("--out", type=Path, required=True, help="where its tables and checkpoints go")
    parser.add_argument("--files-per-trigger", type=int, default=5, help="landing files per micro-batch")
    args = parser.parse_args()
    spark = spark_session(Settings.from_env(), app_name="bench-twin-tables")
    landing, out = args.landing.resolve(), args.out.resolve()
    queries = [
        start_bronze(spark, landing, out, args.files_per_trigger),
        start_silver(spark, landing, out, args.files_per_trigger),
        *start_all(spark, landing, out, None, args.files_per_trigger, corrections=True),
    ]
    for query in queries:
        query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
