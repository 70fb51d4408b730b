"""The streams end to end (real Spark, real Delta), checked against DuckDB and delta-rs, and batch re-runs."""

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.landing import place_in_landing
from transforms.silver import refine_events
from transforms.streams import StageReport, prepare, run_once
from transforms.synthetic import StreamSpec, generate_lines
from transforms.windows import update_windows
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_CORRECTIONS,
    OPS_WATERMARKS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    Table,
    all_tables,
    user_spend_table,
)
from warehouse.delta import table_version
from warehouse.settings import Settings

Key = tuple[str, int]  # (user_id, window start in epoch seconds)


def land(settings: Settings, name: str, lines: list[str]) -> Path:
    return place_in_landing(settings, name, lambda handle: handle.write("".join(line + "\n" for line in lines)))


def read(spark: SparkSession, settings: Settings, table: Table) -> DataFrame:
    return spark.read.format("delta").load(str(table.path(settings)))


def rows_of(spark: SparkSession, settings: Settings, table: Table) -> int:
    return read(spark, settings, table).count()


def gold_totals(spark: SparkSession, settings: Settings) -> dict[Key, tuple[Decimal, int]]:
    gold = read(spark, settings, user_spend_table(settings))
    rows = gold.select(
        "user_id",
        F.unix_seconds("window_start").alias("start"),
        F.unix_seconds("window_end").alias("end"),
        "total_amount",
        "event_count",
    ).collect()
    width = settings.window_minutes * 60
    assert all(r.end - r.start == width and r.start % width == 0 for r in rows)
    totals = {(r.user_id, r.start): (r.total_amount, r.event_count) for r in rows}
    assert len(totals) == len(rows), "one gold row per (user_id, window_start)"
    return totals


def late_totals(spark: SparkSession, settings: Settings) -> dict[Key, tuple[Decimal, int]]:
    late = (
        read(spark, settings, SILVER_LATE_EVENTS)
        .groupBy("user_id", F.unix_seconds("window_start").alias("start"))
        .agg(F.sum("amount").cast("decimal(18,2)").alias("total"), F.count("*").alias("n"))
    )
    return {(r.user_id, r.start): (r.total, r.n) for r in late.collect()}


def at(hour: int, minute: int) -> int:
    return int(datetime(2024, 1, 1, hour, minute, tzinfo=UTC).timestamp())


def event(event_id: str, user: str, hh_mm: str, amount: str) -> str:
    return (
        f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "2024-01-01T{hh_mm}:00Z", "amount": {amount}}}'
    )


# a. The seeds' running example, with a redelivery and a broken line among its lines.


def test_seeds_running_example(spark: SparkSession, settings: Settings) -> None:
    land(
        settings,
        "example.jsonl",
        [
            event("a1", "A", "10:00", "5"),
            event("b1", "B", "10:02", "3"),
            event("a2", "A", "10:04", "2"),
            event("b2", "B", "10:06", "1"),
            event("a1", "A", "10:00", "5"),
            "{oops",
        ],
    )
    reports = {r.name: r for r in run_once(spark, settings)}
    assert reports["silver_events"].figures["rows_in"] == 6
    assert reports["silver_events"].figures["duplicates"] == 1
    assert reports["silver_events"].figures["quarantined"] == 1

    assert gold_totals(spark, settings) == {
        ("A", at(10, 0)): (Decimal("7.00"), 2),
        ("B", at(10, 0)): (Decimal("3.00"), 1),
        ("B", at(10, 5)): (Decimal("1.00"), 1),
    }
    assert rows_of(spark, settings, SILVER_LATE_EVENTS) == 0
    # Watermark 10:04 (10:06 - 2 min) has not reached 10:05 + 1 min: no window is final yet.
    assert read(spark, settings, user_spend_table(settings)).where("is_final").count() == 0


# b-d. A generated stream in three files, one run each, against DuckDB over the same landing files.

SPEC = StreamSpec(
    events=3000,
    users=20,
    rate=2.0,
    disorder_seconds=30.0,
    duplicate_fraction=0.06,
    late_fraction=0.03,
    invalid_fraction=0.05,
    seed=2024,
)

