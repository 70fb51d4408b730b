"""Batch re-runs: a micro-batch replayed after a crash (at any write) changes no row of any table."""

import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.runner import prepare
from tests.reference import hopping_totals
from transforms import reconcile
from transforms.gold import sessions as session_windows
from transforms.gold.derived import derive_windows
from transforms.gold.tumbling import update_windows
from transforms.silver import refine_events
from warehouse import delta, reads
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_CORRECTIONS,
    GOLD_FRAUD_ALERTS,
    GOLD_UNIQUE_URLS,
    OPS_DQ_RESULTS,
    OPS_RECONCILIATIONS,
    OPS_STREAM_PROGRESS,
    OPS_WATERMARKS,
    ORDER_PAYMENTS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    Table,
    all_tables,
    firings_table,
    global_table,
    hopping_table,
    kept_tables,
    sessions_table,
    tumbling_table,
)
from warehouse.delta import batch_scope, table_version
from warehouse.maintenance import checkpoint_log
from warehouse.settings import Settings

Key = tuple[str, int]  # (user_id, window start in epoch seconds)


def read(spark: SparkSession, settings: Settings, table: Table) -> DataFrame:
    return spark.read.format("delta").load(str(table.path(settings)))


def rows_of(spark: SparkSession, settings: Settings, table: Table) -> int:
    return read(spark, settings, table).count()


def at(hour: int, minute: int) -> int:
    return int(datetime(2024, 1, 1, hour, minute, tzinfo=UTC).timestamp())


def event(event_id: str, user: str, hh_mm: str, amount: str) -> str:
    return (
        f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "2024-01-01T{hh_mm}:00Z", "amount": {amount}}}'
    )


# e. A micro-batch re-run after a crash writes nothing twice.

WRITER = "lakehouse:test:crash"
DERIVED = "lakehouse:test:derived"
QUERY = "gold_crash_test"


def bronze_batch(spark: SparkSession, batch_id: int, lines: list[str]) -> DataFrame:
    """Landing lines as bronze rows of one batch; the columns not given (Kafka's, raw bytes) are null."""
    arrived = datetime(2024, 1, 2, 0, batch_id, tzinfo=UTC)
    source = f"/landing/batch-{batch_id}.jsonl"
    given = {"source": "file", "source_file": source, "file_modified_at": arrived, "ingest_time": arrived,
             "ingest_batch": batch_id, "ingest_date": arrived.date()}  # fmt: skip
    rows = [{**given, "raw": raw, "source_line": n} for n, raw in enumerate(lines, start=1)]
    columns = BRONZE_EVENTS.column_names
    return spark.createDataFrame([tuple(row.get(c) for c in columns) for row in rows], BRONZE_EVENTS.schema)


def _rows(frame: DataFrame) -> list[str]:
    return sorted(repr(tuple(row)) for row in frame.collect())


def assert_changes_no_row(spark: SparkSession, settings: Settings, step: Callable[[], object]) -> None:
    """Run ``step`` and assert every table holds the same rows as before it: a table with no new commit
    does (a Delta version's rows are fixed); a table ``step`` committed to is compared row by row with its
    version before ``step``."""
    tables = kept_tables(settings)
    before = [DeltaTable(str(table.path(settings))).version() for table in tables]
    step()
    for table, version in zip(tables, before, strict=True):
        if DeltaTable(str(table.path(settings))).version() != version:
            then = spark.read.format("delta").option("versionAsOf", version).load(str(table.path(settings)))
            assert _rows(read(spark, settings, table)) == _rows(then), table.name


def silver_batch(spark: SparkSession, settings: Settings, batch_id: int) -> DataFrame:
    rows = read(spark, settings, SILVER_EVENTS).where(F.col("silver_batch") == batch_id).collect()
    return spark.createDataFrame(rows, SILVER_EVENTS.schema)


def run_twice(spark: SparkSession, settings: Settings, step: Callable[[], dict[str, float]]) -> dict[str, float]:
    """Run ``step`` once, then again as a crashed batch's re-run: the re-run must change no row."""
    first = step()
    assert_changes_no_row(spark, settings, step)
    return first


def in_batch(batch_id: int, since: float, step: Callable[[], dict[str, float]]) -> Callable[[], dict[str, float]]:
    """``step`` as the stream runner runs it: inside the batch's scope (writer, batch, earliest start)."""

    def run() -> dict[str, float]:
        with batch_scope(WRITER, batch_id, since):
            return step()

    return run


