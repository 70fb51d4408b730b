"""Watermark policies on real streams and Delta tables, against figures worked out by hand from the rules
in ``WatermarkSettings``: fixed delay, adaptive delay (percentile of observed lag, horizon, bounds), and the
idle-advancing watermark that closes the last windows when no input comes."""

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from runtime.continuous import run_continuous
from runtime.runner import IDLE_ADVANCE, advance_idle_watermark, prepare, run_once
from tests.lines import event, land
from warehouse.catalog import (
    GOLD_CORRECTIONS,
    OPS_WATERMARKS,
    SILVER_LATE_EVENTS,
    hopping_table,
    tumbling_table,
)
from warehouse.delta import read_table
from warehouse.settings import WatermarkSettings


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2024-01-01T{clock}+00:00")


def marks(spark, settings) -> list:
    rows = read_table(spark, settings, OPS_WATERMARKS).orderBy("recorded_at").collect()
    return [r for r in rows if r.query_name == tumbling_table(settings).name.replace(".", "_")]


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def test_adaptive_delay_follows_the_observed_lag_within_its_horizon_and_bounds(spark, settings) -> None:
    policy = WatermarkSettings(policy="adaptive", percentile=0.99, horizon_seconds=600, min_delay_seconds=10,
                               max_delay_seconds=900)  # fmt: skip
    settings = replace(settings, watermarks=policy)
    batches = [
        # No batch before it: nothing observed, the fixed 120 s applies. 10:01:00 - 120 s.
        [event("e1", "u", "2024-01-01T10:00:00Z", "1"), event("e2", "u", "2024-01-01T10:01:00Z", "1")],
        # Behind 10:01:00 by 0 and 30 s: delay 30 s. 10:05:00 - 30 s.
        [event("e3", "u", "2024-01-01T10:05:00Z", "1"), event("e4", "u", "2024-01-01T10:00:30Z", "1")],
        # Behind 10:05:00 by 0, 10 and 0 s: observed [30, 10], delay 30 s. 10:06:00 - 30 s.
        [
            event("e5", "u", "2024-01-01T10:06:00Z", "1"),
            event("e6", "u", "2024-01-01T10:04:50Z", "1"),
            event("e7", "u", "2024-01-01T10:05:20Z", "1"),
        ],
        # Ahead: lag 0. The horizon (600 s before 10:30) forgets 10:05 and 10:06; 0 is raised to the 10 s floor.
        [event("e8", "u", "2024-01-01T10:30:00Z", "1")],
        # 5,400 s behind: clamped to 900 s, and 10:31:00 - 900 s is behind 10:29:50, so the watermark stays.
        [event("e9", "u", "2024-01-01T10:31:00Z", "1"), event("e10", "u", "2024-01-01T09:00:00Z", "1")],
    ]
    for n, lines in enumerate(batches):
        land(settings, f"batch-{n}.jsonl", lines)
        run_once(spark, settings)

    got = [(utc(r.watermark), r.delay_seconds, r.observed_lag_seconds, r.advanced_by) for r in marks(spark, settings)]
    assert got == [
        (at("09:59:00"), 120.0, None, "events"),
        (at("10:04:30"), 30.0, 30.0, "events"),
        (at("10:05:30"), 30.0, 10.0, "events"),
        (at("10:29:50"), 10.0, 0.0, "events"),
        (at("10:29:50"), 900.0, 5400.0, "events"),
    ]
    for r in marks(spark, settings):
        assert r.watermark_lag_seconds is not None and r.watermark_lag_seconds > 0  # event time trails now
    # e6 (10:04:50) came while the watermark stood at 10:04:30 (its window closes at 10:06): on time.
    # e10 (09:00) is far behind: set aside as late.
    assert [r.event_id for r in read_table(spark, settings, SILVER_LATE_EVENTS).collect()] == ["e10"]


