"""The lakehouse on a Spark standalone cluster the project starts: a master and two one-core workers on
127.0.0.1 (``lakehouse cluster up``), the commands run unchanged with ``LAKEHOUSE_SPARK_MASTER``; its tables,
checkpoints and landing zone on an S3-compatible server the test starts (moto's, on 127.0.0.1)."""

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devtools.cluster import status as cluster_status
from devtools.daemons import running
from devtools.objectstore import TEST_CREDENTIALS, ObjectStore
from devtools.synthetic import StreamSpec, generate_lines
from runtime.runner import run_once, run_reconcile
from tests.lines import land
from tests.reference import landing_lines, window_totals
from tests.servers import LAKEHOUSE, Commands, cluster_settings, files_holding, listening, process_tree
from tests.ui_harness import free_port
from warehouse.catalog import BRONZE_EVENTS, kept_tables, tumbling_table
from warehouse.delta import latest_version
from warehouse.settings import GOLD_OUTPUTS, Settings
from warehouse.storage import open_delta

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("cluster")]


class Cluster(Commands):
    def __init__(self, home: Path) -> None:
        super().__init__({"LAKEHOUSE_HOME": str(home), **cluster_settings()})
        self.home = home

    def status(self) -> dict:
        result = self.command("cluster", "status", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def state(self) -> dict:
        """What ``cluster status --json`` prints, read in this process: polled while a run works, where a
        command per look would take a share of the two cores from the run."""
        return cluster_status(Settings.from_env(self.env))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module, its files under a home of its own; stopped (and checked stopped) after."""
    started = Cluster(tmp_path_factory.mktemp("cluster"))
    result = started.command("cluster", "up", timeout=180)
    assert result.returncode == 0, result.stderr
    try:
        yield started
    finally:
        result = started.command("cluster", "down", timeout=120)
        assert result.returncode == 0, result.stderr
        assert "Spark cluster stopped" in result.stdout


def test_cluster_up_starts_a_master_and_its_workers_on_loopback(cluster: Cluster) -> None:
    state = cluster.status()
    assert state["running"] and state["master_url"] == cluster.master
    assert [(w["state"], w["cores"]) for w in state["workers"]] == [("ALIVE", 1), ("ALIVE", 1)]
    assert all(state["pids"].values())
    # Every port the master and workers listen on is on 127.0.0.1 only.
    opened = [address for pid in state["pids"].values() for address in listening(pid)]
    assert len(opened) >= 4, opened  # the master's RPC and UI ports, and each worker's two
    assert {host for host, _ in opened} == {"127.0.0.1"}, opened
    assert 6066 not in {port for _, port in opened}  # no REST submission server
    # A second `up` finds it running and starts nothing.
    again = cluster.command("cluster", "up")
    assert again.returncode == 0 and "already running" in again.stdout, again.stderr
    assert cluster.status()["pids"] == state["pids"]


def test_a_taken_port_is_one_line(cluster: Cluster, tmp_path: Path) -> None:
    """Another home asking for the running master's port gets one line naming the setting."""
    other = {**cluster.env, "LAKEHOUSE_HOME": str(tmp_path)}
    result = subprocess.run(
        [LAKEHOUSE, "cluster", "up"], env={**os.environ, **other}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "is already taken by another process" in result.stderr and "LAKEHOUSE_CLUSTER_PORT" in result.stderr
    assert not list((tmp_path / "cluster").glob("*.pid"))


def test_java_missing_is_one_line(tmp_path: Path) -> None:
    """No ``java`` on PATH and no JAVA_HOME: ``cluster up`` says so in one line and starts nothing."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    result = subprocess.run(
        [LAKEHOUSE, "cluster", "up"],
        env={**env, "PATH": str(tmp_path), "LAKEHOUSE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "needs Java 17" in result.stderr and "JAVA_HOME" in result.stderr
    assert not list((tmp_path / "home").glob("cluster/*.pid"))


def test_a_cluster_not_up_in_time_is_one_line_and_down_stops_what_started(tmp_path: Path) -> None:
    """A start timeout shorter than a JVM's start: one line naming the setting and the logs; ``down``
    then stops the daemons already started, and ``status`` finds nothing running."""
    started = Cluster(tmp_path)
    started.env["LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS"] = "1"
    result = started.command("cluster", "up", timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "within 1 s (LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS)" in result.stderr, result.stderr
    assert f"see {tmp_path / 'cluster' / 'logs'}" in result.stderr
    pids = [int(path.read_text()) for path in (tmp_path / "cluster").glob("*.pid")]
    assert pids, "the master's daemon was started before the wait"
    result = started.command("cluster", "down", timeout=120)
    assert result.returncode == 0, result.stderr
    assert not any(running(pid) for pid in pids)
    assert started.status()["running"] is False


#: Per table, the columns that do not depend on when or in which batches a row was written (no processing
#: times, batch numbers, revisions, or positions, which name the home's landing files): what the cluster
#: and local mode must agree on.
SAME_EVERYWHERE = {
    "silver.events": ("event_id", "user_id", "event_time", "amount", "event_type", "url", "order_id"),
    "silver.quarantine": ("raw", "reason"),
    "silver.duplicates": ("event_id", "raw", "conflicting"),
    "gold.user_spend_5m": ("user_id", "window_start", "window_end", "total_amount", "event_count", "is_final"),
    "gold.user_spend_1h_hopping": ("user_id", "window_start", "window_end", "total_amount", "event_count"),
    "gold.user_sessions": ("user_id", "session_start", "session_end", "total_amount", "event_count"),
    "gold.user_spend_global": ("user_id", "event_count", "total_amount"),
    "gold.order_payments": ("order_id", "user_id", "order_event_id", "payment_event_id", "status"),
    "gold.unique_urls": ("user_id", "unique_urls", "window_end"),
    "gold.fraud_alerts": ("user_id", "rule", "event_id", "triggering_event_ids"),
}


def _rows(settings: Settings, table: str) -> list[tuple]:
    kept = {t.name: t for t in kept_tables(settings)}[table]
    data = open_delta(kept.path(settings)).to_pyarrow_table(columns=list(SAME_EVERYWHERE[table]))
    return sorted((tuple(str(value) for value in row.values()) for row in data.to_pylist()), key=repr)


def _gold(settings: Settings) -> dict[tuple[str, datetime], tuple[Decimal, int]]:
    rows = open_delta(tumbling_table(settings).path(settings)).to_pyarrow_table().to_pylist()
    return {
        (row["user_id"], row["window_start"].astimezone(UTC)): (row["total_amount"], row["event_count"]) for row in rows
    }


def _bronze_version(settings: Settings) -> int:
    return latest_version(BRONZE_EVENTS.path(settings) / "_delta_log")


def _run_once(cluster: Cluster, env: dict[str, str], kill_when: Callable[[], bool] | None = None) -> bool:
    """``run --once``; with ``kill_when``, SIGKILL it the moment that holds. Returns whether it was killed."""
    run = subprocess.Popen(
        [LAKEHOUSE, "run", "--once"],
        env={**os.environ, **cluster.env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while kill_when is not None and run.poll() is None and time.monotonic() < deadline:
        if kill_when():
            run.kill()
            run.communicate(timeout=60)
            return True
        time.sleep(0.5)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err or out
    return False


@pytest.mark.timeout(1800)  # about 450 s alone: ten JVM starts with executors, every output on, on S3
def test_on_the_cluster_with_tables_on_object_storage_nothing_is_lost_or_doubled_and_gold_is_the_reference(
    cluster: Cluster, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Duplicates, invalid lines, disorder and late events landed in two parts, on the S3 server. The first
    part's `run --once` loses a worker (SIGKILL, its executor with it) mid-run; the second's driver is killed
    (SIGKILL) once its first batch is in bronze and run again. Then `reconcile`, `validate` and `replay`, all
    on the cluster: gold is the plain-Python reference's, and every table equals what local mode makes of
    the same files on local disk, every output on."""
    store = ObjectStore.start("lakehouse-test", tmp_path / "s3.log")
    try:
        _on_the_cluster_with_tables_on_object_storage(cluster, spark, tmp_path, monkeypatch, store)
    finally:
        store.stop()


def _listening_now(pid: int) -> list[tuple[str, int]]:
    try:
        return listening(pid)
    except OSError:  # ended since the listing
        return []


def _on_the_cluster_with_tables_on_object_storage(
    cluster: Cluster, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: ObjectStore
) -> None:
    # This process reads and lands through the same server, with the same (throwaway) credentials.
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "cluster-home"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home), **store.env})
    on_cluster = {
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_SPARK_MASTER": cluster.master,
        "LAKEHOUSE_SPARK_CORES_MAX": "2",
        **store.env,
    }
    spec = StreamSpec(
        events=1500, users=12, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.04, invalid_fraction=0.03, seed=11,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    parts = (lines[: len(lines) // 2], lines[len(lines) // 2 :])

    # Part one: a worker dies while the run's executors work on both.
    land(settings, "part0.jsonl", parts[0])
    killed_worker: dict[str, int] = {}
    opened_by_executors: list[tuple[str, int]] = []

    def lose_a_worker() -> bool:
        state = cluster.state()
        busy = [w for w in state["workers"] if w["coresused"] > 0]
        if len(busy) == 2 and _bronze_version(settings) >= 0 and not killed_worker:
            # The executors (each worker's children) listen on loopback only, as their worker does.
            # The master marks cores used before the executor JVMs listen: wait until both do.
            executors = [pid for worker in state["pids"].values() for pid in process_tree(worker)[1:]]
            opened = [address for pid in executors for address in _listening_now(pid)]
            if len({pid for pid in executors if _listening_now(pid)}) < 2:
                return False
            opened_by_executors.extend(opened)
            killed_worker["pid"] = state["pids"]["worker-2"]
            os.kill(killed_worker["pid"], signal.SIGKILL)
        return False  # the run itself goes on

    _run_once(cluster, on_cluster, lose_a_worker)
    assert killed_worker, "the run ended before both workers were busy"
    assert opened_by_executors and {host for host, _ in opened_by_executors} == {"127.0.0.1"}, opened_by_executors
    assert len([w for w in cluster.status()["workers"] if w["state"] == "ALIVE"]) == 1
    restarted = cluster.command("cluster", "up")
    assert restarted.returncode == 0 and "started" in restarted.stdout, restarted.stderr
    assert [w["state"] for w in cluster.status()["workers"]].count("ALIVE") == 2

    # Part two: the driver is killed mid-run, after its first batch reached bronze, then run again.
    land(settings, "part1.jsonl", parts[1])
    before = _bronze_version(settings)
    assert _run_once(cluster, on_cluster, lambda: _bronze_version(settings) > before)
    _run_once(cluster, on_cluster)

    for command in (["reconcile"], ["validate"]):
        result = cluster.command(*command, **on_cluster)
        assert result.returncode == 0, result.stderr or result.stdout
    expected = window_totals(landing_lines(settings.landing_dir))
    assert _gold(settings) == expected

    # The same files in local mode (this process's own local session), the same two runs.
    local = replace(Settings.from_env(), home=tmp_path / "local-home", gold_outputs=frozenset(GOLD_OUTPUTS))
    local.ensure_home()
    for part, chunk in enumerate(parts):
        land(local, f"part{part}.jsonl", chunk)
        run_once(spark, local)
    run_reconcile(spark, local)
    for table in SAME_EVERYWHERE:
        assert _rows(settings, table) == _rows(local, table), table

    # Replay on the cluster rebuilds the same.
    replay = cluster.command("replay", **on_cluster)
    assert replay.returncode == 0, replay.stderr or replay.stdout
    assert _gold(settings) == expected
    for table in SAME_EVERYWHERE:
        assert _rows(settings, table) == _rows(local, table), f"{table} after replay"
    # Tables, checkpoints and the landing zone are on the server; none of them in the home.
    prefixes = {key.split("/")[1] for key in store.keys("lakehouse/")}
    assert {"tables", "checkpoints", "landing"} <= prefixes, prefixes
    assert not any((home / folder).exists() for folder in ("tables", "checkpoints", "landing"))
    # The secret key is in no file of the run (the home's logs and status files, the cluster's logs, the
    # executors' output) and in no object on the server (tables, checkpoints, ledgers).
    secret = TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    assert files_holding(tmp_path, secret) == [] and files_holding(cluster.home, secret) == []
    client = store.client()
    assert [
        key
        for key in store.keys("")
        if secret.encode() in client.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    ] == []
    # The executors ran on the workers: each worker's scratch holds the applications' executor folders.
    executor_dirs = list((cluster.home / "cluster" / "work").glob("worker-*/app-*/*"))
    assert len({path.parts[-3] for path in executor_dirs}) == 2, executor_dirs


def test_a_master_that_does_not_answer_is_one_line_at_once(tmp_path: Path) -> None:
    """No cluster at the configured master: the command stops in one line before Spark retries for a minute."""
    master = f"spark://127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = subprocess.run(
        [LAKEHOUSE, "run", "--once"],
        env={**os.environ, "LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_SPARK_MASTER": master},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"LAKEHOUSE_SPARK_MASTER={master}: nothing answers there" in result.stderr
    assert time.monotonic() - started < 30
