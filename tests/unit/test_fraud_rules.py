"""The keyed-state rules of ``transforms/keyed_state.py`` without Spark: fraud alerts and distinct URLs.

The rules (module docstring, docs/decisions.md 34):

- ``large_amount``: a purchase of at least 10x the mean of the user's earlier-arrived purchases with event
  time in ``[t - 1 h, t]``; needs one, and a positive sum; the mean is reported to 4 places, half-even.
- ``burst``: with it, 3 or more purchases within 60 s of event time (exactly 60 s counts).
- Purchases are judged on arrival, in arrival order (silver batch, ingest time, file and line or Kafka
  partition and offset), and evicted by an event-time timer at ``event time + 1 h`` (timers are whole
  milliseconds: the first one at or after the instant).
- A URL counts at instant T while its last click is in ``(T - 24 h, T]``; a timer at ``last click + 24 h``
  removes it; the count is emitted whenever it or the number of URLs held changes.

tests/test_keyed_state.py runs both processors in Spark; here the same processors run against an
in-memory stand-in for Spark's state handle (the state variables and timers are all they touch), and the
pure helpers (``judge_purchase``, ``PurchaseHistory``, the time conversions, ``arrival_key``) are checked
at their boundaries. Every expected value is worked out by hand.
"""

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from transforms.keyed_state import (
    BURST,
    BURST_PURCHASES,
    BURST_SPAN,
    LARGE_AMOUNT,
    LARGE_FACTOR,
    MEAN_HORIZON,
    URL_HORIZON,
    DistinctUrlCounter,
    FraudDetector,
    Purchase,
    PurchaseHistory,
    arrival_key,
    instant,
    judge_purchase,
    micros,
    timer_ms,
)

SECOND = 1_000_000  # µs
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
#: 2024-01-01T12:00:00Z in µs since the epoch (2024-01-01T00:00:00Z is 1704067200 s).
NOON = (1_704_067_200 + 12 * 3600) * SECOND
#: The processing time of the batches below (ms), as Spark's TimerValues hands it over.
BATCH_MS = 1_795_613_000_000


def test_the_rules_constants_are_the_documented_ones() -> None:
    assert timedelta(hours=24) == URL_HORIZON
    assert timedelta(hours=1) == MEAN_HORIZON
    assert timedelta(seconds=60) == BURST_SPAN
    assert LARGE_FACTOR == 10
    assert BURST_PURCHASES == 3
    assert LARGE_AMOUNT == "large_amount"
    assert BURST == "burst"


# --- time conversions ------------------------------------------------------------------------------------


