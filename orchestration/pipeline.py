"""The streams as Dagster assets, their job, and the landing sensor that runs them when files arrive.

``build_defs(settings)`` builds them from the code location's one ``Settings``: which optional gold outputs
are assets, the gold tables' names, bronze's default source. Each materialization runs one stream with
availableNow. Asset keys carry the layer (``bronze/events``, ``silver/events``, ``gold/user_spend_5m``, …);
each materialization records the stream's figures under stable metadata keys so the UI plots them over time.
"""

from typing import TYPE_CHECKING

import dagster as dg

from orchestration.names import asset_key, group_of, named, view
from orchestration.resources import KafkaSourceResource, LakehouseResource
from runtime.checkpoints import (
    FRAUD_STAGE,
    LANDING_STAGE,
    ORDER_PAYMENTS_STAGE,
    UNIQUE_URLS_STAGE,
    derived_stage_name,
)
from runtime.pipelines import pipeline_status
from runtime.runner import (
    CONTINUOUS_RUN,
    StageReport,
    advance_idle_watermark,
    drain_older_streams,
    prepare,
    run_stage_once,
)
from runtime.stages import source_stage, stage_named
from transforms.gold.derived import derived_outputs
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_FRAUD_ALERTS,
    GOLD_UNIQUE_URLS,
    ORDER_PAYMENTS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_QUARANTINE,
    Table,
    catalog_name,
    corrections_log,
    events_table,
    firings_table,
    global_table,
    hopping_table,
    late_table,
    sessions_table,
    tumbling_table,
)
from warehouse.inspect import table_state
from warehouse.locks import lock_holder
from warehouse.settings import Settings
from warehouse.storage import entries

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

#: The job that runs every stream once; the Kafka sensor requests it by name.
STREAMS_JOB = "lakehouse_once"


def spec(
    table: Table, deps: list[Table] = (), skippable: bool = False, settings: Settings | None = None
) -> dg.AssetSpec:
    """An asset spec with the table's description and column schema, grouped by layer (another pipeline's:
    in its own group)."""
    settings = settings or Settings()
    return dg.AssetSpec(
        asset_key(table, settings),
        description=table.description,
        group_name=group_of(settings, table),
        deps=[asset_key(d, settings) for d in deps],
        kinds={"delta", "spark"},
        skippable=skippable,
        metadata={
            "dagster/column_schema": dg.TableSchema(
                columns=[
                    dg.TableColumn(c.name, c.type.simpleString(), description=c.description) for c in table.columns
                ]
            ),
            "dagster/table_name": catalog_name(settings, table),
        },
    )


def _materialization(
    lakehouse: LakehouseResource,
    table: Table,
    report: StageReport,
    figures: dict[str, str],
    settings: Settings | None = None,
) -> dg.MaterializeResult:
    """Stable metadata keys: rows in/written, quarantined, duplicates, late, watermark, batch seconds, version."""
    settings = settings or lakehouse.settings()
    metadata: dict[str, dg.RawMetadataValue] = {
        key: float(report.figures.get(source, 0)) for key, source in figures.items()
    }
    metadata["batches"] = report.batches
    metadata["batch_seconds"] = round(report.seconds, 3)
    metadata["slowest_batch_seconds"] = round(report.slowest_batch_seconds, 3)
    metadata["rows_per_second"] = round(report.figures.get("rows_in", 0) / report.seconds, 1) if report.seconds else 0.0
    status = next(s for s in pipeline_status(settings) if s.stream == report.name)
    metadata["backlog_after"] = status.backlog
    metadata["lag_seconds"] = status.lag_seconds
    # Read from the Delta log (delta-rs): a count through Spark would scan the whole table every run.
    state = table_state(settings, table)
    metadata["table_version"] = state.version or 0
    metadata["dagster/row_count"] = state.rows or 0
    metadata["path"] = dg.MetadataValue.path(str(table.path(settings)))
    return dg.MaterializeResult(asset_key=asset_key(table, settings), metadata=metadata)


def _run(lakehouse: LakehouseResource, stage_name: str, settings: Settings | None = None) -> StageReport:
    settings = settings or lakehouse.settings()
    spark = lakehouse.spark()
    settings.ensure_home()
    prepare(spark, settings)
    return run_stage_once(spark, settings, stage_named(settings, stage_name))


