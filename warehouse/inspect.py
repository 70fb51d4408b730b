"""Read the catalog's tables without Spark (delta-rs): versions, row counts, rows (with time travel) and history.

Rows are read with delta-rs' own query engine (DataFusion) into arro3 tables, not with pyarrow's dataset scanner
over delta-rs' filesystem: that scanner intermittently aborted the process at exit ("terminate called without
an active exception", exit code 134 after correct output), and pyarrow (with numpy, and pandas for zoned
timestamps) costs more start-up time than the whole read.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from arro3.core import Table as ArrowTable
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from warehouse.catalog import Table, all_tables, catalog_name, roles
from warehouse.settings import Settings
from warehouse.storage import open_delta

T = TypeVar("T")


@dataclass(frozen=True)
class TableState:
    table: Table
    path: str
    exists: bool
    version: int | None
    rows: int | None
    #: Its catalog name (another pipeline's tables carry its name), its pipeline and its role there.
    name: str = ""
    pipeline: str = ""
    role: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name or self.table.name,
            "layer": self.table.layer,
            "pipeline": self.pipeline or None,
            "role": self.role or None,
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
        return open_delta(table.path(settings))
    except TableNotFoundError:
        return None


def table_state(settings: Settings, table: Table) -> TableState:
    path = str(table.path(settings))
    delta = open_table(settings, table)
    if delta is None:
        return TableState(table, path, False, None, None)
    actions = delta.get_add_actions(flatten=True)
    rows = sum(n or 0 for n in actions.column("num_records").to_pylist()) if actions.num_rows else 0
    return TableState(table, path, True, delta.version(), rows)


def catalog_states(settings: Settings, pipelines: tuple[str, ...] = ()) -> list[TableState]:
    """Every table of the pipelines named (default: those ``LAKEHOUSE_PIPELINES`` selects), the first
    pipeline's first."""
    states = []
    for view in settings.root().pipelines(pipelines):
        role = roles(view)
        for table in all_tables(view):
            state = table_state(view, table)
            states.append(
                replace(state, name=catalog_name(view, table), pipeline=view.spec.name, role=role[table.name])
            )
    return states


# --- show and history: time travel, sorted rows and commits (delta-rs only, no Spark) ---

ARRIVAL_ORDER = (
    "ingest_time",
    "corrected_at",
    "recorded_at",
    "finished_at",
    "ingest_batch",
    "silver_batch",
    "gold_batch",
    "batch_id",
    "source_file",
    "source_line",
    "kafka_topic",
    "kafka_partition",
    "kafka_offset",
    "source_position",
)
"""How tables without a key are sorted: processing time, batch and source position, in this order of preference."""

ROW_METRICS = {
    "written": ("numOutputRows", "num_output_rows", "num_added_rows"),
    "inserted": ("numTargetRowsInserted", "num_target_rows_inserted"),
    "updated": ("numTargetRowsUpdated", "num_target_rows_updated", "numUpdatedRows", "num_updated_rows"),
    "deleted": ("numTargetRowsDeleted", "num_target_rows_deleted", "numDeletedRows", "num_deleted_rows"),
}
"""Row counts in a commit's operationMetrics (Spark's camelCase and delta-rs' snake_case names)."""


@dataclass(frozen=True)
class Commit:
    """One Delta commit as ``history`` shows it."""

    version: int
    timestamp: datetime | None
    operation: str
    rows: dict[str, int]
    metrics: dict[str, Any]
    parameters: dict[str, Any]
    engine: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": None if self.timestamp is None else iso_utc(self.timestamp),
            "operation": self.operation,
            "rows": self.rows,
            "metrics": self.metrics,
            "parameters": self.parameters,
            "engine": self.engine,
        }


@dataclass(frozen=True)
class Snapshot:
    """Rows of one version of a table, sorted, with the table's total row count at that version."""

    table: Table
    version: int
    latest_version: int
    committed_at: datetime | None
    columns: list[str]
    rows: list[tuple]
    total_rows: int
    order_by: tuple[str, ...]
    by_key: bool


def iso_utc(moment: datetime) -> str:
    """``2024-01-01T10:00:00.123Z``: a commit time in UTC, to the millisecond."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _as_int(value: Any) -> Any:
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def _commit(entry: dict[str, Any]) -> Commit:
    metrics = {name: _as_int(value) for name, value in (entry.get("operationMetrics") or {}).items()}
    rows: dict[str, int] = {}
    for label, names in ROW_METRICS.items():
        found = [metrics[n] for n in names if isinstance(metrics.get(n), int)]
        if found:
            rows[label] = found[0]
    if rows.keys() & {"inserted", "updated", "deleted"}:
        rows.pop("written", None)  # a MERGE's output rows include the copied ones; its own counts say more
    stamp = entry.get("timestamp")
    return Commit(
        version=int(entry["version"]),
        timestamp=None if stamp is None else datetime.fromtimestamp(stamp / 1000, tz=UTC),
        operation=str(entry.get("operation", "?")),
        rows=rows,
        metrics=metrics,
        parameters=dict(entry.get("operationParameters") or {}),
        engine=entry.get("engineInfo"),
    )


class _TableMoved(Exception):
    """A commit landed while a table's history was being read."""


def _history(settings: Settings, table: Table, delta: DeltaTable, limit: int | None = None) -> list[Commit]:
    """``delta.history(limit)`` with the right version numbers, or ``_TableMoved``.

    delta-rs reads the newest commit files on disk but numbers them down from the version ``delta`` was
    loaded at, so a commit landing in between (a running stream) would shift every label by one.
    """
    entries = delta.history(limit)
    if (table.path(settings) / "_delta_log" / f"{delta.version() + 1:020d}.json").exists():
        raise _TableMoved
    return [_commit(entry) for entry in entries]


