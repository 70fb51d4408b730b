"""A local Spark standalone cluster: a master and its workers on 127.0.0.1, from pyspark's own classes.

``lakehouse cluster up | down | status``. The master and each worker are JVMs started with the pyspark
distribution's ``bin/spark-class`` (``org.apache.spark.deploy.master.Master`` and ``…worker.Worker``), so
nothing is fetched beyond what the set-up installed. Pids, logs and the workers' scratch (executors' files
and logs) live under ``LAKEHOUSE_HOME/cluster``; the master listens on ``LAKEHOUSE_CLUSTER_PORT`` (7077)
and shows its UI on ``LAKEHOUSE_CLUSTER_UI_PORT`` (8080), both on 127.0.0.1 only. The daemons outlive the
command that started them; ``down`` stops them with SIGTERM. A run uses the cluster when
``LAKEHOUSE_SPARK_MASTER=spark://127.0.0.1:7077`` (``ClusterSettings.master_url``).

The workers share this machine's disk, so the home's tables, checkpoints and landing zone are where every
executor looks for them; on several hosts they would need storage all of them reach.
"""

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyspark

from devtools.daemons import answers, live_pid, running, stop_process
from warehouse.settings import Settings

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_HOST = "127.0.0.1"


class ClusterError(RuntimeError):
    """The cluster could not be started or asked; the message is one line."""


def spark_home() -> Path:
    """The pyspark distribution: its ``bin/spark-class`` and ``jars/`` are a Spark installation."""
    return Path(pyspark.__file__).resolve().parent


def _pid_files(settings: Settings) -> dict[str, Path]:
    root = settings.cluster_dir
    files = {"master": root / "master.pid"}
    files.update({f"worker-{n}": root / f"worker-{n}.pid" for n in range(1, settings.cluster.workers + 1)})
    return files


def _pids(settings: Settings) -> dict[str, int | None]:
    """Each daemon of this home's cluster and its pid when it runs."""
    # The command line names the class and this home's port or work folder, from the launcher's shell on.
    master = (MASTER_CLASS, f"--port\0{settings.cluster.port}\0")
    return {
        name: live_pid(pid_file, *master)
        if name == "master"
        else live_pid(pid_file, WORKER_CLASS, f"{_work(settings, name)}\0")
        for name, pid_file in _pid_files(settings).items()
    }


def _work(settings: Settings, worker: str) -> Path:
    return settings.cluster_dir / "work" / worker


def _started(settings: Settings) -> list[int]:
    """The pids this home's pid files name, whatever those processes run now (a daemon just started is
    still its launcher's shell, or not even that, for a moment)."""
    pids = []
    for pid_file in _pid_files(settings).values():
        try:
            pids.append(int(pid_file.read_text().strip()))
        except (FileNotFoundError, ValueError):
            continue
    return pids


def _environment(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        # Spark's daemons, their web UIs and the executors they launch bind here.
        SPARK_LOCAL_IP=_HOST,
        SPARK_LOG_DIR=str(settings.cluster_dir / "logs"),
        SPARK_WORKER_DIR=str(settings.cluster_dir / "work"),
        # No REST submission server: it takes a fixed port (6066) and accepts jobs without authentication.
        SPARK_MASTER_OPTS=f"{os.environ.get('SPARK_MASTER_OPTS', '')} -Dspark.master.rest.enabled=false".strip(),
    )
    return env


def _start(settings: Settings, name: str, arguments: list[str]) -> None:
    logs = settings.cluster_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = [str(spark_home() / "bin" / "spark-class"), *arguments]
    with (logs / f"{name}.out").open("ab") as out:
        # Its own session: the daemon outlives this command and ignores the terminal's Ctrl-C.
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=_environment(settings),
            start_new_session=True,
        )
    _pid_files(settings)[name].write_text(f"{process.pid}\n")


def master_state(settings: Settings, timeout: float = 2.0) -> dict | None:
    """The master's own report (its UI's ``/json/``: workers, cores, memory, applications), or None."""
    try:
        with urllib.request.urlopen(f"http://{_HOST}:{settings.cluster.ui_port}/json/", timeout=timeout) as answer:
            return json.load(answer)
    except (OSError, ValueError):
        return None


