"""The Dagster instance's ``dagster.yaml``, written from the settings by ``make ui`` (``scripts/ui.sh``).

Concurrency pools let one run at a time write each layer: each layer's assets and ops name a pool
(``lakehouse_bronze``, ``lakehouse_gold``, ``lakehouse_derived``, ...), and a limit of one per pool means two
runs never write the same table at once (the CLI takes the same locks).

Storage is SQLite under ``DAGSTER_HOME`` by default (one host), or PostgreSQL with
``LAKEHOUSE_DAGSTER_STORAGE=postgres``: runs, event logs and schedules then live in one database the webserver,
the daemon and the runs reach from any host. The file names the password's variable (``env:``), never its value.

``python -m orchestration.instance DAGSTER_HOME`` writes the file and creates the storage; bad settings, or a
PostgreSQL that does not answer or refuses the user, stop it with one line and exit code 1.
"""

import sys
from pathlib import Path
from typing import Any

import yaml

from warehouse.setting_groups import DAGSTER_PG_PASSWORD_VARIABLE
from warehouse.settings import Settings, SettingsError

#: How often the daemon looks for runs whose process died (Dagster's default is two minutes).
RUN_MONITORING_POLL_SECONDS = 15


def instance_config(settings: Settings) -> dict[str, Any]:
    """The instance's configuration as ``dagster.yaml`` holds it."""
    config: dict[str, Any] = {
        "telemetry": {"enabled": False},
        "concurrency": {"pools": {"default_limit": 1}, "runs": {"max_concurrent_runs": 4}},
        "run_retries": {"enabled": True, "max_retries": 0},
        # A run whose process was killed is marked failed within a poll (freeing its pools' slots) and, for a
        # job with retries, launched again; Dagster's own launcher cannot see a dead process (launcher.py).
        "run_launcher": {"module": "orchestration.launcher", "class": "LakehouseRunLauncher"},
        "run_monitoring": {
            "enabled": True,
            "poll_interval_seconds": RUN_MONITORING_POLL_SECONDS,
            "max_resume_run_attempts": 0,
            # A run's process imports Spark and the code location before it reports STARTED; on two busy
            # cores that has taken minutes, and Dagster's 180 s would fail healthy runs.
            "start_timeout_seconds": 600,
            "free_slots_after_run_end_seconds": 15,
        },
    }
    dagster = settings.dagster
    if dagster.storage == "postgres":
        config["storage"] = {
            "postgres": {
                "postgres_db": {
                    "hostname": dagster.pg_host,
                    "port": dagster.pg_port,
                    "db_name": dagster.pg_database,
                    "username": dagster.pg_user,
                    "password": {"env": DAGSTER_PG_PASSWORD_VARIABLE},
                    # SQLAlchemy 2.1 takes a bare "postgresql" to mean psycopg 3; dagster-postgres brings psycopg2.
                    "scheme": "postgresql+psycopg2",
                }
            }
        }
    return config


def write_instance_yaml(settings: Settings, dagster_home: Path) -> Path:
    """Write ``dagster_home/dagster.yaml``; with PostgreSQL storage, first check the database answers."""
    if settings.dagster.storage == "postgres":
        from devtools.postgres import check_reachable, password_from_env

        check_reachable(settings, password_from_env())
    dagster_home.mkdir(parents=True, exist_ok=True)
    path = dagster_home / "dagster.yaml"
    path.write_text(yaml.safe_dump(instance_config(settings), sort_keys=False))
    return path


def create_storage(dagster_home: Path) -> None:
    """Create the instance's storage (its databases and their schema version) once, before any service starts.

    A webserver and a daemon started together on a new instance each find no tables and both create them;
    one of them dies ("table alembic_version already exists"), as a chaos run's webserver did."""
    from dagster import DagsterInstance

    DagsterInstance.from_config(str(dagster_home)).dispose()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m orchestration.instance DAGSTER_HOME\n")
        return 2
    try:
        write_instance_yaml(Settings.from_env(), Path(argv[0]))
        create_storage(Path(argv[0]))
    except (SettingsError, RuntimeError, OSError) as error:
        sys.stderr.write(f"lakehouse: {' '.join(str(error).split())}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
