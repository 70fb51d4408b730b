"""Data quality: the Great Expectations suites over a real lakehouse, the report, `lakehouse validate`, and
the Dagster checks (blocking and warning).

One lakehouse is built for the module (streams, then late events, then a reconcile). Tests that run the
streams come before the tests that rewrite tables behind the pipeline's back; each tamper is undone with
Delta RESTORE before the next test.
"""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from typer.testing import CliRunner

from cli.app import app
from devtools.synthetic import StreamSpec, generate_lines
from expectations.runner import ValidationRun, run_suites
from orchestration import definitions, pipeline, quality, reconcile
from runtime import carry
from runtime.checkpoints import LANDING_STAGE
from runtime.runner import prepare, run_once, run_reconcile, run_stage_once
from runtime.sources.landing import place_in_landing
from runtime.stages import stage_named
from tests.lines import event, land
from warehouse.catalog import BRONZE_EVENTS, OPS_DQ_RESULTS, SILVER_EVENTS, Table, tumbling_table
from warehouse.delta import read_table, table_version
from warehouse.settings import Settings

# Tests of this module share one (module or session) fixture: xdist keeps them on one worker.
pytestmark = pytest.mark.xdist_group("quality")

SUITE_SIZES = {"bronze.events": 3, "silver.events": 6, "conservation": 1, "completeness": 4, "freshness": 3}
#: Far behind the watermark the generated stream leaves (about 00:10): their windows are closed.
LATE = [
    event("late-1", "late-user", "2024-01-01T00:00:30Z", "1.23"),
    event("late-2", "late-user", "2024-01-01T00:01:30Z", "2.00"),
]


def bronze_lines(settings: Settings) -> Iterator[str]:
    """Every line of the generated landing files (the late file comes later)."""
    for path in sorted(settings.landing_dir.glob("*part-*.jsonl")):
        yield from path.read_text().splitlines()


@dataclass
class Built:
    settings: Settings
    only_bronze: ValidationRun
    late_not_folded: ValidationRun
    clean: ValidationRun


