"""What a declared pipeline's window tables hold: its key columns and its measures, typed.

A measure is kept in its window rows by parts that combine without the events: a sum, a count, a min and a
max are their own part; an average is kept by its sum and count (columns ``<name>__sum`` and
``<name>__count`` beside it), so a window revised by a batch, a hopping window rolled up from tumbling ones
and two sessions merged into one all get it exactly from their parts. ``event_count`` (every window's count of
events) is a part too. ``transforms.gold.measures`` turns these into Spark expressions.
"""

from dataclasses import dataclass

from pyspark.sql.types import BooleanType, DataType, DecimalType, DoubleType, LongType, StringType, TimestampType

from warehouse.pipelines import FieldSpec, PipelineSpec


def field_type(f: FieldSpec) -> DataType:
    """The Spark type a declared field's values have in silver."""
    if f.kind == "decimal":
        return DecimalType(*f.decimal_places)
    return {
        "string": StringType(),
        "integer": LongType(),
        "double": DoubleType(),
        "boolean": BooleanType(),
        "timestamp": TimestampType(),
    }[f.kind]


@dataclass(frozen=True)
class Part:
    """A stored column a measure is kept by: ``fn`` over ``field`` (None: every event) of the window's events."""

    column: str
    fn: str  # sum, count, min or max
    field: str | None
    type: DataType

    @property
    def adds(self) -> bool:
        """Whether two windows' parts add up (sum, count) rather than take the smaller or larger (min, max)."""
        return self.fn in {"sum", "count"}


@dataclass(frozen=True)
class Measure:
    """A declared measure: its column, type and the parts it is kept by."""

    name: str
    fn: str
    field: str
    type: DataType
    parts: tuple[Part, ...]

    @property
    def derived(self) -> bool:
        """Whether its value is computed from parts of other names (an average)."""
        return self.fn == "avg"


EVENT_COUNT = Part("event_count", "count", None, LongType())


def _measure(name: str, fn: str, field: str, source: DataType) -> Measure:
    if fn == "count":
        return Measure(name, fn, field, LongType(), (Part(name, "count", field, LongType()),))
    if fn in {"sum", "min", "max"}:
        # A sum keeps its field's type (money stays decimal(p,s), as the contract's total_amount does).
        kept = source if fn != "sum" or isinstance(source, DecimalType | DoubleType) else LongType()
        return Measure(name, fn, field, kept, (Part(name, fn, field, kept),))
    if isinstance(source, DecimalType):
        total = DecimalType(38, source.scale)
        # What a decimal(38,s) divided by a count keeps under Spark's rules: max(s, 6) places, half-up.
        kept = DecimalType(38, max(source.scale, 6))
    else:
        total = DoubleType() if isinstance(source, DoubleType) else LongType()
        kept = DoubleType()
    parts = (Part(f"{name}__sum", "sum", field, total), Part(f"{name}__count", "count", field, LongType()))
    return Measure(name, fn, field, kept, parts)


@dataclass(frozen=True)
class Shape:
    """A pipeline's window rows: its key columns (with types) and measures."""

    keys: tuple[tuple[str, DataType], ...]
    measures: tuple[Measure, ...]

    @classmethod
    def of(cls, spec: PipelineSpec) -> "Shape":
        keys = tuple((name, field_type(spec.fields[name])) for name in spec.keys)
        measures = tuple(_measure(m.name, m.fn, m.field, field_type(spec.fields[m.field])) for m in spec.measures)
        return cls(keys, measures)

    @property
    def key_names(self) -> list[str]:
        return [name for name, _ in self.keys]

    @property
    def parts(self) -> list[Part]:
        """Every stored part, ``event_count`` last."""
        return [part for m in self.measures for part in m.parts] + [EVENT_COUNT]

    @property
    def visible(self) -> list[tuple[str, DataType]]:
        """The values a reader sees, in table order: each measure, then ``event_count``."""
        return [(m.name, m.type) for m in self.measures] + [("event_count", LongType())]

    @property
    def value_columns(self) -> list[tuple[str, DataType]]:
        """Every stored value column in table order: each measure and its parts (an average's sum and count
        beside it), then ``event_count``."""
        columns: list[tuple[str, DataType]] = []
        for m in self.measures:
            columns.append((m.name, m.type))
            if m.derived:
                columns += [(p.column, p.type) for p in m.parts]
        return [*columns, ("event_count", LongType())]

    @property
    def averages_decimals(self) -> bool:
        """Whether a measure is an average of decimals: a MERGE that derives it must divide as Spark does
        (half-up to its scale), which delta-rs' engine does not (it truncates)."""
        return any(m.derived and isinstance(m.type, DecimalType) for m in self.measures)

    @property
    def source_fields(self) -> list[str]:
        """The silver fields the measures read, in order, each once."""
        return list(dict.fromkeys(m.field for m in self.measures))
