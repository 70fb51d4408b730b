"""The `lakehouse` command line as a user runs it: real processes, real Spark, real Delta."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.synthetic import StreamSpec, generate_lines
from tests.lines import land
from tests.reference import (
    broken_correction_chains,
    distinct_valid_events,
    hopping_totals,
    landing_lines,
    window_totals,
)
from tests.servers import listening_tree
from warehouse.locks import hold
from warehouse.settings import Settings

pytestmark = pytest.mark.system

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


def test_tables_shows_every_path_whole_in_80_columns(tmp_path: Path) -> None:
    result = lakehouse(tmp_path, "tables", COLUMNS="80")
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "paths under" in result.stdout
    for name in CONTRACT_TABLES:
        layer, short = name.split(".")
        assert f"tables/{layer}/{short}" in result.stdout, name


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LAKEHOUSE_HOME": "/dev/null/lakehouse"}, "LAKEHOUSE_HOME"),
        ({"LAKEHOUSE_WATERMARK_DELAY_SECONDS": "-5"}, "LAKEHOUSE_WATERMARK_DELAY_SECONDS"),
        ({"LAKEHOUSE_WINDOW_MINUTES": "7"}, "LAKEHOUSE_WINDOW_MINUTES"),
        ({"LAKEHOUSE_GOLD_OUTPUTS": "sessions,tumbling"}, "LAKEHOUSE_GOLD_OUTPUTS"),
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
    landed = sorted(p for p in (home / "landing").iterdir() if p.name != ".arrival-clock")
    assert len(landed) == 2 and all(p.read_text() == source.read_text() for p in landed)
    assert not [p for p in landed if p.name.startswith(".")], "no partial file is left"
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


#: Each gold commit's writer, by commit file: a poll reads only the commits it has not seen.
_COMMIT_WRITERS: dict[Path, str] = {}


def _gold_commits_by(home: Path, writer_prefix: str) -> int:
    """Gold commits whose userMetadata names a writer starting with ``writer_prefix`` (stream or reconcile).

    Read from the commit files themselves, each once: polled every few milliseconds while a reconcile and a
    stream work, a full history read per look took a share of the two cores from them."""
    log = home / "tables" / "gold" / "user_spend_5m" / "_delta_log"
    commits = sorted(log.glob("*.json")) if log.is_dir() else []
    for commit in commits:
        if commit not in _COMMIT_WRITERS:
            actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
            info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            _COMMIT_WRITERS[commit] = json.loads(info.get("userMetadata") or "{}").get("writer", "")
    return sum(_COMMIT_WRITERS[commit].startswith(writer_prefix) for commit in commits)


def _bronze_version(home: Path) -> int:
    log = home / "tables" / "bronze" / "events" / "_delta_log"
    return max((int(commit.stem) for commit in log.glob("*.json")), default=-1)


def _late_events(home: Path) -> int:
    try:
        return (
            DeltaTable(str(home / "tables" / "silver" / "late_events")).to_pyarrow_table(columns=["event_id"]).num_rows
        )
    except Exception:
        return 0


def test_sigkill_of_reconcile_and_of_stream_mid_run_then_restart_ends_exact(tmp_path: Path) -> None:
    """SIGKILL a reconcile right after its first gold MERGE (before that batch's corrections) while
    `run --continuous` writes gold from files that keep landing; rerun it beside the stream; then SIGKILL
    the stream with a backlog in flight. After a restart and a reconcile, every table is exact and the
    corrections log chains revision by revision."""
    home = tmp_path / "home"
    spec = StreamSpec(events=2000, users=8, rate=10.0, late_fraction=0.06, seed=8)
    lines = list(generate_lines(spec))
    parts = [lines[n * len(lines) // 8 : (n + 1) * len(lines) // 8] for n in range(8)]
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
    land(settings, "part-00.jsonl", parts[0])
    env_settings = {
        "LAKEHOUSE_MAX_FILES_PER_TRIGGER": "1",
        "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "2",
        # Crash safety of the window tables is what this test is about; the hourly table is checked too.
        "LAKEHOUSE_GOLD_OUTPUTS": "hopping",
    }
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), **env_settings}
    stream = subprocess.Popen(
        [LAKEHOUSE, "run", "--continuous"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    stop_feeding = threading.Event()

    def feed() -> None:  # a file every few seconds, so the stream keeps writing gold beside the reconciles
        for n in range(3, len(parts) - 3):  # the last three are kept for the backlog below
            if stop_feeding.wait(4.0):
                return
            land(settings, f"part-{n:02d}.jsonl", parts[n])

    feeder = threading.Thread(target=feed)
    try:
        deadline = time.monotonic() + 600
        # Parts 1 and 2 land once gold has taken the part before, so each is a batch of its own and events
        # of part 0's windows arriving in them are late (one batch holding all three would have none).
        for n in (1, 2):
            taken = n - 1
            while _gold_commits_by(home, "lakehouse:gold_") <= taken and time.monotonic() < deadline:
                assert stream.poll() is None, "the stream stopped"
                time.sleep(0.2)
            land(settings, f"part-{n:02d}.jsonl", parts[n])
        while _late_events(home) == 0 and time.monotonic() < deadline and stream.poll() is None:
            time.sleep(0.5)
        assert stream.poll() is None and _late_events(home) > 0, "no late event while the stream ran"
        stream_commits = _gold_commits_by(home, "lakehouse:gold_")
        feeder.start()

        reconcile = subprocess.Popen(
            [LAKEHOUSE, "reconcile", "--own-spark"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        while not _gold_commits_by(home, "lakehouse:reconcile_") and reconcile.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert reconcile.poll() is None, f"reconcile ended before it could be killed: {reconcile.stderr.read()}"
        reconcile.send_signal(signal.SIGKILL)
        reconcile.wait(timeout=60)

        rerun = lakehouse(home, "reconcile", **env_settings)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert stream.poll() is None, "the stream should still be running beside the reconciles"
        assert _gold_commits_by(home, "lakehouse:gold_") > stream_commits, "the stream wrote no gold meanwhile"

        # Then the stream is killed mid-run: the rest lands as a backlog, and the kill follows its first commit.
        stop_feeding.set()
        feeder.join()
        for n, part in enumerate(parts):
            if not any(home.joinpath("landing").glob(f"*part-{n:02d}.jsonl")):
                land(settings, f"part-{n:02d}.jsonl", part)
        bronze_before = _bronze_version(home)
        backlog_deadline = time.monotonic() + 120
        while _bronze_version(home) == bronze_before and time.monotonic() < backlog_deadline:
            time.sleep(0.2)
    finally:
        stop_feeding.set()
        if feeder.is_alive():
            feeder.join()
        stream.send_signal(signal.SIGKILL)
        stream.wait(timeout=60)
    assert len(_delta_rows(home, "bronze", "events")) < len(lines), "the kill should leave work in flight"
    # The followers' locks (the derived windows here) went with the run: the restart below takes them.

    for command in (("run", "--once"), ("reconcile",)):
        finished = lakehouse(home, *command, **env_settings)
        assert finished.returncode == 0, finished.stderr[-3000:]

    landed = landing_lines(home / "landing")
    assert sorted(landed) == sorted(lines)
    bronze = _delta_rows(home, "bronze", "events")
    assert len(bronze) == len({(r["source_file"], r["source_line"]) for r in bronze}) == len(lines)
    silver = _delta_rows(home, "silver", "events")
    assert len(silver) == len({r["event_id"] for r in silver}) == distinct_valid_events(lines)
    quarantine = _delta_rows(home, "silver", "quarantine")
    duplicates = _delta_rows(home, "silver", "duplicates")
    assert len(silver) + len(quarantine) + len(duplicates) == len(bronze)
    gold = _delta_rows(home, "gold", "user_spend_5m")
    panes = window_totals(landed)
    assert {(r["user_id"], r["window_start"]): (r["total_amount"], r["event_count"]) for r in gold} == panes
    # The hourly windows (every 5 min) after the crashes: each 5-minute total added to the 12 hours over it.
    hopping = _delta_rows(home, "gold", "user_spend_1h_hopping")
    hours = {(r["user_id"], r["window_start"]): (r["total_amount"], r["event_count"]) for r in hopping}
    assert hours == hopping_totals(panes)
    # Every change after a row's first write is logged once, in revision order, and the log chains.
    corrections = _delta_rows(home, "gold", "corrections")
    causes = {row["cause"] for row in corrections if row["table_name"] == "gold.user_spend_5m"}
    assert "reconciliation" in causes
    assert broken_correction_chains(corrections, gold) == []


def test_status_progress_and_quiet_start(tmp_path: Path) -> None:
    """`status` reads backlog, lag and locks without Spark; a busy stream is refused before the JVM starts;
    a run keeps Spark's chatter in logs/spark.log and leaves one ops.stream_progress row per batch."""
    home = tmp_path / "home"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
    lines = list(generate_lines(StreamSpec(events=400, users=5, seed=21)))
    land(settings, "first.jsonl", lines[:200])
    land(settings, "second.jsonl", lines[200:])
    spark_log = home / "logs" / "spark.log"

    before = lakehouse(home, "status", "--json")
    assert before.returncode == 0, before.stderr
    streams = {s["stream"]: s for s in json.loads(before.stdout)}
    # The landing stream carries its batches through silver to the tumbling table; the rest follow.
    assert set(streams) == {
        "bronze_events",
        "gold_user_spend_5m_derived",
        "gold_order_payments",
        "gold_fraud_alerts",
        "gold_unique_urls",
        "reconcile_late_events",
    }
    bronze = streams["bronze_events"]
    assert (bronze["backlog"], bronze["backlog_unit"], bronze["running"]) == (2, "files", False)
    assert bronze["lag_seconds"] >= 0 and bronze["last_batch"] is None

    with hold(settings, "silver_events", purpose="a test holding the silver stream"):
        busy = lakehouse(home, "run", "--once")
        held = {s["stream"]: s for s in json.loads(lakehouse(home, "status", "--json").stdout)}
    assert busy.returncode == 1
    assert busy.stderr.strip().splitlines() == [
        f"lakehouse: the silver_events lock is held by a test holding the silver stream "
        f"({home / 'locks' / 'silver_events.lock'})"
    ]
    assert not spark_log.exists(), "the JVM started although the stream was busy"
    assert not held["bronze_events"]["running"]  # the run never started

    run = lakehouse(home, "run", "--once")
    assert run.returncode == 0, run.stderr
    assert run.stderr == "", "Spark's own output belongs in logs/spark.log"
    assert "incubator" in spark_log.read_text() or "WARN" in spark_log.read_text()

    after = {s["stream"]: s for s in json.loads(lakehouse(home, "status", "--json").stdout)}
    for name in ("bronze_events", "gold_user_spend_5m_derived", "gold_order_payments"):
        assert after[name]["backlog"] == 0 and not after[name]["running"], after[name]
        assert after[name]["last_batch"]["batch_seconds"] > 0
    progress = _delta_rows(home, "ops", "stream_progress")
    rows_in: dict[str, int] = defaultdict(int)
    for row in progress:
        rows_in[row["stream"]] += row["rows_in"]
    # The join's input is what its two scans of silver return once Spark skips files and row groups that
    # hold no orders or payments (none here): not a count of silver's rows.
    assert rows_in.pop("gold_order_payments") <= 2 * distinct_valid_events(lines)
    # The keyed streams ran too; their input rows are what their Delta scans read after skipping files.
    keyed = {"gold_fraud_alerts", "gold_unique_urls"}
    assert keyed <= set(rows_in)
    assert {stream: rows for stream, rows in rows_in.items() if stream not in keyed} == {
        "bronze_events": len(lines),
        "gold_user_spend_5m_derived": distinct_valid_events(lines),  # the events the window batches folded
    }
    carried = [json.loads(r["figures"]) for r in progress if r["stream"] == "bronze_events"]
    assert sum(f["events"] for f in carried) == distinct_valid_events(lines)
    assert len({(r["stream"], r["batch_id"]) for r in progress}) == len(progress)
    assert all(r["watermark"] is not None for r in progress if r["stream"] == "bronze_events")
    assert all(r["latency_max_seconds"] > 0 for r in progress if r["stream"] == "bronze_events")


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux: /proc/<pid>/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_continuous_followers_run_niced_in_a_thread_and_a_failing_follower_stops_the_run(tmp_path: Path) -> None:
    """`run --continuous` runs its followers in a thread of its own process at LAKEHOUSE_FOLLOWERS_NICENESS
    (the thread, the JVM thread serving it and the query threads that one starts), its main thread at the
    run's own: the followers write the fraud alerts while the critical path carries lines to gold; SIGTERM
    stops both cleanly; a follower that fails stops the run with one line naming it, its trace in the log."""
    home = tmp_path / "home"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})

    def burst(user: str) -> list[str]:
        return [
            json.dumps({"event_id": f"{user}{n}", "user_id": user, "event_type": "purchase",
                        "event_time": f"2024-01-01T10:00:0{n}Z", "amount": 5.00})
            for n in range(3)
        ]  # fmt: skip

    land(settings, "burst.jsonl", burst("U"))
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_GOLD_OUTPUTS": "fraud_alerts",
           "LAKEHOUSE_FOLLOWERS_NICENESS": "7", "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "1",
           "LAKEHOUSE_SPARK_UI": "true"}  # fmt: skip
    command = [LAKEHOUSE, "run", "--continuous"]

    def start() -> subprocess.Popen:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    stream = start()
    try:
        deadline, alerts = time.monotonic() + 300, []
        while not alerts and time.monotonic() < deadline and stream.poll() is None:
            time.sleep(0.5)
            with contextlib.suppress(Exception):
                alerts = _delta_rows(home, "gold", "fraud_alerts")
        assert stream.poll() is None, stream.stderr.read()
        assert [(a["rule"], a["user_id"]) for a in alerts] == [("burst", "U")], "no fraud alert within 300 s"
        assert len(_delta_rows(home, "gold", "user_spend_5m")) == 1  # the critical path's gold
        # Threads of the run's Python process and of its JVM (a child of it), no process of their own.
        base = os.getpriority(os.PRIO_PROCESS, stream.pid)
        (jvm,) = [child for child in _children(stream.pid) if b"java" in _cmdline(child)]
        niceness = {**_thread_niceness(stream.pid), **_thread_niceness(jvm)}
        niced = [thread for thread, nice in niceness.items() if nice == base + 7]
        assert {stream.pid, jvm}.isdisjoint(niced) and len(niced) >= 3, niceness
        assert not any(b"runtime.followers" in _cmdline(child) for child in _children(stream.pid))
        # The driver (its Spark UI on, RPC and block manager ports) listens on loopback only.
        opened = listening_tree(stream.pid)
        assert len(opened) >= 2 and {host for host, _ in opened} == {"127.0.0.1"}, opened
        stream.send_signal(signal.SIGTERM)
        assert stream.wait(timeout=180) == 0, stream.stderr.read()
    finally:
        if stream.poll() is None:
            stream.kill()

    log = home / "tables" / "gold" / "fraud_alerts" / "_delta_log"
    stream = start()
    try:
        while not _lock_held(settings, "gold_fraud_alerts") and stream.poll() is None:
            time.sleep(0.2)
        # A damaged newest commit of the followers' own table, met by their next batch while the run goes on.
        newest = max(int(path.stem) for path in log.glob("*.json"))
        (log / f"{newest + 1:020d}.json").write_text("not a commit\n")
        land(settings, "burst-2.jsonl", burst("V"))
        assert stream.wait(timeout=300) == 1
        lines = stream.stderr.read().strip().splitlines()
        followers_log = home / "logs" / "followers.log"
        assert len(lines) == 1 and lines[0].startswith("lakehouse: the followers stopped: "), lines
        assert lines[0].endswith(f"(more in {followers_log})") and "Traceback" in followers_log.read_text()
    finally:
        if stream.poll() is None:
            stream.kill()


def _lock_held(settings: Settings, stream: str) -> bool:
    from warehouse.locks import lock_holder

    return bool(lock_holder(settings, stream))


def _thread_niceness(pid: int) -> dict[int, int]:
    """Each thread of ``pid`` (Linux keeps a niceness per thread) and its niceness."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            found[int(task.name)] = int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
