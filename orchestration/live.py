"""The continuous stream, live in Dagster: each micro-batch of ``lakehouse run --continuous`` becomes a runless
materialization of the assets it wrote, and every kept gold asset carries a freshness policy.

``stream_progress_sensor`` (on by default, every 10 s) reads what ``ops.stream_progress`` gained since its
cursor with delta-rs and Parquet alone, never Spark: the Delta log's commit files after the cursor's
version, then the data files those commits added. Rows of a continuous run (``run_id`` starting with
``continuous-``) are reported; rows of Dagster-launched runs are not, those runs record their own
materializations. ``runtime.stages.stream_outputs`` says which tables (assets) each stream's batches write.

Caps, so a tick stays small however long the sensor was off: at most ``MAX_COMMITS_PER_TICK`` commits are
read per tick (the rest on the next ticks; a sensor without a cursor starts at the newest ones), and per
asset and stream at most ``MAX_EVENTS_PER_STREAM`` materializations, one per batch; more batches than that
become one materialization that sums them (``batches`` says how many).
"""

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import TableNotFoundError

from orchestration.names import asset_key, named, view
from orchestration.pipeline import window_outputs
from orchestration.resources import LakehouseResource
from runtime.progress import CONTINUOUS_PREFIX
from runtime.stages import stream_outputs
from warehouse.catalog import (
    GOLD_CORRECTIONS,
    OPS_STREAM_PROGRESS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    Table,
    kept_tables,
    tumbling_table,
)
from warehouse.inspect import table_state
from warehouse.settings import Settings
from warehouse.storage import Location, is_remote, open_delta

SENSOR_NAME = "stream_progress_sensor"
#: The sensor's cadence: about one flush of a continuous run's progress (``LAKEHOUSE_PROGRESS_FLUSH_SECONDS``).
MIN_INTERVAL_SECONDS = 10
#: Commits of ops.stream_progress read per tick at most (a continuous run appends one per flush).
MAX_COMMITS_PER_TICK = 100
#: Materializations per asset and stream per tick at most, one per batch; more batches become one that sums them.
MAX_EVENTS_PER_STREAM = 5

#: Commits that append rows; others (OPTIMIZE's rewrite, a table's creation) bring no new batch.
_APPENDS = {"WRITE", "STREAMING UPDATE"}
_TIMESTAMPS = pa.timestamp("us", tz="UTC")
_COLUMNS = (
    "stream",
    "run_id",
    "batch_id",
    "batch_time",
    "rows_in",
    "rows_out",
    "batch_seconds",
    "watermark",
    "late",
    "quarantined",
    "duplicates",
    "state_rows",
    "state_memory_bytes",
    "backlog_files",
    "backlog_bytes",
    "backlog_messages",
    "latency_p50_seconds",
    "latency_p99_seconds",
    "latency_max_seconds",
    "figures",
    "recorded_at",
)
_BACKLOG = ("backlog_files", "backlog_bytes", "backlog_messages")
_LATENCIES = ("latency_p50_seconds", "latency_p99_seconds", "latency_max_seconds")


# --- reading the progress rows added since the cursor ------------------------------------------------------


@dataclass(frozen=True)
class ProgressRead:
    """The continuous runs' progress rows of the commits read in one tick, and where the next tick starts."""

    table_id: str
    #: The last version read: the next cursor's.
    version: int
    rows: list[dict[str, Any]]
    commits_read: int
    #: Newer commits left for the next ticks (over the cap).
    commits_left: int
    #: Older commits never read: a sensor without a cursor starts at the newest ones.
    commits_skipped: int

    @property
    def cursor(self) -> str:
        return progress_cursor(self.version, self.table_id)


def progress_cursor(version: int, table_id: str) -> str:
    """``<version>@<table id>``: a reset lakehouse's new table (versions from 0 again) is not hidden by it."""
    return f"{version}@{table_id}"


def _parse_cursor(cursor: str | None) -> tuple[int, str] | None:
    version, _, table_id = (cursor or "").partition("@")
    return (int(version), table_id) if version.lstrip("-").isdigit() and table_id else None