def crash(*_: object, **__: object) -> None:
    raise RuntimeError("killed")


@pytest.mark.gold_outputs("all")
@pytest.mark.parametrize("writes", ["delta-rs", "spark"])
def test_batch_rerun_after_crash_writes_nothing_twice(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch, writes: str
) -> None:
    # Small writes are committed by delta-rs, large ones by Spark (warehouse.delta.SMALL_WRITE_ROWS), and few
    # rows are read by delta-rs (warehouse.reads.LOCAL_READ_ROWS): both ways must be exactly once. "spark"
    # makes every write and every read large.
    small = 0 if writes == "spark" else delta.SMALL_WRITE_ROWS
    few = 0 if writes == "spark" else reads.LOCAL_READ_ROWS

    def write_by_the_chosen_way() -> None:
        monkeypatch.setattr(delta, "SMALL_WRITE_ROWS", small)
        monkeypatch.setattr(reads, "LOCAL_READ_ROWS", few)

    write_by_the_chosen_way()
    prepare(spark, settings)
    since = time.time()
    batch0 = bronze_batch(
        spark,
        0,
        [
            event("a1", "A", "10:00", "5"),
            event("b1", "B", "10:02", "3"),
            event("a2", "A", "10:04", "2"),
            event("a2", "A", "10:04", "2"),
            "not json",
            event("b2", "B", "10:16", "1.50"),
            event("a3", "A", "10:20", "4"),
        ],
    )
    batch1 = bronze_batch(
        spark,
        1,
        [
            event("a1", "A", "10:00", "5"),  # redelivery from history
            event("b1", "B", "10:02", "4"),  # conflicting redelivery
            event("a4", "A", "10:01", "10"),  # late: [10:00, 10:05) closed at 10:06 <= watermark 10:18
            event("b3", "B", "10:19", "2.25"),  # on time, revises [10:15, 10:20)
            "[1]",
            event("a5", "A", "10:30", "1"),  # watermark to 10:28: closes [10:15, 10:20) and [10:20, 10:25)
        ],
    )

    figures = run_twice(spark, settings, in_batch(0, since, lambda: refine_events(batch0, 0, settings, WRITER)))
    assert (figures["rows_written"], figures["duplicates"], figures["quarantined"]) == (5, 1, 1)
    events0 = silver_batch(spark, settings, 0)
    run_twice(spark, settings, in_batch(0, since, lambda: update_windows(events0, 0, settings, WRITER, QUERY)))

    figures = run_twice(spark, settings, in_batch(1, since, lambda: refine_events(batch1, 1, settings, WRITER)))
    assert (figures["rows_written"], figures["duplicates"], figures["conflicting"]) == (3, 2, 1)
    events1 = silver_batch(spark, settings, 1)
    # Killed after the batch's appends (late event, corrections) committed, before its MERGE.
    monkeypatch.setattr(delta, "merge_rows_once" if writes == "delta-rs" else "merge_once", crash)
    with pytest.raises(RuntimeError, match="killed"):
        in_batch(1, since, lambda: update_windows(events1, 1, settings, WRITER, QUERY))()
    monkeypatch.undo()
    write_by_the_chosen_way()
    run_twice(spark, settings, in_batch(1, since, lambda: update_windows(events1, 1, settings, WRITER, QUERY)))

    # The derived windows follow on their own stream over ops.watermarks, one batch per window batch here;
    # the second is killed after its hopping windows committed, before its sessions' MERGE.
    marks = read(spark, settings, OPS_WATERMARKS).orderBy("recorded_at").collect()
    for derived_batch, mark in enumerate(marks):
        rows = spark.createDataFrame([mark], OPS_WATERMARKS.schema)
        step = in_batch(
            derived_batch, since, lambda rows=rows, b=derived_batch: derive_windows(rows, b, settings, DERIVED, QUERY)
        )
        if derived_batch == 1:
            monkeypatch.setattr(session_windows, "merge_changes_once", crash)
            with pytest.raises(RuntimeError, match="killed"):
                step()
            monkeypatch.undo()
            write_by_the_chosen_way()
        run_twice(spark, settings, step)

    counts = {t.name: rows_of(spark, settings, t) for t in all_tables(settings)}
    assert counts == {
        BRONZE_EVENTS.name: 0,  # the batches were handed to the writers directly
        SILVER_EVENTS.name: 8,
        SILVER_QUARANTINE.name: 2,
        SILVER_DUPLICATES.name: 3,
        SILVER_LATE_EVENTS.name: 1,
        tumbling_table(settings).name: 5,
        hopping_table(settings).name: len(hopping_totals(windows_now(spark, settings))),
        GOLD_CORRECTIONS.name: rows_of(spark, settings, GOLD_CORRECTIONS),  # checked table by table below
        sessions_table(settings).name: 2,  # A and B each one session (every gap under 30 min)
        global_table(settings).name: 2,
        # Batch 0: four first writes (A and B at 10:00 on time and final, the others early); batch 1: B 10:15
        # and A 10:20 on time (their ends passed 10:28), A 10:30 early. Each once, however often re-run.
        firings_table(settings).name: 7,
        ORDER_PAYMENTS.name: 0,  # no orders or payments
        GOLD_UNIQUE_URLS.name: 0,  # the keyed streams did not run
        GOLD_FRAUD_ALERTS.name: 0,
        OPS_WATERMARKS.name: 2,
        OPS_STREAM_PROGRESS.name: 0,  # no stream ran: the batch functions were called directly
        OPS_RECONCILIATIONS.name: 0,
        OPS_DQ_RESULTS.name: 0,
    }
    gold = read(spark, settings, tumbling_table(settings))
    state = {
        (r.user_id, r.start): (r.total_amount, r.event_count, r.revision, r.is_final)
        for r in gold.select("*", F.unix_seconds("window_start").alias("start")).collect()
    }
    assert state == {
        ("A", at(10, 0)): (Decimal("7.00"), 2, 1, True),
        ("B", at(10, 0)): (Decimal("3.00"), 1, 1, True),
        ("B", at(10, 15)): (Decimal("3.75"), 2, 2, True),
        ("A", at(10, 20)): (Decimal("4.00"), 1, 2, True),
        ("A", at(10, 30)): (Decimal("1.00"), 1, 1, False),
    }
    late = read(spark, settings, SILVER_LATE_EVENTS).first()
    assert (late.event_id, late.amount, late.lateness_seconds) == ("a4", Decimal("10.00"), 17 * 60.0)
    logged = read(spark, settings, GOLD_CORRECTIONS).select("*").collect()
    five = tumbling_table(settings).name
    five_minute = [(r.user_id, r.cause, r.revision) for r in logged if r.table_name == five]
    assert sorted(five_minute) == [("A", "window_closed", 2), ("B", "stream_update", 2)]
    hourly = [(r.table_name, r.user_id, r.window_start, r.revision) for r in logged if r.table_name != five]
    assert len(hourly) == len(set(hourly)), "each change of an hour or a session is logged once"
    # The hours follow the 5-minute windows exactly, however often the batches ran.
    hours = {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read(spark, settings, hopping_table(settings)).collect()
    }
    assert hours == hopping_totals(windows_now(spark, settings))
    sessions = {
        r.user_id: (r.total_amount, r.event_count) for r in read(spark, settings, sessions_table(settings)).collect()
    }
    assert sessions == {"A": (Decimal("22.00"), 5), "B": (Decimal("6.75"), 3)}  # a4, late for its window, too


