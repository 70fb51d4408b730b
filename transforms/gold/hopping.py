"""Hopping windows: each one the sum of the tumbling windows (panes) it covers.

A hopping window ``[s, s + size)`` starting every ``slide`` (both multiples of the tumbling length)
holds exactly the events of the tumbling windows that start in it, so its values are a roll-up of
``gold.user_spend_<n>m`` rather than a second aggregation of silver: it sees an event exactly when the
tumbling table does (on time, within the allowed lateness, or through reconciliation), and a replay or a
repair of the tumbling table carries over unchanged. Time semantics: event time; a hopping window is
final once the watermark passes its end + the allowed lateness (the same rule as the tumbling table).

``roll_up`` runs after every change of the tumbling table, under the gold lock, and writes values
recomputed from the panes (never increments), so a re-run writes the same thing.
"""

from datetime import datetime, timedelta

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.gold.corrections import correction_rows
from transforms.gold.measures import coalesced, merge_values, rolled_up_parts, value_names, visible_differ, with_values
from warehouse.catalog import corrections_log, hopping_table, tumbling_table
from warehouse.delta import (
    MergeSpec,
    already_written,
    append_once,
    computed_once,
    materialized,
    merge_changes_once,
)
from warehouse.reads import Condition, read_where
from warehouse.settings import Settings
from warehouse.shapes import Shape


def covering_windows(panes: DataFrame, settings: Settings) -> DataFrame:
    """(keys…, window_start, window_end) of every hopping window that covers one of ``panes`` (tumbling
    windows given by their keys and window_start)."""
    keys = Shape.of(settings.spec).key_names
    size, slide = settings.windows.hopping_size_minutes * 60, settings.windows.hopping_slide_minutes * 60
    pane = settings.windows.minutes * 60
    at = F.unix_seconds("window_start")
    first = F.ceil((at + pane - size) / slide) * slide
    last = F.floor(at / slide) * slide
    starts = panes.select(*keys, F.explode(F.sequence(first, last, F.lit(slide).cast("long"))).alias("start"))
    return starts.select(
        *keys,
        F.timestamp_seconds("start").alias("window_start"),
        F.timestamp_seconds(F.col("start") + size).alias("window_end"),
    ).distinct()


def closing_windows(
    spark: SparkSession, settings: Settings, watermark: datetime, open_after: datetime | None = None
) -> DataFrame:
    """Hopping windows not final yet that ``watermark`` closes. ``open_after`` (an earlier watermark)
    bounds the search: every window it closed is final already."""
    lateness = settings.windows.allowed_lateness
    conditions: list[Condition] = [("is_final", "==", False), ("window_end", "<=", watermark - lateness)]
    if open_after is not None:
        bound = open_after - lateness - timedelta(minutes=settings.windows.hopping_size_minutes)
        conditions.append(("window_start", ">=", bound))
    return read_where(spark, settings, hopping_table(settings), conditions)


