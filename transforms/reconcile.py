"""Reconciliation: make gold windows equal a recomputation from silver, for the affected keys only.

Two entry points share one recomputation and one repair:

- ``fold_late_events``: each micro-batch of ``silver.late_events`` (a stream with its own checkpoint,
  so every late event is folded exactly once) recomputes the windows its events belong to;
- ``repair_dates``: the completeness sweep recomputes every window of some event dates.

Time semantics: a window's truth is the sum and count of its deduplicated valid events, by event time.
Gold is a running aggregate the window stream keeps by increments; the recomputation must not count an
event that silver has and the stream has not folded in yet, or the stream's later increment would count
it twice. So the recomputation reads silver *as of the version gold reflects* (recorded in gold's own
commits, see ``transforms.gold.tumbling.consumption_metadata``), plus every late event (set aside, never
incremented). Both happen under the ``gold`` lock, so no stream batch changes gold in between. The
result is written as values (not increments): re-running it changes nothing.
"""

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, date, datetime

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.gold.corrections import SILVER_VERSION_KEY, consumption_metadata, correction_rows
from transforms.gold.measures import coalesced, event_parts, merge_values, value_names, visible_differ, with_values
from transforms.gold.propagate import GoldChange, event_columns, firings, propagate
from transforms.gold.tumbling import assign_windows, closes_at
from transforms.gold.watermarks import latest_watermark
from transforms.silver import canonical
from warehouse.catalog import (
    OPS_RECONCILIATIONS,
    Table,
    corrections_log,
    events_table,
    late_table,
    tumbling_table,
)
from warehouse.delta import (
    Commit,
    append_once,
    as_of,
    commit_metadata,
    find_commit,
    materialized,
    merge_once,
    read_table,
    transaction_version,
)
from warehouse.settings import Settings
from warehouse.shapes import Shape


def window_key(settings: Settings) -> list[str]:
    """A tumbling window row's key: the pipeline's key fields and ``window_start``."""
    return [*Shape.of(settings.spec).key_names, "window_start"]


class ReconcileError(RuntimeError):
    """Reconciliation cannot run safely now; the message says why and what to do."""


def gold_silver_version(spark: SparkSession, settings: Settings) -> int | None:
    """The silver.events version gold reflects: every silver commit up to it is in gold or late_events.

    None when gold has never consumed silver. Raises ReconcileError when gold's newest batch stopped
    part-way through a silver commit (it cannot say which of its events it has).
    """
    gold = tumbling_table(settings)
    found = commit_metadata(spark, settings, gold, SILVER_VERSION_KEY)
    if found is None:
        if read_table(spark, settings, gold).limit(1).count():
            raise ReconcileError(
                f"{gold.name} has rows but no commit records which silver it reflects; rebuild it with "
                "`lakehouse replay`"
            )
        return None
    version = found[SILVER_VERSION_KEY]
    if version is None:
        raise ReconcileError(
            f"{gold.name} is part-way through a silver.events commit; let the streams catch up "
            "(`lakehouse run --once`), then reconcile"
        )
    return int(version)


def window_dates(keys: DataFrame) -> list[date]:
    """UTC dates of the windows' starts: a window lies within one day (its length divides a day)."""
    return sorted(r.d for r in keys.select(F.to_date("window_start").alias("d")).distinct().collect())