def read_progress(
    settings: Settings, cursor: str | None, max_commits: int = MAX_COMMITS_PER_TICK
) -> ProgressRead | None:
    """The continuous runs' rows of ops.stream_progress committed after ``cursor`` (at most ``max_commits``
    commits, oldest first); None while the table does not exist."""
    path = OPS_STREAM_PROGRESS.path(settings)
    try:
        delta = open_delta(path)
    except TableNotFoundError:
        return None
    table_id, latest = delta.metadata().id, delta.version()
    seen = _parse_cursor(cursor)
    if seen is not None and seen[1] == table_id:
        start, skipped = seen[0] + 1, 0
    elif seen is not None:
        start, skipped = 0, 0  # a new table (the lakehouse was reset): everything in it is new
    else:
        start = max(0, latest - max_commits + 1)
        skipped = start
    end = min(latest, start + max_commits - 1)
    rows = [row for version in range(start, end + 1) for row in _commit_rows(path, version)]
    return ProgressRead(table_id, max(end, start - 1), rows, max(0, end - start + 1), latest - end, skipped)


def _commit_rows(table: Location, version: int) -> list[dict[str, Any]]:
    """The continuous runs' rows one commit appended (none when log retention has removed the commit)."""
    try:
        text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    except FileNotFoundError:
        return []
    actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    info = next((action["commitInfo"] for action in actions if "commitInfo" in action), None)
    if info is not None:
        mode = (info.get("operationParameters") or {}).get("mode")
        if info.get("operation") not in _APPENDS or mode == "Overwrite":
            return []
    rows = []
    for action in actions:
        add = action.get("add")
        if add and add.get("dataChange", True) and _may_hold_continuous_rows(add):
            rows.extend(row for row in _file_rows(table, add["path"]) if row["run_id"].startswith(CONTINUOUS_PREFIX))
    return rows


def _may_hold_continuous_rows(add: dict[str, Any]) -> bool:
    """False when the file's statistics show its run ids all outside the continuous runs' (a Dagster run's
    flush): its rows are not read at all."""
    try:
        stats = json.loads(add.get("stats") or "{}")
    except ValueError:
        return True
    low, high = (stats.get(bound, {}).get("run_id") for bound in ("minValues", "maxValues"))
    if not isinstance(low, str) or not isinstance(high, str):
        return True
    return not (high < CONTINUOUS_PREFIX or (low > CONTINUOUS_PREFIX and not low.startswith(CONTINUOUS_PREFIX)))


def _file_rows(table: Location, relative: str) -> list[dict[str, Any]]:
    """One data file's rows (the columns the sensor uses; a column newer than the file reads as None).
    A plain Parquet read of one local file: pyarrow's dataset scanner over delta-rs is avoided
    (``warehouse.inspect`` says why)."""
    location = urlparse(relative)
    path = Path(unquote(location.path)) if location.scheme == "file" else table / unquote(relative)
    try:
        data = pq.ParquetFile(path.open("rb") if is_remote(path) else path)
        present = [name for name in _COLUMNS if name in data.schema_arrow.names]
        read = data.read(columns=present)
    except FileNotFoundError:
        return []  # compacted and vacuumed since: a sensor that far behind loses those batches' points
    columns = {}
    for name in present:
        column = read.column(name)
        if pa.types.is_timestamp(column.type):
            # Spark may write INT96 (naive, nanoseconds): the session's time zone is UTC.
            column = column.cast(_TIMESTAMPS, safe=False)
        columns[name] = column.to_pylist()
    rows = []
    for index in range(read.num_rows):
        row = {name: columns[name][index] if name in columns else None for name in _COLUMNS}
        row["figures"] = _figures(row["figures"])
        rows.append(row)
    return rows