def test_micros_and_instant() -> None:
    assert micros(datetime(2024, 1, 1, 12, tzinfo=UTC)) == NOON
    assert micros(datetime(2024, 1, 1, 12)) == NOON  # naive datetimes are UTC, as the session is
    assert micros(datetime(2024, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))) == NOON
    assert micros(datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)) == 1
    assert micros(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == -1
    assert instant(NOON + 1) == datetime(2024, 1, 1, 12, 0, 0, 1, tzinfo=UTC)
    assert instant(-1) == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.mark.parametrize(
    ("at_micros", "ms"),
    [(0, 0), (1, 1), (999, 1), (1000, 1), (1001, 2), (-1, 0), (-999, 0), (-1000, -1), (-1001, -1)],
)
def test_a_timer_is_the_first_millisecond_at_or_after_the_instant(at_micros: int, ms: int) -> None:
    assert timer_ms(at_micros) == ms


# --- PurchaseHistory ---------------------------------------------------------------------------------------


def test_between_is_inclusive_at_both_ends_and_ordered_by_event_time_then_id() -> None:
    history = PurchaseHistory(
        [Purchase("d", 20, 1), Purchase("c", 10, 1), Purchase("a", 0, 1), Purchase("b", 10, 1), Purchase("", 10, 1)]
    )
    ids = lambda found: [p.event_id for p in found]  # noqa: E731
    assert ids(history.between(10, 10)) == ["", "b", "c"]  # even an empty id sorts inside the range
    assert ids(history.between(0, 9)) == ["a"]
    assert ids(history.between(11, 19)) == []
    assert ids(history.between(-5, 100)) == ["a", "", "b", "c", "d"]
    assert ids(history.between(20, 10)) == []
    history.add(Purchase("e", 5, 1))
    assert ids(history.between(0, 10)) == ["a", "e", "", "b", "c"]


# --- judge_purchase ----------------------------------------------------------------------------------------


def p(event_id: str, seconds: float, amount: str) -> Purchase:
    """A purchase ``seconds`` after noon of ``amount`` (exact, in cents)."""
    return Purchase(event_id, NOON + round(seconds * SECOND), int(Decimal(amount) * 100))


def judge(new: Purchase, *earlier: Purchase) -> list[tuple]:
    return [(f.rule, f.evidence, f.running_mean) for f in judge_purchase(new, PurchaseHistory(earlier))]


def test_a_first_purchase_breaks_no_rule() -> None:
    assert judge(p("x", 0, "100000.00")) == []


def test_large_amount_at_exactly_ten_times_the_mean() -> None:
    l1, l2 = p("l1", -40 * 60, "10.00"), p("l2", -20 * 60, "30.00")
    # mean (10 + 30) / 2 = 20.00; 200.00 is exactly 10x
    assert judge(p("l3", 0, "200.00"), l1, l2) == [(LARGE_AMOUNT, ("l1", "l2", "l3"), Decimal("20.0000"))]
    assert judge(p("l3", 0, "199.99"), l1, l2) == []


def test_large_amount_compares_with_the_exact_mean_not_a_rounded_one() -> None:
    earlier = (p("a", -30 * 60, "1.00"), p("b", -20 * 60, "1.01"), p("c", -10 * 60, "1.01"))
    # mean 3.02 / 3 = 1.00666…: 10x is 10.0666…, so 10.07 is large and 10.06 is not (the mean rounded to
    # 1.0067 would give 10.067, the same answer here; rounded to cents, 1.01 → 10.10 would miss 10.07).
    assert judge(p("x", 0, "10.07"), *earlier) == [(LARGE_AMOUNT, ("a", "b", "c", "x"), Decimal("1.0067"))]
    assert judge(p("x", 0, "10.06"), *earlier) == []


@pytest.mark.parametrize(
    ("cents", "new", "mean"),
    [
        # 1 cent over 8 purchases: 0.00125 → 0.0012 (half to even); 0.02 x 8 = 0.16 >= 10 x 0.01
        ((1, 0, 0, 0, 0, 0, 0, 0), "0.02", Decimal("0.0012")),
        # 3 cents over 8: 0.00375 → 0.0038 (half to even); 0.04 x 8 = 0.32 >= 0.30
        ((1, 1, 1, 0, 0, 0, 0, 0), "0.04", Decimal("0.0038")),
    ],
)
def test_the_running_mean_is_kept_to_four_places_half_to_even(cents: tuple[int, ...], new: str, mean: Decimal) -> None:
    # Five minutes apart within the hour: no burst.
    earlier = [Purchase(f"e{i}", NOON - (50 - 5 * i) * MINUTE, c) for i, c in enumerate(cents)]
    found = judge(p("x", 0, new), *earlier)
    assert found == [(LARGE_AMOUNT, (*(e.event_id for e in earlier), "x"), mean)]
    assert str(found[0][2]) == str(mean)  # four places, as gold stores it


def test_the_hour_is_event_time_t_minus_one_hour_to_t_both_included() -> None:
    h1 = p("h1", -3600, "5.00")
    assert judge(p("h2", 0, "50.00"), h1) == [(LARGE_AMOUNT, ("h1", "h2"), Decimal("5.0000"))]
    # A microsecond later the earlier purchase is out of the hour: nothing to compare with.
    assert judge(Purchase("h2", NOON + 1, 5000), h1) == []


def test_only_earlier_event_times_make_the_mean() -> None:
    # Arrived before, but later in event time: not in [t - 1 h, t].
    assert judge(p("x", 0, "10.00"), p("later", 1, "1.00")) == []
    # At the same instant it is in the hour; evidence is ordered by event time, then id.
    assert judge(p("a", 0, "10.00"), p("b", 0, "1.00")) == [(LARGE_AMOUNT, ("a", "b"), Decimal("1.0000"))]


@pytest.mark.parametrize(
    "earlier",
    [
        ("0.00",),  # a mean of zero would make every amount large
        ("1.00", "-1.00"),  # a sum of zero
        ("1.00", "-2.00"),  # a negative sum
    ],
)
def test_no_large_amount_without_a_positive_sum(earlier: tuple[str, ...]) -> None:
    history = [p(f"e{i}", -600 * (i + 1), amount) for i, amount in enumerate(earlier)]
    assert judge(p("x", 0, "1000.00"), *history) == []


def test_a_refund_is_never_large() -> None:
    assert judge(p("x", 0, "-100.00"), p("a", -600, "1.00")) == []


def test_burst_three_within_exactly_sixty_seconds() -> None:
    assert judge(p("b3", 60, "1.00"), p("b1", 0, "1.00"), p("b2", 30, "1.00")) == [(BURST, ("b1", "b2", "b3"), None)]
    # Spread over 61 s: none.
    assert judge(p("s3", 61, "1.00"), p("s1", 0, "1.00"), p("s2", 30, "1.00")) == []
    # A microsecond over 60 s: none.
    assert judge(Purchase("s3", NOON + MINUTE + 1, 100), p("s1", 0, "1.00"), p("s2", 30, "1.00")) == []


def test_two_purchases_are_no_burst() -> None:
    assert judge(p("b2", 1, "1.00"), p("b1", 0, "1.00")) == []


def test_a_fourth_purchase_in_a_burst_is_a_burst_too() -> None:
    a, b, c = p("a", 0, "1.00"), p("b", 20, "1.00"), p("c", 40, "1.00")
    assert judge(p("d", 50, "1.00"), a, b, c) == [(BURST, ("a", "b", "c", "d"), None)]
    # At 70 s: a (0 s) is more than 60 s before; b, c, d are within [20 s, 80 s].
    assert judge(p("d", 70, "1.00"), a, b, c) == [(BURST, ("b", "c", "d"), None)]
    # At 100 s only c (40 s) is within 60 s: two purchases.
    assert judge(p("d", 100, "1.00"), a, b, c) == []
    # Five within the minute: every one of them is evidence, from the earliest.
    assert judge(p("e", 60, "1.00"), a, b, c, p("d", 50, "1.00")) == [(BURST, ("a", "b", "c", "d", "e"), None)]


def test_a_burst_may_lie_after_the_purchase_in_event_time() -> None:
    # x is the earliest of the three: the window [0 s, 60 s] starts at x.
    assert judge(p("x", 0, "1.00"), p("b", 30, "1.00"), p("c", 60, "1.00")) == [(BURST, ("x", "b", "c"), None)]
    assert judge(p("x", 0, "1.00"), p("b", 30, "1.00"), Purchase("c", NOON + MINUTE + 1, 100)) == []


def test_out_of_order_arrivals_complete_a_burst() -> None:
    # Arrival order o1 (12:02), o2 (12:01), o3 (12:01:30): o3 completes [12:01, 12:02].
    o1, o2 = p("o1", 120, "1.00"), p("o2", 60, "1.00")
    assert judge(p("o3", 90, "1.00"), o1, o2) == [(BURST, ("o2", "o3", "o1"), None)]
    # o1 at 12:02:01: [12:01, 12:02] holds o2 and o3, [12:01:30, 12:02:30] o3 and o1: no three.
    assert judge(p("o3", 90, "1.00"), p("o1", 121, "1.00"), o2) == []


def test_a_burst_at_one_instant_orders_its_evidence_by_id() -> None:
    assert judge(p("m", 0, "1.00"), p("z", 0, "1.00"), p("a", 0, "1.00")) == [(BURST, ("a", "m", "z"), None)]


def test_both_rules_at_once_large_amount_first() -> None:
    a, b = p("a", 0, "1.00"), p("b", 30, "1.00")
    assert judge(p("c", 60, "20.00"), a, b) == [
        (LARGE_AMOUNT, ("a", "b", "c"), Decimal("1.0000")),
        (BURST, ("a", "b", "c"), None),
    ]


# --- arrival order ---------------------------------------------------------------------------------------


def event_row(event_id: str, position: str | None, silver_batch: int = 3, ingested: datetime | None = None) -> Row:
    return Row(
        event_id=event_id,
        silver_batch=silver_batch,
        ingest_time=ingested if ingested is not None else datetime(2024, 1, 1, 13, tzinfo=UTC),
        source_position=position,
    )


def arrival(*rows: Row) -> list[str]:
    return [row.event_id for row in sorted(rows, key=arrival_key)]


def test_arrival_order_within_a_file_is_by_line_number() -> None:
    rows = [event_row("ten", "file:/landing/a.jsonl#10"), event_row("two", "file:/landing/a.jsonl#2")]
    assert arrival(*rows) == ["two", "ten"]  # numbers, not text ("10" < "2")


def test_arrival_order_of_kafka_is_partition_then_offset() -> None:
    rows = [
        event_row("p1-10", "kafka:events/1@10"),
        event_row("p1-9", "kafka:events/1@9"),
        event_row("p0-99", "kafka:events/0@99"),
        event_row("p10-0", "kafka:events/10@0"),
        event_row("p2-0", "kafka:events/2@0"),
    ]
    assert arrival(*rows) == ["p0-99", "p1-9", "p1-10", "p2-0", "p10-0"]


def test_arrival_order_is_silver_batch_then_ingest_time_then_position() -> None:
    early, late = datetime(2024, 1, 1, 13, tzinfo=UTC), datetime(2024, 1, 1, 14, tzinfo=UTC)
    rows = [
        event_row("batch4", "file:/landing/a.jsonl#1", silver_batch=4, ingested=early),
        event_row("late-ingest", "file:/landing/a.jsonl#1", silver_batch=3, ingested=late),
        event_row("b-file", "file:/landing/b.jsonl#1", silver_batch=3, ingested=early),
        event_row("a-file", "file:/landing/a.jsonl#5", silver_batch=3, ingested=early),
    ]
    assert arrival(*rows) == ["a-file", "b-file", "late-ingest", "batch4"]


def test_arrival_key_without_an_ingest_time_or_a_position() -> None:
    no_time = Row(event_id="x", silver_batch=1, ingest_time=None, source_position="file:/landing/a.jsonl#7")
    assert arrival_key(no_time) == (1, 0, "file:/landing/a.jsonl", -1, 7)
    no_position = Row(event_id="y", silver_batch=1, ingest_time=None, source_position=None)
    assert arrival_key(no_position) == (1, 0, "", -1, 0)
    assert arrival(no_time, no_position) == ["y", "x"]


# --- the processors against an in-memory state handle ----------------------------------------------------


# Spark's method names (getValue, updateValue, …) are kept: the processors call them.


class ValueState:
    def __init__(self) -> None:
        self.value: tuple | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple | None:
        return self.value

    def update(self, value: Iterable) -> None:
        self.value = tuple(value)

    def clear(self) -> None:
        self.value = None


class MapState:
    def __init__(self) -> None:
        self.entries: dict[tuple, tuple] = {}

    def getValue(self, key: tuple) -> tuple | None:
        return self.entries.get(key)

    def updateValue(self, key: tuple, value: tuple) -> None:
        self.entries[key] = tuple(value)

    def removeKey(self, key: tuple) -> None:
        del self.entries[key]

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter(list(self.entries.items()))


class ListState:
    def __init__(self) -> None:
        self.items: list[tuple] = []

    def exists(self) -> bool:
        return bool(self.items)

    def get(self) -> Iterator[tuple]:
        return iter(list(self.items))

    def appendList(self, values: list) -> None:
        self.items.extend(tuple(v) for v in values)

    def put(self, values: list) -> None:
        self.items = [tuple(v) for v in values]

    def clear(self) -> None:
        self.items = []


class Handle:
    """Spark's StatefulProcessorHandle for one key: the state variables it hands out, and the timers."""

    def __init__(self) -> None:
        self.states: dict[str, Any] = {}
        self.timers: set[int] = set()

    def getValueState(self, name: str, schema: str) -> ValueState:
        return self.states.setdefault(name, ValueState())

    def getMapState(self, name: str, key_schema: str, value_schema: str) -> MapState:
        return self.states.setdefault(name, MapState())

    def getListState(self, name: str, schema: str) -> ListState:
        return self.states.setdefault(name, ListState())

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.timers.discard(ms)

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.timers))


