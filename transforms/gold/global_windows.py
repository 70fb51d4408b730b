"""Global windows with a count trigger: per key, one window over all of time, firing every N events.

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
from pyspark.sql.window import WindowSpec

from transforms.gold.measures import coalesced_parts, one_event_parts, value_names, with_values
from warehouse.catalog import global_table
from warehouse.delta import MergeSpec, already_written, computed_once, merge_changes_once
from warehouse.reads import read_where
from warehouse.settings import Settings
from warehouse.shapes import Part, Shape


def update_global_windows(
    spark: SparkSession,
    settings: Settings,
    events: DataFrame,
    now: datetime,
    app_id: str,
    batch_id: int,
    event_count: int | None = None,
) -> int:
    """Fold ``events`` (event_id, keys, event_time, measured fields; ``event_count`` of them, when known) into
    each key's global window; returns the number of count-trigger firings. Exactly once per (app_id,
    batch_id)."""
    table = global_table(settings)
    if already_written(settings, table, app_id, batch_id):
        return 0
    every = settings.windows.global_trigger_count
    shape = Shape.of(settings.spec)
    keys = shape.key_names
    measures = [m.name for m in shape.measures]
    values = [name for name in value_names(shape) if name != "event_count"]
    stored = read_where(spark, settings, table).select(
        *keys,
        *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
        F.col("firings").alias("old_firings"),
        F.col("fired_event_count").alias("old_fired_event_count"),
        *(F.col(f"fired_{name}").alias(f"old_fired_{name}") for name in measures),
        F.col("fired_at").alias("old_fired_at"),
    )
    before = events.select(*keys).distinct().join(stored, keys, "left")
    before = before.select(
        *keys,
        *coalesced_parts(shape, "old_", "base_"),
        "old_firings",
        "old_fired_event_count",
        *(f"old_fired_{name}" for name in measures),
        "old_fired_at",
    )
    ordered = Window.partitionBy(*keys).orderBy("event_time", "event_id")
    so_far = ordered.rowsBetween(Window.unboundedPreceding, 0)
    each = events.select(*keys, "event_id", "event_time", *one_event_parts(shape, "one_"))
    running = each.join(before.select(*keys, *(f"base_{p.column}" for p in shape.parts)), keys).select(
        *keys, *(_running(p, so_far).alias(f"at_{p.column}") for p in shape.parts)
    )
    running = running.select(*keys, *with_values(shape, "at_"))
    count_at = F.col("at_event_count")
    fires = count_at % F.lit(every) == 0
    totals = running.groupBy(*keys).agg(
        F.max(count_at).alias("event_count"),
        *(F.max_by(f"at_{name}", count_at).alias(name) for name in values),
        F.max(F.when(fires, count_at)).alias("fired_count"),
        *(
            F.max_by(F.when(fires, F.col(f"at_{name}")), F.when(fires, count_at)).alias(f"fired_{name}")
            for name in measures
        ),
        F.count_if(fires).alias("new_firings"),
    )
    types = dict(shape.value_columns)
    rows = totals.join(before, keys).select(
        *keys,
        "event_count",
        *values,
        (F.coalesce("old_firings", F.lit(0).cast("long")) + F.col("new_firings")).alias("firings"),
        F.coalesce("fired_count", "old_fired_event_count").alias("fired_event_count"),
        *(
            F.when(F.col("new_firings") > 0, F.col(f"fired_{name}"))
            .otherwise(F.col(f"old_fired_{name}"))
            .cast(types[name])
            .alias(f"fired_{name}")
            for name in measures
        ),
        F.when(F.col("new_firings") > 0, F.lit(now).cast("timestamp"))
        .otherwise(F.col("old_fired_at"))
        .alias("fired_at"),
        F.lit(now).cast("timestamp").alias("updated_at"),
        "new_firings",
    )
    # One row per key of the events: when those are few, collected once for the count and the MERGE.
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


def _running(part: Part, so_far: WindowSpec) -> F.Column:
    """A part's value at each event: the stored one combined with the events up to it (in order)."""
    base, one = F.col(f"base_{part.column}"), F.col(f"one_{part.column}")
    if part.adds:
        return (base + F.sum(one).over(so_far)).cast(part.type)
    combine, running = (F.least, F.min) if part.fn == "min" else (F.greatest, F.max)
    return combine(base, running(one).over(so_far)).cast(part.type)


def _spec(settings: Settings) -> MergeSpec:
    table = global_table(settings)
    keys = list(table.key)
    return MergeSpec(
        " AND ".join(f"t.{k} = s.{k}" for k in keys),
        update={c: f"s.{c}" for c in table.column_names if c not in keys},
        insert={c: f"s.{c}" for c in table.column_names},
    )
