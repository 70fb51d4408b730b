"""Gold: per-key tumbling event-time windows, revised as events arrive, closed by the watermark.

One micro-batch of new silver events goes through the seeds' steps:
``assign_windows`` → ``split_late`` (against the watermark as it stood before the batch) →
``advance_watermark`` → ``revise_windows`` (MERGE the batch's sums into gold, finalize closed windows,
log every change of an existing row in ``gold.corrections``).
"""

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.gold.corrections import consumption_metadata, correction_rows
from transforms.gold.measures import (
    combined_parts,
    event_parts,
    merge_increments,
    merge_values,
    rolled_up_parts,
    value_names,
    with_values,
    zero_parts,
)
from transforms.gold.open_windows import OpenWindows
from transforms.gold.propagate import GoldChange, closures_pending, event_columns, firings, no_events, passed
from transforms.gold.watermarks import (
    RECORDED,
    Watermark,
    idle_watermark,
    is_event_row,
    mark_row,
    observed_lag,
    utc,
    watermark_before,
    watermark_delay,
)
from transforms.latency import arrival_figures, arrival_quantiles
from transforms.silver import declared
from warehouse.catalog import OPS_WATERMARKS, Table, corrections_log, late_table, tumbling_table
from warehouse.delta import (
    MergeSpec,
    already_written,
    append_once,
    append_rows_once,
    as_of,
    committed_version,
    computed_once,
    materialized,
    merge_changes_once,
    merge_rows_once,
    read_table,
    scope_since,
    side_by_side,
)
from warehouse.settings import Settings
from warehouse.shapes import Shape


def assign_windows(events: DataFrame, settings: Settings) -> DataFrame:
    """Tumbling windows of ``settings.windows.length`` aligned to the UTC epoch: ``[start, start + length)``."""
    window = F.window("event_time", f"{settings.windows.minutes} minutes")
    return events.withColumns({"window_start": window.start, "window_end": window.end})


