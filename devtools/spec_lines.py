"""Synthetic lines for any declared pipeline, from its spec: what ``lakehouse generate --pipeline NAME`` writes
for a pipeline other than the purchases stream (whose own generator is ``devtools.synthetic``).

Each event gets a unique id, keys drawn from a few values (the allowed ones where the spec lists them), an event
time moving forward at ``rate`` events a second with bounded disorder (a ``late_fraction`` far behind), and every
other field a value its rules accept (optional ones left out now and then). Duplicates (a fifth conflicting)
and invalid lines (each breaking one rule of the spec) are mixed in. Deterministic for a seed.
"""

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from warehouse.pipelines import FieldSpec, PipelineSpec


@dataclass(frozen=True)
class SpecStream:
    """What to generate: how many first arrivals, how many keys, how fast and how disordered in event time."""

    events: int = 1000
    keys: int = 8
    rate: float = 20.0
    disorder_seconds: float = 30.0
    duplicate_fraction: float = 0.05
    late_fraction: float = 0.02
    late_seconds: float = 900.0
    invalid_fraction: float = 0.02
    seed: int = 7
    start: datetime = datetime(2024, 1, 1, tzinfo=UTC)


def _time(moment: datetime, formats: list[str], rng: random.Random) -> str | int:
    chosen = rng.choice(formats)
    if chosen == "epoch_millis":
        return int(moment.timestamp() * 1000)
    if chosen == "epoch_seconds":
        return int(moment.timestamp())
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _number(f: FieldSpec, rng: random.Random) -> Decimal | int | float:
    low = Decimal(str(f.min)) if f.min is not None else Decimal(0)
    high = Decimal(str(f.max)) if f.max is not None else low + 1000
    if f.kind == "integer":
        return rng.randint(int(low), int(high))
    scale = f.decimal_places[1] if f.kind == "decimal" else 2
    step = Decimal(1).scaleb(-scale)
    value = low + step * rng.randint(0, int((high - low) / step))
    return value if f.kind == "decimal" else float(value)


def _string(name: str, f: FieldSpec, rng: random.Random, key_values: list[str] | None) -> str:
    if f.allowed is not None:
        return str(rng.choice(f.allowed))
    if key_values is not None:
        return rng.choice(key_values)
    if f.pattern is not None:
        return _matching(f.pattern, rng)
    return f"{name}-{rng.randint(1, 99)}"


def _matching(pattern: str, rng: random.Random) -> str:
    """A value for the simple patterns a spec writes (``dev-[0-9]{1,6}``, ``[A-Z]{2,4}``); else one found by
    trying (raising when none is)."""
    prefix = re.match(r"^([A-Za-z_-]*)\[0-9\]", pattern)
    if prefix:
        candidate = f"{prefix.group(1)}{rng.randint(1, 999)}"
        if re.fullmatch(pattern, candidate):
            return candidate
    for candidate in ("AB", "ABC", "X1", "a", "A", "abc", "1"):
        if re.fullmatch(pattern, candidate):
            return candidate
    raise ValueError(f"cannot make up a value matching {pattern!r}: generate lines for this pipeline by hand")


def _keys(spec: PipelineSpec, stream: SpecStream, rng: random.Random) -> list[dict[str, object]]:
    """The key combinations events are spread over."""
    combos = []
    for index in range(stream.keys):
        combo: dict[str, object] = {}
        for name in spec.keys:
            f = spec.fields[name]
            if f.allowed is not None:
                combo[name] = f.allowed[index % len(f.allowed)]
            elif f.kind == "integer":
                combo[name] = index
            elif f.kind == "boolean":
                combo[name] = index % 2 == 0
            elif f.pattern is not None:
                combo[name] = _matching(f.pattern, rng)
            else:
                combo[name] = f"{name}-{index}"
        combos.append(combo)
    return combos


def _broken(spec: PipelineSpec, event: dict[str, object], rng: random.Random) -> str:
    """The event with one rule broken: a required field dropped, a wrong type, or not JSON at all."""
    required = [name for name, f in spec.fields.items() if f.required]
    choice = rng.randrange(3)
    if choice == 0 and required:
        return json.dumps({k: v for k, v in event.items() if k != rng.choice(required)}, default=str)
    if choice == 1:
        return json.dumps({**event, spec.time.field: [1, 2]}, default=str)
    return "{not json"


def _dump(event: dict[str, object]) -> str:
    # Decimals as their exact text: JSON numbers, not strings.
    return json.dumps({k: (float(v) if isinstance(v, Decimal) else v) for k, v in event.items()})


def spec_lines(spec: PipelineSpec, stream: SpecStream) -> Iterator[str]:
    """Yield ``stream.events`` valid first arrivals plus duplicates and invalid lines, in arrival order."""
    rng = random.Random(stream.seed)
    combos = _keys(spec, stream, rng)
    recent: list[dict[str, object]] = []
    for index in range(stream.events):
        nominal = stream.start + timedelta(seconds=index / stream.rate)
        behind = stream.late_seconds * (1 + rng.random()) if rng.random() < stream.late_fraction else 0.0
        moment = nominal - timedelta(seconds=behind or rng.random() * stream.disorder_seconds)
        serial = index if spec.fields[spec.id].kind == "integer" else f"{spec.name}-{stream.seed}-{index:09d}"
        event: dict[str, object] = {spec.id: serial, **rng.choice(combos)}
        event[spec.time.field] = _time(moment, spec.time.formats, rng)
        for name, f in spec.fields.items():
            if name in event or (not f.required and rng.random() < 0.2):
                continue
            if f.numeric:
                event[name] = _number(f, rng)
            elif f.kind == "boolean":
                event[name] = rng.random() < 0.5
            elif f.kind == "timestamp":
                event[name] = _time(moment, spec.time.formats, rng)
            else:
                event[name] = _string(name, f, rng, None)
        yield _dump(event)
        recent = [*recent[-499:], event]
        if rng.random() < stream.duplicate_fraction:
            again = dict(rng.choice(recent))
            numeric = [n for n, f in spec.fields.items() if f.numeric and n in again and n not in spec.keys]
            if numeric and rng.random() < 0.2:  # a conflicting redelivery: same id, another value
                again[numeric[0]] = _number(spec.fields[numeric[0]], rng)
            yield _dump(again)
        if rng.random() < stream.invalid_fraction:
            yield _broken(spec, event, rng)
