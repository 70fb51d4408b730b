"""Silver: parse and validate bronze lines, quarantine the invalid, deduplicate by the pipeline's id over history.

Inside the lakehouse a pipeline's id field travels as ``event_id`` and its event-time field as ``event_time``
(:func:`canonical`); its tables keep the names its spec declares (:func:`declared`)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta

import numpy as np
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from transforms.events import parse_events
from transforms.fraud_rules import AMOUNT_LIMIT
from transforms.limit_alerts import over_the_limit, write_limit_alerts
from transforms.seen_keys import SeenKeys, batch_keys
from warehouse.catalog import SILVER_DUPLICATES, SILVER_EVENTS, SILVER_QUARANTINE, events_table
from warehouse.delta import append_all_once, latest_version, materialized, read_table
from warehouse.pipelines import PipelineSpec
from warehouse.settings import Settings
from warehouse.storage import open_delta

#: Arrival order: an earlier bronze batch arrived earlier; within a batch, older files first, then the
#: line order within a file (Kafka: partition offset order).
ARRIVAL_ORDER = ("ingest_batch", "file_modified_at", "source_file", "source_line", "kafka_partition", "kafka_offset")


def _roles(spec: PipelineSpec) -> dict[str, str]:
    """Declared name → the name it travels under inside the lakehouse (id and event time only)."""
    return {name: role for name, role in ((spec.id, "event_id"), (spec.time.field, "event_time")) if name != role}


def canonical(frame: DataFrame, spec: PipelineSpec) -> DataFrame:
    """The frame with the spec's id field named ``event_id`` and its event-time field ``event_time``."""
    return frame.withColumnsRenamed({k: v for k, v in _roles(spec).items() if k in frame.columns})


def declared(frame: DataFrame, spec: PipelineSpec) -> DataFrame:
    """The frame with ``event_id`` and ``event_time`` named as the spec declares them again."""
    back = {role: name for name, role in _roles(spec).items() if role in frame.columns}
    return frame.withColumnsRenamed(back)


def source_position() -> F.Column:
    """``file#line`` for landing files, ``kafka:topic/partition@offset`` for Kafka records."""
    return F.when(
        F.col("source") == "kafka",
        F.format_string("kafka:%s/%d@%d", "kafka_topic", "kafka_partition", "kafka_offset"),
    ).otherwise(F.format_string("%s#%d", "source_file", "source_line"))


def event_key(event_id: str = "event_id") -> F.Column:
    """The 64-bit hash of ``event_id`` stored beside it in ``silver.events``: the compact key dedup scans
    history by. Equal ids have equal keys; a shared key is confirmed (or not) by the ids themselves."""
    return F.xxhash64(event_id)


def stored_files(settings: Settings) -> tuple[int, bool]:
    """(live files of ``silver.events``, whether any may hold rows without ``event_key``): from the Delta
    log's file statistics (milliseconds, no Spark job). Files written before the column existed (an
    upgraded home) have no statistics for it."""
    files = open_delta(SILVER_EVENTS.path(settings)).get_add_actions(flatten=True)
    if "null_count.event_key" not in files.column_names:
        return files.num_rows, files.num_rows > 0
    return files.num_rows, any(n is None or n > 0 for n in files.column("null_count.event_key").to_pylist())


