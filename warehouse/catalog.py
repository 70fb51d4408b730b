"""The table catalog: the one place that names every table, its layer, schema, partitioning and path.

Every table is a plain Delta table under ``LAKEHOUSE_HOME/tables/<layer>/<name>`` (another pipeline's under
``LAKEHOUSE_HOME/pipelines/<pipeline>/tables/``), readable by any Delta engine. Schemas are written out here
once, the spec-shaped ones (silver's events, late events, the window tables, corrections) in
``warehouse.window_tables``; the transforms select exactly these columns before writing. Outside a pipeline's
own settings, its tables are known by their catalog names: :func:`catalog_name`.
"""

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

from warehouse.pipelines import declared_outputs, first_spec
from warehouse.settings import Settings
from warehouse.table import MONEY, Column, Table
from warehouse.window_tables import (
    corrections_table,
    firings_table,
    global_table,
    hopping_table,
    late_events_table,
    sessions_table,
    silver_events_table,
    source_position_columns,
    tumbling_table,
)

__all__ = [
    "MONEY",
    "Column",
    "Table",
    "firings_table",
    "global_table",
    "hopping_table",
    "sessions_table",
    "tumbling_table",
]


BRONZE_EVENTS = Table(
    layer="bronze",
    short_name="events",
    description="Every line ever received, raw and unparsed, with its source position and ingest time.",
    columns=(
        Column("raw", StringType(), "the line exactly as received (UTF-8, without its line break)"),
        Column("source", StringType(), "file or kafka", nullable=False),
        Column("source_file", StringType(), "landing file the line came from (file source)"),
        Column("source_line", LongType(), "1-based line number within source_file"),
        Column("file_modified_at", TimestampType(), "modification time of source_file when it was read"),
        Column("kafka_topic", StringType(), "topic (kafka source)"),
        Column("kafka_partition", IntegerType(), "partition (kafka source)"),
        Column("kafka_offset", LongType(), "offset within the partition (kafka source)"),
        Column("ingest_time", TimestampType(), "processing time the line was written to bronze", nullable=False),
        Column("ingest_batch", LongType(), "bronze micro-batch that wrote the line", nullable=False),
        Column("ingest_date", DateType(), "UTC date of ingest_time (partition)", nullable=False),
        Column("kafka_timestamp", TimestampType(), "the record's Kafka timestamp (kafka source; not event time)"),
        Column("kafka_key", StringType(), "the record's key (kafka source; the producer keys by user_id)"),
        Column("kafka_topic_id", StringType(), "id of the topic read (kafka source; new when it is recreated)"),
        Column(
            "raw_bytes",
            BinaryType(),
            "the line's bytes exactly as received, kept only when they are not valid UTF-8 (raw then shows each "
            "invalid sequence as U+FFFD)",
        ),
    ),
    partition_by=("ingest_date",),
    no_stats=("raw", "raw_bytes"),
)

SILVER_QUARANTINE = Table(
    layer="silver",
    short_name="quarantine",
    description="Lines that break an event rule, with a machine-readable reason.",
    columns=(
        Column("raw", StringType(), "the line exactly as received"),
        Column("reason", StringType(), "machine-readable rule that failed (see transforms.events)", nullable=False),
        *source_position_columns(),
        Column("silver_batch", LongType(), "silver micro-batch that quarantined the line", nullable=False),
        Column("raw_bytes", BinaryType(), "the line's bytes as received, when they are not valid UTF-8 (not_utf8)"),
    ),
    no_stats=("raw", "raw_bytes"),
)

SILVER_DUPLICATES = Table(
    layer="silver",
    short_name="duplicates",
    description="Every later arrival of an event_id already seen; conflicting when its payload differs.",
    columns=(
        Column("event_id", StringType(), "the repeated idempotency key", nullable=False),
        Column("raw", StringType(), "the repeated line exactly as received"),
        *source_position_columns(),
        Column("conflicting", BooleanType(), "payload differs from the first arrival's", nullable=False),
        Column("payload_hash", StringType(), "SHA-256 of this arrival's canonical JSON"),
        Column("first_payload_hash", StringType(), "SHA-256 of the first arrival's canonical JSON"),
        Column("silver_batch", LongType(), "silver micro-batch that saw the duplicate", nullable=False),
    ),
    no_stats=("raw",),
)

