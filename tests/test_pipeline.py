"""Streaming integration: the real streams over real Delta tables, checked against independent goldens."""

from collections import defaultdict
from datetime import UTC
from decimal import Decimal

import duckdb
import pytest
from delta.tables import DeltaTable as SparkDeltaTable
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from devtools.synthetic import StreamSpec, generate_lines
from runtime.checkpoints import LANDING_STAGE
from runtime.runner import prepare, run_once, run_stage_once
from runtime.stages import stage_named
from tests.lines import event, land
from transforms.events import parse_events
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_CORRECTIONS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    kept_tables,
    tumbling_table,
)
from warehouse.delta import read_table, table_version


def count(spark, settings, table) -> int:
    return read_table(spark, settings, table).count()


def test_the_seeds_running_example(spark, settings) -> None:
    land(
        settings,
        "example.jsonl",
        [
            '{"event_id": "1", "user_id": "A", "event_time": "2024-01-01T10:00:00Z", "amount": 5}',
            '{"event_id": "2", "user_id": "A", "event_time": "2024-01-01T10:04:00Z", "amount": 2}',
            '{"event_id": "3", "user_id": "B", "event_time": "2024-01-01T10:02:00Z", "amount": 3}',
            '{"event_id": "4", "user_id": "B", "event_time": "2024-01-01T10:06:00Z", "amount": 1}',
        ],
    )
    run_once(spark, settings)
    gold = read_table(spark, settings, tumbling_table(settings)).collect()
    assert {(r.user_id, r.window_start.strftime("%H:%M"), r.window_end.strftime("%H:%M")) for r in gold} == {
        ("A", "10:00", "10:05"),
        ("B", "10:00", "10:05"),
        ("B", "10:05", "10:10"),
    }
    values = {(r.user_id, r.window_start.strftime("%H:%M")): (r.total_amount, r.event_count) for r in gold}
    assert values == {
        ("A", "10:00"): (Decimal("7.00"), 2),
        ("B", "10:00"): (Decimal("3.00"), 1),
        ("B", "10:05"): (Decimal("1.00"), 1),
    }
    assert all(r.revision == 1 for r in gold)
    # Watermark 10:04 (10:06 - 2 min) has not passed 10:05 + 1 min, so no window is final yet.
    assert not any(r.is_final for r in gold)


DUCKDB_GOLDEN = r"""
with files as (
    select filename, string_split(content, chr(10)) as parts from read_text(?)
), lines as (
    select filename, unnest(generate_series(1, len(parts))) as line_no, unnest(parts) as line from files
), typed as (
    select filename, line_no,
        json_extract_string(line, '$.event_id') as event_id,
        json_extract_string(line, '$.user_id') as user_id,
        case json_type(line, '$.event_time')
            when 'VARCHAR' then try_cast(json_extract_string(line, '$.event_time') as timestamptz)
            when 'BIGINT' then epoch_ms(json_extract(line, '$.event_time')::bigint)
            when 'UBIGINT' then epoch_ms(json_extract(line, '$.event_time')::bigint)
        end as event_time,
        try_cast(json_extract(line, '$.amount')::varchar as decimal(18, 2)) as amount
    from lines
    where line <> '' and json_valid(line) and json_type(line) = 'OBJECT'
      and json_type(line, '$.event_id') = 'VARCHAR' and trim(json_extract_string(line, '$.event_id')) <> ''
      and json_type(line, '$.user_id') = 'VARCHAR' and trim(json_extract_string(line, '$.user_id')) <> ''
      and json_type(line, '$.amount') in ('BIGINT', 'UBIGINT', 'DOUBLE')
      and isfinite(json_extract(line, '$.amount')::double)
), firsts as (
    select * from typed where event_time is not null and amount is not null
    qualify row_number() over (partition by event_id order by filename, line_no) = 1
)
select user_id,
       to_timestamp(floor(epoch(event_time) / 300) * 300) as window_start,
       sum(amount)::decimal(18, 2) as total, count(*) as n
from firsts group by all
"""


