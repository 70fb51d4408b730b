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

A run of several pipelines keeps this shape: the first pipeline's critical path in the parent, and every
other pipeline (its source stream, carrying its lines to its tumbling table, then its followers) in this
child's cycles, after the first's fraud alerts and before the first's other followers. Two JVMs, whatever
the number of pipelines.
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
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date
from functools import partial
from typing import Any

from pyspark.sql import SparkSession

from runtime.faults import retry_slow_start
from runtime.handover import Handler, answer, as_result, pending, serving
from runtime.pipelines import reconcile_all
from runtime.progress import IN_TURNS, INPUT_LEFT, Notices, StageReport, query_prefix, recorder_for
from runtime.runner import (
    CONTINUOUS_RUN,
    IDLE_ADVANCE,
    IDLE_CHECK_SECONDS,
    FollowerJob,
    advance_idle_watermark,
    broker_down,
    drain_stage,
    has_new_input,
)
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
    others: Sequence[tuple[Settings, str]] = (),
    handlers: Mapping[str, Handler] | None = None,
) -> dict[str, StageReport]:
    """Run the followers in cycles until ``stop`` is set: each with new input runs its query over what is
    there (``availableNow``), fraud alerts first; a cycle that found nothing waits the trigger interval.
    ``others`` are the run's other pipelines (settings view, source), tended here whole: each cycle starts
    with their source streams (carrying their lines to their tumbling tables, as the critical path does),
    and their followers come after this pipeline's. Between two turns it does the work handed to the run
    (``runtime.handover``): reconciles, and the kinds ``handlers`` add.

    A cycle, not queries that keep running: starved of CPU by the critical path, a follower's next batch
    simply takes more rows, where queries side by side would each pay their fixed cost per trigger
    (decision 44's figures). Another pipeline here rather than in a process of its own: one JVM beside
    the critical path, whatever the number of pipelines, takes from the first pipeline no more than its
    followers already did (decision 63's figures)."""
    tended = [Tended.of(settings, source, own=True), *(Tended.of(view, way, own=False) for view, way in others)]
    recorders = [recorder_for(spark, pipeline.settings) for pipeline in tended]
    for recorder in recorders:
        recorder.run_id = run_id or recorder.run_id
    reports: dict[str, StageReport] = {}
    for pipeline in tended:
        reports.update(pipeline.reports)
    notices = Notices(lambda line: print(line, flush=True))
    served = {"reconcile": reconcile_handed, **(handlers or {})}
    with ExitStack() as held:
        purpose = f"{CONTINUOUS_RUN}, {IN_TURNS}"
        for pipeline in tended:
            held.enter_context(hold_all(pipeline.settings, pipeline.lock_names, purpose=purpose))
        held.enter_context(serving(settings, [pipeline.settings.spec.name for pipeline in tended]))
        try:
            while not stop.is_set():
                started = time.monotonic()
                worked = False
                for pipeline, stage in _turns(tended):
                    if stop.is_set():
                        break
                    worked |= serve(spark, tended, served)
                    worked |= pipeline.turn(spark, stage, stop, notices)
                worked |= serve(spark, tended, served)
                for pipeline in tended[1:]:
                    worked |= pipeline.advance_idle(spark)
                if worked and on_change:
                    on_change(reports)
                for recorder in recorders:
                    recorder.flush_if_due()
                if not worked:
                    stop.wait(max(0.0, settings.streams.trigger_interval_seconds - (time.monotonic() - started)))
        finally:
            for pipeline in tended:
                pipeline.tell_what_is_left()
            for recorder in recorders:
                recorder.flush()
    return reports


