"""Kappa replay: rebuild silver, gold and the ops tables from bronze with the same streams, then swap.

1. Under every stream's lock, the silver, gold and reconcile streams run on fresh checkpoints into
   staging tables (``LAKEHOUSE_HOME/replay/<stamp>``), reading the live bronze.
2. Each live table's content is replaced by its staging twin in one Delta commit (readers see the old or
   the new table, never half of one; the old stays reachable by time travel). Gold keeps each key's
   revision history: a key whose values changed gets revision + 1 and a ``replay`` correction.
3. The stream checkpoints are reset to match: silver continues from the staging silver's position in
   bronze; gold and reconcile start after the swap commits of their sources.
4. The orders ⋈ payments join keeps Spark state (pending orders and payments, its watermark) that must
   describe the live silver, so it is rebuilt last, from the swapped-in live silver on a fresh checkpoint
   (``_rebuild_order_payments``), and its table and checkpoint replace the live ones.

A source stream's batch a crash cut off after its bronze commit is recorded as done first: the rebuild
classifies its lines from bronze, so its re-run must not carry them into silver again.

A marker file spans the swap; while it exists every stream refuses to start, and a new replay completes the
job: it first finishes what the dead one left half done (``runtime.replay_swap``), then derives everything from
bronze again.

With ``source="kafka"`` bronze's rows of the configured topic are rebuilt first (a Kappa rebuild from the
log): the Kafka stream re-reads the topic from its earliest retained offsets on a fresh checkpoint into a
staging bronze, which replaces those rows of the live bronze in one commit (landing rows stay as they
are), and its checkpoint becomes the live Kafka stream's. ``source="landing"`` does the same with the
landing zone's files and bronze's file rows: the recovery of a source stream whose checkpoint is lost or
damaged (``runtime.faults``). The replay refuses, before reading anything, when the source no longer
holds a line bronze holds (an offset past the topic's retention, a landing file removed): the rebuild
would lose it.
"""

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.checkpoints import (
    KAFKA_STAGE,
    LANDING_STAGE,
    ORDER_PAYMENTS_STAGE,
    RECONCILE_STAGE,
    SILVER_STAGE,
    batch_earliest_start,
    checkpoint_dir,
    committed_batches,
    continue_after,
    derived_stage_name,
    move_checkpoint,
    record_finished,
    starting_version_file,
    uncommitted_batch,
    writer_id,
)
from runtime.progress import StageReport
from runtime.replay_swap import (
    finish_source_swap,
    finish_window_swaps,
    overwrite,
    replay_app_id,
    staging_home,
    swap_tables,
)
from runtime.runner import flush_progress, prepare, run_stage_once, swap_marker
from runtime.sources.kafka import pinned_topic_id, retention_gaps
from runtime.sources.kafka_client import topic_id
from runtime.stages import SOURCES, keyed_stages, reconcile_stage, source_stage, stage_named, stages
from warehouse.catalog import (
    BRONZE_EVENTS,
    OPS_STREAM_PROGRESS,
    OPS_WATERMARKS,
    ORDER_PAYMENTS,
    Table,
    events_table,
    late_table,
)
from warehouse.delta import (
    committed_version,
    is_delta_table,
    latest_version,
    read_table,
    side_by_side,
)
from warehouse.locks import DERIVED_LOCK, GOLD_LOCK, hold_all
from warehouse.settings import Settings
from warehouse.storage import move_tree, names, open_delta, remove_tree, write_atomically
from warehouse.tables import ensure_tables


@dataclass
class ReplayReport:
    """What a replay rebuilt: per-stream figures, per-table rows swapped, gold keys it changed."""

    stamp: str
    streams: list[StageReport] = field(default_factory=list)
    rows_swapped: dict[str, int] = field(default_factory=dict)
    gold_keys_changed: int = 0
    seconds: float = 0.0
    #: With ``source="kafka"``: per partition, the offsets the rebuild re-read (first, next after last).
    kafka_offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Source batches a crash had cut off after their bronze commit, recorded as done (stream → batch).
    settled: dict[str, int] = field(default_factory=dict)
    #: Window tables a replay that died mid-swap had logged the changes of but not swapped in, finished first.
    finished: list[str] = field(default_factory=list)


