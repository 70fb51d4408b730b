"""A pipeline's measures as Spark expressions: from events to parts, parts combined, parts to values.

Every window table keeps each measure by parts (``warehouse.shapes``): sums and counts add up, mins and maxes
take the smaller and the larger, an average is its sum over its count. So a tumbling window revised by a batch
(old parts ⊕ the batch's), a hopping window rolled up from tumbling panes and two sessions merged into one are
all exact from their parts, and a sum of money stays decimal. A sum of no values is 0; a min, max or average
of no values is null.

Column naming: a part or value column ``c`` of the window table is ``<prefix>c`` in a change's rows
(``old_c``, ``delta_c``, ``new_c``).
"""

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType

from warehouse.shapes import Part, Shape

_AGGREGATE = {"sum": F.sum, "count": F.count, "min": F.min, "max": F.max}
_ROLL_UP = {"sum": F.sum, "count": F.sum, "min": F.min, "max": F.max}


def _zero(kind: DataType) -> Column:
    return F.lit(0).cast(kind)


def _of_events(part: Part) -> Column:
    if part.field is None:
        return F.count("*")
    value = _AGGREGATE[part.fn](part.field)
    return F.coalesce(value.cast(part.type), _zero(part.type)) if part.adds else value.cast(part.type)


def event_parts(shape: Shape, prefix: str = "") -> list[Column]:
    """Aggregates of a group of events: every part, named ``<prefix><column>``."""
    return [_of_events(part).alias(prefix + part.column) for part in shape.parts]


def one_event_parts(shape: Shape, prefix: str = "") -> list[Column]:
    """Every part of a single event (a row of events), named ``<prefix><column>``: what it adds to a window."""
    found = []
    for part in shape.parts:
        if part.field is None:
            value = F.lit(1).cast(part.type)
        elif part.fn == "count":
            value = F.when(F.col(part.field).isNotNull(), 1).otherwise(0).cast(part.type)
        elif part.fn == "sum":
            value = F.coalesce(F.col(part.field).cast(part.type), _zero(part.type))
        else:
            value = F.col(part.field).cast(part.type)
        found.append(value.alias(prefix + part.column))
    return found


def rolled_up_parts(shape: Shape, source: str = "", prefix: str = "") -> list[Column]:
    """Aggregates of a group of stored rows (their parts named ``<source><column>``): every part of the group,
    named ``<prefix><column>``."""
    found = []
    for part in shape.parts:
        value = _ROLL_UP[part.fn](source + part.column)
        value = F.coalesce(value.cast(part.type), _zero(part.type)) if part.adds else value.cast(part.type)
        found.append(value.alias(prefix + part.column))
    return found


def combined_parts(shape: Shape, old: str, delta: str, new: str) -> list[Column]:
    """``<new>c`` = ``<old>c`` ⊕ ``<delta>c`` for every part (a missing side counts as nothing)."""
    found = []
    for part in shape.parts:
        a, b = F.col(old + part.column), F.col(delta + part.column)
        if part.adds:
            value = (F.coalesce(a, _zero(part.type)) + F.coalesce(b, _zero(part.type))).cast(part.type)
        else:
            value = (F.least if part.fn == "min" else F.greatest)(a, b).cast(part.type)
        found.append(value.alias(new + part.column))
    return found


def _averages(shape: Shape, prefix: str) -> dict[str, Column]:
    """Each average, by its column ``<prefix><name>``, from its parts ``<prefix><name>__sum`` and ``__count``."""
    found = {}
    for m in shape.measures:
        if m.derived:
            total, count = (F.col(prefix + p.column) for p in m.parts)
            found[prefix + m.name] = F.when(count > 0, (total / count).cast(m.type))
    return found


def value_names(shape: Shape) -> list[str]:
    """Every stored value column (measures, their parts, event_count), in table order."""
    return [name for name, _ in shape.value_columns]


