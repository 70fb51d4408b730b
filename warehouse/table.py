"""What a table of the lakehouse is: a layer, a name, a schema written out once, its Delta properties and
its place under the home. The tables themselves are named in ``warehouse.catalog``."""

from dataclasses import dataclass, field

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    StructField,
    StructType,
)

from warehouse.settings import Settings
from warehouse.storage import Location

MONEY = DecimalType(18, 2)


@dataclass(frozen=True)
class Column:
    name: str
    type: DataType
    description: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    """A Delta table of the lakehouse: ``layer.short_name``, stored under the home's tables folder."""

    layer: str
    short_name: str
    description: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] = ()
    append_only: bool = True
    properties: dict[str, str] = field(default_factory=dict)
    #: Columns maintenance Z-orders the files by (readers filter by them), beyond the partitioning.
    zorder_by: tuple[str, ...] = ()
    #: Columns Delta keeps no min/max statistics for: a received line may be megabytes long, and Delta's
    #: writer copies the running maximum for every row it writes (a 10 MB line ahead of 200,000 short ones
    #: cost minutes); nothing filters on them.
    no_stats: tuple[str, ...] = ()
    #: Whether the spec names it (a window table): its name is the same inside and outside its pipeline.
    declared: bool = False
    #: Whether a spec shapes its columns: a spec's new field or measure adds them to an existing table, nullable
    #: (forward-only until a replay fills them in).
    shaped: bool = False

    @property
    def name(self) -> str:
        return f"{self.layer}.{self.short_name}"

    @property
    def table_properties(self) -> dict[str, str]:
        """The Delta table properties: ``properties``, and which columns get statistics when some do not."""
        if not self.no_stats:
            return dict(self.properties)
        skipped = (*self.no_stats, *self.partition_by)  # partition values are in the log anyway
        with_stats = ",".join(
            c.name
            for c in self.columns
            if c.name not in skipped and not isinstance(c.type, BooleanType | BinaryType | ArrayType)
        )
        return {**self.properties, "delta.dataSkippingStatsColumns": with_stats}

    @property
    def schema(self) -> StructType:
        return StructType([StructField(c.name, c.type, c.nullable) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def path(self, settings: Settings) -> Location:
        """The table's folder: under the tables root (in the home or on object storage), or where the
        settings link it."""
        linked = settings.linked(self.name)
        return linked if linked is not None else settings.tables_dir / self.layer / self.short_name
