"""The bare twin (issue 50): what a capable user would write without this project to keep the same gold outputs
fresh from the same landing folder. One JVM, plain Structured Streaming, one query per output straight off the
landing folder, each with the same trigger and the lakehouse's 2-minute watermark, each written to Delta the
plain way. It is the anchor the lakehouse is measured against (``bench.freshness --twin``), not a rival to
tune: no shared parse, no state kept across queries, no tricks.

The outputs, by the lakehouse's names (``OUTPUTS``):
- ``user_spend_5m``, ``hopping`` (60/5 min), ``global`` (per user): a windowed (or keyed) sum in update mode,
  MERGEd into its table per micro-batch; ``firings``: the same 5-minute sums appended per micro-batch.
- ``sessions``: ``session_window`` with a 30-minute gap; Spark allows only append mode for it, so a session
  is written once it closes (its gap and the watermark past its end), as a plain user gets it.
- ``fraud_alerts``: purchases per user through ``applyInPandasWithState``: a burst (3 within 60 s) or a large
  amount (at least 10x the mean of the user's purchases in the hour before), appended.
- ``amount_limit``: purchases of at least the limit (``LAKEHOUSE_FRAUD_AMOUNT_LIMIT``'s default), a plain filter,
  appended: the twin of ``gold.fraud_alerts``' stateless rule.
- ``unique_urls``: clicks deduplicated per (user, URL) within the watermark, counted per user, MERGEd.
- ``order_payments``: orders joined with their payments within 15 minutes (a stream-stream join), appended.

    .venv/bin/python -m bench.twin --landing DIR --out DIR [--trigger 2]     # runs until SIGTERM or Ctrl-C

It writes ``<out>/ready`` once every query has started.
"""

import argparse
import bisect
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from bench.bare_spark import EVENT_SCHEMA, MONEY, event_time
from warehouse.session import spark_session
from warehouse.settings import Settings

SCHEMA = StructType(
    [*EVENT_SCHEMA.fields, *(StructField(name, StringType()) for name in ("event_type", "url", "order_id"))]
)
WATERMARK = "2 minutes"
#: Output name → the column a bench probe's key appears in (as ``bench.freshness.outputs`` has it).
OUTPUTS = {
    "user_spend_5m": "user_id", "hopping": "user_id", "global": "user_id", "firings": "user_id",
    "sessions": "user_id", "fraud_alerts": "user_id", "unique_urls": "user_id", "order_payments": "order_id",
    "amount_limit": "user_id",
}  # fmt: skip
#: The stateless alert rule's limit, the lakehouse's default.
AMOUNT_LIMIT = Settings().fraud_amount_limit
ALERT_SCHEMA = StructType(
    [StructField(name, StringType()) for name in ("user_id", "rule", "event_id")]
    + [StructField("event_time", TimestampType()), StructField("amount", StringType())]
)
STATE_SCHEMA = StructType([StructField("times", StringType()), StructField("amounts", StringType())])


def events(spark: SparkSession, landing: Path, files: int | None = None) -> DataFrame:
    """Valid events off the landing folder, first arrivals only (deduplicated within the watermark);
    ``files``: at most that many landing files per micro-batch."""
    reader = spark.readStream.format("text")
    lines = (reader.option("maxFilesPerTrigger", files) if files else reader).load(str(landing))
    parsed = lines.select(F.from_json("value", SCHEMA).alias("e")).select(
        "e.event_id", "e.user_id", event_time(F.col("e.event_time")).alias("event_time"), "e.amount",
        "e.event_type", "e.url", "e.order_id",
    )  # fmt: skip
    valid = parsed.dropna(subset=["event_id", "user_id", "event_time", "amount"])
    return valid.withWatermark("event_time", WATERMARK).dropDuplicatesWithinWatermark(["event_id"])


def sums(frame: DataFrame, *keys: object) -> DataFrame:
    return frame.groupBy(*keys).agg(
        F.sum("amount").cast(MONEY).alias("total_amount"), F.count("*").alias("event_count")
    )


def merge_on(
    spark: SparkSession, path: Path, keys: list[str], corrections: Path | None = None
) -> Callable[[DataFrame, int], None]:
    """foreachBatch: upsert the batch's rows into the Delta table at ``path`` (created by the first batch);
    with ``corrections``, first append there each row the batch changes (its old and new figures)."""

    def merge(batch: DataFrame, _batch_id: int) -> None:
        if not DeltaTable.isDeltaTable(spark, str(path)):
            batch.write.format("delta").save(str(path))
            return
        if corrections is not None:
            old = spark.read.format("delta").load(str(path))
            old = old.select(*keys, *(F.col(c).alias(f"old_{c}") for c in ("total_amount", "event_count")))
            changed = batch.join(old, keys).where(F.col("old_event_count") != F.col("event_count"))
            changed.write.format("delta").mode("append").save(str(corrections))
        condition = " AND ".join(f"t.{key} = s.{key}" for key in keys)
        DeltaTable.forPath(spark, str(path)).alias("t").merge(batch.alias("s"), condition).whenMatchedUpdateAll() \
            .whenNotMatchedInsertAll().execute()  # fmt: skip

    return merge


def window_columns(frame: DataFrame, name: str = "window") -> DataFrame:
    return frame.select(
        "user_id", F.col(f"{name}.start").alias("window_start"), F.col(f"{name}.end").alias("window_end"),
        "total_amount", "event_count",
    )  # fmt: skip


