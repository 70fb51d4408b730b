"""Triggers and accumulation: the stream of results the tumbling table emits, one row per firing.

``gold.user_spend_<n>m`` holds each window's latest value. Its firings table holds what a downstream
consumer receives each time a window fires, in the seeds' terms:

- Kinds, by event time: ``early`` while the watermark is before the window's end; ``on_time`` once, when
  the watermark passes the end (fired even if no event came in that batch); ``late`` for every change
  after that: events within the allowed lateness (the stream), or beyond it (reconciliation). Each is a
  new revision of the window's row. When the allowed lateness ends, a ``closed`` firing (values unchanged,
  ``is_final``) says no stream change will follow; with no lateness it is the on-time firing itself.
- Trigger (``LAKEHOUSE_FIRING_TRIGGER``): ``early`` fires at every micro-batch that changes an open window
  (partial results at the streams' processing-time cadence), ``watermark`` keeps only the on-time and late
  firings (one result when the watermark passes the end, then revisions).
- Accumulation (``LAKEHOUSE_ACCUMULATION``): ``accumulating`` emits the window's whole value;
  ``discarding`` only the change since the window's previous firing; ``retracting`` first retracts the
  previous firing's value (``is_retraction``), then emits the whole new value, so a reader that adds up
  everything it received (retractions subtracted) holds the current value.

The firings of a change are written with the same transaction id as the change's corrections.
"""

from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from warehouse.catalog import tumbling_table
from warehouse.delta import as_of
from warehouse.settings import Settings
from warehouse.shapes import Shape

#: The cause of an on-time firing of a window that did not change (the watermark passed its end).
WATERMARK_PASSED = "watermark_passed"


def passed_windows(
    spark: SparkSession,
    settings: Settings,
    changed: DataFrame,
    before: datetime | None,
    after: datetime | None,
    now: datetime,
    gold_batch: int | None,
    version: int | None = None,
    stored: DataFrame | None = None,
) -> DataFrame:
    """Stored windows (as of gold's ``version``; None: the newest; or ``stored``, rows of that version
    holding every window that ends after ``before``) whose end the watermark passed between ``before`` and
    ``after`` and that are not among the ``changed`` keys, as unchanged gold.corrections-shaped rows (their
    on-time firings)."""
    rows = stored if stored is not None else as_of(spark, settings, tumbling_table(settings), version)
    if after is None or after == before:
        return _as_unchanged(rows.limit(0), settings, now, gold_batch)
    rows = rows.where(F.col("window_end") <= F.lit(after))
    if before is not None:
        rows = rows.where(F.col("window_end") > F.lit(before))
    key = [*Shape.of(settings.spec).key_names, "window_start"]
    rows = rows.join(changed.select(*key), key, "left_anti")
    return _as_unchanged(rows, settings, now, gold_batch)


def _as_unchanged(rows: DataFrame, settings: Settings, now: datetime, gold_batch: int | None) -> DataFrame:
    shape = Shape.of(settings.spec)
    values = [F.col(name).alias(f"{side}_{name}") for name, _ in shape.visible for side in ("old", "new")]
    return rows.select(
        F.lit(tumbling_table(settings).name).alias("table_name"),
        *shape.key_names,
        "window_start",
        "window_end",
        *values,
        F.col("is_final").alias("old_is_final"),
        F.col("is_final").alias("new_is_final"),
        "revision",
        F.lit(WATERMARK_PASSED).alias("cause"),
        F.lit(now).cast("timestamp").alias("corrected_at"),
        F.lit(gold_batch).cast("long").alias("gold_batch"),
        F.lit(False).alias("changed"),
    )


def firing_rows(changes: DataFrame, settings: Settings, before: datetime | None, after: datetime | None) -> DataFrame:
    """The firings of tumbling-window changes made while the watermark moved from ``before`` to ``after``.

    ``changes`` are gold.corrections rows (first writes included, with revision 1), plus the unchanged
    windows whose end the watermark passed (``passed_windows``, ``changed`` false).
    """
    if "changed" not in changes.columns:
        changes = changes.withColumn("changed", F.lit(True))
    end = F.col("window_end")
    passed_before = end <= F.lit(before) if before is not None else F.lit(False)
    passed_after = end <= F.lit(after) if after is not None else F.lit(False)
    fired = changes.withColumns(
        {
            # A row revised by this change existed before it (revision 1 is the first write).
            "existed": (F.col("revision") > 1) | ~F.col("changed"),
            "firing": F.when(passed_before & (F.col("cause") == "window_closed"), "closed")
            .when(passed_before, "late")
            .when(passed_after, "on_time")
            .otherwise("early"),
        }
    )
    if settings.windows.firing_trigger == "watermark":
        fired = fired.where(F.col("firing") != "early")
        # Values left only once the watermark had passed the end (the on-time firing, then each late one).
        emitted_before = F.col("existed") & passed_before
    else:
        emitted_before = F.col("existed")
    shape = Shape.of(settings.spec)
    # What the window emitted last: nothing (a zero) when it had not fired yet.
    fired = fired.withColumns(
        {
            "emitted_before": emitted_before,
            **{
                f"last_{name}": F.when(emitted_before, F.col(f"old_{name}")).otherwise(F.lit(0).cast(kind))
                for name, kind in shape.visible
            },
        }
    )

    def rows(frame: DataFrame, values: dict[str, F.Column], retraction: bool) -> DataFrame:
        return frame.select(
            *shape.key_names,
            "window_start",
            "window_end",
            "firing",
            "revision",
            F.col("new_is_final").alias("is_final"),
            F.lit(retraction).alias("is_retraction"),
            F.lit(settings.windows.accumulation).alias("accumulation"),
            *(values[name].cast(kind).alias(name) for name, kind in shape.visible),
            "cause",
            F.col("corrected_at").alias("fired_at"),
            "gold_batch",
        )

    new = {name: F.col(f"new_{name}") for name, _ in shape.visible}
    last = {name: F.col(f"last_{name}") for name, _ in shape.visible}
    if settings.windows.accumulation == "discarding":
        return rows(fired, {name: new[name] - last[name] for name in new}, False)
    emitted = rows(fired, new, False)
    if settings.windows.accumulation == "retracting":
        return rows(fired.where("emitted_before"), last, True).unionByName(emitted)
    return emitted