def roll_up(
    spark: SparkSession,
    settings: Settings,
    panes: DataFrame,
    watermark: datetime | None,
    now: datetime,
    cause: str,
    app_id: str,
    batch_id: int,
    gold_batch: int | None = None,
    open_after: datetime | None = None,
) -> int:
    """Bring the hopping windows covering ``panes`` (changed tumbling keys), and every open hopping
    window the ``watermark`` now closes, in line with the tumbling table; log each change in
    gold.corrections (``cause``, or ``window_closed`` when only finality changed). Exactly once per
    (app_id, batch_id); returns the number of hopping windows changed. ``open_after`` (the watermark
    before this change) bounds the search for windows to close: every window it closed is final."""
    hopping = hopping_table(settings)
    if already_written(settings, hopping, app_id, batch_id):
        return 0
    shape = Shape.of(settings.spec)
    keys = shape.key_names
    key = [*keys, "window_start"]
    lateness = F.expr(f"INTERVAL {settings.windows.allowed_lateness_seconds} SECONDS")
    wanted = covering_windows(panes, settings)
    if watermark is not None:
        closing = closing_windows(spark, settings, watermark, open_after)
        wanted = wanted.unionByName(closing.select(*key, "window_end")).distinct()
    with materialized(wanted) as wanted:
        since, n_wanted = wanted.agg(F.min("window_start"), F.count("*")).first()
        if since is None:
            return 0
        since_then = [("window_start", ">=", since)]
        pane_columns = (*key, *(part.column for part in shape.parts))
        panes_now = read_where(spark, settings, tumbling_table(settings), since_then, columns=pane_columns)
        tumbling = panes_now.withColumnRenamed("window_start", "pane_start")
        sums = (
            wanted.join(tumbling, keys)
            .where((F.col("pane_start") >= F.col("window_start")) & (F.col("pane_start") < F.col("window_end")))
            .groupBy(*key)
            .agg(*rolled_up_parts(shape, "", "sum_"))
            .select(*key, *with_values(shape, "sum_", "new_"))
        )
        final = (F.col("window_end") + lateness <= F.lit(watermark)) if watermark is not None else F.lit(False)
        old = (
            read_where(spark, settings, hopping, since_then)
            .join(wanted.select(*key), key, "left_semi")
            .select(
                *key,
                *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
                F.col("revision").alias("old_revision"),
                F.col("is_final").alias("old_is_final"),
            )
        )
        changes = (
            wanted.join(sums, key, "left")
            .join(old, key, "left")
            .select(
                *key,
                "window_end",
                *coalesced(shape, "old_"),
                *coalesced(shape, "new_"),
                F.coalesce("old_is_final", F.lit(False)).alias("old_is_final"),
                (F.coalesce("old_is_final", F.lit(False)) | final).alias("new_is_final"),
                (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
                F.col("old_revision").isNotNull().alias("existed"),
            )
        )
        values_differ = visible_differ(shape, "old_", "new_")
        changes = changes.where(
            (F.col("existed") | (F.col("new_event_count") > 0))
            & (values_differ | (F.col("old_is_final") != F.col("new_is_final")) | ~F.col("existed"))
        ).select(
            "*",
            F.when(values_differ, F.lit(cause)).otherwise(F.lit("window_closed")).alias("cause"),
            F.lit(now).cast("timestamp").alias("updated_at"),
            F.lit(gold_batch).cast("long").alias("gold_batch"),
        )
        # A change is a wanted window: when those are few, the changes are collected once for the count,
        # the log and the MERGE.
        with computed_once(changes, n_wanted) as (changes, collected):
            changed = collected.num_rows if collected is not None else changes.count()
            if not changed:
                return 0

            logged = correction_rows(changes.where("existed"), hopping, shape)
            append_once(logged, settings, corrections_log(settings), app_id, batch_id)
            metadata = {"writer": app_id, "batch": batch_id}
            merge = _spec(shape, since)
            merge_changes_once(changes, hopping.path(settings), app_id, batch_id, merge, metadata, collected)
    return changed


def _spec(shape: Shape, since: datetime) -> MergeSpec:
    # Values, not increments: they were recomputed from the panes under the gold lock.
    on = " AND ".join(f"t.{k} = s.{k}" for k in [*shape.key_names, "window_start"])
    return MergeSpec(
        f"{on} AND t.window_start >= TIMESTAMP '{since}'",
        delete_when="s.new_event_count = 0",
        update={
            **merge_values(shape, "new_"),
            "revision": "t.revision + 1",
            "is_final": "s.new_is_final",
            "updated_at": "s.updated_at",
        },
        insert={
            **{k: f"s.{k}" for k in [*shape.key_names, "window_start", "window_end"]},
            **merge_values(shape, "new_"),
            "revision": "1",
            "is_final": "s.new_is_final",
            "updated_at": "s.updated_at",
        },
    )