#: The first pipeline's (the contract's purchases) spec-shaped tables; any pipeline's are
#: :func:`events_table`, :func:`late_table` and :func:`corrections_log` of its settings.
SILVER_EVENTS = silver_events_table(first_spec())
SILVER_LATE_EVENTS = late_events_table(first_spec())
GOLD_CORRECTIONS = corrections_table(first_spec())


def events_table(settings: Settings) -> Table:
    """``silver.events`` of the settings' pipeline."""
    return SILVER_EVENTS if settings.pipeline is None else silver_events_table(settings.spec)


def late_table(settings: Settings) -> Table:
    """``silver.late_events`` of the settings' pipeline."""
    return SILVER_LATE_EVENTS if settings.pipeline is None else late_events_table(settings.spec)


def corrections_log(settings: Settings) -> Table:
    """``gold.corrections`` of the settings' pipeline."""
    return GOLD_CORRECTIONS if settings.pipeline is None else corrections_table(settings.spec)


#: How long after an order a payment still settles it (inclusive); gold.order_payments' bound.
ORDER_PAYMENT_BOUND_MINUTES = 15

ORDER_PAYMENTS = Table(
    layer="gold",
    short_name="order_payments",
    description=(
        "Orders joined with their payments by order_id (Spark stream-stream join, left outer): one `paid` row "
        "per (order, payment) pair whose payment event time lies in [order_time, order_time + "
        f"{ORDER_PAYMENT_BOUND_MINUTES} min] (inclusive; earlier payments do not count), written when the pair "
        "meets; one `unpaid` row per order without such a payment, written once when the join's watermark "
        f"(min over both sides of max event time - watermark delay) passes order_time + {ORDER_PAYMENT_BOUND_MINUTES} "
        "min. Append-only. Orders or payments arriving behind the join's watermark are dropped by Spark (see "
        "ops.stream_progress late)."
    ),
    columns=(
        Column("order_id", StringType(), "join key: the order_id both events carry", nullable=False),
        Column("user_id", StringType(), "the order event's user", nullable=False),
        Column("order_event_id", StringType(), "event_id of the order event", nullable=False),
        Column("order_time", TimestampType(), "event time of the order (UTC)", nullable=False),
        Column("order_amount", MONEY, "the order event's amount", nullable=False),
        Column("payment_event_id", StringType(), "event_id of the matched payment (null when unpaid)"),
        Column(
            "payment_time",
            TimestampType(),
            f"event time of the payment, within [order_time, order_time + {ORDER_PAYMENT_BOUND_MINUTES} min] "
            "(null when unpaid)",
        ),
        Column("payment_amount", MONEY, "the payment event's amount (null when unpaid)"),
        Column(
            "status",
            StringType(),
            "paid (a matched pair) or unpaid (no payment within the bound once the watermark passed it)",
            nullable=False,
        ),
        Column("joined_at", TimestampType(), "processing time the row was written", nullable=False),
        Column("join_batch", LongType(), "micro-batch of the join stream that wrote the row", nullable=False),
    ),
    key=("order_id", "order_event_id", "payment_event_id"),
)

GOLD_UNIQUE_URLS = Table(
    layer="gold",
    short_name="unique_urls",
    description=(
        "Per user, the number of distinct URLs clicked in the 24 hours of event time up to window_end: a "
        "URL counts while its last click is in (window_end - 24 h, window_end]. Kept by a stateful stream "
        "(transformWithState) over silver.events clicks; a URL leaves the count 24 h of event time after its "
        "last click, once the stream's watermark (newest event time - the watermark delay) passes that "
        "instant. One row per user, replaced by a MERGE whenever the count changes (down to 0 on expiry)."
    ),
    columns=(
        Column("user_id", StringType(), "key", nullable=False),
        Column(
            "unique_urls", LongType(), "distinct URLs with a click in (window_end - 24 h, window_end]", nullable=False
        ),
        Column(
            "window_end",
            TimestampType(),
            "the event-time instant the count refers to: the user's newest click, or the expiry instant "
            "(last click + 24 h) that lowered it",
            nullable=False,
        ),
        Column(
            "urls_in_state",
            LongType(),
            "URLs the stream still holds for the user (kept until the watermark passes their expiry)",
            nullable=False,
        ),
        Column(
            "updated_at", TimestampType(), "processing time of the micro-batch that changed the row", nullable=False
        ),
    ),
    key=("user_id",),
    append_only=False,
    zorder_by=("user_id",),
)