#: Where a replay rebuilds from: bronze as it is, or the Kafka topic (then bronze's Kafka rows first).
REPLAY_SOURCES = ("bronze", *SOURCES)


def check_replay_arguments(source: str, from_version: int | None) -> None:
    """Refuse, with one line, a replay source or a bronze version a replay cannot take (before Spark starts)."""
    if source not in REPLAY_SOURCES:
        raise ValueError(f"--source must be one of {', '.join(REPLAY_SOURCES)}, got {source!r}")
    if from_version is not None and from_version < 0:
        raise ValueError("--from-version must be a bronze version (0 or more)")
    if from_version is not None and source != "bronze":
        raise ValueError(f"--from-version is for a replay from bronze; --source {source} re-reads its whole source")


def run_replay(
    spark: SparkSession,
    settings: Settings,
    from_version: int | None = None,
    listener: Callable[[StageReport, dict[str, float]], None] | None = None,
    source: str = "bronze",
    accept_rebuild: bool = False,
) -> ReplayReport:
    """Rebuild every table downstream of bronze (from bronze version ``from_version`` on, else all of it);
    with ``source="kafka"``, rebuild bronze's rows of the topic from the topic first. With ``accept_rebuild``
    (its spec changed its id, keys, event time or tumbling size), every table but bronze and every checkpoint
    but the source streams' is first moved aside (``retired/<stamp>/``), so they are built anew under it."""
    check_replay_arguments(source, from_version)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    report = ReplayReport(stamp)
    live = stages(settings)
    rebuilt = [stage.name for stage in live.downstream] + [reconcile_stage(settings).name]
    if accept_rebuild:
        locked = list(dict.fromkeys([*live.names, KAFKA_STAGE, *rebuilt, GOLD_LOCK, DERIVED_LOCK]))
        with hold_all(settings, locked, purpose="a rebuild"):
            _retire_derived(settings, stamp)
    rebuilt += [source_stage(source).name] if source in SOURCES else []
    prepare(spark, settings, allow_interrupted_swap=True, rebuilt=rebuilt, accept_rebuild=accept_rebuild)
    names = [*live.names, KAFKA_STAGE, reconcile_stage(settings).name, GOLD_LOCK, DERIVED_LOCK]
    with hold_all(settings, names, purpose="a replay"):
        finish_source_swap(spark, settings)
        report.finished = finish_window_swaps(spark, settings)
        report.settled = _settle_cut_off_batches(settings)
        staging = staging_home(settings, stamp)
        staging.ensure_home()
        if source in SOURCES:
            _rebuild_source_bronze(spark, settings, staging, report, listener, source)
        if from_version is not None:
            write_atomically(starting_version_file(staging.checkpoints_dir, SILVER_STAGE), str(from_version))
        prepare(spark, staging)
        _rebuild_in_staging(spark, staging, report, listener)

        marker = swap_marker(settings)
        marker.write_text(json.dumps({"stamp": stamp}))
        report.gold_keys_changed = swap_tables(spark, settings, staging, stamp, report.rows_swapped)
        _reset_checkpoints(spark, settings, staging)
        _rebuild_order_payments(spark, settings, staging, report, listener)
        marker.unlink()
        remove_tree(staging.data_root())
        shutil.rmtree(staging.home, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report


def _retire_derived(settings: Settings, stamp: str) -> None:
    """Move every table but bronze and every checkpoint but the source streams' into ``retired/<stamp>/``: what
    was built under the old spec is kept, out of the way of what the new one builds."""
    retired = settings.under("retired", stamp).data_root()
    # Every table folder, not only the new spec's: the old tumbling size's tables are named apart.
    bronze = BRONZE_EVENTS.path(settings)
    for layer in sorted(settings.tables_dir.iterdir()) if settings.tables_dir.exists() else []:
        for table in sorted(layer.iterdir()):
            if str(table) != str(bronze) and is_delta_table(table):
                move_tree(table, retired / "tables" / layer.name / table.name)
    kept = {LANDING_STAGE, KAFKA_STAGE}
    for checkpoint in sorted(settings.checkpoints_dir.iterdir()) if settings.checkpoints_dir.exists() else []:
        if checkpoint.name not in kept:
            move_tree(checkpoint, retired / "checkpoints" / checkpoint.name)


def _settle_cut_off_batches(settings: Settings) -> dict[str, int]:
    """Record as done each source stream's batch a crash cut off after its bronze commit (stream → batch).

    Its lines are in bronze, so the rebuild classifies them; re-run afterwards, the batch would find its
    bronze write done and carry the same lines into the rebuilt silver once more, as duplicates of
    themselves. A batch cut off before its bronze commit is left to re-run: the rebuild has none of its
    lines, and its re-run carries them on the new checkpoints."""
    settled = {}
    for stream in (LANDING_STAGE, KAFKA_STAGE):
        checkpoint = checkpoint_dir(settings, stream)
        batch = uncommitted_batch(checkpoint) if checkpoint.is_dir() else None
        if batch is None:
            continue
        writer = writer_id(stream, checkpoint)
        since = batch_earliest_start(checkpoint, batch)
        if committed_version(BRONZE_EVENTS.path(settings), writer, batch, since) is not None:
            record_finished(checkpoint, batch)
            settled[stream] = batch
    return settled


def _rebuild_source_bronze(
    spark: SparkSession,
    settings: Settings,
    staging: Settings,
    report: ReplayReport,
    listener: Callable[[StageReport, dict[str, float]], None] | None,
    source: str,
) -> None:
    """Re-read the source (the landing zone's files, or the topic from its earliest retained offsets) on
    a fresh checkpoint into a staging bronze, then put it in place of the live bronze's rows of that source
    (one commit) and its checkpoint in place of the live source stream's. Refused, before anything is
    read, when the source no longer holds a line bronze holds: the rebuild would lose it."""
    stage = source_stage(source, carry=False)
    kept_rows = None
    if source == "kafka":
        topic = settings.kafka.topic
        where, now, kept_rows = _topic_rows(spark, settings)
        held = _offset_ranges(read_table(spark, settings, BRONZE_EVENTS).where(now))
        gaps = retention_gaps(settings, held)
        rebuilt = replace(staging.under("kafka"), kafka=replace(settings.kafka, starting_offsets="earliest"))
        swapped = f"{BRONZE_EVENTS.name} (topic {topic})"
    else:
        where = "source = 'file'"
        gaps = _landing_gaps(spark, settings, where)
        rebuilt = replace(staging.under("landing"), links=(("landing", settings.landing_dir),))
        swapped = f"{BRONZE_EVENTS.name} (landing zone)"
    if gaps:
        raise RuntimeError(
            f"the {source} source no longer holds lines bronze was built from ({'; '.join(gaps)}); a rebuild "
            "from it would lose them; `lakehouse replay` rebuilds from bronze, which keeps them"
        )
    rebuilt.ensure_home()
    ensure_tables(spark, rebuilt, [BRONZE_EVENTS, OPS_STREAM_PROGRESS])
    report.streams.append(run_stage_once(spark, rebuilt, stage, listener))
    if source == "kafka":
        ranges = _offset_ranges(read_table(spark, rebuilt, BRONZE_EVENTS))
        report.kafka_offsets = {partition: (first, last + 1) for partition, (first, last) in ranges.items()}
    if kept_rows is not None:
        kept_rows.write.format("delta").mode("append").save(str(BRONZE_EVENTS.path(rebuilt)))
    swap_marker(settings).write_text(
        json.dumps(
            {
                "stamp": report.stamp,
                "source_bronze": str(BRONZE_EVENTS.path(rebuilt)),
                "source_checkpoint": str(rebuilt.checkpoints_dir / stage.name),
                "source_stream": stage.name,
                "source_rows": where,
            }
        )
    )
    finish_source_swap(spark, settings)
    report.rows_swapped[swapped] = int(report.streams[-1].figures.get("rows_written", 0))


def _topic_rows(spark: SparkSession, settings: Settings) -> tuple[str, str, DataFrame | None]:
    """Which bronze rows of the topic a rebuild from it replaces, which of them the topic as it is now
    holds, and the rows the rebuild keeps as they were.

    Rows carry the id of the topic they were read from. When the topic was deleted and created again since
    the stream last read (the live checkpoint is pinned to another id), the new topic holds none of the old
    rows: they are kept (those landed before ids were kept, stamped with the old id) beside the new topic's
    messages. Otherwise the rows of the topic as it is now, and those without an id, are rebuilt."""
    of_topic = f"source = 'kafka' AND kafka_topic = '{settings.kafka.topic}'"
    current = topic_id(settings)
    pinned = pinned_topic_id(checkpoint_dir(settings, KAFKA_STAGE))
    now = f"{of_topic} AND kafka_topic_id = '{current}'"
    if current is None or pinned is None or pinned == current:
        rows = f"{of_topic} AND (kafka_topic_id IS NULL OR kafka_topic_id = '{current}')"
        return rows, rows, None
    old = read_table(spark, settings, BRONZE_EVENTS).where(f"{of_topic} AND NOT kafka_topic_id <=> '{current}'")
    return of_topic, now, old.withColumn("kafka_topic_id", F.coalesce("kafka_topic_id", F.lit(pinned)))


def _offset_ranges(rows: DataFrame) -> dict[int, tuple[int, int]]:
    """Per Kafka partition, the first and last offset among ``rows`` (bronze rows of one topic)."""
    ranges = (
        rows.groupBy("kafka_partition")
        .agg(F.min("kafka_offset").alias("first"), F.max("kafka_offset").alias("last"))
        .collect()
    )
    return {r.kafka_partition: (r.first, r.last) for r in ranges}


def _landing_gaps(spark: SparkSession, settings: Settings, where: str) -> list[str]:
    """Landing files bronze holds lines of that are no longer in the landing zone (the first few)."""
    held = read_table(spark, settings, BRONZE_EVENTS).where(where).select("source_file").distinct().collect()
    present = set(names(settings.landing_dir))
    gone = sorted({unquote(r.source_file.rsplit("/", 1)[-1]) for r in held} - present)
    return [f"{len(gone)} landing files are gone, first {gone[0]}"] if gone else []


def _rebuild_in_staging(
    spark: SparkSession,
    staging: Settings,
    report: ReplayReport,
    listener: Callable[[StageReport, dict[str, float]], None] | None,
) -> None:
    """Silver, then the tumbling windows, then the followers side by side (as ``run_once`` runs them: each
    reads only what those two committed and writes its own tables), then reconcile, each to its end."""
    pipeline = stages(staging)
    for stage in (pipeline.silver, pipeline.windows):
        report.streams.append(run_stage_once(spark, staging, stage, listener, record_progress=False))
    followers = [stage for stage in pipeline.followers if stage.name not in REBUILT_AFTER_SWAP]
    run = partial(run_stage_once, spark, staging, listener=listener, record_progress=False)
    report.streams.extend(side_by_side(*(partial(run, stage=stage) for stage in followers)))
    report.streams.append(run_stage_once(spark, staging, reconcile_stage(staging), listener, record_progress=False))
    flush_progress(spark, staging, [pipeline.silver, pipeline.windows, *followers, reconcile_stage(staging)])


#: Stateful streams rebuilt after the swap rather than in staging: a checkpoint's Delta offsets name the
#: table they read (its id), so one built over the staging silver could not go on reading the live silver;
#: starting after the swap commit instead (as gold does) would lose the state it had built.
REBUILT_AFTER_SWAP = frozenset({ORDER_PAYMENTS_STAGE})


def _rebuild_order_payments(
    spark: SparkSession,
    settings: Settings,
    staging: Settings,
    report: ReplayReport,
    listener: Callable[[StageReport, dict[str, float]], None] | None,
) -> None:
    """Rebuild gold.order_payments and its join state from the live silver just swapped in.

    A fresh join stream reads the live silver (through a link, as the staging streams read bronze) into a
    table of its own: its first batch is silver's whole snapshot (a Delta stream with no starting version),
    so nothing is late, every pair within the bound is written, and orders whose bound the watermark has
    passed come out ``unpaid``. Its content replaces the live table in one commit, and its checkpoint (same
    source table id, offsets just after the swap commit, the state of orders still waiting) replaces the
    live one, so the live stream goes on from there without writing any row twice.
    """
    if not settings.keeps("order_payments"):
        return
    silver = events_table(settings)
    rebuilt = replace(staging.under("order_payments"), links=((silver.name, silver.path(settings)),))
    rebuilt.ensure_home()
    ensure_tables(spark, rebuilt, [ORDER_PAYMENTS])
    report.streams.append(run_stage_once(spark, rebuilt, stage_named(rebuilt, ORDER_PAYMENTS_STAGE), listener))
    content = read_table(spark, rebuilt, ORDER_PAYMENTS)
    app_id = f"{replay_app_id(report.stamp)}:order_payments"
    _, report.rows_swapped[ORDER_PAYMENTS.name] = overwrite(spark, content, settings, ORDER_PAYMENTS, app_id)
    live = settings.checkpoints_dir / ORDER_PAYMENTS_STAGE
    if live.exists():
        move_tree(live, staging.data_root() / "retired-checkpoints" / ORDER_PAYMENTS_STAGE)
    starting_version_file(settings.checkpoints_dir, ORDER_PAYMENTS_STAGE).unlink(missing_ok=True)
    move_tree(rebuilt.checkpoints_dir / ORDER_PAYMENTS_STAGE, live)


def _reset_checkpoints(spark: SparkSession, settings: Settings, staging: Settings) -> None:
    """Silver continues where the staging silver stopped in bronze; gold and reconcile start after the swap;
    the keyed streams keep the state their staging runs built and go on after the swap too."""
    gold_stage = stages(settings).windows.name
    derived = derived_stage_name(settings)
    keyed = [stage.name for stage in keyed_stages(settings)]
    retired = staging.data_root() / "retired-checkpoints"
    for name in (SILVER_STAGE, gold_stage, derived, RECONCILE_STAGE, *keyed):
        live = settings.checkpoints_dir / name
        if live.exists():
            move_tree(live, retired / name)
        starting_version_file(settings.checkpoints_dir, name).unlink(missing_ok=True)
    move_tree(staging.checkpoints_dir / SILVER_STAGE, settings.checkpoints_dir / SILVER_STAGE)
    silver_version = _latest_version(spark, settings, events_table(settings))
    for name, version in (
        (gold_stage, silver_version),
        (RECONCILE_STAGE, _latest_version(spark, settings, late_table(settings))),
        # The derived windows were rebuilt in staging; the derived stream goes on after the swapped rows.
        (derived, _latest_version(spark, settings, OPS_WATERMARKS)),
    ):
        write_atomically(starting_version_file(settings.checkpoints_dir, name), str(version + 1))
    silver_id = open_delta(events_table(settings).path(settings)).metadata().id
    for name in keyed:
        built = staging.checkpoints_dir / name
        if committed_batches(built):
            live = settings.checkpoints_dir / name
            move_checkpoint(built, live)
            continue_after(live, silver_id, silver_version)
        else:
            write_atomically(starting_version_file(settings.checkpoints_dir, name), str(silver_version + 1))


def _latest_version(spark: SparkSession, settings: Settings, table: Table) -> int:
    return latest_version(table.path(settings) / "_delta_log")
