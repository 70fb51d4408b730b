"""cli.render without Spark: what `lakehouse status`, `tables`, `history`, `show`, `validate` and `kafka status`
print, from hand-made inputs, in 80 columns (and wider): every header whole, every line within the width."""

import io
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from cli import render
from runtime.progress import INPUT_LEFT, StreamStatus
from runtime.runner import StageReport
from warehouse.inspect import ARRIVAL_ORDER, Commit, TableState

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def printed(width: int, draw: Callable[[Console], None]) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    draw(console)
    return console.export_text()


def assert_fits(text: str, width: int, headers: Iterable[str]) -> None:
    """Every header whole on one line, nothing cut with an ellipsis, no line wider than ``width``."""
    assert "…" not in text, text
    lines = text.splitlines()
    # The validation report's path is printed whole on one line (soft wrap), to be copied.
    assert max(cell_len(line.rstrip()) for line in lines if not line.startswith("report: ")) <= width, text
    for header in headers:
        assert any(header in line for line in lines), (header, text)


def ago(seconds: float) -> str:
    return datetime.fromtimestamp(NOW - seconds, UTC).isoformat()


def batch(batch_id: int, rows: int, watermark: str | None = None) -> dict:
    return {
        "batch_id": batch_id,
        "recorded_at": ago(180),
        "rows_in": rows,
        "processed_rows_per_second": 153.4,
        "batch_seconds": 14.04,
        "watermark": watermark,
    }


STREAMS = [
    StreamStatus("bronze_events", "landing", False, None, 2, "files", 123.0, batch(0, 2148)),
    StreamStatus("silver_events", "bronze.events", True, "a run", 0, "commits", 0.0, batch(3, 2148)),
    StreamStatus(
        "gold_user_spend_5m", "silver.events", False, None, 0, "commits", 0.0, batch(1, 2000, "2023-12-31T23:58:00Z")
    ),
    StreamStatus("reconcile_late_events", "silver.late_events", False, None, 0, "commits", 0.0, None),
]


def status(width: int) -> str:
    return printed(width, lambda console: console.print(render.status_view(STREAMS, width, console, now=NOW)))


def test_status_in_80_columns_is_one_block_per_stream() -> None:
    text = status(80)
    assert_fits(text, 80, ["stream", "state · backlog (lag) · last batch", "streams · "])
    for stream in STREAMS:
        assert stream.stream in text
    assert "stopped · backlog 2 files (123s)" in text
    assert "running · no backlog" in text
    lines = [line.strip() for line in text.splitlines()]
    assert any(line.endswith("batch #3 3m ago: 2,148 rows in 14.0s") for line in lines), text
    assert "153 rows/s · watermark 12-31 23:58" in lines, text  # a figure and its unit on one line
    assert "no batch yet" in text


def test_status_when_wide_is_one_row_per_stream() -> None:
    text = status(120)
    assert_fits(text, 120, render.STATUS_HEADERS)
    row = next(line for line in text.splitlines() if "gold_user_spend_5m" in line)
    for value in ("stopped", "#1 3m ago", "2,000", "153", "14.0", "12-31 23:58"):
        assert value in row, row
    assert "2 files (123s)" in text and "never" in text


def catalog(width: int, root: Path = Path("/home/someone/a-lakehouse"), names: tuple[str, ...] = ()) -> str:
    names = names or ("bronze.events", "silver.quarantine", "gold.user_spend_1h_hopping", "gold.user_spend_5m_firings")
    states = [
        TableState(
            SimpleNamespace(name=name, layer=name.split(".")[0]),
            # Another pipeline's tables carry its name in the catalog, not in their folder's.
            str(root / "tables" / name.replace(".", "/").replace("readings_", "")),
            True,
            None if name.startswith("silver") else 3,
            None if name.startswith("silver") else 12_345,
        )
        for name in names
    ]
    return printed(width, lambda console: console.print(render.catalog_table(states, str(root), width, console)))


