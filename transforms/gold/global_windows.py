"""Global windows with a count trigger: per user, one window over all of time, firing every N events.

A global window never closes (no watermark can pass the end of time), so it needs a trigger of its own:
every ``LAKEHOUSE_GLOBAL_TRIGGER_COUNT`` events of the user it fires, emitting the user's accumulated
count and spend at that event (``fired_*``); between firings the running figures move on. Every silver
event counts however late it comes (the window is never final). Within a micro-batch a user's events are
counted in event-time order (then event id), batches in the order the stream reads them.

Written as values computed under the gold lock (a MERGE exactly once per batch).
"""

from datetime import datetime

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from warehouse.catalog import MONEY, global_table
from warehouse.delta import MergeSpec, already_written, computed_once, merge_changes_once
from warehouse.reads import read_where
from warehouse.settings import Settings


def update_global_windows(
    spark: SparkSession,
    settings: Settings,
    events: DataFrame,
    now: datetime,
    app_id: str,
    batch_id: int,
    event_count: int | None = None,
) -> int:
    """Fold ``events`` (event_id, user_id, event_time, amount; ``event_count`` of them, when known) into
    each user's global window; returns the number of count-trigger firings. Exactly once per (app_id,
    batch_id)."""
    table = global_table(settings)
    if already_written(settings, table, app_id, batch_id):
        return 0
    every = settings.windows.global_trigger_count
    stored = read_where(spark, settings, table).select(
        "user_id",
        F.col("event_count").alias("old_count"),
        F.col("total_amount").alias("old_amount"),
        F.col("firings").alias("old_firings"),
        F.col("fired_event_count").alias("old_fired_count"),
        F.col("fired_total_amount").alias("old_fired_amount"),
        F.col("fired_at").alias("old_fired_at"),
    )
    users = events.select("user_id").distinct()
    before = users.join(stored, "user_id", "left").select(
        "user_id",
        F.coalesce("old_count", F.lit(0).cast("long")).alias("c0"),
        F.coalesce("old_amount", F.lit(0).cast(MONEY)).alias("a0"),
        "old_firings",
        "old_fired_count",
        "old_fired_amount",
        "old_fired_at",
    )
    ordered = Window.partitionBy("user_id").orderBy("event_time", "event_id")
    running = (
        events.select("user_id", "event_id", "event_time", "amount")
        .join(before.select("user_id", "c0", "a0"), "user_id")
        .select(
            "user_id",
            (F.col("c0") + F.row_number().over(ordered)).alias("count_at"),
            (F.col("a0") + F.sum("amount").over(ordered.rowsBetween(Window.unboundedPreceding, 0)))
            .cast(MONEY)
            .alias("amount_at"),
        )
    )
    fires = F.col("count_at") % F.lit(every) == 0
    totals = running.groupBy("user_id").agg(
        F.max("count_at").alias("event_count"),
        F.max_by("amount_at", "count_at").alias("total_amount"),
        F.max(F.when(fires, F.col("count_at"))).alias("fired_count"),
        F.max_by(F.when(fires, F.col("amount_at")), F.when(fires, F.col("count_at"))).alias("fired_amount"),
        F.count_if(fires).alias("new_firings"),
    )
    rows = totals.join(before, "user_id").select(
        "user_id",
        "event_count",
        "total_amount",
        (F.coalesce("old_firings", F.lit(0).cast("long")) + F.col("new_firings")).alias("firings"),
        F.coalesce("fired_count", "old_fired_count").alias("fired_event_count"),
        F.coalesce("fired_amount", "old_fired_amount").cast(MONEY).alias("fired_total_amount"),
        F.when(F.col("new_firings") > 0, F.lit(now).cast("timestamp"))
        .otherwise(F.col("old_fired_at"))
        .alias("fired_at"),
        F.lit(now).cast("timestamp").alias("updated_at"),
        "new_firings",
    )
    # One row per user of the events: when those are few, collected once for the count and the MERGE.
    with computed_once(rows, event_count) as (rows, collected):
        if collected is not None:
            fired = pc.sum(collected["new_firings"]).as_py()
        else:
            fired = rows.agg(F.sum("new_firings")).first()[0]
        if fired is None:
            return 0
        metadata = {"writer": app_id, "batch": batch_id}
        merge_changes_once(rows, table.path(settings), app_id, batch_id, _spec(settings), metadata, collected)
    return int(fired)


def _spec(settings: Settings) -> MergeSpec:
    columns = global_table(settings).column_names
    return MergeSpec(
        "t.user_id = s.user_id",
        update={c: f"s.{c}" for c in columns if c != "user_id"},
        insert={c: f"s.{c}" for c in columns},
    )
