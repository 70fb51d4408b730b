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

Never imports Dagster; the processors run in Spark's Python workers, which import this module.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

from transforms.fraud_rules import (
    BURST,
    LARGE_AMOUNT,
    MEAN_HORIZON,
    MINUTE,
    Finding,
    MinuteTotal,
    Purchase,
    PurchaseHistory,
    minute_of,
    minutes_to_read,
    span_micros,
)
from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS
from warehouse.delta import MergeSpec, append_once, materialized, merge_changes_once
from warehouse.settings import Settings

#: A URL counts for 24 hours of event time after its last click.
URL_HORIZON = timedelta(hours=24)
#: Expired minutes of purchases leave a user's state on a grid of event time this wide: one timer call
#: and one rewrite of the user's minute totals a step, not one a minute.
EVICTION_STEP = timedelta(minutes=10)

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


def eviction_timer(earliest_micros: int) -> int:
    """The timer (ms) that evicts purchases up to ``earliest_micros`` (a minute's last instant): the first
    step of the eviction grid at or after its expiry (event time + ``MEAN_HORIZON``)."""
    step = span_micros(EVICTION_STEP) // 1000
    return -(-timer_ms(earliest_micros + span_micros(MEAN_HORIZON)) // step) * step


def _keep_one_timer(handle: StatefulProcessorHandle, wanted: int | None, passed: int | None = None) -> None:
    """Leave the key exactly one timer, at ``wanted`` (ms), or none. Timers at or before ``passed`` are
    firing in this batch and left to Spark, which deletes each after its call."""
    registered = [t for t in handle.listTimers() if passed is None or t > passed]
    for stale in registered:
        if stale != wanted:
            handle.deleteTimer(stale)
    if wanted is not None and wanted not in registered:
        handle.registerTimer(wanted)


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
    the URLs held change: after new clicks (``window_end`` = the user's newest click) and when the user's
    timer fires (``window_end`` = the later of the newest click and the latest expiry the watermark passed).
    One timer per user, at its earliest expiry: a batch costs one pass over the user's URLs for its clicks
    and one for its timer, however many URLs expire in it.
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
        # Spark fires every timer at or before the watermark in this batch: take out every URL whose expiry
        # it has passed in one pass, and count at the latest of those expiries (what the last of one timer
        # per expiry would have reported).
        fired = expiredTimerInfo.getExpiryTimeInMs()
        passed = max(fired, timerValues.getCurrentWatermarkInMs())
        horizon = span_micros(URL_HORIZON)
        lowered = fired
        for (url,), (at,) in list(self.last_click.iterator()):
            expiry = timer_ms(at + horizon)
            if expiry <= passed:
                self.last_click.removeKey((url,))
                lowered = max(lowered, expiry)
        newest = self._shown()[2]
        return self._report(key[0], newest, max(newest, lowered * 1000), timerValues, passed)

    def _shown(self) -> tuple[int, int, int, int]:
        shown = self.shown.get() if self.shown.exists() else None
        return tuple(shown) if shown is not None else (0, 0, -(2**62), 0)

    def _report(
        self, user: str, newest: int, reference: int, values: TimerValues, passed: int | None = None
    ) -> Iterator[Row]:
        """Count at ``reference``, keep one timer at the earliest expiry, emit when something changed.

        One pass over the user's URLs (O(state)), once per batch for its clicks and once for its timer.
        """
        horizon = span_micros(URL_HORIZON)
        clicks = [at for _, (at,) in self.last_click.iterator()]
        count = sum(1 for at in clicks if at > reference - horizon)
        _keep_one_timer(self.handle, timer_ms(min(clicks) + horizon) if clicks else None, passed)
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
    """Per user: the purchases of the last hour of event time by minute of event time (a MapState from the
    minute's start to its purchases), each minute's count and cents (one ValueState), and one timer at the
    earliest minute's expiry (its end + 1 h) rounded up to the ``EVICTION_STEP`` grid. Judges each new
    purchase on arrival.

    A batch reads the minute totals, and whole only the minutes its purchases can see in detail (the two
    minutes either side of each, and the one holding its ``t - 1 h``; ``fraud_rules.minutes_to_read``); the
    hour's other minutes weigh in as totals, and a ``large_amount`` alert reads them for its evidence. It
    writes back only the minutes its purchases fall in. So a batch costs the minutes around its purchases,
    not the user's hour, and the store's versions differ by those minutes.

    When the timer fires, every minute whose expiry the watermark has passed leaves (a removal each) and the
    timer moves to the grid step after the next expiry. Minutes kept past their expiry until the step change
    no verdict: every purchase judged later is at or after the watermark, more than an hour after them.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.minutes = handle.getValueState("minutes", "starts array<long>, counts array<long>, cents array<long>")
        self.by_minute = handle.getMapState(
            "by_minute", "start long", "event_ids array<string>, ats array<long>, cents array<long>"
        )
        # Checkpoints written before the minutes (stop 44) hold a user's purchases in one list: each user's
        # list moves into minutes at the user's next batch or timer, so no verdict loses a kept purchase.
        self.listed = handle.getListState("purchases", "event_id string, at long, cents long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        detected_at = instant(timerValues.getCurrentProcessingTimeInMs() * 1000)
        arriving = sorted(rows, key=arrival_key)
        coming = [Purchase(row.event_id, micros(row.event_time), int(row.amount * 100)) for row in arriving]
        totals = self._totals()
        self._adopt_list(totals)
        read = {start: self._minute(start) for start in sorted(minutes_to_read(coming, totals))}
        history = PurchaseHistory(
            [kept for minute in read.values() for kept in minute],
            coming,
            [MinuteTotal(start, *totals[start]) for start in sorted(totals) if start not in read],
            self._minute,
        )
        alerts = [
            _alert(key[0], row, finding, detected_at) for n, row in enumerate(arriving) for finding in history.arrive(n)
        ]
        # Each coming purchase's own minute, if held, was read whole (``minutes_to_read``), so the minute
        # written back is the kept purchases plus the new ones.
        written: dict[int, list[Purchase]] = {}
        for purchase in coming:
            start = minute_of(purchase.at)
            written.setdefault(start, list(read.get(start, ()))).append(purchase)
        for start, minute in written.items():
            self._write_minute(start, minute, totals)
        self._keep(totals)
        return iter(alerts)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        # Safe to forget: a purchase not dropped as late from now on is after the watermark, which is past
        # each minute's expiry here, so more than an hour after every purchase of those minutes. Spark fires
        # every timer at or before the watermark in this batch anyway: evicting up to it is the same.
        passed = max(expiredTimerInfo.getExpiryTimeInMs(), timerValues.getCurrentWatermarkInMs())
        totals = self._totals()
        self._adopt_list(totals)
        horizon = span_micros(MEAN_HORIZON)
        for start in [start for start in totals if timer_ms(_minute_end(start) + horizon) <= passed]:
            self.by_minute.removeKey((start,))
            del totals[start]
        self._keep(totals, passed)
        return iter([])

    def _totals(self) -> dict[int, tuple[int, int]]:
        """The minutes held: start (µs) → (purchases, cents)."""
        if not self.minutes.exists():
            return {}
        starts, counts, cents = self.minutes.get()
        return {start: (count, total) for start, count, total in zip(starts, counts, cents, strict=True)}

    def _adopt_list(self, totals: dict[int, tuple[int, int]]) -> None:
        """Move a list-state checkpoint's purchases of this user into their minutes (and ``totals``)."""
        if not self.listed.exists():
            return
        listed: dict[int, list[Purchase]] = {}
        for kept in self.listed.get():
            purchase = Purchase(*kept)
            listed.setdefault(minute_of(purchase.at), []).append(purchase)
        for start, purchases in listed.items():
            self._write_minute(start, [*self._minute(start), *purchases], totals)
        self.listed.clear()

    def _write_minute(self, start: int, minute: list[Purchase], totals: dict[int, tuple[int, int]]) -> None:
        self.by_minute.updateValue(
            (start,), ([p.event_id for p in minute], [p.at for p in minute], [p.cents for p in minute])
        )
        totals[start] = (len(minute), sum(p.cents for p in minute))

    def _minute(self, start: int) -> list[Purchase]:
        held = self.by_minute.getValue((start,))
        return [Purchase(*kept) for kept in zip(*held, strict=True)] if held is not None else []

    def _keep(self, totals: dict[int, tuple[int, int]], passed: int | None = None) -> None:
        """Store the minute totals and leave one timer at the earliest minute's eviction (none if none)."""
        if not totals:
            self.minutes.clear()
            _keep_one_timer(self.handle, None, passed)
            return
        starts = sorted(totals)
        self.minutes.update((starts, [totals[s][0] for s in starts], [totals[s][1] for s in starts]))
        _keep_one_timer(self.handle, eviction_timer(_minute_end(starts[0])), passed)

    def close(self) -> None:
        pass


def _minute_end(start: int) -> int:
    """The last instant (µs) of the minute starting at ``start``."""
    return start + span_micros(MINUTE) - 1


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