def window_outputs(settings: Settings) -> dict[str, tuple[Table, Table, dict[str, str]]]:
    """The window tables kept besides user_spend_5m (as the other optional outputs, assets only when kept):
    the firings log (an output of ``update_windows``) and the derived windows (outputs of
    ``derive_windows``): the table, what it is derived from, and its metadata (key → the batch's figure)."""
    gold = tumbling_table(settings)
    silver = events_table(settings)
    return {
        "hopping": (
            hopping_table(settings),
            gold,
            {"rows_written": "hopping_windows_changed", "watermark": "watermark"},
        ),
        "sessions": (
            sessions_table(settings),
            silver,
            {"rows_in": "rows_in", "rows_written": "sessions_changed", "watermark": "watermark"},
        ),
        "global": (
            global_table(settings),
            silver,
            {"rows_in": "rows_in", "rows_written": "global_firings", "firings": "global_firings"},
        ),
        "firings": (firings_table(settings), gold, {"rows_written": "windows_changed", "watermark": "watermark"}),
    }


#: The op of the carrying asset (bronze → silver → the tumbling table); run config ``{"source": ...}``.
CARRY_OP = "carry_to_gold"


def carried_asset(settings: Settings) -> dg.AssetsDefinition:
    """``carry_to_gold``: each batch of the source (its run config; default the settings' source) into
    bronze, silver and the tumbling table, then the idle watermark advance (``runtime.carry``)."""
    gold = tumbling_table(settings)
    silver, late, corrections = events_table(settings), late_table(settings), corrections_log(settings)
    firings = [
        entry for output, entry in window_outputs(settings).items() if output == "firings" and settings.keeps(output)
    ]

    class BronzeConfig(dg.Config):
        """Where this run's bronze reads: ``landing`` (the folder) or ``kafka`` (the topic of the ``kafka``
        resource). Default: ``LAKEHOUSE_SOURCE``."""

        source: str = settings.streams.source

    @dg.multi_asset(
        specs=[
            spec(BRONZE_EVENTS, settings=settings),
            spec(silver, [BRONZE_EVENTS], settings=settings),
            spec(SILVER_QUARANTINE, [BRONZE_EVENTS], settings=settings),
            spec(SILVER_DUPLICATES, [BRONZE_EVENTS], settings=settings),
            spec(gold, [silver], settings=settings),
            *(spec(table, [upstream], settings=settings) for table, upstream, _ in firings),
            spec(late, [silver], settings=settings),
            spec(corrections, [silver], settings=settings),
        ],
        name=named(settings, CARRY_OP),
        pool="lakehouse_bronze",
    )
    def carry_to_gold(
        context: dg.AssetExecutionContext,
        config: BronzeConfig,
        lakehouse: LakehouseResource,
        kafka: KafkaSourceResource,
    ):
        """Append every new line of the source (landing files or Kafka messages) to bronze, classify it into
        silver and fold its events into the tumbling windows, in one batch (availableNow)."""
        # The kafka resource names the first pipeline's topic; another pipeline reads its spec's.
        run_settings = kafka.apply(lakehouse.settings()) if settings.pipeline is None else view(lakehouse, settings)
        spark = lakehouse.spark()
        run_settings.ensure_home()
        prepare(spark, run_settings)
        for older in drain_older_streams(spark, run_settings):
            context.log.info(f"{older.name} (finished for an older home): {older.figures}")
        report = run_stage_once(spark, run_settings, source_stage(config.source))
        context.log.info(f"{report.name}: {report.figures}")
        idle = advance_idle_watermark(spark, run_settings, follow=False)
        if idle:
            context.log.info(f"idle watermark advance: {idle.figures}")
            report.figures.update(
                watermark=idle.figures["watermark"],
                watermark_lag_seconds=idle.figures["watermark_lag_seconds"],
                idle_windows_closed=idle.figures["windows_closed"],
            )
        bronze = {"rows_in": "rows_in", "rows_written": "rows_written"}
        if config.source == "kafka":
            # The lag the last batch left, per partition: the UI plots each key over time.
            bronze |= {key: key for key in report.figures if key.startswith("kafka_lag")}
        carried = [
            (BRONZE_EVENTS, bronze),
            (
                silver,
                {"rows_in": "rows_in", "rows_written": "events", "quarantined": "quarantined",
                 "duplicates": "duplicates"},
            ),
            (SILVER_QUARANTINE, {"rows_written": "quarantined"}),
            (SILVER_DUPLICATES, {"rows_written": "duplicates", "conflicting": "conflicting"}),
            (
                gold,
                {"rows_in": "events", "rows_written": "windows_changed", "late": "late", "watermark": "watermark",
                 "watermark_delay_seconds": "watermark_delay_seconds",
                 "watermark_lag_seconds": "watermark_lag_seconds", "idle_windows_closed": "idle_windows_closed"},
            ),
            *((table, figures) for table, _, figures in firings),
            (late, {"rows_written": "late", "watermark": "watermark"}),
            (corrections, {"rows_written": "windows_revised"}),
        ]  # fmt: skip
        for table, figures in carried:
            yield _materialization(lakehouse, table, report, figures, run_settings)

    return carry_to_gold


