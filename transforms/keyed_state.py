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
- ``gold.fraud_alerts``: per user, the purchases of the last hour of event time (a ListState). Each new
  purchase is judged on arrival, in arrival order, against the user's purchases that arrived before it:
  ``large_amount`` (≥ 10x the mean of those in ``[t - 1 h, t]``) and ``burst`` (3 or more within 60 s,
  once per episode: not when one of the purchases it bursts with was in a burst already). A purchase is
  evicted once the watermark passes ``event time + 1 h`` (one timer per user, at the earliest such instant),
  when no later purchase that is not late can need it.

Spark 4.1 refuses state TTL in ``EventTime`` mode (``STATEFUL_PROCESSOR_INCORRECT_TIME_MODE_TO_ASSIGN_TTL``:
TTL is processing time, for ``ProcessingTime`` mode only), so no state variable here has one: each key's
event-time timer, at its earliest entry's expiry, bounds the state to the horizon behind the watermark.

Never imports Dagster; the processors run in Spark's Python workers, which import this module.
"""

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
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

from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS
from warehouse.delta import MergeSpec, append_once, materialized, merge_changes_once
from warehouse.settings import Settings

#: A URL counts for 24 hours of event time after its last click.
URL_HORIZON = timedelta(hours=24)
#: large_amount compares a purchase with the mean of the user's purchases in the hour of event time up to it.
MEAN_HORIZON = timedelta(hours=1)
LARGE_FACTOR = 10
#: Expired purchases leave a user's list on a grid of event time this wide: the list is rewritten at most
#: once a step, and the batches between only append to it, so retained state versions share their files.
EVICTION_STEP = timedelta(minutes=10)
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


def eviction_timer(earliest_micros: int) -> int:
    """The timer (ms) that evicts a purchase made at ``earliest_micros``: the first step of the eviction grid
    at or after its expiry (event time + ``MEAN_HORIZON``)."""
    step = _horizon_micros(EVICTION_STEP) // 1000
    return -(-timer_ms(earliest_micros + _horizon_micros(MEAN_HORIZON)) // step) * step


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
        horizon = _horizon_micros(URL_HORIZON)
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
        horizon = _horizon_micros(URL_HORIZON)
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


#: How far ``PurchaseHistory`` scans the arrival flags for a neighbour before asking the Fenwick tree.
_SCAN = 64


class PurchaseHistory:
    """One user's purchases for one batch, sorted once by event time (then event id): those kept in state,
    which have all arrived, and the batch's own, which arrive one at a time (``arrive``) in arrival order.

    Two Fenwick trees over that order count the arrived purchases and sum their cents, so the hour before a
    purchase and its neighbours in event time are O(log n) look-ups: a hot user costs its purchases times
    log n per batch, not their square. ``steps`` counts the trees' steps (the cost, for the tests).
    """

    def __init__(self, kept: Sequence[Purchase] = (), coming: Sequence[Purchase] = ()) -> None:
        everything = [*kept, *coming]
        order = sorted(range(len(everything)), key=lambda i: (everything[i].at, everything[i].event_id))
        self._order = [everything[i] for i in order]
        self._times = [p.at for p in self._order]
        rank = [0] * len(everything)
        for r, i in enumerate(order):
            rank[i] = r
        self._coming = rank[len(kept) :]
        size = self._size = len(everything)
        self._arrived = bytearray(size)
        self._count = [0] * (size + 1)
        self._cents = [0] * (size + 1)
        for r in rank[: len(kept)]:
            self._arrived[r] = 1
            self._count[r + 1] = 1
            self._cents[r + 1] = self._order[r].cents
        for i in range(1, size + 1):  # the trees built in one pass
            j = i + (i & -i)
            if j <= size:
                self._count[j] += self._count[i]
                self._cents[j] += self._cents[i]
        self._top = 1 << (size.bit_length() - 1) if size else 0
        self.arrived = len(kept)
        self.steps = 0

    @property
    def earliest(self) -> int | None:
        """The earliest event time of the user's purchases, kept or coming (µs), or None."""
        return self._times[0] if self._times else None

    def arrive(self, n: int) -> list[Finding]:
        """Judge the batch's ``n``-th purchase against those arrived before it, then count it as arrived."""
        r = self._coming[n]
        purchase = self._order[r]
        findings = []
        large = self._large_amount(r, purchase)
        if large is not None:
            findings.append(large)
        burst = self._burst(r)
        if burst is not None:
            findings.append(Finding(BURST, burst))
        self._mark(r, purchase.cents)
        return findings

    def _large_amount(self, r: int, purchase: Purchase) -> Finding | None:
        low = bisect_left(self._times, purchase.at - _horizon_micros(MEAN_HORIZON))
        high = bisect_right(self._times, purchase.at)
        count_high, total_high = self._prefix(high)
        count_low, total_low = self._prefix(low)
        count, total = count_high - count_low, total_high - total_low
        if not count or total <= 0 or purchase.cents * count < LARGE_FACTOR * total:
            return None
        mean = (Decimal(total) / count).scaleb(-2).quantize(Decimal("0.0001"), ROUND_HALF_EVEN)
        # The evidence is output: listing it costs its length, once per alert.
        evidence = tuple(self._order[i].event_id for i in range(low, high) if self._arrived[i] or i == r)
        return Finding(LARGE_AMOUNT, evidence, mean)

    def _burst(self, r: int) -> tuple[str, ...] | None:
        """The evidence of a burst episode ``r`` starts, or None (no burst, or one it only continues).

        In the event-time order of the arrived purchases and ``r``, a burst is three consecutive purchases
        within ``BURST_SPAN`` (any 60 s holding three holds three consecutive ones). ``r`` starts an episode
        when it is in such a triple and none of the purchases of its triples was in a triple of the arrived
        ones already (their bursts touch: the same episode, alerted when it started).
        """
        back, ahead = self._walk(r, -1, 2), self._walk(r, 1, 2)
        around = [*reversed(back), r, *ahead]
        at = len(back)
        triples = [around[s : s + 3] for s in range(at - 2, at + 1) if s >= 0 and s + 2 < len(around)]
        triples = [t for t in triples if self._tight(t[0], t[2])]
        if not triples:
            return None
        members = {i for t in triples for i in t if i != r}
        further_back = self._walk(back[-1], -1, 2) if len(back) == 2 else []
        further_ahead = self._walk(ahead[-1], 1, 2) if len(ahead) == 2 else []
        arrived = [*reversed(back + further_back), *ahead, *further_ahead]
        for q, i in enumerate(arrived):
            if i in members:
                for s in range(max(0, q - 2), min(q, len(arrived) - 3) + 1):
                    if self._tight(arrived[s], arrived[s + 2]):
                        return None
        return tuple(self._order[i].event_id for i in triples[0])

    def _tight(self, first: int, third: int) -> bool:
        return self._times[third] - self._times[first] <= _horizon_micros(BURST_SPAN)

    def _walk(self, r: int, direction: int, wanted: int) -> list[int]:
        """Up to ``wanted`` arrived purchases next to rank ``r`` in event time, nearest first."""
        found: list[int] = []
        while len(found) < wanted:
            # Arrivals come nearly in event-time order, so a neighbour is almost always a few flags away;
            # the tree bounds the rest (a batch arriving backwards in time) to O(log n).
            if direction < 0:
                i = self._arrived.rfind(1, max(0, r - _SCAN), r)
                if i < 0 and r > _SCAN:
                    before = self._prefix(r)[0]
                    i = self._kth(before - 1) if before else -1
            else:
                i = self._arrived.find(1, r + 1, r + 1 + _SCAN)
                if i < 0 and r + 1 + _SCAN < self._size:
                    upto = self._prefix(r + 1)[0]
                    i = self._kth(upto) if upto < self.arrived else -1
            if i < 0:
                break
            found.append(i)
            r = i
        return found

    def _prefix(self, r: int) -> tuple[int, int]:
        """Arrived purchases among the first ``r`` ranks: how many, and their cents."""
        count = cents = steps = 0
        while r > 0:
            count += self._count[r]
            cents += self._cents[r]
            r &= r - 1
            steps += 1
        self.steps += steps
        return count, cents

    def _kth(self, k: int) -> int:
        """The rank of the ``k``-th arrived purchase (from 0) in event-time order."""
        position, step, steps = 0, self._top, 0
        while step:
            following = position + step
            if following <= self._size and self._count[following] <= k:
                position = following
                k -= self._count[following]
            step >>= 1
            steps += 1
        self.steps += steps
        return position

    def _mark(self, r: int, cents: int) -> None:
        self._arrived[r] = 1
        self.arrived += 1
        i, steps = r + 1, 0
        while i <= self._size:
            self._count[i] += 1
            self._cents[i] += cents
            i += i & -i
            steps += 1
        self.steps += steps


