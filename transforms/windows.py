"""Gold: per-user tumbling event-time windows, revised as events arrive, closed by the watermark.

One micro-batch of new silver events goes through the seeds' steps:
``assign_windows`` → ``split_late`` (against the watermark as it stood before the batch) →
``advance_watermark`` → ``revise_windows`` (MERGE the batch's sums into gold, finalize closed windows,
log every change of an existing row in ``gold.corrections``).
"""

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.firings import firing_rows, passed_windows
from transforms.global_windows import update_global_windows
from transforms.hopping import closing_windows, roll_up
from transforms.sessions import closing_sessions, update_sessions
from warehouse.catalog import (
    GOLD_CORRECTIONS,
    MONEY,
    OPS_WATERMARKS,
    SILVER_LATE_EVENTS,
    Table,
    firings_table,
    user_spend_table,
)
from warehouse.delta import already_written, append_all_once, materialized, merge_once, read_table
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
        return settings.watermark_delay
    lag = max(lag for _, lag in mark.observed)
    return timedelta(seconds=min(max(lag, policy.min_delay_seconds), policy.max_delay_seconds))


#: (writer, batch id) → the watermark that batch recorded; lets the next batch of a running stream skip
#: reading ops.watermarks. Only the newest batch per writer is kept.
_RECORDED: dict[str, tuple[int, Watermark]] = {}


def _is_event_row() -> F.Column:
    return F.col("advanced_by").isNull() | (F.col("advanced_by") == "events")


def watermark_before(
    spark: SparkSession, settings: Settings, query_name: str, batch_id: int, writer_id: str | None = None
) -> Watermark:
    """The watermark recorded by the last batch (or idle advance after it) before ``batch_id``; a re-run
    batch sees the same value (an idle advance never runs while a batch is left uncommitted).

    A new writer (the query's checkpoint was reset, e.g. by a replay) has no batches of its own yet and
    inherits the furthest watermark its predecessors recorded: event time never goes back.
    """
    if writer_id and writer_id in _RECORDED and _RECORDED[writer_id][0] == batch_id - 1:
        return _RECORDED[writer_id][1]
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
    mark = Watermark(_utc(row["max_event_time"]), _utc(row["watermark"]))
    if settings.watermarks.policy == "adaptive" and mark.max_event_time is not None:
        horizon = mark.max_event_time - timedelta(seconds=settings.watermarks.horizon_seconds)
        seen = (
            earlier.where(_is_event_row() & F.col("observed_lag_seconds").isNotNull())
            .where(F.col("max_event_time") >= F.lit(horizon))
            .orderBy("batch_id")
            .select("max_event_time", "observed_lag_seconds")
            .collect()
        )
        mark = replace(mark, observed=tuple((_utc(r[0]), float(r[1])) for r in seen))
    return mark


def latest_watermark(spark: SparkSession, settings: Settings, query_name: str) -> datetime | None:
    """The furthest watermark any batch of the query has recorded (what closes windows now)."""
    row = (
        read_table(spark, settings, OPS_WATERMARKS)
        .where(F.col("query_name") == query_name)
        .agg(F.max("watermark").alias("watermark"))
        .first()
    )
    return _utc(row["watermark"]) if row else None


def _utc(value: datetime | None) -> datetime | None:
    # PySpark hands timestamps back as naive local datetimes; the session and the process run in UTC.
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: The key, in a gold commit's userMetadata, of the silver version the gold table reflects.
SILVER_VERSION_KEY = "silver_version"


def consumption_metadata(writer_id: str, batch_id: int, silver_version: int | None) -> dict[str, object]:
    """What a gold commit records about its input: every silver commit <= ``silver_version`` is in gold."""
    return {"writer": writer_id, "batch": batch_id, SILVER_VERSION_KEY: silver_version}


def assign_windows(events: DataFrame, settings: Settings) -> DataFrame:
    """Tumbling windows of ``settings.window`` aligned to the UTC epoch: ``[start, start + length)``."""
    window = F.window("event_time", f"{settings.window_minutes} minutes")
    return events.withColumns({"window_start": window.start, "window_end": window.end})


def closes_at(settings: Settings) -> F.Column:
    """A window is closed once the watermark reaches ``window_end + allowed lateness``."""
    return F.col("window_end") + F.expr(f"INTERVAL {settings.allowed_lateness_seconds} SECONDS")