def at_noon(clock: str, day: int = 1) -> datetime:
    return datetime.fromisoformat(f"2024-01-0{day}T{clock}+00:00")


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def fire(processor: Any, handle: Handle, user: str, timer: int) -> list[Row]:
    """Spark fires a timer once the watermark reaches it: it is gone from the list, then the processor runs."""
    assert timer in handle.timers
    handle.timers.discard(timer)
    return list(processor.handleExpiredTimer((user,), TimerValues(BATCH_MS, timer), ExpiredTimerInfo(timer)))


def purchase_row(event_id: str, when: datetime, amount: str, line: int) -> Row:
    return Row(
        user_id="O",
        event_id=event_id,
        event_time=when,
        amount=Decimal(amount),
        ingest_time=datetime(2024, 1, 1, 13, tzinfo=UTC),
        silver_batch=3,
        source_position=f"file:/landing/orders.jsonl#{line}",
    )


def test_the_fraud_detector_judges_in_arrival_order_keeps_the_hour_and_sets_eviction_timers() -> None:
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    o1 = purchase_row("o1", at_noon("12:02:00"), "1.00", 1)
    o2 = purchase_row("o2", at_noon("12:01:00"), "1.00", 2)
    o3 = purchase_row("o3", at_noon("12:01:30"), "1.00", 10)
    # Spark hands rows over in any order; line 10 arrived after line 2.
    alerts = list(detector.handleInputRows(("O",), iter([o3, o1, o2]), TimerValues(BATCH_MS, -1)))
    assert alerts == [
        Row(
            alert_id="burst:o3",
            user_id="O",
            rule=BURST,
            event_id="o3",
            event_time=at_noon("12:01:30"),
            amount=Decimal("1.00"),
            running_mean=None,
            triggering_event_ids=["o2", "o3", "o1"],
            ingest_time=datetime(2024, 1, 1, 13, tzinfo=UTC),
            detected_at=datetime.fromtimestamp(BATCH_MS / 1000, UTC),
        )
    ]
    purchases = handle.states["purchases"]
    assert purchases.items == [
        ("o1", micros(at_noon("12:02:00")), 100),
        ("o2", micros(at_noon("12:01:00")), 100),
        ("o3", micros(at_noon("12:01:30")), 100),
    ]
    assert handle.timers == {ms(at_noon("13:02:00")), ms(at_noon("13:01:00")), ms(at_noon("13:01:30"))}

    # A later batch is judged against the kept purchases. Its hour [11:01:45, 12:01:45] holds o2 and o3 (o1
    # is later in event time): 10.00 is 10x their mean of 1.00. All four lie within [12:01, 12:02]: a burst.
    o4 = purchase_row("o4", at_noon("12:01:45"), "10.00", 11)
    later = list(detector.handleInputRows(("O",), iter([o4]), TimerValues(BATCH_MS + 5000, -1)))
    assert [(a.alert_id, a.running_mean, a.triggering_event_ids) for a in later] == [
        ("large_amount:o4", Decimal("1.0000"), ["o2", "o3", "o4"]),
        ("burst:o4", None, ["o2", "o3", "o4", "o1"]),
    ]
    assert later[0].detected_at == datetime.fromtimestamp((BATCH_MS + 5000) / 1000, UTC)
    assert purchases.items[-1] == ("o4", micros(at_noon("12:01:45")), 1000)

    # Eviction: the timer at 13:01:30 takes every purchase whose event time + 1 h is at or before it.
    assert fire(detector, handle, "O", ms(at_noon("13:01:30"))) == []
    assert [item[0] for item in purchases.items] == ["o1", "o4"]
    assert fire(detector, handle, "O", ms(at_noon("13:01:45"))) == []
    assert [item[0] for item in purchases.items] == ["o1"]
    assert fire(detector, handle, "O", ms(at_noon("13:02:00"))) == []
    assert purchases.items == [] and not purchases.exists()


