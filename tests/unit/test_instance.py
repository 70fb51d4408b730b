"""The Dagster instance's dagster.yaml as `make ui` writes it: SQLite by default, PostgreSQL when asked, the
password only ever named by its variable."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.instance.config import dagster_instance_config
from dagster._core.launcher import WorkerStatus

from orchestration.instance import instance_config, main, write_instance_yaml
from orchestration.launcher import LakehouseRunLauncher, worker_status
from warehouse.settings import Settings

POSTGRES = {
    "LAKEHOUSE_DAGSTER_STORAGE": "postgres",
    "LAKEHOUSE_DAGSTER_PG_HOST": "db.internal",
    "LAKEHOUSE_DAGSTER_PG_PORT": "6432",
    "LAKEHOUSE_DAGSTER_PG_PASSWORD": "s3cret-value",
}


def test_the_default_keeps_sqlite_under_dagster_home(tmp_path: Path) -> None:
    path = write_instance_yaml(Settings.from_env({}), tmp_path)
    config = yaml.safe_load(path.read_text())
    assert "storage" not in config  # Dagster's default: SQLite files under DAGSTER_HOME
    assert config["concurrency"]["pools"]["default_limit"] == 1
    assert config["telemetry"] == {"enabled": False}


def test_postgres_storage_names_the_password_variable_never_its_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POSTGRES.items():
        monkeypatch.setenv(name, value)
    config = instance_config(Settings.from_env(POSTGRES))
    database = config["storage"]["postgres"]["postgres_db"]
    assert database == {
        "hostname": "db.internal",
        "port": 6432,
        "db_name": "dagster",
        "username": "dagster",
        "password": {"env": "LAKEHOUSE_DAGSTER_PG_PASSWORD"},
        "scheme": "postgresql+psycopg2",
    }
    assert "s3cret-value" not in yaml.safe_dump(config)
    # Dagster's own schema accepts the file (it raises on a field it does not know or a wrong type).
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    checked, _ = dagster_instance_config(str(tmp_path))
    assert checked["storage"] == config["storage"]


def test_the_command_writes_the_file_and_creates_the_storage_before_any_service_starts(tmp_path: Path) -> None:
    """A webserver and a daemon started together then find the databases made (they would race to make them)."""
    assert main([str(tmp_path)]) == 0
    made = {path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.db")}
    assert made == {"history/runs.db", "history/runs/index.db", "schedules/schedules.db"}


def test_a_server_that_does_not_answer_stops_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in {**POSTGRES, "LAKEHOUSE_DAGSTER_PG_HOST": "127.0.0.1", "LAKEHOUSE_DAGSTER_PG_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    assert main([str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert error.startswith("lakehouse: no PostgreSQL answers at 127.0.0.1:1 (LAKEHOUSE_DAGSTER_PG_HOST")
    assert error.count("\n") == 1 and "s3cret-value" not in error
    assert not (tmp_path / "dagster.yaml").exists()


def test_the_instance_loads_the_launcher_that_tells_run_monitoring_a_dead_run_process(tmp_path: Path) -> None:
    write_instance_yaml(Settings.from_env({}), tmp_path)
    instance = DagsterInstance.from_config(str(tmp_path))
    try:
        assert isinstance(instance.run_launcher, LakehouseRunLauncher)
        assert instance.run_monitoring_enabled
        assert instance.run_launcher.supports_check_run_worker_health
        here = socket.gethostname()
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"], stdout=subprocess.PIPE
        )
        try:
            # A run announces its pid once it runs; before its exec is done, /proc shows no command line.
            assert child.stdout is not None and child.stdout.readline() == b"up\n"
            assert worker_status(here, child.pid) == WorkerStatus.RUNNING
            child.kill()
            # Killed and not reaped yet: a zombie, which is no run.
            deadline = time.monotonic() + 10
            while worker_status(here, child.pid) == WorkerStatus.RUNNING and time.monotonic() < deadline:
                time.sleep(0.05)
            assert worker_status(here, child.pid) == WorkerStatus.NOT_FOUND
            child.wait()
            assert worker_status(here, child.pid) == WorkerStatus.NOT_FOUND
        finally:
            child.kill()
        # Another host's run, or a run that has not announced its pid yet, is left alone.
        assert worker_status("elsewhere", child.pid) == WorkerStatus.RUNNING
        assert worker_status(here, None) == WorkerStatus.RUNNING
    finally:
        instance.dispose()
