"""Session windows: per key, events at most the gap apart in event time form one session.

A session runs ``[first event, last event + gap)``. An event at most one gap after the session's last
event or before its first joins it (Spark's ``session_window`` rule: two events exactly one gap apart
share a session); an event within the gap of two sessions bridges them, and they merge: the later row
is deleted, with a ``session_merged`` correction that retracts its values, and the surviving row is
revised.

Time semantics: event time. Every silver event is folded in exactly once, by the window stream's batch
that reads it, however late it is: the allowed lateness decides only when a session is final (the
watermark has passed ``session_end + lateness``), and a change to a final session is a late firing
(revision + 1, ``late_data``), and a session a late event extends past the watermark is open again
(``is_final`` back to false) until the watermark passes its new end. So the table always equals
sessionizing all of silver at once, finality included.

Each batch works on intervals, not on silver: its events (``[t, t + gap)`` each) and the stored
sessions they can touch are merged as overlapping intervals, so a batch reads only the sessions of its
users around its event times (plus the open ones the watermark closes).
"""

from datetime import datetime, timedelta

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from transforms.gold.corrections import correction_rows
from transforms.gold.measures import (
    coalesced,
    merge_values,
    one_event_parts,
    rolled_up_parts,
    typed_zeros,
    value_names,
    visible_differ,
    with_values,
)
from warehouse.catalog import corrections_log, sessions_table
from warehouse.delta import MergeSpec, already_written, append_once, materialized, merge_changes_once
from warehouse.reads import Condition, read_where
from warehouse.settings import Settings
from warehouse.shapes import Shape


def _micros(seconds: float) -> F.Column:
    return F.expr(f"INTERVAL {int(seconds * 1_000_000)} MICROSECONDS")


def closing_sessions(
    spark: SparkSession, settings: Settings, watermark: datetime, open_after: datetime | None = None
) -> DataFrame:
    """Stored sessions not final yet that ``watermark`` closes; ``open_after`` (an earlier watermark)
    bounds the search: every session it closed is final already."""
    lateness = settings.windows.allowed_lateness
    conditions: list[Condition] = [("is_final", "==", False), ("session_end", "<=", watermark - lateness)]
    if open_after is not None:
        conditions.append(("session_end", ">", open_after - lateness))
    return read_where(spark, settings, sessions_table(settings), conditions)


def update_sessions(
    spark: SparkSession,
    settings: Settings,
    events: DataFrame,
    before: datetime | None,
    after: datetime | None,
    now: datetime,
    app_id: str,
    batch_id: int,
    gold_batch: int | None = None,
) -> int:
    """Fold ``events`` (keys, event_time, measured fields) into the sessions table and finalize the sessions
    the watermark's move from ``before`` to ``after`` closes; log every change of a stored row in
    gold.corrections. Exactly once per (app_id, batch_id); returns the number of session rows changed."""
    table = sessions_table(settings)
    if already_written(settings, table, app_id, batch_id):
        return 0
    shape = Shape.of(settings.spec)
    keys = shape.key_names
    gap = _micros(settings.windows.session_gap_minutes * 60)
    bounds = events.groupBy(*keys).agg(F.min("event_time").alias("lo"), F.max("event_time").alias("hi"))
    with materialized(bounds) as bounds:
        lo, hi = bounds.agg(F.min("lo"), F.max("hi")).first()
        closes = after is not None and after != before
        if lo is None and not closes:
            return 0
        candidates = []
        if lo is not None:
            # The global bounds let Delta skip files; the per-user ones pick the sessions an event can join.
            near = read_where(
                spark, settings, table, [("session_end", ">=", lo), ("session_start", "<=", hi + session_gap(settings))]
            )
            candidates.append(
                near.join(F.broadcast(bounds), keys)
                .where((F.col("session_end") >= F.col("lo")) & (F.col("session_start") <= F.col("hi") + gap))
                .drop("lo", "hi")
            )
        if closes:
            candidates.append(closing_sessions(spark, settings, after, before))
        existing = candidates[0]
        for more in candidates[1:]:
            existing = existing.unionByName(more)
        changes = _changes(existing.distinct(), events, settings, after, now, gold_batch)
        with materialized(changes) as changes:
            changed = changes.count()
            if not changed:
                return 0

            logged = changes.where(F.col("old_revision").isNotNull()).withColumnsRenamed(
                {"session_start": "window_start", "session_end": "window_end"}
            )
            append_once(correction_rows(logged, table, shape), settings, corrections_log(settings), app_id, batch_id)
            merge_changes_once(
                changes, table.path(settings), app_id, batch_id, _spec(shape), {"writer": app_id, "batch": batch_id}
            )
    return changed


