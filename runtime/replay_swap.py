"""A replay's swap: the staging tables a rebuild made put in place of the live ones, each in one commit.

Every write of a swap is tagged with its replay's transaction id (``lakehouse:replay:<stamp>``, one per
table), so writing it again after a crash changes nothing. Gold's window tables keep each key's revision
history: a key whose values changed gets revision + 1, a ``replay`` correction and (the tumbling table) a
late firing; those are logged before the table is swapped in.

A replay that dies mid-swap leaves the swap marker, naming its stamp; the next replay first finishes what
the dead one left half done from its staging (``finish_source_swap``, ``finish_window_swaps``), with the
dead one's transaction ids, then rebuilds everything as usual.
"""

import json
import shutil
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.checkpoints import KAFKA_STAGE, windows_stage_name
from runtime.runner import swap_marker
from transforms.gold.corrections import consumption_metadata, correction_rows
from transforms.gold.measures import coalesced, value_names, visible_differ
from transforms.gold.propagate import GoldChange, firings
from transforms.gold.watermarks import latest_watermark
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_FRAUD_ALERTS,
    GOLD_UNIQUE_URLS,
    OPS_WATERMARKS,
    SILVER_DUPLICATES,
    SILVER_QUARANTINE,
    Table,
    corrections_log,
    events_table,
    global_table,
    hopping_table,
    late_table,
    sessions_table,
    tumbling_table,
)
from warehouse.delta import (
    append_once,
    latest_version,
    overwrite_once,
    read_table,
    transaction_id,
    transaction_version,
)
from warehouse.settings import Settings
from warehouse.shapes import Shape
from warehouse.storage import location_of, move_tree, remove_tree


def replay_app_id(stamp: str) -> str:
    """The transaction id a replay's swap writes under (its tables' ids extend it)."""
    return f"lakehouse:replay:{stamp}"


def staging_home(settings: Settings, stamp: str) -> Settings:
    """Where the replay ``stamp`` rebuilds: its staging streams read the live bronze (same Delta table, same id,
    so the staging silver's checkpoint stays valid once it replaces the live one)."""
    return replace(settings.under("replay", stamp), links=((BRONZE_EVENTS.name, BRONZE_EVENTS.path(settings)),))


def window_swaps(settings: Settings, stamp: str) -> Iterator[tuple[Table, str]]:
    """The window tables with revisions the home keeps, each with the transaction id its swap writes under
    (the global windows hold running values with no revisions: they are swapped as they are)."""
    app_id = replay_app_id(stamp)
    yield tumbling_table(settings), app_id
    if settings.keeps("hopping"):
        yield hopping_table(settings), f"{app_id}:hops"
    if settings.keeps("sessions"):
        yield sessions_table(settings), f"{app_id}:sessions"


def finish_window_swaps(spark: SparkSession, settings: Settings) -> list[str]:
    """Finish each window table whose swap a dead replay (the marker's stamp) left half done: its changes
    logged in gold.corrections, the table itself not yet swapped in. The dead replay's staging table goes in
    under its transaction id, so its corrections and firings are not logged again, and its staging is then
    removed. Returns the tables finished.

    Left to a new rebuild instead, those changes would be logged a second time against the live table's
    unchanged revisions (the chaos run found a key's revision logged twice)."""
    marker = swap_marker(settings)
    if not marker.exists():
        return []
    stamp = json.loads(marker.read_text())["stamp"]
    staging = staging_home(settings, stamp)
    finished = []
    for table, app_id in window_swaps(settings, stamp):
        logged = transaction_version(settings, corrections_log(settings), app_id) is not None
        if logged and transaction_version(settings, table, app_id) is None:
            # The tumbling table's changes are logged after silver's swap, and no stream writes silver while
            # the marker exists: the live silver's newest commit is that swap.
            silver_version = latest_version(events_table(settings).path(settings) / "_delta_log")
            swap_windows(spark, settings, staging, {}, table, app_id, silver_version)
            finished.append(table.name)
    remove_tree(staging.data_root())
    shutil.rmtree(staging.home, ignore_errors=True)
    return finished


