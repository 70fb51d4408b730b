"""Draft a pipeline spec from sample JSON Lines (for ``lakehouse pipeline new NAME --sample FILE.jsonl``).

:func:`draft_spec` reads sample events (one JSON object a line), infers each top-level field's type and whether
it is required, proposes the id, event-time and key fields, the measures and default windows, and lays them out
as a spec file in the order and style of ``pipelines/readings.yaml``. Each guess is named in the notes it
returns, and the id, time and keys lines carry a ``# review:`` comment: a draft is a start, not a contract. The
text is validated with :func:`warehouse.pipelines.parse_spec` before it is returned.
"""

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import yaml

from warehouse.pipelines import FIELD_PATTERN, NAME_PATTERN, parse_spec

SCHEMA_LINE = "# yaml-language-server: $schema=../docs/pipeline.schema.json"
#: The columns every pipeline's tables add (the ``reserved`` names of ``_check``): no field may be named so.
TABLE_COLUMNS = frozenset(
    {"window_start", "window_end", "event_count", "revision", "is_final", "updated_at", "event_date"}
    | {"session_start", "session_end", "last_event_time", "firings", "cause"}
)
ALLOWED_MAX_DISTINCT = 8  # a string with at most this many distinct values …
ALLOWED_MIN_VALUES = 20  # … over at least this many values gets an allowed: list
MILLIS_RANGE = range(10**12, 10**13)  # 2001-09-09 .. 2286-11-20 in epoch milliseconds
SECONDS_RANGE = range(10**9, 10**10)  # the same years in epoch seconds
MONEY_WORDS = ("amount", "price", "total", "cost", "value")
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}(:?\d{2})?)?")


@dataclass(eq=False)
class _Field:
    """What the sample shows of one top-level field."""

    name: str
    values: list[Any] = field(default_factory=list)  # the non-null values, floats as Decimal (their JSON text)
    type: str = "string"
    formats: list[str] = field(default_factory=list)
    clean: bool = True  # one JSON type throughout (mixed types are declared strings, never proposed)

    def distinct(self) -> int:
        return len(set(self.values))


def _kind(value: Any) -> str:
    """The JSON type of a value: boolean, integer, number (with a fraction), string or nested."""
    kinds = ((bool, "boolean"), (int, "integer"), (Decimal, "number"), (str, "string"))
    return next((kind for python_type, kind in kinds if isinstance(value, python_type)), "nested")


def _is_iso(text: str) -> bool:
    """An ISO-8601 date-time (T or a space, optional Z or offset) that also parses as one."""
    try:
        return bool(_ISO.fullmatch(text)) and bool(datetime.fromisoformat(text))
    except ValueError:
        return False


def _timeish(name: str) -> bool:
    """The name suggests a time: it contains time or date, ends in _at or has a ts part."""
    return "time" in name or "date" in name or name.endswith("_at") or "ts" in name.split("_")


def _fraction_digits(value: Decimal | int) -> int:
    """The decimals written in the JSON text: ``4.50`` → 2."""
    exponent = value.as_tuple().exponent if isinstance(value, Decimal) else 0
    return max(0, -exponent) if isinstance(exponent, int) else 99


def _infer(f: _Field, notes: list[str]) -> None:
    """Set the field's type (and timestamp formats) from its values."""
    kinds = {_kind(v) for v in f.values}
    if not kinds:
        notes.append(f"field {f.name} is null in every line: declared an optional string — review")
    elif kinds == {"boolean"}:
        f.type = "boolean"
    elif kinds == {"integer"}:
        if all(v in MILLIS_RANGE for v in f.values):
            f.type, f.formats = "timestamp", ["epoch_millis"]
        elif all(v in SECONDS_RANGE for v in f.values) and _timeish(f.name):
            f.type, f.formats = "timestamp", ["epoch_seconds"]
        else:
            f.type = "integer"
    elif kinds <= {"integer", "number"}:
        money = any(word in f.name for word in MONEY_WORDS)
        cents = all(_fraction_digits(v) <= 2 and abs(v) < 10**16 for v in f.values)
        f.type = "decimal(18,2)" if money and cents else "double"
    elif kinds == {"string"}:
        if all(_is_iso(v) for v in f.values):
            f.type, f.formats = "timestamp", ["iso8601"]
    else:
        f.clean = False
        notes.append(f"field {f.name} has mixed types ({', '.join(sorted(kinds))}): declared a string — review")


