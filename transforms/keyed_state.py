"""Per-key state with timers: distinct URLs per user over 24 hours, and fraud alerts on purchases.

Two Structured Streaming queries over ``silver.events``, each keyed by ``user_id`` with Spark's own
``transformWithState`` (PySpark's row-based API, ``timeMode="EventTime"``) and a state store per key:

``silver.events → watermark → clicks / purchases → key by user_id → stateful processor → gold``

Time semantics, for both: the stream's watermark is Spark's (``withWatermark``): the newest event time the
query has seen minus ``settings.watermarks.delay``. Event-time timers fire once the watermark passes their
instant, which is what removes state; an event at or behind the watermark of the batch before its own is
dropped by Spark before it reaches a processor (``numRowsDroppedByWatermark``, shown as ``late`` in
``ops.stream_progress``). Processing time only stamps ``updated_at`` and ``detected_at`` (the batch's
timestamp, the same when a batch is re-run after a crash).

- ``gold.unique_urls``: per user, the URLs clicked, each with its last click time (a MapState). A URL
  counts at instant T while its last click is in ``(T - 24 h, T]``; it is taken out once the watermark
  passes ``last click + 24 h`` (one timer per user, at the earliest such instant), and the count is
  re-emitted (down to 0).
- ``gold.fraud_alerts``: per user, the purchases of the last hour of event time, by minute of event time
  (a MapState, with each minute's totals in a ValueState). Each new purchase is judged on arrival, in
  arrival order, against the user's purchases that arrived before it (the rules: ``fraud_rules.py``):
  ``large_amount`` (≥ 10x the mean of those in ``[t - 1 h, t]``) and ``burst`` (3 or more within 60 s,
  once per episode: not when one of the purchases it bursts with was in a burst already). A minute is
  evicted once the watermark passes its end + 1 h (one timer per user, on a 10-minute grid), when no later
  purchase that is not late can need it.

Spark 4.1 refuses state TTL in ``EventTime`` mode (``STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL``:
TTL is processing time, for ``ProcessingTime`` mode only), so no state variable here has one: each key's
event-time timer, at its earliest entry's expiry, bounds the state to the horizon behind the watermark.

Never imports Dagster. The processors themselves are in ``transforms.keyed_processors``, which Spark's Python
processes import: kept apart so that what this module imports (the catalog, Delta) is not loaded there.
"""

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from transforms.fraud_rules import BURST, LARGE_AMOUNT
from transforms.keyed_processors import DistinctUrlCounter, FraudDetector
from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS
from warehouse.delta import MergeSpec, append_once, materialized, merge_changes_once
from warehouse.settings import Settings

#: transformWithState keeps several state variables and timers per key in column families, which only the
#: RocksDB provider has (the default HDFS-backed one fails the query at its first batch).
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def use_rocksdb(spark: SparkSession) -> None:
    """Make RocksDB the state store of the queries started next on this session.

    Set here, right before the keyed queries are built, rather than in the session factory: it is a
    runtime SQL setting read when a query starts, and Spark records it in the checkpoint's offset log, so
    a restarted query keeps the provider its state was written with whatever the session says later. The
    other streams keep no Spark state, so the setting changes nothing for them.
    """
    spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)


# --- distinct URLs -----------------------------------------------------------------------------------

UNIQUE_URL_ROWS = StructType(
    [
        *GOLD_UNIQUE_URLS.schema.fields,
        # Per-user emission counter: the newest of a user's rows within one batch wins.
        StructField("emitted", LongType(), False),
    ]
)


def distinct_url_counts(events: DataFrame, settings: Settings) -> DataFrame:
    """source (silver.events) → watermark → clicks with a url → key by user_id → distinct URLs over 24 h.

    A streaming DataFrame of count changes (``UNIQUE_URL_ROWS``), for ``write_unique_urls``.
    """
    use_rocksdb(events.sparkSession)
    clicks = (
        events.withWatermark("event_time", f"{settings.watermarks.delay_seconds} seconds")
        .where((F.col("event_type") == "click") & F.col("url").isNotNull())
        .select("user_id", "event_time", "url")
    )
    return clicks.groupBy("user_id").transformWithState(
        DistinctUrlCounter(), UNIQUE_URL_ROWS, outputMode="Append", timeMode="EventTime"
    )


def write_unique_urls(changes: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """MERGE one micro-batch of count changes into ``gold.unique_urls`` (each user's newest), exactly once."""
    # Materialized even when empty: the stateful operator only runs (fires timers, commits its state
    # version) when the batch is computed, and it must be computed once (a second run repeats the work).
    with materialized(changes) as rows:
        newest = Window.partitionBy("user_id").orderBy(F.col("emitted").desc())
        latest = rows.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1")
        emitted, users, expired = rows.agg(
            F.count("*"), F.count_distinct("user_id"), F.count_if(F.col("urls_in_state") == 0)
        ).first()
        if users:
            merge_changes_once(
                latest.select(*GOLD_UNIQUE_URLS.column_names),
                GOLD_UNIQUE_URLS.path(settings),
                writer_id,
                batch_id,
                _COUNTS,
            )
    return {"rows_written": users, "count_changes": emitted, "users_expired": expired}


#: A user's newest count replaces the stored one.
_COUNTS = MergeSpec(
    "t.user_id = s.user_id",
    update={name: f"s.{name}" for name in GOLD_UNIQUE_URLS.column_names if name != "user_id"},
    insert={name: f"s.{name}" for name in GOLD_UNIQUE_URLS.column_names},
)


# --- fraud alerts ------------------------------------------------------------------------------------


def fraud_alerts(events: DataFrame, settings: Settings) -> DataFrame:
    """source (silver.events) → watermark → purchases → key by user_id → rules on arrival → alerts.

    A streaming DataFrame of new alerts (``gold.fraud_alerts``' columns), for ``write_fraud_alerts``.
    """
    use_rocksdb(events.sparkSession)
    purchases = (
        events.withWatermark("event_time", f"{settings.watermarks.delay_seconds} seconds")
        .where(F.col("event_type") == "purchase")
        .select("user_id", "event_id", "event_time", "amount", "ingest_time", "silver_batch", "source_position")
    )
    return purchases.groupBy("user_id").transformWithState(
        FraudDetector(), GOLD_FRAUD_ALERTS.schema, outputMode="Append", timeMode="EventTime"
    )


def write_fraud_alerts(alerts: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Append one micro-batch of alerts to ``gold.fraud_alerts``, exactly once."""
    with materialized(alerts) as rows:
        written, large, burst = rows.agg(
            F.count("*"), F.count_if(F.col("rule") == LARGE_AMOUNT), F.count_if(F.col("rule") == BURST)
        ).first()
        if written:
            append_once(rows, settings, GOLD_FRAUD_ALERTS, writer_id, batch_id)
    return {"rows_written": written, LARGE_AMOUNT: large, BURST: burst}
