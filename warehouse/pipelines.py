"""Declared pipelines: one small YAML file per event stream, validated when loaded.

A spec names a stream's fields (types and rules), its id (dedup), event-time and key fields, the measures
its windows aggregate, the windows themselves (tumbling; optionally hopping, sessions, a global window with a
count trigger), its watermark and allowed lateness, its data-quality thresholds and the code outputs attached
to it. Every layer of the lakehouse reads its columns and parameters from here; the purchases stream is the
first spec (``pipelines/purchases.yaml``) and keeps every name of the outside contract.

Specs come from the project's ``pipelines/`` folder and from ``LAKEHOUSE_PIPELINES_DIR``. A mistake stops
with one line naming the file, the field and the rule (:class:`SpecError`). The JSON Schema an editor checks a
spec against (``docs/pipeline.schema.json``) is :func:`json_schema`.

Time semantics declared here: windows are event-time windows aligned to the UTC epoch; the watermark is the
newest event time seen minus ``watermark.delay`` (fixed) or a percentile of observed lag (adaptive); a window
is final once the watermark passes its end plus ``allowed_lateness``; events after that go to the late side
output and are folded in by reconcile.
"""

import functools
import json
import re
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from warehouse.setting_kinds import SettingsError

REPO_PIPELINES_DIR = Path(__file__).resolve().parents[1] / "pipelines"
#: The first pipeline: the contract's purchases stream, whose tables keep their unprefixed names.
FIRST_PIPELINE = "purchases"
DAY_SECONDS = 24 * 3600

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,30}$"
FIELD_PATTERN = r"^[a-z_][a-z0-9_]{0,62}$"
DURATION_PATTERN = r"^[1-9][0-9]*(s|m|h|d)$"
DURATION_OR_ZERO_PATTERN = r"^(0|[1-9][0-9]*(s|m|h|d))$"
TYPE_PATTERN = r"^(string|integer|double|boolean|timestamp|decimal\([1-9][0-9]?, ?[0-9][0-9]?\))$"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": DAY_SECONDS}

#: The code outputs a spec may attach, with the fields (and types) each needs; they stay Python.
CODE_OUTPUTS: dict[str, dict[str, str]] = {
    "fraud_alerts": {"user_id": "string", "amount": "decimal", "event_type": "string"},
    "unique_urls": {"user_id": "string", "url": "string", "event_type": "string"},
    "order_payments": {"user_id": "string", "amount": "decimal", "order_id": "string", "event_type": "string"},
}
#: The window kinds beyond the tumbling one, each a gold table of its own when declared.
DERIVED_KINDS = ("hopping", "sessions", "global", "firings")


class SpecError(SettingsError):
    """A spec breaks a rule: one line naming the file, the field and the rule."""


def seconds(duration: str) -> int:
    """``5m`` → 300: a duration of the spec in whole seconds (``0`` is zero)."""
    if duration == "0":
        return 0
    return int(duration[:-1]) * _UNITS[duration[-1]]


Duration = Annotated[str, Field(pattern=DURATION_PATTERN, description="a duration: 30s, 5m, 1h or 2d")]
DurationOrZero = Annotated[str, Field(pattern=DURATION_OR_ZERO_PATTERN, description="0 or a duration: 30s, 5m, 1h")]
FieldName = Annotated[str, Field(pattern=FIELD_PATTERN, description="a declared field's name")]
Number = Annotated[Decimal | int | float, Field(description="a number")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldSpec(_Strict):
    """One field of the events: its JSON type and the rules a line must keep."""

    type: Annotated[
        str,
        Field(
            pattern=TYPE_PATTERN,
            description="string, integer, double, boolean, timestamp or decimal(p,s) (money: exact, never a float)",
        ),
    ]
    required: bool = Field(False, description="absent or null is invalid (otherwise the column is left null)")
    description: str = ""
    min: Number | None = Field(None, description="smallest allowed value (numbers)")
    max: Number | None = Field(None, description="largest allowed value (numbers)")
    allowed: list[str | int] | None = Field(None, description="the only values allowed")
    pattern: str | None = Field(None, description="a regular expression a string value must match as a whole")
    max_length: int | None = Field(None, ge=1, description="the longest a string value may be, in characters")
    not_blank: bool = Field(True, description="strings: empty or blank is invalid")
    on_invalid: Literal["quarantine", "null"] = Field(
        "quarantine",
        description="what a value breaking a rule gets: the line quarantined (reason naming the field) or, for an "
        "optional attribute, the value left null with the line kept",
    )

    @property
    def kind(self) -> str:
        """The type without its precision: ``decimal(18,2)`` → ``decimal``."""
        return self.type.split("(")[0]

    @property
    def decimal_places(self) -> tuple[int, int]:
        """(precision, scale) of a decimal field."""
        precision, scale = self.type[len("decimal(") : -1].split(",")
        return int(precision), int(scale.strip())

    @property
    def numeric(self) -> bool:
        return self.kind in {"integer", "double", "decimal"}


class TimeSpec(_Strict):
    """The event-time field and how it is written."""

    field: FieldName
    formats: list[Literal["iso8601", "epoch_seconds", "epoch_millis"]] = Field(
        default_factory=lambda: ["iso8601"],
        min_length=1,
        description="iso8601 (Z or an offset; none means UTC), epoch_seconds or epoch_millis (JSON integers)",
    )


class SourceSpec(_Strict):
    """Where the pipeline's lines come from: its own landing folder (default) or a Kafka topic."""

    default: Literal["landing", "kafka"] = "landing"
    landing: str | None = Field(
        None, description="the landing folder, relative to the home's data root (default: pipelines/<name>/landing)"
    )
    topic: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,249}$", description="the Kafka topic (default: name)")