def test_fraud_eviction_timers_round_up_to_the_millisecond() -> None:
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    exact = at_noon("12:00:00")
    rows = [
        purchase_row("exact", exact, "1.00", 1),
        purchase_row("later", exact + timedelta(microseconds=1), "1.00", 2),
    ]
    list(detector.handleInputRows(("O",), iter(rows), TimerValues(BATCH_MS, -1)))
    hour_later = ms(at_noon("13:00:00"))
    assert handle.timers == {hour_later, hour_later + 1}
    fire(detector, handle, "O", hour_later)
    # 12:00:00.000001 + 1 h is after the 13:00:00.000 timer: kept until 13:00:00.001.
    assert [item[0] for item in handle.states["purchases"].items] == ["later"]


def click_row(url: str, when: datetime) -> Row:
    return Row(user_id="A", event_time=when, url=url)


def url_counts(rows: list[Row]) -> list[tuple]:
    return [(r.user_id, r.unique_urls, r.window_end, r.urls_in_state, r.emitted) for r in rows]


def test_distinct_urls_count_last_clicks_within_24_hours_and_expire_by_timer() -> None:
    handle = Handle()
    counter = DistinctUrlCounter()
    counter.init(handle)
    values = TimerValues(BATCH_MS, -1)

    clicks = [
        click_row("/a", at_noon("10:00:00")),
        click_row("/b", at_noon("10:30:00")),
        click_row("/a", at_noon("11:00:00")),
    ]
    first = list(counter.handleInputRows(("A",), iter(clicks), values))
    assert url_counts(first) == [("A", 2, at_noon("11:00:00"), 2, 1)]
    assert first[0].updated_at == datetime.fromtimestamp(BATCH_MS / 1000, UTC)
    last_click = handle.states["last_click"]
    assert last_click.entries == {("/a",): (micros(at_noon("11:00:00")),), ("/b",): (micros(at_noon("10:30:00")),)}
    assert handle.timers == {ms(at_noon("11:00:00", 2)), ms(at_noon("10:30:00", 2))}

    # An older click of a URL held moves nothing back and changes no figure: nothing emitted.
    assert list(counter.handleInputRows(("A",), iter([click_row("/a", at_noon("09:00:00"))]), values)) == []
    assert last_click.entries[("/a",)] == (micros(at_noon("11:00:00")),)

    # /c exactly 24 h after /b's last click: at that instant /b no longer counts (the interval is open at
    # T - 24 h), but it is still held until its timer fires.
    third = list(counter.handleInputRows(("A",), iter([click_row("/c", at_noon("10:30:00", 2))]), values))
    assert url_counts(third) == [("A", 2, at_noon("10:30:00", 2), 3, 2)]
    assert handle.timers == {ms(at_noon("10:30:00", 2)), ms(at_noon("11:00:00", 2)), ms(at_noon("10:30:00", 3))}

    # /b's timer: /b leaves; still 2 counted (/a, /c), one fewer held.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("10:30:00", 2)))) == [
        ("A", 2, at_noon("10:30:00", 2), 2, 3)
    ]
    assert set(last_click.entries) == {("/a",), ("/c",)}
    assert handle.timers == {ms(at_noon("11:00:00", 2)), ms(at_noon("10:30:00", 3))}
    # /a's: counted at the timer's instant, after the newest click.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("11:00:00", 2)))) == [
        ("A", 1, at_noon("11:00:00", 2), 1, 4)
    ]
    # /c's: nothing left, the count goes down to 0 and the user's state is forgotten.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("10:30:00", 3)))) == [
        ("A", 0, at_noon("10:30:00", 3), 0, 5)
    ]
    assert last_click.entries == {} and not handle.states["shown"].exists() and handle.timers == set()


