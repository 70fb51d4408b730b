"""The keyed-state rules of ``transforms/keyed_processors.py`` without Spark: fraud alerts and distinct URLs.

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

import random
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import combinations
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from transforms.fraud_rules import (
    BURST,
    BURST_PURCHASES,
    BURST_SPAN,
    LARGE_AMOUNT,
    LARGE_FACTOR,
    MEAN_HORIZON,
    Finding,
    MinuteTotal,
    Purchase,
    PurchaseHistory,
    judge_purchase,
    minute_of,
    minutes_to_read,
)
from transforms.keyed_processors import (
    EVICTION_STEP,
    URL_HORIZON,
    DistinctUrlCounter,
    FraudDetector,
    arrival_key,
    eviction_timer,
    instant,
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
    assert timedelta(minutes=10) == EVICTION_STEP
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


# --- the fraud rules, purchase by purchase --------------------------------------------------------------


def p(event_id: str, seconds: float, amount: str) -> Purchase:
    """A purchase ``seconds`` after noon of ``amount`` (exact, in cents)."""
    return Purchase(event_id, NOON + round(seconds * SECOND), int(Decimal(amount) * 100))


def judge(new: Purchase, *earlier: Purchase) -> list[tuple]:
    return [(f.rule, f.evidence, f.running_mean) for f in judge_purchase(new, earlier)]


def arrivals(*purchases: Purchase) -> dict[str, list[tuple]]:
    """Each purchase judged in the given (arrival) order against those before it, in one history."""
    history = PurchaseHistory((), purchases)
    found = {}
    for n, purchase in enumerate(purchases):
        judged = [(f.rule, f.evidence, f.running_mean) for f in history.arrive(n)]
        if judged:
            found[purchase.event_id] = judged
    return found


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


def test_only_earlier_arrivals_make_the_mean() -> None:
    # In one history, b (earlier in event time) arrives after a: a has nothing to compare with, nor has b
    # (a is later in event time). Then c compares with both: mean (1.00 + 0.50) / 2 = 0.75, 7.50 is 10x.
    found = arrivals(p("a", -600, "1.00"), p("b", -1200, "0.50"), p("c", 0, "7.50"))
    assert found == {"c": [(LARGE_AMOUNT, ("b", "a", "c"), Decimal("0.7500"))]}


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


def test_a_fourth_purchase_in_a_burst_continues_its_episode_without_an_alert() -> None:
    a, b, c = p("a", 0, "1.00"), p("b", 20, "1.00"), p("c", 40, "1.00")
    # a, b, c were a burst already (the alert was c's): d within 60 s of b and c adds to it.
    assert judge(p("d", 50, "1.00"), a, b, c) == []
    # At 70 s: b, c, d are within [20 s, 80 s]; b and c were in the burst with a: the same episode.
    assert judge(p("d", 70, "1.00"), a, b, c) == []
    # At 100 s only c (40 s) is within 60 s: no burst at all.
    assert judge(p("d", 100, "1.00"), a, b, c) == []
    # One history: only c, the first to make three, alerts.
    assert arrivals(a, b, c, p("d", 50, "1.00"), p("e", 60, "1.00")) == {"c": [(BURST, ("a", "b", "c"), None)]}


def test_a_new_episode_after_a_stretch_no_burst_covers() -> None:
    a, b, c = p("a", 0, "1.00"), p("b", 30, "1.00"), p("c", 60, "1.00")
    # d (121 s), e (150 s), f (180 s): d, e, f are within 59 s; no three purchases within 60 s cover any
    # instant between c (60 s) and d (121 s): b, c, d span 91 s, c, d, e 90 s. A new episode: f alerts.
    d, e, f = p("d", 121, "1.00"), p("e", 150, "1.00"), p("f", 180, "1.00")
    assert arrivals(a, b, c, d, e, f) == {
        "c": [(BURST, ("a", "b", "c"), None)],
        "f": [(BURST, ("d", "e", "f"), None)],
    }


def test_bursts_that_touch_at_an_instant_are_one_episode() -> None:
    # a, b, c cover [0 s, 60 s]; c, d, e (60 s, 100 s, 120 s) cover [60 s, 120 s]: they share the instant
    # 60 s, and c was in the first burst already. No second alert.
    found = arrivals(
        p("a", 0, "1.00"), p("b", 30, "1.00"), p("c", 60, "1.00"), p("d", 100, "1.00"), p("e", 120, "1.00")
    )
    assert found == {"c": [(BURST, ("a", "b", "c"), None)]}


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


def test_the_evidence_is_the_earliest_sixty_seconds_the_purchase_makes_three() -> None:
    # x at 60 s makes three with a, b ([0 s, 60 s]) and with b, c ([30 s, 90 s]): the earliest is named.
    a, b, c = p("a", 0, "1.00"), p("b", 30, "1.00"), p("c", 90, "1.00")
    assert judge(p("x", 60, "1.00"), a, b, c) == [(BURST, ("a", "b", "x"), None)]


def test_an_out_of_order_purchase_may_join_two_episodes_each_alerted_once() -> None:
    # Two bursts 80 s apart, each alerted; m (60 s) arrives last and bridges them: it alerts nothing,
    # and the joined episode keeps its two alerts (arrival order decides; a replay gives the same).
    first = [p("a", 0, "1.00"), p("b", 10, "1.00"), p("c", 20, "1.00")]
    second = [p("g", 100, "1.00"), p("h", 110, "1.00"), p("i", 120, "1.00")]
    assert arrivals(*first, *second, p("m", 60, "1.00")) == {
        "c": [(BURST, ("a", "b", "c"), None)],
        "i": [(BURST, ("g", "h", "i"), None)],
    }


def test_a_burst_at_one_instant_orders_its_evidence_by_id() -> None:
    assert judge(p("m", 0, "1.00"), p("z", 0, "1.00"), p("a", 0, "1.00")) == [(BURST, ("a", "m", "z"), None)]
    # A fourth at the same instant: three of them were a burst already.
    assert judge(p("n", 0, "1.00"), p("z", 0, "1.00"), p("a", 0, "1.00"), p("m", 0, "1.00")) == []


def test_both_rules_at_once_large_amount_first() -> None:
    a, b = p("a", 0, "1.00"), p("b", 30, "1.00")
    assert judge(p("c", 60, "20.00"), a, b) == [
        (LARGE_AMOUNT, ("a", "b", "c"), Decimal("1.0000")),
        (BURST, ("a", "b", "c"), None),
    ]


def test_large_amount_is_judged_per_purchase_inside_an_episode() -> None:
    # A burst episode (alerted at c) goes on; e is 50x the mean of a-d: large, but no second burst.
    found = arrivals(*(p(x, 10 * i, "1.00") for i, x in enumerate("abcd")), p("e", 40, "50.00"))
    assert found == {
        "c": [(BURST, ("a", "b", "c"), None)],
        "e": [(LARGE_AMOUNT, ("a", "b", "c", "d", "e"), Decimal("1.0000"))],
    }


def test_purchase_history_kept_purchases_have_arrived() -> None:
    kept = [p("k1", -10, "1.00"), p("k2", 0, "1.00")]
    history = PurchaseHistory(kept, [p("n", 20, "1.00"), p("early", -100, "1.00")])
    assert history.earliest == NOON - 100 * SECOND
    assert history.arrived == 2
    assert [(f.rule, f.evidence) for f in history.arrive(0)] == [(BURST, ("k1", "k2", "n"))]
    assert history.arrive(1) == [] and history.arrived == 4
    assert PurchaseHistory().earliest is None


def test_a_batch_reads_the_minutes_within_two_bursts_of_its_purchases_and_at_its_hours_edge() -> None:
    # One purchase at 12:30:30. Within 120 s: 12:28:30 to 12:32:30, minutes 12:28 to 12:32; its hour opens
    # at 11:30:30, in minute 11:30. Every other held minute is wholly inside or outside the hour.
    held = [minute_of(NOON + m * MINUTE) for m in range(-40, 40)]
    assert minute_of(NOON + 59 * SECOND) == NOON and minute_of(NOON - 1) == NOON - MINUTE
    assert minutes_to_read([p("x", 30 * 60 + 30, "1.00")], held) == {NOON + m * MINUTE for m in [-30, *range(28, 33)]}
    assert minutes_to_read([p("x", -20 * 60, "1.00")], held) == {
        NOON + m * MINUTE for m in [-80, *range(-22, -17)]
    } & set(held)
    # At a minute's start, 120 s either side are minutes' starts: two minutes before, its own, two after (the
    # minute holding 120 s after starts there); its hour's edge, 11:00, is not held.
    assert minutes_to_read([p("x", 0, "1.00")], held) == {NOON + m * MINUTE for m in range(-2, 3)}
    assert minutes_to_read([], held) == set()


def test_minute_totals_stand_in_for_a_minute_and_expand_for_the_evidence() -> None:
    # Kept: three purchases of 1.00 in minute 11:40 (20 minutes before), read back only for evidence.
    old = [p("k1", -20 * 60, "1.00"), p("k2", -20 * 60 + 10, "1.00"), p("k3", -20 * 60 + 50, "1.00")]
    expanded: list[int] = []

    def expand(start: int) -> list[Purchase]:
        expanded.append(start)
        return [purchase for purchase in old if minute_of(purchase.at) == start]

    history = PurchaseHistory((), [p("n", 0, "10.00")], [MinuteTotal(NOON - 20 * MINUTE, 3, 300)], expand)
    assert history.arrived == 1 and history.earliest == NOON - 20 * MINUTE
    assert history.arrive(0) == [Finding(LARGE_AMOUNT, ("k1", "k2", "k3", "n"), Decimal("1.0000"))]
    assert expanded == [NOON - 20 * MINUTE]
    # Below the factor, nothing is read back.
    quiet = PurchaseHistory((), [p("n", 0, "9.99")], [MinuteTotal(NOON - 20 * MINUTE, 3, 300)], expand)
    assert quiet.arrive(0) == [] and expanded == [NOON - 20 * MINUTE]


@pytest.mark.parametrize("seed", range(4))
def test_minute_totals_give_the_verdicts_of_the_purchases_they_stand_for(seed: int) -> None:
    # Random kept purchases over 2 hours (bursty, some large, some refunds) and a batch of random purchases
    # in its last 15 minutes, arriving in random order: judged against every kept purchase, and against the
    # minutes ``minutes_to_read`` picks plus totals for the rest, the findings are the same.
    rng = random.Random(seed)
    for _ in range(150):
        kept = [
            Purchase(f"k{i:03d}", NOON + rng.randint(0, 7200 * 4) * SECOND // 4, rng.choice([1, 100, 100, 900, -50]))
            for i in range(rng.randint(0, 120))
        ]
        coming = [
            Purchase(f"n{i:02d}", NOON + rng.randint(6300 * 4, 7200 * 4) * SECOND // 4, rng.choice([100, 1000, 5000]))
            for i in range(rng.randint(1, 12))
        ]
        minutes: dict[int, list[Purchase]] = {}
        for purchase in kept:
            minutes.setdefault(minute_of(purchase.at), []).append(purchase)
        read = minutes_to_read(coming, minutes)
        totals = [
            MinuteTotal(start, len(minutes[start]), sum(q.cents for q in minutes[start]))
            for start in minutes
            if start not in read
        ]
        whole = PurchaseHistory(kept, coming)
        by_minute = PurchaseHistory([q for s in read for q in minutes[s]], coming, totals, minutes.__getitem__)
        for n in range(len(coming)):
            assert by_minute.arrive(n) == whole.arrive(n), (kept, coming, n)


# --- a definition-level reference, against random histories ---------------------------------------------


def reference_findings(new: Purchase, earlier: list[Purchase]) -> list[tuple]:
    """The rules read literally, by brute force: every earlier purchase of the hour; every three purchases
    within 60 s (a burst, covering its span); a new episode when the bursts through ``new`` share no instant
    with a burst of the earlier purchases; its evidence the earliest 60 s from a purchase that holds three."""
    found: list[tuple] = []
    hour = [e for e in earlier if new.at - HOUR <= e.at <= new.at]
    total = sum(e.cents for e in hour)
    if hour and total > 0 and new.cents * len(hour) >= 10 * total:
        mean = (Decimal(total) / len(hour) / 100).quantize(Decimal("0.0001"), ROUND_HALF_EVEN)
        found.append((LARGE_AMOUNT, tuple(e.event_id for e in sorted([*hour, new], key=order)), mean))

    def spans(purchases: list[Purchase], through: Purchase | None = None) -> list[tuple[int, int]]:
        return [
            (min(t.at for t in three), max(t.at for t in three))
            for three in combinations(purchases, 3)
            if max(t.at for t in three) - min(t.at for t in three) <= MINUTE and (through is None or through in three)
        ]

    through = spans([*earlier, new], new)
    if through:
        low, high = min(s for s, _ in through), max(e for _, e in through)
        if not any(end >= low and start <= high for start, end in spans(earlier)):
            everyone = [*earlier, new]
            for start in sorted({e.at for e in everyone if new.at - MINUTE <= e.at <= new.at}):
                inside = [e for e in everyone if start <= e.at <= start + MINUTE]
                if len(inside) >= 3:
                    found.append((BURST, tuple(e.event_id for e in sorted(inside, key=order)), None))
                    break
    return found


def order(purchase: Purchase) -> tuple[int, str]:
    return (purchase.at, purchase.event_id)


@pytest.mark.parametrize("seed", range(4))
def test_the_history_agrees_with_the_literal_rules_on_random_arrivals(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        # Few purchases, close in time (many ties, many bursts) or spread over more than an hour.
        spread = rng.choice([20, 90, 300, 5000])
        purchases = [
            Purchase(f"e{i:02d}", NOON + rng.randint(0, spread) * SECOND // 2, rng.choice([0, 1, 7, 100, 2000, -50]))
            for i in range(rng.randint(1, 11))
        ]
        history = PurchaseHistory((), purchases)
        for n, purchase in enumerate(purchases):
            judged = [(f.rule, f.evidence, f.running_mean) for f in history.arrive(n)]
            assert judged == reference_findings(purchase, purchases[:n]), (purchases, n)


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
        #: Items handed out by ``getValue`` and written by ``updateValue`` (a value holding lists counts
        #: their length: the fraud detector's purchases), and keys removed: what batches cost the store.
        self.reads = self.writes = self.removals = 0

    @staticmethod
    def _items(value: tuple) -> int:
        return len(value[0]) if isinstance(value[0], list) else 1

    def getValue(self, key: tuple) -> tuple | None:
        value = self.entries.get(key)
        if value is not None:
            self.reads += self._items(value)
        return value

    def updateValue(self, key: tuple, value: tuple) -> None:
        self.writes += self._items(tuple(value))
        self.entries[key] = tuple(value)

    def removeKey(self, key: tuple) -> None:
        self.removals += 1
        del self.entries[key]

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter(list(self.entries.items()))


class ListState:
    def __init__(self) -> None:
        self.items: list[tuple] = []
        #: Entries handed out by ``get`` so far: what a batch costs in state reads.
        self.reads = 0
        #: Rewrites of the whole list (``put``): each is a copy of the key's state in the store's next version.
        self.puts = 0

    def exists(self) -> bool:
        return bool(self.items)

    def get(self) -> Iterator[tuple]:
        self.reads += len(self.items)
        return iter(list(self.items))

    def appendList(self, values: list) -> None:
        self.items.extend(tuple(v) for v in values)

    def put(self, values: list) -> None:
        self.puts += 1
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


def fire(processor: Any, handle: Handle, user: str, timer: int, watermark: int | None = None) -> list[Row]:
    """Spark fires a timer once the watermark (by default, the timer's instant) reaches it: the processor
    runs, then the timer is deleted."""
    assert timer in handle.timers
    watermark = timer if watermark is None else watermark
    assert timer <= watermark
    rows = list(processor.handleExpiredTimer((user,), TimerValues(BATCH_MS, watermark), ExpiredTimerInfo(timer)))
    handle.timers.discard(timer)
    return rows


def fire_all(processor: Any, handle: Handle, user: str, watermark: int) -> list[Row]:
    """Every timer at or before the watermark, earliest first, as Spark's timer pass does."""
    rows = []
    while due := sorted(t for t in handle.timers if t <= watermark):
        rows.extend(fire(processor, handle, user, due[0], watermark))
    return rows


def purchase_row(event_id: str, when: datetime, amount: str, line: int, user: str = "O") -> Row:
    return Row(
        user_id=user,
        event_id=event_id,
        event_time=when,
        amount=Decimal(amount),
        ingest_time=datetime(2024, 1, 1, 13, tzinfo=UTC),
        silver_batch=3,
        source_position=f"file:/landing/orders.jsonl#{line}",
    )


def test_the_fraud_detector_judges_in_arrival_order_keeps_the_hour_and_one_eviction_timer() -> None:
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
    # Kept by minute of event time, each minute in arrival order, with its count and cents.
    by_minute, minutes = handle.states["by_minute"], handle.states["minutes"]
    twelve_01, twelve_02 = micros(at_noon("12:01:00")), micros(at_noon("12:02:00"))
    assert by_minute.entries == {
        (twelve_01,): (["o2", "o3"], [twelve_01, micros(at_noon("12:01:30"))], [100, 100]),
        (twelve_02,): (["o1"], [twelve_02], [100]),
    }
    assert minutes.value == ([twelve_01, twelve_02], [2, 1], [200, 100])
    # One timer for the user: the earliest minute's expiry (12:02 + 1 h), up to the 10-minute grid.
    assert handle.timers == {ms(at_noon("13:10:00"))}

    # A later batch is judged against the kept purchases. Its hour [11:01:45, 12:01:45] holds o2 and o3 (o1
    # is later in event time): 10.00 is 10x their mean of 1.00. All four lie within [12:01, 12:02], but o2,
    # o3 and o1 were a burst already (alerted at o3): the same episode, no second burst alert. Both minutes
    # are within 120 s of o4, so both are read whole.
    o4 = purchase_row("o4", at_noon("12:01:45"), "10.00", 11)
    later = list(detector.handleInputRows(("O",), iter([o4]), TimerValues(BATCH_MS + 5000, -1)))
    assert [(a.alert_id, a.running_mean, a.triggering_event_ids) for a in later] == [
        ("large_amount:o4", Decimal("1.0000"), ["o2", "o3", "o4"]),
    ]
    assert later[0].detected_at == datetime.fromtimestamp((BATCH_MS + 5000) / 1000, UTC)
    assert by_minute.reads == 3
    assert by_minute.entries[(twelve_01,)][0] == ["o2", "o3", "o4"]
    assert minutes.value == ([twelve_01, twelve_02], [3, 1], [1200, 100])
    assert handle.timers == {ms(at_noon("13:10:00"))}

    # o5 (12:15) reads no minute: 12:01 and 12:02 are more than 120 s away and inside its hour, so they
    # weigh in as totals (4 purchases, 13.00: a mean of 3.25, and 1.00 is no large amount).
    o5 = purchase_row("o5", at_noon("12:15:00"), "1.00", 12)
    assert list(detector.handleInputRows(("O",), iter([o5]), TimerValues(BATCH_MS + 9000, -1))) == []
    assert by_minute.reads == 3
    assert handle.timers == {ms(at_noon("13:10:00"))}
    # o6 (12:20, 40.00) is over 10x the mean of o1 to o5 (5 purchases, 14.00: 2.80): its evidence reads the
    # three minutes it holds as totals then, and only then.
    o6 = purchase_row("o6", at_noon("12:20:00"), "40.00", 13)
    large = list(detector.handleInputRows(("O",), iter([o6]), TimerValues(BATCH_MS + 9000, -1)))
    assert [(a.alert_id, a.running_mean, a.triggering_event_ids) for a in large] == [
        ("large_amount:o6", Decimal("2.8000"), ["o2", "o3", "o4", "o1", "o5", "o6"]),
    ]
    assert by_minute.reads == 3 + 5

    # Eviction: at 13:10:00 the minutes whose expiry has passed (12:01 and 12:02: 13:02 and 13:03) leave, a
    # removal each; 12:15 and 12:20 stay, and the timer moves to the step after 12:15's expiry (13:16).
    assert fire(detector, handle, "O", ms(at_noon("13:10:00"))) == []
    assert by_minute.removals == 2
    assert [ids for ids, _, _ in by_minute.entries.values()] == [["o5"], ["o6"]]
    assert handle.timers == {ms(at_noon("13:20:00"))}
    assert fire(detector, handle, "O", ms(at_noon("13:20:00"))) == []
    assert [ids for ids, _, _ in by_minute.entries.values()] == [["o6"]]
    assert handle.timers == {ms(at_noon("13:30:00"))}
    assert fire(detector, handle, "O", ms(at_noon("13:30:00"))) == []
    assert by_minute.entries == {} and not minutes.exists() and handle.timers == set()


def test_eviction_timers_sit_on_the_ten_minute_grid_at_or_after_the_expiry() -> None:
    assert eviction_timer(NOON) == ms(at_noon("13:00:00"))
    assert eviction_timer(NOON + 1) == ms(at_noon("13:10:00"))
    assert eviction_timer(NOON + 9 * MINUTE + 59 * SECOND) == ms(at_noon("13:10:00"))
    assert eviction_timer(NOON + 10 * MINUTE) == ms(at_noon("13:10:00"))
    assert eviction_timer(NOON - 1) == ms(at_noon("13:00:00"))


def test_a_list_state_checkpoints_purchases_move_into_minutes_and_keep_their_verdicts() -> None:
    # A checkpoint of the list-state version: o2, o3, o1 kept in one list (arrival order), its timer on the
    # grid. The user's next batch moves them into their minutes first, so o4 is judged as before: the
    # large amount over o2 and o3, and no second burst.
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    twelve_01, twelve_02 = micros(at_noon("12:01:00")), micros(at_noon("12:02:00"))
    handle.states["purchases"].items = [
        ("o1", twelve_02, 100),
        ("o2", twelve_01, 100),
        ("o3", twelve_01 + 30 * SECOND, 100),
    ]
    handle.timers = {ms(at_noon("13:10:00"))}
    o4 = purchase_row("o4", at_noon("12:01:45"), "10.00", 11)
    later = list(detector.handleInputRows(("O",), iter([o4]), TimerValues(BATCH_MS, -1)))
    assert [(a.alert_id, a.running_mean, a.triggering_event_ids) for a in later] == [
        ("large_amount:o4", Decimal("1.0000"), ["o2", "o3", "o4"]),
    ]
    assert not handle.states["purchases"].exists()
    assert handle.states["minutes"].value == ([twelve_01, twelve_02], [3, 1], [1200, 100])
    assert handle.timers == {ms(at_noon("13:10:00"))}

    # A user with nothing new moves at its timer, and its expired minutes go at once.
    idle = Handle()
    detector.init(idle)
    idle.states["purchases"].items = [("a", twelve_01, 100), ("b", micros(at_noon("12:15:00")), 100)]
    idle.timers = {ms(at_noon("13:10:00"))}
    assert fire(detector, idle, "I", ms(at_noon("13:10:00"))) == []
    assert not idle.states["purchases"].exists()
    assert idle.states["by_minute"].entries == {
        (micros(at_noon("12:15:00")),): (["b"], [micros(at_noon("12:15:00"))], [100])
    }
    assert idle.timers == {ms(at_noon("13:20:00"))}


def test_a_minute_leaves_when_the_watermark_passes_its_end_plus_an_hour() -> None:
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    rows = [
        purchase_row("last", at_noon("12:00:00") - timedelta(microseconds=1), "1.00", 1),
        purchase_row("first", at_noon("12:00:00"), "1.00", 2),
    ]
    list(detector.handleInputRows(("O",), iter(rows), TimerValues(BATCH_MS, -1)))
    # 11:59:59.999999 is the last instant of minute 11:59, which expires at 13:00:00.000: on the grid.
    assert handle.timers == {ms(at_noon("13:00:00"))}
    fire(detector, handle, "O", ms(at_noon("13:00:00")))
    # 12:00:00 opens minute 12:00, which expires at 13:01: kept, with a timer at the next step.
    assert [ids for ids, _, _ in handle.states["by_minute"].entries.values()] == [["first"]]
    assert handle.timers == {ms(at_noon("13:10:00"))}


def test_an_earlier_purchase_moves_the_timer_back_and_old_timers_are_cleared() -> None:
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    # Timers of a checkpoint written by the previous version (one per expiry) are replaced by one.
    handle.timers = {ms(at_noon("13:30:00")), ms(at_noon("13:40:00"))}
    list(
        detector.handleInputRows(
            ("O",), iter([purchase_row("a", at_noon("12:29:00"), "1.00", 1)]), TimerValues(BATCH_MS, -1)
        )
    )
    assert handle.timers == {ms(at_noon("13:30:00"))}
    list(
        detector.handleInputRows(
            ("O",), iter([purchase_row("b", at_noon("12:09:00"), "1.00", 2)]), TimerValues(BATCH_MS, -1)
        )
    )
    assert handle.timers == {ms(at_noon("13:10:00"))}


def hot_user_rows(count: int, gap_ms: int, block: int) -> list[Row]:
    """``count`` purchases of 1.00 by one user, ``gap_ms`` apart from noon, arriving in blocks of ``block``
    whose purchases arrive latest first (out of event-time order); purchase 10,000 (if any) is 100.00."""
    rows = []
    for first in range(0, count, block):
        for i in reversed(range(first, min(first + block, count))):
            amount = "100.00" if i == 10_000 else "1.00"
            rows.append(
                purchase_row(
                    f"h{i:05d}", at_noon("12:00:00") + timedelta(milliseconds=i * gap_ms), amount, len(rows), "H"
                )
            )
    return rows


def run_batches(rows: list[Row], batches: int) -> tuple[list[Row], Handle]:
    """The rows in ``batches`` batches as Spark runs them: after each, the watermark moves to the newest
    event time - 120 s and the timers it passed fire. Nothing here is late."""
    handle = Handle()
    detector = FraudDetector()
    detector.init(handle)
    alerts: list[Row] = []
    size = -(-len(rows) // batches)
    watermark = -(2**62)
    for start in range(0, len(rows), size):
        batch = rows[start : start + size]
        assert all(ms(r.event_time) > watermark for r in batch)
        alerts.extend(detector.handleInputRows(("H",), iter(batch), TimerValues(BATCH_MS, watermark)))
        watermark = max(watermark, max(ms(r.event_time) for r in batch) - 120_000)
        alerts.extend(fire_all(detector, handle, "H", watermark))
    return alerts, handle


def test_a_hot_user_costs_its_purchases_times_log_n_not_their_square() -> None:
    # 20,000 purchases of one user 360 ms apart (2 h; 10,000 in any hour), in blocks of 100 arriving
    # backwards. Every purchase after the first two is in a burst, all one episode: one burst alert, the
    # third arrival's (h00097, with h00098 and h00099). h10000 (100.00, at 13:00) is 100x the mean of the
    # 10,000 earlier purchases in [t - 1 h, t] (h00000, at exactly t - 1 h, to h09999, all 1.00; h10001 to
    # h10099 arrived before it but are later): large_amount, with all of them as evidence.
    rows = hot_user_rows(20_000, 360, 100)
    started = time.process_time()
    alerts, handle = run_batches(rows, 1)
    one_batch_seconds = time.process_time() - started
    found = {a.alert_id: (a.running_mean, a.triggering_event_ids) for a in alerts}
    assert found == {
        "burst:h00097": (None, ["h00097", "h00098", "h00099"]),
        "large_amount:h10000": (Decimal("1.0000"), [f"h{i:05d}" for i in range(10_001)]),
    }
    # The old code judged each purchase by a pass over its hour (10,000 here): about 1e8 steps and
    # minutes. Here each purchase is a few walks of about log2(20,000) = 15 steps through the trees.
    history = PurchaseHistory((), [Purchase(r.event_id, micros(r.event_time), int(r.amount * 100)) for r in rows])
    for n in range(len(rows)):
        history.arrive(n)
    assert history.steps < 40 * len(rows)
    assert one_batch_seconds < 5

    # The same in 40 batches with eviction in between: the same alerts. A batch (500 purchases, 180 s, three
    # whole minutes of 166-167) reads whole only the held minutes within 120 s of its purchases (the two
    # before its first) and those holding its purchases' t - 1 h (at most four), so at most six minutes of
    # 167; the large amount's evidence reads the hour once (10,001). Reading the hour a batch read 500,000.
    split, handle = run_batches(rows, 40)
    assert {a.alert_id: (a.running_mean, a.triggering_event_ids) for a in split} == found
    by_minute = handle.states["by_minute"]
    assert by_minute.reads <= 40 * 6 * 167 + 10_001
    # Each purchase is written once: the batches hold whole minutes, so no minute is rewritten.
    assert by_minute.writes == 20_000
    assert len(handle.timers) == 1


def test_a_steady_users_batches_read_the_minutes_around_their_purchases_not_the_hour() -> None:
    # A purchase every 2 s for 3 h (12:00:00 to 14:59:58, 30 a minute), in batches of 2 or 3 (5 s). A batch
    # reads whole the held minutes within 120 s of its purchases (three: the two before and its own) and
    # the one holding t - 1 h (still held until the grid step passes it): at most 4 x 30, where reading the
    # user's hour read 1,800 to 2,100. It writes the minutes its purchases fall in: at most its own minute
    # and the one before (31 purchases).
    rows = [
        purchase_row(f"s{i:04d}", at_noon("12:00:00") + timedelta(seconds=2 * i), "1.00", i, "H") for i in range(5400)
    ]
    alerts, handle = run_batches(rows, 2160)
    assert {a.rule for a in alerts} <= {BURST}
    by_minute = handle.states["by_minute"]
    assert by_minute.reads <= 2160 * 4 * 30
    assert by_minute.writes <= 2160 * 31
    # Held: the last hour of minutes and at most a step more, oldest first in the totals; the 180 minutes
    # less those held were removed, one removal each.
    starts, counts, _ = handle.states["minutes"].value
    assert starts == sorted(starts) and set(counts) == {30}
    assert micros(at_noon("14:59:00")) - starts[0] <= HOUR + EVICTION_STEP // timedelta(microseconds=1)
    assert by_minute.removals == 180 - len(starts)
    assert sorted(key for (key,) in by_minute.entries) == starts


@pytest.mark.parametrize("seed", range(3))
def test_fraud_alerts_do_not_depend_on_how_arrivals_are_split_into_batches(seed: int) -> None:
    # Purchases every 0-40 s, each arriving up to 100 s out of event-time order (less than the watermark
    # delay, so nothing is late in any split), amounts mostly small with a few large ones.
    rng = random.Random(seed)
    clock, timed = 0, []
    for i in range(600):
        clock += rng.randint(0, 40_000)
        amount = rng.choices(["0.10", "1.00", "20.00"], weights=[60, 38, 2])[0]
        timed.append((clock + rng.randint(0, 100_000), i, clock, amount))
    rows = [
        purchase_row(f"r{i:03d}", at_noon("12:00:00") + timedelta(milliseconds=at), amount, line, "H")
        for line, (_, i, at, amount) in enumerate(sorted(timed))
    ]
    whole, _ = run_batches(rows, 1)
    assert {a.rule for a in whole} == {BURST, LARGE_AMOUNT}
    for batches in (2, 7, 60):
        split, handle = run_batches(rows, batches)
        assert [(a.alert_id, a.triggering_event_ids, a.running_mean) for a in split] == [
            (a.alert_id, a.triggering_event_ids, a.running_mean) for a in whole
        ]
        assert len(handle.timers) <= 1


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
    # One timer for the user, at the earliest expiry: /b's.
    assert handle.timers == {ms(at_noon("10:30:00", 2))}

    # An older click of a URL held moves nothing back and changes no figure: nothing emitted.
    assert list(counter.handleInputRows(("A",), iter([click_row("/a", at_noon("09:00:00"))]), values)) == []
    assert last_click.entries[("/a",)] == (micros(at_noon("11:00:00")),)

    # /c exactly 24 h after /b's last click: at that instant /b no longer counts (the interval is open at
    # T - 24 h), but it is still held until its timer fires.
    third = list(counter.handleInputRows(("A",), iter([click_row("/c", at_noon("10:30:00", 2))]), values))
    assert url_counts(third) == [("A", 2, at_noon("10:30:00", 2), 3, 2)]
    assert handle.timers == {ms(at_noon("10:30:00", 2))}

    # /b's timer: /b leaves; still 2 counted (/a, /c), one fewer held.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("10:30:00", 2)))) == [
        ("A", 2, at_noon("10:30:00", 2), 2, 3)
    ]
    assert set(last_click.entries) == {("/a",), ("/c",)}
    assert handle.timers == {ms(at_noon("11:00:00", 2))}
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
    assert handle.timers == {day_later}
    # At 10:00:00.000 the next day /x (exactly 24 h) goes; /y (24 h minus 1 µs before) still counts.
    assert url_counts(fire(counter, handle, "A", day_later)) == [("A", 1, at_noon("10:00:00", 2), 1, 2)]
    assert set(handle.states["last_click"].entries) == {("/y",)}
    assert handle.timers == {day_later + 1}


def test_one_timer_per_user_and_one_pass_for_every_url_the_watermark_passed() -> None:
    handle = Handle()
    counter = DistinctUrlCounter()
    counter.init(handle)
    when = at_noon("10:00:00")
    clicks = [click_row(url, when) for url in ("/a", "/b", "/c")] + [click_row("/d", at_noon("10:20:00"))]
    assert url_counts(counter.handleInputRows(("A",), iter(clicks), TimerValues(BATCH_MS, -1))) == [
        ("A", 4, at_noon("10:20:00"), 4, 1)
    ]
    assert handle.timers == {ms(at_noon("10:00:00", 2))}
    # The watermark at 10:30 the next day: /a-/c (expiry 10:00) and /d (10:20) go in the one call, counted
    # at the latest expiry passed (10:20): what the last of one timer per expiry would have reported.
    assert url_counts(fire(counter, handle, "A", ms(at_noon("10:00:00", 2)), ms(at_noon("10:30:00", 2)))) == [
        ("A", 0, at_noon("10:20:00", 2), 0, 2)
    ]
    assert handle.states["last_click"].entries == {} and handle.timers == set()


def test_a_later_click_moves_the_url_timer_on() -> None:
    handle = Handle()
    counter = DistinctUrlCounter()
    counter.init(handle)
    list(counter.handleInputRows(("A",), iter([click_row("/a", at_noon("10:00:00"))]), TimerValues(BATCH_MS, -1)))
    assert handle.timers == {ms(at_noon("10:00:00", 2))}
    list(counter.handleInputRows(("A",), iter([click_row("/a", at_noon("11:00:00"))]), TimerValues(BATCH_MS, -1)))
    assert handle.timers == {ms(at_noon("11:00:00", 2))}