def test_generated_stream_equals_duckdb_and_reruns_change_nothing(spark, settings) -> None:
    spec = StreamSpec(
        events=3000, users=25, rate=2.0, disorder_seconds=30, duplicate_fraction=0.08,
        late_fraction=0.03, invalid_fraction=0.04, seed=21,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    for part in range(3):
        land(settings, f"part{part}.jsonl", lines[part * len(lines) // 3 : (part + 1) * len(lines) // 3])
        run_once(spark, settings)

    # DuckDB, over the same landing files, is the independent golden.
    golden = {
        (user, start.astimezone(UTC)): (total, n)
        for user, start, total, n in duckdb.execute(DUCKDB_GOLDEN, [str(settings.landing_dir / "*.jsonl")]).fetchall()
    }
    gold = {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }
    late = defaultdict(lambda: [Decimal("0.00"), 0])
    for r in read_table(spark, settings, SILVER_LATE_EVENTS).collect():
        late[(r.user_id, r.window_start.replace(tzinfo=UTC))][0] += r.amount
        late[(r.user_id, r.window_start.replace(tzinfo=UTC))][1] += 1
    assert late, "the stream was generated with late events; some must be set aside"

    # Windows without late events are exact; with them, gold + the late side output is exact.
    for key, expected in golden.items():
        if key not in late:
            assert gold.get(key) == expected, key
        combined = gold.get(key, (Decimal("0.00"), 0))
        assert (combined[0] + late[key][0], combined[1] + late[key][1]) == expected, key
    assert set(gold) <= set(golden)

    # Conservation: every line is in bronze once, and in exactly one of silver / quarantine / duplicates.
    bronze = count(spark, settings, BRONZE_EVENTS)
    assert bronze == len(lines)
    split = [count(spark, settings, t) for t in (SILVER_EVENTS, SILVER_QUARANTINE, SILVER_DUPLICATES)]
    assert sum(split) == bronze and all(split)
    assert read_table(spark, settings, SILVER_EVENTS).select("event_id").distinct().count() == split[0]
    conflicting = read_table(spark, settings, SILVER_DUPLICATES).where("conflicting").count()
    assert 0 < conflicting < split[2]

    # A run with no new input changes no table version.
    versions = {t.name: table_version(spark, settings, t) for t in kept_tables(settings)}
    run_once(spark, settings)
    assert {t.name: table_version(spark, settings, t) for t in kept_tables(settings)} == versions

    # Every table reads back without Spark (delta-rs), with the same rows.
    for table in kept_tables(settings):
        arrow = DeltaTable(str(table.path(settings))).to_pyarrow_table()
        assert arrow.num_rows == count(spark, settings, table), table.name
        assert set(table.column_names) <= set(arrow.column_names), table.name


@pytest.mark.quick
def test_a_file_named_like_a_glob_does_not_make_spark_read_the_others_twice(spark, settings) -> None:
    """SPARK-58518: a batch holding ``x[1].jsonl`` reads every other file of the batch twice."""
    for name, rows in (("a.jsonl", 3), ("b.jsonl", 2), ("copied [1] {by hand}.jsonl", 1)):
        path = settings.landing_dir / name
        path.write_text("".join(f'{{"event_id": "{name}-{n}"}}\n' for n in range(rows)))
    prepare(spark, settings)
    run_stage_once(spark, settings, stage_named(settings, LANDING_STAGE))
    per_file = {
        r.source_file.rsplit("/", 1)[-1]: (r.rows, r.lines)
        for r in read_table(spark, settings, BRONZE_EVENTS)
        .groupBy("source_file")
        .agg(F.count("*").alias("rows"), F.countDistinct("source_line").alias("lines"))
        .collect()
    }
    assert per_file == {"a.jsonl": (3, 3), "b.jsonl": (2, 2), "copied%20%5B1%5D%20%7Bby%20hand%7D.jsonl": (1, 1)}


def test_dedup_is_exact_across_days_and_in_a_home_older_than_the_event_key(spark, settings) -> None:
    """Dedup looks history up by event_key and then only in the partitions of the days the keys live in:
    a redelivery with a different event_time (another day) is still a duplicate, and a home written
    before event_key existed gets the column and keeps deduplicating against its keyless rows."""
    # A silver.events written before event_key existed, holding e1 and e2 of 2024-01-01.
    path = str(SILVER_EVENTS.path(settings))
    old_schema = StructType([f for f in SILVER_EVENTS.schema.fields if f.name not in {"event_key", "arrived_at"}])
    SparkDeltaTable.createIfNotExists(spark).location(path).addColumns(old_schema).partitionedBy("event_date").execute()
    day1 = [event("e1", "A", "2024-01-01T10:00:00Z", "5"), event("e2", "B", "2024-01-01T11:00:00Z", "3")]
    old_rows = parse_events(spark.createDataFrame([(line,) for line in day1], "raw string"), 1024).withColumns(
        {
            "event_date": F.to_date("event_time"),
            "source_position": F.lit("old#1"),
            "ingest_time": F.current_timestamp(),
            # Accepted by batches before the silver stream's next one (a fresh checkpoint starts at 0).
            "silver_batch": F.lit(-1).cast("long"),
        }
    )
    old_rows.select(*old_schema.fieldNames()).write.format("delta").mode("append").save(path)

    land(
        settings,
        "day5.jsonl",
        [
            event("e1", "A", "2024-01-05T10:00:00Z", "5"),  # conflicting: another day
            event("e2", "B", "2024-01-01T11:00:00Z", "3"),  # a plain redelivery
            event("e3", "C", "2024-01-05T10:00:00Z", "7"),
            event("e3", "C", "2024-01-05T10:00:00Z", "7"),  # repeated inside the batch
        ],
    )
    run_once(spark, settings)
    land(
        settings,
        "day9.jsonl",
        [event("e3", "C", "2024-01-09T10:00:00Z", "7"), event("e4", "D", "2024-01-09T10:00:00Z", "1")],
    )
    run_once(spark, settings)

    silver = {r.event_id: r for r in read_table(spark, settings, SILVER_EVENTS).collect()}
    assert read_table(spark, settings, SILVER_EVENTS).count() == len(silver) == 4
    assert silver["e1"].event_time.day == 1 and silver["e3"].event_time.day == 5
    # Keyless old rows stay null; new rows carry xxhash64(event_id).
    assert silver["e1"].event_key is None and silver["e2"].event_key is None
    ids = spark.createDataFrame([("e3",), ("e4",)], "event_id string")
    keys = dict(ids.select("event_id", F.xxhash64("event_id")).collect())
    assert (silver["e3"].event_key, silver["e4"].event_key) == (keys["e3"], keys["e4"])
    duplicates = sorted((r.event_id, r.conflicting) for r in read_table(spark, settings, SILVER_DUPLICATES).collect())
    assert duplicates == [("e1", True), ("e2", False), ("e3", False), ("e3", True)]


@pytest.mark.quick
def test_a_long_lived_process_deduplicates_from_its_key_index_and_reloads_it_after_another_writer(
    spark, settings
) -> None:
    """The source stream's batches answer "stored before?" from the process's index of silver's keys; a
    commit to silver.events by anyone else (here an outside append of e5) makes the next batch reload it."""
    from runtime.carry import _SEEN

    land(
        settings,
        "one.jsonl",
        [event("e1", "A", "2024-01-01T10:00:00Z", "5"), event("e2", "B", "2024-01-01T11:00:00Z", "3")],
    )
    run_once(spark, settings)
    seen = _SEEN[settings.home]
    assert seen.usable and seen.version == table_version(spark, settings, SILVER_EVENTS)

    outside = (
        read_table(spark, settings, SILVER_EVENTS)
        .where("event_id = 'e1'")
        .withColumns(
            {"event_id": F.lit("e5"), "event_key": F.xxhash64(F.lit("e5")), "silver_batch": F.lit(-1).cast("long")}
        )
    )
    outside.write.format("delta").mode("append").save(str(SILVER_EVENTS.path(settings)))
    land(
        settings,
        "two.jsonl",
        [
            event("e1", "A", "2024-01-07T10:00:00Z", "5"),  # stored under another day: conflicting
            event("e5", "A", "2024-01-01T10:00:00Z", "5"),  # stored by the outside writer
            event("e6", "C", "2024-01-07T10:00:00Z", "1"),
        ],
    )
    run_once(spark, settings)

    # Nothing stored, but one id twice in the batch: the second arrival is still a duplicate.
    land(
        settings,
        "three.jsonl",
        [event("e8", "D", "2024-01-07T10:00:00Z", "2"), event("e8", "D", "2024-01-07T10:01:00Z", "2")],
    )
    run_once(spark, settings)

    ids = [r.event_id for r in read_table(spark, settings, SILVER_EVENTS).collect()]
    assert sorted(ids) == ["e1", "e2", "e5", "e6", "e8"]
    duplicates = dict((r.event_id, r.conflicting) for r in read_table(spark, settings, SILVER_DUPLICATES).collect())
    assert sorted(duplicates) == ["e1", "e5", "e8"] and duplicates["e1"] is True and duplicates["e8"] is True
    assert seen.version == table_version(spark, settings, SILVER_EVENTS)


@pytest.mark.quick
def test_a_long_lived_process_keeps_gold_open_windows_exact_and_reloads_them_after_another_writer(
    spark, settings
) -> None:
    """The window step takes its old values from the process's copy of gold's open windows: after each
    batch the copy equals gold, and a commit to gold by anyone else makes the next batch load it again
    (the correction then shows the other writer's value as the old one)."""
    from runtime.carry import _OPEN

    def kept_equals_gold() -> None:
        kept = _OPEN[tumbling_table(settings).path(settings)]
        assert kept.version == table_version(spark, settings, tumbling_table(settings))
        stored = read_table(spark, settings, tumbling_table(settings))
        if kept.since is not None:
            stored = stored.where(F.col("window_start") >= F.lit(kept.since))
        columns = ["user_id", "window_start", "total_amount", "event_count", "revision", "is_final", "updated_at"]
        assert sorted(kept.rows.select(columns).to_pylist(), key=str) == sorted(
            stored.select(*columns).toArrow().to_pylist(), key=str
        )

    land(
        settings,
        "one.jsonl",
        [event("e1", "A", "2024-01-01T10:00:00Z", "5"), event("e2", "B", "2024-01-01T10:01:00Z", "3")],
    )
    run_once(spark, settings)
    kept_equals_gold()
    land(settings, "two.jsonl", [event("e3", "A", "2024-01-01T10:02:00Z", "2.5")])
    run_once(spark, settings)
    kept_equals_gold()

    # Another writer changes A's open window (as a reconcile would, under the gold lock).
    gold = SparkDeltaTable.forPath(spark, str(tumbling_table(settings).path(settings)))
    gold.update("user_id = 'A'", {"total_amount": "total_amount + 100", "revision": "revision + 1"})
    land(settings, "three.jsonl", [event("e4", "A", "2024-01-01T10:03:00Z", "1")])
    run_once(spark, settings)
    kept_equals_gold()

    a = read_table(spark, settings, tumbling_table(settings)).where("user_id = 'A'").first()
    assert (a.total_amount, a.event_count, a.revision) == (Decimal("108.50"), 3, 4)
    revised = (
        read_table(spark, settings, GOLD_CORRECTIONS)
        .where("user_id = 'A' AND new_event_count = 3")
        .select("old_total_amount", "new_total_amount", "revision")
        .first()
    )
    assert tuple(revised) == (Decimal("107.50"), Decimal("108.50"), 4)
