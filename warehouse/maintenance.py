"""Table maintenance: compact the small files every micro-batch leaves, drop files nothing references, and
checkpoint the Delta log (which also expires old log entries).

Safe beside running streams: compaction commits carry ``dataChange=false``, so Delta stream sources skip
them, and a blind append never conflicts with them. Gold is rewritten by MERGE, so its compaction holds the
gold lock (the caller's job) and Delta conflicts are retried. VACUUM only removes files unreferenced for
longer than the retention, so a reader of any version inside it keeps working (time travel further back
than the retention is given up, on purpose).
"""

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from warehouse.catalog import Table
from warehouse.delta import is_delta_table, latest_version, retry_conflicts
from warehouse.locks import hold_gold
from warehouse.settings import Settings
from warehouse.storage import Location, file_times, files_under, open_delta

_RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_RETENTION_WINDOW_IGNORE = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"

#: Delta refuses a VACUUM retention under its own default (a week) unless this check is off.
_DELTA_DEFAULT_RETENTION_HOURS = 168


@dataclass(frozen=True)
class TableMaintenance:
    """What one table's maintenance did: live files before and after compaction, files deleted."""

    table: str
    live_files_before: int
    live_files_after: int
    files_on_disk_before: int
    files_on_disk_after: int
    optimize_seconds: float
    vacuum_seconds: float
    checkpoint_seconds: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def live_files(path: Path) -> int:
    """Data files the table's current version references (from the Delta log, no Spark job)."""
    return open_delta(path).get_add_actions(flatten=True).num_rows


def files_on_disk(path: Location) -> int:
    """Data files under the table's folder, referenced or not (what VACUUM removes)."""
    return sum(1 for name in files_under(path) if _is_data_file(name))


def deletable_files(path: Location, retention_hours: int) -> int:
    """Data files VACUUM may delete now: referenced by no live version, and written before the retention.

    VACUUM deletes nothing else (a file written or replaced within the retention is kept, by its own
    modification time or its tombstone's), so a table without one is not vacuumed: under the default
    retention of a week, an hourly VACUUM would otherwise list and join every table for nothing."""
    cutoff = time.time() - retention_hours * 3600
    live = {unquote(name) for name in open_delta(path).get_add_actions(flatten=True).column("path").to_pylist()}
    written = file_times(path)
    return sum(1 for name, at in written.items() if _is_data_file(name) and at < cutoff and unquote(name) not in live)


def _is_data_file(name: str) -> bool:
    return name.endswith(".parquet") and not name.startswith("_delta_log/")


def maintain_tables(spark: SparkSession, settings: Settings, tables: list[Table]) -> list[TableMaintenance]:
    """Maintain each table in turn; tables rewritten in place (gold) under the gold lock."""
    done = []
    for table in tables:
        if table.append_only:
            result = maintain_table(spark, settings, table)
        else:
            with hold_gold(settings, f"maintenance of {table.name}"):
                result = maintain_table(spark, settings, table)
        if result is not None:
            done.append(result)
    return done


def maintain_table(spark: SparkSession, settings: Settings, table: Table) -> TableMaintenance | None:
    """OPTIMIZE (Z-ordered by the table's ``zorder_by``), VACUUM with the home's retention, checkpoint the log."""
    zorder_by = table.zorder_by
    path = table.path(settings)
    if not is_delta_table(path):
        return None
    before_live, before_disk = live_files(path), files_on_disk(path)

    started = time.monotonic()
    # Nothing to do is done for free: a table with at most one file per partition is not rewritten, one
    # with no file VACUUM may delete is not vacuumed, one checkpointed at its newest version is not
    # checkpointed.
    if before_live > max(1, partitions(path)):
        optimizer = DeltaTable.forPath(spark, str(path)).optimize()
        retry_conflicts(lambda: optimizer.executeZOrderBy(*zorder_by) if zorder_by else optimizer.executeCompaction())
    optimized = time.monotonic()
    retention = settings.schedules.vacuum_retention_hours
    if deletable_files(path, retention):
        _vacuum(spark, DeltaTable.forPath(spark, str(path)), retention)
    vacuumed = time.monotonic()
    if latest_version(path / "_delta_log") > _last_checkpoint(path):
        checkpoint_log(path)
    checkpointed = time.monotonic()
    return TableMaintenance(
        table=table.name,
        live_files_before=before_live,
        live_files_after=live_files(path),
        files_on_disk_before=before_disk,
        files_on_disk_after=files_on_disk(path),
        optimize_seconds=round(optimized - started, 3),
        vacuum_seconds=round(vacuumed - optimized, 3),
        checkpoint_seconds=round(checkpointed - vacuumed, 3),
    )


def checkpoint_log(path: Location) -> None:
    """Checkpoint the table's log at its newest version and expire log entries older than its log retention:
    the next reader starts from one file instead of replaying JSON commits."""
    # Written by delta-rs: the same checkpoint, its `txn` actions too (which the idempotent writes rely on),
    # in milliseconds instead of a Spark job's second and a half per table.
    log = open_delta(path)
    log.create_checkpoint()
    log.cleanup_metadata()


def partitions(path: Location) -> int:
    """Partition folders holding data (1 for an unpartitioned table)."""
    return len({os.path.dirname(name) for name in files_under(path) if name.endswith(".parquet")})


def _last_checkpoint(path: Path) -> int:
    try:
        return int(json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"])
    except (FileNotFoundError, ValueError, KeyError):
        return -1


def _vacuum(spark: SparkSession, delta: DeltaTable, retention: int) -> None:
    """Delete files unreferenced for longer than ``retention`` hours."""
    # Delta 4 ignores a retention argument other than 0 unless told not to; the home's setting is the rule.
    spark.conf.set(_RETENTION_WINDOW_IGNORE, "false")
    if retention < _DELTA_DEFAULT_RETENTION_HOURS:
        spark.conf.set(_RETENTION_CHECK, "false")
    try:
        delta.vacuum(float(retention))
    finally:
        spark.conf.unset(_RETENTION_CHECK)
        spark.conf.unset(_RETENTION_WINDOW_IGNORE)
