"""The lakehouse on a Spark standalone cluster the project starts: a master and two one-core workers on
127.0.0.1 (``lakehouse cluster up``), the commands run unchanged with ``LAKEHOUSE_SPARK_MASTER``."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.synthetic import StreamSpec, generate_lines
from tests.lines import land
from tests.reference import landing_lines, window_totals
from warehouse.catalog import user_spend_table
from warehouse.settings import Settings

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("cluster")]

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on, from /proc (IPv4, and IPv4-mapped IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address[-8:])[::-1]  # the last 32 bits, little-endian: the IPv4 address
            mapped = len(address) == 8 or address[:24] == "0000000000000000FFFF0000"
            found.append((socket.inet_ntoa(raw) if mapped else address, int(port, 16)))
    return found


class Cluster:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {
            "LAKEHOUSE_HOME": str(home),
            "LAKEHOUSE_CLUSTER_PORT": str(_free_port()),
            "LAKEHOUSE_CLUSTER_UI_PORT": str(_free_port()),
            "LAKEHOUSE_CLUSTER_WORKERS": "2",
            "LAKEHOUSE_CLUSTER_WORKER_CORES": "1",
            "LAKEHOUSE_CLUSTER_WORKER_MEMORY": "1g",
        }
        self.master = f"spark://127.0.0.1:{self.env['LAKEHOUSE_CLUSTER_PORT']}"

    def command(self, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [LAKEHOUSE, *args],
            env={**os.environ, **self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def status(self) -> dict:
        result = self.command("cluster", "status", "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)


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
    listening = [address for pid in state["pids"].values() for address in _listening(pid)]
    assert len(listening) >= 5, listening  # the master's RPC, REST and UI ports, and each worker's two
    assert {host for host, _ in listening} == {"127.0.0.1"}, listening
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


def test_run_and_reconcile_on_the_cluster_give_the_reference(cluster: Cluster, tmp_path: Path) -> None:
    """Duplicates, invalid lines, disorder and late events, landed in two parts, each `run --once` on the
    cluster's executors, then `reconcile`: gold is the plain-Python reference's, every output on."""
    home = tmp_path / "home"
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
    spec = StreamSpec(
        events=1500, users=12, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.04, invalid_fraction=0.03, seed=11,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    on_cluster = {
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_SPARK_MASTER": cluster.master,
        "LAKEHOUSE_SPARK_CORES_MAX": "2",
    }
    seen_applications: set[str] = set()
    for part, chunk in enumerate((lines[: len(lines) // 2], lines[len(lines) // 2 :])):
        land(settings, f"part{part}.jsonl", chunk)
        run = subprocess.Popen(
            [LAKEHOUSE, "run", "--once"],
            env={**os.environ, **cluster.env, **on_cluster},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # While it runs, the master lists it as an application holding the workers' cores.
        deadline = time.monotonic() + 300
        while run.poll() is None and time.monotonic() < deadline:
            seen_applications |= {app["name"] for app in cluster.status()["applications"] if app["cores"] > 0}
            time.sleep(1)
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err or out
    assert "lakehouse" in seen_applications

    reconcile = cluster.command("reconcile", **on_cluster)
    assert reconcile.returncode == 0, reconcile.stderr
    gold = DeltaTable(str(user_spend_table(settings).path(settings))).to_pyarrow_table().to_pylist()
    measured = {(row["user_id"], row["window_start"]): (row["total_amount"], row["event_count"]) for row in gold}
    expected = {
        (user, start.replace(tzinfo=None)): totals
        for (user, start), totals in window_totals(landing_lines(settings.landing_dir)).items()
    }
    assert {(u, s.replace(tzinfo=None)): v for (u, s), v in measured.items()} == expected
    # The executors ran on the workers: each worker's scratch holds the application's executor folder.
    executor_dirs = list((cluster.home / "cluster" / "work").glob("worker-*/app-*/*"))
    assert len({path.parts[-3] for path in executor_dirs}) == 2, executor_dirs
