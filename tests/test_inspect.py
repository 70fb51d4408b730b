"""`lakehouse show` and `lakehouse history`: sorted rows in full at 80 columns, Delta time travel, commits.

Most tables here are written with delta-rs (fast, no Spark); one test reads tables the real streams wrote.
"""

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner, Result

from cli.app import app
from runtime.runner import run_once
from tests.lines import land
from warehouse import inspect as reading
from warehouse.catalog import SILVER_QUARANTINE, tumbling_table
from warehouse.settings import Settings

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")
GOLD = "gold.user_spend_5m"
GOLD_SCHEMA = pa.schema(
    [
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("window_start", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("window_end", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("total_amount", pa.decimal128(18, 2), nullable=False),
        pa.field("event_count", pa.int64(), nullable=False),
        pa.field("revision", pa.int32(), nullable=False),
        pa.field("is_final", pa.bool_(), nullable=False),
        pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

#: Seconds each, no process of their own: part of `make test-fast`.
pytestmark = pytest.mark.quick
UPDATED_AT = datetime(2024, 6, 1, 12, 0, 0, 250000, tzinfo=UTC)


def gold_rows(*rows: tuple[str, str, str, int]) -> pa.Table:
    """(user, window start HH:MM, total, count) rows of 5-minute windows on 2024-01-01."""
    values = []
    for user, start, total, count in rows:
        hour, minute = map(int, start.split(":"))
        begin = datetime(2024, 1, 1, hour, minute, tzinfo=UTC)
        end = begin.replace(minute=minute + 5) if minute < 55 else begin.replace(hour=hour + 1, minute=0)
        values.append((user, begin, end, Decimal(total), count, 1, False, UPDATED_AT))
    return pa.Table.from_pylist([dict(zip(GOLD_SCHEMA.names, v, strict=True)) for v in values], schema=GOLD_SCHEMA)


@pytest.fixture
def home(tmp_path: Path) -> Settings:
    """A lakehouse home of this test's own, without Spark."""
    settings = Settings.from_env()
    settings = replace(settings, home=tmp_path / "home", windows=replace(settings.windows, minutes=5))
    settings.ensure_home()
    return settings


@pytest.fixture
def gold(home: Settings) -> str:
    """Gold with three versions: 0 write (out of key order), 1 append, 2 merge (one update, one insert)."""
    path = str(tumbling_table(home).path(home))
    write_deltalake(path, gold_rows(("user-00002", "10:00", "3.00", 1), ("user-00001", "10:05", "8.00", 2)))
    time.sleep(0.02)  # distinct commit milliseconds, so a time between versions is unambiguous
    write_deltalake(
        path, gold_rows(("user-00010", "10:00", "1.25", 1), ("user-00001", "10:00", "7.00", 2)), mode="append"
    )
    time.sleep(0.02)
    (
        DeltaTable(path)
        .merge(
            gold_rows(("user-00001", "10:05", "9.50", 3), ("user-00003", "10:10", "0.10", 1)),
            "t.user_id = s.user_id AND t.window_start = s.window_start",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    return path


def lakehouse(settings: Settings, *args: str) -> Result:
    """The CLI in this process, as in an 80-column terminal."""
    env = {"LAKEHOUSE_HOME": str(settings.home), "COLUMNS": "80", "LAKEHOUSE_WINDOW_MINUTES": "5"}
    return CliRunner().invoke(app, list(args), env=env)


def shown(output: str) -> list[tuple[str, str]]:
    """(user_id, window_start) of every printed gold row, in printed order (either layout)."""
    users = re.findall(r"user-\d{5}", output)
    starts = re.findall(r"2024-01-01 \d\d:\d\d:\d\d", output)[0::2]  # each row: window_start, then window_end
    assert len(users) == len(starts), output
    return list(zip(users, starts, strict=True))


def one_error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakehouse: ")
    return lines[0]


def test_show_prints_every_row_in_key_order_with_full_values_at_80_columns(home: Settings, gold: str) -> None:
    result = lakehouse(home, "show", GOLD)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert shown(out) == [
        ("user-00001", "2024-01-01 10:00:00"),
        ("user-00001", "2024-01-01 10:05:00"),
        ("user-00002", "2024-01-01 10:00:00"),
        ("user-00003", "2024-01-01 10:10:00"),
        ("user-00010", "2024-01-01 10:00:00"),
    ]
    assert "…" not in out and "..." not in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    assert "2024-01-01 10:15:00" in out  # user-00003's window end, whole
    assert "2024-06-01 12:00:00.250" in out  # updated_at: UTC, to the millisecond it has
    for amount in ("7.00", "9.50", "3.00", "0.10", "1.25"):
        assert re.search(rf"(?<![\d.]){re.escape(amount)}(?![\d.])", out), amount  # exact decimals, not 9.5
    assert "at version 2 (latest)" in out
    assert "5 of 5 rows shown, sorted by key user_id, window_start" in out


def test_show_limit_counts_all_rows(home: Settings, gold: str) -> None:
    result = lakehouse(home, "show", GOLD, "--limit", "2")
    assert result.exit_code == 0, result.output
    assert shown(result.stdout) == [("user-00001", "2024-01-01 10:00:00"), ("user-00001", "2024-01-01 10:05:00")]
    assert "2 of 5 rows shown" in result.stdout


def test_show_as_of_version_reads_that_version(home: Settings, gold: str) -> None:
    first = lakehouse(home, "show", GOLD, "--as-of", "0")
    assert first.exit_code == 0, first.output
    assert shown(first.stdout) == [("user-00001", "2024-01-01 10:05:00"), ("user-00002", "2024-01-01 10:00:00")]
    assert "at version 0 (latest is 2)" in first.stdout
    assert "8.00" in first.stdout and "9.50" not in first.stdout
    assert "2 of 2 rows shown" in first.stdout

    second = lakehouse(home, "show", GOLD, "--as-of", "1")
    assert second.exit_code == 0, second.output
    assert len(shown(second.stdout)) == 4 and "user-00003" not in second.stdout


def test_show_as_of_time_reads_the_last_version_committed_by_then(home: Settings, gold: str) -> None:
    commits = {h["version"]: h["timestamp"] for h in DeltaTable(gold).history()}
    assert commits[0] < commits[1] < commits[2]
    at = datetime.fromtimestamp(commits[1] / 1000, tz=UTC)
    for spelling in (at.isoformat(), at.strftime("%Y-%m-%d %H:%M:%S.%f"), at.isoformat().replace("+00:00", "Z")):
        result = lakehouse(home, "show", GOLD, "--as-of", spelling)
        assert result.exit_code == 0, result.output
        assert "at version 1 (latest is 2)" in result.stdout, spelling
    just_before = datetime.fromtimestamp((commits[1] - 1) / 1000, tz=UTC).isoformat()
    assert "at version 0 " in lakehouse(home, "show", GOLD, "--as-of", just_before).stdout

    before_creation = one_error_line(lakehouse(home, "show", GOLD, "--as-of", "2020-01-01T00:00:00Z"))
    assert "no version at 2020-01-01" in before_creation and "first commit is version 0" in before_creation


@pytest.mark.parametrize(
    ("as_of", "needle"),
    [
        ("3", "has no version 3; its versions are 0 to 2"),
        ("99999", "has no version 99999"),
        ("-1", "whole number from 0"),
        ("yesterday", "neither a Delta version"),
        ("2999-01-01", "in the future"),
    ],
)
def test_show_as_of_what_does_not_exist_fails_in_one_line(home: Settings, gold: str, as_of: str, needle: str) -> None:
    result = lakehouse(home, "show", GOLD, "--as-of", as_of)
    assert needle in one_error_line(result)
    assert result.stdout == ""


def test_show_orders_a_table_without_key_by_arrival_and_position(home: Settings) -> None:
    ingest = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    later = datetime(2024, 1, 1, 9, 30, tzinfo=UTC)
    rows = [  # (raw, position, ingest_time, batch): neither written nor named in arrival order
        ("line-a", "file:/landing/a.jsonl#10", ingest, 0),
        ("line-b", "file:/landing/b.jsonl#1", later, 1),
        ("line-c", "file:/landing/a.jsonl#9", ingest, 0),
        ("line-d", "file:/landing/a.jsonl#2", ingest, 0),
        ("line-e", "file:/landing/a.jsonl#11", later, 1),
    ]
    schema = pa.schema(
        [
            ("raw", pa.string()),
            ("reason", pa.string()),
            ("source_position", pa.string()),
            ("ingest_time", pa.timestamp("us", tz="UTC")),
            ("silver_batch", pa.int64()),
        ]
    )
    table = pa.Table.from_pylist(
        [
            {"raw": r, "reason": "not_json", "source_position": p, "ingest_time": t, "silver_batch": b}
            for r, p, t, b in rows
        ],
        schema=schema,
    )
    write_deltalake(str(SILVER_QUARANTINE.path(home)), table)
    result = lakehouse(home, "show", "silver.quarantine")
    assert result.exit_code == 0, result.output
    assert re.findall(r"line-[a-e]", result.stdout) == ["line-d", "line-c", "line-a", "line-e", "line-b"]
    footer = " ".join(result.stdout.split())
    assert "5 of 5 rows shown, sorted by ingest_time, silver_batch, source_position, then the other columns" in footer
    for again in range(2):
        assert lakehouse(home, "show", "silver.quarantine").stdout == result.stdout, again


def test_history_lists_commits_newest_first(home: Settings, gold: str) -> None:
    result = lakehouse(home, "history", GOLD)
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines = [line for line in out.splitlines() if re.match(r"^│ \d", line)]
    assert [int(line.split("│")[1]) for line in lines] == [2, 1, 0]
    assert [line.split("│")[3].strip() for line in lines] == ["MERGE", "WRITE", "WRITE"]
    assert "1 inserted, 1 updated" in lines[0]
    assert "2 written" in lines[1] and "2 written" in lines[2]
    assert all(re.search(r"│ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} │", line) for line in lines)
    assert max(len(line) for line in out.splitlines()) <= 80

    newest = lakehouse(home, "history", GOLD, "--limit", "1")
    assert newest.exit_code == 0
    assert "MERGE" in newest.stdout and "WRITE" not in newest.stdout
    assert "the 1 newest of 3 versions" in newest.stdout


def test_history_marks_an_overwrite(home: Settings) -> None:
    path = str(tumbling_table(home).path(home))
    write_deltalake(path, gold_rows(("user-00001", "10:00", "1.00", 1)))
    write_deltalake(
        path, gold_rows(("user-00001", "10:00", "2.00", 2), ("user-00002", "10:00", "3.00", 1)), mode="overwrite"
    )
    result = lakehouse(home, "history", GOLD)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if re.match(r"^│ \d", line)]
    assert [line.split("│")[3].strip() for line in lines] == ["WRITE (overwrite)", "WRITE"]
    assert "2 written" in lines[0] and "1 written" in lines[1]


def test_history_json(home: Settings, gold: str) -> None:
    result = lakehouse(home, "history", GOLD, "--json")
    assert result.exit_code == 0, result.output
    commits = json.loads(result.stdout)
    assert [c["version"] for c in commits] == [2, 1, 0]
    assert [c["operation"] for c in commits] == ["MERGE", "WRITE", "WRITE"]
    assert commits[0]["rows"] == {"inserted": 1, "updated": 1, "deleted": 0}
    assert commits[1]["rows"] == {"written": 2}
    stamps = [datetime.fromisoformat(c["timestamp"]) for c in commits]
    assert stamps == sorted(stamps, reverse=True) and all(s.utcoffset().total_seconds() == 0 for s in stamps)
    assert commits[0]["timestamp"].endswith("Z")


def test_history_numbers_stay_right_when_a_commit_lands_during_the_read(
    home: Settings, gold: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = DeltaTable(gold)  # loaded at version 2 ...
    write_deltalake(gold, gold_rows(("user-00004", "10:00", "4.00", 1)), mode="append")  # ... then version 3 lands
    labels = [(h["version"], h["operation"]) for h in stale.history()]
    assert labels[0] == (2, "WRITE"), "delta-rs numbers the newest commit by the stale snapshot (the case guarded)"
    handed_out = []

    def open_table(settings: Settings, table: object) -> DeltaTable | None:
        if not handed_out:
            handed_out.append(stale)
            return stale
        return DeltaTable(gold)

    monkeypatch.setattr(reading, "open_table", open_table)
    commits = reading.table_history(home, tumbling_table(home))
    assert [(c.version, c.operation) for c in commits] == [(3, "WRITE"), (2, "MERGE"), (1, "WRITE"), (0, "WRITE")]
    assert commits[0].rows == {"written": 1}


def test_a_table_not_written_yet(home: Settings) -> None:
    show = lakehouse(home, "show", GOLD)
    assert show.exit_code == 0 and "does not exist yet" in show.stdout
    assert json.loads(lakehouse(home, "history", GOLD, "--json").stdout) == []
    assert "does not exist yet" in one_error_line(lakehouse(home, "show", GOLD, "--as-of", "0"))
    assert "unknown table 'gold.nope'" in one_error_line(lakehouse(home, "history", "gold.nope"))


def test_show_and_history_as_a_process_exit_cleanly(home: Settings, gold: str) -> None:
    """The real command: exit 0 every time (the pyarrow scanner used to abort at exit), 80 columns respected."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(home.home), "COLUMNS": "80", "LAKEHOUSE_WINDOW_MINUTES": "5"}
    for args in (["show", GOLD], ["show", GOLD, "--as-of", "1"], ["history", GOLD], ["show", GOLD]):
        result = subprocess.run([LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (args, result.returncode, result.stderr)
        assert result.stderr == ""
        assert max(len(line.rstrip()) for line in result.stdout.splitlines()) <= 80
        assert "user-00001" in result.stdout or "MERGE" in result.stdout


def test_show_and_history_of_tables_the_streams_wrote(spark, settings: Settings) -> None:
    event = '{{"event_id": "{}", "user_id": "{}", "event_time": "2024-01-01T{}Z", "amount": {}}}'
    land(
        settings,
        "first.jsonl",
        [
            event.format("1", "user-00001", "10:00:00", 5),
            event.format("2", "user-00001", "10:04:00", 2),
            event.format("3", "user-00002", "10:02:00", 3),
            event.format("4", "user-00002", "10:06:00", 1),
        ],
    )
    run_once(spark, settings)
    first_version = DeltaTable(str(tumbling_table(settings).path(settings))).version()
    land(
        settings,
        "second.jsonl",
        [event.format("5", "user-00001", "10:03:00", "1.50"), event.format("6", "user-00003", "10:07:00", "0.25")],
    )
    run_once(spark, settings)

    def cli(*args: str) -> Result:
        env = {"LAKEHOUSE_HOME": str(settings.home), "COLUMNS": "80"}
        result = CliRunner().invoke(app, list(args), env=env)
        assert result.exit_code == 0, result.output
        return result

    name = tumbling_table(settings).name
    latest = cli("show", name).stdout
    assert shown(latest) == [
        ("user-00001", "2024-01-01 10:00:00"),
        ("user-00002", "2024-01-01 10:00:00"),
        ("user-00002", "2024-01-01 10:05:00"),
        ("user-00003", "2024-01-01 10:05:00"),
    ]
    assert re.search(r"^total_amount +8\.50 *$", latest, re.M) and "4 of 4 rows shown" in latest
    before = cli("show", name, "--as-of", str(first_version)).stdout
    assert len(shown(before)) == 3 and re.search(r"^total_amount +7\.00 *$", before, re.M)

    commits = json.loads(cli("history", name, "--json").stdout)
    versions = [c["version"] for c in commits]
    assert versions == list(range(versions[0], -1, -1))
    assert commits[-1]["operation"] == "CREATE TABLE"
    merges = [c for c in commits if c["operation"] == "MERGE"]
    assert merges, commits
    assert sum(c["rows"].get("inserted", 0) for c in merges) == 4
    assert sum(c["rows"].get("updated", 0) for c in merges if c["version"] > first_version) >= 1
    table = cli("history", name).stdout
    assert "MERGE" in table and "CREATE TABLE" in table and "inserted" in table

    bronze = json.loads(cli("history", "bronze.events", "--json").stdout)
    assert sum(c["rows"].get("written", 0) for c in bronze) == 6