GOLD_FRAUD_ALERTS = Table(
    layer="gold",
    short_name="fraud_alerts",
    description=(
        "Purchases flagged on arrival. amount_limit: a purchase of at least LAKEHOUSE_FRAUD_AMOUNT_LIMIT, "
        "judged alone in the micro-batch that writes it to silver (late ones too). The stateful rules, by a "
        "stream (transformWithState) over silver.events, judge each purchase against the same user's purchases "
        "that arrived before it: large_amount when its amount is at least 10x the mean of those in the hour of "
        "event time up to it ([t - 1 h, t], at least one), burst when it makes 3 or more purchases within 60 s "
        "of event time; purchases behind that stream's watermark when they arrive are dropped by Spark "
        "(counted as late in ops.stream_progress). Append-only."
    ),
    columns=(
        Column("alert_id", StringType(), "rule:event_id (deterministic: a re-run or replay gives the same id)", False),
        Column("user_id", StringType(), "the purchasing user", nullable=False),
        Column("rule", StringType(), "amount_limit, large_amount or burst", nullable=False),
        Column("event_id", StringType(), "the purchase that triggered the alert", nullable=False),
        Column("event_time", TimestampType(), "event time of that purchase", nullable=False),
        Column("amount", MONEY, "its amount", nullable=False),
        Column(
            "running_mean",
            DecimalType(20, 4),
            "large_amount: mean amount of the user's earlier purchases in [t - 1 h, t] (half-even to 4 places)",
        ),
        Column(
            "triggering_event_ids",
            ArrayType(StringType(), containsNull=False),
            "the evidence: the earlier purchases the rule looked at and the triggering one, by event time "
            "(amount_limit: the purchase alone)",
            nullable=False,
        ),
        Column("ingest_time", TimestampType(), "processing time the triggering line was written to bronze"),
        Column("detected_at", TimestampType(), "processing time of the micro-batch that raised the alert", False),
    ),
    key=("alert_id",),
)

OPS_WATERMARKS = Table(
    layer="ops",
    short_name="watermarks",
    description=(
        "The event-time watermark of each windowing stream after each micro-batch or idle advance, with the "
        "delay its policy chose and how far it trails processing time."
    ),
    columns=(
        Column("query_name", StringType(), "streaming query", nullable=False),
        Column("writer_id", StringType(), "the query's writer (checkpoint) id; a reset checkpoint is a new writer"),
        Column("batch_id", LongType(), "micro-batch id", nullable=False),
        Column("max_event_time", TimestampType(), "largest event time seen so far"),
        Column("watermark", TimestampType(), "max_event_time minus the watermark delay (monotonic)"),
        Column("recorded_at", TimestampType(), "processing time", nullable=False),
        Column("advanced_by", StringType(), "events (a batch of events) or idle (processing time, no input)"),
        Column("delay_seconds", DoubleType(), "the delay behind max_event_time the policy used (fixed or adaptive)"),
        Column(
            "observed_lag_seconds",
            DoubleType(),
            "the batch's percentile of event-time lag: how far behind the max event time seen before the "
            "batch its events arrived (adaptive policy)",
        ),
        Column("watermark_lag_seconds", DoubleType(), "recorded_at minus watermark: event time behind processing time"),
        Column("events", LongType(), "events the batch brought (0 for an idle advance)"),
        Column("silver_batch_from", LongType(), "first silver.events.silver_batch the batch folded (null: none)"),
        Column("silver_batch_to", LongType(), "last silver.events.silver_batch the batch folded (null: none)"),
    ),
)