class MeasureSpec(_Strict):
    """One aggregate of the windows: ``fn`` over a numeric field, named ``name`` in every window table."""

    name: FieldName
    fn: Literal["sum", "count", "min", "max", "avg"]
    field: FieldName


class HoppingSpec(_Strict):
    size: Duration
    slide: Duration


class SessionSpec(_Strict):
    gap: Duration


class GlobalSpec(_Strict):
    every: int = Field(ge=1, description="the count trigger: fire every this many events of a key")


class WatermarkSpec(_Strict):
    delay: DurationOrZero = "2m"
    policy: Literal["fixed", "adaptive"] = "fixed"


class FiringSpec(_Strict):
    trigger: Literal["early", "watermark"] = "early"
    accumulation: Literal["accumulating", "discarding", "retracting"] = "accumulating"


class WindowsSpec(_Strict):
    """Event-time windows aligned to the UTC epoch; a tumbling window is always kept."""

    tumbling: Duration
    hopping: HoppingSpec | None = None
    sessions: SessionSpec | None = None
    global_: GlobalSpec | None = Field(None, alias="global")
    watermark: WatermarkSpec = Field(default_factory=WatermarkSpec)
    allowed_lateness: DurationOrZero = "1m"
    firings: FiringSpec | None = Field(None, description="log every firing of the tumbling windows in a table")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RangeSpec(_Strict):
    min: Number | None = None
    max: Number | None = None


class QualitySpec(_Strict):
    """Thresholds of the pipeline's data-quality suites (ranges block; the rates and freshness warn)."""

    freshness: Duration = "15m"
    max_late_rate: float = Field(0.05, ge=0, le=1)
    max_quarantine_rate: float = Field(0.05, ge=0, le=1)
    future_tolerance: DurationOrZero = "5m"
    ranges: dict[FieldName, RangeSpec] = Field(default_factory=dict)


