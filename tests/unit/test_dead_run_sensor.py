"""``dead_run_sensor``: a run still STARTING whose process announced its pid on this host and is gone is
failed at once (run monitoring alone would wait for its 600 s start timeout); a live process, a pid not
announced yet, another host's run, or a run that moved on are left alone. A real ephemeral Dagster instance
and real processes; no Spark."""

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import dagster as dg
import pytest
from dagster import DagsterRunStatus
from dagster._core.events import EngineEventData

from orchestration import definitions
from orchestration.launcher import HOST_TAG
from warehouse.settings import Settings

pytestmark = pytest.mark.unit


@dg.op
def _nothing() -> None:
    pass


@dg.job
def _job() -> None:
    _nothing()


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def _dead_pid() -> int:
    """The pid of a Python process that has ended (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _starting(instance: dg.DagsterInstance, pid: int | None, host: str | None = None) -> str:
    run = instance.create_run_for_job(
        job_def=_job, status=DagsterRunStatus.STARTING, tags={HOST_TAG: host or socket.gethostname()}
    )
    if pid is not None:
        instance.report_engine_event(f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid))
    return run.run_id


def _tick(instance: dg.DagsterInstance, tmp_path) -> str:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    sensor = definitions.build_defs(settings).resolve_sensor_def("dead_run_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.build_sensor_context(instance=instance) as context:
        result = sensor(context)
    return result.skip_message


def test_a_starting_run_whose_process_is_gone_is_failed_and_only_it(instance, tmp_path) -> None:
    dead = _starting(instance, _dead_pid())
    alive = _starting(instance, os.getpid())  # this test's own Python process
    unannounced = _starting(instance, None)
    elsewhere = _starting(instance, _dead_pid(), host="another-host")
    moved_on = _starting(instance, _dead_pid())
    instance.report_run_failed(instance.get_run_by_id(moved_on), "failed on its own")
    finished = instance.create_run_for_job(job_def=_job, status=DagsterRunStatus.SUCCESS)

    message = _tick(instance, tmp_path)

    status = {run_id: instance.get_run_by_id(run_id).status for run_id in (dead, alive, unannounced, elsewhere)}
    assert status == {
        dead: DagsterRunStatus.FAILURE,
        alive: DagsterRunStatus.STARTING,
        unannounced: DagsterRunStatus.STARTING,
        elsewhere: DagsterRunStatus.STARTING,
    }
    assert message == f"failed {dead[:8]}"
    assert instance.get_run_by_id(finished.run_id).status == DagsterRunStatus.SUCCESS
    failure = [
        entry.dagster_event.message
        for entry in instance.all_logs(dead)
        if entry.dagster_event and entry.dagster_event.event_type == dg.DagsterEventType.RUN_FAILURE
    ]
    assert len(failure) == 1 and "is gone" in failure[0]
    # The next tick finds nothing left to fail.
    assert _tick(instance, tmp_path) == "no starting run has lost its process"
