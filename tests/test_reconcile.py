"""Reconciliation on real streams and Delta tables: late events folded in, dates repaired, nothing twice."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from devtools.synthetic import StreamSpec, generate_lines
from runtime.runner import run_once, run_reconcile
from tests.lines import HOURS_LATER, SEEDS_EXAMPLE, TOO_LATE, event, land
from tests.reference import landing_lines, window_totals
from transforms.reconcile import gold_silver_version
from warehouse.catalog import (
    GOLD_CORRECTIONS,
    OPS_RECONCILIATIONS,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    hopping_table,
    kept_tables,
    tumbling_table,
)
from warehouse.delta import read_table, table_version


def gold_values(spark, settings) -> dict[tuple[str, datetime], tuple[Decimal, int]]:
    return {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }


def versions(spark, settings) -> dict[str, int | None]:
    return {t.name: table_version(spark, settings, t) for t in kept_tables(settings)}


@pytest.mark.gold_outputs("hopping")
def test_seeds_example_too_late_event_is_folded_in(spark, settings) -> None:
    """A 10:00→5, B 10:02→3, A 10:04→2, B 10:06→1; an event hours later; then the too-late A 10:01→1."""
    land(settings, "first.jsonl", SEEDS_EXAMPLE)
    run_once(spark, settings)
    land(settings, "later.jsonl", [HOURS_LATER])
    run_once(spark, settings)
    land(settings, "too-late.jsonl", [TOO_LATE])
    run_once(spark, settings)

    a_1000 = ("A", datetime(2024, 1, 1, 10, 0, tzinfo=UTC))
    assert gold_values(spark, settings)[a_1000] == (Decimal("7.00"), 2)
    late = read_table(spark, settings, SILVER_LATE_EVENTS).collect()
    assert [(r.event_id, r.amount) for r in late] == [("a3", Decimal("1.00"))]
    # Each batch carries its lines through silver to gold, and gold's MERGE records the silver it reflects
    # (the too-late event's batch changed no window, so no MERGE: gold reflects the silver before it).
    assert gold_silver_version(spark, settings) == table_version(spark, settings, SILVER_EVENTS) - 1

    reports = run_reconcile(spark, settings)
    assert reports[0].figures["late_events"] == 1
    assert reports[0].figures["keys_changed"] == 1

    row = read_table(spark, settings, tumbling_table(settings)).where(F.col("user_id") == "A").collect()
    by_start = {r.window_start.replace(tzinfo=UTC): r for r in row}
    folded = by_start[a_1000[1]]
    assert (folded.total_amount, folded.event_count, folded.is_final) == (Decimal("8.00"), 3, True)
    logged = read_table(spark, settings, GOLD_CORRECTIONS).where(F.col("cause") == "reconciliation")
    corrections = logged.where(F.col("table_name") == tumbling_table(settings).name).collect()
    assert len(corrections) == 1
    # Each hour starting every 5 min that covers A's [10:00, 10:05) (09:05 … 10:00) follows it: 7 → 8.
    hours = logged.where(F.col("table_name") == hopping_table(settings).name).collect()
    assert sorted(r.window_start.strftime("%H:%M") for r in hours) == [
        f"{h:02d}:{m:02d}" for h, m in [(9, m) for m in range(5, 60, 5)] + [(10, 0)]
    ]
    assert {(r.user_id, r.old_total_amount, r.new_total_amount) for r in hours} == {
        ("A", Decimal("7.00"), Decimal("8.00"))
    }
    (correction,) = corrections
    assert (correction.user_id, correction.old_total_amount, correction.new_total_amount) == (
        "A",
        Decimal("7.00"),
        Decimal("8.00"),
    )
    assert (correction.old_event_count, correction.new_event_count) == (2, 3)
    assert correction.revision == folded.revision

    # Nothing new: a second reconcile writes no new version of any table.
    before = versions(spark, settings)
    assert run_reconcile(spark, settings)[0].batches == 0
    assert versions(spark, settings) == before


def test_generated_stream_after_reconcile_equals_the_reference(spark, settings) -> None:
    spec = StreamSpec(
        events=2000, users=15, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.04, invalid_fraction=0.03, seed=5,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    parts = 3
    for part in range(parts):
        land(settings, f"part{part}.jsonl", lines[part * len(lines) // parts : (part + 1) * len(lines) // parts])
        run_once(spark, settings)
    assert read_table(spark, settings, SILVER_LATE_EVENTS).count() > 0

    expected = window_totals(landing_lines(settings.landing_dir))
    assert gold_values(spark, settings) != expected  # the late events are still aside
    run_reconcile(spark, settings)
    assert gold_values(spark, settings) == expected

    # The sweep of every date finds nothing to repair; then a tampered gold is put right.
    dates = sorted({start.date() for _, start in expected})
    assert run_reconcile(spark, settings, dates)[1].figures["keys_changed"] == 0
    gold_path = str(tumbling_table(settings).path(settings))
    first_user, first_start = min(expected, key=lambda key: key[1])
    start_text = first_start.strftime("%Y-%m-%d %H:%M:%S")
    # A total off by one cent, a missing window and a window without events: each must be repaired.
    spark.sql(f"UPDATE delta.`{gold_path}` SET total_amount = total_amount + 0.01 WHERE window_start = '{start_text}'")
    spark.sql(f"DELETE FROM delta.`{gold_path}` WHERE user_id = '{first_user}' AND window_start > '{start_text}'")
    spark.createDataFrame(
        [("ghost", first_start, first_start, Decimal("1.00"), 1, 1, True, datetime.now(UTC))],
        tumbling_table(settings).schema,
    ).write.format("delta").mode("append").save(gold_path)
    assert gold_values(spark, settings) != expected

    reports = run_reconcile(spark, settings, dates)
    assert reports[1].figures["keys_changed"] > 2
    assert gold_values(spark, settings) == expected
    assert run_reconcile(spark, settings, dates)[1].figures["keys_changed"] == 0
    kinds = {r.kind for r in read_table(spark, settings, OPS_RECONCILIATIONS).collect()}
    assert kinds == {"late_events", "dates"}
    assert date(2024, 1, 1) in dates


def test_replay_rebuilds_from_bronze_and_equals_live_after_reconcile(spark, settings) -> None:
    spec = StreamSpec(
        events=1200, users=10, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.05, invalid_fraction=0.03, seed=9,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    for part in range(2):
        land(settings, f"part{part}.jsonl", lines[part * len(lines) // 2 : (part + 1) * len(lines) // 2])
        run_once(spark, settings)
    run_reconcile(spark, settings)
    expected = window_totals(landing_lines(settings.landing_dir))
    live = gold_values(spark, settings)
    assert live == expected
    gold = tumbling_table(settings)
    gold_version = table_version(spark, settings, gold)

    from runtime.replay import run_replay

    report = run_replay(spark, settings)
    assert report.gold_keys_changed == 0  # the rebuild agrees with the reconciled live gold
    assert gold_values(spark, settings) == expected
    # The previous content stays reachable by time travel.
    old = spark.read.format("delta").option("versionAsOf", gold_version).load(str(gold.path(settings)))
    assert old.count() == len(expected)

    # Later input flows on top of the swapped tables: nothing is counted twice, late data still folds in.
    land(settings, "after.jsonl", [event("z1", "user-00001", "2024-01-01T00:00:01Z", "7.25")])
    run_once(spark, settings)
    run_reconcile(spark, settings)
    assert gold_values(spark, settings) == window_totals(landing_lines(settings.landing_dir))
    # Replay again with no new input changes no value.
    before = gold_values(spark, settings)
    assert run_replay(spark, settings).gold_keys_changed == 0
    assert gold_values(spark, settings) == before