@pytest.mark.gold_outputs("hopping")
def test_idle_watermark_closes_the_last_windows_without_new_input(spark, settings) -> None:
    """Window 5 min, delay 120 s, lateness 60 s; idle after 30 s, at most 3,600 s of advance."""
    settings = replace(settings, watermarks=WatermarkSettings(idle_seconds=30, idle_max_advance_seconds=3600))
    land(
        settings,
        "first.jsonl",
        [
            event("a1", "A", "2024-01-01T10:00:30Z", "1"),
            event("a2", "A", "2024-01-01T10:03:00Z", "2"),
            event("b1", "B", "2024-01-01T10:06:10Z", "5"),
        ],
    )
    reports = run_once(spark, settings)
    assert [r.name for r in reports][-1] != "watermark_idle", "just processed: not idle"
    (first,) = marks(spark, settings)
    assert utc(first.watermark) == at("10:04:10")  # 10:06:10 - 120 s
    processed = utc(first.recorded_at)
    gold = tumbling_table(settings)

    def finals() -> dict[str, bool]:
        return {r.user_id: r.is_final for r in read_table(spark, settings, gold).collect()}

    assert finals() == {"A": False, "B": False}
    # Not idle yet (10 s), then idle but the watermark (10:04:10 + 60 s) closes no window: nothing recorded.
    assert advance_idle_watermark(spark, settings, now=processed + timedelta(seconds=10)) is None
    assert advance_idle_watermark(spark, settings, now=processed + timedelta(seconds=30 + 60)) is None
    assert len(marks(spark, settings)) == 1

    # 120 s past the idle time: 10:06:10 reaches A's [10:00, 10:05) + 60 s lateness = 10:06.
    report = advance_idle_watermark(spark, settings, now=processed + timedelta(seconds=30 + 120))
    assert report is not None and report.figures["windows_closed"] == 1
    assert finals() == {"A": True, "B": False}
    # 500 s: 10:12:30 closes B's [10:05, 10:10) (10:11).
    report = advance_idle_watermark(spark, settings, now=processed + timedelta(seconds=30 + 500))
    assert report is not None and report.figures["windows_closed"] == 1
    assert finals() == {"A": True, "B": True}
    # Far later: capped at 10:04:10 + 3,600 s = 11:04:10. No tumbling window is left open, but the hourly
    # hopping windows ending by 11:03:10 close; B's [10:05, 11:05) (closes 11:06) stays open.
    report = advance_idle_watermark(spark, settings, now=processed + timedelta(days=1))
    assert report is not None and report.figures["windows_closed"] == 0
    hopping = {
        (r.user_id, utc(r.window_start)): r.is_final
        for r in read_table(spark, settings, hopping_table(settings)).collect()
    }
    assert [key for key, final in hopping.items() if not final] == [("B", at("10:05:00"))]
    assert advance_idle_watermark(spark, settings, now=processed + timedelta(days=2)) is None

    idle = [(utc(r.watermark), r.advanced_by, r.events) for r in marks(spark, settings)][1:]
    assert idle == [(at("10:06:10"), "idle", 0), (at("10:12:30"), "idle", 0), (at("11:04:10"), "idle", 0)]
    closed = (
        read_table(spark, settings, GOLD_CORRECTIONS)
        .where((F.col("cause") == "window_closed") & (F.col("table_name") == tumbling_table(settings).name))
        .collect()
    )
    assert sorted((r.user_id, r.revision, r.new_is_final, r.new_total_amount) for r in closed) == [
        ("A", 2, True, Decimal("3.00")),
        ("B", 2, True, Decimal("5.00")),
    ]

    # The next batch starts from the idle watermark: B 10:09 (window closed at 10:11 ≤ 11:04:10) is late.
    land(settings, "after.jsonl", [event("b2", "B", "2024-01-01T10:09:00Z", "4")])
    run_once(spark, settings)
    late = read_table(spark, settings, SILVER_LATE_EVENTS).collect()
    assert [(r.event_id, utc(r.watermark)) for r in late] == [("b2", at("11:04:10"))]


def test_fixed_policy_records_its_delay_and_never_idles(spark, settings) -> None:
    land(settings, "one.jsonl", [event("a1", "A", "2024-01-01T10:00:30Z", "1")])
    run_once(spark, settings)
    (mark,) = marks(spark, settings)
    assert (utc(mark.watermark), mark.delay_seconds, mark.observed_lag_seconds) == (at("09:58:30"), 120.0, None)
    assert advance_idle_watermark(spark, settings, now=utc(mark.recorded_at) + timedelta(days=1)) is None


