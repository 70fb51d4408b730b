"""A local PostgreSQL for Dagster's instance storage: Debian's server, on 127.0.0.1, its files under the home.

``lakehouse postgres up | down | status``. ``up`` creates a database cluster once (``initdb``, SCRAM passwords
on every connection, TCP on 127.0.0.1 only, no Unix socket), starts it on ``LAKEHOUSE_DAGSTER_PG_PORT``, and
creates ``LAKEHOUSE_DAGSTER_PG_DATABASE`` owned by ``LAKEHOUSE_DAGSTER_PG_USER``, whose password is
``LAKEHOUSE_DAGSTER_PG_PASSWORD`` (read from the environment, handed to ``initdb`` through a file that is
deleted at once, never printed). The server outlives the command; ``down`` stops it. Data and log live in
``LAKEHOUSE_DAGSTER_PG_DIR`` (default ``LAKEHOUSE_HOME/postgres``).

PostgreSQL refuses to run as root: started by root, the server runs as the ``postgres`` user Debian's package
creates, so its folder must be one that user can reach.
"""

import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

from devtools.daemons import answers
from warehouse.setting_groups import DAGSTER_PG_PASSWORD_VARIABLE
from warehouse.settings import REPO_ROOT, Settings

_HOST = "127.0.0.1"
START_SECONDS = 60


class PostgresError(RuntimeError):
    """The server could not be started, stopped or asked; the message is one line."""


def binaries() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, or Debian's newest ``/usr/lib/postgresql/<v>/bin``."""
    on_path = shutil.which("pg_ctl")
    if on_path and (Path(on_path).resolve().parent / "initdb").exists():
        return Path(on_path).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0
    )
    if not versions:
        raise PostgresError(
            "PostgreSQL's server is not installed (Debian: apt-get install postgresql; `lakehouse postgres up` "
            "and make test do it)"
        )
    return versions[-1].parent


def install_server() -> None:
    """Install Debian's PostgreSQL server when it is missing (``scripts/system-packages.sh``, which says so in
    one line): only ``up`` needs it, so only ``up`` installs it."""
    try:
        binaries()
        return
    except PostgresError:
        pass
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "system-packages.sh"), "postgresql"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        told = done.stderr.strip().splitlines()
        raise PostgresError(told[-1].removeprefix("setup: ") if told else "could not install PostgreSQL's server")


def _data(settings: Settings) -> Path:
    return settings.postgres_dir / "data"


