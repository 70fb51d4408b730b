"""Dagster automation with a real instance: sensor cursors, schedules, the reconcile and sweep jobs."""

from datetime import UTC, datetime
from decimal import Decimal

import dagster as dg
import pytest
from pyspark.sql import functions as F

from orchestration import definitions, pipeline, reconcile
from orchestration.resources import lakehouse_resource
from runtime.runner import run_once
from tests.lines import HOURS_LATER, SEEDS_EXAMPLE, TOO_LATE, event, land
from warehouse.catalog import GOLD_CORRECTIONS, tumbling_table
from warehouse.delta import read_table


def job_defs(settings) -> dg.Definitions:
    return definitions.build_defs(settings, [pipeline, reconcile])


def ticker(settings, instance: dg.DagsterInstance, sensor_name: str):
    """Ticks a sensor of ``settings``' definitions as the daemon does: with the cursor it is given and the
    ``lakehouse`` resource, which alone says where the lakehouse lives."""
    sensor = job_defs(settings).resolve_sensor_def(sensor_name)
    resources = {"lakehouse": lakehouse_resource(settings)}

    def tick(cursor: str | None = None):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            return sensor(context)

    return tick


def test_landing_sensor_cursor_follows_arrivals(settings) -> None:
    with dg.instance_for_test() as instance:
        landing_sensor = ticker(settings, instance, "landing_sensor")
        skipped = landing_sensor()
        assert isinstance(skipped, dg.SkipReason) and "no new landing files" in skipped.skip_message

        land(settings, "one.jsonl", [event("e1", "A", "2024-01-01T10:00:00Z", "1")])
        land(settings, "two.jsonl", [event("e2", "A", "2024-01-01T10:01:00Z", "1")])
        result = landing_sensor()
        assert isinstance(result, dg.SensorResult)
        assert len(result.run_requests) == 1
        newest = sorted(p.name for p in settings.landing_dir.iterdir())[-1]
        assert newest.endswith("two.jsonl")
        assert result.cursor == f"{(settings.landing_dir / newest).stat().st_mtime_ns}/{newest}"

        again = landing_sensor(result.cursor)
        assert isinstance(again, dg.SkipReason) and newest in again.skip_message

        land(settings, "three.jsonl", [event("e3", "A", "2024-01-01T10:02:00Z", "1")])
        third = landing_sensor(result.cursor)
        assert third.cursor.endswith("three.jsonl") and third.run_requests[0].run_key == f"landing:{third.cursor}"

        # A file copied in by hand, under a name that sorts before every stamped one, is new too.
        (settings.landing_dir / "0-copied-by-hand.jsonl").write_text(event("e4", "A", "2024-01-01T10:03:00Z", "1"))
        copied = landing_sensor(third.cursor)
        assert copied.cursor.endswith("/0-copied-by-hand.jsonl") and len(copied.run_requests) == 1


def test_late_data_sensor_then_reconcile_job_folds_the_seeds_example(spark, settings) -> None:
    with dg.instance_for_test() as instance:
        late_data_sensor = ticker(settings, instance, "late_data_sensor")
        missing = late_data_sensor()
        assert "does not exist yet" in missing.skip_reason.skip_message and not missing.run_requests
        land(settings, "seeds.jsonl", SEEDS_EXAMPLE)
        run_once(spark, settings)
        land(settings, "later.jsonl", [HOURS_LATER])
        run_once(spark, settings)
        # The hours-later event moved the watermark, but nothing is late yet.
        quiet = late_data_sensor()
        assert "nothing late" in quiet.skip_reason.skip_message and not quiet.run_requests
        cursor = quiet.cursor
        table_id = cursor.partition("@")[2]
        assert cursor == f"0@{table_id}"

        land(settings, "too-late.jsonl", [TOO_LATE])
        run_once(spark, settings)
        fired = late_data_sensor(cursor)
        version, _, same_table = fired.cursor.partition("@")
        assert same_table == table_id and int(version) > 0
        assert fired.run_requests[0].run_key == f"late_events:v{fired.cursor}"
        again = late_data_sensor(fired.cursor)
        assert not again.run_requests and again.cursor == fired.cursor
        # A cursor from a table that no longer exists (the lakehouse was reset, the instance kept) does not
        # hide the new table's late events, even though its version number is higher.
        stale = late_data_sensor("99@an-old-table")
        assert stale.run_requests and stale.cursor == fired.cursor

        result = job_defs(settings).resolve_job_def("reconcile_job").execute_in_process(instance=instance)
        assert result.success
        materialized = [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
        keys = {e.asset_key.to_user_string() for e in materialized}
        assert keys == {"gold/user_spend_5m", "gold/corrections"}  # the hours follow inside the same job
        metadata = materialized[0].event_specific_data.materialization.metadata
        assert metadata["late_events_folded"].value == 1
        assert metadata["corrections_written"].value == 1
        assert "reconcile_seconds" in metadata

    gold = read_table(spark, settings, tumbling_table(settings)).where(F.col("user_id") == "A").collect()
    folded = next(r for r in gold if r.window_start.replace(tzinfo=UTC) == datetime(2024, 1, 1, 10, 0, tzinfo=UTC))
    assert (folded.total_amount, folded.event_count) == (Decimal("8.00"), 3)
    causes = [
        r.cause
        for r in read_table(spark, settings, GOLD_CORRECTIONS).collect()
        if r.table_name == tumbling_table(settings).name
    ]
    assert causes.count("reconciliation") == 1


def test_completeness_sweep_partition_repairs_its_date(spark, settings) -> None:
    land(settings, "day.jsonl", [event("d1", "D", "2024-01-02T08:00:00Z", "2.50")])
    run_once(spark, settings)
    gold_path = str(tumbling_table(settings).path(settings))
    spark.sql(f"UPDATE delta.`{gold_path}` SET total_amount = 9.99")
    with dg.instance_for_test() as instance:
        job = job_defs(settings).resolve_job_def("completeness_sweep")
        assert job.partitions_def.get_partition_keys()[0] == "2024-01-01"
        result = job.execute_in_process(instance=instance, partition_key="2024-01-02")
        assert result.success
    row = read_table(spark, settings, tumbling_table(settings)).first()
    assert (row.total_amount, row.event_count) == (Decimal("2.50"), 1)


@pytest.mark.quick
def test_schedules_target_the_reconcile_and_sweep_jobs() -> None:
    defs = definitions.defs
    schedule = defs.resolve_schedule_def("reconcile_schedule")
    assert schedule.cron_schedule == "*/15 * * * *" and schedule.job_name == "reconcile_job"
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2024, 1, 3, 2, 0, tzinfo=UTC)
        )
        requests = list(schedule.evaluate_tick(context).run_requests or [])
        assert len(requests) == 1
        sweep = defs.resolve_schedule_def("completeness_sweep_schedule")
        nightly = list(sweep.evaluate_tick(context).run_requests or [])
        assert [r.partition_key for r in nightly] == ["2024-01-02"]
    sensors = {s.name for s in defs.sensors}
    assert sensors == {
        "landing_sensor",
        "late_data_sensor",
        "after_reconcile_sensor",
        "kafka_sensor",
        "stream_progress_sensor",
        "dead_run_sensor",
    }
