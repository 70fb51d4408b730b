"""Table maintenance on a schedule: compaction (gold Z-ordered by user), VACUUM and log checkpoints.

Continuous runs leave small files in every table each batch; this asset keeps their number bounded. It
runs ``warehouse.maintenance.maintain_tables`` (the same as ``lakehouse maintain``) over every catalog table
and records each table's live file count before and after, so the UI plots how it grows and shrinks.
``build_defs(settings)`` builds the asset, its job and its schedule from the code location's one ``Settings``.
"""

import dagster as dg

from orchestration.names import asset_key, named, view
from orchestration.resources import LakehouseResource
from warehouse.catalog import (
    BRONZE_EVENTS,
    SILVER_DUPLICATES,
    SILVER_QUARANTINE,
    Table,
    all_tables,
    corrections_log,
    events_table,
    late_table,
    tumbling_table,
)
from warehouse.maintenance import maintain_tables
from warehouse.settings import Settings


def asset_tables(settings: Settings) -> dict[str, Table]:
    """The tables that are Dagster assets, by name; ops tables are maintained too but have no asset of their own."""
    return {
        t.name: t
        for t in (
            BRONZE_EVENTS,
            events_table(settings),
            SILVER_QUARANTINE,
            SILVER_DUPLICATES,
            late_table(settings),
            tumbling_table(settings),
            corrections_log(settings),
        )
    }


def maintenance_asset(settings: Settings) -> dg.AssetsDefinition:
    """``maintenance/tables``, downstream of every table asset of these settings."""
    observed = asset_tables(settings)

    @dg.asset(
        key=["maintenance", "tables" if settings.pipeline is None else f"{settings.spec.name}_tables"],
        group_name="maintenance",
        deps=[asset_key(t, settings) for t in observed.values()],
        kinds={"delta", "spark"},
        pool="lakehouse_gold",
    )
    def table_maintenance(context: dg.AssetExecutionContext, lakehouse: LakehouseResource) -> dg.MaterializeResult:
        """OPTIMIZE every table (gold Z-ordered by its keys), VACUUM unreferenced files, checkpoint the logs."""
        run_settings = view(lakehouse, settings)
        results = maintain_tables(lakehouse.spark(), run_settings, all_tables(run_settings))
        for result in results:
            context.log.info(
                f"{result.table}: live files {result.live_files_before} → {result.live_files_after}, "
                f"files on disk {result.files_on_disk_before} → {result.files_on_disk_after}"
            )
            if result.table in observed:
                context.log_event(
                    dg.AssetObservation(
                        asset_key=asset_key(observed[result.table], settings),
                        metadata={"live_files": result.live_files_after, "files_on_disk": result.files_on_disk_after},
                    )
                )
        metadata: dict[str, dg.RawMetadataValue] = {
            "tables": len(results),
            "live_files_before": sum(r.live_files_before for r in results),
            "live_files_after": sum(r.live_files_after for r in results),
            "files_deleted": sum(r.files_on_disk_before - r.files_on_disk_after for r in results),
            "seconds": round(sum(r.optimize_seconds + r.vacuum_seconds + r.checkpoint_seconds for r in results), 3),
            "per_table": dg.MetadataValue.json([r.to_json() for r in results]),
        }
        return dg.MaterializeResult(metadata=metadata)

    return table_maintenance


def build_defs(settings: Settings) -> dg.Definitions:
    """The maintenance asset, its job, and its schedule on the settings' cron."""
    table_maintenance = maintenance_asset(settings)
    maintenance_job = dg.define_asset_job(
        named(settings, "maintenance"),
        selection=[table_maintenance],
        description="Compact, vacuum and checkpoint every table.",
    )
    maintenance_cron = settings.schedules.maintenance_cron
    maintenance_schedule = dg.ScheduleDefinition(
        name=named(settings, "maintenance_schedule"),
        job=maintenance_job,
        cron_schedule=maintenance_cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Table maintenance ({maintenance_cron} UTC; LAKEHOUSE_MAINTENANCE_CRON).",
    )
    return dg.Definitions(assets=[table_maintenance], jobs=[maintenance_job], schedules=[maintenance_schedule])