def is_late(settings: Settings, mark: Watermark) -> F.Column:
    """An event is late when the watermark had closed its window before this batch."""
    if mark.watermark is None:
        return F.lit(False)
    return closes_at(settings) <= F.lit(mark.watermark)


def open_since(settings: Settings, mark: Watermark) -> datetime | None:
    """The earliest ``window_start`` a window still open under ``mark`` can have (None: every window).

    An open window ends after ``mark - allowed lateness``, so it starts after that minus one window
    length. Every window that closed has been finalised under the gold lock (by the stream or a
    reconcile), so a batch reads and merges only gold rows from here on: its cost follows the windows it
    touches, not the length of gold's history.
    """
    if mark.watermark is None:
        return None
    return mark.watermark - timedelta(seconds=settings.allowed_lateness_seconds, minutes=settings.window_minutes)


def split_late(windowed: DataFrame, settings: Settings, mark: Watermark) -> tuple[DataFrame, DataFrame]:
    """(on time, late): late events belong to a window that the watermark had closed before this batch."""
    late = is_late(settings, mark)
    return windowed.where(~late), windowed.where(late)


def update_windows(
    events: DataFrame,
    batch_id: int,
    settings: Settings,
    writer_id: str,
    query_name: str,
    silver_version: int | None = None,
) -> dict[str, float]:
    """Fold one micro-batch of new silver events into gold, exactly once per batch.

    ``silver_version`` is the newest silver.events commit that this batch and the earlier ones have
    read completely (None when unknown, e.g. the batch ends part-way through a commit). It is written
    into the gold MERGE's own commit, so gold always says which silver it reflects: reconciliation
    recomputes from silver as of that version and never races events the stream has not seen yet.
    """
    spark = events.sparkSession
    gold = user_spend_table(settings)
    before = watermark_before(spark, settings, query_name, batch_id, writer_id)
    windowed = assign_windows(events.select("event_id", "user_id", "event_time", "amount", "ingest_time"), settings)
    windowed.persist()
    try:
        on_time, late = split_late(windowed, settings, before)
        rows_in, batch_max, n_late, lag = windowed.agg(
            F.count("*"), F.max("event_time"), F.count_if(is_late(settings, before)), _observed_lag(settings, before)
        ).first()
        observed = before
        if lag is not None:
            horizon = timedelta(seconds=settings.watermarks.horizon_seconds)
            observed = before.observe(_utc(batch_max), float(lag), horizon)
        delay = watermark_delay(settings, observed)
        after = observed.advance(_utc(batch_max), delay)
        now = datetime.now(UTC)

        late_rows = late.select(
            "event_id",
            "user_id",
            "event_time",
            "amount",
            "window_start",
            "window_end",
            F.lit(before.watermark).cast("timestamp").alias("watermark"),
            ((F.unix_micros(F.lit(before.watermark).cast("timestamp")) - F.unix_micros("event_time")) / 1e6).alias(
                "lateness_seconds"
            ),
            "ingest_time",
            F.lit(batch_id).cast("long").alias("gold_batch"),
        )
        mark_row = _mark_row(spark, query_name, writer_id, batch_id, after, now, "events", delay, lag, rows_in)
        with materialized(_window_changes(spark, settings, gold, on_time, before, after, now, batch_id)) as changes:
            n_changed, n_revised = changes.agg(F.count("*"), F.count(F.col("old_revision"))).first()
            writes = [(mark_row, OPS_WATERMARKS)]
            if n_late:
                writes.append((late_rows, SILVER_LATE_EVENTS))
            if n_changed and not already_written(settings, gold, writer_id, batch_id):
                # Logged before the MERGE, and only while it has not committed: a re-run after it would read
                # the batch's own rows as old values (an empty log commits nothing, so it cannot be the marker).
                writes.append((_corrections(changes, gold), GOLD_CORRECTIONS))
                if settings.keeps("firings"):
                    passed = passed_windows(spark, settings, changes, before.watermark, after.watermark, now, batch_id)
                    fired = correction_rows(changes, gold).withColumn("changed", F.lit(True)).unionByName(passed)
                    writes.append(
                        (firing_rows(fired, settings, before.watermark, after.watermark), firings_table(settings))
                    )
            append_all_once(writes, settings, writer_id, batch_id)
            if n_changed:
                merge_once(
                    spark,
                    writer_id,
                    batch_id,
                    lambda: _merge_into_gold(spark, settings, gold, changes, open_since(settings, before)),
                    consumption_metadata(writer_id, batch_id, silver_version),
                    target=gold.path(settings),
                )
            panes = changes.select("user_id", "window_start")
            moved = bool(n_changed) or after.watermark != before.watermark
            # One after the other: run side by side, their joins' broadcasts could together exhaust a small
            # driver. Each writes its own table exactly once under its own transaction id.
            hops = global_fired = sessions = 0
            if settings.keeps("hopping") and moved:
                hops = roll_up(
                    spark, settings, panes, after.watermark, now, "stream_update", f"{writer_id}:hops", batch_id,
                    batch_id, before.watermark,
                )  # fmt: skip
            if settings.keeps("global"):
                global_fired = update_global_windows(spark, settings, windowed, now, f"{writer_id}:global", batch_id)
            if settings.keeps("sessions"):
                # Sessions take every event of the batch, late ones included (see transforms.sessions).
                sessions = update_sessions(
                    spark, settings, windowed, before.watermark, after.watermark, now, f"{writer_id}:sessions",
                    batch_id, batch_id,
                )  # fmt: skip
        _RECORDED[writer_id] = (batch_id, after)
    finally:
        windowed.unpersist()
    return {
        "rows_in": rows_in,
        "rows_written": n_changed,
        "late": n_late,
        "windows_revised": n_revised,
        "hopping_windows_changed": hops,
        "sessions_changed": sessions,
        "global_firings": global_fired,
        "watermark": after.watermark.timestamp() if after.watermark else 0.0,
        "watermark_delay_seconds": delay.total_seconds(),
        "watermark_lag_seconds": (now - after.watermark).total_seconds() if after.watermark else 0.0,
    }


