"""The derived windows (hopping, sessions, global) follow the tumbling table on a stream of their own.

The window stream records one ``ops.watermarks`` row per batch (and per idle advance): where it left the
watermark and which silver batches' events it folded. That table is this stream's source, so the
tumbling table's batch never waits for the derived outputs:

``ops.watermarks (window batches) → silver events of those batches → hopping roll-up, sessions, global``

Time semantics: a batch takes the watermark rows it read; ``after`` is the furthest of their watermarks
and ``before`` the furthest of the rows recorded before them (what the previous batches of this stream
applied), so sessions and hopping windows close exactly as the tumbling table's windows did, one step
behind. The events are read back from silver by their ``silver_batch`` (each silver batch is folded by
exactly one window batch). Hopping windows roll up the tumbling panes as the table holds them when the
batch runs (never older than the rows read: the window stream commits gold before its watermark row).
Each table is written exactly once per batch under ``<writer>:<output>``; reconcile and replay change the
derived tables themselves (``transforms.gold.propagate``).
"""

from datetime import UTC, datetime

import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType, TimestampType

from transforms.gold.propagate import GoldChange, propagate
from transforms.gold.tumbling import assign_windows
from transforms.gold.watermarks import utc
from transforms.latency import arrival_figures, arrival_quantiles
from transforms.silver import canonical
from warehouse.catalog import OPS_WATERMARKS, events_table
from warehouse.delta import materialized
from warehouse.reads import arrow_where, read_where
from warehouse.settings import Settings
from warehouse.shapes import Shape

#: Per derived writer, the last batch this process applied and the furthest watermark it had applied by
#: then: the next batch's ``before`` without reading all of ops.watermarks again.
APPLIED: dict[str, tuple[int, datetime | None]] = {}


def derived_outputs(settings: Settings) -> tuple[str, ...]:
    """The derived window outputs this home keeps (``LAKEHOUSE_GOLD_OUTPUTS``)."""
    return tuple(name for name in ("hopping", "sessions", "global") if settings.keeps(name))


def derive_windows(
    marks: DataFrame, batch_id: int, settings: Settings, writer_id: str, windows_query: str
) -> dict[str, float]:
    """Bring hopping windows, sessions and global windows in line with the window batches (and idle
    advances) recorded in ``marks``, a micro-batch of new ``ops.watermarks`` rows; exactly once per batch."""
    spark = marks.sparkSession
    rows = (
        marks.where(F.col("query_name") == windows_query)
        .select("batch_id", "watermark", "recorded_at", "silver_batch_from", "silver_batch_to")
        .collect()
    )
    if not rows:
        return {"rows_in": 0, "rows_written": 0}
    first_recorded = min(row.recorded_at for row in rows)
    after = max((utc(row.watermark) for row in rows if row.watermark is not None), default=None)
    if writer_id in APPLIED and APPLIED[writer_id][0] == batch_id - 1:
        before = APPLIED[writer_id][1]
    else:
        before = _applied_before(settings, windows_query, first_recorded)
    ranges = [(row.silver_batch_from, row.silver_batch_to) for row in rows if row.silver_batch_from is not None]
    events = _events_of(spark, settings, ranges)
    keys = Shape.of(settings.spec).key_names
    with materialized(events) as events:
        rows_in, quantiles, earliest = events.agg(F.count("*"), *arrival_quantiles()).first()
        change = GoldChange(
            before, after, datetime.now(UTC), writer_id, batch_id,
            "stream_update" if rows_in else "window_closed",
            gold_batch=max(row.batch_id for row in rows),
            panes=events.select(*keys, "window_start").distinct() if rows_in else _no_panes(spark, settings),
            closes_from=before, events=events if rows_in else None, event_count=rows_in,
        )  # fmt: skip
        derived = propagate(spark, settings, change)
    APPLIED[writer_id] = (batch_id, max((mark for mark in (before, after) if mark is not None), default=None))
    return {
        "rows_in": rows_in,
        "rows_written": derived.hopping + derived.sessions + derived.global_firings,
        "window_batches": len(rows),
        "hopping_windows_changed": derived.hopping,
        "sessions_changed": derived.sessions,
        "global_firings": derived.global_firings,
        **arrival_figures(quantiles, earliest),
        "watermark": after.timestamp() if after else 0.0,
    }


def _applied_before(settings: Settings, windows_query: str, first: datetime) -> datetime | None:
    """The furthest watermark the window stream recorded before ``first``: where this stream's earlier
    batches left the derived windows (rows are recorded in order by the one window writer)."""
    # By delta-rs: on a process's first batch a Spark read of this table is a cold job of about a second.
    conditions = [("query_name", "==", windows_query), ("recorded_at", "<", first)]
    earlier = arrow_where(settings, OPS_WATERMARKS, conditions, columns=["watermark"])  # no limit: never None
    return utc(pc.max(earlier.column("watermark")).as_py())


def _event_columns(settings: Settings) -> list[str]:
    """What this stream takes from silver for a batch of window batches (the spec's names)."""
    spec = settings.spec
    shape = Shape.of(spec)
    return list(dict.fromkeys([spec.id, *shape.key_names, spec.time.field, *shape.source_fields, "arrived_at"]))


def _events_of(spark: SparkSession, settings: Settings, ranges: list[tuple[int, int]]) -> DataFrame:
    """The silver events of the given silver batch ranges, with their tumbling window."""
    table, columns = events_table(settings), _event_columns(settings)
    if not ranges:
        empty = spark.createDataFrame([], table.schema).select(*columns)
        return assign_windows(canonical(empty, settings.spec), settings)
    low, high = min(lo for lo, _ in ranges), max(hi for _, hi in ranges)
    inside = F.lit(False)
    for lo, hi in ranges:
        inside = inside | F.col("silver_batch").between(lo, hi)
    # The overall bounds let Delta skip every file of other silver batches by its statistics.
    bounds = [("silver_batch", ">=", low), ("silver_batch", "<=", high)]
    silver = read_where(spark, settings, table, bounds, columns=("silver_batch", *columns))
    return assign_windows(canonical(silver.where(inside).select(*columns), settings.spec), settings)


def _no_panes(spark: SparkSession, settings: Settings) -> DataFrame:
    shape = Shape.of(settings.spec)
    fields = [StructField(name, kind) for name, kind in shape.keys] + [StructField("window_start", TimestampType())]
    return spark.createDataFrame([], StructType(fields))