def _figures(raw: str | None) -> dict[str, Any]:
    try:
        found = json.loads(raw or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


# --- the materializations ----------------------------------------------------------------------------------


def _written_figures(settings: Settings) -> dict[str, str]:
    """Table → the batch figure that is its ``rows_written`` (as the runs record it); other tables: the row's
    ``rows_out``."""
    figures = {
        # The source streams carry their batches through silver to the tumbling table (runtime.carry).
        SILVER_EVENTS.name: "events",
        tumbling_table(settings).name: "windows_changed",
        SILVER_QUARANTINE.name: "quarantined",
        SILVER_DUPLICATES.name: "duplicates",
        SILVER_LATE_EVENTS.name: "late",
        GOLD_CORRECTIONS.name: "windows_revised",
    }
    for table, _, keys in window_outputs(settings).values():
        if "rows_written" in keys:
            figures[table.name] = keys["rows_written"]
    return figures


def _total(batches: list[dict[str, Any]], column: str) -> int:
    return sum(int(batch[column] or 0) for batch in batches)


def _newest(batches: list[dict[str, Any]], column: str) -> Any:
    return next((batch[column] for batch in reversed(batches) if batch[column] is not None), None)


def batch_metadata(
    settings: Settings, table: Table, batches: list[dict[str, Any]], written: str | None = None
) -> dict[str, Any]:
    """The figures of one batch (or several, summed) of one stream for one of its tables, under the keys the
    runs record (``orchestration.pipeline``), so an asset's plots continue across runs and the service.

    Several batches: counts and seconds are summed, the backlog and watermark are the newest batch's, and
    the latencies the largest of the batches' (an upper bound of the combined percentile)."""
    last = batches[-1]
    seconds = sum(float(batch["batch_seconds"] or 0.0) for batch in batches)
    rows_in = _total(batches, "rows_in")
    metadata: dict[str, Any] = {
        "stream": last["stream"],
        "run_id": last["run_id"],
        "batch_id": int(last["batch_id"]),
        "batches": len(batches),
        "rows_in": rows_in,
    }
    if written is None:
        metadata["rows_written"] = _total(batches, "rows_out")
    elif written in _COLUMNS:
        metadata["rows_written"] = _total(batches, written)  # late, quarantined, duplicates: the row's own
    elif any(written in batch["figures"] for batch in batches):
        metadata["rows_written"] = sum(int(batch["figures"].get(written) or 0) for batch in batches)
    if len(batches) > 1:
        metadata["first_batch_id"] = int(batches[0]["batch_id"])
    metadata["batch_seconds"] = round(seconds, 3)
    metadata["slowest_batch_seconds"] = round(max(float(batch["batch_seconds"] or 0.0) for batch in batches), 3)
    metadata["rows_per_second"] = round(rows_in / seconds, 1) if seconds else 0.0
    extras = {SILVER_EVENTS.name: ("quarantined", "duplicates"), tumbling_table(settings).name: ("late",)}
    for column in extras.get(table.name, ()):
        metadata[column] = _total(batches, column)
    for column in _BACKLOG:
        if (backlog := last[column]) is not None:
            metadata[column] = int(backlog)
    if (watermark := _newest(batches, "watermark")) is not None:
        metadata["watermark"] = watermark.timestamp()  # epoch seconds, as the runs record it
    for column in _LATENCIES:
        measured = [float(batch[column]) for batch in batches if batch[column] is not None]
        if measured:
            metadata[column] = round(max(measured), 3)
    if any(batch["state_rows"] for batch in batches):
        metadata["state_rows"] = int(last["state_rows"] or 0)
        metadata["state_memory_bytes"] = int(last["state_memory_bytes"] or 0)
    if (batch_time := _newest(batches, "batch_time")) is not None:
        metadata["batch_time"] = dg.MetadataValue.timestamp(batch_time)
    return metadata


def _order(row: dict[str, Any]) -> tuple[Any, ...]:
    when = row["batch_time"] or row["recorded_at"]
    return (when.timestamp() if isinstance(when, datetime) else 0.0, row["stream"], row["batch_id"])


def _describe(batches: list[dict[str, Any]]) -> str:
    first, last = batches[0], batches[-1]
    if len(batches) == 1:
        return f"{last['stream']}: batch {last['batch_id']} of {last['run_id']}"
    return (
        f"{last['stream']}: {len(batches)} batches, {first['batch_id']}-{last['batch_id']}, of {last['run_id']} "
        f"(more than {MAX_EVENTS_PER_STREAM} since the last tick: summed)"
    )


def live_materializations(
    settings: Settings, rows: Iterable[dict[str, Any]], max_events: int = MAX_EVENTS_PER_STREAM
) -> list[dg.AssetMaterialization]:
    """One materialization per batch and table the batch's stream writes, oldest first; a stream with more
    than ``max_events`` batches gives each of its tables one that sums them. The newest of each asset also
    carries the table's Delta version and row count (read from its log by delta-rs)."""
    outputs = stream_outputs(settings)
    written = _written_figures(settings)
    groups: dict[tuple[str, str], tuple[Table, list[dict[str, Any]]]] = {}
    for row in sorted(rows, key=_order):
        for table in outputs.get(row["stream"], ()):
            groups.setdefault((table.name, row["stream"]), (table, []))[1].append(row)
    chosen: list[tuple[Table, list[dict[str, Any]]]] = []
    for table, batches in groups.values():
        if len(batches) <= max_events:
            chosen.extend((table, [batch]) for batch in batches)
        else:
            chosen.append((table, batches))
    chosen.sort(key=lambda entry: _order(entry[1][-1]))
    newest = {table.name: index for index, (table, _) in enumerate(chosen)}
    events = []
    for index, (table, batches) in enumerate(chosen):
        metadata = batch_metadata(settings, table, batches, written.get(table.name))
        if newest[table.name] == index:
            state = table_state(settings, table)
            metadata["table_version"] = state.version or 0
            metadata["dagster/row_count"] = state.rows or 0
            metadata["path"] = dg.MetadataValue.path(state.path)
        key = asset_key(table, settings)
        events.append(dg.AssetMaterialization(key, description=_describe(batches), metadata=metadata))
    return events


# --- the sensor ---------------------------------------------------------------------------------------------


def build_progress_sensor(built_for: Settings | None = None) -> dg.SensorDefinition:
    """``stream_progress_sensor``: the continuous runs' new batches → runless materializations."""
    built_for = built_for or Settings()

    @dg.sensor(
        name=named(built_for, SENSOR_NAME),
        minimum_interval_seconds=MIN_INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Each batch of `lakehouse run --continuous` (ops.stream_progress) → a materialization of the assets it "
            "wrote, with its figures. Cursor: the ops.stream_progress version read @ table id."
        ),
    )
    def stream_progress_sensor(context: dg.SensorEvaluationContext, lakehouse: LakehouseResource) -> dg.SensorResult:
        """Reads with delta-rs and Parquet only: a tick never starts a JVM. The cursor advances past the
        commits read whether or not they held a continuous run's batch, so nothing is reported twice."""
        settings = view(lakehouse, built_for)
        read = read_progress(settings, context.cursor)
        if read is None:
            return dg.SensorResult(skip_reason=f"{OPS_STREAM_PROGRESS.name} does not exist yet", cursor=context.cursor)
        if read.commits_skipped:
            context.log.info(f"no cursor yet: starting at the newest commits, {read.commits_skipped} older ones left")
        if read.commits_left:
            context.log.info(f"{read.commits_left} newer commits left for the next ticks")
        events = live_materializations(settings, read.rows)
        if not events:
            return dg.SensorResult(
                skip_reason=(
                    f"no batch of a continuous run in {OPS_STREAM_PROGRESS.name} "
                    f"(read {read.commits_read} commits, now at version {read.version})"
                ),
                cursor=read.cursor,
            )
        batches = f"{len(read.rows)} batches of continuous runs in {read.commits_read} commits"
        context.log.info(f"{batches} → {len(events)} materializations")
        return dg.SensorResult(asset_events=events, cursor=read.cursor)

    return stream_progress_sensor