def _observed_lag(settings: Settings, before: Watermark) -> F.Column:
    """The batch's percentile of event-time lag: how far (seconds) each event trails the max event time
    seen before the batch (0 when ahead of it). None under the fixed policy or before any batch."""
    if settings.watermarks.policy != "adaptive" or before.max_event_time is None:
        return F.lit(None).cast("double")
    behind = (F.unix_micros(F.lit(before.max_event_time).cast("timestamp")) - F.unix_micros("event_time")) / 1e6
    return F.percentile_approx(F.greatest(behind, F.lit(0.0)), settings.watermarks.percentile, 10_000).cast("double")


def _mark_row(
    spark: SparkSession,
    query_name: str,
    writer_id: str,
    batch_id: int,
    mark: Watermark,
    now: datetime,
    advanced_by: str,
    delay: timedelta | None,
    lag: float | None,
    events: int,
) -> DataFrame:
    """The ops.watermarks row of one batch or idle advance."""
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
    )
    return spark.createDataFrame([row], OPS_WATERMARKS.schema)


def idle_watermark(settings: Settings, left_by_events: datetime, input_at: datetime, now: datetime) -> datetime:
    """Where the idle policy puts the watermark at processing time ``now``: where the last batch of events
    (processed at ``input_at``) left it, plus the processing time since then beyond the idle time, at
    most the policy's maximum advance."""
    policy = settings.watermarks
    idle_for = (now - input_at).total_seconds() - policy.idle_seconds
    return left_by_events + timedelta(seconds=min(max(idle_for, 0.0), policy.idle_max_advance_seconds))