def with_values(shape: Shape, prefix: str, out: str | None = None) -> list[Column]:
    """Every stored value column from the parts ``<prefix>c`` (averages computed from theirs), named
    ``<out>c`` (default: ``<prefix>c``)."""
    out = prefix if out is None else out
    averages = _averages(shape, prefix)
    return [averages.get(prefix + name, F.col(prefix + name)).alias(out + name) for name in value_names(shape)]


def typed_zeros(shape: Shape, prefix: str) -> list[Column]:
    """Every stored value of a window without events: 0 for sums and counts, null for the rest."""
    exact = {p.column for p in shape.parts if p.adds}
    return [
        (_zero(kind) if name in exact else F.lit(None).cast(kind)).alias(prefix + name)
        for name, kind in shape.value_columns
    ]


def zero_parts(shape: Shape, prefix: str) -> list[Column]:
    """Every part of a window without events, named ``<prefix>c``: 0 for sums and counts, null for the rest."""
    return [(_zero(p.type) if p.adds else F.lit(None).cast(p.type)).alias(prefix + p.column) for p in shape.parts]


def coalesced(shape: Shape, prefix: str) -> list[Column]:
    """``<prefix>c`` of every stored value column, sums and counts 0 where null (an absent row)."""
    exact = {p.column for p in shape.parts if p.adds}
    return [
        (F.coalesce(prefix + name, _zero(kind)) if name in exact else F.col(prefix + name)).alias(prefix + name)
        for name, kind in shape.value_columns
    ]


def coalesced_parts(shape: Shape, source: str, out: str) -> list[Column]:
    """Every part ``<source>c`` as ``<out>c``, sums and counts 0 where null (an absent row)."""
    return [
        (F.coalesce(source + p.column, _zero(p.type)) if p.adds else F.col(source + p.column)).alias(out + p.column)
        for p in shape.parts
    ]


#: How far apart two doubles may be, relative to their size, and still be the same value: a sum of doubles
#: depends on the order it was added in (a stream's increments against a recomputation's one pass).
DOUBLE_TOLERANCE = 1e-9


def same_value(a: Column, b: Column, kind: DataType) -> Column:
    """Whether two values are the same (null-safe): exactly, or for doubles within :data:`DOUBLE_TOLERANCE`."""
    if not isinstance(kind, DoubleType):
        return a.eqNullSafe(b)
    close = F.abs(a - b) <= F.lit(DOUBLE_TOLERANCE) * F.greatest(F.abs(a), F.abs(b), F.lit(1.0))
    return (a.isNull() & b.isNull()) | (a.isNotNull() & b.isNotNull() & close)


def visible_differ(shape: Shape, a: str, b: str) -> Column:
    """Whether any value a reader sees (each measure, event_count) differs between ``<a>c`` and ``<b>c``."""
    differs = F.lit(False)
    for name, kind in shape.visible:
        differs = differs | ~same_value(F.col(a + name), F.col(b + name), kind)
    return differs


def merge_increments(shape: Shape, source: str = "delta_") -> dict[str, str]:
    """A MERGE's ``SET`` of every stored value column from the target ``t`` and increments ``s.<source>c``."""
    updates: dict[str, str] = {}
    for part in shape.parts:
        t, s, kind = f"t.{part.column}", f"s.{source}{part.column}", part.type.simpleString()
        if part.adds:
            updates[part.column] = f"CAST(coalesce({t}, 0) + coalesce({s}, 0) AS {kind})"
        else:
            updates[part.column] = f"CAST({'least' if part.fn == 'min' else 'greatest'}({t}, {s}) AS {kind})"
    for m in shape.measures:
        if m.derived:
            total, count = (updates[p.column] for p in m.parts)
            updates[m.name] = f"CAST(({total}) / nullif({count}, 0) AS {m.type.simpleString()})"
    return {name: updates[name] for name in value_names(shape)}


def merge_values(shape: Shape, source: str) -> dict[str, str]:
    """A MERGE's ``SET`` (or insert values) of every stored value column from ``s.<source>c``."""
    return {name: f"s.{source}{name}" for name in value_names(shape)}