def test_another_pipelines_tables_in_80_columns_show_each_name_whole() -> None:
    """Another pipeline's tables, under its own root: paths from there, so its longer names need not fold."""
    root = Path("/home/someone/a-lakehouse/pipelines/readings")
    names = ("silver.readings_quarantine", "gold.readings_sessions", "ops.readings_stream_progress")
    text = catalog(80, root, names)
    assert_fits(text, 80, [*names, "paths under /home/someone/a-lakehouse/pipelines/readings"])


def test_tables_in_80_columns_shows_every_name_and_path_whole() -> None:
    text = catalog(80)
    assert_fits(text, 80, ["name", "version", "rows", "path", "paths under /home/someone/a-lakehouse"])
    for path in ("tables/bronze/events", "tables/gold/user_spend_1h_hopping", "tables/gold/user_spend_5m_firings"):
        assert path in text
    assert "gold.user_spend_5m_firings" in text and "12,345" in text
    assert "layer" not in text  # left out when narrow: every name starts with its layer


def test_tables_when_wide_has_the_layer_column() -> None:
    text = catalog(120)
    assert_fits(text, 120, ["name", "layer", "version", "rows", "path"])
    row = next(line for line in text.splitlines() if "silver.quarantine" in line)
    assert "silver" in row.replace("silver.quarantine", "") and " - " in row


COMMITS = [
    Commit(
        4,
        datetime(2024, 1, 1, 10, 0, 0, 930_000, tzinfo=UTC),
        "MERGE",
        {"inserted": 1, "updated": 1_234, "deleted": 0},
        {},
        {},
        None,
    ),
    Commit(3, datetime(2024, 1, 1, 9, 0, tzinfo=UTC), "WRITE", {"written": 2}, {}, {"mode": "Overwrite"}, None),
    Commit(2, None, "OPTIMIZE", {}, {}, {}, None),
]


def test_history_rows_in_80_columns() -> None:
    text = printed(80, lambda console: render.print_history(console, "gold.user_spend_5m", COMMITS, 3))
    assert_fits(text, 80, render.HISTORY_HEADERS)
    lines = [line for line in text.splitlines() if re.match(r"^│ \d", line)]
    assert [line.split("│")[1].strip() for line in lines] == ["4", "3", "2"]
    assert "2024-01-01 10:00:00.930" in lines[0] and "1 inserted, 1,234" in lines[0]  # "updated" may wrap
    assert "1 inserted, 1,234 updated" in " ".join(re.sub(r"[│┃]", " ", text).split())
    assert "2024-01-01 09:00:00.000" in lines[1] and "WRITE (overwrite)" in lines[1] and "2 written" in lines[1]
    assert "null" in lines[2] and "OPTIMIZE" in lines[2]
    assert "gold.user_spend_5m: Delta commits, newest first" in text
    assert "the 3 newest of 5 versions; --limit shows more" in text


def test_records_too_wide_become_one_block_per_row() -> None:
    columns = ["event_id", "event_time", "amount", "source_position", "flag", "nothing"]
    row = ["evt-1", datetime(2024, 1, 1, 10, 0, 0, 5), Decimal("12.50"), "file:" + "x" * 90 + ".jsonl#3", True, None]
    snapshot = SimpleNamespace(
        table=SimpleNamespace(name="silver.events"),
        version=2,
        latest_version=3,
        committed_at=datetime(2024, 1, 1, 11, 0, tzinfo=UTC),
        columns=columns,
        rows=[row],
        total_rows=40,
        order_by=("ingest_time", "event_id"),
        by_key=False,
    )
    text = printed(80, lambda console: render.print_snapshot(console, snapshot, ARRIVAL_ORDER))
    assert_fits(text, 80, ["row 1", *columns])
    assert "silver.events at version 2 (latest is 3), committed 2024-01-01 11:00:00 UTC" in text
    assert "2024-01-01 10:00:00.000005" in text and "12.50" in text and "true" in text and "null" in text
    assert "x" * 60 in text.replace("\n", "").replace(" ", "")
    footer = " ".join(text.split())
    assert "1 of 40 rows shown, sorted by ingest_time, then the other columns; times are UTC" in footer


