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
  counts at instant T while its last click is in ``(T - 24 h, T]``; a timer at ``last click + 24 h`` takes
  it out when the watermark passes that instant, and the count is re-emitted (down to 0).
- ``gold.fraud_alerts``: per user, the purchases of the last hour of event time (a ListState). Each new
  purchase is judged on arrival, in arrival order, against the user's purchases that arrived before it:
  ``large_amount`` (≥ 10x the mean of those in ``[t - 1 h, t]``) and ``burst`` (3 or more within 60 s).
  A timer at ``event time + 1 h`` evicts a purchase once no later purchase that is not late can need it.

Spark 4.1 refuses state TTL in ``EventTime`` mode (``STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL``:
TTL is processing time, for ``ProcessingTime`` mode only), so no state variable here has one: every entry
has an event-time timer, which bounds the state to the horizon of event time behind the watermark.

Never imports Dagster; the processors run in Spark's Python workers, which import this module.
"""

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS
from warehouse.delta import append_once, materialized, merge_once
from warehouse.settings import Settings

#: A URL counts for 24 hours of event time after its last click.
URL_HORIZON = timedelta(hours=24)
#: large_amount compares a purchase with the mean of the user's purchases in the hour of event time up to it.
MEAN_HORIZON = timedelta(hours=1)
LARGE_FACTOR = 10
#: burst: this many purchases within this span of event time (both ends included).
BURST_PURCHASES = 3
BURST_SPAN = timedelta(seconds=60)

LARGE_AMOUNT, BURST = "large_amount", "burst"

#: transformWithState keeps several state variables and timers per key in column families, which only the
#: RocksDB provider has (the default HDFS-backed one fails the query at its first batch).
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS = timedelta(microseconds=1)


def use_rocksdb(spark: SparkSession) -> None:
    """Make RocksDB the state store of the queries started next on this session.

    Set here, right before the keyed queries are built, rather than in the session factory: it is a
    runtime SQL setting read when a query starts, and Spark records it in the checkpoint's offset log, so
    a restarted query keeps the provider its state was written with whatever the session says later. The
    other streams keep no Spark state, so the setting changes nothing for them.
    """
    spark.conf.set(STATE_STORE_PROVIDER, ROCKSDB_PROVIDER)


def micros(moment: datetime) -> int:
    """Event time as microseconds since the epoch (naive datetimes are UTC, as the session is)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROS


def instant(at_micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=at_micros)