def history_of(
    spark: SparkSession, settings: Settings, batch: DataFrame, batch_id: int, days: list[int] | None = None
) -> DataFrame:
    """``(event_id, history_hash)`` of every event in silver before ``batch_id`` whose id is in ``batch``.

    Exact at any delay, with a cost that does not grow with all of history: step one finds the
    ``event_date`` partitions the batch's keys are stored under, by a scan of only the 8-byte
    ``event_key`` of ``silver.events``, or from ``days`` (``unix_date`` values) when the caller's
    :class:`~transforms.seen_keys.SeenKeys` already answered it; step two reads ids and payload hashes
    from only those partitions. A batch without repeats never takes step two.
    """
    stored = canonical(read_table(spark, settings, events_table(settings)), settings.spec)
    if days is not None:
        return _stored_ids(stored, batch, batch_id, [date(1970, 1, 1) + timedelta(days=day) for day in days])
    n_files, keyless = stored_files(settings)
    if not n_files:
        return spark.createDataFrame([], "event_id string, history_hash string")
    keys = F.broadcast(batch.select(event_key().alias("event_key")).distinct())
    index = stored.select("event_key", "event_date")
    if keyless:
        # Rows stored before the key column existed (an upgraded home) are hashed on the fly.
        index = index.where(F.col("event_key").isNotNull()).unionByName(
            stored.where(F.col("event_key").isNull()).select(event_key().alias("event_key"), "event_date")
        )
    dates = [row[0] for row in index.join(keys, "event_key", "left_semi").select("event_date").distinct().collect()]
    return _stored_ids(stored, batch, batch_id, dates)


def _stored_ids(stored: DataFrame, batch: DataFrame, batch_id: int, dates: list[date]) -> DataFrame:
    if not dates:
        return stored.sparkSession.createDataFrame([], "event_id string, history_hash string")
    return (
        stored.where(F.col("event_date").isin(dates) & (F.col("silver_batch") < batch_id))
        .join(F.broadcast(batch.select("event_id").distinct()), "event_id", "left_semi")
        .select("event_id", F.col("payload_hash").alias("history_hash"))
    )