OPS_STREAM_PROGRESS = Table(
    layer="ops",
    short_name="stream_progress",
    description="One row per micro-batch of every stream: Spark's progress joined with the stream's own figures.",
    columns=(
        Column("stream", StringType(), "streaming query (its checkpoint folder's name)", nullable=False),
        Column("run_id", StringType(), "the process run that ran the batch", nullable=False),
        Column("batch_id", LongType(), "micro-batch id", nullable=False),
        Column("batch_time", TimestampType(), "processing time the batch's trigger fired"),
        Column("rows_in", LongType(), "rows the batch read from its source"),
        Column("rows_out", LongType(), "rows the batch wrote to its main table (gold: windows changed)"),
        Column("input_rows_per_second", DoubleType(), "rows arriving per second since the previous batch"),
        Column("processed_rows_per_second", DoubleType(), "rows processed per second of the batch"),
        Column("batch_seconds", DoubleType(), "wall-clock seconds of the whole trigger"),
        Column("write_seconds", DoubleType(), "seconds inside the batch function (transform and writes)"),
        Column("watermark", TimestampType(), "event-time watermark after the batch (windowing streams)"),
        Column(
            "late", LongType(), "events set aside as too late by the batch (a Spark join: rows its watermark dropped)"
        ),
        Column("quarantined", LongType(), "lines quarantined by the batch"),
        Column("duplicates", LongType(), "duplicate arrivals found by the batch"),
        Column("state_rows", LongType(), "rows held in Spark state stores after the batch"),
        Column("state_memory_bytes", LongType(), "memory of Spark state stores after the batch"),
        Column("backlog_files", LongType(), "files the source still had to read (Delta sources)"),
        Column("backlog_bytes", LongType(), "bytes the source still had to read (Delta sources)"),
        Column("figures", StringType(), "every figure the batch function returned, as JSON"),
        Column("recorded_at", TimestampType(), "processing time the progress was received", nullable=False),
        Column(
            "backlog_messages",
            LongType(),
            "Kafka stream: messages left in the topic after the batch (consumer lag, all partitions; "
            "per partition in figures)",
        ),
        Column(
            "latency_p50_seconds", DoubleType(), "end to end, median: the batch's commit minus its rows' arrived_at"
        ),
        Column("latency_p99_seconds", DoubleType(), "end to end, 99th percentile over the batch's rows"),
        Column("latency_max_seconds", DoubleType(), "end to end, the batch's oldest row"),
    ),
)


OPS_RECONCILIATIONS = Table(
    layer="ops",
    short_name="reconciliations",
    description="Every reconciliation that changed gold or folded late events: what it read and what it changed.",
    columns=(
        Column("kind", StringType(), "late_events (fold newly late events) or dates (repair whole event dates)"),
        Column("writer_id", StringType(), "the reconciliation's writer id (late_events: its stream's checkpoint)"),
        Column("batch_id", LongType(), "micro-batch (late_events) or run number (dates) of that writer"),
        Column("dates", StringType(), "event dates repaired (dates), or the dates of the late events' windows"),
        Column("late_events", LongType(), "late events read"),
        Column("keys_recomputed", LongType(), "(user_id, window_start) keys recomputed from silver"),
        Column("keys_changed", LongType(), "gold rows inserted, updated or deleted (= corrections written)"),
        Column("silver_version", LongType(), "silver.events version the recomputation read (what gold reflects)"),
        Column("seconds", DoubleType(), "wall-clock seconds of the reconciliation"),
        Column("finished_at", TimestampType(), "processing time it finished"),
    ),
)


OPS_DQ_RESULTS = Table(
    layer="ops",
    short_name="dq_results",
    description="Every data-quality expectation ever evaluated: one row per expectation per validation run.",
    columns=(
        Column(
            "run_id", StringType(), "the validation run (one `lakehouse validate` or one Dagster check)", nullable=False
        ),
        Column("run_time", TimestampType(), "processing time the validation run started", nullable=False),
        Column(
            "suite", StringType(), "bronze.events, silver.events, conservation, completeness, freshness", nullable=False
        ),
        Column("table_name", StringType(), "the table the suite guards", nullable=False),
        Column("expectation", StringType(), "Great Expectations expectation type", nullable=False),
        Column("column_name", StringType(), "the column (or columns) the expectation looks at"),
        Column("description", StringType(), "what the expectation guards, in words"),
        Column("severity", StringType(), "critical (blocking) or warning", nullable=False),
        Column("success", BooleanType(), "the expectation held", nullable=False),
        Column("observed_value", StringType(), "the observed value, as JSON"),
        Column("element_count", LongType(), "rows the expectation looked at"),
        Column("unexpected_count", LongType(), "rows that broke it"),
        Column("examples", StringType(), "a few offending keys, as a JSON array"),
        Column("report_path", StringType(), "the HTML report of the run"),
    ),
)