def test_records_that_fit_are_a_table() -> None:
    rows = [[Text("user-00001"), render.cell(datetime(2024, 1, 1, 10, 5)), render.cell(Decimal("8.00"))]]
    text = printed(80, lambda console: render.print_records(console, ["user_id", "window_start", "total"], rows))
    assert_fits(text, 80, ["user_id", "window_start", "total"])
    assert "│ user-00001 │ 2024-01-01 10:05:00 │ 8.00" in text


SUMMARY = {
    "report": "/home/someone/a-lakehouse/reports/data-quality/20240101T100000-all-85ebf8e6.html",
    "suites": [
        {
            "suite": "bronze.events",
            "verdict": "passed",
            "expectations_evaluated": 3,
            "expectations_failed": 0,
            "unexpected_count": 0,
            "worst_offenders": [],
            "failed_expectations": [],
            "skipped": None,
        },
        {
            "suite": "silver.events",
            "verdict": "failed",
            "expectations_evaluated": 6,
            "expectations_failed": 1,
            "unexpected_count": 1234,
            "worst_offenders": ["evt-7-000000042: amount 12000000.00", "evt-7-000000043: amount -5000000.00"],
            "failed_expectations": [{"description": "amount between -1,000,000.00 and 1,000,000.00 [x]"}],
            "skipped": None,
        },
        {
            "suite": "freshness",
            "verdict": "skipped",
            "expectations_evaluated": 0,
            "expectations_failed": 0,
            "unexpected_count": 0,
            "worst_offenders": [],
            "failed_expectations": [],
            "skipped": "silver.events does not exist yet",
        },
    ],
}


@pytest.mark.parametrize("width", [80, 120])
def test_validation_summary(width: int) -> None:
    text = printed(width, lambda console: render.print_validation(console, SUMMARY))
    assert_fits(text, width, ["data quality", "suite", "verdict", "expectations", "worst offenders"])
    words = text.split()
    for value in ("bronze.events", "3/3", "silver.events", "failed", "5/6", "freshness", "skipped", "0/0"):
        assert value in words, value
    flat = " ".join(words)
    assert "(1,234 rows)" in flat and "evt-7-000000042:" in flat and "[x]" in flat  # no markup eaten
    assert "report: " + SUMMARY["report"] in text.replace("\n", "")


def test_run_summary_fits_80_columns_and_leads_with_what_a_user_looks_for() -> None:
    """A run of two pipelines at 80 columns: per pipeline a headline of events, late, quarantined and windows
    changed (summed over its streams); per stream its batches, seconds and other figures, grouped; no line
    wider than 80, no figure or name split across lines, nothing cut."""
    carried = {
        "rows_in": 12_345.0, "rows_written": 12_345.0, "files_read": 7.0, "bronze_seconds": 4.0, "events": 12_000.0,
        "quarantined": 45.0, "duplicates": 300.0, "conflicting": 0.0, "silver_seconds": 10.0,
        "windows_changed": 4_321.0, "late": 12.0, "windows_revised": 3.0, "watermark_delay_seconds": 10.0,
        "watermark_lag_seconds": 91.0, "gold_seconds": 4.0, "latency_p50_seconds": 39.0,
        "latency_p99_seconds": 41.0, "latency_max_seconds": 42.0, "watermark": 1.7e9,
    }  # fmt: skip
    reports = [
        StageReport("bronze_events", batches=2, seconds=18.54, figures=carried),
        StageReport("gold_fraud_alerts", batches=1, seconds=5.6, figures={"rows_written": 0.0, "burst": 0.0}),
        StageReport("readings:bronze_events", batches=0, seconds=0.0, figures={}),
        StageReport("readings:gold_readings_1m_derived", batches=1, seconds=2.25, figures={"rows_in": 80.0}),
        StageReport("readings:gold_readings_sessions", batches=0, seconds=0.0, figures={INPUT_LEFT: 1.0}),
    ]
    text = printed(80, lambda console: render.print_reports(console, reports, "run", "purchases", 31.06))
    assert_fits(text, 80, [])
    lines = text.splitlines()
    assert lines[0] == "purchases: 12,000 events, 12 late, 45 quarantined, 300 duplicates,"
    assert lines[1] == "    0 conflicting, 4,321 windows changed, 3 windows revised"
    flat = " ".join(line.strip() for line in lines)
    assert "bronze_events: 2 batches, 18.5 s; rows in 12,345, rows written 12,345, files read 7;" in flat
    assert "seconds: bronze 4, silver 10, gold 4; latency s: p50 39, p99 41, max 42;" in flat
    assert "watermark s: delay 10, lag 91" in flat and "1,700,000,000" not in flat
    assert "readings: 0 events" not in flat and "readings: done" in flat  # its derived windows read 80 rows
    assert "  bronze_events: 0 batches, 0.0 s; nothing new" in lines
    # A stream stopped before its turn came says its input waits, not that there was nothing.
    assert "  gold_readings_sessions: 0 batches, 0.0 s; input left for the next run" in lines
    assert lines[-1] == "run: done in 31.1 s"
    assert all(line.startswith(("purchases", "readings", "run", "  ")) for line in lines)