def closes_at(settings: Settings) -> F.Column:
    """A window is closed once the watermark reaches ``window_end + allowed lateness``."""
    return F.col("window_end") + F.expr(f"INTERVAL {settings.windows.allowed_lateness_seconds} SECONDS")


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
    return mark.watermark - settings.windows.allowed_lateness - settings.windows.length


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
    open_windows: OpenWindows | None = None,
) -> dict[str, float]:
    """Fold one micro-batch of new silver events into gold, exactly once per batch.

    ``silver_version`` is the newest silver.events commit that this batch and the earlier ones have
    read completely (None when unknown, e.g. the batch ends part-way through a commit). It is written
    into the gold MERGE's own commit, so gold always says which silver it reflects: reconciliation
    recomputes from silver as of that version and never races events the stream has not seen yet.
    """
    spark = events.sparkSession
    gold = tumbling_table(settings)
    shape = Shape.of(settings.spec)
    before = watermark_before(spark, settings, query_name, batch_id, writer_id)
    carried = [name for name in ("silver_batch", "arrived_at") if name in events.columns]
    windowed = assign_windows(events.select(*event_columns(shape), "ingest_time", *carried), settings)
    windowed.persist()
    try:
        on_time, late = split_late(windowed, settings, before)
        silver_from = F.min("silver_batch") if "silver_batch" in carried else F.lit(None).cast("long")
        silver_to = F.max("silver_batch") if "silver_batch" in carried else F.lit(None).cast("long")
        arrivals = arrival_quantiles() if "arrived_at" in carried else [F.lit(None), F.lit(None)]
        rows_in, batch_max, n_late, lag, first_silver, last_silver, quantiles, earliest = windowed.agg(
            F.count("*"),
            F.max("event_time"),
            F.count_if(is_late(settings, before)),
            observed_lag(settings, before),
            silver_from,
            silver_to,
            *arrivals,
        ).first()
        observed = before
        if lag is not None:
            horizon = timedelta(seconds=settings.watermarks.horizon_seconds)
            observed = before.observe(utc(batch_max), float(lag), horizon)
        delay = watermark_delay(settings, observed)
        after = observed.advance(utc(batch_max), delay)
        now = datetime.now(UTC)

        late_rows = late.select(
            *event_columns(shape),
            "window_start",
            "window_end",
            F.lit(before.watermark).cast("timestamp").alias("watermark"),
            ((F.unix_micros(F.lit(before.watermark).cast("timestamp")) - F.unix_micros("event_time")) / 1e6).alias(
                "lateness_seconds"
            ),
            "ingest_time",
            F.lit(batch_id).cast("long").alias("gold_batch"),
        )
        late_rows = declared(late_rows, settings.spec)
        recorded_mark = mark_row(
            query_name,
            writer_id,
            batch_id,
            after,
            now,
            "events",
            delay,
            lag,
            rows_in,
            (first_silver, last_silver),
        )
        # A re-run whose MERGE committed reads gold as it stood just before that MERGE, as the first attempt
        # did: the gold lock keeps every other writer of the table out from the read until the MERGE.
        merged_at = committed_version(gold.path(settings), writer_id, batch_id, scope_since(writer_id, batch_id))
        read_at = None if merged_at is None else merged_at - 1
        stored, kept_at = None, None
        if open_windows is not None:
            if read_at is None:
                stored = open_windows.rows_since(spark, settings, open_since(settings, before))
                kept_at = open_windows.version
            else:
                open_windows.forget()
        # A change is an on-time event's window or a kept open window the watermark closes: when those are
        # few, the changes are collected once and every count, the MERGE and the kept rows use them.
        at_most = rows_in + (open_windows.count or 0) if stored is not None else None
        with computed_once(
            _window_changes(spark, settings, gold, on_time, before, after, now, batch_id, read_at, stored), at_most
        ) as (changes, collected):
            if collected is not None:
                n_changed = collected.num_rows
                n_revised = n_changed - collected.column("old_revision").null_count
            else:
                n_changed, n_revised = changes.agg(F.count("*"), F.count(F.col("old_revision"))).first()
            # The derived windows (hopping, sessions, global) follow on their own stream, which reads this
            # batch's ops.watermarks row (``transforms.gold.derived``); only the firings go with the change.
            change = GoldChange(
                before.watermark, after.watermark, now, writer_id, batch_id, "stream_update",
                changed=correction_rows(changes, gold, shape), gold_batch=batch_id, include_passed=True,
                gold_version=read_at, gold_rows=stored,
            )  # fmt: skip
            writes = []
            if n_late:
                writes.append((late_rows, late_table(settings), n_late))
            if n_changed:
                writes.append((_corrections(changes, gold, shape), corrections_log(settings), n_revised))
                writes.extend((df, table, None) for df, table in firings(spark, settings, change))
            appends = [partial(append_once, df, settings, table, writer_id, batch_id, n) for df, table, n in writes]
            merge = _gold_merge(
                settings, gold, changes, open_since(settings, before), writer_id, batch_id,
                consumption_metadata(writer_id, batch_id, silver_version), collected,
            )  # fmt: skip
            if scope_since(writer_id, batch_id) is not None:
                # In a stream batch, the logs and the MERGE side by side, each exactly once on its own (the
                # appends name their commit's metadata, over the session setting that carries the MERGE's).
                side_by_side(*appends, *([merge] if n_changed else []))
            else:
                side_by_side(*appends)
                if n_changed:
                    merge()
            if open_windows is not None and read_at is None:
                merged = (collected if collected is not None else changes) if n_changed else None
                open_windows.advance(settings, merged, kept_at)
        # Last: the derived windows' stream reads gold for the batch this row names.
        append_rows_once([recorded_mark], settings, OPS_WATERMARKS, writer_id, batch_id)
        RECORDED[writer_id] = (batch_id, after)
    finally:
        windowed.unpersist()
    return {
        "rows_in": rows_in,
        "rows_written": n_changed,
        "late": n_late,
        "windows_revised": n_revised,
        **arrival_figures(quantiles, earliest),
        "watermark": after.watermark.timestamp() if after.watermark else 0.0,
        "watermark_delay_seconds": delay.total_seconds(),
        "watermark_lag_seconds": (now - after.watermark).total_seconds() if after.watermark else 0.0,
    }


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
    last = marks.where(is_event_row()).orderBy(F.col("recorded_at").desc()).first()
    if last is None or last["watermark"] is None:
        return None
    current = utc(marks.agg(F.max("watermark")).first()[0])
    left = Watermark(utc(last["max_event_time"]), utc(last["watermark"]))
    prior = watermark_before(spark, settings, query_name, batch_id + 1, writer_id)
    gold = tumbling_table(settings)
    shape = Shape.of(settings.spec)
    app_id = f"{writer_id}:idle"
    # A recorded idle watermark whose windows are still open (a crash before its MERGE) is finished first.
    candidates = [current] if current > left.watermark else []
    candidates.append(max(current, idle_watermark(settings, left.watermark, utc(last["recorded_at"]), now)))
    empty = no_events(spark, settings)
    for target in candidates:
        after = replace(prior, watermark=target)
        version = int(target.timestamp() * 1_000_000)
        with materialized(_window_changes(spark, settings, gold, empty, left, after, now, None)) as changes:
            closed = 0 if already_written(settings, gold, app_id, version) else changes.count()
            hops, sessions = closures_pending(spark, settings, target, left.watermark)
            # Windows whose end an earlier idle advance passed have fired on time already.
            earlier = marks.where(F.col("watermark") < F.lit(target)).agg(F.max("watermark")).first()[0]
            fired_up_to = max(left.watermark, utc(earlier)) if earlier is not None else left.watermark
            change = GoldChange(
                left.watermark, target, now, app_id, version, "window_closed",
                changed=correction_rows(changes, gold, shape), panes=changes.select(*shape.key_names, "window_start"),
                closes_from=left.watermark, include_passed=True,
                fired_since=fired_up_to,
            )  # fmt: skip
            n_passed = passed(spark, settings, change).count() if settings.keeps("firings") else 0
            # Recorded when it closes a window or (firings kept) fires one on time, else it waits.
            if not closed and not hops and not sessions and not n_passed:
                continue
            writes = []
            if closed:
                writes.append((_corrections(changes, gold, shape), corrections_log(settings)))
            if closed or n_passed:
                writes.extend(firings(spark, settings, change))
            appends = [partial(append_once, df, settings, table, app_id, version) for df, table in writes]
            if target > current:
                row = mark_row(query_name, writer_id, batch_id, after, now, "idle", None, None, 0)
                appends.append(partial(append_rows_once, [row], settings, OPS_WATERMARKS, app_id, version))
            side_by_side(*appends)
            if closed:
                metadata = {"writer": app_id, "batch": version, "advanced_by": "idle"}
                _gold_merge(settings, gold, changes, open_since(settings, left), app_id, version, metadata)()
        RECORDED[writer_id] = (batch_id, after)
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
    batch_id: int | None,
    version: int | None = None,
    stored: DataFrame | None = None,
) -> DataFrame:
    """One row per gold key this batch changes: the batch's parts (``delta_*``), the row's old values
    (``old_*``; gold as of ``version``; None: the newest; or ``stored``, the open windows the process keeps),
    the new state (``new_*``)."""
    shape = Shape.of(settings.spec)
    key = [*shape.key_names, "window_start"]
    keys = [*key, "window_end"]
    behind = F.col("event_time") < F.lit(before.watermark) if before.watermark else F.lit(False)
    sums = on_time.groupBy(*keys).agg(*event_parts(shape, "delta_"), F.max(behind).alias("behind_watermark"))
    current = stored if stored is not None else as_of(spark, settings, gold, version)
    since = open_since(settings, before)
    if since is not None:
        current = current.where(F.col("window_start") >= F.lit(since))
    touched = sums
    if after.watermark is not None:
        closing = current.where(~F.col("is_final") & (closes_at(settings) <= F.lit(after.watermark))).select(
            *keys,
            *zero_parts(shape, "delta_"),
            F.lit(False).alias("behind_watermark"),
        )
        touched = (
            sums.unionByName(closing)
            .groupBy(*keys)
            .agg(*rolled_up_parts(shape, "delta_", "delta_"), F.max("behind_watermark").alias("behind_watermark"))
        )
    old = current.select(
        *key,
        *(F.col(name).alias(f"old_{name}") for name in value_names(shape)),
        F.col("revision").alias("old_revision"),
        F.col("is_final").alias("old_is_final"),
    )
    new_is_final = closes_at(settings) <= F.lit(after.watermark) if after.watermark else F.lit(False)
    joined = touched.join(old, key, "left").select("*", *combined_parts(shape, "old_", "delta_", "new_"))
    return joined.select(
        *keys,
        *with_values(shape, "delta_"),
        *(f"old_{name}" for name in value_names(shape)),
        "old_revision",
        "old_is_final",
        *with_values(shape, "new_"),
        (F.coalesce("old_revision", F.lit(0)) + 1).cast("int").alias("revision"),
        (F.coalesce("old_is_final", F.lit(False)) | new_is_final).alias("new_is_final"),
        F.when(F.col("delta_event_count") == 0, "window_closed")
        .when(F.col("behind_watermark"), "late_data")
        .otherwise("stream_update")
        .alias("cause"),
        F.lit(now).cast("timestamp").alias("updated_at"),
        F.lit(batch_id).cast("long").alias("gold_batch"),
    )


