"""Data quality in Dagster: each suite of ``expectations`` as an asset check on the table it guards, the
data-quality job, its hourly schedule, and a run after every successful reconciliation.

This module is the one bridge from Great Expectations results to Dagster: a suite's critical failures
fail its check with ERROR severity (blocking checks then stop downstream assets), warnings fail it with
WARN severity (nothing stops). Every result carries the same metadata keys, so the UI plots them.
``build_defs(settings)`` builds the checks, job, schedule and sensor from the code location's one ``Settings``.
"""

import dagster as dg

from expectations.runner import run_suites
from expectations.suites import SUITES
from expectations.validation import SuiteResult
from orchestration import reconcile
from orchestration.names import asset_key, named, view
from orchestration.resources import LakehouseResource
from warehouse.settings import Settings

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


def suite_check(settings: Settings, suite_name: str) -> dg.AssetChecksDefinition:
    """A suite as a check on the table it guards (under these settings); blocking per :data:`BLOCKING` and
    the settings' ``quality.warnings_block``."""
    suite = SUITES[suite_name]
    table = suite.guards(settings)
    blocking = suite_name in BLOCKING or (suite.warns and settings.quality.warnings_block)

    @dg.asset_check(
        asset=asset_key(table, settings),
        name=suite_name.replace(".", "_"),
        description=f"{suite.description} (Great Expectations suite {suite_name})",
        blocking=blocking,
        pool="lakehouse_quality",
    )
    def check(context: dg.AssetCheckExecutionContext, lakehouse: LakehouseResource) -> dg.AssetCheckResult:
        run = run_suites(lakehouse.spark(), view(lakehouse, settings), [suite_name], run_id=context.run.run_id)
        (result,) = run.results
        # The latest figures on the guarded asset too, under stable keys, so its page plots them.
        prefix = f"dq_{suite_name.replace('.', '_')}"
        context.op_execution_context.log_event(
            dg.AssetObservation(
                asset_key=asset_key(table, settings),
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


#: The suites that are checks, in the order the data-quality job lists them.
CHECKED_SUITES = ("bronze.events", "silver.events", "conservation", "completeness", "freshness")


def build_defs(settings: Settings) -> dg.Definitions:
    """Every suite as a check, the data-quality job, its schedule on the settings' cron, and the sensor that
    validates again after each successful reconcile or completeness sweep."""
    quality_checks = [suite_check(settings, name) for name in CHECKED_SUITES]
    data_quality_job = dg.define_asset_job(
        named(settings, "data_quality"),
        selection=dg.AssetSelection.checks(*quality_checks),
        description="Run every data-quality suite (checks only, no materialization).",
    )
    data_quality_schedule = dg.ScheduleDefinition(
        name=named(settings, "data_quality_schedule"),
        job=data_quality_job,
        cron_schedule=settings.quality.cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Every suite on a cron ({settings.quality.cron}, LAKEHOUSE_DQ_CRON).",
    )

    # Runs in this code location are matched to monitored jobs by name: these are orchestration.reconcile's.
    @dg.run_status_sensor(
        name=named(settings, "after_reconcile_sensor"),
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=list(reconcile.build_jobs(settings)),
        request_job=data_quality_job,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="After every successful reconcile or completeness sweep, validate again.",
    )
    def after_reconcile_sensor(context: dg.RunStatusSensorContext) -> dg.RunRequest:
        run = context.dagster_run
        return dg.RunRequest(run_key=f"after:{run.run_id}", tags={"lakehouse/after_run": run.run_id})

    return dg.Definitions(
        asset_checks=quality_checks,
        jobs=[data_quality_job],
        schedules=[data_quality_schedule],
        sensors=[after_reconcile_sensor],
    )