def all_tables(settings: Settings) -> list[Table]:
    """Every table of the settings' pipeline, in pipeline order: the window kinds and code outputs its spec
    declares (``LAKEHOUSE_GOLD_OUTPUTS`` may leave some of the first pipeline's out: :func:`kept_tables`)."""
    declared = declared_outputs(settings.spec)
    windows = {"hopping": hopping_table, "sessions": sessions_table, "global": global_table, "firings": firings_table}
    return [
        BRONZE_EVENTS,
        events_table(settings),
        SILVER_QUARANTINE,
        SILVER_DUPLICATES,
        late_table(settings),
        tumbling_table(settings),
        *(table(settings) for name, table in windows.items() if name in declared),
        corrections_log(settings),
        *(table for name, table in _CODE_OUTPUTS.items() if name in declared),
        OPS_WATERMARKS,
        OPS_STREAM_PROGRESS,
        OPS_RECONCILIATIONS,
        OPS_DQ_RESULTS,
    ]


_CODE_OUTPUTS = {"order_payments": ORDER_PAYMENTS, "unique_urls": GOLD_UNIQUE_URLS, "fraud_alerts": GOLD_FRAUD_ALERTS}


def gold_output_tables(settings: Settings) -> dict[str, Table]:
    """The optional gold outputs (``LAKEHOUSE_GOLD_OUTPUTS``, or the spec's windows and outputs) and their tables."""
    return {
        "hopping": hopping_table(settings),
        "sessions": sessions_table(settings),
        "global": global_table(settings),
        "firings": firings_table(settings),
        "order_payments": ORDER_PAYMENTS,
        "fraud_alerts": GOLD_FRAUD_ALERTS,
        "unique_urls": GOLD_UNIQUE_URLS,
    }


def kept_tables(settings: Settings) -> list[Table]:
    """The tables this pipeline's streams keep: every table but the gold outputs it leaves out, in pipeline
    order."""
    left_out = {t.name for output, t in gold_output_tables(settings).items() if not settings.keeps(output)}
    return [t for t in all_tables(settings) if t.name not in left_out]


def roles(settings: Settings) -> dict[str, str]:
    """Table name → what the table is for its pipeline (``tables --json``'s ``role``)."""
    named = {
        BRONZE_EVENTS.name: "bronze",
        SILVER_EVENTS.name: "events",
        SILVER_QUARANTINE.name: "quarantine",
        SILVER_DUPLICATES.name: "duplicates",
        SILVER_LATE_EVENTS.name: "late_events",
        tumbling_table(settings).name: "tumbling",
        GOLD_CORRECTIONS.name: "corrections",
        **{table.name: output for output, table in gold_output_tables(settings).items()},
    }
    return {
        **named,
        **{t.name: t.short_name for t in (OPS_WATERMARKS, OPS_STREAM_PROGRESS, OPS_RECONCILIATIONS, OPS_DQ_RESULTS)},
    }


def catalog_name(settings: Settings, table: Table) -> str:
    """The table's name outside its pipeline: as it is for the first pipeline's tables and for the window tables
    a spec names; ``<layer>.<pipeline>_<name>`` for another pipeline's bronze, silver, corrections and ops."""
    if settings.pipeline is None or table.declared:
        return table.name
    return f"{table.layer}.{settings.spec.name}_{table.short_name}"


def table_by_name(settings: Settings, name: str) -> tuple[Settings, Table]:
    """Look a table up by its catalog name among every declared pipeline's; (its pipeline's settings, the
    table). Raises KeyError with the known names."""
    known: dict[str, tuple[Settings, Table]] = {}
    for view in settings.root().pipelines(tuple(settings.root().declared())):
        for table in all_tables(view):
            known.setdefault(catalog_name(view, table), (view, table))
    if name not in known:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(known)}")
    return known[name]