@pytest.fixture(scope="module")
def built(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Built:
    # The suites read bronze, silver and user_spend_5m; the optional gold outputs are left out.
    home = tmp_path_factory.mktemp("quality") / "home"
    settings = replace(Settings.from_env(), home=home, gold_outputs=frozenset())
    prepare(spark, settings)
    spec = StreamSpec(events=1500, users=12, rate=2.0, seed=11, start=datetime(2024, 1, 1, tzinfo=UTC))
    lines = list(generate_lines(spec))
    for number, chunk in enumerate((lines[:900], lines[900:])):
        place_in_landing(settings, f"part-{number}.jsonl", lambda h, c=chunk: h.writelines(x + "\n" for x in c))
    # The landing batch is killed after its bronze commit, before silver: its lines are in flight until the
    # next run re-runs the batch (bronze skipped, silver and gold written).
    with pytest.MonkeyPatch.context() as patch, pytest.raises(Exception, match="killed after bronze"):
        patch.setattr(carry, "refined", killed_after_bronze)
        run_stage_once(spark, settings, stage_named(settings, LANDING_STAGE))
    only_bronze = run_suites(spark, settings, ["conservation"])
    run_once(spark, settings)
    land(settings, "late.jsonl", LATE)
    run_once(spark, settings)
    late_not_folded = run_suites(spark, settings, ["completeness"])
    run_reconcile(spark, settings)
    return Built(settings, only_bronze, late_not_folded, run_suites(spark, settings))


def killed_after_bronze(*_: object) -> None:
    raise RuntimeError("killed after bronze")


def with_resources(settings: Settings) -> dg.Definitions:
    """Every domain's definitions, built from (and on) this module's lakehouse's settings, run in process."""
    return definitions.build_defs(settings, [pipeline, reconcile, quality])


def by_suite(run: ValidationRun) -> dict:
    return {r.suite: r for r in run.results}


def test_clean_lakehouse_passes_every_suite_and_logs_it(spark: SparkSession, built: Built) -> None:
    results = by_suite(built.clean)
    assert {name: len(r.outcomes) for name, r in results.items()} == SUITE_SIZES
    for result in results.values():
        assert result.verdict == "passed", (result.suite, result.failed)
        assert all(o.element_count for o in result.outcomes if o.element_count is not None), result.suite
    gold_rows = read_table(spark, built.settings, tumbling_table(built.settings)).count()
    assert results["completeness"].figures["windows_checked"] == gold_rows
    assert results["completeness"].figures["pending_windows"] == 0
    assert results["conservation"].figures["pending_lines"] == 0
    assert results["bronze.events"].figures["files_received"] == 3

    logged = read_table(spark, built.settings, OPS_DQ_RESULTS).where(F.col("run_id") == built.clean.run_id)
    assert logged.count() == sum(SUITE_SIZES.values())
    assert logged.where(~F.col("success")).count() == 0
    page = built.clean.report_path.read_text()
    assert all(name in page for name in SUITE_SIZES)
    assert "http://" not in page and "https://" not in page, "the report must need no network"
    assert (built.clean.report_path.parent / "latest.html").read_text() == page


def test_lines_and_late_events_in_flight_are_not_failures(built: Built) -> None:
    (conservation,) = built.only_bronze.results
    # Silver has read nothing yet: every bronze line is in flight.
    assert conservation.verdict == "passed"
    assert conservation.figures["bronze_rows"] == 0
    assert conservation.figures["pending_lines"] == sum(1 for _ in bronze_lines(built.settings))

    late = by_suite(built.late_not_folded)
    # Set aside as late but not folded by reconcile yet: their window is pending, not missing.
    assert late["completeness"].verdict == "passed"
    assert late["completeness"].figures["pending_windows"] == 1


def test_blocking_check_stops_gold_and_a_warning_only_warns_in_dagster(spark: SparkSession, built: Built) -> None:
    # Bronze, silver and the tumbling table are one batch (one op); what follows silver is stopped.
    defs = with_resources(replace(built.settings, gold_outputs=frozenset({"hopping"})))
    duplicate = lambda: duplicate_a_silver_event(spark, built.settings)  # noqa: E731
    with tampered(spark, built.settings, SILVER_EVENTS, duplicate), dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("lakehouse_once").execute_in_process(instance=instance, raise_on_error=False)
    (check,) = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed, check.severity) == ("conservation", False, dg.AssetCheckSeverity.ERROR)
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "silver/events" in materialized
    hopping = "gold/user_spend_1h_hopping"
    assert hopping not in materialized, "a failed blocking check must stop what follows silver"

    strict = replace(built.settings, quality=replace(built.settings.quality, max_late_rate=0.0))
    with dg.DagsterInstance.ephemeral() as instance:
        result = with_resources(strict).resolve_job_def("data_quality").execute_in_process(instance=instance)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert set(checks) == {"bronze_events", "silver_events", "conservation", "completeness", "freshness"}
    assert [name for name, c in checks.items() if not c.passed] == ["freshness"]
    assert checks["freshness"].severity == dg.AssetCheckSeverity.WARN
    assert checks["completeness"].metadata["expectations_evaluated"].value == 4
    assert checks["freshness"].metadata["report"].value.endswith(".html")


def test_a_successful_reconcile_run_requests_a_data_quality_run(built: Built) -> None:
    defs = with_resources(built.settings)
    with dg.DagsterInstance.ephemeral() as instance:
        reconciled = defs.resolve_job_def("reconcile_job").execute_in_process(instance=instance)
        assert reconciled.success
        (success,) = [e for e in reconciled.all_events if e.event_type == dg.DagsterEventType.RUN_SUCCESS]
        context = dg.build_run_status_sensor_context(
            sensor_name="after_reconcile_sensor",
            dagster_instance=instance,
            dagster_run=reconciled.dagster_run,
            dagster_event=success,
        )
        after_reconcile_sensor = defs.resolve_sensor_def("after_reconcile_sensor")
        request = after_reconcile_sensor(context)
    assert after_reconcile_sensor.job_name == "data_quality"
    assert request.run_key == f"after:{reconciled.run_id}"
    schedule = defs.resolve_schedule_def("data_quality_schedule")
    assert (schedule.cron_schedule, schedule.job_name) == ("0 * * * *", "data_quality")


def gold_key(spark: SparkSession, settings: Settings):
    return read_table(spark, settings, tumbling_table(settings)).orderBy("user_id", "window_start").first()


def delete_a_gold_row(spark: SparkSession, settings: Settings) -> str:
    row = gold_key(spark, settings)
    table = DeltaTable.forPath(spark, str(tumbling_table(settings).path(settings)))
    table.delete((F.col("user_id") == row.user_id) & (F.col("window_start") == row.window_start))
    return f"user_id={row.user_id} window_start={row.window_start.isoformat(sep=' ')}"


def add_a_cent_to_a_gold_total(spark: SparkSession, settings: Settings) -> str:
    row = gold_key(spark, settings)
    table = DeltaTable.forPath(spark, str(tumbling_table(settings).path(settings)))
    table.update(
        (F.col("user_id") == row.user_id) & (F.col("window_start") == row.window_start),
        {"total_amount": F.col("total_amount") + F.lit(0.01).cast("decimal(18,2)")},
    )
    return f"user_id={row.user_id} window_start={row.window_start.isoformat(sep=' ')}"