def finish_source_swap(spark: SparkSession, settings: Settings) -> None:
    """Carry out (or finish, after a crash) the source half of a replay the swap marker names: the staging
    bronze replaces the live rows of its source in one commit (a transaction id makes a second attempt a
    no-op), then the staging checkpoint replaces the live source stream's (renames, each atomic)."""
    marker = swap_marker(settings)
    if not marker.exists():
        return
    plan = json.loads(marker.read_text())
    if "kafka_checkpoint" in plan:  # a marker an older version left mid-swap
        where = f"source = 'kafka' AND kafka_topic = '{plan['kafka_topic']}'"
        plan = {**plan, "source_bronze": plan["kafka_bronze"], "source_checkpoint": plan["kafka_checkpoint"]}
        plan |= {"source_stream": KAFKA_STAGE, "source_rows": where}
    if "source_checkpoint" not in plan:
        return
    staged_checkpoint = location_of(settings, plan["source_checkpoint"])
    if not staged_checkpoint.exists():
        return  # moved in already
    stream = plan["source_stream"]
    app_id = f"{replay_app_id(plan['stamp'])}:{stream}"
    if transaction_version(settings, BRONZE_EVENTS, app_id) is None:
        content = spark.read.format("delta").load(plan["source_bronze"]).select(*BRONZE_EVENTS.column_names)
        with transaction_id(spark, app_id, 0):
            (
                content.write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", plan["source_rows"])
                .save(str(BRONZE_EVENTS.path(settings)))
            )
    live = settings.checkpoints_dir / stream
    if live.exists():
        retired = settings.under("replay", plan["stamp"]).data_root() / "retired-checkpoints"
        move_tree(live, retired / stream)
    move_tree(staged_checkpoint, live)


def overwrite(
    spark: SparkSession, content: DataFrame, settings: Settings, table: Table, app_id: str, metadata: dict | None = None
) -> tuple[int, int]:
    """Replace the live table's rows with ``content`` in one commit; returns the commit's version and the rows
    it wrote (counted as they were committed: no second pass over ``content``)."""
    written = overwrite_once(content, settings, table, app_id, metadata)
    version = latest_version(table.path(settings) / "_delta_log")
    return version, written if written is not None else read_table(spark, settings, table).count()


def swap_tables(
    spark: SparkSession, settings: Settings, staging: Settings, stamp: str, rows_swapped: dict[str, int]
) -> int:
    """Swap every table the replay ``stamp`` rebuilt in staging into the live home (silver and the ops tables,
    then gold); records each table's rows in ``rows_swapped`` and returns the gold window keys changed."""
    app_id = replay_app_id(stamp)
    silver = events_table(settings)
    for table in (silver, SILVER_QUARANTINE, SILVER_DUPLICATES, late_table(settings), OPS_WATERMARKS):
        content = read_table(spark, staging, table)
        version, rows_swapped[table.name] = overwrite(spark, content, settings, table, app_id)
        if table is silver:
            silver_version = version
    changed = 0
    for gold, gold_app_id in window_swaps(settings, stamp):
        changed += swap_windows(spark, settings, staging, rows_swapped, gold, gold_app_id, silver_version)
    # Gold outputs the home leaves out (LAKEHOUSE_GOLD_OUTPUTS) were not rebuilt: they are left as they are.
    if settings.keeps("global"):
        # Global windows hold running values (no revisions or corrections): the rebuild's replace them.
        global_windows = global_table(settings)
        content = read_table(spark, staging, global_windows)
        _, rows_swapped[global_windows.name] = overwrite(spark, content, settings, global_windows, f"{app_id}:global")
    swap_keyed(spark, settings, staging, rows_swapped, app_id)
    return changed


def swap_keyed(
    spark: SparkSession, settings: Settings, staging: Settings, rows_swapped: dict[str, int], app_id: str
) -> None:
    """Swap in the keyed streams' tables the home keeps. A row the rebuild agrees with keeps its processing
    time (``updated_at``, ``detected_at``), so a replay that changes nothing shows no change to readers."""
    swaps = []
    if settings.keeps("unique_urls"):
        swaps.append((GOLD_UNIQUE_URLS, _agreeing_counts(spark, settings, staging)))
    if settings.keeps("fraud_alerts"):
        live_alerts = read_table(spark, settings, GOLD_FRAUD_ALERTS).select(
            "alert_id", F.col("detected_at").alias("live_detected_at")
        )
        alerts = read_table(spark, staging, GOLD_FRAUD_ALERTS).join(live_alerts, "alert_id", "left")
        swaps.append(
            (GOLD_FRAUD_ALERTS, alerts.withColumn("detected_at", F.coalesce("live_detected_at", "detected_at")))
        )
    for table, content in swaps:
        content = content.select(*table.column_names).localCheckpoint(eager=True)
        _, rows_swapped[table.name] = overwrite(spark, content, settings, table, app_id)