def fraud(key: tuple[str], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """One user's purchases in event-time order against the hour before each: burst and large amount."""
    times, amounts = ([], []) if not state.exists else (
        [pd.Timestamp(t) for t in state.get[0].split(",") if t], [float(a) for a in state.get[1].split(",") if a]
    )  # fmt: skip
    alerts = []
    for frame in batches:
        for row in frame.sort_values("event_time").itertuples():
            now, amount = pd.Timestamp(row.event_time), float(row.amount)
            # The purchases kept in event-time order: the hour before is a slice, not a scan of them all.
            until = bisect.bisect_right(times, now)
            hour = amounts[bisect.bisect_left(times, now - pd.Timedelta(hours=1)) : until]
            if hour and sum(hour) > 0 and amount >= 10 * sum(hour) / len(hour):
                alerts.append((key[0], "large_amount", row.event_id, now, str(row.amount)))
            if until - bisect.bisect_left(times, now - pd.Timedelta(seconds=60)) >= 2:
                alerts.append((key[0], "burst", row.event_id, now, str(row.amount)))
            times.insert(until, now)
            amounts.insert(until, amount)
    newest = max(times) if times else None
    kept = [
        (t, a)
        for t, a in zip(times, amounts, strict=True)
        if newest is not None and newest - t <= pd.Timedelta(hours=1)
    ]
    state.update((",".join(str(t) for t, _ in kept), ",".join(str(a) for _, a in kept)))
    yield pd.DataFrame(alerts, columns=[f.name for f in ALERT_SCHEMA.fields])


def start_all(
    spark: SparkSession,
    landing: Path,
    out: Path,
    trigger: int | None,
    files: int | None = None,
    corrections: bool = False,
) -> list:
    """Start one query per output; each reads the landing folder on its own (at most ``files`` files a
    micro-batch), a micro-batch every ``trigger`` seconds, or with None what is there now (``availableNow``).
    ``corrections``: the tumbling table's MERGE appends the windows it changes to ``corrections``."""
    tables, checkpoints = out / "tables", out / "checkpoints"
    when = {"processingTime": f"{trigger} seconds"} if trigger else {"availableNow": True}

    def started(name: str, frame: DataFrame, mode: str, sink: Callable[[DataFrame, int], None] | None = None):
        writer = frame.writeStream.queryName(f"twin_{name}").outputMode(mode).trigger(**when)
        writer = writer.option("checkpointLocation", str(checkpoints / name))
        if sink is not None:
            return writer.foreachBatch(sink).start()
        return writer.format("delta").start(str(tables / name))

    def fresh() -> DataFrame:
        return events(spark, landing, files)

    five_path = tables / "user_spend_5m"

    five = window_columns(sums(fresh(), F.window("event_time", "5 minutes"), "user_id"))
    hour = window_columns(sums(fresh(), F.window("event_time", "60 minutes", "5 minutes"), "user_id"))
    sessions = sums(fresh(), F.session_window("event_time", "30 minutes"), "user_id").select(
        "user_id", F.col("session_window.start").alias("session_start"),
        F.col("session_window.end").alias("session_end"), "total_amount", "event_count",
    )  # fmt: skip
    purchases = fresh().where(F.col("event_type") == "purchase")
    alerts = purchases.groupBy("user_id").applyInPandasWithState(
        fraud, ALERT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout
    )
    clicks = fresh().where((F.col("event_type") == "click") & F.col("url").isNotNull())
    urls = (
        clicks.dropDuplicatesWithinWatermark(["user_id", "url"])
        .groupBy("user_id")
        .agg(F.count("*").alias("distinct_urls"))
    )
    orders = (
        fresh()
        .where(F.col("event_type") == "order")
        .select(
            "order_id", F.col("user_id"), F.col("event_time").alias("ordered_at"), F.col("amount").alias("order_amount")
        )
    )
    payments = (
        fresh()
        .where(F.col("event_type") == "payment")
        .select(
            F.col("order_id").alias("paid_order_id"),
            F.col("event_time").alias("paid_at"),
            F.col("amount").alias("paid"),
        )
    )
    joined = orders.join(
        payments,
        F.expr("order_id = paid_order_id AND paid_at >= ordered_at AND paid_at <= ordered_at + INTERVAL 15 MINUTES"),
    ).drop("paid_order_id")
    return [
        started(
            "user_spend_5m",
            five,
            "update",
            merge_on(spark, five_path, ["user_id", "window_start"], tables / "corrections" if corrections else None),
        ),
        started(
            "firings",
            five,
            "update",
            lambda batch, _: batch.write.format("delta").mode("append").save(str(tables / "firings")),
        ),
        started("hopping", hour, "update", merge_on(spark, tables / "hopping", ["user_id", "window_start"])),
        started("global", sums(fresh(), "user_id"), "update", merge_on(spark, tables / "global", ["user_id"])),
        started("sessions", sessions, "append"),
        started("fraud_alerts", alerts, "append"),
        started(
            "amount_limit",
            fresh().where((F.col("event_type") == "purchase") & (F.col("amount") >= F.lit(AMOUNT_LIMIT))),
            "append",
        ),
        started("unique_urls", urls, "update", merge_on(spark, tables / "unique_urls", ["user_id"])),
        started("order_payments", joined, "append"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", type=Path, required=True, help="the landing folder to read")
    parser.add_argument("--out", type=Path, required=True, help="where its tables and checkpoints go")
    parser.add_argument("--trigger", type=int, default=2, help="seconds between micro-batches")
    args = parser.parse_args()
    spark = spark_session(Settings.from_env(), app_name="bench-twin")
    queries = start_all(spark, args.landing.resolve(), args.out.resolve(), args.trigger)
    (args.out / "ready").write_text("\n".join(q.name for q in queries) + "\n")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        failed = [q for q in queries if not q.isActive]
        if failed:
            raise SystemExit(f"twin: {failed[0].name} stopped: {failed[0].exception()}")
    for query in queries:
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
