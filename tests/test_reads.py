"""A filtered read gives the same rows whichever reader makes it (delta-rs into a local relation, or Spark)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from warehouse import reads
from warehouse.catalog import sessions_table
from warehouse.reads import read_where
from warehouse.settings import Settings
from warehouse.tables import ensure_table

pytestmark = pytest.mark.quick

_AT = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def _sessions() -> list[dict]:
    rows = []
    for n in range(40):
        start = _AT + timedelta(minutes=7 * n)
        rows.append(
            {
                "user_id": f"u{n % 4}",
                "session_start": start,
                "session_end": start + timedelta(minutes=30 + n % 3),
                "last_event_time": start,
                "total_amount": Decimal(n) + Decimal("0.25"),
                "event_count": n + 1,
                "revision": 1,
                "is_final": n % 2 == 0,
                "updated_at": _AT,
            }
        )
    return rows


@pytest.mark.parametrize(
    "conditions",
    [
        [],
        [("is_final", "==", False)],
        [("session_end", ">=", _AT + timedelta(hours=2)), ("session_start", "<=", _AT + timedelta(hours=3))],
        # PySpark's own naive datetimes (UTC) mean the same instant as aware ones.
        [("session_end", ">", datetime(2026, 11, 25, 12, 30)), ("is_final", "==", True)],
        [("user_id", "in", ["u1", "u3"]), ("session_start", "<", _AT + timedelta(hours=1))],
        [("event_count", ">", 100)],
    ],
)
def test_both_readers_give_the_rows_python_picks(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch, conditions: list
) -> None:
    table = sessions_table(settings)
    ensure_table(spark, settings, table)
    rows = _sessions()
    spark.createDataFrame(rows, table.schema).write.format("delta").mode("append").save(str(table.path(settings)))

    def holds(row: dict, column: str, operator: str, value: object) -> bool:
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        cell = row[column]
        return {
            "==": lambda: cell == value,
            ">=": lambda: cell >= value,
            ">": lambda: cell > value,
            "<=": lambda: cell <= value,
            "<": lambda: cell < value,
            "in": lambda: cell in value,
        }[operator]()

    expected = sorted(
        (row["user_id"], row["session_start"].replace(tzinfo=None), row["event_count"])
        for row in rows
        if all(holds(row, *condition) for condition in conditions)
    )

    def read(**kwargs: object) -> list[tuple]:
        found = read_where(spark, settings, table, conditions, **kwargs).collect()
        return sorted((row.user_id, row.session_start, row.event_count) for row in found)

    assert read() == expected  # delta-rs, a local relation
    assert read(at_most=max(len(expected) - 1, 0)) == expected  # too many for it: Spark
    monkeypatch.setattr(reads, "LOCAL_READ_ROWS", 0)
    assert read() == expected  # every read by Spark
    assert read(columns=("user_id", "session_start", "event_count")) == expected


def test_an_unknown_operator_is_refused(spark: SparkSession, settings: Settings) -> None:
    table = sessions_table(settings)
    ensure_table(spark, settings, table)
    with pytest.raises(ValueError, match="unknown operator '!='"):
        read_where(spark, settings, table, [("user_id", "!=", "u1")])


def test_a_column_without_bounds_in_the_log_filters_the_rows_read_not_the_files(
    spark: SparkSession, settings: Settings
) -> None:
    # Written with bounds for the first column only: delta-rs alone would skip every file for a filter on
    # session_end (it reads a missing bound as "no row can match").
    table = sessions_table(settings)
    rows = _sessions()
    arrow = spark.createDataFrame(rows, table.schema).toArrow()
    deltalake.write_deltalake(str(table.path(settings)), arrow, configuration={"delta.dataSkippingNumIndexedCols": "1"})
    stats = pa.table(deltalake.DeltaTable(str(table.path(settings))).get_add_actions(flatten=True))
    assert "min.session_end" not in stats.column_names or stats["min.session_end"].null_count == stats.num_rows
    later = _AT + timedelta(hours=3)
    found = read_where(spark, settings, table, [("session_end", ">=", later)]).collect()
    assert sorted(row.event_count for row in found) == [
        row["event_count"] for row in rows if row["session_end"] >= later
    ]