def advance_idle(
    spark: SparkSession, settings: Settings, query_name: str, writer_id: str, batch_id: int, now: datetime
) -> dict[str, float] | None:
    """Idle-advancing watermark: when no events have reached the stream for the idle time, move its
    watermark on with processing time to finalize the windows that closes (``window_closed``
    corrections, revision + 1), as a batch of no events would. The watermark is recorded (and moves
    for the next batch) only when it closes a window; None when it closes none.

    Recorded as an ``idle`` row of ops.watermarks after batch ``batch_id`` (the writer's last committed
    batch), so the next batch starts from it. Exactly once per watermark: the row, the corrections and
    the gold MERGE carry the transaction id ``(<writer>:idle, watermark in µs)``; after a crash in
    between, the next call finishes the recorded watermark's windows before it moves further.
    """
    if settings.watermarks.idle_seconds <= 0:
        return None
    marks = read_table(spark, settings, OPS_WATERMARKS).where(F.col("query_name") == query_name)
    last = marks.where(_is_event_row()).orderBy(F.col("recorded_at").desc()).first()
    if last is None or last["watermark"] is None:
        return None
    current = _utc(marks.agg(F.max("watermark")).first()[0])
    left = Watermark(_utc(last["max_event_time"]), _utc(last["watermark"]))
    prior = watermark_before(spark, settings, query_name, batch_id + 1, writer_id)
    gold = user_spend_table(settings)
    app_id = f"{writer_id}:idle"
    # A recorded idle watermark whose windows are still open (a crash before its MERGE) is finished first.
    candidates = [current] if current > left.watermark else []
    candidates.append(max(current, idle_watermark(settings, left.watermark, _utc(last["recorded_at"]), now)))
    empty = spark.createDataFrame(
        [], "user_id string, window_start timestamp, window_end timestamp, event_time timestamp, amount decimal(18,2)"
    )
    keeps_hops, keeps_sessions = settings.keeps("hopping"), settings.keeps("sessions")
    for target in candidates:
        after = replace(prior, watermark=target)
        version = int(target.timestamp() * 1_000_000)
        with materialized(_window_changes(spark, settings, gold, empty, left, after, now, None)) as changes:
            closed = 0 if already_written(settings, gold, app_id, version) else changes.count()
            hops = closing_windows(spark, settings, target, left.watermark).count() if keeps_hops else 0
            sessions = closing_sessions(spark, settings, target, left.watermark).count() if keeps_sessions else 0
            n_passed = 0
            if settings.keeps("firings"):
                # Windows whose end an earlier idle advance passed have fired on time already.
                earlier = marks.where(F.col("watermark") < F.lit(target)).agg(F.max("watermark")).first()[0]
                fired_up_to = max(left.watermark, _utc(earlier)) if earlier is not None else left.watermark
                passed = passed_windows(spark, settings, changes, fired_up_to, target, now, None)
                n_passed = passed.count()
            # Recorded when it closes a window or (firings kept) fires one on time, else it waits.
            if not closed and not hops and not sessions and not n_passed:
                continue
            writes = []
            if closed:
                writes.append((_corrections(changes, gold), GOLD_CORRECTIONS))
            if (closed or n_passed) and settings.keeps("firings"):
                fired = correction_rows(changes, gold).withColumn("changed", F.lit(True)).unionByName(passed)
                writes.append((firing_rows(fired, settings, fired_up_to, target), firings_table(settings)))
            if target > current:
                row = _mark_row(spark, query_name, writer_id, batch_id, after, now, "idle", None, None, 0)
                writes.append((row, OPS_WATERMARKS))
            append_all_once(writes, settings, app_id, version)
            if closed:
                merge_once(
                    spark,
                    app_id,
                    version,
                    lambda changes=changes: _merge_into_gold(
                        spark, settings, gold, changes, open_since(settings, left)
                    ),
                    {"writer": app_id, "batch": version, "advanced_by": "idle"},
                    target=gold.path(settings),
                )
            panes = changes.select("user_id", "window_start")
            if keeps_hops:
                hops = roll_up(
                    spark, settings, panes, target, now, "window_closed", f"{app_id}:hops", version, None,
                    left.watermark,
                )  # fmt: skip
            if keeps_sessions:
                sessions = update_sessions(
                    spark, settings, empty, left.watermark, target, now, f"{app_id}:sessions", version
                )
        _RECORDED[writer_id] = (batch_id, after)
        return {
            "watermark": target.timestamp(),
            "advanced_seconds": (target - left.watermark).total_seconds(),
            "windows_closed": float(closed),
            "hopping_windows_closed": float(hops),
            "sessions_closed": float(sessions),
            "watermark_lag_seconds": (now - target).total_seconds(),
        }
    return None