def _flow(value: Any) -> str:
    """One value in YAML flow style, quoted where YAML needs it."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10**9)
    return text.removesuffix("\n...\n").rstrip("\n")


def _read(sample_lines: Iterable[str], notes: list[str]) -> tuple[dict[str, _Field], int]:
    """The fields in first-seen order and the number of lines that are JSON objects."""
    fields: dict[str, _Field] = {}
    objects = bad = first_bad = 0

    def no_constants(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    for number, line in enumerate(sample_lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line, parse_float=Decimal, parse_constant=no_constants)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            bad += 1
            first_bad = first_bad or number
            continue
        objects += 1
        for name, value in event.items():
            f = fields.setdefault(name, _Field(name))
            if value is not None:
                f.values.append(value)
    if not objects:
        raise ValueError(f"no line of the sample is a JSON object ({bad} non-blank lines read)")
    if bad:
        notes.append(f"{bad} of {objects + bad} lines are not JSON objects and were left out (first: line {first_bad})")
    return fields, objects


def _declarable(seen: dict[str, _Field], notes: list[str]) -> dict[str, _Field]:
    """The fields a spec can declare, their types inferred; the others skipped with a note."""
    fields: dict[str, _Field] = {}
    for name, f in seen.items():
        if not re.fullmatch(FIELD_PATTERN, name):
            notes.append(f"field {name!r} skipped: not a declarable name ({FIELD_PATTERN}), kept in bronze")
        elif name in TABLE_COLUMNS:
            notes.append(f"field {name} skipped: every pipeline's tables add a column of that name, kept in bronze")
        elif any(isinstance(v, dict | list) for v in f.values):
            notes.append(f"field {name} skipped: nested object or array, kept in bronze, not declared")
        else:
            _infer(f, notes)
            fields[name] = f
    return fields


def _time_rank(name: str) -> int:
    """0 for event_time, then *_at, *time*, a ts part, anything else."""
    ranks = (name == "event_time", name.endswith("_at"), "time" in name, "ts" in name.split("_"), True)
    return ranks.index(True)


def _propose(name: str, required: list[_Field], n: int) -> tuple[_Field | None, list[_Field], _Field | None]:
    """The id, the timestamps (the proposed time field first) and the key among the required fields."""
    noun = re.sub(r"(?<!s)s$", "", re.sub(r"ies$", "y", name.split("_")[-1]))  # parcels → parcel
    ids = [f for f in required if f.clean and f.type in {"string", "integer"} and f.distinct() == n]
    ids.sort(key=lambda f: (not (f.name.endswith("_id") or f.name == "id"), noun not in f.name, len(f.name)))
    times = sorted((f for f in required if f.type == "timestamp"), key=lambda f: _time_rank(f.name))
    strings = [f for f in required if f.clean and f.type == "string" and f not in ids[:1]]
    repeated = [f for f in strings if 2 <= f.distinct() <= n / 2]
    if repeated:
        key = min(repeated, key=lambda f: (not f.name.endswith("_id"), f.distinct()))
    else:
        key = min((f for f in strings if f.distinct() > 1), key=_Field.distinct, default=None)
    return (ids[0] if ids else None), times, key


def _field_line(f: _Field, required: bool, notes: list[str]) -> str:
    """The field's flow-style line of ``fields:``."""
    attrs: dict[str, Any] = {"type": f.type}
    if required:
        attrs["required"] = True
    if f.type == "string" and f.clean and any(not v.strip() for v in f.values):
        attrs["not_blank"] = False
        notes.append(f"field {f.name} has blank values: not_blank: false — review")
    distinct = sorted(set(f.values)) if f.type == "string" and f.clean else []
    few = 0 < len(distinct) <= ALLOWED_MAX_DISTINCT and all(v.isprintable() for v in distinct)
    if few and len(f.values) >= ALLOWED_MIN_VALUES:
        attrs["allowed"] = distinct
        notes.append(f"field {f.name}: {len(distinct)} distinct values, allowed: proposed — review")
    return f"  {f.name}: {_flow(attrs)}"


