"""The run launcher: Dagster's default one (each run a process of the code location's server), plus the one
thing run monitoring needs from it, whether a started run's process is still alive.

Dagster's ``DefaultRunLauncher`` cannot tell: a run whose process was killed (SIGKILL, the OOM killer, a host
reboot) stays ``STARTED`` for ever, and keeps its slots of the concurrency pools, so every later run that
writes the same layer queues behind it for ever. With this launcher and ``run_monitoring`` on
(``orchestration/instance.py``), the daemon finds such a run within a poll, marks it failed (which frees its
slots), and the job's ``dagster/max_retries`` launches it again.

The run's process announces its pid in the run's first engine event (``Started process for run (pid: N).``,
metadata ``pid``); the launcher records its host as a run tag when it launches the run. The process is gone
when that host is this one and no live Python process has that pid. (A reused pid is not told apart by its
start time: a virtual machine restored from a snapshot moves the boot time, and a healthy run must never be
failed; a dead run whose pid another Python process took is the rarer miss.) A run launched from another
host, or whose pid is not known yet, counts as alive: only the host that runs a process can say it is gone.

Run monitoring asks the launcher only about started runs; a run still starting is judged by its start
timeout alone. ``dead_run_sensor`` (this module's definitions) applies the same test to starting runs.
"""

import socket
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, DefaultRunLauncher
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus

from warehouse.settings import Settings

#: The run tag naming the host the run's process was started on.
HOST_TAG = "lakehouse/launch_host"


def process_runs(pid: int) -> bool:
    """Whether a live Python process has the pid (not a zombie: a finished process its parent has not reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # The state follows the command name, which may hold spaces and parentheses.
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and b"python" in command


def worker_status(host: str | None, pid: int | None) -> WorkerStatus:
    """Whether a run's process (on ``host``, pid ``pid``) still runs here."""
    if host != socket.gethostname() or pid is None:
        return WorkerStatus.RUNNING
    return WorkerStatus.RUNNING if process_runs(pid) else WorkerStatus.NOT_FOUND


def _announced_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The pid the run's process announced in its engine events (None before it has)."""
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        metadata: dict[str, Any] = getattr(event.event_specific_data, "metadata", None) or {}
        if "pid" in metadata:
            return int(metadata["pid"].value)
    return None


class LakehouseRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` that records each run's host and tells run monitoring when its process died."""

    def launch_run(self, context: LaunchRunContext) -> None:
        self._instance.add_run_tags(context.dagster_run.run_id, {HOST_TAG: socket.gethostname()})
        super().launch_run(context)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid = _announced_pid(self._instance, run.run_id)
        status = worker_status(run.tags.get(HOST_TAG), pid)
        if status == WorkerStatus.NOT_FOUND:
            return CheckRunHealthResult(status, f"the run's process (pid {pid}) is gone (killed or crashed)")
        return CheckRunHealthResult(status)


def dead_starting_runs(instance: DagsterInstance) -> list[tuple[DagsterRun, int]]:
    """Runs still ``STARTING`` whose process announced its pid on this host and is gone.

    Run monitoring judges a ``STARTING`` run by its start timeout alone (600 s here: a healthy run's process
    can take minutes to import the code location on two busy cores). But a run's process announces its pid
    before that import, so one that died there (its daemon's process group killed, the OOM killer) is known
    dead at once; left to the timeout it would hold its concurrency slots, and every run behind them, for
    ten minutes."""
    records = instance.get_run_records(filters=dg.RunsFilter(statuses=[DagsterRunStatus.STARTING]))
    dead = []
    for record in records:
        run = record.dagster_run
        pid = _announced_pid(instance, run.run_id)
        if pid is not None and worker_status(run.tags.get(HOST_TAG), pid) == WorkerStatus.NOT_FOUND:
            dead.append((run, pid))
    return dead


def build_defs(settings: Settings) -> dg.Definitions:
    """``dead_run_sensor``: fails the ``STARTING`` runs whose process is gone (on by default)."""

    @dg.sensor(
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="A STARTING run whose process died (pid gone on this host) is marked failed at once.",
    )
    def dead_run_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        failed = []
        for run, pid in dead_starting_runs(context.instance):
            current = context.instance.get_run_by_id(run.run_id)
            if current is None or current.status != DagsterRunStatus.STARTING:
                continue  # it moved on meanwhile: its process was alive then
            context.instance.report_run_failed(
                current, f"the run's process (pid {pid}) is gone (killed or crashed) before the run started"
            )
            failed.append(run.run_id[:8])
        return dg.SkipReason(f"failed {', '.join(failed)}" if failed else "no starting run has lost its process")

    return dg.Definitions(sensors=[dead_run_sensor])