# The contract's rules in DuckDB's own JSON functions: first arrival by (landing name, line number) wins.
DUCKDB_REFERENCE = r"""
with files as (
    select filename, string_split(content, chr(10)) as parts from read_text($files)
), received as (
    select filename, unnest(parts) as raw, unnest(range(1, len(parts) + 1)) as line_no, len(parts) as n_parts
    from files
), lines as (
    select filename, line_no, raw, case when json_valid(raw) then raw end as doc
    from received
    where not (line_no = n_parts and raw = '')
), fields as (
    select filename, line_no,
        json_type(doc) as doc_type,
        json_type(doc, '$.event_id') as id_type, json_extract_string(doc, '$.event_id') as event_id,
        json_type(doc, '$.user_id') as user_type, json_extract_string(doc, '$.user_id') as user_id,
        json_type(doc, '$.event_time') as time_type, json_extract_string(doc, '$.event_time') as time_text,
        json_type(doc, '$.amount') as amount_type, json_extract_string(doc, '$.amount') as amount_text,
        json_type(doc, '$.event_type') as type_type
    from lines
), checked as (
    select *,
        doc_type = 'OBJECT'
        and id_type = 'VARCHAR' and trim(event_id) <> ''
        and user_type = 'VARCHAR' and trim(user_id) <> ''
        and ((time_type = 'VARCHAR' and try_cast(time_text as timestamptz) is not null)
             or time_type in ('BIGINT', 'UBIGINT'))
        and amount_type in ('BIGINT', 'UBIGINT', 'DOUBLE')
        and isfinite(try_cast(amount_text as double))
        and regexp_full_match(amount_text, '-?[0-9]{1,16}([.][0-9]{1,2})?')
        and coalesce(type_type, 'NULL') in ('VARCHAR', 'NULL') as valid
    from fields
), events as (
    select *,
        case when time_type = 'VARCHAR' then epoch_ms(try_cast(time_text as timestamptz))
             else try_cast(time_text as bigint) end as millis,
        try_cast(amount_text as decimal(18, 2)) as amount,
        row_number() over (partition by event_id order by filename, line_no) as arrival
    from checked
    where coalesce(valid, false)
)
"""


@dataclass(frozen=True)
class Generated:
    settings: Settings
    lines: list[str]
    chunks: list[list[str]]
    reports: list[list[StageReport]]


