"""Window kinds beyond tumbling and hopping, on real streams and Delta tables, against figures worked out
by hand from each kind's rule and against Spark's own batch functions over all of silver."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from devtools.synthetic import StreamSpec, generate_lines
from runtime.checkpoints import checkpoint_dir, derived_stage_name, query_id, windows_stage_name
from runtime.runner import advance_idle_watermark, run_once
from tests.lines import event, land
from transforms.gold import derived as derived_windows
from transforms.gold.firings import firing_rows
from warehouse.catalog import (
    GOLD_CORRECTIONS,
    OPS_WATERMARKS,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    firings_table,
    global_table,
    sessions_table,
    tumbling_table,
)
from warehouse.delta import read_table
from warehouse.settings import WatermarkSettings

pytestmark = pytest.mark.gold_outputs("sessions", "global", "firings")


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2024-01-01T{clock}+00:00")


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


def sessions(spark, settings) -> dict:
    return {
        (r.user_id, utc(r.session_start)): (utc(r.session_end), r.total_amount, r.event_count, r.revision, r.is_final)
        for r in read_table(spark, settings, sessions_table(settings)).collect()
    }


def spark_sessions(spark, settings) -> dict:
    """Spark's own session_window over every silver event: the recomputation the table must equal."""
    window = F.session_window("event_time", f"{settings.windows.session_gap_minutes} minutes")
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
    table = sessions_table(settings)
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
    # The second run's derived batch started from where the first left the watermark, kept by the process:
    # the same instant a read of every ops.watermarks row recorded before now gives.
    derived = derived_stage_name(settings)
    writer = f"lakehouse:{derived}:{query_id(checkpoint_dir(settings, derived))}"
    assert derived_windows.APPLIED[writer][1] == derived_windows._applied_before(
        settings, windows_stage_name(settings), datetime.now(UTC) + timedelta(days=1)
    )
    assert derived_windows.APPLIED[writer][1] == at("11:58:00")

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


def test_firings_early_on_time_late_with_retractions_and_a_global_count_trigger(spark, settings) -> None:
    """Window 5 min, delay 120 s, lateness 60 s; early trigger, retracting; global trigger every 3 events."""
    settings = replace(settings, windows=replace(settings.windows, accumulation="retracting", global_trigger_count=3))
    batches = [
        # Watermark 10:01 - 120 s = 09:59: A's [10:00, 10:05) fires early.
        [event("a1", "A", "2024-01-01T10:00:30Z", "1"), event("a2", "A", "2024-01-01T10:01:00Z", "2")],
        # Watermark 10:05: A's end passed (on time, not final until 10:06); B's [10:05, 10:10) early.
        [event("a3", "A", "2024-01-01T10:03:00Z", "4"), event("b1", "B", "2024-01-01T10:07:00Z", "1")],
        # 10:04 is behind the watermark but within the lateness: a late firing of A. Watermark 10:18 closes
        # A (10:06) and passes B's end and closes it (10:11): B's on-time firing is also its last.
        [event("a4", "A", "2024-01-01T10:04:00Z", "5"), event("c1", "C", "2024-01-01T10:20:00Z", "1")],
    ]
    for n, lines in enumerate(batches):
        land(settings, f"batch-{n}.jsonl", lines)
        run_once(spark, settings)
    firings = read_table(spark, settings, firings_table(settings)).orderBy(
        "user_id", "revision", F.col("is_retraction").desc()
    )
    got = [
        (r.user_id, r.firing, r.revision, r.is_retraction, r.total_amount, r.event_count, r.is_final)
        for r in firings.collect()
    ]
    assert got == [
        ("A", "early", 1, False, Decimal("3.00"), 2, False),
        ("A", "on_time", 2, True, Decimal("3.00"), 2, False),
        ("A", "on_time", 2, False, Decimal("7.00"), 3, False),
        ("A", "late", 3, True, Decimal("7.00"), 3, True),
        ("A", "late", 3, False, Decimal("12.00"), 4, True),
        ("B", "early", 1, False, Decimal("1.00"), 1, False),
        ("B", "on_time", 2, True, Decimal("1.00"), 1, True),
        ("B", "on_time", 2, False, Decimal("1.00"), 1, True),
        ("C", "early", 1, False, Decimal("1.00"), 1, False),
    ]
    # A reader adding up what it received, retractions subtracted, holds gold's values.
    received = firings.groupBy("user_id", "window_start").agg(
        F.sum(F.when(F.col("is_retraction"), -F.col("total_amount")).otherwise(F.col("total_amount"))).alias("t")
    )
    gold = {
        (r.user_id, r.window_start): r.total_amount
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }
    assert {(r.user_id, r.window_start): r.t for r in received.collect()} == gold

    # Global windows: A's third event (a3) fires the trigger with 1 + 2 + 4; a4 runs on to 4 events.
    rows = {r.user_id: r for r in read_table(spark, settings, global_table(settings)).collect()}
    assert (rows["A"].event_count, rows["A"].total_amount, rows["A"].firings) == (4, Decimal("12.00"), 1)
    assert (rows["A"].fired_event_count, rows["A"].fired_total_amount) == (3, Decimal("7.00"))
    assert (rows["B"].event_count, rows["B"].firings, rows["B"].fired_total_amount) == (1, 0, None)

    # Every new table is a Delta table another engine reads: delta-rs sees the same rows.
    for table in (sessions_table(settings), global_table(settings), firings_table(settings)):
        other = DeltaTable(str(table.path(settings))).to_pyarrow_table()
        assert other.num_rows == read_table(spark, settings, table).count() > 0
        assert other.column_names == table.column_names