def _await(settings: Settings, what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + settings.cluster.start_timeout_seconds
    while not ready():
        if not any(running(pid) for pid in _started(settings)):
            raise ClusterError(f"the cluster exited while starting; see {settings.cluster_dir / 'logs'}")
        if time.monotonic() > deadline:
            raise ClusterError(
                f"{what} within {settings.cluster.start_timeout_seconds} s "
                f"(LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS); see {settings.cluster_dir / 'logs'}"
            )
        time.sleep(0.5)


def _alive_workers(settings: Settings) -> int:
    state = master_state(settings)
    return 0 if state is None else sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")


def up(settings: Settings) -> bool:
    """Start the master and the workers that do not run, and wait until the master counts every worker
    alive. Returns whether anything was started now (False: the whole cluster was already up)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ClusterError("the Spark cluster needs Java 17, and neither 'java' on PATH nor JAVA_HOME is set")
    cluster = settings.cluster
    pids = _pids(settings)
    if all(pids.values()):
        _await(
            settings, "the master did not count every worker alive", lambda: _alive_workers(settings) >= cluster.workers
        )
        return False
    settings.cluster_dir.mkdir(parents=True, exist_ok=True)
    if pids["master"] is None:
        for port, variable in (
            (cluster.port, "LAKEHOUSE_CLUSTER_PORT"),
            (cluster.ui_port, "LAKEHOUSE_CLUSTER_UI_PORT"),
        ):
            if answers(_HOST, port):
                raise ClusterError(f"{_HOST}:{port} is already taken by another process; stop it or set {variable}")
        _start(
            settings, "master",
            [MASTER_CLASS, "--host", _HOST, "--port", str(cluster.port), "--webui-port", str(cluster.ui_port)],
        )  # fmt: skip
        _await(
            settings,
            f"the Spark master did not answer on {_HOST}:{cluster.port}",
            lambda: master_state(settings) is not None,
        )
    for n in range(1, cluster.workers + 1):
        if pids[f"worker-{n}"] is None:
            work = _work(settings, f"worker-{n}")
            work.mkdir(parents=True, exist_ok=True)
            _start(
                settings, f"worker-{n}",
                [WORKER_CLASS, "--host", _HOST, "--cores", str(cluster.worker_cores), "--memory", cluster.worker_memory,
                 "--work-dir", str(work), "--webui-port", "0", cluster.master_url],
            )  # fmt: skip
    try:
        _await(
            settings,
            f"the master did not count {cluster.workers} workers alive",
            lambda: _alive_workers(settings) >= cluster.workers,
        )
    except ClusterError:
        down(settings)  # not left half-started
        raise
    return True


def down(settings: Settings) -> bool:
    """Stop the workers (their executors with them), then the master; False when nothing was running."""
    pids = _pids(settings)
    order = sorted(pids, key=lambda name: name == "master")
    for name in order:
        if pids[name] is not None:
            stop_process(pids[name])
        _pid_files(settings)[name].unlink(missing_ok=True)
    return any(pids.values())


def status(settings: Settings) -> dict:
    """Which daemons run (pids), the master's URL and UI, and what the master reports of its workers and
    applications; ``running`` is whether the master answers."""
    state = master_state(settings)
    workers = [] if state is None else state.get("workers", [])
    return {
        "running": state is not None,
        "master_url": settings.cluster.master_url,
        "ui": f"http://{_HOST}:{settings.cluster.ui_port}",
        "pids": _pids(settings),
        "workers": [
            {key: worker.get(key) for key in ("id", "state", "cores", "coresused", "memory", "memoryused")}
            for worker in workers
        ],
        "applications": [
            {key: app.get(key) for key in ("id", "name", "cores", "state")}
            for app in (state or {}).get("activeapps", [])
        ],
        "logs": str(settings.cluster_dir / "logs"),
    }
