"""Event-time progress of the windows stream: the watermark, its policies, and where it is recorded.

Watermark = the largest event time seen - a delay, never moving back. The delay is fixed
(``LAKEHOUSE_WATERMARK_DELAY_SECONDS``) or adaptive (a percentile of the lag observed over a horizon of
event time); an idle policy moves it on with processing time when no event arrives. Each batch (and each
idle advance) records where it left the watermark as a row of ``ops.watermarks``: the next batch, a
re-run after a crash, reconciliation and replay read it from there.
"""

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from warehouse.catalog import OPS_WATERMARKS
from warehouse.delta import read_table
from warehouse.settings import Settings


@dataclass(frozen=True)
class Watermark:
    """Event-time progress of a windowing stream: the largest event time seen and the watermark.

    ``observed`` keeps, for the adaptive policy, (batch max event time, observed lag seconds) of the
    recent batches within the horizon, oldest first.
    """

    max_event_time: datetime | None = None
    watermark: datetime | None = None
    observed: tuple[tuple[datetime, float], ...] = ()

    def advance(self, batch_max: datetime | None, delay: timedelta) -> "Watermark":
        """Watermarks never move back: a batch of old events leaves it where it was."""
        if batch_max is None:
            return self
        new_max = batch_max if self.max_event_time is None else max(self.max_event_time, batch_max)
        candidate = new_max - delay
        new_mark = candidate if self.watermark is None else max(self.watermark, candidate)
        return Watermark(new_max, new_mark, self.observed)

    def observe(self, batch_max: datetime, lag_seconds: float, horizon: timedelta) -> "Watermark":
        """Add a batch's observed lag; forget batches more than ``horizon`` of event time behind."""
        newest = max([batch_max, *(at for at, _ in self.observed)])
        kept = tuple((at, lag) for at, lag in (*self.observed, (batch_max, lag_seconds)) if at >= newest - horizon)
        return replace(self, observed=kept)


def watermark_delay(settings: Settings, mark: Watermark) -> timedelta:
    """The delay behind the max event time: fixed, or (adaptive) the largest per-batch percentile of
    observed lag within the horizon, clamped to the policy's bounds. The largest per-batch figure bounds
    the horizon's percentile from above, so the adaptive watermark errs towards waiting."""
    policy = settings.watermarks
    if policy.policy != "adaptive" or not mark.observed:
        return settings.watermarks.delay
    lag = max(lag for _, lag in mark.observed)
    return timedelta(seconds=min(max(lag, policy.min_delay_seconds), policy.max_delay_seconds))


def idle_watermark(settings: Settings, left_by_events: datetime, input_at: datetime, now: datetime) -> datetime:
    """Where the idle policy puts the watermark at processing time ``now``: where the last batch of events
    (processed at ``input_at``) left it, plus the processing time since then beyond the idle time, at
    most the policy's maximum advance."""
    policy = settings.watermarks
    idle_for = (now - input_at).total_seconds() - policy.idle_seconds
    return left_by_events + timedelta(seconds=min(max(idle_for, 0.0), policy.idle_max_advance_seconds))


#: (writer, batch id) → the watermark that batch recorded; lets the next batch of a running stream skip
#: reading ops.watermarks. Only the newest batch per writer is kept.
RECORDED: dict[str, tuple[int, Watermark]] = {}


def is_event_row() -> F.Column:
    return F.col("advanced_by").isNull() | (F.col("advanced_by") == "events")


def watermark_before(
    spark: SparkSession, settings: Settings, query_name: str, batch_id: int, writer_id: str | None = None
) -> Watermark:
    """The watermark recorded by the last batch (or idle advance after it) before ``batch_id``; a re-run
    batch sees the same value (an idle advance never runs while a batch is left uncommitted).

    A new writer (the query's checkpoint was reset, e.g. by a replay) has no batches of its own yet and
    inherits the furthest watermark its predecessors recorded: event time never goes back.
    """
    if writer_id and writer_id in RECORDED and RECORDED[writer_id][0] == batch_id - 1:
        return RECORDED[writer_id][1]
    marks = read_table(spark, settings, OPS_WATERMARKS).where(F.col("query_name") == query_name)
    own = F.col("writer_id").eqNullSafe(F.lit(writer_id)) if writer_id else F.lit(True)
    earlier = marks.where(own & (F.col("batch_id") < batch_id))
    row = earlier.orderBy(F.col("batch_id").desc(), F.col("watermark").desc()).first()
    if row is None and writer_id:
        earlier = marks.where(~own)
        row = earlier.agg(
            F.max("max_event_time").alias("max_event_time"), F.max("watermark").alias("watermark")
        ).first()
    if row is None:
        return Watermark()
    mark = Watermark(utc(row["max_event_time"]), utc(row["watermark"]))
    if settings.watermarks.policy == "adaptive" and mark.max_event_time is not None:
        horizon = mark.max_event_time - timedelta(seconds=settings.watermarks.horizon_seconds)
        seen = (
            earlier.where(is_event_row() & F.col("observed_lag_seconds").isNotNull())
            .where(F.col("max_event_time") >= F.lit(horizon))
            .orderBy("batch_id")
            .select("max_event_time", "observed_lag_seconds")
            .collect()
        )
        mark = replace(mark, observed=tuple((utc(r[0]), float(r[1])) for r in seen))
    return mark


def latest_watermark(spark: SparkSession, settings: Settings, query_name: str) -> datetime | None:
    """The furthest watermark any batch of the query has recorded (what closes windows now)."""
    row = (
        read_table(spark, settings, OPS_WATERMARKS)
        .where(F.col("query_name") == query_name)
        .agg(F.max("watermark").alias("watermark"))
        .first()
    )
    return utc(row["watermark"]) if row else None


def utc(value: datetime | None) -> datetime | None:
    # PySpark hands timestamps back as naive local datetimes; the session and the process run in UTC.
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def observed_lag(settings: Settings, before: Watermark) -> F.Column:
    """The batch's percentile of event-time lag: how far (seconds) each event trails the max event time
    seen before the batch (0 when ahead of it). None under the fixed policy or before any batch."""
    if settings.watermarks.policy != "adaptive" or before.max_event_time is None:
        return F.lit(None).cast("double")
    behind = (F.unix_micros(F.lit(before.max_event_time).cast("timestamp")) - F.unix_micros("event_time")) / 1e6
    return F.percentile_approx(F.greatest(behind, F.lit(0.0)), settings.watermarks.percentile, 10_000).cast("double")


def mark_row(
    query_name: str,
    writer_id: str,
    batch_id: int,
    mark: Watermark,
    now: datetime,
    advanced_by: str,
    delay: timedelta | None,
    lag: float | None,
    events: int,
    silver_batches: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """The ops.watermarks row of one batch or idle advance; ``silver_batches``: the first and last silver
    batch whose events it folded (what the derived windows stream reads back)."""
    behind = (now - mark.watermark).total_seconds() if mark.watermark else None
    row = (
        query_name,
        writer_id,
        batch_id,
        mark.max_event_time,
        mark.watermark,
        now,
        advanced_by,
        delay.total_seconds() if delay is not None else None,
        lag,
        behind,
        events,
        *silver_batches,
    )
    return dict(zip(OPS_WATERMARKS.column_names, row, strict=True))
