"""The table catalog: the one place that names every table, its layer, schema, partitioning and path.

Every table is a plain Delta table under ``LAKEHOUSE_HOME/tables/<layer>/<name>``, readable by any Delta
engine. Schemas are written out here once; the transforms select exactly these columns before writing.
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

from warehouse.settings import Settings
from warehouse.table import MONEY, Column, Table

__all__ = ["MONEY", "Column", "Table"]


def _source_position_columns() -> tuple[Column, ...]:
    return (
        Column("source_position", StringType(), "where the line came from: file#line or kafka topic/partition@offset"),
        Column("ingest_time", TimestampType(), "processing time the line was written to bronze"),
        Column(
            "arrived_at",
            TimestampType(),
            "when the line arrived: its landing file's modification time or its Kafka record's timestamp "
            "(what end-to-end latency is measured from)",
        ),
    )


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

SILVER_EVENTS = Table(
    layer="silver",
    short_name="events",
    description="Valid, typed events, deduplicated by event_id over all history (first arrival wins).",
    columns=(
        Column("event_id", StringType(), "idempotency key", nullable=False),
        Column("user_id", StringType(), "grouping key", nullable=False),
        Column("event_time", TimestampType(), "when the event happened (UTC)", nullable=False),
        Column("amount", MONEY, "exact money amount", nullable=False),
        Column("event_type", StringType(), "optional type (purchase, click, ...)"),
        Column("event_date", DateType(), "UTC date of event_time (partition)", nullable=False),
        *_source_position_columns(),
        Column("payload_hash", StringType(), "SHA-256 of the event's canonical JSON"),
        Column("silver_batch", LongType(), "silver micro-batch that accepted the event", nullable=False),
        Column("event_key", LongType(), "xxhash64 of event_id: the compact key dedup looks history up by"),
        Column("url", StringType(), "the event's url when it is a JSON string (clicks; read by gold.unique_urls)"),
        Column("order_id", StringType(), "the event's order_id when a JSON string (orders and payments)"),
    ),
    partition_by=("event_date",),
    key=("event_id",),
)

SILVER_QUARANTINE = Table(
    layer="silver",
    short_name="quarantine",
    description="Lines that break an event rule, with a machine-readable reason.",
    columns=(
        Column("raw", StringType(), "the line exactly as received"),
        Column("reason", StringType(), "machine-readable rule that failed (see transforms.events)", nullable=False),
        *_source_position_columns(),
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
        *_source_position_columns(),
        Column("conflicting", BooleanType(), "payload differs from the first arrival's", nullable=False),
        Column("payload_hash", StringType(), "SHA-256 of this arrival's canonical JSON"),
        Column("first_payload_hash", StringType(), "SHA-256 of the first arrival's canonical JSON"),
        Column("silver_batch", LongType(), "silver micro-batch that saw the duplicate", nullable=False),
    ),
    no_stats=("raw",),
)

SILVER_LATE_EVENTS = Table(
    layer="silver",
    short_name="late_events",
    description="Events that arrived after their window was closed (watermark past window end + lateness).",
    columns=(
        Column("event_id", StringType(), "idempotency key", nullable=False),
        Column("user_id", StringType(), "grouping key", nullable=False),
        Column("event_time", TimestampType(), "when the event happened (UTC)", nullable=False),
        Column("amount", MONEY, "exact money amount", nullable=False),
        Column("window_start", TimestampType(), "start of the closed window the event belongs to", nullable=False),
        Column("window_end", TimestampType(), "end of that window (exclusive)", nullable=False),
        Column("watermark", TimestampType(), "watermark when the event reached the window stage", nullable=False),
        Column("lateness_seconds", DoubleType(), "watermark minus event_time, in seconds", nullable=False),
        Column("ingest_time", TimestampType(), "processing time the line was written to bronze"),
        Column("gold_batch", LongType(), "window-stage micro-batch that set the event aside", nullable=False),
    ),
)


def user_spend_table(settings: Settings) -> Table:
    """Per user and tumbling event-time window; the name carries the window length (default 5m)."""
    return Table(
        layer="gold",
        short_name=f"user_spend_{settings.windows.minutes}m",
        description=(
            f"Per user, per tumbling {settings.windows.minutes}-minute event-time window: exact spend and "
            "count, revised as events arrive; final once the watermark passes window end + lateness."
        ),
        columns=(
            Column("user_id", StringType(), "grouping key", nullable=False),
            Column("window_start", TimestampType(), "window start (inclusive, UTC-epoch aligned)", nullable=False),
            Column("window_end", TimestampType(), "window end (exclusive)", nullable=False),
            Column("total_amount", MONEY, "exact sum of the window's events", nullable=False),
            Column("event_count", LongType(), "number of the window's events", nullable=False),
            Column("revision", IntegerType(), "1 when first written, +1 on every change", nullable=False),
            Column("is_final", BooleanType(), "watermark has passed window end + allowed lateness", nullable=False),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=("user_id", "window_start"),
        append_only=False,
        zorder_by=("user_id",),
    )


def _minutes_name(minutes: int) -> str:
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def hopping_spend_table(settings: Settings) -> Table:
    """Per user and hopping event-time window (default 1 h every 5 min): the sum of the tumbling windows
    it covers, so it sees an event exactly when its tumbling window does (late ones after
    reconciliation); final once the watermark passes window end + lateness."""
    size, slide = settings.windows.hopping_size_minutes, settings.windows.hopping_slide_minutes
    spend = user_spend_table(settings)
    return Table(
        layer="gold",
        short_name=f"user_spend_{_minutes_name(size)}_hopping",
        description=(
            f"Per user, per hopping {size}-minute event-time window starting every {slide} minutes: exact "
            f"spend and count (the sum of the {settings.windows.minutes}-minute windows it covers), revised as "
            "they change; final once the watermark passes window end + lateness."
        ),
        columns=spend.columns,
        key=spend.key,
        append_only=False,
        zorder_by=spend.zorder_by,
    )


def user_sessions_table(settings: Settings) -> Table:
    """Per user, session windows of event time (default 30-minute gap); see transforms.gold.sessions."""
    gap = settings.windows.session_gap_minutes
    return Table(
        layer="gold",
        short_name="user_sessions",
        description=(
            f"Per user, sessions of events at most {gap} minutes apart in event time: [first event, last "
            f"event + {gap} min), exact spend and count; every event folded in however late (a late event "
            "bridging two sessions merges them: the later row is retracted); final once the watermark passes "
            "session end + lateness."
        ),
        columns=(
            Column("user_id", StringType(), "grouping key", nullable=False),
            Column("session_start", TimestampType(), "event time of the session's first event", nullable=False),
            Column("session_end", TimestampType(), "last event's time + the gap (exclusive)", nullable=False),
            Column("last_event_time", TimestampType(), "event time of the session's last event", nullable=False),
            Column("total_amount", MONEY, "exact sum of the session's events", nullable=False),
            Column("event_count", LongType(), "number of the session's events", nullable=False),
            Column("revision", IntegerType(), "1 when first written, +1 on every change", nullable=False),
            Column("is_final", BooleanType(), "watermark has passed session end + allowed lateness", nullable=False),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=("user_id", "session_start"),
        append_only=False,
        zorder_by=("user_id",),
    )


def user_spend_global_table(settings: Settings) -> Table:
    """Per user, one global window (all of time) with a count trigger; see transforms.gold.global_windows."""
    every = settings.windows.global_trigger_count
    return Table(
        layer="gold",
        short_name="user_spend_global",
        description=(
            f"Per user, one global event-time window over all of time (never final) with a count trigger: every "
            f"{every} events it fires, emitting the accumulated count and spend at that event (fired_*); "
            "event_count and total_amount run on between firings. Every event counts, however late."
        ),
        columns=(
            Column("user_id", StringType(), "grouping key", nullable=False),
            Column("event_count", LongType(), "the user's events so far", nullable=False),
            Column("total_amount", MONEY, "exact sum of the user's events so far", nullable=False),
            Column("firings", LongType(), f"times the count trigger fired (event_count // {every})", nullable=False),
            Column("fired_event_count", LongType(), "event count at the last firing (a multiple of the trigger)"),
            Column("fired_total_amount", MONEY, "accumulated spend the last firing emitted"),
            Column("fired_at", TimestampType(), "processing time of the last firing"),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=("user_id",),
        append_only=False,
    )


def firings_table(settings: Settings) -> Table:
    """What the tumbling table emits, one row per firing; see transforms.gold.firings."""
    spend = user_spend_table(settings)
    return Table(
        layer="gold",
        short_name=f"{spend.short_name}_firings",
        description=(
            f"Every firing of {spend.name}'s windows as a downstream consumer receives it: trigger "
            f"{settings.windows.firing_trigger} (early: partial results each micro-batch; watermark: one on-time "
            f"result), late firings as new revisions, in {settings.windows.accumulation} mode (accumulating: the whole "
            "value; discarding: the change since the previous firing; retracting: the previous value "
            "retracted, then the new one)."
        ),
        columns=(
            Column("user_id", StringType(), "grouping key", nullable=False),
            Column("window_start", TimestampType(), "window start (inclusive)", nullable=False),
            Column("window_end", TimestampType(), "window end (exclusive)", nullable=False),
            Column(
                "firing",
                StringType(),
                "early (watermark before the window's end), on_time (once, when it passes the end), late (a change "
                "after that), closed (the allowed lateness is over: values unchanged, final)",
                nullable=False,
            ),
            Column("revision", IntegerType(), "the window's revision this firing reports", nullable=False),
            Column("is_final", BooleanType(), "the window was closed when it fired", nullable=False),
            Column(
                "is_retraction", BooleanType(), "retracts the previous firing's value (retracting mode)", nullable=False
            ),
            Column("accumulation", StringType(), "accumulating, discarding or retracting", nullable=False),
            Column(
                "total_amount",
                MONEY,
                "the firing's spend (discarding: the change since the last firing)",
                nullable=False,
            ),
            Column("event_count", LongType(), "the firing's count (discarding: the change)", nullable=False),
            Column("cause", StringType(), "why the window changed (as in gold.corrections)", nullable=False),
            Column("fired_at", TimestampType(), "processing time of the firing", nullable=False),
            Column("gold_batch", LongType(), "window-stage micro-batch that fired it"),
        ),
    )


GOLD_CORRECTIONS = Table(
    layer="gold",
    short_name="corrections",
    description="Every change made to a gold row after it was first written: old and new values and why.",
    columns=(
        Column("table_name", StringType(), "gold table that changed", nullable=False),
        Column("user_id", StringType(), "key: user", nullable=False),
        Column("window_start", TimestampType(), "key: window start (sessions: session_start)", nullable=False),
        Column("window_end", TimestampType(), "window end (sessions: session_end)", nullable=False),
        Column("old_total_amount", MONEY, "total before the change", nullable=False),
        Column("new_total_amount", MONEY, "total after the change", nullable=False),
        Column("old_event_count", LongType(), "count before the change", nullable=False),
        Column("new_event_count", LongType(), "count after the change", nullable=False),
        Column("old_is_final", BooleanType(), "is_final before the change", nullable=False),
        Column("new_is_final", BooleanType(), "is_final after the change", nullable=False),
        Column("revision", IntegerType(), "the row's revision after the change", nullable=False),
        Column(
            "cause",
            StringType(),
            "stream_update (new on-time events), late_data (events behind the watermark but within the "
            "allowed lateness; for sessions, any change of a final one), window_closed (finalized), "
            "session_merged (a session absorbed by an earlier one: its row is deleted, new values 0), "
            "reconciliation, replay",
            nullable=False,
        ),
        Column("corrected_at", TimestampType(), "processing time of the change", nullable=False),
        Column("gold_batch", LongType(), "window-stage micro-batch that made the change"),
    ),
)

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
        "Purchases flagged on arrival by a stateful stream (transformWithState) over silver.events, each "
        "judged against the same user's purchases that arrived before it: large_amount when its amount is at "
        "least 10x the mean of those in the hour of event time up to it ([t - 1 h, t], at least one), burst "
        "when it makes 3 or more purchases within 60 s of event time. Purchases behind the stream's watermark "
        "when they arrive are dropped by Spark (counted as late in ops.stream_progress). Append-only."
    ),
    columns=(
        Column("alert_id", StringType(), "rule:event_id (deterministic: a re-run or replay gives the same id)", False),
        Column("user_id", StringType(), "the purchasing user", nullable=False),
        Column("rule", StringType(), "large_amount or burst", nullable=False),
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
            "the evidence: the earlier purchases the rule looked at and the triggering one, by event time",
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
    """Every table, in pipeline order."""
    return [
        BRONZE_EVENTS,
        SILVER_EVENTS,
        SILVER_QUARANTINE,
        SILVER_DUPLICATES,
        SILVER_LATE_EVENTS,
        user_spend_table(settings),
        hopping_spend_table(settings),
        user_sessions_table(settings),
        user_spend_global_table(settings),
        firings_table(settings),
        GOLD_CORRECTIONS,
        ORDER_PAYMENTS,
        GOLD_UNIQUE_URLS,
        GOLD_FRAUD_ALERTS,
        OPS_WATERMARKS,
        OPS_STREAM_PROGRESS,
        OPS_RECONCILIATIONS,
        OPS_DQ_RESULTS,
    ]


def gold_output_tables(settings: Settings) -> dict[str, Table]:
    """The optional gold outputs (``LAKEHOUSE_GOLD_OUTPUTS``) and their tables."""
    return {
        "hopping": hopping_spend_table(settings),
        "sessions": user_sessions_table(settings),
        "global": user_spend_global_table(settings),
        "firings": firings_table(settings),
        "order_payments": ORDER_PAYMENTS,
        "fraud_alerts": GOLD_FRAUD_ALERTS,
        "unique_urls": GOLD_UNIQUE_URLS,
    }


def kept_tables(settings: Settings) -> list[Table]:
    """The tables this home's streams keep: every table but the gold outputs left out of
    ``LAKEHOUSE_GOLD_OUTPUTS``, in pipeline order."""
    left_out = {t.name for output, t in gold_output_tables(settings).items() if not settings.keeps(output)}
    return [t for t in all_tables(settings) if t.name not in left_out]


def table_by_name(settings: Settings, name: str) -> Table:
    """Look a table up by its ``layer.name``; raises KeyError with the known names."""
    tables = {t.name: t for t in all_tables(settings)}
    if name not in tables:
        raise KeyError(f"unknown table {name!r}; known tables: {', '.join(tables)}")
    return tables[name]
