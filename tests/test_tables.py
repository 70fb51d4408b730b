"""Catalog tables as the lakehouse creates them (by delta-rs, in milliseconds) are the tables Spark's own
``DeltaTable.createIfNotExists`` makes: schema, partitioning, comment, properties and protocol."""

from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from warehouse.catalog import all_tables
from warehouse.settings import Settings
from warehouse.storage import open_delta
from warehouse.tables import ensure_table

pytestmark = pytest.mark.quick


def _by_spark(spark: SparkSession, table, path: Path) -> None:
    builder = DeltaTable.createIfNotExists(spark).location(str(path)).addColumns(table.schema)
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    builder = builder.comment(table.description)
    for key, value in table.table_properties.items():
        builder = builder.property(key, value)
    builder.execute()


def _described(path: Path) -> tuple:
    log = open_delta(path)
    metadata, protocol = log.metadata(), log.protocol()
    return (
        log.schema().to_json(),
        metadata.partition_columns,
        metadata.description,
        metadata.configuration,
        (protocol.min_reader_version, protocol.min_writer_version, protocol.reader_features, protocol.writer_features),
    )


def test_every_catalog_table_is_created_as_spark_creates_it(
    spark: SparkSession, settings: Settings, tmp_path: Path
) -> None:
    for table in all_tables(settings):
        ensure_table(spark, settings, table)
        _by_spark(spark, table, tmp_path / "by-spark" / table.name)
        assert _described(table.path(settings)) == _described(tmp_path / "by-spark" / table.name), table.name
        ensure_table(spark, settings, table)  # an existing table is left as it is
        assert open_delta(table.path(settings)).version() == 0
        read = spark.read.format("delta").load(str(table.path(settings)))
        assert read.schema.simpleString() == table.schema.simpleString(), table.name