@pytest.fixture(scope="module")
def generated(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Generated:
    settings = replace(Settings.from_env(), home=tmp_path_factory.mktemp("generated") / "home")
    settings.ensure_home()
    lines = list(generate_lines(SPEC))
    cut = len(lines) // 3
    chunks = [lines[:cut], lines[cut : 2 * cut], lines[2 * cut :]]
    reports = []
    for number, chunk in enumerate(chunks):
        land(settings, f"part-{number}.jsonl", chunk)
        reports.append(run_once(spark, settings))
    return Generated(settings, lines, chunks, reports)


def duckdb_reference(landing: Path) -> tuple[dict[Key, tuple[Decimal, int]], dict[str, int]]:
    files = sorted(str(p) for p in landing.iterdir() if p.is_file() and not p.name.startswith((".", "_")))
    with duckdb.connect() as con:
        con.execute("set TimeZone = 'UTC'")
        totals = con.execute(
            DUCKDB_REFERENCE
            + """
            select user_id, (floor(millis / 300000) * 300)::bigint as start,
                   sum(amount)::decimal(18, 2) as total, count(*) as n
            from events where arrival = 1 group by all
            """,
            {"files": files},
        ).fetchall()
        lines, valid, first = con.execute(
            DUCKDB_REFERENCE
            + """
            select (select count(*) from lines), (select count(*) from events),
                   (select count(*) from events where arrival = 1)
            """,
            {"files": files},
        ).fetchone()
    counts = {"lines": lines, "events": first, "duplicates": valid - first, "quarantine": lines - valid}
    return {(user, start): (total, n) for user, start, total, n in totals}, counts


def test_generated_stream_equals_duckdb(spark: SparkSession, generated: Generated) -> None:
    settings = generated.settings
    expected, _ = duckdb_reference(settings.landing_dir)
    gold = gold_totals(spark, settings)
    late = late_totals(spark, settings)
    assert late, "the stream has late events; some must have been set aside"
    assert len(expected) > 20 and len(gold) > 20

    # Windows with no late event: gold is exact.
    assert {k: v for k, v in gold.items() if k not in late} == {k: v for k, v in expected.items() if k not in late}
    # Every window: gold plus the late side output is exact (late events are not folded in yet).
    combined: dict[Key, list] = defaultdict(lambda: [Decimal("0.00"), 0])
    for totals in (gold, late):
        for key, (total, n) in totals.items():
            combined[key][0] += total
            combined[key][1] += n
    assert {k: tuple(v) for k, v in combined.items()} == expected


def test_generated_stream_conserves_every_line(spark: SparkSession, generated: Generated) -> None:
    settings = generated.settings
    _, expected = duckdb_reference(settings.landing_dir)
    counts = {
        "lines": rows_of(spark, settings, BRONZE_EVENTS),
        "events": rows_of(spark, settings, SILVER_EVENTS),
        "quarantine": rows_of(spark, settings, SILVER_QUARANTINE),
        "duplicates": rows_of(spark, settings, SILVER_DUPLICATES),
    }
    assert counts["lines"] == len(generated.lines) == expected["lines"]
    assert counts["events"] + counts["quarantine"] + counts["duplicates"] == counts["lines"]
    assert counts == expected
    assert read(spark, settings, SILVER_EVENTS).select("event_id").distinct().count() == counts["events"]
    # Each run took exactly its file: bronze and silver saw each chunk's lines once.
    for chunk, reports in zip(generated.chunks, generated.reports, strict=True):
        figures = {r.name: r.figures for r in reports}
        assert figures["bronze_events"]["rows_in"] == len(chunk)
        assert figures["silver_events"]["rows_in"] == len(chunk)


def test_rerun_without_new_input_changes_no_version(spark: SparkSession, generated: Generated) -> None:
    settings = generated.settings
    before = {t.name: table_version(spark, settings, t) for t in all_tables(settings)}
    assert all(v is not None for v in before.values())
    reports = run_once(spark, settings)
    assert all(r.batches == 0 for r in reports), [(r.name, r.batches) for r in reports]
    assert {t.name: table_version(spark, settings, t) for t in all_tables(settings)} == before


def test_every_table_reads_back_with_delta_rs(spark: SparkSession, generated: Generated) -> None:
    settings = generated.settings
    for table in all_tables(settings):
        arrow = DeltaTable(str(table.path(settings))).to_pyarrow_table()
        assert arrow.num_rows == rows_of(spark, settings, table), table.name
        assert arrow.column_names == table.column_names, table.name
    gold = user_spend_table(settings)
    arrow_gold = DeltaTable(str(gold.path(settings))).to_pyarrow_table()
    from_rs = {
        (r["user_id"], int(r["window_start"].replace(tzinfo=UTC).timestamp())): (r["total_amount"], r["event_count"])
        for r in arrow_gold.to_pylist()
    }
    assert from_rs == gold_totals(spark, settings)


# e. A micro-batch re-run after a crash writes nothing twice.

WRITER = "lakehouse:test:crash"
QUERY = "gold_crash_test"


def bronze_batch(spark: SparkSession, batch_id: int, lines: list[str]) -> DataFrame:
    arrived = datetime(2024, 1, 2, 0, batch_id, tzinfo=UTC)
    source = f"/landing/batch-{batch_id}.jsonl"
    rows = [
        (raw, "file", source, n, arrived, None, None, None, arrived, batch_id, arrived.date())
        for n, raw in enumerate(lines, start=1)
    ]
    return spark.createDataFrame(rows, BRONZE_EVENTS.schema)


def snapshot(spark: SparkSession, settings: Settings) -> dict[str, list[str]]:
    """Every row of every table, as text, in a stable order."""
    return {
        table.name: sorted(repr(tuple(row)) for row in read(spark, settings, table).collect())
        for table in all_tables(settings)
    }


def silver_batch(spark: SparkSession, settings: Settings, batch_id: int) -> DataFrame:
    rows = read(spark, settings, SILVER_EVENTS).where(F.col("silver_batch") == batch_id).collect()
    return spark.createDataFrame(rows, SILVER_EVENTS.schema)


def run_twice(spark: SparkSession, settings: Settings, step: Callable[[], dict[str, float]]) -> dict[str, float]:
    """Run ``step`` once, then again as a crashed batch's re-run: the re-run must change no row."""
    first = step()
    written = snapshot(spark, settings)
    step()
    assert snapshot(spark, settings) == written
    return first


def test_batch_rerun_after_crash_writes_nothing_twice(spark: SparkSession, settings: Settings) -> None:
    prepare(spark, settings)
    batch0 = bronze_batch(
        spark,
        0,
        [
            event("a1", "A", "10:00", "5"),
            event("b1", "B", "10:02", "3"),
            event("a2", "A", "10:04", "2"),
            event("a2", "A", "10:04", "2"),
            "not json",
            event("b2", "B", "10:16", "1.50"),
            event("a3", "A", "10:20", "4"),
        ],
    )
    batch1 = bronze_batch(
        spark,
        1,
        [
            event("a1", "A", "10:00", "5"),  # redelivery from history
            event("b1", "B", "10:02", "4"),  # conflicting redelivery
            event("a4", "A", "10:01", "10"),  # late: [10:00, 10:05) closed at 10:06 <= watermark 10:18
            event("b3", "B", "10:19", "2.25"),  # on time, revises [10:15, 10:20)
            "[1]",
            event("a5", "A", "10:30", "1"),  # watermark to 10:28: closes [10:15, 10:20) and [10:20, 10:25)
        ],
    )

    figures = run_twice(spark, settings, lambda: refine_events(batch0, 0, settings, WRITER))
    assert (figures["rows_written"], figures["duplicates"], figures["quarantined"]) == (5, 1, 1)
    events0 = silver_batch(spark, settings, 0)
    run_twice(spark, settings, lambda: update_windows(events0, 0, settings, WRITER, QUERY))

    figures = run_twice(spark, settings, lambda: refine_events(batch1, 1, settings, WRITER))
    assert (figures["rows_written"], figures["duplicates"], figures["conflicting"]) == (3, 2, 1)
    events1 = silver_batch(spark, settings, 1)
    run_twice(spark, settings, lambda: update_windows(events1, 1, settings, WRITER, QUERY))

    counts = {t.name: rows_of(spark, settings, t) for t in all_tables(settings)}
    assert counts == {
        BRONZE_EVENTS.name: 0,  # the batches were handed to the writers directly
        SILVER_EVENTS.name: 8,
        SILVER_QUARANTINE.name: 2,
        SILVER_DUPLICATES.name: 3,
        SILVER_LATE_EVENTS.name: 1,
        user_spend_table(settings).name: 5,
        GOLD_CORRECTIONS.name: 2,
        OPS_WATERMARKS.name: 2,
    }
    gold = read(spark, settings, user_spend_table(settings))
    state = {
        (r.user_id, r.start): (r.total_amount, r.event_count, r.revision, r.is_final)
        for r in gold.select("*", F.unix_seconds("window_start").alias("start")).collect()
    }
    assert state == {
        ("A", at(10, 0)): (Decimal("7.00"), 2, 1, True),
        ("B", at(10, 0)): (Decimal("3.00"), 1, 1, True),
        ("B", at(10, 15)): (Decimal("3.75"), 2, 2, True),
        ("A", at(10, 20)): (Decimal("4.00"), 1, 2, True),
        ("A", at(10, 30)): (Decimal("1.00"), 1, 1, False),
    }
    late = read(spark, settings, SILVER_LATE_EVENTS).first()
    assert (late.event_id, late.amount, late.lateness_seconds) == ("a4", Decimal("10.00"), 17 * 60.0)
    causes = {(r.user_id, r.cause, r.revision) for r in read(spark, settings, GOLD_CORRECTIONS).select("*").collect()}
    assert causes == {("B", "stream_update", 2), ("A", "window_closed", 2)}