def windows_now(spark: SparkSession, settings: Settings) -> dict:
    return {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read(spark, settings, tumbling_table(settings)).collect()
    }


# f. A reconcile killed between its two writes, or after both, ends exact when re-run.

RECONCILER = "lakehouse:test:reconcile"


@pytest.mark.gold_outputs("hopping", "firings")
def test_reconcile_rerun_after_crash_at_each_write_ends_exact(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(spark, settings)

    def stream_batch(batch_id: int, lines: list[str]) -> None:
        refine_events(bronze_batch(spark, batch_id, lines), batch_id, settings, WRITER)
        silver_version = table_version(spark, settings, SILVER_EVENTS)
        update_windows(silver_batch(spark, settings, batch_id), batch_id, settings, WRITER, QUERY, silver_version)

    # c1 moves the watermark to 10:28 (its time minus the delay), so a2 then arrives too late.
    stream_batch(0, [event("a1", "A", "10:00", "5"), event("b1", "B", "10:02", "3"), event("c1", "C", "10:30", "1")])
    stream_batch(1, [event("a2", "A", "10:04", "2")])
    first_late = read(spark, settings, SILVER_LATE_EVENTS)
    assert [r.event_id for r in first_late.collect()] == ["a2"]
    first_late = spark.createDataFrame(first_late.collect(), SILVER_LATE_EVENTS.schema)  # batch 0, as Spark re-reads it

    def a_1000() -> tuple:
        row = (
            read(spark, settings, tumbling_table(settings))
            .where("user_id = 'A'")
            .where(F.unix_seconds("window_start") == at(10, 0))
            .first()
        )
        return (row.total_amount, row.event_count, row.revision)

    def logged(user: str) -> list[tuple]:
        rows = read(spark, settings, GOLD_CORRECTIONS).where(
            f"cause = 'reconciliation' AND user_id = '{user}' AND table_name = '{tumbling_table(settings).name}'"
        )
        return sorted((r.revision, r.old_total_amount, r.new_total_amount) for r in rows.collect())

    # Killed before any write, then after the MERGE but before the log: gold is ahead of the log.
    assert a_1000() == (Decimal("5.00"), 1, 1)
    monkeypatch.setattr(reconcile, "_merge_repairs", crash)
    with pytest.raises(RuntimeError, match="killed"):
        reconcile.fold_late_events(first_late, 0, settings, RECONCILER)
    monkeypatch.undo()
    assert a_1000() == (Decimal("5.00"), 1, 1)
    monkeypatch.setattr(reconcile, "_changes_in_commit", crash)
    with pytest.raises(RuntimeError, match="killed"):
        reconcile.fold_late_events(first_late, 0, settings, RECONCILER)
    monkeypatch.undo()
    assert a_1000() == (Decimal("7.00"), 2, 2)
    assert logged("A") == []

    # Before the re-run, another too-late event for the same window arrives: recomputing now would give 10.00,
    # but the re-run logs what its MERGE did (5 → 7); the next batch then logs 7 → 10.
    stream_batch(2, [event("a3", "A", "10:03", "3")])
    figures = run_twice(spark, settings, lambda: reconcile.fold_late_events(first_late, 0, settings, RECONCILER))
    assert figures["keys_changed"] == 1
    assert a_1000() == (Decimal("7.00"), 2, 2)
    assert logged("A") == [(2, Decimal("5.00"), Decimal("7.00"))]
    second_late = read(spark, settings, SILVER_LATE_EVENTS).where("event_id = 'a3'")
    run_twice(spark, settings, lambda: reconcile.fold_late_events(second_late, 1, settings, RECONCILER))
    assert a_1000() == (Decimal("10.00"), 3, 3)
    assert logged("A") == [(2, Decimal("5.00"), Decimal("7.00")), (3, Decimal("7.00"), Decimal("10.00"))]
    assert rows_of(spark, settings, OPS_RECONCILIATIONS) == 2

    # A date repair killed between its writes resumes under the same run number on the next run.
    gold_path = str(tumbling_table(settings).path(settings))
    spark.sql(f"UPDATE delta.`{gold_path}` SET total_amount = total_amount + 0.01 WHERE user_id = 'B'")
    monkeypatch.setattr(reconcile, "_changes_in_commit", crash)
    with pytest.raises(RuntimeError, match="killed"):
        reconcile.repair_dates(spark, settings, [date(2024, 1, 1)])
    monkeypatch.undo()
    assert read(spark, settings, tumbling_table(settings)).where("user_id = 'B'").first().total_amount == Decimal(
        "3.00"
    )
    assert logged("B") == []
    assert reconcile.repair_dates(spark, settings, [date(2024, 1, 1)])["keys_changed"] == 1
    assert logged("B") == [(2, Decimal("3.01"), Decimal("3.00"))]

    def repair_again() -> None:
        assert reconcile.repair_dates(spark, settings, [date(2024, 1, 1)])["keys_changed"] == 0

    assert_changes_no_row(spark, settings, repair_again)


@pytest.mark.quick
def test_a_batch_written_again_after_maintains_log_checkpoint_writes_nothing_twice(
    spark: SparkSession, tmp_path
) -> None:
    """`maintain` checkpoints logs with delta-rs: Spark, reading the table from that checkpoint alone, still
    knows each writer's last transaction version, so a batch written again after a crash is skipped."""
    path = tmp_path / "t"
    for batch in range(3):
        rows = spark.range(batch * 10, batch * 10 + 10)
        rows.write.format("delta").mode("append").option("txnAppId", "app").option("txnVersion", batch).save(str(path))
    checkpoint_log(path)
    assert (path / "_delta_log" / f"{2:020d}.checkpoint.parquet").is_file()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # read the log again, from the checkpoint
    again = spark.range(20, 30).write.format("delta").mode("append")
    again.option("txnAppId", "app").option("txnVersion", 2).save(str(path))
    assert spark.read.format("delta").load(str(path)).count() == 30
    assert DeltaTable(str(path)).version() == 2