def recompute_windows(
    spark: SparkSession,
    settings: Settings,
    silver_version: int | None,
    dates: Sequence[date] | None,
    keys: DataFrame | None = None,
    late_version: int | None = None,
) -> DataFrame:
    """Exact (keys…, window_start) values over the given event dates, from what gold has consumed.

    Reads silver.events as of ``silver_version`` (pruned to the dates' ``event_date`` partitions; every
    date when ``dates`` is None) plus silver.late_events (as of ``late_version``, default the latest),
    deduplicated by event_id (a late event is in silver too, and may be newer than that version when its
    stream batch crashed before committing to gold). With ``keys``, only those (user_id, window_start)
    windows: the scan keeps only their users (a filter pushed into the Parquet reader, and Delta file
    skipping where files are clustered by user) and the keys are matched before the aggregation, so the
    cost follows the affected keys, not the day's traffic.
    """
    shape = Shape.of(settings.spec)
    key = window_key(settings)
    columns = event_columns(shape)
    if silver_version is None:
        silver = canonical(spark.createDataFrame([], events_table(settings).schema), settings.spec).select(*columns)
    else:
        silver = as_of(spark, settings, events_table(settings), silver_version)
        if dates is not None:
            silver = silver.where(F.col("event_date").isin([d.isoformat() for d in dates]))
        silver = canonical(silver, settings.spec).select(*columns)
    late = as_of(spark, settings, late_table(settings), late_version)
    if dates is not None:
        late = late.where(F.to_date("window_start").isin([d.isoformat() for d in dates]))
    late = canonical(late, settings.spec).select(*columns)
    if keys is not None:
        first = shape.key_names[0]
        values = sorted(r[0] for r in keys.select(first).distinct().collect())
        silver = silver.where(F.col(first).isin(values))
        late = late.where(F.col(first).isin(values))
    windowed = assign_windows(silver.unionByName(late).dropDuplicates(["event_id"]), settings)
    if keys is not None:
        windowed = windowed.join(F.broadcast(keys.select(*key)), key, "left_semi")
    parts = windowed.groupBy(*key, "window_end").agg(*event_parts(shape, "p_"))
    return parts.select(*key, "window_end", *with_values(shape, "p_", ""))