def _retried(table: Table, read: Callable[[], T]) -> T:
    for _ in range(5):
        try:
            return read()
        except _TableMoved:
            continue
    raise LookupError(f"{table.name} kept changing while it was read; try again")


def table_history(settings: Settings, table: Table, limit: int | None = None) -> list[Commit] | None:
    """The table's commits, newest first (at most ``limit``); None when the table does not exist yet."""

    def read() -> list[Commit] | None:
        delta = open_table(settings, table)
        return None if delta is None else _history(settings, table, delta, limit)

    return _retried(table, read)


def parse_as_of(text: str) -> int | datetime:
    """A time-travel target: a Delta version (``3``) or an ISO time (``2024-01-01T10:00:00Z``; UTC without offset)."""
    value = text.strip()
    if re.fullmatch(r"[+-]?\d+", value):
        version = int(value)
        if version < 0:
            raise ValueError(f"--as-of {text}: a Delta version is a whole number from 0")
        return version
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--as-of {text!r} is neither a Delta version (0, 1, ...) nor an ISO time such as 2024-01-01T10:00:00Z"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def resolve_version(settings: Settings, table: Table, delta: DeltaTable, as_of: int | datetime) -> int:
    """The version ``as_of`` names: itself, or the last commit at or before a time (the times ``history`` shows)."""
    latest = delta.version()
    if isinstance(as_of, int):
        if as_of > latest:
            raise LookupError(f"{table.name} has no version {as_of}; its versions are 0 to {latest}")
        return as_of
    if as_of > datetime.now(UTC):
        raise LookupError(f"--as-of {iso_utc(as_of)} is in the future")
    commits = [c for c in _history(settings, table, delta) if c.timestamp is not None]
    if not commits:
        raise LookupError(f"{table.name} records no commit times, so it cannot be read as of a time")
    before = [c.version for c in commits if c.timestamp <= as_of]
    if not before:
        first = min(commits, key=lambda c: c.version)
        raise LookupError(
            f"{table.name} has no version at {iso_utc(as_of)}; its first commit is version {first.version} "
            f"at {iso_utc(first.timestamp)}"
        )
    return max(before)


def sort_order(table: Table, columns: list[str]) -> tuple[tuple[str, ...], bool]:
    """The columns rows are sorted by, and whether that is the table's key.

    Tables without a key sort by arrival (``ARRIVAL_ORDER``) and then by every other column, so the order is
    total and the same on every call.
    """
    key = tuple(k for k in table.key if k in columns)
    if key:
        return key, True
    arrival = [c for c in ARRIVAL_ORDER if c in columns]
    return (*arrival, *(c for c in columns if c not in arrival)), False


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _order_terms(column: str) -> list[str]:
    """SQL sort terms of a column; a source position (``file#12``, ``topic/0@345``) sorts by its number."""
    quoted = _quoted(column)
    terms = [quoted]
    if column == "source_position":
        terms = [
            f"regexp_replace({quoted}, '[0-9]+$', '')",
            f"TRY_CAST(regexp_replace({quoted}, '^.*[^0-9]', '') AS BIGINT)",
            quoted,
        ]
    return [f"{term} ASC NULLS LAST" for term in terms]


def _query(query: QueryBuilder, sql: str) -> ArrowTable:
    return query.execute(sql).read_all()


def read_snapshot(settings: Settings, table: Table, limit: int, as_of: int | datetime | None = None) -> Snapshot | None:
    """The first ``limit`` rows of the table (latest or ``as_of``) in sort order; None when it does not exist yet."""
    return _retried(table, lambda: _read_snapshot(settings, table, limit, as_of))


def _read_snapshot(settings: Settings, table: Table, limit: int, as_of: int | datetime | None) -> Snapshot | None:
    delta = open_table(settings, table)
    if delta is None:
        if as_of is None:
            return None
        named = as_of if isinstance(as_of, int) else f"at {iso_utc(as_of)}"
        raise LookupError(f"{table.name} does not exist yet, so it has no version {named}")
    latest = delta.version()
    version = latest if as_of is None else resolve_version(settings, table, delta, as_of)
    history = _history(settings, table, delta, latest - version + 1)
    committed_at = next((c.timestamp for c in history if c.version == version), None)
    if version != latest:
        try:
            delta = open_delta(table.path(settings), version=version)
        except Exception as error:  # e.g. its log was cleaned up
            raise LookupError(f"cannot read {table.name} at version {version}: {error}") from None
    present = [field.name for field in delta.schema().fields]
    columns = [c for c in table.column_names if c in present] + [c for c in present if c not in table.column_names]
    order_by, by_key = sort_order(table, columns)
    query = QueryBuilder().register("snapshot", delta)
    arrow = _query(
        query,
        f"SELECT {', '.join(map(_quoted, columns))} FROM snapshot "
        f"ORDER BY {', '.join(t for c in order_by for t in _order_terms(c))} LIMIT {int(limit)}",
    )
    total = _query(query, "SELECT count(*) AS n FROM snapshot").column(0).to_pylist()[0]
    rows = list(zip(*(arrow.column(c).to_pylist() for c in columns), strict=True)) if arrow.num_rows else []
    return Snapshot(table, version, latest, committed_at, columns, rows, total, order_by, by_key)
