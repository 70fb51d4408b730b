"""A replay swaps each rebuilt table in with ``overwrite_once``: one commit that replaces every row, tagged
with the replay's transaction id, committed by delta-rs when the rows are few and by Spark otherwise. Both
ways must leave the same table: the new rows only, the same schema and partitioning, the tag that makes a
second attempt a no-op, and the metadata a reader of the commit relies on."""

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyspark.sql import DataFrame, SparkSession

from warehouse import delta
from warehouse.catalog import SILVER_EVENTS
from warehouse.delta import append_once, overwrite_once, transaction_version
from warehouse.settings import Settings
from warehouse.storage import open_delta
from warehouse.tables import ensure_table

pytestmark = pytest.mark.quick


def _events(spark: SparkSession, ids: range, day: date) -> DataFrame:
    at = datetime(day.year, day.month, day.day, 10, 0, tzinfo=UTC)
    rows = [
        {
            "event_id": f"e{n}",
            "user_id": f"u{n % 3}",
            "event_time": at,
            "amount": Decimal(f"{n}.25"),
            "event_type": "purchase",
            "event_date": day,
            "source_position": f"f.jsonl#{n}",
            "ingest_time": at,
            "arrived_at": at,
            "payload_hash": None,
            "silver_batch": 0,
            "event_key": n,
            "url": None,
            "order_id": None,
        }
        for n in ids
    ]
    return spark.createDataFrame(rows, SILVER_EVENTS.schema)


@pytest.mark.parametrize("writes", ["delta-rs", "spark"])
def test_an_overwrite_replaces_every_row_once_with_its_tag_either_way(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch, writes: str
) -> None:
    if writes == "spark":
        monkeypatch.setattr(delta, "SMALL_WRITE_ROWS", 0)
    table = SILVER_EVENTS
    ensure_table(spark, settings, table)
    append_once(_events(spark, range(0, 40), date(2026, 11, 1)), settings, table, "live-stream", 0)
    before = open_delta(table.path(settings))
    schema, partitions = before.schema().to_json(), before.metadata().partition_columns

    metadata = {"consumed": {"silver.events": 7}}
    written = overwrite_once(_events(spark, range(100, 125), date(2026, 11, 2)), settings, table, "replay:1", metadata)

    assert written == 25
    after = open_delta(table.path(settings))
    assert after.version() == before.version() + 1
    assert (after.schema().to_json(), after.metadata().partition_columns) == (schema, partitions)
    assert transaction_version(settings, table, "replay:1") == 0
    commit = after.history(1)[0]
    assert json.loads(commit["userMetadata"]) == metadata
    read = spark.read.format("delta").load(str(table.path(settings)))
    assert sorted(r.event_id for r in read.collect()) == sorted(f"e{n}" for n in range(100, 125))
    assert {r.event_date for r in read.select("event_date").distinct().collect()} == {date(2026, 11, 2)}
    assert read.where("event_id = 'e101'").first().amount == Decimal("101.25")

    # The same replay's second attempt (after a crash past its commit) writes nothing.
    assert overwrite_once(_events(spark, range(200, 210), date(2026, 11, 3)), settings, table, "replay:1") is None
    assert open_delta(table.path(settings)).version() == after.version()
    assert spark.read.format("delta").load(str(table.path(settings))).count() == 25