def _window_changes(
    spark: SparkSession,
    settings: Settings,
    gold: Table,
    on_time: DataFrame,
    before: Watermark,
    after: Watermark,
    now: datetime,
    batch_id: int,
) -> DataFrame:
    """One row per gold key this batch changes: the batch's sums, the row's old values, the new state."""
    keys = ["user_id", "window_start", "window_end"]
    behind = F.col("event_time") < F.lit(before.watermark) if before.watermark else F.lit(False)
    sums = on_time.groupBy(*keys).agg(
        F.sum("amount").cast(MONEY).alias("delta_amount"),
        F.count("*").alias("delta_count"),
        F.max(behind).alias("behind_watermark"),
    )
    current = read_table(spark, settings, gold)
    since = open_since(settings, before)
    if since is not None:
        current = current.where(F.col("window_start") >= F.lit(since))
    touched = sums
    if after.watermark is not None:
        closing = current.where(~F.col("is_final") & (closes_at(settings) <= F.lit(after.watermark))).select(
            *keys,
            F.lit(0).cast(MONEY).alias("delta_amount"),
            F.lit(0).cast("long").alias("delta_count"),
            F.lit(False).alias("behind_watermark"),
        )
        touched = (
            sums.unionByName(closing)
            .groupBy(*keys)
            .agg(
                F.sum("delta_amount").cast(MONEY).alias("delta_amount"),
                F.sum("delta_count").alias("delta_count"),
                F.max("behind_watermark").alias("behind_watermark"),
            )
        )
    old = current.select(
        "user_id",
        "window_start",
        F.col("total_amount").alias("old_total_amount"),
        F.col("event_count").alias("old_event_count"),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
    )
    new_is_final = closes_at(settings) <= F.lit(after.watermark) if after.watermark else F.lit(False)
    return touched.join(old, ["user_id", "window_start"], "left").select(
        *keys,
        "delta_amount",
        "delta_count",
        "old_total_amount",
        "old_event_count",
        "old_revision",
        "old_is_final",
        (F.coalesce("old_total_amount", F.lit(0).cast(MONEY)) + F.col("delta_amount"))
        .cast(MONEY)
        .alias("new_total_amount"),
        (F.coalesce("old_event_count", F.lit(0)) + F.col("delta_count")).alias("new_event_count"),
        (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
        (F.coalesce("old_is_final", F.lit(False)) | new_is_final).alias("new_is_final"),
        F.when(F.col("delta_count") == 0, "window_closed")
        .when(F.col("behind_watermark"), "late_data")
        .otherwise("stream_update")
        .alias("cause"),
        F.lit(now).cast("timestamp").alias("updated_at"),
        F.lit(batch_id).cast("long").alias("gold_batch"),
    )


def _corrections(changes: DataFrame, gold: Table) -> DataFrame:
    return correction_rows(changes.where(F.col("old_revision").isNotNull()), gold)


def correction_rows(changes: DataFrame, gold: Table) -> DataFrame:
    """gold.corrections rows from changes that carry keys, old/new values, revision, cause and gold_batch."""
    return changes.select(
        F.lit(gold.name).alias("table_name"),
        "user_id",
        "window_start",
        "window_end",
        "old_total_amount",
        "new_total_amount",
        "old_event_count",
        "new_event_count",
        "old_is_final",
        "new_is_final",
        "revision",
        "cause",
        F.col("updated_at").alias("corrected_at"),
        "gold_batch",
    )


def _merge_into_gold(
    spark: SparkSession, settings: Settings, gold: Table, changes: DataFrame, since: datetime | None
) -> None:
    # Increments, not the pre-read totals: a reconcile committed between the read and this MERGE is kept.
    condition = F.expr("t.user_id = s.user_id AND t.window_start = s.window_start")
    if since is not None:
        # Lets Delta skip every gold file of closed windows (no changed row can be there; see open_since).
        condition = condition & (F.col("t.window_start") >= F.lit(since))
    (
        DeltaTable.forPath(spark, str(gold.path(settings)))
        .alias("t")
        .merge(changes.alias("s"), condition)
        .whenMatchedUpdate(
            set={
                "total_amount": "CAST(t.total_amount + s.delta_amount AS DECIMAL(18,2))",
                "event_count": "t.event_count + s.delta_count",
                "revision": "t.revision + 1",
                "is_final": "t.is_final OR s.new_is_final",
                "updated_at": "s.updated_at",
            }
        )
        .whenNotMatchedInsert(
            values={
                "user_id": "s.user_id",
                "window_start": "s.window_start",
                "window_end": "s.window_end",
                "total_amount": "s.delta_amount",
                "event_count": "s.delta_count",
                "revision": "1",
                "is_final": "s.new_is_final",
                "updated_at": "s.updated_at",
            }
        )
        .execute()
    )