def _measures(fields: Iterable[_Field], notes: list[str]) -> list[str]:
    """The ``measures:`` lines: decimals and integers summed, doubles averaged and maxed."""
    lines: list[str] = []
    for f in fields:
        if f.type not in {"integer", "double", "decimal(18,2)"}:
            continue
        for prefix, fn in [("avg", "avg"), ("max", "max")] if f.type == "double" else [("total", "sum")]:
            measure = f"{prefix}_{f.name}"
            if re.fullmatch(FIELD_PATTERN, measure):
                lines.append(f"  - {_flow({'name': measure, 'fn': fn, 'field': f.name})}")
                notes.append(f"measure proposed: {measure} ({fn} of {f.name}) — review")
            else:
                notes.append(f"measure {measure} skipped: the name is too long — name it by hand")
    return ["measures:", *lines] if lines else ["measures: []"]


_TAIL = """\
windows:
  tumbling: 5m
  watermark: {delay: 2m, policy: fixed}
  allowed_lateness: 1m
quality:
  freshness: 15m
  max_late_rate: 0.05
  max_quarantine_rate: 0.05
  future_tolerance: 5m
"""


def draft_spec(name: str, sample_lines: Iterable[str], origin: str = "sample") -> tuple[str, list[str]]:
    """Draft pipeline ``name``'s spec from sample JSON Lines: (the YAML text, notes on what to review)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValueError(
            "a pipeline name is lower-case letters, digits and _, starts with a letter and has at most 31 "
            f"characters, got {name!r}"
        )
    notes: list[str] = []
    origin = " ".join(origin.splitlines())
    seen, n = _read(sample_lines, notes)
    fields = _declarable(seen, notes)
    required = [f for f in fields.values() if len(f.values) == n]  # present and non-null in every line
    id_field, times, key = _propose(name, required, n)
    needs = {
        "id (a required string or integer field unique in every line)": id_field,
        "time field (a required ISO-8601 or epoch timestamp field)": times,
        "key (a required string field with repeated values)": key,
    }
    missing = [what for what, found in needs.items() if not found]
    if missing or id_field is None or key is None:
        raise ValueError(f"cannot draft {name!r} from {origin}: found no {', no '.join(missing)}")

    time_field, formats = times[0], ", ".join(times[0].formats)
    others = (
        f", other timestamps: {', '.join(f'{f.name} ({f.formats[0]})' for f in times[1:])}" if len(times) > 1 else ""
    )
    out = [
        SCHEMA_LINE,
        f'# Drafted from {origin} by inference: check every line marked "review".',
        f"name: {name}",
        f"description: {_flow(f'{name} events (drafted from a sample: review)')}",
        "source:\n  default: landing",
        "fields:",
        *(_field_line(f, f in required, notes) for f in fields.values()),
        f"id: {id_field.name}  # review: unique in {n} of {n} lines",
        f"time:  # review: {formats}{others}\n  field: {time_field.name}\n  formats: [{formats}]",
        f"keys: [{key.name}]  # review: {key.distinct()} distinct values in {n} lines",
    ]
    notes.append(f"id field proposed: {id_field.name} (unique in {n} of {n} lines) — review")
    notes.append(f"time field proposed: {time_field.name} ({formats}{others}) — review")
    notes.append(f"key proposed: {key.name} ({key.distinct()} distinct values in {n} lines) — review")
    out += _measures((f for f in fields.values() if f not in (id_field, time_field, key)), notes)
    notes.append("windows: tumbling 5m, watermark 2m fixed, allowed lateness 1m (defaults) — review")
    text = "\n".join(out) + "\n" + _TAIL
    parse_spec(yaml.safe_load(text), origin)  # a draft that does not validate is a bug of this module
    return text, notes