def window_repairs(
    expected: DataFrame, current: DataFrame, settings: Settings, watermark: datetime | None, now: datetime
) -> DataFrame:
    """One row per key whose gold row differs from ``expected``: insert, update or delete, old and new.

    ``expected`` and ``current`` cover the same keys. A gold row without events is deleted; a window the
    watermark has closed becomes final.
    """
    shape = Shape.of(settings.spec)
    key = window_key(settings)
    closed = closes_at(settings) <= F.lit(watermark) if watermark else F.lit(False)
    old = current.select(
        *key,
        F.col("window_end").alias("old_window_end"),
        *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
    )
    new = expected.select(*key, "window_end", *(F.col(name).alias(f"new_{name}") for name in value_names(shape)))
    joined = new.join(old, key, "full_outer").withColumn("window_end", F.coalesce("window_end", "old_window_end"))
    action = (
        F.when(F.col("old_revision").isNull(), "insert")
        .when(F.col("new_event_count").isNull(), "delete")
        .when(visible_differ(shape, "old_", "new_") | (~F.col("old_is_final") & closed), "update")
    )
    return (
        joined.withColumn("action", action)
        .where(F.col("action").isNotNull())
        .select(
            *key,
            "window_end",
            "action",
            *coalesced(shape, "old_"),
            F.coalesce("old_is_final", F.lit(False)).alias("old_is_final"),
            *coalesced(shape, "new_"),
            (F.coalesce("old_is_final", F.lit(False)) | closed).alias("new_is_final"),
            (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
            F.lit(now).cast("timestamp").alias("updated_at"),
        )
    )


def apply_repairs(
    spark: SparkSession,
    settings: Settings,
    repairs: DataFrame,
    dates: Sequence[date],
    writer_id: str,
    batch_id: int,
    silver_version: int | None,
    panes: DataFrame,
) -> int:
    """MERGE the repairs into gold, log what that commit changed in gold.corrections, then let the
    derived outputs follow (``transforms.gold.propagate``: the changes' firings, the hopping windows over
    ``panes``); each write exactly once per (writer, batch). Returns the number of keys changed.

    The log is read back from the commit itself (gold at its version against the version before), not
    from ``repairs``: a re-run after a crash between the two writes skips the MERGE and logs exactly what
    it did, even though a recomputation now could differ (late events that arrived meanwhile).
    """
    gold = tumbling_table(settings)
    watermark = latest_watermark(spark, settings, _gold_query(settings))
    # The watermark does not move: every change reaches consumers as a late firing.
    change = GoldChange(watermark, watermark, datetime.now(UTC), writer_id, batch_id, "reconciliation", panes=panes)
    commit = find_commit(spark, settings, gold, writer_id, batch_id)
    if commit is None:
        with materialized(repairs) as repairs:
            if repairs.count():
                merge_once(
                    spark,
                    writer_id,
                    batch_id,
                    lambda: _merge_repairs(spark, settings, gold, repairs),
                    consumption_metadata(writer_id, batch_id, silver_version),
                )
                commit = find_commit(spark, settings, gold, writer_id, batch_id)
                if commit is None:
                    raise ReconcileError(f"{gold.name} has no commit of {writer_id} batch {batch_id} after its MERGE")
    changed = 0
    if commit is not None:
        with materialized(_changes_in_commit(spark, settings, commit, dates, "reconciliation")) as corrections:
            # Appended even when empty, so the log's transaction version keeps step with gold's.
            append_once(corrections, settings, corrections_log(settings), writer_id, batch_id)
            for rows, table in firings(spark, settings, replace(change, changed=corrections)):
                append_once(rows, settings, table, writer_id, batch_id)
            changed = corrections.count()
    propagate(spark, settings, change)
    return changed


def _changes_in_commit(
    spark: SparkSession, settings: Settings, commit: Commit, dates: Sequence[date], cause: str
) -> DataFrame:
    """gold.corrections rows for every gold key on ``dates`` that the commit inserted, updated or deleted."""
    gold = tumbling_table(settings)
    shape = Shape.of(settings.spec)
    key = window_key(settings)
    wanted = [d.isoformat() for d in dates]

    def gold_at(version: int) -> DataFrame:
        return as_of(spark, settings, gold, version).where(F.to_date("window_start").isin(wanted))

    before = gold_at(commit.version - 1).select(
        *key,
        F.col("window_end").alias("old_window_end"),
        *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
    )
    after = gold_at(commit.version).select(
        *key,
        "window_end",
        *(F.col(name).alias(f"new_{name}") for name in value_names(shape)),
        "revision",
        "is_final",
        "updated_at",
    )
    changed = after.join(before, key, "full_outer").where(
        F.col("revision").isNull() | F.col("old_revision").isNull() | (F.col("revision") != F.col("old_revision"))
    )
    return correction_rows(
        changed.select(
            *key,
            F.coalesce("window_end", "old_window_end").alias("window_end"),
            *coalesced(shape, "old_"),
            *coalesced(shape, "new_"),
            F.coalesce("old_is_final", F.lit(False)).alias("old_is_final"),
            F.coalesce("is_final", "old_is_final").alias("new_is_final"),
            F.coalesce("revision", F.col("old_revision") + 1).cast("int").alias("revision"),
            F.lit(cause).alias("cause"),
            F.coalesce("updated_at", F.lit(commit.timestamp).cast("timestamp")).alias("updated_at"),
            F.lit(None).cast("long").alias("gold_batch"),
        ),
        gold,
        shape,
    )


def _merge_repairs(spark: SparkSession, settings: Settings, gold: Table, repairs: DataFrame) -> None:
    shape = Shape.of(settings.spec)
    key = window_key(settings)
    starts = repairs.agg(F.min("window_start"), F.max("window_start")).first()
    # The window_start range lets Delta skip gold files by their min/max statistics.
    condition = (
        " AND ".join(f"t.{k} = s.{k}" for k in key) + f" AND t.window_start >= TIMESTAMP '{starts[0].isoformat()}' "
        f"AND t.window_start <= TIMESTAMP '{starts[1].isoformat()}'"
    )
    (
        DeltaTable.forPath(spark, str(gold.path(settings)))
        .alias("t")
        .merge(repairs.alias("s"), condition)
        .whenMatchedDelete(condition="s.action = 'delete'")
        .whenMatchedUpdate(
            set={
                **merge_values(shape, "new_"),
                "revision": "t.revision + 1",
                "is_final": "t.is_final OR s.new_is_final",
                "updated_at": "s.updated_at",
            }
        )
        .whenNotMatchedInsert(
            condition="s.action = 'insert'",
            values={
                **{k: f"s.{k}" for k in [*key, "window_end"]},
                **merge_values(shape, "new_"),
                "revision": "1",
                "is_final": "s.new_is_final",
                "updated_at": "s.updated_at",
            },
        )
        .execute()
    )


def _gold_query(settings: Settings) -> str:
    return tumbling_table(settings).name.replace(".", "_")


def _record(
    spark: SparkSession, settings: Settings, kind: str, writer_id: str, batch_id: int, figures: dict[str, float]
) -> None:
    row = spark.createDataFrame(
        [
            (
                kind,
                writer_id,
                batch_id,
                figures["dates"],
                int(figures["late_events"]),
                int(figures["keys_recomputed"]),
                int(figures["keys_changed"]),
                figures["silver_version"],
                float(figures["seconds"]),
                datetime.now(UTC),
            )
        ],
        OPS_RECONCILIATIONS.schema,
    )
    append_once(row, settings, OPS_RECONCILIATIONS, writer_id, batch_id)


def fold_late_events(late: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Recompute, from silver, every window that one micro-batch of late events belongs to.

    Runs under the gold lock (the runner holds it for the batch). Each affected row ends equal to its
    events' exact sum and count, one revision later, with one correction (cause ``reconciliation``).
    """
    spark = late.sparkSession
    started = time.monotonic()
    keys = late.select(*window_key(settings)).distinct()
    keys.persist()
    try:
        n_late = late.count()
        if not n_late:
            return {"late_events": 0, "keys_recomputed": 0, "keys_changed": 0, "rows_in": 0, "rows_written": 0}
        dates = window_dates(keys)
        silver_version = gold_silver_version(spark, settings)
        gold = tumbling_table(settings)
        expected = recompute_windows(spark, settings, silver_version, dates, keys)
        current = (
            read_table(spark, settings, gold)
            .where(F.to_date("window_start").isin([d.isoformat() for d in dates]))
            .join(keys, window_key(settings), "left_semi")
        )
        watermark = latest_watermark(spark, settings, _gold_query(settings))
        repairs = window_repairs(expected, current, settings, watermark, datetime.now(UTC))
        changed = apply_repairs(spark, settings, repairs, dates, writer_id, batch_id, silver_version, keys)
        figures = {
            "late_events": n_late,
            "keys_recomputed": keys.count(),
            "keys_changed": changed,
        }
    finally:
        keys.unpersist()
    figures["seconds"] = time.monotonic() - started
    _record(
        spark,
        settings,
        "late_events",
        writer_id,
        batch_id,
        {**figures, "dates": ",".join(d.isoformat() for d in dates), "silver_version": silver_version},
    )
    return {**figures, "rows_in": n_late, "rows_written": changed}


def _next_run(settings: Settings, writer_id: str) -> int:
    """The run number for ``writer_id``: a run whose MERGE committed but whose log did not is resumed
    under its own number; otherwise one more than the last."""
    merged = transaction_version(settings, tumbling_table(settings), writer_id)
    logged = transaction_version(settings, corrections_log(settings), writer_id)
    last_merged = -1 if merged is None else merged
    last_logged = -1 if logged is None else logged
    return last_merged if last_merged > last_logged else last_merged + 1


def repair_dates(spark: SparkSession, settings: Settings, dates: Sequence[date]) -> dict[str, float]:
    """Recompute every window of the given event dates from silver and repair every difference in gold.

    The caller holds the gold lock. Exactly once per (dates, run): the run number is one more than the
    runs recorded for the same dates, so a crashed run's re-run reuses it and its transaction ids.
    """
    started = time.monotonic()
    dates = sorted(set(dates))
    if not dates:
        return {"late_events": 0, "keys_recomputed": 0, "keys_changed": 0, "seconds": 0.0}
    writer_id = f"lakehouse:reconcile_dates:{dates[0].isoformat()}:{dates[-1].isoformat()}:{len(dates)}"
    run = _next_run(settings, writer_id)
    silver_version = gold_silver_version(spark, settings)
    wanted = [d.isoformat() for d in dates]
    expected = recompute_windows(spark, settings, silver_version, dates)
    expected.persist()
    try:
        current = read_table(spark, settings, tumbling_table(settings)).where(F.to_date("window_start").isin(wanted))
        watermark = latest_watermark(spark, settings, _gold_query(settings))
        repairs = window_repairs(expected, current, settings, watermark, datetime.now(UTC))
        panes = expected.select(*window_key(settings)).unionByName(current.select(*window_key(settings)))
        changed = apply_repairs(spark, settings, repairs, dates, writer_id, run, silver_version, panes)
        figures = {"late_events": 0, "keys_recomputed": expected.count(), "keys_changed": changed}
    finally:
        expected.unpersist()
    figures["seconds"] = time.monotonic() - started
    if changed:
        _record(
            spark,
            settings,
            "dates",
            writer_id,
            run,
            {**figures, "dates": ",".join(wanted), "silver_version": silver_version},
        )
    return figures
