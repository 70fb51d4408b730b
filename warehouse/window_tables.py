"""The tables whose columns a pipeline's spec declares: silver's events, the late side output, the window tables
(tumbling, hopping, sessions, global, firings) and their corrections log. ``warehouse.catalog`` lists them with
every other table; for the first pipeline (the contract's purchases) they are the contract's tables exactly.

Window tables are event-time windows aligned to the UTC epoch, keyed by the spec's key fields; a window is final
once the watermark passes its end plus the allowed lateness.
"""

from pyspark.sql.types import BooleanType, DateType, DoubleType, IntegerType, LongType, StringType, TimestampType

from warehouse.pipelines import PipelineSpec
from warehouse.settings import Settings
from warehouse.shapes import Shape, field_type
from warehouse.table import Column, Table


def source_position_columns() -> tuple[Column, ...]:
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


def _field_column(spec: PipelineSpec, name: str) -> Column:
    f = spec.fields[name]
    return Column(name, field_type(f), f.description or f"the declared field {name}", nullable=not f.required)


def silver_events_table(spec: PipelineSpec) -> Table:
    """Valid, typed, deduplicated events: the spec's fields (attributes left null when invalid come last, after
    the columns every pipeline adds)."""
    fields = [name for name, f in spec.fields.items() if f.on_invalid == "quarantine"]
    attributes = [name for name, f in spec.fields.items() if f.on_invalid == "null"]
    return Table(
        shaped=True,
        layer="silver",
        short_name="events",
        description=f"Valid, typed events, deduplicated by {spec.id} over all history (first arrival wins).",
        columns=(
            *(_field_column(spec, name) for name in fields),
            Column("event_date", DateType(), f"UTC date of {spec.time.field} (partition)", nullable=False),
            *source_position_columns(),
            Column("payload_hash", StringType(), "SHA-256 of the event's canonical JSON"),
            Column("silver_batch", LongType(), "silver micro-batch that accepted the event", nullable=False),
            Column("event_key", LongType(), f"xxhash64 of {spec.id}: the compact key dedup looks history up by"),
            *(_field_column(spec, name) for name in attributes),
        ),
        partition_by=("event_date",),
        key=(spec.id,),
    )


def late_events_table(spec: PipelineSpec) -> Table:
    """Events that arrived after their window was closed: their id, keys, time and measured fields."""
    shape = Shape.of(spec)
    fields = dict.fromkeys([spec.id, *shape.key_names, spec.time.field, *shape.source_fields])
    return Table(
        shaped=True,
        layer="silver",
        short_name="late_events",
        description="Events that arrived after their window was closed (watermark past window end + lateness).",
        columns=(
            *(_field_column(spec, name) for name in fields),
            Column("window_start", TimestampType(), "start of the closed window the event belongs to", nullable=False),
            Column("window_end", TimestampType(), "end of that window (exclusive)", nullable=False),
            Column("watermark", TimestampType(), "watermark when the event reached the window stage", nullable=False),
            Column("lateness_seconds", DoubleType(), "watermark minus event time, in seconds", nullable=False),
            Column("ingest_time", TimestampType(), "processing time the line was written to bronze"),
            Column("gold_batch", LongType(), "window-stage micro-batch that set the event aside", nullable=False),
        ),
    )


def _key_columns(shape: Shape) -> tuple[Column, ...]:
    return tuple(Column(name, kind, "grouping key", nullable=False) for name, kind in shape.keys)


def _value_columns(shape: Shape, of: str) -> tuple[Column, ...]:
    """The stored values: each measure (an average with the sum and count it is kept by), then the count."""
    described = {m.name: f"{m.fn} of {m.field} over the {of}'s events" for m in shape.measures}
    for m in shape.measures:
        for part in m.parts:
            described.setdefault(part.column, f"the {part.fn} {m.name} is kept by")
    described["event_count"] = f"number of the {of}'s events"
    exact = {m.name for m in shape.measures if m.fn in {"sum", "count"}} | {"event_count"}
    exact |= {p.column for m in shape.measures for p in m.parts if m.derived}
    return tuple(Column(name, kind, described[name], nullable=name not in exact) for name, kind in shape.value_columns)