class PipelineSpec(_Strict):
    """A declared event stream."""

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="the Dagster asset group and the tables' prefix")]
    description: str = ""
    source: SourceSpec = Field(default_factory=SourceSpec)
    fields: dict[FieldName, FieldSpec] = Field(min_length=1, description="the fields, in the order rules are checked")
    id: FieldName = Field(description="the idempotency key: the first arrival of an id counts")
    time: TimeSpec
    keys: list[FieldName] = Field(min_length=1, description="the grouping key fields of every window")
    measures: list[MeasureSpec] = Field(default_factory=list)
    windows: WindowsSpec
    quality: QualitySpec = Field(default_factory=QualitySpec)
    outputs: list[Literal["fraud_alerts", "unique_urls", "order_payments"]] = Field(
        default_factory=list, description="code outputs attached to the pipeline (they stay Python)"
    )
    gold_name: str | None = Field(
        None,
        pattern=FIELD_PATTERN,
        description="what gold tables are named after (default: the pipeline's name): <gold_name>_<size>, "
        "<gold_name>_<size>_hopping, <gold_name>_sessions, <gold_name>_global",
    )
    tables: dict[Literal["tumbling", "hopping", "sessions", "global", "firings"], str] = Field(
        default_factory=dict, description="gold table names other than the defaults"
    )

    @property
    def is_first(self) -> bool:
        return self.name == FIRST_PIPELINE

    def declared(self) -> dict[str, Any]:
        """The spec as declared (defaults filled in): what ``lakehouse pipelines --json`` prints."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _where(loc: Iterable[Any]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _check(spec: PipelineSpec) -> None:
    """The rules that span fields; raises SpecError(field, rule) without the file (the loader adds it)."""

    def fail(where: str, rule: str) -> None:
        raise SpecError(f"{where}: {rule}")

    declared = spec.fields
    for name, f in declared.items():
        if (f.min is not None or f.max is not None) and not f.numeric:
            fail(f"fields.{name}", f"min and max apply to numbers, not to a {f.type}")
        if f.min is not None and f.max is not None and Decimal(str(f.min)) > Decimal(str(f.max)):
            fail(f"fields.{name}", f"min ({f.min}) must not exceed max ({f.max})")
        if (f.pattern is not None or f.max_length is not None) and f.kind != "string":
            fail(f"fields.{name}", f"pattern and max_length apply to strings, not to a {f.type}")
        if f.pattern is not None:
            try:
                re.compile(f.pattern)
            except re.error as error:
                fail(f"fields.{name}.pattern", f"not a regular expression ({error})")
        if f.allowed is not None and f.kind not in {"string", "integer"}:
            fail(f"fields.{name}", f"allowed values apply to strings and integers, not to a {f.type}")
        if f.kind == "decimal":
            precision, scale = f.decimal_places
            if not 1 <= precision <= 38 or scale > precision:
                fail(f"fields.{name}.type", f"decimal(p,s) needs 1 <= p <= 38 and s <= p, got {f.type}")
        if f.on_invalid == "null" and f.required:
            fail(f"fields.{name}.on_invalid", "a required field cannot be left null: use quarantine")

    def needs(where: str, name: str, kinds: set[str], what: str) -> FieldSpec:
        if name not in declared:
            fail(where, f"{name!r} is not a declared field (declared: {', '.join(declared)})")
        f = declared[name]
        if f.kind not in kinds:
            fail(where, f"{what} must be a {' or '.join(sorted(kinds))} field, {name!r} is a {f.type}")
        if not f.required:
            fail(where, f"{what} {name!r} must be required: true")
        return f

    needs("id", spec.id, {"string", "integer"}, "the id")
    for i, m in enumerate(spec.measures):
        if m.field == spec.id:
            fail(f"measures.{i}.field", "the id field is not a measure")
    needs("time.field", spec.time.field, {"timestamp"}, "the event-time field")
    if len(set(spec.keys)) != len(spec.keys):
        fail("keys", "a key field is named twice")
    for i, key in enumerate(spec.keys):
        needs(f"keys.{i}", key, {"string", "integer", "boolean"}, "a key field")
    reserved = {"window_start", "window_end", "event_count", "revision", "is_final", "updated_at", "event_date"}
    reserved |= {"session_start", "session_end", "last_event_time", "firings", "cause"}
    names = [m.name for m in spec.measures]
    for i, m in enumerate(spec.measures):
        if m.field not in declared:
            fail(f"measures.{i}.field", f"{m.field!r} is not a declared field (declared: {', '.join(declared)})")
        if not declared[m.field].numeric:
            fail(f"measures.{i}", f"{m.fn} needs a number, {m.field!r} is a {declared[m.field].type}")
        if m.name in reserved or m.name in spec.keys or m.name in names[:i]:
            fail(f"measures.{i}.name", f"{m.name!r} is taken (a key, another measure or a window column)")
    for name in reserved & set(declared):
        fail(f"fields.{name}", f"{name!r} is a column every pipeline's tables add: rename the field")
    # Inside the lakehouse the id and the event time travel as event_id and event_time.
    for name, role in (("event_id", spec.id), ("event_time", spec.time.field)):
        if name in declared and role != name:
            fail(f"fields.{name}", f"{name!r} may only name the {'id' if name == 'event_id' else 'event-time'} field")
    for i, m in enumerate(spec.measures):
        if "__" in m.name:
            fail(f"measures.{i}.name", f"{m.name!r} has '__', which names the parts an average is kept by")
    if spec.windows.firings is not None and spec.windows.firings.accumulation == "discarding":
        for i, m in enumerate(spec.measures):
            if m.fn not in {"sum", "count"}:
                fail(f"measures.{i}", f"discarding firings emit differences, which a {m.fn} has not: use sum or count")

    w = spec.windows
    for where, duration in (
        ("windows.tumbling", w.tumbling),
        ("windows.hopping.size", w.hopping and w.hopping.size),
        ("windows.hopping.slide", w.hopping and w.hopping.slide),
        ("windows.sessions.gap", w.sessions and w.sessions.gap),
    ):
        if duration and seconds(duration) % 60:
            fail(where, f"windows are whole minutes (sub-minute windows are not supported yet), got {duration}")
    tumbling = seconds(w.tumbling)
    if DAY_SECONDS % tumbling:
        fail("windows.tumbling", f"must divide a day so windows align to UTC days, got {w.tumbling}")
    if w.hopping is not None:
        size, slide = seconds(w.hopping.size), seconds(w.hopping.slide)
        if size % slide:
            fail("windows.hopping.slide", f"must divide the hopping size ({w.hopping.size}), got {w.hopping.slide}")
        if slide % tumbling or DAY_SECONDS % slide:
            fail(
                "windows.hopping.slide",
                f"must be a multiple of the tumbling window ({w.tumbling}) and divide a day: hopping windows are "
                f"sums of tumbling ones, got {w.hopping.slide}",
            )
    for output in spec.outputs:
        for name, kind in CODE_OUTPUTS[output].items():
            if name not in declared or declared[name].kind != kind:
                fail("outputs", f"{output} needs a {kind} field {name!r}; this spec does not declare one")
    if len(set(spec.outputs)) != len(spec.outputs):
        fail("outputs", "an output is named twice")
    for i, (name, rng) in enumerate(spec.quality.ranges.items()):
        if name not in declared or not declared[name].numeric:
            fail(f"quality.ranges.{name}", f"ranges apply to declared numeric fields ({i + 1}th range)")
        if rng.min is not None and rng.max is not None and Decimal(str(rng.min)) > Decimal(str(rng.max)):
            fail(f"quality.ranges.{name}", f"min ({rng.min}) must not exceed max ({rng.max})")
    for role, table in spec.tables.items():
        if not re.fullmatch(FIELD_PATTERN, table):
            fail(f"tables.{role}", f"a table name is lower-case letters, digits and _, got {table!r}")


def parse_spec(data: Any, origin: str) -> PipelineSpec:
    """Validate one spec's data (read from ``origin``); a mistake raises SpecError naming ``origin``."""
    if not isinstance(data, dict):
        raise SpecError(f"{origin}: a pipeline spec is a YAML mapping (name:, fields:, id:, …)")
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        rule = first["msg"]
        if first["type"] == "extra_forbidden":
            rule = "is not a setting of a pipeline spec (see docs/pipeline.schema.json)"
        elif first["type"] == "string_pattern_mismatch":
            rule = f"{first['msg'].lower()}, got {first.get('input')!r}"
        raise SpecError(f"{origin}: {_where(first['loc'])}: {rule}") from None
    try:
        _check(spec)
    except SpecError as error:
        raise SpecError(f"{origin}: {error}") from None
    return spec


