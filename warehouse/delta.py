"""Delta helpers: write exactly once per (writer, micro-batch), and read versions from the log.

Every write of a micro-batch is tagged with its writer and batch, in the same atomic commit as the data, and
is skipped when that pair already committed, so a batch re-run after a crash re-applies only the writes that
never committed. Two ways to know "already committed":

- Delta's transaction identifiers ``(txnAppId, txnVersion=batch_id)``: Delta checks them itself, but each
  check reconstructs the table's whole state (three Spark jobs, ~0.7 s, growing with the table's file count).
- Inside a stream's batch (``batch_scope``): the commit's ``userMetadata`` names ``writer`` and ``batch``, and
  the check reads only the commits written since the batch could have started (usually none) straight from
  ``_delta_log``. Sound because a stream's checkpoint has one writer (its lock) and no commit of batch N can
  predate the checkpoint's record that batch N-1 finished.

Who commits: Spark computes every result; one that is small (a batch's log rows, its changed windows) is
collected and committed by delta-rs in milliseconds, a large one by Spark, with the same tags either way
(``SMALL_WRITE_ROWS``, decision 43).
"""

import contextvars
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
from delta.tables import DeltaTable
from deltalake import CommitProperties, Transaction
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from pyspark.sql import DataFrame, SparkSession

from warehouse.catalog import Table
from warehouse.settings import Settings
from warehouse.storage import Location, delta_options, entries, open_delta

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def is_delta_table(path: Location) -> bool:
    """A Delta table exists at ``path`` (its log has a first commit); no JVM, no log replay."""
    return any(name.endswith(".json") for name, _, _ in entries(path / "_delta_log"))


def read_table(spark: SparkSession, settings: Settings, table: Table) -> DataFrame:
    return spark.read.format("delta").load(str(table.path(settings)))


