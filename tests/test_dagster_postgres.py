"""Dagster beyond one host: the instance on a real PostgreSQL (``lakehouse postgres up``, Debian's server on
127.0.0.1), its runs on the Spark standalone cluster (``lakehouse cluster up``), both reached only through the
settings. The sensors fire, their runs succeed, and everything the instance keeps is in the database."""

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from tests.sensor_flow import LANDING_SENSOR, LATE_DATA_SENSOR, RECONCILE_JOB, STREAMS_JOB, hands_free_loop
from tests.servers import Commands, cluster_settings, files_holding, listening_tree
from tests.ui_harness import REPO, DagsterUI, free_port

# On the cluster test's xdist worker: two clusters at once on two cores starved both (551 s here instead of 230).
pytestmark = [pytest.mark.system, pytest.mark.ui, pytest.mark.xdist_group("cluster")]


class Servers(Commands):
    """A PostgreSQL and a two-worker cluster of one core each, their files under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.password = secrets.token_urlsafe(18)
        super().__init__(
            {
                "LAKEHOUSE_HOME": str(workdir / "servers"),
                # Started by root, the server runs as `postgres`: a folder that user reaches.
                "LAKEHOUSE_DAGSTER_PG_DIR": str(workdir / "postgres"),
                "LAKEHOUSE_DAGSTER_PG_PORT": str(free_port()),
                "LAKEHOUSE_DAGSTER_PG_PASSWORD": self.password,
                **cluster_settings(),
            }
        )

    def query(self, sql: str) -> list[tuple]:
        connection = psycopg2.connect(
            host="127.0.0.1",
            port=int(self.env["LAKEHOUSE_DAGSTER_PG_PORT"]),
            user="dagster",
            password=self.password,
            dbname="dagster",
        )
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return cursor.fetchall()
        finally:
            connection.close()

    def cluster_state(self) -> dict:
        url = f"http://127.0.0.1:{self.env['LAKEHOUSE_CLUSTER_UI_PORT']}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    # Not pytest's tmp_path: its folders are closed to other users, and the server runs as `postgres`.
    workdir = Path(tempfile.mkdtemp(prefix="lakehouse-pg-test-"))
    workdir.chmod(0o755)
    started = Servers(workdir)
    try:
        result = started.command("postgres", "up")
        assert result.returncode == 0, result.stderr
        assert started.password not in result.stdout + result.stderr
        result = started.command("cluster", "up", timeout=180)
        assert result.returncode == 0, result.stderr
        yield started
    finally:
        stopped = [started.command("cluster", "down", timeout=120), started.command("postgres", "down", timeout=120)]
        shutil.rmtree(workdir, ignore_errors=True)
        for result in stopped:
            assert result.returncode == 0, result.stderr


def test_postgres_up_is_loopback_only_and_idempotent(servers: Servers) -> None:
    again = servers.command("postgres", "up")
    assert again.returncode == 0 and "already running" in again.stdout, again.stderr
    status = json.loads(servers.command("postgres", "status", "--json").stdout)
    assert status["running"] and status["address"] == f"127.0.0.1:{servers.env['LAKEHOUSE_DAGSTER_PG_PORT']}"
    assert servers.password not in json.dumps(status)
    assert servers.query("SHOW listen_addresses") == [("127.0.0.1",)]
    assert servers.query("SHOW unix_socket_directories") == [("",)]
    # Every connection needs the password (SCRAM), from any address.
    hba = servers.query("SELECT DISTINCT auth_method FROM pg_hba_file_rules")
    assert hba == [("scram-sha-256",)], hba


def test_a_wrong_password_is_one_line_and_the_ui_does_not_start(servers: Servers, tmp_path: Path) -> None:
    env = {
        **os.environ,
        **servers.env,
        "LAKEHOUSE_DAGSTER_STORAGE": "postgres",
        "LAKEHOUSE_DAGSTER_PG_PASSWORD": "not-the-password",
        "LAKEHOUSE_HOME": str(tmp_path / "home"),
        "DAGSTER_HOME": str(tmp_path / "dagster"),
        "DAGSTER_PORT": str(free_port()),
    }
    result = subprocess.run(["bash", "scripts/ui.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakehouse: PostgreSQL at 127.0.0.1:") and "refused user dagster" in lines[0]
    assert "password authentication failed" in lines[0] and "not-the-password" not in lines[0]


@pytest.mark.timeout(1800)  # three runs on the cluster, each up to RUN_TIMEOUT
def test_sensors_fire_and_their_runs_succeed_with_the_instance_on_postgres_and_runs_on_the_cluster(
    servers: Servers,
) -> None:
    workdir = servers.workdir / "ui"
    env = {
        **{name: value for name, value in servers.env.items() if name != "LAKEHOUSE_HOME"},  # the UI's own home
        "LAKEHOUSE_DAGSTER_STORAGE": "postgres",
        "LAKEHOUSE_SPARK_MASTER": servers.master,
        "LAKEHOUSE_SPARK_CORES_MAX": "2",
    }
    finished_before = len(servers.cluster_state().get("completedapps", []))
    with DagsterUI.start(workdir, env=env) as ui:
        loop = hands_free_loop(ui, workdir / "home")
        run_ids = {loop.first["runId"], loop.second["runId"], loop.reconcile["runId"]}

        # The runs, their event logs and the sensors' ticks are rows in PostgreSQL.
        runs = dict(servers.query("SELECT run_id, status FROM runs"))
        assert {run_id: runs.get(run_id) for run_id in run_ids} == dict.fromkeys(run_ids, "SUCCESS"), runs
        events = servers.query("SELECT run_id, count(*) FROM event_logs GROUP BY run_id")
        assert run_ids <= {run_id for run_id, count in events if count > 10}, events
        # Each run was requested by a tick of its sensor, stored there (Dagster's serialized tick: job_name, run_ids).
        ticks = [json.loads(body) for (body,) in servers.query("SELECT tick_body FROM job_ticks")]
        requested = {run_id: tick["job_name"] for tick in ticks for run_id in tick.get("run_ids", [])}
        assert {run_id: requested.get(run_id) for run_id in run_ids} == {
            loop.first["runId"]: LANDING_SENSOR,
            loop.second["runId"]: LANDING_SENSOR,
            loop.reconcile["runId"]: LATE_DATA_SENSOR,
        }, requested
        jobs = {job for (job,) in servers.query("SELECT DISTINCT pipeline_name FROM runs")}
        assert {STREAMS_JOB, RECONCILE_JOB} <= jobs, jobs
        # The webserver, the daemon and the code server they start listen on loopback only.
        opened = listening_tree(ui.process.pid)
        assert opened and {host for host, _ in opened} == {"127.0.0.1"}, opened

    # The password is nowhere: not in a row of any of the instance's tables (runs and their config, event
    # logs, ticks), nor in any file of the run (DAGSTER_HOME, logs, compute logs, the home, the cluster's
    # logs and executors' output, PostgreSQL's own data files).
    tables = [name for (name,) in servers.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    assert {"runs", "event_logs", "job_ticks"} <= set(tables), tables
    found = "SELECT count(*) FROM {} r WHERE strpos(r::text, '{}') > 0"
    holding = [t for t in tables if servers.query(found.format(t, servers.password))[0][0]]
    assert holding == [], f"the password is stored in {holding}"
    assert files_holding(servers.workdir, servers.password) == []
    # Nothing of the instance's state went to SQLite files under DAGSTER_HOME.
    sqlite_files = sorted(str(p.relative_to(workdir)) for p in (workdir / "dagster").rglob("*.db"))
    assert sqlite_files == [], sqlite_files
    # Each run's Spark application ran on the cluster (and finished there).
    finished = servers.cluster_state().get("completedapps", [])[finished_before:]
    assert len(finished) >= 3, finished
    assert {app["name"] for app in finished} == {"lakehouse"} and {app["state"] for app in finished} == {"FINISHED"}
