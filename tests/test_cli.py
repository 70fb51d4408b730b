"""The `lakehouse` command line as a user runs it: real processes, real Spark, real Delta."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.reference import distinct_valid_events, landing_lines, window_totals

pytestmark = pytest.mark.slow

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")
CONTRACT_TABLES = {
    "bronze.events",
    "silver.events",
    "silver.quarantine",
    "silver.late_events",
    "gold.user_spend_5m",
    "gold.corrections",
}


def lakehouse(home: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LAKEHOUSE, *args],
        env={**os.environ, "LAKEHOUSE_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_tables_json_is_the_catalog(tmp_path: Path) -> None:
    result = lakehouse(tmp_path, "tables", "--json")
    assert result.returncode == 0, result.stderr
    tables = json.loads(result.stdout)
    names = {t["name"] for t in tables}
    assert CONTRACT_TABLES | {"silver.duplicates"} <= names
    for table in tables:
        assert table["layer"] == table["name"].split(".")[0]
        assert Path(table["path"]).is_absolute()
        assert Path(table["path"]).is_relative_to(tmp_path)


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LAKEHOUSE_HOME": "/dev/null/lakehouse"}, "LAKEHOUSE_HOME"),
        ({"LAKEHOUSE_WATERMARK_DELAY_SECONDS": "-5"}, "LAKEHOUSE_WATERMARK_DELAY_SECONDS"),
        ({"LAKEHOUSE_WINDOW_MINUTES": "7"}, "LAKEHOUSE_WINDOW_MINUTES"),
    ],
)
def test_bad_configuration_stops_with_one_line(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    result = subprocess.run(
        [LAKEHOUSE, "tables", "--json"],
        env={**os.environ, "LAKEHOUSE_HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakehouse: ") and needle in lines[0]


def test_unwritable_home_is_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = lakehouse(blocker / "home", "run", "--once")
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1
    assert "LAKEHOUSE_HOME" in result.stderr


def test_ingest_is_atomic_and_rejects_missing_files(tmp_path: Path) -> None:
    source = tmp_path / "events.jsonl"
    source.write_text('{"event_id":"x","user_id":"u","event_time":0,"amount":1}\n')
    home = tmp_path / "home"
    assert lakehouse(home, "ingest", str(source)).returncode == 0
    assert lakehouse(home, "ingest", str(source)).returncode == 0
    landed = sorted((home / "landing").iterdir())
    assert len(landed) == 2 and all(p.read_text() == source.read_text() for p in landed)
    assert not [p for p in landed if p.name.startswith(".")]
    missing = lakehouse(home, "ingest", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and "no such file" in missing.stderr


def test_generate_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    for name in ("one", "two"):
        result = lakehouse(tmp_path / name, "generate", "--events", "500", "--seed", "11", "--files", "3")
        assert result.returncode == 0, result.stderr
    one, two = (landing_lines(tmp_path / name / "landing") for name in ("one", "two"))
    assert one == two and len(one) > 500
    other = lakehouse(tmp_path / "three", "generate", "--events", "500", "--seed", "12", "--files", "3")
    assert other.returncode == 0 and landing_lines(tmp_path / "three" / "landing") != one


def _delta_rows(home: Path, layer: str, name: str) -> list[dict]:
    return DeltaTable(str(home / "tables" / layer / name)).to_pyarrow_table().to_pylist()


def _gold_version(home: Path) -> int:
    try:
        return DeltaTable(str(home / "tables" / "gold" / "user_spend_5m")).version()
    except Exception:
        return -1


def test_sigkill_mid_stream_then_restart_ends_exact(tmp_path: Path) -> None:
    """Kill -9 a continuous run mid-stream; the next run loses nothing and counts nothing twice."""
    home = tmp_path / "home"
    generated = lakehouse(home, "generate", "--events", "20000", "--files", "40", "--seed", "3", "--users", "30")
    assert generated.returncode == 0, generated.stderr
    settings = {"LAKEHOUSE_MAX_FILES_PER_TRIGGER": "2", "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "1"}
    stream = subprocess.Popen(
        [LAKEHOUSE, "run", "--continuous"],
        env={**os.environ, "LAKEHOUSE_HOME": str(home), **settings},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        # Wait until gold has committed a batch, so the kill lands with work committed and work in flight.
        while _gold_version(home) < 1 and time.monotonic() < deadline and stream.poll() is None:
            time.sleep(0.5)
        assert stream.poll() is None, "the continuous run ended on its own"
        assert _gold_version(home) >= 1, "gold never advanced"
    finally:
        stream.send_signal(signal.SIGKILL)
        stream.wait(timeout=60)
    bronze_before = len(_delta_rows(home, "bronze", "events"))

    finished = lakehouse(home, "run", "--once", **settings)
    assert finished.returncode == 0, finished.stderr[-3000:]

    lines = landing_lines(home / "landing")
    bronze = _delta_rows(home, "bronze", "events")
    assert bronze_before > 0, "the kill should land after some work was committed"
    assert len(bronze) == len(lines)
    assert len({(r["source_file"], r["source_line"]) for r in bronze}) == len(lines)

    silver = _delta_rows(home, "silver", "events")
    assert len(silver) == len({r["event_id"] for r in silver}) == distinct_valid_events(lines)
    quarantine = _delta_rows(home, "silver", "quarantine")
    duplicates = _delta_rows(home, "silver", "duplicates")
    assert len(silver) + len(quarantine) + len(duplicates) == len(bronze)

    # Gold plus the late side output equals the independent reference, window by window, exactly.
    combined: dict[tuple, list] = defaultdict(lambda: [Decimal("0.00"), 0])
    for row in _delta_rows(home, "gold", "user_spend_5m"):
        combined[(row["user_id"], row["window_start"])][0] += row["total_amount"]
        combined[(row["user_id"], row["window_start"])][1] += row["event_count"]
    for row in _delta_rows(home, "silver", "late_events"):
        combined[(row["user_id"], row["window_start"])][0] += row["amount"]
        combined[(row["user_id"], row["window_start"])][1] += 1
    expected = window_totals(lines)
    assert {k: tuple(v) for k, v in combined.items()} == expected