@pytest.mark.quick
@pytest.mark.parametrize(
    ("trigger", "accumulation", "expected"),
    [
        ("early", "accumulating", ["early 3.00/2", "on_time 7.00/3", "late 12.00/4"]),
        ("early", "discarding", ["early 3.00/2", "on_time 4.00/1", "late 5.00/1"]),
        ("early", "retracting", ["early 3.00/2", "on_time -3.00/2", "on_time 7.00/3", "late -7.00/3", "late 12.00/4"]),
        ("watermark", "accumulating", ["on_time 7.00/3", "late 12.00/4"]),
        # Under the watermark trigger nothing left before the on-time firing: it carries the whole value.
        ("watermark", "discarding", ["on_time 7.00/3", "late 5.00/1"]),
        ("watermark", "retracting", ["on_time 7.00/3", "late -7.00/3", "late 12.00/4"]),
    ],
)
def test_each_trigger_and_accumulation_mode_emits_what_the_rules_say(
    spark, settings, trigger, accumulation, expected
) -> None:
    """The three changes of A's window [10:00, 10:05) from the test above, one per batch, through
    ``firing_rows`` with the watermark before and after each batch (``-``: a retraction)."""
    settings = replace(settings, windows=replace(settings.windows, firing_trigger=trigger, accumulation=accumulation))
    changes = [
        # old amount, old count, new amount, new count, revision, final, cause, watermark before, after
        ("0.00", 0, "3.00", 2, 1, False, "stream_update", None, at("09:59:00")),
        ("3.00", 2, "7.00", 3, 2, False, "stream_update", at("09:59:00"), at("10:05:00")),
        ("7.00", 3, "12.00", 4, 3, True, "late_data", at("10:05:00"), at("10:18:00")),
    ]
    got = []
    for old_amount, old_count, new_amount, new_count, revision, final, cause, before, after in changes:
        row = spark.createDataFrame(
            [("A", at("10:00:00"), at("10:05:00"), Decimal(old_amount), Decimal(new_amount), old_count, new_count,
              False, final, revision, cause, at("12:00:00"), None)],
            "user_id string, window_start timestamp, window_end timestamp, old_total_amount decimal(18,2), "
            "new_total_amount decimal(18,2), old_event_count long, new_event_count long, old_is_final boolean, "
            "new_is_final boolean, revision int, cause string, corrected_at timestamp, gold_batch long",
        )  # fmt: skip
        fired = firing_rows(row, settings, before, after).orderBy(F.col("is_retraction").desc()).collect()
        got += [f"{r.firing} {'-' if r.is_retraction else ''}{r.total_amount}/{r.event_count}" for r in fired]
    assert got == expected
