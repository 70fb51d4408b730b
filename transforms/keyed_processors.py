"""The two stateful processors of ``transforms.keyed_state`` (distinct URLs, fraud alerts) and their helpers.

Their time semantics are told in ``transforms.keyed_state``. This module imports only Python's own modules,
PySpark's and ``transforms.fraud_rules``: Spark's Python processes import it by name, the executors' workers
and, at each run's first batch of a ``transformWithState`` query, a fresh process on the driver that learns
the processor's state variables (decision 76). What it imports, every keyed run pays for.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from transforms.fraud_rules import (
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

#: A URL counts for 24 hours of event time after its last click.
URL_HORIZON = timedelta(hours=24)
#: Expired minutes of purchases leave a user's state on a grid of event time this wide: one timer call
#: and one rewrite of the user's minute totals a step, not one a minute.
EVICTION_STEP = timedelta(minutes=10)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS = timedelta(microseconds=1)


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