def _agreeing_counts(spark: SparkSession, settings: Settings, staging: Settings) -> DataFrame:
    live_counts = read_table(spark, settings, GOLD_UNIQUE_URLS).select(
        "user_id",
        "unique_urls",
        "window_end",
        "urls_in_state",
        F.col("updated_at").alias("live_updated_at"),
    )
    counts = read_table(spark, staging, GOLD_UNIQUE_URLS).join(
        live_counts, ["user_id", "unique_urls", "window_end", "urls_in_state"], "left"
    )
    return counts.withColumn("updated_at", F.coalesce("live_updated_at", "updated_at"))


def swap_windows(
    spark: SparkSession,
    settings: Settings,
    staging: Settings,
    rows_swapped: dict[str, int],
    gold: Table,
    app_id: str,
    silver_version: int,
) -> int:
    """Swap one window table in, keeping each key's revision history (changed keys: revision + 1 and a
    ``replay`` correction); the tumbling table's commit records ``silver_version``, the swapped silver it
    reflects. Session tables are read with their bounds as window_start and window_end. Returns the keys
    changed."""
    now = datetime.now(UTC)
    tumbling = gold.name == tumbling_table(settings).name
    shape = Shape.of(settings.spec)
    key = [*shape.key_names, "window_start"]
    values = value_names(shape)
    sessions = {"session_start": "window_start", "session_end": "window_end"}
    is_sessions = "session_start" in gold.column_names

    def read(home: Settings) -> DataFrame:
        rows = read_table(spark, home, gold)
        return rows.withColumnsRenamed(sessions) if is_sessions else rows

    live = read(settings).select(
        *key,
        F.col("window_end").alias("old_window_end"),
        *(F.col(name).alias(f"old_{name}") for name in values),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
        F.col("updated_at").alias("old_updated_at"),
    )
    rebuilt = read(staging).withColumns({f"new_{name}": F.col(name) for name in values})
    joined = rebuilt.join(live, key, "full_outer")
    differs = (
        F.col("old_revision").isNull()
        | F.col("revision").isNull()
        | visible_differ(shape, "old_", "new_")
        | (F.col("is_final") != F.col("old_is_final"))
    )
    joined = joined.withColumn("changed", differs)
    joined.persist()
    try:
        changes = joined.where("changed").select(
            *key,
            F.coalesce("window_end", "old_window_end").alias("window_end"),
            *coalesced(shape, "old_"),
            *coalesced(shape, "new_"),
            F.coalesce("old_is_final", F.lit(False)).alias("old_is_final"),
            F.coalesce("is_final", F.lit(False)).alias("new_is_final"),
            (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
            F.lit("replay").alias("cause"),
            F.lit(now).cast("timestamp").alias("updated_at"),
            F.lit(None).cast("long").alias("gold_batch"),
        )
        corrections = correction_rows(changes, gold, shape)
        changed = corrections.count()
        if changed:
            append_once(corrections, settings, corrections_log(settings), app_id, 0)
            if tumbling:
                # A replay's changes reach consumers as late firings (the firings log itself is history); the
                # other derived tables are rebuilt by the replay itself.
                watermark = latest_watermark(spark, staging, windows_stage_name(settings))
                change = GoldChange(watermark, watermark, now, app_id, 0, "replay", changed=corrections)
                for rows, table in firings(spark, settings, change):
                    append_once(rows, settings, table, app_id, 0)
        # A key keeps its revision and time when the rebuild agrees with it, so readers see no change.
        content = joined.where(F.col("revision").isNotNull()).select(
            *key,
            "window_end",
            *(["last_event_time"] if is_sessions else []),
            *values,
            F.when(F.col("changed"), F.coalesce("old_revision", F.lit(0)) + 1)
            .otherwise(F.col("old_revision"))
            .cast("int")
            .alias("revision"),
            "is_final",
            F.when(F.col("changed"), F.lit(now).cast("timestamp"))
            .otherwise(F.col("old_updated_at"))
            .alias("updated_at"),
        )
        if is_sessions:
            content = content.withColumnsRenamed({new: old for old, new in sessions.items()})
        metadata = consumption_metadata(app_id, 0, silver_version) if tumbling else None
        _, rows_swapped[gold.name] = overwrite(spark, content, settings, gold, app_id, metadata)
    finally:
        joined.unpersist()
    return changed
