"""Read the catalog's tables without Spark (delta-rs): versions, row counts and rows, in milliseconds."""

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from warehouse.catalog import Table, all_tables
from warehouse.settings import Settings


@dataclass(frozen=True)
class TableState:
    table: Table
    path: str
    exists: bool
    version: int | None
    rows: int | None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.table.name,
            "layer": self.table.layer,
            "path": self.path,
            "exists": self.exists,
            "version": self.version,
            "rows": self.rows,
            "partition_by": list(self.table.partition_by),
            "key": list(self.table.key),
            "description": self.table.description,
            "columns": [{"name": c.name, "type": c.type.simpleString()} for c in self.table.columns],
        }


def open_table(settings: Settings, table: Table) -> DeltaTable | None:
    try:
        return DeltaTable(str(table.path(settings)))
    except TableNotFoundError:
        return None


def table_state(settings: Settings, table: Table) -> TableState:
    path = str(table.path(settings))
    delta = open_table(settings, table)
    if delta is None:
        return TableState(table, path, False, None, None)
    actions = pa.table(delta.get_add_actions(flatten=True))
    rows = sum(n or 0 for n in actions.column("num_records").to_pylist()) if actions.num_rows else 0
    return TableState(table, path, True, delta.version(), rows)


def catalog_states(settings: Settings) -> list[TableState]:
    return [table_state(settings, table) for table in all_tables(settings)]


def read_rows(settings: Settings, table: Table, limit: int) -> tuple[list[str], list[tuple]]:
    """Up to ``limit`` rows, ordered by the table's key when it has one."""
    delta = open_table(settings, table)
    if delta is None:
        return table.column_names, []
    arrow = delta.to_pyarrow_table(columns=table.column_names)
    if table.key:
        arrow = arrow.sort_by([(k, "ascending") for k in table.key])
    arrow = arrow.slice(0, limit)
    columns = arrow.column_names
    return columns, list(zip(*(arrow.column(c).to_pylist() for c in columns), strict=True)) if arrow.num_rows else []
