"""A continuous run's followers in a process of their own, at a lower CPU priority than the critical path.

``run --continuous`` is two processes: the critical path (the source stream's query, carrying each landed
line to the tumbling table, and the idle advance) in the process the user started, and the followers
(fraud alerts, the derived windows, the join, distinct URLs) in a child it starts, with a Spark driver of its
own and ``LAKEHOUSE_FOLLOWERS_NICENESS`` added to its niceness. On shared cores the kernel then gives the
critical path the CPU it asks for and the followers what is left, which one process could not: its Spark
jobs share one JVM and one Python interpreter lock, and the scheduler pools order tasks, not the driver's
own work between them. Not a session of its own: with the kernel's autogroups, niceness only counts
between processes of one session.

Nothing about the tables changes: each follower is still a query with its own checkpoint, writing exactly
once per batch; the child holds the followers' stream locks, the parent the critical path's. The child dies
with its parent (``PR_SET_PDEATHSIG``: a SIGKILL of the run kills it too, as it would a thread), stops
cleanly on SIGTERM or SIGINT, and tells the parent its figures (one JSON line per cycle that ran batches) and
any failure (one line) over a pipe; its own output goes to ``logs/followers.log``.
"""

import contextlib
import ctypes
import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial

from pyspark.sql import SparkSession

from runtime.faults import retry_slow_start
from runtime.progress import StageReport, recorder_for
from runtime.runner import CONTINUOUS_RUN, FollowerJob, drain_stage, has_new_input
from runtime.stages import FRAUD_STAGE, Stage, stages
from warehouse.locks import hold_all
from warehouse.session import spark_session
from warehouse.settings import Settings

_PR_SET_PDEATHSIG = 1


def follow(
    spark: SparkSession,
    settings: Settings,
    source: str,
    stop: threading.Event,
    run_id: str | None = None,
    on_change: Callable[[dict[str, StageReport]], None] | None = None,
) -> dict[str, StageReport]:
    """Run the followers in cycles until ``stop`` is set: each with new input runs its query over what is
    there (``availableNow``), fraud alerts first; a cycle that found nothing waits the trigger interval.

    A cycle, not queries that keep running: starved of CPU by the critical path, a follower's next batch
    simply takes more rows, where queries side by side would each pay their fixed cost per trigger
    (decision 44's figures)."""
    followers = stages(settings, source).followers
    reports = {stage.name: StageReport(stage.name) for stage in followers}
    recorder = recorder_for(spark, settings)
    if run_id is not None:
        recorder.run_id = run_id
    with hold_all(settings, [stage.name for stage in followers], purpose=CONTINUOUS_RUN):
        try:
            while not stop.is_set():
                started = time.monotonic()
                worked = False
                for stage in _turns(followers):
                    if stop.is_set():
                        break
                    if has_new_input(settings, stage):
                        worked = True
                        drain = partial(drain_stage, spark, settings, stage, reports[stage.name], stop)
                        retry_slow_start(drain, stage.name, stop.wait)
                if worked and on_change:
                    on_change(reports)
                recorder.flush_if_due()
                if not worked:
                    stop.wait(max(0.0, settings.streams.trigger_interval_seconds - (time.monotonic() - started)))
        finally:
            recorder.flush()
    return reports


def _turns(followers: Sequence[Stage]) -> list[Stage]:
    """A cycle's order: the first follower (fraud alerts, whose point is being early) again before each of
    the others, so a fraud alert waits for one other follower's batch at most, not for the whole cycle.
    A turn with nothing new costs a look at files, no Spark job."""
    if len(followers) < 2 or followers[0].name != FRAUD_STAGE:
        return list(followers)
    return [turn for other in followers[1:] for turn in (followers[0], other)]


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux), then make sure it has not already."""
    # Not Linux: no prctl; the pipe to the parent breaks instead, and the next report fails.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def main() -> None:
    """The child: ``python -m runtime.followers <parent pid> <report fd>``, its job pickled on stdin."""
    die_with_parent(int(sys.argv[1]))
    job: FollowerJob = pickle.load(sys.stdin.buffer)
    report = os.fdopen(int(sys.argv[2]), "w", encoding="utf-8", buffering=1)
    # Before the JVM starts, so its threads inherit the niceness too.
    os.nice(job.settings.streams.followers_niceness)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    def tell(reports: dict[str, StageReport]) -> None:
        shown = [{key: value for key, value in vars(item).items() if key != "listener"} for item in reports.values()]
        report.write(json.dumps({"reports": shown}) + "\n")

    try:
        spark = spark_session(job.settings)
        tell(follow(spark, job.settings, job.source, stop, job.run_id, tell))
    except BaseException as error:
        traceback.print_exc()
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        report.write(json.dumps({"error": f"{type(error).__name__}: {first}"}) + "\n")
        raise SystemExit(1) from error


if __name__ == "__main__":
    main()
