"""Delta helpers: create catalog tables, and write exactly once per (writer, micro-batch).

Exactly-once rests on Delta's transaction identifiers: every write of a micro-batch carries
``(app_id, version=batch_id)``; Delta records the pair in the same commit and skips any later write whose
version is not newer. A batch re-run after a crash therefore re-applies only the writes that never committed.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from warehouse.catalog import Table
from warehouse.settings import Settings

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


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
def transaction_id(spark: SparkSession, app_id: str, batch_id: int) -> Iterator[None]:
    """Tag the DML run inside (MERGE, UPDATE, DELETE) with a transaction id, so a replay is skipped.

    Streaming queries run foreachBatch on their own cloned session, so setting the conf here does not
    leak into another query running beside this one.
    """
    spark.conf.set(_TXN_APP_ID, app_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)


def merge_once(
    spark: SparkSession,
    app_id: str,
    batch_id: int,
    merge: Callable[[], None],
) -> None:
    """Run a MERGE built by ``merge`` exactly once for (app_id, batch_id)."""
    with transaction_id(spark, app_id, batch_id):
        merge()


def table_version(spark: SparkSession, settings: Settings, table: Table) -> int | None:
    """The table's latest commit version, or None when it does not exist."""
    path = str(table.path(settings))
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return int(DeltaTable.forPath(spark, path).history(1).select("version").first()[0])
