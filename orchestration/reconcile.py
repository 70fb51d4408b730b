"""Late data, hands-free: the reconcile job, the late-data sensor, the safety-net schedule and the daily
completeness sweep (a partitioned job over event dates, backfillable from the UI).

All of them run ``runtime.runner.run_reconcile``, the same function as ``lakehouse reconcile``, and like it
hand the work to a running ``lakehouse run --continuous`` of the pipeline when there is one (its followers'
warm JVM does it; ``runtime.handover``), so a run the late-data sensor asks for beside the stream starts no
JVM of its own. The figures of every run go into the gold assets' materializations (late events folded, keys
recomputed, corrections written, seconds), so the UI plots them. ``build_defs(settings)`` builds them from the code
location's one ``Settings`` (the reconcile cron, the sweep's first date).
"""

from datetime import date

import dagster as dg
from deltalake.exceptions import TableNotFoundError

from orchestration.names import asset_key, named, view
from orchestration.pipeline import waiting_run
from orchestration.resources import LakehouseResource
from runtime.handover import hand_over, reports_of
from runtime.runner import StageReport, run_reconcile
from warehouse.catalog import corrections_log, late_table, tumbling_table
from warehouse.locks import GOLD_LOCK_WAIT_SECONDS
from warehouse.settings import Settings
from warehouse.storage import open_delta


def _report_materializations(
    context: dg.OpExecutionContext, settings: Settings, reports: list[StageReport], kind: str
) -> None:
    late = sum(r.figures.get("late_events", 0) for r in reports)
    recomputed = sum(r.figures.get("keys_recomputed", 0) for r in reports)
    changed = sum(r.figures.get("keys_changed", 0) for r in reports)
    seconds = round(sum(r.seconds for r in reports), 3)
    context.log.info(f"{kind}: late events {late}, keys recomputed {recomputed}, corrections {changed}")
    metadata = {
        "late_events_folded": late,
        "keys_recomputed": recomputed,
        "corrections_written": changed,
        "reconcile_seconds": seconds,
        "reconcile_kind": kind,
    }
    # A run that changed gold materializes it; one that found nothing to do is still recorded, as an observation.
    for table in (tumbling_table(settings), corrections_log(settings)):
        key = asset_key(table, settings)
        if changed:
            context.log_event(dg.AssetMaterialization(asset_key=key, metadata=metadata))
        else:
            context.log_event(dg.AssetObservation(asset_key=key, metadata=metadata))


def _reconciled(
    context: dg.OpExecutionContext, lakehouse: LakehouseResource, run_settings: Settings, dates: list[date]
) -> list[StageReport]:
    """The reconcile of ``dates`` (none: the late events not folded yet), by the pipeline's running
    continuous run if one serves it, else by this run's own Spark. A reconcile already running (the CLI's, a
    sweep's) is waited for, as the gold lock is: a run the late-data sensor asked for then folds whatever
    that one left, instead of failing."""
    asked = {"dates": [day.isoformat() for day in dates], "wait": GOLD_LOCK_WAIT_SECONDS}
    handed = hand_over(lakehouse.settings(), "reconcile", asked, [run_settings.spec.name])
    if handed is not None:
        context.log.info("done by the running `lakehouse run --continuous`, between its followers' turns")
        return reports_of(handed)
    return run_reconcile(lakehouse.spark(), run_settings, dates, wait_seconds=GOLD_LOCK_WAIT_SECONDS)


def build_ops(settings: Settings) -> tuple[dg.OpDefinition, dg.OpDefinition]:
    """The fold and the sweep of the settings' pipeline, as ops."""

    # Named apart from ``transforms.reconcile.fold_late_events``, the batch function it ends up running.
    @dg.op(name=named(settings, "fold_late_events_op"), pool="lakehouse_gold", out=dg.Out(dg.Nothing))
    def fold_late_events_op(context: dg.OpExecutionContext, lakehouse: LakehouseResource) -> None:
        """Fold every late event not folded yet into gold (only the affected windows)."""
        run_settings = view(lakehouse, settings)
        reports = _reconciled(context, lakehouse, run_settings, [])
        _report_materializations(context, run_settings, reports, "late_events")

    @dg.op(name=named(settings, "sweep_event_date"), pool="lakehouse_gold", out=dg.Out(dg.Nothing))
    def sweep_event_date(context: dg.OpExecutionContext, lakehouse: LakehouseResource) -> None:
        """Recompute every window of the partition's event date from silver; repair each difference."""
        day = date.fromisoformat(context.partition_key)
        run_settings = view(lakehouse, settings)
        reports = _reconciled(context, lakehouse, run_settings, [day])
        _report_materializations(context, run_settings, reports, f"completeness sweep {day}")

    return fold_late_events_op, sweep_event_date