def test_maintenance_table() -> None:
    result = SimpleNamespace(
        table="gold.user_spend_5m",
        optimize_seconds=1.0,
        vacuum_seconds=0.5,
        checkpoint_seconds=0.25,
        live_files_before=12,
        live_files_after=1,
        files_on_disk_before=1_200,
        files_on_disk_after=13,
    )
    text = printed(80, lambda console: console.print(render.maintenance_table([result])))
    assert_fits(text, 80, ["table", "live files", "files on disk"])
    assert "12 → 1" in text and "1,200 → 13" in text and "1.8" in text


def test_kafka_status() -> None:
    partitions = [SimpleNamespace(partition=n, earliest=10 * n, latest=1_000 + n) for n in range(2)]
    topics = [SimpleNamespace(name="lakehouse.events", messages=1_991, partitions=partitions)]
    kafka = SimpleNamespace(bootstrap_servers="127.0.0.1:9092", topic="lakehouse.events", redacted={})
    report = render.kafka_report(kafka, 4242, topics)
    assert report["broker"] == "local" and report["reachable"]
    assert report["topics"][0]["partitions"][1] == {"partition": 1, "earliest": 10, "end": 1_001}
    text = printed(80, lambda console: render.print_kafka_status(console, report))
    assert_fits(text, 80, ["topic", "partition", "earliest", "end", "messages"])
    assert "127.0.0.1:9092: this home's broker (pid 4242)" in text
    assert "1,000" in text and "991" in text

    down = render.kafka_report(kafka, None, None)
    assert (down["broker"], down["reachable"], down["topics"]) == ("down", False, [])
    text = printed(80, lambda console: render.print_kafka_status(console, down))
    assert "nothing answers" in text and "`lakehouse kafka up` starts the local broker" in text


def test_value_formats() -> None:
    assert render.utc(datetime(2024, 1, 1, 10, 0)) == "2024-01-01 10:00:00"
    assert render.utc(datetime(2024, 1, 1, 10, 0, 0, 250_000, tzinfo=UTC)) == "2024-01-01 10:00:00.250"
    assert render.commit_time(datetime(2024, 1, 1, 10, 0, tzinfo=UTC)).plain == "2024-01-01 10:00:00.000"
    assert render.cell(Decimal("1E+2")).plain == "100" and render.cell(False).plain == "false"
    assert render.rows_text({}).plain == "-" and render.rows_text({"deleted": 0}).plain == "0"
    assert render.ago(None) == "never"
    assert [render.ago(ago(s), NOW) for s in (42, 600, 4 * 3600)] == ["42s ago", "10m ago", "4h ago"]
    assert render.ago(datetime.fromtimestamp(time.time(), UTC).isoformat()).endswith("s ago")