def judge_purchase(purchase: Purchase, earlier: Sequence[Purchase]) -> list[Finding]:
    """The rules ``purchase`` breaks, judged against the user's purchases that arrived before it.

    - ``large_amount``: amount ≥ 10 x the mean of the earlier purchases with event time in ``[t - 1 h, t]``;
      needs at least one, and a positive sum (a mean of zero or less makes every amount "large").
    - ``burst``: with it, 3 or more purchases fall within 60 s of event time (a span of exactly 60 s counts),
      and none of the purchases it makes them with was in such a burst before: one alert per episode.
    """
    return PurchaseHistory(earlier, [purchase]).arrive(0)


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
    """Per user: the purchases of the last hour of event time (a ListState), and one timer at the earliest
    one's expiry (event time + 1 h) rounded up to the ``EVICTION_STEP`` grid. Judges each new purchase on
    arrival.

    A batch loads the list once (O(state)), judges its purchases in O(log n) each (``PurchaseHistory``) and
    appends them. When the timer fires, every purchase whose expiry the watermark has passed goes in one
    pass, and the timer moves to the grid step after the next expiry: a batch costs O(batch log n + state)
    per user, and the list is rewritten once a step (a timer per expiry would rewrite it nearly every batch
    once the first hour has passed, and every retained state version would carry a copy of the store).
    Purchases kept past their expiry until the step change no verdict: every purchase judged later is at or
    after the watermark, more than an hour after them.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.purchases = handle.getListState("purchases", "event_id string, at long, cents long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        detected_at = instant(timerValues.getCurrentProcessingTimeInMs() * 1000)
        arriving = sorted(rows, key=arrival_key)
        coming = [Purchase(row.event_id, micros(row.event_time), int(row.amount * 100)) for row in arriving]
        history = PurchaseHistory([Purchase(*kept) for kept in self.purchases.get()], coming)
        alerts = [
            _alert(key[0], row, finding, detected_at) for n, row in enumerate(arriving) for finding in history.arrive(n)
        ]
        self.purchases.appendList([(p.event_id, p.at, p.cents) for p in coming])
        earliest = history.earliest
        _keep_one_timer(self.handle, None if earliest is None else eviction_timer(earliest))
        return iter(alerts)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        # Safe to forget: a purchase not dropped as late from now on is after the watermark, which is past
        # each expiry evicted here, so more than an hour after every purchase evicted here. Spark fires every
        # timer at or before the watermark in this batch anyway: evicting up to it is the same, in one pass.
        passed = max(expiredTimerInfo.getExpiryTimeInMs(), timerValues.getCurrentWatermarkInMs())
        horizon = _horizon_micros(MEAN_HORIZON)
        held = [tuple(p) for p in self.purchases.get()]
        kept = sorted((p for p in held if timer_ms(p[1] + horizon) > passed), key=lambda p: (p[1], p[0]))
        if not kept:
            self.purchases.clear()
        elif len(kept) < len(held):
            self.purchases.put(kept)
        _keep_one_timer(self.handle, eviction_timer(kept[0][1]) if kept else None, passed)
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