def as_of(spark: SparkSession, settings: Settings, table: Table, version: int | None) -> DataFrame:
    """A table as of a Delta version (time travel); the latest version when ``version`` is None."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(table.path(settings)))


@dataclass(frozen=True)
class BatchScope:
    """One stream micro-batch being written: no commit of it can be older than ``since`` (epoch seconds)."""

    app_id: str
    batch_id: int
    since: float


_BATCH: contextvars.ContextVar[BatchScope | None] = contextvars.ContextVar("lakehouse_batch", default=None)

#: File times come from one clock, but a commit's mtime is set when its file is closed: a little slack.
_CLOCK_SLACK_SECONDS = 5.0


@contextmanager
def batch_scope(app_id: str, batch_id: int, since: float) -> Iterator[None]:
    """Declare the micro-batch the writes inside belong to (set by the stream runner around each batch)."""
    token = _BATCH.set(BatchScope(app_id, batch_id, since))
    try:
        yield
    finally:
        _BATCH.reset(token)


@contextmanager
def sub_scope(app_id: str, batch_id: int) -> Iterator[None]:
    """Inside a stream batch's scope for ``batch_id``, declare writes under another app id of the same
    batch (a derived output's ``<writer>:<output>``): they get the batch's cheap exactly-once check
    instead of Delta's transaction ids. Outside such a scope, nothing changes."""
    scope = _BATCH.get()
    if scope is None or scope.batch_id != batch_id:
        yield
        return
    with batch_scope(app_id, batch_id, scope.since):
        yield


def _scoped(app_id: str, batch_id: int) -> BatchScope | None:
    scope = _BATCH.get()
    return scope if scope and scope.app_id == app_id and scope.batch_id == batch_id else None


def committed_since(path: Path, app_id: str, batch_id: int, since: float) -> bool:
    """Whether a commit of the table at ``path`` newer than ``since`` records (app_id, batch_id)."""
    return committed_version(path, app_id, batch_id, since) is not None


def commit_of(path: Path, app_id: str, batch_id: int) -> int | None:
    """The version of the commit of the table at ``path`` that records (app_id, batch_id) in its
    ``userMetadata``, searched from the newest commit back; None when none does."""
    return committed_version(path, app_id, batch_id)


def committed_version(path: Path, app_id: str, batch_id: int, since: float | None = None) -> int | None:
    """The version of the newest commit of the table at ``path`` recording (app_id, batch_id) in its
    ``userMetadata``; None when none does.

    Searched from the newest commit back, and no further than a commit of an earlier batch of the same
    writer (a writer's batches commit in order). With ``since`` (epoch seconds: no attempt of the batch
    started before it), also no further than a commit written before ``since``, each commit being read
    before its time is: the batch's own commit is found even when the clock went back after ``since``.
    When the clock is now behind ``since`` it went back since the batch began, and times bound nothing."""
    log = path / "_delta_log"
    version = latest_version(log)
    if since is not None and time.time() < since - _CLOCK_SLACK_SECONDS:
        since = None
    while version >= 0:
        commit = log / f"{version:020d}.json"
        try:
            written = commit.stat().st_mtime
            text = commit.read_text()
        except FileNotFoundError:  # cleaned up by log retention: far older than any batch in flight
            return None
        for line in text.splitlines():
            if line.startswith('{"commitInfo"'):
                found = _user_metadata(json.loads(line)["commitInfo"].get("userMetadata"))
                earlier = found.get("batch")
                if found.get("writer") == app_id and earlier == batch_id:
                    return version
                if found.get("writer") == app_id and isinstance(earlier, int) and earlier < batch_id:
                    return None
        if since is not None and written < since - _CLOCK_SLACK_SECONDS:
            return None
        version -= 1
    return None


def scope_since(app_id: str, batch_id: int) -> float | None:
    """The start of the stream batch (app_id, batch_id) when its writes are scoped (no commit of it is
    older); None outside its scope."""
    scope = _scoped(app_id, batch_id)
    return scope.since if scope else None


def latest_version(log: Location) -> int:
    """The newest commit version in a ``_delta_log`` folder (-1 when none), probing up from its checkpoint;
    with no ``_last_checkpoint`` and the first commits expired, the highest numbered commit file listed."""
    version = -1
    with suppress(FileNotFoundError, ValueError, KeyError):
        version = int(json.loads((log / "_last_checkpoint").read_text())["version"])
    while (log / f"{version + 1:020d}.json").exists():
        version += 1
    if version >= 0:
        return version
    numbered = [name[:20] for name, _, _ in entries(log) if name.endswith(".json") and name[:20].isdigit()]
    return max((int(number) for number in numbered), default=-1)


def _user_metadata(raw: str | None) -> dict:
    try:
        found = json.loads(raw or "null")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def batch_metadata(app_id: str, batch_id: int, extra: dict[str, Any] | None = None) -> str:
    return json.dumps({"writer": app_id, "batch": batch_id, **(extra or {})}, sort_keys=True)


def already_written(settings: Settings, table: Table, app_id: str, batch_id: int) -> bool:
    """Whether (app_id, batch_id) has committed a write to ``table`` (either way of tagging, see above)."""
    return _committed(table.path(settings), app_id, batch_id)


def _committed(path: Path, app_id: str, batch_id: int) -> bool:
    scope = _scoped(app_id, batch_id)
    if scope is not None:
        return is_delta_table(path) and committed_since(path, app_id, batch_id, scope.since)
    committed = _transaction_version(path, app_id)
    return committed is not None and committed >= batch_id


#: Up to this many rows a write is collected to the driver and committed by delta-rs; larger ones by Spark
#: (0: every write by Spark). Decision 43.
SMALL_WRITE_ROWS = 20_000


def append_once(
    df: DataFrame, settings: Settings, table: Table, app_id: str, batch_id: int, rows: int | None = None
) -> None:
    """Append ``df`` (projected onto the table's columns) unless this (app_id, batch_id) already committed.

    A result of at most ``SMALL_WRITE_ROWS`` rows (a batch's log rows, most micro-batches) is collected and
    committed by delta-rs, in milliseconds where Spark's append costs a job, a snapshot update and a
    checksum (about 0.5 s); a larger one is written by Spark. Either way the commit carries the same tags.
    ``rows``, when the caller has counted them, spares a large result the collect.
    """
    if already_written(settings, table, app_id, batch_id):
        return
    projected = df.select(*table.column_names)
    small = _collected_if_small(projected) if rows is None or rows <= SMALL_WRITE_ROWS else None
    if small is not None:
        _append_arrow(small, table.path(settings), commit_tags(app_id, batch_id))
        return
    writer = projected.write.format("delta").mode("append")
    if _scoped(app_id, batch_id) is not None:
        writer = writer.option("userMetadata", batch_metadata(app_id, batch_id))
    else:
        writer = writer.option("txnAppId", app_id).option("txnVersion", batch_id)
    writer.save(str(table.path(settings)))


def overwrite_once(
    df: DataFrame, settings: Settings, table: Table, app_id: str, user_metadata: dict[str, Any] | None = None
) -> int | None:
    """Replace every row of ``table`` with ``df``'s in one commit, tagged (app_id, 0) with ``user_metadata``;
    None when that commit exists already (a re-run after a crash), else the rows written.

    Small results are collected and committed by delta-rs (about 0.1 s where Spark's overwrite costs a job,
    a snapshot and a checksum, 1.2 s on two cores); larger ones by Spark. The same commit either way."""
    if already_written(settings, table, app_id, 0):
        return None
    projected = df.select(*table.column_names)
    small = _collected_if_small(projected)
    if small is not None:
        tags = commit_tags(app_id, 0, user_metadata)
        _write_arrow(small, table.path(settings), tags, mode="overwrite")
        return small.num_rows
    writer = projected.write.format("delta").mode("overwrite").option("txnAppId", app_id).option("txnVersion", 0)
    if user_metadata is not None:
        writer = writer.option("userMetadata", json.dumps(user_metadata, sort_keys=True))
    writer.save(str(table.path(settings)))
    written = _rows_committed(table.path(settings))
    return written if written is not None else projected.count()


def _rows_committed(path: Path) -> int | None:
    """The rows the newest commit wrote, from its ``commitInfo`` (None when Delta's metrics are off)."""
    version = latest_version(path / "_delta_log")
    for line in (path / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        if line.startswith('{"commitInfo"'):
            written = json.loads(line)["commitInfo"].get("operationMetrics", {}).get("numOutputRows")
            return None if written is None else int(written)
    return None


def _collected_if_small(df: DataFrame) -> pa.Table | None:
    """``df`` on the driver when it has at most ``SMALL_WRITE_ROWS`` rows; None when it has more (or the
    limit is 0 or less: every write by Spark)."""
    if SMALL_WRITE_ROWS <= 0:
        return None
    try:
        small = df.limit(SMALL_WRITE_ROWS + 1).toArrow()
    except Exception as error:
        # Few rows, but long ones (lines up to LAKEHOUSE_MAX_LINE_BYTES): past spark.driver.maxResultSize the
        # collect fails cleanly, and Spark writes them, streaming, as it writes a large result.
        if "maxResultSize" in str(error):
            return None
        raise
    return small if small.num_rows <= SMALL_WRITE_ROWS else None


def commit_tags(app_id: str, batch_id: int, user_metadata: dict[str, Any] | None = None) -> CommitProperties:
    """A delta-rs commit's tags, as a Spark write of (app_id, batch_id) carries them: in a stream batch's
    scope the batch's ``userMetadata``; outside it Delta's transaction id (and ``user_metadata``, if any)."""
    if _scoped(app_id, batch_id) is not None:
        return CommitProperties(custom_metadata={"userMetadata": batch_metadata(app_id, batch_id, user_metadata)})
    metadata = {"userMetadata": json.dumps(user_metadata, sort_keys=True)} if user_metadata is not None else None
    return CommitProperties(app_transactions=[Transaction(app_id, batch_id)], custom_metadata=metadata)


def append_rows_once(
    rows: Sequence[Mapping[str, Any]], settings: Settings, table: Table, app_id: str, batch_id: int
) -> None:
    """Append rows made on the driver (a watermark, a few figures) exactly once per (app_id, batch_id),
    committed by delta-rs (see ``append_once``)."""
    if already_written(settings, table, app_id, batch_id):
        return
    _append_arrow(rows, table.path(settings), commit_tags(app_id, batch_id))


def append_rows(rows: Sequence[Mapping[str, Any]], settings: Settings, table: Table) -> None:
    """Append rows made on the driver, by delta-rs, with no exactly-once tag (progress figures)."""
    if rows:
        _append_arrow(rows, table.path(settings), CommitProperties())


@dataclass(frozen=True)
class MergeSpec:
    """A MERGE of source rows (``s``) into a table (``t``), in SQL that Spark and delta-rs both run:
    matched rows are deleted when ``delete_when`` holds, else updated by ``update``; unmatched ones
    inserted by ``insert`` (when ``insert_when`` holds)."""

    on: str
    update: dict[str, str]
    insert: dict[str, str]
    delete_when: str | None = None
    insert_when: str | None = None


def merge_changes_once(
    changes: DataFrame,
    path: Path,
    app_id: str,
    batch_id: int,
    spec: MergeSpec,
    user_metadata: dict[str, Any] | None = None,
    collected: pa.Table | None = None,
    by_spark: bool = False,
) -> None:
    """MERGE ``changes`` (or the same rows ``collected`` already) into the table at ``path`` exactly once
    per (app_id, batch_id).

    A batch's changes of at most ``SMALL_WRITE_ROWS`` rows are collected and merged by delta-rs (about
    20 ms for a few thousand rows, where Spark's MERGE costs two jobs and a commit, 0.9 s on two cores);
    a larger set (a backlog's) by Spark, and any set ``by_spark`` (the spec's expressions divide decimals,
    which delta-rs' engine truncates where Spark rounds half up). The commit carries the same tags either way.
    """
    if by_spark:
        collected = None
    small = None if by_spark else (collected if collected is not None else _collected_if_small(changes))
    if small is not None:
        merge_rows_once(small, path, app_id, batch_id, spec, user_metadata)
        return
    spark = changes.sparkSession

    def merge() -> None:
        builder = DeltaTable.forPath(spark, str(path)).alias("t").merge(changes.alias("s"), spec.on)
        if spec.delete_when is not None:
            builder = builder.whenMatchedDelete(condition=spec.delete_when)
        builder = builder.whenMatchedUpdate(set=spec.update)
        builder.whenNotMatchedInsert(condition=spec.insert_when, values=spec.insert).execute()

    merge_once(spark, app_id, batch_id, merge, user_metadata, target=path)


def merge_rows_once(
    rows: pa.Table,
    path: Path,
    app_id: str,
    batch_id: int,
    spec: MergeSpec,
    user_metadata: dict[str, Any] | None = None,
) -> None:
    """MERGE rows already on the driver into the table at ``path`` exactly once, by delta-rs."""

    def merge_unless_committed() -> None:
        # Checked before every attempt: an attempt that committed and then failed must not run twice.
        if _committed(path, app_id, batch_id):
            return
        builder = open_delta(path).merge(
            rows,
            spec.on,
            source_alias="s",
            target_alias="t",
            commit_properties=commit_tags(app_id, batch_id, user_metadata),
        )
        if spec.delete_when is not None:
            builder = builder.when_matched_delete(spec.delete_when)
        builder = builder.when_matched_update(spec.update)
        builder.when_not_matched_insert(spec.insert, spec.insert_when).execute()

    retry_conflicts(merge_unless_committed)


def _append_arrow(data: pa.Table | Sequence[Mapping[str, Any]], path: Path, tags: CommitProperties) -> None:
    """Append Spark's Arrow result, or rows made on the driver, in the table's own schema (the catalog's,
    with any column a newer version added; timestamps as UTC)."""
    _write_arrow(data, path, tags, mode="append")


def _write_arrow(data: pa.Table | Sequence[Mapping[str, Any]], path: Path, tags: CommitProperties, mode: str) -> None:
    schema = pa.schema(open_delta(path).schema().to_arrow())
    if isinstance(data, pa.Table):
        # Spark's Arrow types (large strings, nullable fields) cast to the table's exact ones.
        data = data.select(schema.names).cast(schema)
    else:
        data = pa.Table.from_pylist([dict(row) for row in data], schema=schema)
    # Not retried here: delta-rs retries a concurrent append itself, and one that failed after its commit
    # must not be written again.
    deltalake.write_deltalake(str(path), data, mode=mode, commit_properties=tags, storage_options=delta_options(path))


@contextmanager
def materialized(df: DataFrame) -> Iterator[DataFrame]:
    """``df`` computed once and kept (memory, spilling to disk) for the block, with its lineage cut.

    Unlike ``persist``, a write of the result does not carry the tables ``df`` read: appending rows
    derived from a read of the same table made Delta reconstruct that table's whole state to record the
    read (three Spark jobs, growing with the table). The blocks are freed when the block ends.
    """
    detached = df.localCheckpoint(eager=True)
    try:
        yield detached
    finally:
        # The checkpointed frame is a LogicalRDD over the blocks; dropping them is the only way to free
        # them before the JVM's garbage collector gets to it.
        detached._jdf.queryExecution().analyzed().rdd().unpersist(False)


@contextmanager
def computed_once(df: DataFrame, at_most: int | None = None) -> Iterator[tuple[DataFrame, pa.Table | None]]:
    """``df`` computed once for the block, and its rows on the driver when it is small.

    When the caller knows ``df`` has at most ``at_most`` rows, within ``SMALL_WRITE_ROWS``, it is collected
    (one job) and given back as a Spark local relation over those rows, with the rows themselves: counts,
    a delta-rs commit and the caller's own bookkeeping then need no further job. Otherwise it is
    :func:`materialized` and the rows are None."""
    if at_most is not None and SMALL_WRITE_ROWS > 0 and at_most <= SMALL_WRITE_ROWS:
        rows = df.toArrow()
        yield df.sparkSession.createDataFrame(rows, schema=df.schema), rows
        return
    with materialized(df) as held:
        yield held, None


def append_all_once(
    writes: list[tuple[DataFrame, Table, int | None]], settings: Settings, app_id: str, batch_id: int
) -> None:
    """``append_once`` of (rows, table, row count if known) into several tables side by side: each commit's
    fixed cost is mostly driver time, so a few appends overlap well even on two cores."""
    side_by_side(*(partial(append_once, df, settings, table, app_id, batch_id, rows) for df, table, rows in writes))


@contextmanager
def in_background(call: Callable[[], Any]) -> Iterator[Future]:
    """``call`` run in a thread for the block, in a copy of this context (a batch scope travels with it).
    The block ends when the call has; its failure is raised then, unless the block failed first."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(contextvars.copy_context().run, call)
        yield future
    future.result()


def side_by_side(*calls: Callable[[], Any]) -> list[Any]:
    """Run independent writes (to different tables) in threads, each in a copy of this context so a batch
    scope travels with it; their results in order, the first failure raised. ``transaction_id`` tags a
    MERGE through session settings: calls that MERGE each need a session of their own (``newSession``)."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        return [future.result() for future in futures]


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
    target: Path | None = None,
) -> None:
    """Run a MERGE built by ``merge`` into the table at ``target`` exactly once for (app_id, batch_id),
    retrying write conflicts. Inside a ``batch_scope`` the check reads recent commits (``target`` needed)."""
    scope = _scoped(app_id, batch_id)
    if scope is None or target is None:
        with transaction_id(spark, app_id, batch_id, user_metadata):
            retry_conflicts(merge)
        return

    def merge_unless_committed() -> None:
        # Checked before every attempt: an attempt that committed and then failed must not run twice.
        if not committed_since(target, app_id, batch_id, scope.since):
            merge()

    spark.conf.set(_USER_METADATA, batch_metadata(app_id, batch_id, user_metadata))
    try:
        retry_conflicts(merge_unless_committed)
    finally:
        spark.conf.unset(_USER_METADATA)


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
            # delta-rs says "concurrent" in the conflicts it does not retry itself (a MERGE whose read changed).
            rust = isinstance(error, CommitFailedError) and "concurrent" in str(error).lower()
            conflict = rust or any(name in str(error) for name in _CONFLICTS)
            if attempt == attempts or not conflict:
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
        if found := _user_metadata(row.userMetadata):
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
    """The table's latest commit version, or None when it does not exist (from the log's files: no Spark job)."""
    location = table.path(settings)
    return latest_version(location / "_delta_log") if is_delta_table(location) else None


def transaction_version(settings: Settings, table: Table, app_id: str) -> int | None:
    """The newest transaction version ``app_id`` committed to the table (delta-rs: no Spark job)."""
    return _transaction_version(table.path(settings), app_id)


def _transaction_version(path: Path, app_id: str) -> int | None:
    try:
        return open_delta(path).transaction_version(app_id)
    except TableNotFoundError:
        return None
