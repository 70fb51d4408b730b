"""Delta helpers: create catalog tables, and write exactly once per (writer, micro-batch).

Exactly-once rests on Delta's transaction identifiers: every write of a micro-batch carries
``(app_id, version=batch_id)``; Delta records the pair in the same commit and skips any later write whose
version is not newer. A batch re-run after a crash therefore re-applies only the writes that never committed.
"""

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from warehouse.catalog import Table
from warehouse.settings import Settings

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def ensure_table(spark: SparkSession, settings: Settings, table: Table) -> DeltaTable:
    """Create the table at its catalog path if it does not exist yet, and return it."""
    path = str(table.path(settings))
    if not DeltaTable.isDeltaTable(spark, path):
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(table.schema)
        if table.partition_by:
            builder = builder.partitionedBy(*table.partition_by)
        builder = builder.comment(table.description)
        for key, value in table.properties.items():
            builder = builder.property(key, value)
        builder.execute()
    return DeltaTable.forPath(spark, path)


def ensure_tables(spark: SparkSession, settings: Settings, tables: list[Table]) -> None:
    for table in tables:
        ensure_table(spark, settings, table)


def read_table(spark: SparkSession, settings: Settings, table: Table) -> DataFrame:
    return spark.read.format("delta").load(str(table.path(settings)))


def as_of(spark: SparkSession, settings: Settings, table: Table, version: int | None) -> DataFrame:
    """A table as of a Delta version (time travel); the latest version when ``version`` is None."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(table.path(settings)))


def append_once(df: DataFrame, settings: Settings, table: Table, app_id: str, batch_id: int) -> None:
    """Append ``df`` (projected onto the table's columns) unless this (app_id, batch_id) already committed."""
    (
        df.select(*table.column_names)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", batch_id)
        .save(str(table.path(settings)))
    )


@contextmanager
def transaction_id(
    spark: SparkSession, app_id: str, batch_id: int, user_metadata: dict[str, Any] | None = None
) -> Iterator[None]:
    """Tag the DML run inside (MERGE, UPDATE, DELETE) with a transaction id, so a replay is skipped.

    ``user_metadata`` goes into the commit's ``userMetadata`` as JSON: it lands in the same atomic
    commit as the data, which is what makes it trustworthy after a crash.

    Streaming queries run foreachBatch on their own cloned session, so setting the conf here does not
    leak into another query running beside this one.
    """
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    if user_metadata is not None:
        spark.conf.set(_USER_METADATA, json.dumps(user_metadata, sort_keys=True))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)
        spark.conf.unset(_USER_METADATA)


def merge_once(
    spark: SparkSession,
    app_id: str,
    batch_id: int,
    merge: Callable[[], None],
    user_metadata: dict[str, Any] | None = None,
) -> None:
    """Run a MERGE built by ``merge`` exactly once for (app_id, batch_id), retrying write conflicts."""
    with transaction_id(spark, app_id, batch_id, user_metadata):
        retry_conflicts(merge)


#: Delta's optimistic-concurrency failures: another writer committed first; the write can be re-run.
_CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ProtocolChangedException",
)


def retry_conflicts(write: Callable[[], None], attempts: int = 6, first_delay: float = 0.2) -> None:
    """Run ``write``; when Delta reports a concurrent commit, wait (exponential backoff) and run it again.

    Safe for our writes because each carries a transaction id (a write that did commit is skipped on the
    re-run) and MERGEs are re-planned against the newest snapshot.
    """
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            write()
            return
        except Exception as error:
            if attempt == attempts or not any(name in str(error) for name in _CONFLICTS):
                raise
            time.sleep(delay)
            delay *= 2


def _commits_with_metadata(
    spark: SparkSession, settings: Settings, table: Table, depth: int
) -> Iterator[tuple[int, datetime, dict]]:
    """(version, timestamp, userMetadata as a dict) of the table's last ``depth`` commits, newest first."""
    path = str(table.path(settings))
    if not DeltaTable.isDeltaTable(spark, path):
        return
    rows = DeltaTable.forPath(spark, path).history(depth).select("version", "timestamp", "userMetadata").collect()
    for row in sorted(rows, key=lambda r: r.version, reverse=True):
        try:
            found = json.loads(row.userMetadata or "null")
        except ValueError:
            continue
        if isinstance(found, dict):
            yield int(row.version), row.timestamp, found


def commit_metadata(spark: SparkSession, settings: Settings, table: Table, key: str, depth: int = 200) -> dict | None:
    """The newest ``userMetadata`` JSON among the table's last ``depth`` commits that carries ``key``."""
    return next((found for _, _, found in _commits_with_metadata(spark, settings, table, depth) if key in found), None)


@dataclass(frozen=True)
class Commit:
    """One Delta commit: its version and when it was committed."""

    version: int
    timestamp: datetime


def find_commit(
    spark: SparkSession, settings: Settings, table: Table, app_id: str, batch_id: int, depth: int = 1000
) -> Commit | None:
    """The commit that (app_id, batch_id) wrote to the table, found by the ``writer`` and ``batch`` its
    ``userMetadata`` records (see ``transaction_id``); None when that batch has not committed there."""
    committed = transaction_version(settings, table, app_id)
    if committed is None or committed < batch_id:
        return None
    for version, timestamp, found in _commits_with_metadata(spark, settings, table, depth):
        if found.get("writer") == app_id and found.get("batch") == batch_id:
            return Commit(version, timestamp)
    return None


def table_version(spark: SparkSession, settings: Settings, table: Table) -> int | None:
    """The table's latest commit version, or None when it does not exist."""
    path = str(table.path(settings))
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return int(DeltaTable.forPath(spark, path).history(1).select("version").first()[0])


def transaction_version(settings: Settings, table: Table, app_id: str) -> int | None:
    """The newest transaction version ``app_id`` committed to the table (delta-rs: no Spark job)."""
    from deltalake import DeltaTable as RustTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return RustTable(str(table.path(settings))).transaction_version(app_id)
    except TableNotFoundError:
        return None