def duplicate_a_silver_event(spark: SparkSession, settings: Settings) -> str:
    row = read_table(spark, settings, SILVER_EVENTS).orderBy("event_id").limit(1)
    row.write.format("delta").mode("append").save(str(SILVER_EVENTS.path(settings)))
    return f"event_id={row.first().event_id}"


def remove_a_bronze_row(spark: SparkSession, settings: Settings) -> str:
    row = read_table(spark, settings, BRONZE_EVENTS).orderBy("source_file", "source_line").first()
    table = DeltaTable.forPath(spark, str(BRONZE_EVENTS.path(settings)))
    table.delete((F.col("source_file") == row.source_file) & (F.col("source_line") == row.source_line))
    return row.source_file.removeprefix("file:")


@contextmanager
def tampered(spark: SparkSession, settings: Settings, table: Table, tamper: Callable[[], str]) -> Iterator[str]:
    """Apply a tamper behind the pipeline's back, and undo it with Delta RESTORE afterwards."""
    before = table_version(spark, settings, table)
    try:
        yield tamper()
    finally:
        DeltaTable.forPath(spark, str(table.path(settings))).restoreToVersion(before)


@pytest.mark.parametrize(
    ("tamper", "table", "suite", "expectation", "rows"),
    [
        (delete_a_gold_row, "gold", "completeness", "expect_column_values_to_not_be_null", 1),
        (add_a_cent_to_a_gold_total, "gold", "completeness", "expect_column_pair_values_to_be_equal", 1),
        # Both rows of the repeated event_id break uniqueness.
        (duplicate_a_silver_event, "silver", "silver.events", "expect_column_values_to_be_unique", 2),
        (remove_a_bronze_row, "bronze", "bronze.events", "expect_column_pair_values_to_be_equal", 1),
    ],
    ids=["gold-row-deleted", "gold-total-plus-a-cent", "silver-duplicate-event-id", "bronze-row-removed"],
)
def test_tampering_is_caught_by_the_right_suite_with_the_offending_key(
    spark: SparkSession, built: Built, tamper, table: str, suite: str, expectation: str, rows: int
) -> None:
    target = {"gold": tumbling_table(built.settings), "silver": SILVER_EVENTS, "bronze": BRONZE_EVENTS}[table]
    with tampered(spark, built.settings, target, lambda: tamper(spark, built.settings)) as key:
        (result,) = run_suites(spark, built.settings, [suite]).results
    assert result.verdict == "failed"
    (failed,) = result.failed
    assert failed.expectation == expectation
    assert failed.unexpected_count == rows
    assert any(key in example for example in failed.examples), (key, failed.examples)


def test_validate_command_exit_codes_json_and_report(
    spark: SparkSession, built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEHOUSE_HOME", str(built.settings.home))
    runner = CliRunner()
    clean = runner.invoke(app, ["validate", "--json", "--suite", "conservation", "--suite", "silver.events"])
    assert clean.exit_code == 0, clean.output
    summary = json.loads(clean.stdout)
    assert summary["passed"] is True
    assert [(s["suite"], s["verdict"]) for s in summary["suites"]] == [
        ("silver.events", "passed"),
        ("conservation", "passed"),
    ]

    gold = tumbling_table(built.settings)
    with tampered(spark, built.settings, gold, lambda: add_a_cent_to_a_gold_total(spark, built.settings)) as key:
        broken = runner.invoke(app, ["validate", "--suite", "completeness", "--suite", "freshness"])
    assert broken.exit_code == 1
    assert "blocking data-quality expectations failed: completeness (1)" in broken.stderr
    assert "completeness" in broken.stdout and "failed" in broken.stdout
    report = Path(broken.stderr.strip().rsplit("see ", 1)[1])
    page = report.read_text()
    assert "expect_column_pair_values_to_be_equal" in page
    assert "total_amount equals the recomputed sum" in page
    assert key in page


@pytest.mark.quick
def test_the_quality_definitions_load_with_every_check() -> None:
    repository = definitions.defs.get_repository_def()
    checks = {key.name for key in repository.asset_graph.asset_check_keys}
    assert checks == {"bronze_events", "silver_events", "conservation", "completeness", "freshness"}
    assert definitions.defs.resolve_job_def("data_quality")
    assert {s.name for s in repository.schedule_defs} >= {"data_quality_schedule"}
    assert {s.name for s in repository.sensor_defs} >= {"after_reconcile_sensor"}