def load_spec(path: Path) -> PipelineSpec:
    """Read and validate one spec file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        raise SpecError(f"{path}: {where}: not valid YAML ({getattr(error, 'problem', error)})") from None
    except OSError as error:
        raise SpecError(f"{path}: cannot be read ({error.strerror or error})") from None
    spec = parse_spec(data, str(path))
    if path.stem != spec.name:
        raise SpecError(f"{path}: name: must match the file's name ({path.stem!r}), got {spec.name!r}")
    return spec


def spec_files(folders: Iterable[Path]) -> list[Path]:
    """The ``*.yaml`` and ``*.yml`` files of each folder, in name order."""
    found: list[Path] = []
    for folder in folders:
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if p.suffix in {".yaml", ".yml"} and p.is_file())
    return found


def load_specs(folders: Iterable[Path]) -> dict[str, PipelineSpec]:
    """Every spec of ``folders`` by name, the first pipeline first; rules across specs checked (no two share
    a name, a landing folder or a topic)."""
    specs: dict[str, PipelineSpec] = {}
    origin: dict[str, Path] = {}
    for path in spec_files(folders):
        spec = load_spec(path)
        if spec.name in specs:
            raise SpecError(f"{path}: name: {spec.name!r} is declared in {origin[spec.name]} too")
        specs[spec.name] = spec
        origin[spec.name] = path
    landings: dict[str, str] = {}
    topics: dict[str, str] = {}
    for name, spec in specs.items():
        landing = landing_folder(spec)
        if landing in landings:
            raise SpecError(
                f"{origin[name]}: source.landing: {landing!r} is the landing folder of {landings[landing]!r} too"
            )
        landings[landing] = name
        topic = spec.source.topic
        if topic is not None and topic in topics:
            raise SpecError(f"{origin[name]}: source.topic: {topic!r} is the topic of {topics[topic]!r} too")
        if topic is not None:
            topics[topic] = name
    return dict(sorted(specs.items(), key=lambda item: (not item[1].is_first, item[0])))


def landing_folder(spec: PipelineSpec) -> str:
    """The pipeline's landing folder, relative to the home's data root."""
    if spec.source.landing is not None:
        return spec.source.landing.strip("/")
    return "landing" if spec.is_first else f"pipelines/{spec.name}/landing"


def _spec_stamp(folders: tuple[Path, ...]) -> tuple:
    return tuple((path, path.stat().st_mtime_ns) for path in spec_files(folders))


@functools.cache
def _load_declared(stamp: tuple, folders: tuple[Path, ...]) -> dict[str, PipelineSpec]:
    return load_specs(folders)


def declared_pipelines(extra: Path | None = None) -> dict[str, PipelineSpec]:
    """Every declared pipeline (the project's ``pipelines/`` and ``extra``), the first one first; read again
    when a file changes. A bad spec stops with one line naming the file, the field and the rule."""
    folders = (REPO_PIPELINES_DIR,) if extra is None else (REPO_PIPELINES_DIR, extra)
    specs = _load_declared(_spec_stamp(folders), folders)
    if FIRST_PIPELINE not in specs:
        raise SpecError(
            f"{REPO_PIPELINES_DIR / (FIRST_PIPELINE + '.yaml')}: is missing: the first pipeline (the contract's "
            "purchases stream) must be declared"
        )
    return specs


def first_spec() -> PipelineSpec:
    """The first pipeline's spec: the contract's purchases stream."""
    return declared_pipelines()[FIRST_PIPELINE]


def declared_outputs(spec: PipelineSpec) -> frozenset[str]:
    """The gold outputs a spec keeps: its derived windows and firings, and its code outputs."""
    w = spec.windows
    kinds = {"hopping": w.hopping, "sessions": w.sessions, "global": w.global_, "firings": w.firings}
    return frozenset(kind for kind in DERIVED_KINDS if kinds[kind] is not None) | frozenset(spec.outputs)


def window_fields(spec: PipelineSpec) -> dict[str, Any]:
    """The spec's windows as ``WindowSettings`` fields (a window kind it leaves out keeps the default: nothing
    keeps that window)."""
    w = spec.windows
    declared: dict[str, Any] = {
        "minutes": seconds(w.tumbling) // 60,
        "allowed_lateness_seconds": seconds(w.allowed_lateness),
        "hopping_size_minutes": seconds(w.tumbling) // 60,
        "hopping_slide_minutes": seconds(w.tumbling) // 60,
    }
    if w.hopping is not None:
        declared.update(
            hopping_size_minutes=seconds(w.hopping.size) // 60, hopping_slide_minutes=seconds(w.hopping.slide) // 60
        )
    if w.sessions is not None:
        declared["session_gap_minutes"] = seconds(w.sessions.gap) // 60
    if w.global_ is not None:
        declared["global_trigger_count"] = w.global_.every
    if w.firings is not None:
        declared.update(firing_trigger=w.firings.trigger, accumulation=w.firings.accumulation)
    return declared


def watermark_fields(spec: PipelineSpec) -> dict[str, Any]:
    """The spec's watermark as ``WatermarkSettings`` fields."""
    return {"delay_seconds": seconds(spec.windows.watermark.delay), "policy": spec.windows.watermark.policy}


def quality_fields(spec: PipelineSpec) -> dict[str, Any]:
    """The spec's thresholds as ``QualitySettings`` fields (an ``amount`` range is the purchases' bounds)."""
    q = spec.quality
    declared: dict[str, Any] = {
        "freshness_seconds": seconds(q.freshness),
        "max_late_rate": q.max_late_rate,
        "max_quarantine_rate": q.max_quarantine_rate,
        "future_tolerance_seconds": seconds(q.future_tolerance),
    }
    amount = q.ranges.get("amount")
    if amount is not None and amount.min is not None:
        declared["amount_min"] = Decimal(str(amount.min))
    if amount is not None and amount.max is not None:
        declared["amount_max"] = Decimal(str(amount.max))
    return declared


@functools.cache
def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (``docs/pipeline.schema.json``)."""
    schema = PipelineSpec.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Lakehouse pipeline spec"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