def derived_asset(settings: Settings) -> dg.AssetsDefinition:
    """``derive_windows``: the hopping, session and global windows the settings keep, on their own stream
    behind the tumbling table (it reads the window stream's ops.watermarks rows)."""
    kept = [
        entry for output, entry in window_outputs(settings).items() if output != "firings" and settings.keeps(output)
    ]
    stage_name = derived_stage_name(settings)
    silver = events_table(settings)
    followed = {silver.name: silver, tumbling_table(settings).name: tumbling_table(settings)}

    @dg.multi_asset(
        # Every derived window is made of silver's events (read back by the batches they came in) and
        # follows the tumbling table: a failed blocking check on silver stops it.
        specs=[
            spec(table, list({upstream.name: upstream, **followed}.values()), settings=settings)
            for table, upstream, _ in kept
        ],
        name=named(settings, "derive_windows"),
        pool="lakehouse_derived",
    )
    def derived_windows(context: dg.AssetExecutionContext, lakehouse: LakehouseResource):
        """Bring hopping windows, sessions and global windows in line with the tumbling table's new batches
        (availableNow)."""
        run_settings = view(lakehouse, settings)
        report = _run(lakehouse, stage_name, run_settings)
        context.log.info(f"derived windows: {report.figures}")
        for table, _, figures in kept:
            yield _materialization(lakehouse, table, report, figures, run_settings)

    return derived_windows


@dg.multi_asset(specs=[spec(ORDER_PAYMENTS, [SILVER_EVENTS])], name="join_orders_payments", pool="lakehouse_join")
def order_payments(context: dg.AssetExecutionContext, lakehouse: LakehouseResource) -> dg.MaterializeResult:
    """Join new orders with their payments within 15 minutes of event time; emit unpaid orders once the
    watermark passes their bound (availableNow)."""
    report = _run(lakehouse, ORDER_PAYMENTS_STAGE)
    context.log.info(f"order payments: {report.figures}")
    return _materialization(
        lakehouse,
        ORDER_PAYMENTS,
        report,
        {"rows_in": "rows_in", "rows_written": "rows_written", "paid": "paid", "unpaid": "unpaid",
         "watermark": "watermark"},
    )  # fmt: skip


@dg.multi_asset(specs=[spec(GOLD_FRAUD_ALERTS, [SILVER_EVENTS])], name="detect_fraud", pool="lakehouse_fraud")
def fraud_alerts(context: dg.AssetExecutionContext, lakehouse: LakehouseResource) -> dg.MaterializeResult:
    """Judge new purchases against each user's last hour of purchases (keyed state, event-time timers)."""
    report = _run(lakehouse, FRAUD_STAGE)
    context.log.info(f"fraud alerts: {report.figures}")
    figures = {"rows_in": "rows_in", "rows_written": "rows_written", "large_amount": "large_amount", "burst": "burst"}
    return _materialization(lakehouse, GOLD_FRAUD_ALERTS, report, figures)


@dg.multi_asset(specs=[spec(GOLD_UNIQUE_URLS, [SILVER_EVENTS])], name="count_unique_urls", pool="lakehouse_urls")
def unique_urls(context: dg.AssetExecutionContext, lakehouse: LakehouseResource) -> dg.MaterializeResult:
    """Count each user's distinct URLs over the last 24 h of event time (keyed state, event-time timers)."""
    report = _run(lakehouse, UNIQUE_URLS_STAGE)
    context.log.info(f"unique urls: {report.figures}")
    figures = {"rows_in": "rows_in", "rows_written": "rows_written", "users_expired": "users_expired"}
    return _materialization(lakehouse, GOLD_UNIQUE_URLS, report, figures)


#: The streams that follow silver on their own, each an asset only when the settings keep its gold output.
FOLLOWER_ASSETS = {"order_payments": order_payments, "fraud_alerts": fraud_alerts, "unique_urls": unique_urls}


def stream_assets(settings: Settings) -> list[dg.AssetsDefinition]:
    """Every stream's asset; the optional gold outputs only when the settings (``LAKEHOUSE_GOLD_OUTPUTS``)
    keep them."""
    return [
        carried_asset(settings),
        *([derived_asset(settings)] if derived_outputs(settings) else []),
        # The code outputs are the first pipeline's (its spec attaches them).
        *(asset for output, asset in FOLLOWER_ASSETS.items() if settings.pipeline is None and settings.keeps(output)),
    ]


