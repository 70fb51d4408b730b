"""Data quality in Dagster: each suite of ``expectations`` as an asset check on the table it guards, the
data-quality job, its hourly schedule, and a run after every successful reconciliation.

This module is the one bridge from Great Expectations results to Dagster: a suite's critical failures
fail its check with ERROR severity (blocking checks then stop downstream assets), warnings fail it with
WARN severity (nothing stops). Every result carries the same metadata keys, so the UI plots them.
"""

import dagster as dg

from expectations.runner import run_suites
from expectations.suites import SUITES
from expectations.validation import SuiteResult
from orchestration.pipeline import SETTINGS, asset_key
from orchestration.reconcile import completeness_sweep, reconcile_job
from orchestration.resources import LakehouseResource

#: Suites that stop downstream materialization when one of their critical expectations fails.
BLOCKING = {"bronze.events", "silver.events", "conservation", "completeness"}


def check_result(result: SuiteResult, report_path: str) -> dg.AssetCheckResult:
    """A suite's result as a Dagster check result: passed, severity, and the figures people watch."""
    failed_descriptions = "\n".join(f"- {o.description} ({o.expectation})" for o in result.failed)
    metadata: dict[str, dg.RawMetadataValue] = {
        "expectations_evaluated": len(result.outcomes),
        "expectations_failed": len(result.failed),
        "unexpected_count": result.unexpected_count,
        "examples": dg.MetadataValue.md("\n".join(f"- `{e}`" for e in result.examples) or "none"),
        "failed_expectations": dg.MetadataValue.md(failed_descriptions or "none"),
        "report": dg.MetadataValue.path(report_path),
        "suite_seconds": result.seconds,
    }
    for key, value in result.figures.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            metadata[key] = value
    if result.skipped:
        metadata["skipped"] = result.skipped
    return dg.AssetCheckResult(
        passed=result.success,
        severity=dg.AssetCheckSeverity.ERROR if result.blocking_failures else dg.AssetCheckSeverity.WARN,
        metadata=metadata,
        description=result.skipped,
    )


def _suite_check(suite_name: str) -> dg.AssetChecksDefinition:
    suite = SUITES[suite_name]
    table = suite.guards(SETTINGS)
    blocking = suite_name in BLOCKING or (suite.warns and SETTINGS.quality.warnings_block)

    @dg.asset_check(
        asset=asset_key(table),
        name=suite_name.replace(".", "_"),
        description=f"{suite.description} (Great Expectations suite {suite_name})",
        blocking=blocking,
        pool="lakehouse_quality",
    )
    def check(context: dg.AssetCheckExecutionContext, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        run = run_suites(lakehouse.spark(), lakehouse.settings(), [suite_name], run_id=context.run.run_id)
        (result,) = run.results
        # The latest figures on the guarded asset too, under stable keys, so its page plots them.
        prefix = f"dq_{suite_name.replace('.', '_')}"
        context.op_execution_context.log_event(
            dg.AssetObservation(
                asset_key=asset_key(table),
                metadata={
                    f"{prefix}_expectations_failed": len(result.failed),
                    f"{prefix}_unexpected_count": result.unexpected_count,
                },
            )
        )
        context.log.info(
            f"{suite_name}: {result.verdict}, {len(result.failed)} of {len(result.outcomes)} expectations failed; "
            f"report {run.report_path}"
        )
        return check_result(result, str(run.report_path))

    return check


bronze_events_check = _suite_check("bronze.events")
silver_events_check = _suite_check("silver.events")
conservation = _suite_check("conservation")
completeness = _suite_check("completeness")
freshness = _suite_check("freshness")

quality_checks = [bronze_events_check, silver_events_check, conservation, completeness, freshness]

data_quality_job = dg.define_asset_job(
    "data_quality",
    selection=dg.AssetSelection.checks(*quality_checks),
    description="Run every data-quality suite (checks only, no materialization).",
)

data_quality_schedule = dg.ScheduleDefinition(
    name="data_quality_schedule",
    job=data_quality_job,
    cron_schedule=SETTINGS.quality.cron,
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description=f"Every suite on a cron ({SETTINGS.quality.cron}, LAKEHOUSE_DQ_CRON).",
)


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    monitored_jobs=[reconcile_job, completeness_sweep],
    request_job=data_quality_job,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="After every successful reconcile or completeness sweep, validate again.",
)
def after_reconcile_sensor(context: dg.RunStatusSensorContext) -> dg.RunRequest:
    run = context.dagster_run
    return dg.RunRequest(run_key=f"after:{run.run_id}", tags={"lakehouse/after_run": run.run_id})


defs = dg.Definitions(
    asset_checks=quality_checks,
    jobs=[data_quality_job],
    schedules=[data_quality_schedule],
    sensors=[after_reconcile_sensor],
)