# --- freshness ----------------------------------------------------------------------------------------------


def gold_freshness_policy(settings: Settings) -> dg.FreshnessPolicy:
    """Fails an asset not materialized (by a run, or a continuous batch through the sensor) for
    ``LAKEHOUSE_GOLD_FRESHNESS_SECONDS`` (another pipeline: its spec's ``quality.freshness``); the daemon
    evaluates it, no run is launched for it."""
    seconds = settings.schedules.gold_freshness_seconds
    if settings.pipeline is not None:
        seconds = settings.quality.freshness_seconds
    return dg.FreshnessPolicy.time_window(fail_window=timedelta(seconds=seconds))


def gold_asset_keys(settings: Settings) -> set[dg.AssetKey]:
    """The gold assets this pipeline keeps (``LAKEHOUSE_GOLD_OUTPUTS``, or its spec's)."""
    return {asset_key(table, settings) for table in kept_tables(settings) if table.layer == "gold"}


def with_gold_freshness(defs: dg.Definitions, views: list[Settings]) -> dg.Definitions:
    """``defs`` with each pipeline's gold freshness policy on every gold asset it keeps."""
    policies = {key: gold_freshness_policy(view) for view in views for key in gold_asset_keys(view)}

    def attach(spec: dg.AssetSpec) -> dg.AssetSpec:
        return dg.apply_freshness_policy(spec, policies[spec.key]) if spec.key in policies else spec

    with warnings.catch_warnings():
        # Definitions.map_asset_specs is marked preview in 1.13; it is the documented way to attach the policy.
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return defs.map_asset_specs(func=attach)


def build_defs(settings: Settings) -> dg.Definitions:
    """The pipeline's progress sensor (at each tick it reads its resource's settings, as the pipeline sees
    them). The freshness policy is attached to the merged definitions (``with_gold_freshness``)."""
    return dg.Definitions(sensors=[build_progress_sensor(settings)])