def build_streams_job(
    assets: list[dg.AssetsDefinition], settings: Settings | None = None
) -> "UnresolvedAssetJobDefinition":
    """``lakehouse_once``: every stream of ``assets`` once, with the conservation check."""
    settings = settings or Settings()
    return dg.define_asset_job(
        named(settings, STREAMS_JOB),
        # Conservation (orchestration.quality) is the one check every run pays for: it is blocking, and gold
        # must not fold a silver batch that lost or invented lines. The other suites run in data_quality.
        selection=dg.AssetSelection.assets(*assets).without_checks()
        | dg.AssetSelection.checks(dg.AssetCheckKey(asset_key(SILVER_EVENTS, settings), "conservation")),
        description="Run every stream once (availableNow), checking conservation: landing → bronze → silver → gold.",
        # A run whose process died is retried (run monitoring fails it): its files are not left to the next arrival.
        tags={"dagster/max_retries": "2"},
    )


def landing_files(settings: Settings) -> list[str]:
    """Names of the files Spark's file source reads, in arrival order (names start with an arrival stamp)."""
    return [name for _, name in landing_arrivals(settings)]


def landing_arrivals(settings: Settings) -> list[tuple[int, str]]:
    """(modification time in ns, name) of every file Spark's file source reads, oldest first: its order."""
    found = entries(settings.landing_dir)
    return sorted((mtime_ns, name) for name, mtime_ns, _ in found if not name.startswith((".", "_")))


def landing_cursor(arrival: tuple[int, str]) -> str:
    """The landing sensor's cursor: the newest arrival seen, as ``<mtime ns>/<file name>``."""
    return f"{arrival[0]}/{arrival[1]}"


#: A run that has not started yet: it will read whatever is there when it starts.
WAITING_STATUSES = [dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING]


def waiting_run(instance: dg.DagsterInstance, job_name: str) -> str | None:
    """The id of a run of ``job_name`` that has not started yet, if any. A sensor asks for no second one: the
    waiting run takes everything there when it starts, and its cursor stays until then (a run per tick
    would queue a Spark start each behind the pools' one slot, each finding nothing left)."""
    records = instance.get_run_records(dg.RunsFilter(job_name=job_name, statuses=WAITING_STATUSES), limit=1)
    return records[0].dagster_run.run_id if records else None


def build_landing_sensor(job: "UnresolvedAssetJobDefinition", settings: Settings | None = None) -> dg.SensorDefinition:
    """``landing_sensor``: new files in the landing zone → one run of ``job``."""
    built_for = settings or Settings()

    @dg.sensor(
        name=named(built_for, "landing_sensor"),
        job=job,
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="New files in the landing zone → one run of the streams. Cursor: the newest arrival seen.",
    )
    def landing_sensor(
        context: dg.SensorEvaluationContext, lakehouse: LakehouseResource
    ) -> dg.SensorResult | dg.SkipReason:
        """'New' is every file that arrived after the cursor's, by modification time then name (the order
        Spark's file source reads in), so a file copied in by hand under any name is seen too. The landing
        folder is the ``lakehouse`` resource's, not the environment's. While ``lakehouse run --continuous``
        holds the landing stream it skips (the cursor stays, so nothing is missed once the service stops)."""
        settings = view(lakehouse, built_for)
        holder = lock_holder(settings, LANDING_STAGE)
        if holder is not None and holder.startswith(CONTINUOUS_RUN):
            # The service already takes every file as it lands; a run launched now would wait for its locks.
            return dg.SkipReason(f"{holder} holds the landing zone ({LANDING_STAGE}): it takes new files itself")
        waiting = waiting_run(context.instance, job.name)
        if waiting is not None:
            return dg.SkipReason(f"run {waiting[:8]} of {job.name} has not started yet: it takes the new files")
        seen: tuple[int, str] | None = None
        if context.cursor:
            stamp, _, name = context.cursor.partition("/")
            seen = (int(stamp), name) if name and stamp.isdigit() else (0, context.cursor)
        new = [arrival for arrival in landing_arrivals(settings) if seen is None or arrival > seen]
        if not new:
            since = f"since {seen[1]}" if seen else "yet"
            return dg.SkipReason(f"no new landing files in {settings.landing_dir} {since}")
        cursor = landing_cursor(new[-1])
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=f"landing:{cursor}", tags={"lakehouse/new_files": str(len(new))})],
            cursor=cursor,
        )

    return landing_sensor


def build_defs(settings: Settings) -> dg.Definitions:
    """The streams' assets (shaped by ``settings``), ``lakehouse_once`` and the landing sensor."""
    assets = stream_assets(settings)
    job = build_streams_job(assets, settings)
    return dg.Definitions(assets=assets, jobs=[job], sensors=[build_landing_sensor(job, settings)])
