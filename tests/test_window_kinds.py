"""Window kinds beyond tumbling and hopping, on real streams and Delta tables, against figures worked out
by hand from each kind's rule and against Spark's own batch functions over all of silver."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from tests.lines import event, land
from transforms.streams import advance_idle_watermark, run_once
from transforms.synthetic import StreamSpec, generate_lines
from warehouse.catalog import GOLD_CORRECTIONS, OPS_WATERMARKS, SILVER_EVENTS, SILVER_LATE_EVENTS, user_sessions_table
from warehouse.delta import read_table
from warehouse.settings import WatermarkSettings

pytestmark = pytest.mark.xdist_group("window_kinds")


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2024-01-01T{clock}+00:00")


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def sessions(spark, settings) -> dict:
    return {
        (r.user_id, utc(r.session_start)): (utc(r.session_end), r.total_amount, r.event_count, r.revision, r.is_final)
        for r in read_table(spark, settings, user_sessions_table(settings)).collect()
    }


def spark_sessions(spark, settings) -> dict:
    """Spark's own session_window over every silver event: the recomputation the table must equal."""
    window = F.session_window("event_time", f"{settings.session_gap_minutes} minutes")
    rows = (
        read_table(spark, settings, SILVER_EVENTS)
        .groupBy("user_id", window.alias("s"))
        .agg(F.sum("amount").alias("total"), F.count("*").alias("n"))
        .collect()
    )
    return {(r.user_id, utc(r.s.start)): (utc(r.s.end), r.total, r.n) for r in rows}


def test_sessions_split_at_the_gap_merge_when_a_late_event_bridges_them_and_close_when_idle(spark, settings) -> None:
    """Gap 30 min, watermark delay 120 s, lateness 60 s; idle after 30 s, at most 2 h of advance."""
    settings = replace(settings, watermarks=WatermarkSettings(idle_seconds=30, idle_max_advance_seconds=7200))
    table = user_sessions_table(settings)
    land(
        settings,
        "first.jsonl",
        [
            event("a1", "A", "2024-01-01T10:00:00Z", "1"),
            event("a2", "A", "2024-01-01T10:10:00Z", "2"),
            event("a3", "A", "2024-01-01T10:50:00Z", "4"),  # 40 min after a2: a new session
            event("b1", "B", "2024-01-01T10:00:00Z", "5"),
            event("b2", "B", "2024-01-01T10:30:01Z", "1"),  # a second over one gap after b1: a new session
            event("d1", "D", "2024-01-01T10:00:00Z", "1"),
            event("d2", "D", "2024-01-01T10:30:00Z", "2"),  # exactly one gap after d1: the same session
            event("c1", "C", "2024-01-01T12:00:00Z", "1"),  # watermark 11:58
        ],
    )
    run_once(spark, settings)
    # Final when session_end + 60 s <= 11:58.
    assert sessions(spark, settings) == {
        ("A", at("10:00:00")): (at("10:40:00"), Decimal("3.00"), 2, 1, True),
        ("A", at("10:50:00")): (at("11:20:00"), Decimal("4.00"), 1, 1, True),
        ("B", at("10:00:00")): (at("10:30:00"), Decimal("5.00"), 1, 1, True),
        ("B", at("10:30:01")): (at("11:00:01"), Decimal("1.00"), 1, 1, True),
        ("D", at("10:00:00")): (at("11:00:00"), Decimal("3.00"), 2, 1, True),
        ("C", at("12:00:00")): (at("12:30:00"), Decimal("1.00"), 1, 1, False),
    }

    # 10:30 is within the gap of both A sessions (before 10:40, after 10:50 - 30 min): they merge. It is
    # late for its tumbling window, but a session takes every event: a late firing of a final session.
    land(settings, "late.jsonl", [event("a4", "A", "2024-01-01T10:30:00Z", "8")])
    run_once(spark, settings)
    assert [r.event_id for r in read_table(spark, settings, SILVER_LATE_EVENTS).collect()] == ["a4"]
    got = sessions(spark, settings)
    assert got[("A", at("10:00:00"))] == (at("11:20:00"), Decimal("15.00"), 4, 2, True)
    assert ("A", at("10:50:00")) not in got
    logged = (
        read_table(spark, settings, GOLD_CORRECTIONS)
        .where(F.col("table_name") == table.name)
        .orderBy("window_start")
        .collect()
    )
    assert [
        (utc(r.window_start), r.old_total_amount, r.new_total_amount, r.old_event_count, r.new_event_count,
         r.revision, r.cause)
        for r in logged
    ] == [
        (at("10:00:00"), Decimal("3.00"), Decimal("15.00"), 2, 4, 2, "late_data"),
        (at("10:50:00"), Decimal("4.00"), Decimal("0.00"), 1, 0, 2, "session_merged"),
    ]  # fmt: skip
    assert {k: v[:3] for k, v in sessions(spark, settings).items()} == spark_sessions(spark, settings)

    # No more input: the idle watermark (11:58 + up to 2 h) passes C's end 12:30 + 60 s and closes it.
    recorded = max(utc(r.recorded_at) for r in read_table(spark, settings, OPS_WATERMARKS).collect())
    report = advance_idle_watermark(spark, settings, now=recorded + timedelta(hours=3))
    assert report is not None and report.figures["sessions_closed"] == 1
    assert sessions(spark, settings)[("C", at("12:00:00"))][3:] == (2, True)


def test_sessions_equal_spark_session_window_over_silver_for_a_disordered_stream(spark, settings) -> None:
    """A generated stream with disorder, duplicates and late events, in three arrivals."""
    spec = StreamSpec(events=1500, users=30, rate=0.05, disorder_seconds=1800, late_fraction=0.05, seed=11)
    lines = list(generate_lines(spec))
    for n in range(3):
        land(settings, f"part-{n}.jsonl", lines[n * 500 : (n + 1) * 500])
        run_once(spark, settings)
    got = {k: v[:3] for k, v in sessions(spark, settings).items()}
    assert len(got) > 20, "the stream should make many sessions"
    assert got == spark_sessions(spark, settings)