def _corrections(changes: DataFrame, gold: Table, shape: Shape) -> DataFrame:
    return correction_rows(changes.where(F.col("old_revision").isNotNull()), gold, shape)


def _gold_merge(
    settings: Settings,
    gold: Table,
    changes: DataFrame,
    since: datetime | None,
    app_id: str,
    version: int,
    metadata: dict,
    collected: pa.Table | None = None,
) -> Callable[[], None]:
    """The MERGE of ``changes`` (or of the same rows ``collected`` on the driver) into gold, exactly once for
    (app_id, version)."""
    shape = Shape.of(settings.spec)
    keys = shape.key_names
    # Increments, not the pre-read totals: a reconcile committed between the read and this MERGE is kept.
    on = " AND ".join(f"t.{k} = s.{k}" for k in [*keys, "window_start"])
    if since is not None:
        # Lets Delta skip every gold file of closed windows (no changed row can be there; see open_since).
        on += f" AND t.window_start >= TIMESTAMP '{since.astimezone(UTC).isoformat()}'"
    spec = MergeSpec(
        on,
        update={
            **merge_increments(shape, "delta_"),
            "revision": "t.revision + 1",
            "is_final": "t.is_final OR s.new_is_final",
            "updated_at": "s.updated_at",
        },
        insert={
            **{k: f"s.{k}" for k in [*keys, "window_start", "window_end"]},
            **merge_values(shape, "delta_"),
            "revision": "1",
            "is_final": "s.new_is_final",
            "updated_at": "s.updated_at",
        },
    )
    deltas = [f"delta_{name}" for name in value_names(shape)]
    columns = [*keys, "window_start", "window_end", *deltas, "new_is_final", "updated_at"]
    if collected is not None and not shape.averages_decimals:
        return partial(merge_rows_once, collected.select(columns), gold.path(settings), app_id, version, spec, metadata)
    return partial(
        merge_changes_once, changes.select(*columns), gold.path(settings), app_id, version, spec, metadata,
        by_spark=shape.averages_decimals,
    )  # fmt: skip