@pytest.mark.gold_outputs("hopping")
def test_hopping_windows_are_sums_of_the_tumbling_windows_they_cover(spark, settings) -> None:
    """1 h every 5 min over 5-minute windows; delay 120 s, lateness 60 s. Worked out by hand."""
    land(
        settings,
        "first.jsonl",
        [
            event("a1", "A", "2024-01-01T10:02:00Z", "1.10"),
            event("a2", "A", "2024-01-01T10:07:00Z", "2.20"),
            event("a3", "A", "2024-01-01T11:01:00Z", "4.00"),
        ],
    )
    run_once(spark, settings)
    hopping = hopping_table(settings)
    assert hopping.name == "gold.user_spend_1h_hopping"

    def hops() -> dict:
        return {
            utc(r.window_start): (r.total_amount, r.event_count, r.is_final, r.revision)
            for r in read_table(spark, settings, hopping).collect()
        }

    got = hops()
    # a1 (10:02) is in the hours starting 09:05 … 10:00; a2 (10:07) in 09:10 … 10:05; a3 (11:01) in 10:05 … 11:00.
    assert len(got) == 12 + 1 + 11  # 09:05…10:00 (a1) | 10:05 (a2, a3) | 10:10…11:00 (a3 only)
    assert got[at("09:05:00")][:2] == (Decimal("1.10"), 1)
    assert got[at("10:00:00")][:2] == (Decimal("3.30"), 2)
    assert got[at("10:05:00")][:2] == (Decimal("6.20"), 2)
    assert got[at("11:00:00")][:2] == (Decimal("4.00"), 1)
    # Watermark 11:01 - 120 s = 10:59: final when end + 60 s <= 10:59, i.e. the hours ending by 10:58.
    assert {start for start, v in got.items() if v[2]} == {
        at(f"{h:02d}:{m:02d}:00") for h, m in [(9, 5), (9, 10), (9, 15), (9, 20), (9, 25), (9, 30), (9, 35),
                                                (9, 40), (9, 45), (9, 50), (9, 55)]
    }  # fmt: skip
    # A late-but-allowed event (10:58, window [10:55, 11:00) closes at 11:01 > 10:59) revises every hour
    # covering it; each change is logged with the old and new values.
    land(settings, "second.jsonl", [event("a4", "A", "2024-01-01T10:58:00Z", "0.50")])
    run_once(spark, settings)
    after = hops()
    assert after[at("10:00:00")][:2] == (Decimal("3.80"), 3)
    assert after[at("10:00:00")][3] == got[at("10:00:00")][3] + 1
    assert after[at("11:00:00")] == got[at("11:00:00")], "not covering 10:58: unchanged"
    logged = (
        read_table(spark, settings, GOLD_CORRECTIONS)
        .where((F.col("table_name") == hopping.name) & (F.col("window_start") == F.lit(at("10:00:00"))))
        .collect()
    )
    assert [(r.old_total_amount, r.new_total_amount, r.cause) for r in logged] == [
        (Decimal("3.30"), Decimal("3.80"), "stream_update")
    ]


def test_an_idle_continuous_run_closes_the_last_window_on_its_own(spark, settings) -> None:
    """Watermark 10:07:59 - 120 s = 10:05:59 leaves [10:00, 10:05) one second short of closing (10:06);
    with no more input, a continuous run's idle advance (after 1 s idle) closes it."""
    streams = replace(settings.streams, trigger_interval_seconds=1)
    settings = replace(settings, watermarks=WatermarkSettings(idle_seconds=1), streams=streams)
    land(
        settings,
        "only.jsonl",
        [event("a1", "A", "2024-01-01T10:00:00Z", "1"), event("b1", "B", "2024-01-01T10:07:59Z", "2")],
    )
    gold = tumbling_table(settings)
    prepare(spark, settings)  # the tables exist before the first look at them
    stop = threading.Event()
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(reports=run_continuous(spark, settings, stop)))
    runner.start()
    try:
        deadline = time.monotonic() + 120
        final = False
        while time.monotonic() < deadline and not final:
            time.sleep(2)
            rows = read_table(spark, settings, gold).where(F.col("user_id") == "A").collect()
            final = bool(rows) and rows[0].is_final
    finally:
        stop.set()
        runner.join(timeout=120)
    assert final, "the idle advance did not close A's window"
    assert [r.name for r in result["reports"]][-1] == IDLE_ADVANCE
    idle = [r for r in marks(spark, settings) if r.advanced_by == "idle"]
    assert len(idle) == 1 and utc(idle[0].watermark) >= at("10:06:00")
