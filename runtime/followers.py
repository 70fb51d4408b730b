"""A continuous run's followers in a thread of the critical path's process, at a lower CPU priority.

``run --continuous`` runs the critical path (the source stream's query, carrying each landed line to the
tumbling table, and the idle advance) in its main thread, and the followers (fraud alerts, the derived
windows, the join, distinct URLs) in cycles here, in a thread of the same process and the same JVM, in Spark's
scheduler pool ``followers``. The thread and the JVM thread that serves its calls take
``LAKEHOUSE_FOLLOWERS_NICENESS`` more niceness, and every query thread that JVM thread starts inherits it
(Linux keeps a niceness per thread): on shared cores the kernel gives the critical path's threads the CPU
they ask for first. One JVM rather than a second one beside it (decision 44 until decision 72): one
warm-up, one heap, and the followers' code compiled once; measured, the followers twice as fresh for the
critical path about a second slower at p50.

Nothing about the tables changes: each follower is still a query with its own checkpoint, writing exactly
once per batch; the thread holds the followers' stream locks. A follower's failure stops the run in one
line (its trace in ``logs/followers.log``); a stop (SIGINT, SIGTERM) stops the follower's query mid-batch,
and the next start re-runs that batch, writing nothing twice.

A run of several pipelines keeps this shape: the first pipeline's critical path in the main thread, and
every other pipeline (its source stream, carrying its lines to its tumbling table, then its followers) in
this thread's cycles, after the first's fraud alerts and before the first's other followers. One JVM,
whatever the number of pipelines.
"""

import contextlib
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

from pyspark.sql import SparkSession

from runtime.faults import retry_slow_start
from runtime.handover import Handler, answer, pending, serving
from runtime.progress import IN_TURNS, INPUT_LEFT, Notices, StageReport, query_prefix, recorder_for
from runtime.runner import (
    CONTINUOUS_RUN,
    IDLE_ADVANCE,
    IDLE_CHECK_SECONDS,
    advance_idle_watermark,
    broker_down,
    drain_stage,
    has_new_input,
)
from runtime.stages import FRAUD_STAGE, Stage, stages
from warehouse.locks import hold_all
from warehouse.settings import Settings

#: How long a stopping run waits for its followers to stop their queries.
STOP_SECONDS = 120.0


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
    served = dict(handlers or {})
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
        # The next cycle runs the stage again as soon as it has new input, and that run's first batch fires
        # the timers the watermark passed: no run here ends with a no-data batch (decision 77).
        drain = partial(drain_stage, spark, self.settings, stage, self.report(stage), stop, settle=False)
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
            answer(path, error=_first_line(error) or type(error).__name__)
    return bool(requests)


class Followers:
    """The run's handle on its followers' thread: start it, read its figures, learn of its failure, stop it."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        source: str,
        run_id: str,
        others: Sequence[tuple[Settings, str]] = (),
        handlers: Mapping[str, Handler] | None = None,
    ) -> None:
        self.log = settings.logs_dir / "followers.log"
        self.reports: dict[str, StageReport] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        job = partial(follow, spark, settings, source, self._stop, run_id, self._tell, others, handlers)
        self._thread = threading.Thread(
            target=self._run, args=(spark, settings.streams.followers_niceness, job), name="lakehouse-followers"
        )
        self._thread.daemon = True  # a stop that never ends must not keep the process alive
        self._thread.start()

    def _tell(self, reports: dict[str, StageReport]) -> None:
        self.reports = reports

    def _run(self, spark: SparkSession, niceness: int, job: Callable[[], dict[str, StageReport]]) -> None:
        try:
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", "followers")
            lower_priority(spark, niceness)
            self.reports = job()
        except BaseException as error:
            self.error = f"{type(error).__name__}: {_first_line(error)}"
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("a", encoding="utf-8") as log:
                traceback.print_exc(file=log)

    def failure(self) -> str | None:
        """One line when the followers ended without being asked to (a follower failed)."""
        if self._thread.is_alive() or self._stop.is_set():
            return None
        return f"the followers stopped: {self.error or 'they ended'} (more in {self.log})"

    def stop(self) -> None:
        """Stop the followers' queries (a batch cut off mid-way is re-run by the next start), and wait."""
        self._stop.set()
        self._thread.join(STOP_SECONDS)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def lower_priority(spark: SparkSession, niceness: int) -> None:
    """Add ``niceness`` to this thread's and to the JVM thread serving its calls (Linux: niceness is a
    thread's); the query threads that JVM thread starts inherit it."""
    path = spark.sparkContext._jvm.java.io.File("/proc/thread-self").getCanonicalPath()  # type: ignore[union-attr]
    for thread in (threading.get_native_id(), int(path.rsplit("/", 1)[1])):
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + niceness))
