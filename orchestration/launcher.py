"""The run launcher: Dagster's default one (each run a process of the code location's server), plus the one
thing run monitoring needs from it, whether a started run's process is still alive.

Dagster's ``DefaultRunLauncher`` cannot tell: a run whose process was killed (SIGKILL, the OOM killer, a host
reboot) stays ``STARTED`` for ever, and keeps its slots of the concurrency pools, so every later run that
writes the same layer queues behind it for ever. With this launcher and ``run_monitoring`` on
(``orchestration/instance.py``), the daemon finds such a run within a poll, marks it failed (which frees its
slots), and the job's ``dagster/max_retries`` launches it again.

The run's process announces its pid in the run's first engine event (``Started process for run (pid: N).``,
metadata ``pid``); the launcher records its host as a run tag when it launches the run. The process is alive
when that host is this one and a process with that pid started no later than the event (a reused pid started
after it). A run launched from another host, or whose pid is not known yet, counts as alive: only the host
that runs a process can say it is gone.
"""

import os
import socket
from typing import Any

from dagster import DagsterEventType, DagsterInstance, DagsterRun, DefaultRunLauncher
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus

#: The run tag naming the host the run's process was started on.
HOST_TAG = "lakehouse/launch_host"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_started_at(pid: int) -> float | None:
    """When the process ``pid`` started (seconds since the epoch), or None when there is no such process."""
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 (a one-shot read of a proc file)
        with open("/proc/stat") as boot_file:
            boot = next(int(line.split()[1]) for line in boot_file if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    # Field 22 (starttime, clock ticks after boot); the command name before it may hold spaces.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None  # a zombie has finished
    return boot + int(fields[19]) / _CLOCK_TICKS


def worker_status(host: str | None, pid: int | None, announced_at: float | None) -> WorkerStatus:
    """Whether a run's process (on ``host``, pid ``pid`` announced at ``announced_at``) still runs here."""
    if host != socket.gethostname() or pid is None or announced_at is None:
        return WorkerStatus.RUNNING
    started = process_started_at(pid)
    # /proc's start time is in clock ticks after a boot time in whole seconds: a second of slack.
    return WorkerStatus.RUNNING if started is not None and started <= announced_at + 1 else WorkerStatus.NOT_FOUND


def _announced_pid(instance: DagsterInstance, run_id: str) -> tuple[int | None, float | None]:
    """The pid the run's process announced in its engine events, and when (None, None before it has)."""
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        metadata: dict[str, Any] = getattr(event.event_specific_data, "metadata", None) or {}
        if "pid" in metadata:
            return int(metadata["pid"].value), entry.timestamp
    return None, None


class LakehouseRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` that records each run's host and tells run monitoring when its process died."""

    def launch_run(self, context: LaunchRunContext) -> None:
        self._instance.add_run_tags(context.dagster_run.run_id, {HOST_TAG: socket.gethostname()})
        super().launch_run(context)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        pid, announced_at = _announced_pid(self._instance, run.run_id)
        status = worker_status(run.tags.get(HOST_TAG), pid, announced_at)
        if status == WorkerStatus.NOT_FOUND:
            return CheckRunHealthResult(status, f"the run's process (pid {pid}) is gone (killed or crashed)")
        return CheckRunHealthResult(status)