@dataclass
class Tended:
    """One pipeline as the followers' process tends it: the streams it runs here and their reports (named as
    the user sees them: another pipeline's carry its name, ``readings:bronze_events``)."""

    settings: Settings
    #: Another pipeline's source stream (its critical path); None for the parent's own pipeline.
    source: Stage | None
    followers: tuple[Stage, ...]
    lock_names: list[str]
    reports: dict[str, StageReport]
    next_idle_check: float = 0.0

    @classmethod
    def of(cls, settings: Settings, source: str, own: bool) -> "Tended":
        pipeline = stages(settings, source)
        streams = pipeline.followers if own else tuple(pipeline)
        locks = [name for stage in streams for name in stage.lock_names(settings)]
        prefix = query_prefix(settings)
        reports = {prefix + stage.name: StageReport(prefix + stage.name) for stage in streams}
        return cls(settings, None if own else pipeline.source, pipeline.followers, locks, reports)

    def report(self, stage: Stage) -> StageReport:
        return self.reports[query_prefix(self.settings) + stage.name]

    def turn(self, spark: SparkSession, stage: Stage, stop: threading.Event, notices: Notices) -> bool:
        """Run the stage over what its source holds now; False when it holds nothing new. Another pipeline's
        Kafka source waits out a broker outage (told once each way), as the critical path's does."""
        kafka = stage is self.source and stage.source == "kafka"
        try:
            if not has_new_input(self.settings, stage):
                if kafka:
                    notices.broker(self.settings, None)
                return False
        except Exception as error:
            if not kafka:
                raise
            notices.broker(self.settings, error)
            return False
        drain = partial(drain_stage, spark, self.settings, stage, self.report(stage), stop)
        try:
            retry_slow_start(drain, self.report(stage).name, stop.wait)
        except Exception:
            # A batch cut off by a broker outage never committed: the next cycle re-runs it from its offsets.
            if not kafka or not broker_down(self.settings, stage, notices):
                raise
        return True

    def tell_what_is_left(self) -> None:
        """At the stop: mark each stream here whose input waits for the next run (``INPUT_LEFT``), so its
        report does not read as if there had been nothing to do."""
        for stage in (*([self.source] if self.source else []), *self.followers):
            with contextlib.suppress(Exception):  # a broker gone, a table moved: the report just says less
                if has_new_input(self.settings, stage):
                    self.report(stage).figures[INPUT_LEFT] = 1.0

    def advance_idle(self, spark: SparkSession) -> bool:
        """Another pipeline's idle-advancing watermark, looked at every ``IDLE_CHECK_SECONDS`` (the parent
        does its own pipeline's); its derived windows take the advance in the next cycle."""
        if self.source is None or time.monotonic() < self.next_idle_check:
            return False
        interval = max(self.settings.streams.trigger_interval_seconds, IDLE_CHECK_SECONDS)
        self.next_idle_check = time.monotonic() + interval
        idle = advance_idle_watermark(spark, self.settings, stage_locked=True, follow=False)
        if idle is None:
            return False
        name = query_prefix(self.settings) + IDLE_ADVANCE
        self.reports.setdefault(name, StageReport(name)).add(idle.figures, idle.seconds)
        return True


def _turns(tended: Sequence[Tended]) -> list[tuple[Tended, Stage]]:
    """A cycle's order: the streams whose point is being early (the other pipelines' source streams, their
    critical paths, and this one's fraud alerts) take a turn before each other follower, so they wait for one
    follower's batch at most, not for the whole cycle; the followers come in turn, this pipeline's first.
    A turn with nothing new costs a look at files, no Spark job."""
    own, others = tended[0], tended[1:]
    early = [(pipeline, pipeline.source) for pipeline in others if pipeline.source is not None]
    followers = list(own.followers)
    if followers and followers[0].name == FRAUD_STAGE:
        early.append((own, followers.pop(0)))
    rest = [(own, stage) for stage in followers] + [(p, stage) for p in others for stage in p.followers]
    if not rest:
        return early
    return [turn for other in rest for turn in (*early, other)]


def reconcile_handed(spark: SparkSession, views: list[Settings], request: dict[str, Any]) -> dict[str, Any]:
    """A reconcile handed to the run: of the named pipelines, the dates asked for (``lakehouse reconcile``)."""
    dates = [date.fromisoformat(day) for day in request.get("dates", ())]
    return as_result(reconcile_all(spark, views, dates, wait_seconds=float(request.get("wait", 0))))


def serve(spark: SparkSession, tended: Sequence[Tended], handlers: Mapping[str, Handler]) -> bool:
    """Do what was handed to this run (``runtime.handover``) in this process's warm JVM, each request with
    the handler of its kind. Whether there was anything."""
    requests = pending(tended[0].settings)
    for path, request in requests:
        views = [p.settings for p in tended if p.settings.spec.name in request.get("pipelines", ())]
        try:
            handler = handlers.get(request.get("kind", ""))
            if handler is None:
                raise ValueError(f"this run does not take {request.get('kind')!r} requests")
            answer(path, handler(spark, views, request))
        except Exception as error:  # the asker says it in one line; this run goes on
            answer(path, error=str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
    return bool(requests)


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
        shown = [item.to_json() for item in reports.values()]
        report.write(json.dumps({"reports": shown}) + "\n")

    try:
        spark = spark_session(job.settings)
        handlers = dict(job.handlers)
        tell(follow(spark, job.settings, job.source, stop, job.run_id, tell, job.others, handlers))
    except BaseException as error:
        traceback.print_exc()
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        report.write(json.dumps({"error": f"{type(error).__name__}: {first}"}) + "\n")
        raise SystemExit(1) from error


if __name__ == "__main__":
    main()