def refine_events(bronze: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    """Split one micro-batch of bronze lines into new events, duplicates and quarantined lines.

    Time semantics: none of event time; "first" means first to *arrive* (see ``ARRIVAL_ORDER``), however
    late or early its event time is. History is every silver batch before this one, so a batch re-run
    after a crash classifies exactly as its first attempt did.
    """
    with refined(bronze, batch_id, settings, writer_id) as (figures, _):
        return figures


@contextmanager
def refined(
    bronze: DataFrame,
    batch_id: int,
    settings: Settings,
    writer_id: str,
    seen: SeenKeys | None = None,
    detected_at: datetime | None = None,
    landed: Callable[[], object] | None = None,
) -> Iterator[tuple[dict[str, float], DataFrame]]:
    """:func:`refine_events`, and the batch's new events (``silver.events`` rows) for the block: what a
    batch carrying its lines on to gold folds into the windows without reading silver back. ``seen``,
    the writer's index of stored keys, answers dedup's first step on the driver and learns the batch's.

    With ``gold.fraud_alerts`` kept, the batch's new purchases at or over the amount limit are its alerts
    (``transforms.limit_alerts``), counted in the same pass as the classes and appended under the same
    writer identity, ``detected_at`` (default: now) their time of detection.

    ``landed``, when given, is waited for before silver's first commit: a batch that appends its bronze
    lines meanwhile never commits silver rows ahead of them (silver ⊆ bronze at every version)."""
    spark = bronze.sparkSession
    valid = F.col("reason").isNull()
    spec = settings.spec
    flagged = over_the_limit(settings.fraud_amount_limit) if settings.keeps("fraud_alerts") else None
    lines = parse_events(bronze, settings.streams.max_line_bytes, spec=spec)
    with materialized(canonical(lines, spec)) as parsed:
        keys = batch_keys(parsed.where(valid), event_key()) if seen and seen.current(spark, settings) else None
        days = seen.found(keys[0])[1] if keys is not None else None
        # Keys all distinct and none stored: every valid line is the first arrival of its id.
        unseen = days == [] and len(np.unique(keys[0])) == len(keys[0])
        history = None if unseen else history_of(spark, settings, parsed.where(valid), batch_id, days)
        with materialized(_classify(parsed, history, batch_id)) as classified:
            rows_in, n_quarantined, n_duplicates, n_conflicting, n_flagged = _write_classified(
                classified, settings, writer_id, batch_id, flagged, landed
            )
            if keys is not None:
                seen.add(*keys, latest_version(SILVER_EVENTS.path(settings) / "_delta_log"))
            figures = {
                "rows_in": rows_in,
                "rows_written": rows_in - n_quarantined - n_duplicates,
                "quarantined": n_quarantined,
                "duplicates": n_duplicates,
                "conflicting": n_conflicting,
            }
            stored = declared(_new_events(classified), spec).select(*events_table(settings).column_names)
            events = canonical(stored, spec)
            if flagged is not None:
                figures[AMOUNT_LIMIT] = n_flagged
            if n_flagged:
                at = detected_at or datetime.now(UTC)
                write_limit_alerts(events, settings, writer_id, batch_id, at, n_flagged)
            yield figures, events


def _classify(parsed: DataFrame, history: DataFrame | None, batch_id: int) -> DataFrame:
    """Every line with ``is_new``, ``is_duplicate`` and ``conflicting``: the first arrival of an id never
    seen before is new; any other valid line with that id is a duplicate. ``history`` None: the caller
    knows every valid line's id is unique in the batch and not stored (no ranking, no join)."""
    valid = F.col("reason").isNull()
    # Quarantined lines ride along (ranked apart from valid ones), so one pass classifies every line.
    by_arrival = Window.partitionBy("event_id", valid).orderBy(*ARRIVAL_ORDER)
    ranked = parsed.withColumns(
        {
            "source_position": source_position(),
            "arrived_at": F.coalesce("kafka_timestamp", "file_modified_at"),
            "silver_batch": F.lit(batch_id).cast("long"),
            "arrival_rank": F.when(valid, F.lit(1) if history is None else F.row_number().over(by_arrival)),
            "first_hash_in_batch": F.when(
                valid, F.col("payload_hash") if history is None else F.first("payload_hash").over(by_arrival)
            ),
        }
    )
    if history is None:
        ranked = ranked.withColumn("history_hash", F.lit(None).cast("string"))
    else:
        ranked = ranked.join(F.broadcast(history), "event_id", "left")
    return (
        ranked.withColumn("is_new", valid & (F.col("arrival_rank") == 1) & F.col("history_hash").isNull())
        .withColumn("is_duplicate", valid & ~F.col("is_new"))
        .withColumn("first_payload_hash", F.coalesce("history_hash", "first_hash_in_batch"))
        .withColumn(
            "conflicting", F.col("is_duplicate") & ~F.col("payload_hash").eqNullSafe(F.col("first_payload_hash"))
        )
    )


def _new_events(classified: DataFrame) -> DataFrame:
    return classified.where("is_new").withColumns({"event_date": F.to_date("event_time"), "event_key": event_key()})


def _write_classified(
    classified: DataFrame,
    settings: Settings,
    writer_id: str,
    batch_id: int,
    flagged: Column | None = None,
    landed: Callable[[], object] | None = None,
) -> tuple[int, int, int, int, int]:
    """Append each class to its table (exactly once per batch); (lines, quarantined, duplicates, conflicting,
    new events that are ``flagged``)."""
    valid = F.col("reason").isNull()
    counts = classified.agg(
        F.count("*"),
        F.count_if(~valid),
        F.count_if("is_duplicate"),
        F.count_if("conflicting"),
        F.count_if(F.col("is_new") & flagged) if flagged is not None else F.lit(0),
    ).first()
    rows_in, n_quarantined, n_duplicates, n_conflicting, n_flagged = (int(v) for v in counts)
    writes = []
    if n_quarantined:
        writes.append((classified.where(~valid), SILVER_QUARANTINE, n_quarantined))
    if n_duplicates:
        duplicates = classified.where("is_duplicate").withColumn("event_id", F.col("event_id").cast("string"))
        writes.append((duplicates, SILVER_DUPLICATES, n_duplicates))
    if n_new := rows_in - n_quarantined - n_duplicates:
        writes.append((declared(_new_events(classified), settings.spec), events_table(settings), n_new))
    if landed is not None:
        landed()
    append_all_once(writes, settings, writer_id, batch_id)
    return rows_in, n_quarantined, n_duplicates, n_conflicting, n_flagged