def test_url_timers_round_up_to_the_millisecond_and_the_count_follows_them() -> None:
    handle = Handle()
    counter = DistinctUrlCounter()
    counter.init(handle)
    start = at_noon("10:00:00")
    clicks = [click_row("/x", start), click_row("/y", start + timedelta(microseconds=1))]
    assert url_counts(counter.handleInputRows(("A",), iter(clicks), TimerValues(BATCH_MS, -1))) == [
        ("A", 2, start + timedelta(microseconds=1), 2, 1)
    ]
    day_later = ms(at_noon("10:00:00", 2))
    assert handle.timers == {day_later, day_later + 1}
    # At 10:00:00.000 the next day /x (exactly 24 h) goes; /y (24 h minus 1 µs before) still counts.
    assert url_counts(fire(counter, handle, "A", day_later)) == [("A", 1, at_noon("10:00:00", 2), 1, 2)]
    assert set(handle.states["last_click"].entries) == {("/y",)}
    assert handle.timers == {day_later + 1}


def test_one_timer_per_distinct_expiry_instant() -> None:
    handle = Handle()
    counter = DistinctUrlCounter()
    counter.init(handle)
    when = at_noon("10:00:00")
    clicks = [click_row(url, when) for url in ("/a", "/b", "/c")]
    assert url_counts(counter.handleInputRows(("A",), iter(clicks), TimerValues(BATCH_MS, -1))) == [
        ("A", 3, when, 3, 1)
    ]
    assert handle.timers == {ms(at_noon("10:00:00", 2))}
    # One timer takes all three.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("10:00:00", 2)))) == [
        ("A", 0, at_noon("10:00:00", 2), 0, 2)
    ]
