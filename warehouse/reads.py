"""Reading a few rows of a table into Spark without Spark's Delta read.

Spark's read of a Delta table first brings its snapshot up to date: when the table was committed since by
delta-rs or by another process (every batch, for the tables the followers read), that is a log listing, a
state reconstruction and a file-skipping job before the scan, 0.1 to 0.3 s and several jobs a read on two
cores. A batch of the derived windows read five such tables, most of its time. delta-rs reads the same
snapshot in milliseconds, skipping files by the statistics in the log; when the rows asked for are few,
they go to Spark as a local relation and Spark computes everything from them as before. Many rows (a
backlog's) are read by Spark, filtered the same way.

Time semantics: none; a read is as of the table's newest version, whichever reader makes it.
"""

import operator
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, NumericType, StructType, TimestampType

from warehouse.catalog import Table
from warehouse.delta import read_table
from warehouse.settings import Settings
from warehouse.storage import open_delta

#: Up to this many rows a filtered read goes through delta-rs into a local relation (0: every read by Spark).
LOCAL_READ_ROWS = 500_000

#: A condition both readers apply: (column, operator, value), the operator one of ``_OPERATORS``.
Condition = tuple[str, str, Any]

_COMPARE = {"==": operator.eq, ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_OPERATORS = (*_COMPARE, "in")
_TIME = pa.timestamp("us", tz="UTC")
#: Column types whose file statistics in the Delta log are exact bounds.
_BOUNDED = (NumericType, TimestampType, DateType)


def read_where(
    spark: SparkSession,
    settings: Settings,
    table: Table,
    conditions: Sequence[Condition] = (),
    at_most: int | None = None,
    columns: Sequence[str] | None = None,
) -> DataFrame:
    """``columns`` (default all) of the rows of ``table`` meeting every condition, as of its newest version:
    by delta-rs into a local relation when they are at most ``at_most`` (default ``LOCAL_READ_ROWS``), else
    by Spark."""
    names = list(columns) if columns is not None else table.column_names
    limit = LOCAL_READ_ROWS if at_most is None else min(at_most, LOCAL_READ_ROWS)
    if limit > 0:
        rows = arrow_where(settings, table, conditions, names, at_most=limit)
        if rows is not None:
            schema = StructType([table.schema[name] for name in names])
            return spark.createDataFrame(rows, schema=schema)
    return read_table(spark, settings, table).where(_spark_filter(conditions)).select(*names)


def arrow_where(
    settings: Settings,
    table: Table,
    conditions: Sequence[Condition] = (),
    columns: Sequence[str] | None = None,
    at_most: int | None = None,
) -> pa.Table | None:
    """``columns`` (default all) of the rows of ``table`` meeting every condition, as of its newest version,
    read by delta-rs alone (no Spark job); None when there are more than ``at_most`` of them."""
    names = list(columns) if columns is not None else table.column_names
    delta = open_delta(table.path(settings))
    # delta-rs skips files by the bounds in the log, and skips a file whose bound of a filtered column is
    # missing: only columns every file has bounds of filter the scan (Delta keeps none for booleans and
    # cuts long strings); the others filter the rows read.
    bounded = _bounded_columns(delta, {column for column, _, _ in conditions}, table)
    skipping = [c for c in conditions if c[0] in bounded]
    after = [c for c in conditions if c[0] not in bounded]
    dataset = delta.to_pyarrow_dataset()
    scan = _arrow_filter(skipping)
    # Counted first (only the filtered columns are read), so many rows are never brought to Python.
    if at_most is not None and dataset.count_rows(filter=scan) > at_most:
        return None
    wanted = sorted({*names, *(column for column, _, _ in after)})
    rows = dataset.to_table(columns=wanted, filter=scan)
    if after:
        rows = rows.filter(_arrow_filter(after))
    return rows.select(names)


def _bounded_columns(delta: deltalake.DeltaTable, columns: set[str], table: Table) -> set[str]:
    """Which of ``columns`` (numbers and times only) have a lower and upper bound in the log for every file
    holding a value of them."""
    candidates = {column for column in columns if isinstance(table.schema[column].dataType, _BOUNDED)}
    if not candidates:
        return set()
    files = pa.table(delta.get_add_actions(flatten=True))
    bounded = set()
    for column in candidates:
        if f"min.{column}" not in files.column_names or f"max.{column}" not in files.column_names:
            continue
        valued = pc.less(pc.fill_null(files[f"null_count.{column}"], -1), files["num_records"])
        missing = pc.or_(pc.is_null(files[f"min.{column}"]), pc.is_null(files[f"max.{column}"]))
        unbounded = pc.and_kleene(valued, missing)
        if not pc.any(pc.fill_null(unbounded, True)).as_py():
            bounded.add(column)
    return bounded


def _checked(condition: Condition) -> Condition:
    column, op, value = condition
    if op not in _OPERATORS:
        raise ValueError(f"read_where: unknown operator {op!r} (one of {', '.join(_OPERATORS)})")
    if isinstance(value, datetime):
        # PySpark gives timestamps back as naive datetimes in the session's time zone, which is UTC.
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return column, op, value


def _spark_filter(conditions: Sequence[Condition]) -> Column:
    where = F.lit(True)
    for column, op, value in map(_checked, conditions):
        field = F.col(column)
        where = where & (field.isin(list(value)) if op == "in" else _COMPARE[op](field, F.lit(value)))
    return where


def _arrow_filter(conditions: Sequence[Condition]) -> ds.Expression | None:
    where = None
    for column, op, value in map(_checked, conditions):
        field = ds.field(column)
        if op == "in":
            test = field.isin(list(value))
        else:
            test = _COMPARE[op](field, pa.scalar(value, _TIME) if isinstance(value, datetime) else value)
        where = test if where is None else where & test
    return where