def build_jobs(settings: Settings) -> tuple[dg.JobDefinition, dg.JobDefinition]:
    """``reconcile_job`` and ``completeness_sweep`` (partitioned by event date from the sweep's first date)."""
    fold_late_events_op, sweep_event_date = build_ops(settings)

    @dg.job(
        name=named(settings, "reconcile_job"),
        description="Fold late events into gold: recompute only the affected windows from silver.",
        # Run retries (enabled in the instance config `make ui` writes): a failed fold is tried again.
        tags={"dagster/max_retries": "2"},
    )
    def reconcile_job() -> None:
        fold_late_events_op()

    first_date = settings.schedules.sweep_start_date.isoformat()
    event_dates = dg.DailyPartitionsDefinition(start_date=first_date, timezone="UTC")

    @dg.job(
        name=named(settings, "completeness_sweep"),
        partitions_def=event_dates,
        description="Completeness sweep: one event date per partition.",
    )
    def completeness_sweep() -> None:
        sweep_event_date()

    return reconcile_job, completeness_sweep


def late_events_state(settings: Settings) -> tuple[str, int] | None:
    """silver.late_events' table id and Delta version, read without Spark (the sensor runs in the daemon)."""
    try:
        table = open_delta(late_table(settings).path(settings))
    except TableNotFoundError:
        return None
    return table.metadata().id, table.version()


def late_cursor(table_id: str, version: int) -> str:
    """The late-data sensor's cursor: the version last seen, and of which table (a reset lakehouse
    recreates silver.late_events under a new id, whose versions start again at 0)."""
    return f"{version}@{table_id}"


def build_late_data_sensor(reconcile_job: dg.JobDefinition, settings: Settings | None = None) -> dg.SensorDefinition:
    """``late_data_sensor``: silver.late_events grew → one run of ``reconcile_job``."""
    built_for = settings or Settings()

    @dg.sensor(
        name=named(built_for, "late_data_sensor"),
        job=reconcile_job,
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="silver.late_events grew → a reconcile run. Cursor: the late_events version last seen @ table id.",
    )
    def late_data_sensor(context: dg.SensorEvaluationContext, lakehouse: LakehouseResource) -> dg.SensorResult:
        """Compares silver.late_events' Delta version with the cursor: any new commit holds new late events.
        The table is the ``lakehouse`` resource's, not the environment's.

        A failed reconcile run is retried by Dagster (the job's ``dagster/max_retries`` tag); the reconcile
        schedule is the safety net after that.
        """
        state = late_events_state(view(lakehouse, built_for))
        if state is None:
            return dg.SensorResult(skip_reason="silver.late_events does not exist yet", cursor=context.cursor)
        table_id, version = state
        waiting = waiting_run(context.instance, reconcile_job.name)
        if waiting is not None:
            return dg.SensorResult(
                skip_reason=f"run {waiting[:8]} of {reconcile_job.name} has not started yet: it folds every late event",
                cursor=context.cursor,
            )
        seen_version, _, seen_id = (context.cursor or "").partition("@")
        # A new table starts from nothing seen; its version 0 is its creation, with no rows.
        seen = int(seen_version) if seen_id == table_id else 0
        cursor = late_cursor(table_id, max(seen, version))
        if version <= seen:
            return dg.SensorResult(
                skip_reason=f"silver.late_events is at version {version}; nothing late since the last run",
                cursor=cursor,
            )
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"late_events:v{version}@{table_id}",
                    tags={"lakehouse/late_events_version": str(version)},
                )
            ],
            cursor=cursor,
        )

    return late_data_sensor


def build_defs(settings: Settings) -> dg.Definitions:
    """The reconcile and sweep jobs, the late-data sensor, and their schedules, from ``settings``."""
    reconcile_job, completeness_sweep = build_jobs(settings)
    reconcile_cron = settings.schedules.reconcile_cron
    reconcile_schedule = dg.ScheduleDefinition(
        name=named(settings, "reconcile_schedule"),
        job=reconcile_job,
        cron_schedule=reconcile_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Safety net: reconcile on a cron ({reconcile_cron}, LAKEHOUSE_RECONCILE_CRON).",
    )
    completeness_schedule = dg.build_schedule_from_partitioned_job(
        completeness_sweep,
        name=named(settings, "completeness_sweep_schedule"),
        hour_of_day=2,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Every night, sweep the previous event date.",
    )
    return dg.Definitions(
        jobs=[reconcile_job, completeness_sweep],
        sensors=[build_late_data_sensor(reconcile_job, settings)],
        schedules=[reconcile_schedule, completeness_schedule],
    )