def _as_server_user() -> list[str]:
    """The prefix that runs a server program as ``postgres`` when we are root (PostgreSQL refuses root)."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _run(command: list[str], what: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*_as_server_user(), *command], capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise PostgresError(f"{what} failed: {detail}")
    return done


def running(settings: Settings) -> bool:
    """Whether this home's server runs (``pg_ctl status`` on its data folder)."""
    if not (_data(settings) / "PG_VERSION").exists():
        return False
    done = subprocess.run(
        [*_as_server_user(), str(binaries() / "pg_ctl"), "status", "-D", str(_data(settings))],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done.returncode == 0


def _prepare_folder(settings: Settings) -> None:
    """Create the folder; as root, hand it to ``postgres`` and check that user can reach it."""
    folder = settings.postgres_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PostgresError(f"cannot create {folder} ({error.strerror}); set LAKEHOUSE_DAGSTER_PG_DIR") from None
    if os.geteuid() != 0:
        return
    try:
        server_user = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresError("run as root, the server needs the 'postgres' user Debian's package creates") from None
    os.chown(folder, server_user.pw_uid, server_user.pw_gid)
    folder.chmod(0o700)
    reach = subprocess.run([*_as_server_user(), "test", "-w", str(folder)], stdin=subprocess.DEVNULL, check=False)
    if reach.returncode != 0:
        raise PostgresError(
            f"run as root, the server runs as user 'postgres', which cannot reach {folder} (a parent folder is "
            "closed to other users); set LAKEHOUSE_DAGSTER_PG_DIR to a folder it can reach"
        )


def _initialise(settings: Settings, password: str) -> None:
    """``initdb`` once: the superuser is the Dagster user, every connection needs its SCRAM password, and the
    server listens on 127.0.0.1 only, without a Unix socket."""
    password_file = settings.postgres_dir / ".initdb-password"
    password_file.touch(mode=0o600)
    try:
        password_file.write_text(password + "\n")
        if os.geteuid() == 0:
            server_user = pwd.getpwnam("postgres")
            os.chown(password_file, server_user.pw_uid, server_user.pw_gid)
        _run(
            [str(binaries() / "initdb"), "-D", str(_data(settings)), "--username", settings.dagster.pg_user,
             "--pwfile", str(password_file), "--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C"],
            "initdb",
        )  # fmt: skip
    finally:
        password_file.unlink(missing_ok=True)
    with (_data(settings) / "postgresql.conf").open("a") as conf:
        conf.write("\n# lakehouse postgres: loopback TCP only\nlisten_addresses = '127.0.0.1'\n")
        conf.write("unix_socket_directories = ''\n")


def _connect(settings: Settings, password: str, database: str) -> Any:
    import psycopg2

    dagster = settings.dagster
    try:
        return psycopg2.connect(
            host=dagster.pg_host,
            port=dagster.pg_port,
            user=dagster.pg_user,
            password=password,
            dbname=database,
            connect_timeout=10,
        )
    except psycopg2.OperationalError as error:
        reason = " ".join(str(error).split())
        raise PostgresError(
            f"PostgreSQL at {dagster.pg_host}:{dagster.pg_port} refused user {dagster.pg_user}: {reason}"
        ) from None


def check_reachable(settings: Settings, password: str) -> None:
    """Connect to Dagster's database once: a server that does not answer, a wrong password or a missing
    database stops in one line naming the settings."""
    dagster = settings.dagster
    if not answers(dagster.pg_host, dagster.pg_port, timeout=3):
        raise PostgresError(
            f"no PostgreSQL answers at {dagster.pg_host}:{dagster.pg_port} "
            "(LAKEHOUSE_DAGSTER_PG_HOST, LAKEHOUSE_DAGSTER_PG_PORT; a local one: lakehouse postgres up)"
        )
    _connect(settings, password, dagster.pg_database).close()


def _create_database(settings: Settings, password: str) -> None:
    database = settings.dagster.pg_database
    connection = _connect(settings, password, "postgres")
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cursor.fetchone() is None:
                cursor.execute(f'CREATE DATABASE "{database}"')  # a checked identifier (IDENTIFIER)
    finally:
        connection.close()


def password_from_env() -> str:
    password = os.environ.get(DAGSTER_PG_PASSWORD_VARIABLE, "").strip()
    if not password:
        raise PostgresError(f"set {DAGSTER_PG_PASSWORD_VARIABLE}: the password the server gives the Dagster user")
    return password


def up(settings: Settings) -> bool:
    """Create the server once, start it and Dagster's database; False when it was already running."""
    password = password_from_env()
    dagster = settings.dagster
    if dagster.pg_host not in {_HOST, "localhost"}:
        raise PostgresError(
            f"lakehouse postgres starts a server on {_HOST}; LAKEHOUSE_DAGSTER_PG_HOST is {dagster.pg_host}"
        )
    if running(settings):
        check_reachable(settings, password)
        return False
    if answers(_HOST, dagster.pg_port):
        raise PostgresError(
            f"{_HOST}:{dagster.pg_port} is already taken by another process; stop it or set LAKEHOUSE_DAGSTER_PG_PORT"
        )
    install_server()
    _prepare_folder(settings)
    if not (_data(settings) / "PG_VERSION").exists():
        _initialise(settings, password)
    log = settings.postgres_dir / "postgres.log"
    _run(
        [str(binaries() / "pg_ctl"), "start", "-D", str(_data(settings)), "-l", str(log), "-w",
         "-t", str(START_SECONDS), "-o", f"-p {dagster.pg_port}"],
        f"starting PostgreSQL (see {log})",
    )  # fmt: skip
    _create_database(settings, password)
    return True


def down(settings: Settings) -> bool:
    """Stop the server (fast shutdown: open sessions are ended); False when none was running."""
    if not running(settings):
        return False
    _run([str(binaries() / "pg_ctl"), "stop", "-D", str(_data(settings)), "-m", "fast", "-w"], "stopping PostgreSQL")
    return True


def status(settings: Settings) -> dict:
    """Whether the server runs, where, and where its files are (no password)."""
    dagster = settings.dagster
    return {
        "running": running(settings),
        "answers": answers(dagster.pg_host, dagster.pg_port),
        "address": f"{dagster.pg_host}:{dagster.pg_port}",
        "database": dagster.pg_database,
        "user": dagster.pg_user,
        "folder": str(settings.postgres_dir),
    }