def timer_ms(at_micros: int) -> int:
    """A timer for an instant in microseconds: the first millisecond at or after it (timers are ms)."""
    return -(-at_micros // 1000)


def _horizon_micros(span: timedelta) -> int:
    return span // _MICROS


# --- distinct URLs -----------------------------------------------------------------------------------

UNIQUE_URL_ROWS = StructType(
    [
        *GOLD_UNIQUE_URLS.schema.fields,
        # Per-user emission counter: the newest of a user's rows within one batch wins.
        StructField("emitted", LongType(), False),
    ]
)


class DistinctUrlCounter(StatefulProcessor):
    """Per user: URL → last click (event time, µs) and the figures last emitted.

    Emits ``(user_id, unique_urls, window_end, urls_in_state, updated_at, emitted)`` whenever the count or
    the URLs held change: after new clicks (``window_end`` = the user's newest click) and when a URL's
    timer fires (``window_end`` = the later of its expiry instant and the newest click).
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.last_click = handle.getMapState("last_click", "url string", "at long")
        self.shown = handle.getValueState("shown", "unique_urls long, urls_in_state long, newest long, emitted long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        latest: dict[str, int] = {}
        for row in rows:
            at = micros(row.event_time)
            latest[row.url] = max(at, latest.get(row.url, at))
        # One state look-up per URL, not per click: each one is a round trip to the JVM's state store.
        for url, at in latest.items():
            stored = self.last_click.getValue((url,))
            if stored is None or at > stored[0]:
                self.last_click.updateValue((url,), (at,))
        newest = max([self._shown()[2], *latest.values()])
        return self._report(key[0], newest, newest, timerValues)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        fired = expiredTimerInfo.getExpiryTimeInMs()
        horizon = _horizon_micros(URL_HORIZON)
        for (url,), (at,) in list(self.last_click.iterator()):
            if timer_ms(at + horizon) <= fired:
                self.last_click.removeKey((url,))
        newest = self._shown()[2]
        return self._report(key[0], newest, max(newest, fired * 1000), timerValues, fired)

    def _shown(self) -> tuple[int, int, int, int]:
        shown = self.shown.get() if self.shown.exists() else None
        return tuple(shown) if shown is not None else (0, 0, -(2**62), 0)

    def _report(
        self, user: str, newest: int, reference: int, values: TimerValues, firing: int | None = None
    ) -> Iterator[Row]:
        """Count at ``reference``, keep one timer per distinct expiry instant, emit when something changed."""
        horizon = _horizon_micros(URL_HORIZON)
        clicks = [at for _, (at,) in self.last_click.iterator()]
        count = sum(1 for at in clicks if at > reference - horizon)
        wanted = {timer_ms(at + horizon) for at in clicks}
        registered = set(self.handle.listTimers()) - {firing}
        for stale in registered - wanted:
            self.handle.deleteTimer(stale)
        for expiry in wanted - registered - {firing}:
            self.handle.registerTimer(expiry)
        shown_count, shown_held, _, emitted = self._shown()
        if (count, len(clicks)) == (shown_count, shown_held):
            if clicks:
                self.shown.update((shown_count, shown_held, newest, emitted))
            return iter([])
        row = Row(
            user_id=user,
            unique_urls=count,
            window_end=instant(reference),
            urls_in_state=len(clicks),
            updated_at=instant(values.getCurrentProcessingTimeInMs() * 1000),
            emitted=emitted + 1,
        )
        if clicks:
            self.shown.update((count, len(clicks), newest, emitted + 1))
        else:
            # Nothing left for the user: forget it entirely, so idle users cost no state.
            self.shown.clear()
        return iter([row])

    def close(self) -> None:
        pass


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
    spark = changes.sparkSession
    # Materialized even when empty: the stateful operator only runs (fires timers, commits its state
    # version) when the batch is computed, and it must be computed once (a second run repeats the work).
    with materialized(changes) as rows:
        newest = Window.partitionBy("user_id").orderBy(F.col("emitted").desc())
        latest = rows.withColumn("_rank", F.row_number().over(newest)).where("_rank = 1")
        emitted, users, expired = rows.agg(
            F.count("*"), F.count_distinct("user_id"), F.count_if(F.col("urls_in_state") == 0)
        ).first()
        if users:
            merge_once(
                spark,
                writer_id,
                batch_id,
                lambda: _merge_counts(spark, settings, latest.select(*GOLD_UNIQUE_URLS.column_names)),
                target=GOLD_UNIQUE_URLS.path(settings),
            )
    return {"rows_written": users, "count_changes": emitted, "users_expired": expired}


def _merge_counts(spark: SparkSession, settings: Settings, latest: DataFrame) -> None:
    (
        DeltaTable.forPath(spark, str(GOLD_UNIQUE_URLS.path(settings)))
        .alias("t")
        .merge(latest.alias("s"), "t.user_id = s.user_id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


# --- fraud alerts ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Purchase:
    """One purchase as the fraud state keeps it: event time in µs, amount in cents (exact)."""

    event_id: str
    at: int
    cents: int


@dataclass(frozen=True)
class Finding:
    """A rule a purchase broke, with the purchases that show it (trigger included, by event time)."""

    rule: str
    evidence: tuple[str, ...]
    running_mean: Decimal | None = None


class PurchaseHistory:
    """A user's purchases ordered by event time, for range look-ups by event time."""

    def __init__(self, purchases: Sequence[Purchase] = ()) -> None:
        self._order: list[tuple[int, str]] = []
        self._by_id: dict[str, Purchase] = {}
        for purchase in purchases:
            self.add(purchase)

    def add(self, purchase: Purchase) -> None:
        insort(self._order, (purchase.at, purchase.event_id))
        self._by_id[purchase.event_id] = purchase

    def between(self, start: int, end: int) -> list[Purchase]:
        """Purchases with ``start <= at <= end``, by event time (then event id)."""
        low = bisect_left(self._order, (start, ""))
        high = bisect_right(self._order, (end, "\U0010ffff"))
        return [self._by_id[event_id] for _, event_id in self._order[low:high]]


def judge_purchase(purchase: Purchase, earlier: PurchaseHistory) -> list[Finding]:
    """The rules ``purchase`` breaks, judged against the user's purchases that arrived before it.

    - ``large_amount``: amount ≥ 10 x the mean of the earlier purchases with event time in ``[t - 1 h, t]``;
      needs at least one, and a positive sum (a mean of zero or less makes every amount "large").
    - ``burst``: with it, 3 or more purchases fall within 60 s of event time (a span of exactly 60 s counts).
    """
    findings = []
    hour = earlier.between(purchase.at - _horizon_micros(MEAN_HORIZON), purchase.at)
    total = sum(p.cents for p in hour)
    if hour and total > 0 and purchase.cents * len(hour) >= LARGE_FACTOR * total:
        mean = (Decimal(total) / len(hour)).scaleb(-2).quantize(Decimal("0.0001"), ROUND_HALF_EVEN)
        evidence = _by_event_time([*hour, purchase])
        findings.append(Finding(LARGE_AMOUNT, evidence, mean))
    span = _horizon_micros(BURST_SPAN)
    near = sorted([*earlier.between(purchase.at - span, purchase.at + span), purchase], key=lambda p: p.at)
    for start in sorted({p.at for p in near if p.at <= purchase.at}):
        inside = [p for p in near if start <= p.at <= start + span]
        if len(inside) >= BURST_PURCHASES:
            findings.append(Finding(BURST, _by_event_time(inside)))
            break
    return findings


def _by_event_time(purchases: Sequence[Purchase]) -> tuple[str, ...]:
    return tuple(p.event_id for p in sorted(purchases, key=lambda p: (p.at, p.event_id)))


def arrival_key(row: Row) -> tuple:
    """Arrival order of a silver event: silver batch, bronze ingest time, then the line's place in its file
    (landing files are named by arrival stamp) or its Kafka partition and offset (``source_position``)."""
    position = row.source_position or ""
    ingested = micros(row.ingest_time) if row.ingest_time is not None else 0
    if position.startswith("kafka:"):
        head, _, offset = position.rpartition("@")
        topic, _, partition = head.rpartition("/")
        return (row.silver_batch, ingested, topic, int(partition), int(offset))
    path, _, line = position.rpartition("#")
    return (row.silver_batch, ingested, path, -1, int(line) if line.isdigit() else 0)


class FraudDetector(StatefulProcessor):
    """Per user: the purchases of the last hour of event time. Judges each new purchase on arrival."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.purchases = handle.getListState("purchases", "event_id string, at long, cents long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        detected_at = instant(timerValues.getCurrentProcessingTimeInMs() * 1000)
        history = PurchaseHistory([Purchase(*kept) for kept in self.purchases.get()])
        arrived = []
        alerts = []
        for row in sorted(rows, key=arrival_key):
            purchase = Purchase(row.event_id, micros(row.event_time), int(row.amount * 100))
            for finding in judge_purchase(purchase, history):
                alerts.append(_alert(key[0], row, finding, detected_at))
            history.add(purchase)
            arrived.append(purchase)
        self.purchases.appendList([(p.event_id, p.at, p.cents) for p in arrived])
        horizon = _horizon_micros(MEAN_HORIZON)
        for expiry in sorted({timer_ms(p.at + horizon) for p in arrived}):
            self.handle.registerTimer(expiry)
        return iter(alerts)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        # Safe to forget: a purchase not dropped as late from now on is after the watermark, which is past
        # this instant, so more than an hour after every purchase evicted here.
        fired = expiredTimerInfo.getExpiryTimeInMs()
        horizon = _horizon_micros(MEAN_HORIZON)
        kept = [tuple(p) for p in self.purchases.get() if timer_ms(p[1] + horizon) > fired]
        if kept:
            self.purchases.put(kept)
        else:
            self.purchases.clear()
        return iter([])

    def close(self) -> None:
        pass


def _alert(user: str, row: Row, finding: Finding, detected_at: datetime) -> Row:
    return Row(
        alert_id=f"{finding.rule}:{row.event_id}",
        user_id=user,
        rule=finding.rule,
        event_id=row.event_id,
        event_time=row.event_time,
        amount=row.amount,
        running_mean=finding.running_mean,
        triggering_event_ids=list(finding.evidence),
        ingest_time=row.ingest_time,
        detected_at=detected_at,
    )


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