def _keyed_by(shape: Shape) -> str:
    return ", ".join(shape.key_names)


def _gold_name(settings: Settings, role: str, default: str) -> str:
    spec = settings.spec
    return spec.tables.get(role) or f"{spec.gold_name or spec.name}_{default}"


def tumbling_table(settings: Settings) -> Table:
    """Per key and tumbling event-time window; the name carries the window length (the first pipeline's:
    ``gold.user_spend_5m``)."""
    minutes = settings.windows.minutes
    shape = Shape.of(settings.spec)
    return Table(
        shaped=True,
        layer="gold",
        short_name=_gold_name(settings, "tumbling", f"{minutes}m"),
        description=(
            f"Per {_keyed_by(shape)}, per tumbling {minutes}-minute event-time window: exact measures and "
            "count, revised as events arrive; final once the watermark passes window end + lateness."
        ),
        columns=(
            *_key_columns(shape),
            Column("window_start", TimestampType(), "window start (inclusive, UTC-epoch aligned)", nullable=False),
            Column("window_end", TimestampType(), "window end (exclusive)", nullable=False),
            *_value_columns(shape, "window"),
            Column("revision", IntegerType(), "1 when first written, +1 on every change", nullable=False),
            Column("is_final", BooleanType(), "watermark has passed window end + allowed lateness", nullable=False),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=(*shape.key_names, "window_start"),
        append_only=False,
        zorder_by=tuple(shape.key_names),
        declared=True,
    )


def _minutes_name(minutes: int) -> str:
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def hopping_table(settings: Settings) -> Table:
    """Per key and hopping event-time window: the roll-up of the tumbling windows it covers, so it sees an
    event exactly when its tumbling window does (late ones after reconciliation); final once the watermark
    passes window end + lateness."""
    size, slide = settings.windows.hopping_size_minutes, settings.windows.hopping_slide_minutes
    tumbling = tumbling_table(settings)
    return Table(
        shaped=True,
        layer="gold",
        short_name=_gold_name(settings, "hopping", f"{_minutes_name(size)}_hopping"),
        description=(
            f"Per {_keyed_by(Shape.of(settings.spec))}, per hopping {size}-minute event-time window starting every "
            f"{slide} minutes: exact measures and count (the roll-up of the {settings.windows.minutes}-minute "
            "windows it covers), revised as they change; final once the watermark passes window end + lateness."
        ),
        columns=tumbling.columns,
        key=tumbling.key,
        append_only=False,
        zorder_by=tumbling.zorder_by,
        declared=True,
    )


def sessions_table(settings: Settings) -> Table:
    """Per key, session windows of event time; see transforms.gold.sessions."""
    gap = settings.windows.session_gap_minutes
    shape = Shape.of(settings.spec)
    return Table(
        shaped=True,
        layer="gold",
        short_name=_gold_name(settings, "sessions", "sessions"),
        description=(
            f"Per {_keyed_by(shape)}, sessions of events at most {gap} minutes apart in event time: [first event, "
            f"last event + {gap} min), exact measures and count; every event folded in however late (a late event "
            "bridging two sessions merges them: the later row is retracted); final once the watermark passes "
            "session end + lateness."
        ),
        columns=(
            *_key_columns(shape),
            Column("session_start", TimestampType(), "event time of the session's first event", nullable=False),
            Column("session_end", TimestampType(), "last event's time + the gap (exclusive)", nullable=False),
            Column("last_event_time", TimestampType(), "event time of the session's last event", nullable=False),
            *_value_columns(shape, "session"),
            Column("revision", IntegerType(), "1 when first written, +1 on every change", nullable=False),
            Column("is_final", BooleanType(), "watermark has passed session end + allowed lateness", nullable=False),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=(*shape.key_names, "session_start"),
        append_only=False,
        zorder_by=tuple(shape.key_names),
        declared=True,
    )


def global_table(settings: Settings) -> Table:
    """Per key, one global window (all of time) with a count trigger; see transforms.gold.global_windows."""
    every = settings.windows.global_trigger_count
    shape = Shape.of(settings.spec)
    values = [c for c in _value_columns(shape, "key") if c.name != "event_count"]
    fired = [
        Column(f"fired_{c.name}", c.type, f"{c.name} the last firing emitted")
        for c in values
        if c.name in {m.name for m in shape.measures}
    ]
    return Table(
        shaped=True,
        layer="gold",
        short_name=_gold_name(settings, "global", "global"),
        description=(
            f"Per {_keyed_by(shape)}, one global event-time window over all of time (never final) with a count "
            f"trigger: every {every} events it fires, emitting the accumulated count and measures at that event "
            "(fired_*); event_count and the measures run on between firings. Every event counts, however late."
        ),
        columns=(
            *_key_columns(shape),
            Column("event_count", LongType(), "the key's events so far", nullable=False),
            *values,
            Column("firings", LongType(), f"times the count trigger fired (event_count // {every})", nullable=False),
            Column("fired_event_count", LongType(), "event count at the last firing (a multiple of the trigger)"),
            *fired,
            Column("fired_at", TimestampType(), "processing time of the last firing"),
            Column("updated_at", TimestampType(), "processing time of the last change", nullable=False),
        ),
        key=tuple(shape.key_names),
        append_only=False,
        declared=True,
    )


def firings_table(settings: Settings) -> Table:
    """What the tumbling table emits, one row per firing; see transforms.gold.firings."""
    tumbling = tumbling_table(settings)
    shape = Shape.of(settings.spec)
    exact = {m.name for m in shape.measures if m.fn in {"sum", "count"}} | {"event_count"}
    visible = [
        Column(
            name, kind, "the firing's value (discarding: the change since the last firing)", nullable=name not in exact
        )
        for name, kind in shape.visible
    ]
    return Table(
        shaped=True,
        layer="gold",
        short_name=settings.spec.tables.get("firings") or f"{tumbling.short_name}_firings",
        description=(
            f"Every firing of {tumbling.name}'s windows as a downstream consumer receives it: trigger "
            f"{settings.windows.firing_trigger} (early: partial results each micro-batch; watermark: one on-time "
            f"result), late firings as new revisions, in {settings.windows.accumulation} mode (accumulating: the whole "
            "value; discarding: the change since the previous firing; retracting: the previous value "
            "retracted, then the new one)."
        ),
        columns=(
            *_key_columns(shape),
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
            *visible,
            Column("cause", StringType(), "why the window changed (as in gold.corrections)", nullable=False),
            Column("fired_at", TimestampType(), "processing time of the firing", nullable=False),
            Column("gold_batch", LongType(), "window-stage micro-batch that fired it"),
        ),
        declared=True,
    )


def corrections_table(spec: PipelineSpec) -> Table:
    """Every change of a window row after it was first written: key, old and new values, revision, cause."""
    shape = Shape.of(spec)
    exact = {m.name for m in shape.measures if m.fn in {"sum", "count"}} | {"event_count"}
    values = []
    for name, kind in shape.visible:
        values.append(Column(f"old_{name}", kind, f"{name} before the change", nullable=name not in exact))
        values.append(Column(f"new_{name}", kind, f"{name} after the change", nullable=name not in exact))
    return Table(
        shaped=True,
        layer="gold",
        short_name="corrections",
        description="Every change made to a gold row after it was first written: old and new values and why.",
        columns=(
            Column("table_name", StringType(), "gold table that changed", nullable=False),
            *(Column(name, kind, "key", nullable=False) for name, kind in shape.keys),
            Column("window_start", TimestampType(), "key: window start (sessions: session_start)", nullable=False),
            Column("window_end", TimestampType(), "window end (sessions: session_end)", nullable=False),
            *values,
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