def _changes(
    existing: DataFrame,
    events: DataFrame,
    settings: Settings,
    after: datetime | None,
    now: datetime,
    gold_batch: int | None,
) -> DataFrame:
    """One row per session row to write: upserts (new values, old ones when the key existed) and
    deletions (``new_event_count = 0``) of sessions merged into an earlier one."""
    shape = Shape.of(settings.spec)
    keys = shape.key_names
    key = [*keys, "session_start"]
    gap = _micros(settings.windows.session_gap_minutes * 60)
    lateness = _micros(settings.windows.allowed_lateness_seconds)
    intervals = events.select(
        *keys,
        F.col("event_time").alias("start"),
        (F.col("event_time") + gap).alias("end"),
        F.col("event_time").alias("last"),
        *one_event_parts(shape, "p_"),
        F.lit(None).cast("timestamp").alias("old_start"),
    ).unionByName(
        existing.select(
            *keys,
            F.col("session_start").alias("start"),
            F.col("session_end").alias("end"),
            F.col("last_event_time").alias("last"),
            *(F.col(p.column).alias(f"p_{p.column}") for p in shape.parts),
            F.col("session_start").alias("old_start"),
        )
    )
    # Gaps and islands: an interval starts a new session when it begins after every earlier end.
    ordered = Window.partitionBy(*keys).orderBy("start", "end")
    reach = F.max("end").over(ordered.rowsBetween(Window.unboundedPreceding, -1))
    opens = F.when(reach.isNull() | (F.col("start") > reach), 1).otherwise(0)
    labelled = intervals.withColumn("session", F.sum(opens).over(ordered.rowsBetween(Window.unboundedPreceding, 0)))
    merged = (
        labelled.groupBy(*keys, "session")
        .agg(
            F.min("start").alias("session_start"),
            F.max("end").alias("session_end"),
            F.max("last").alias("last_event_time"),
            *rolled_up_parts(shape, "p_", "p_"),
        )
        .select(*keys, "session", "session_start", "session_end", "last_event_time", *with_values(shape, "p_", "new_"))
    )
    stored = existing.select(
        *keys,
        F.col("session_start").alias("old_start"),
        F.col("session_end").alias("old_end"),
        *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
    )
    # Which merged session each stored one went into.
    olds = (
        labelled.where(F.col("old_start").isNotNull())
        .select(*keys, "session", "old_start")
        .join(stored, [*keys, "old_start"])
    )
    final = (F.col("session_end") + lateness <= F.lit(after)) if after is not None else F.lit(False)
    upserts = merged.join(olds.drop("session").withColumnRenamed("old_start", "session_start"), key, "left").withColumn(
        "new_is_final", final
    )
    values_differ = (
        F.col("old_revision").isNull()
        | (F.col("old_end") != F.col("session_end"))
        | visible_differ(shape, "old_", "new_")
    )
    upserts = upserts.where(values_differ | (F.col("old_is_final") != F.col("new_is_final"))).select(
        *key,
        "session_end",
        "last_event_time",
        *coalesced(shape, "old_"),
        *(f"new_{name}" for name in value_names(shape)),
        F.coalesce("old_is_final", F.lit(False)).alias("old_is_final"),
        "new_is_final",
        "old_revision",
        F.when(F.col("old_revision").isNotNull() & ~values_differ, "window_closed")
        .when(F.coalesce("old_is_final", F.lit(False)), "late_data")
        .otherwise("stream_update")
        .alias("cause"),
    )
    survivors = merged.select(*keys, "session", F.col("session_start").alias("into"), "session_end")
    retracted = olds.join(survivors, [*keys, "session"]).where(F.col("old_start") != F.col("into"))
    deletions = retracted.select(
        *keys,
        F.col("old_start").alias("session_start"),
        F.col("old_end").alias("session_end"),
        F.lit(None).cast("timestamp").alias("last_event_time"),
        *(f"old_{name}" for name in value_names(shape)),
        *typed_zeros(shape, "new_"),
        "old_is_final",
        F.col("old_is_final").alias("new_is_final"),
        "old_revision",
        F.lit("session_merged").alias("cause"),
    )
    return upserts.unionByName(deletions).select(
        "*",
        (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
        F.lit(now).cast("timestamp").alias("updated_at"),
        F.lit(gold_batch).cast("long").alias("gold_batch"),
    )


def _spec(shape: Shape) -> MergeSpec:
    """Values, not increments: they were computed from the stored sessions under the gold lock."""
    keys = [*shape.key_names, "session_start"]
    common = {
        "session_end": "s.session_end",
        "last_event_time": "s.last_event_time",
        **merge_values(shape, "new_"),
        "revision": "s.revision",
        "is_final": "s.new_is_final",
        "updated_at": "s.updated_at",
    }
    return MergeSpec(
        " AND ".join(f"t.{k} = s.{k}" for k in keys),
        delete_when="s.new_event_count = 0",
        update=common,
        insert_when="s.new_event_count > 0",
        insert={**{k: f"s.{k}" for k in keys}, **common},
    )


def session_gap(settings: Settings) -> timedelta:
    return timedelta(minutes=settings.windows.session_gap_minutes)
