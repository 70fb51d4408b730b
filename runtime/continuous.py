"""``run --continuous``: the critical path in a query that keeps running, the followers beside it in turns.

The source stream's query (landing or Kafka → bronze → silver → the tumbling table, one micro-batch) runs for
the whole run, a trigger every ``trigger_interval_seconds`` and no query start per batch. The followers
(fraud alerts, the join, the derived windows, distinct URLs, and every other pipeline) run in a thread of
this process in cycles of their own (``runtime.followers``), in the same JVM at a lower CPU priority.
"""

import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from runtime import checkpoints
from runtime.checkpoints import checkpoint_dir
from runtime.followers import Followers
from runtime.handover import Handler
from runtime.progress import Notices, StageReport, recorder_for
from runtime.runner import (
    CONTINUOUS_RUN,
    IDLE_ADVANCE,
    IDLE_CHECK_SECONDS,
    advance_idle_watermark,
    broker_down,
    drain_older_streams,
    prepare,
    start_stage,
    starts_after_newest,
)
from runtime.stages import Stage, stages
from runtime.warmup import Rehearsal
from warehouse.locks import hold_all
from warehouse.settings import Settings

#: How often a continuous run's main thread looks at its source query (failures, idleness, progress).
_LOOK_SECONDS = 0.5


def run_continuous(
    spark: SparkSession,
    settings: Settings,
    stop: threading.Event | None = None,
    on_progress: Callable[[list[StageReport]], None] | None = None,
    source: str = "landing",
    on_notice: Callable[[str], None] | None = None,
    others: Sequence[tuple[Settings, str]] = (),
    warm_up: Callable[[threading.Event], Rehearsal] | None = None,
    handlers: Mapping[str, Handler] | None = None,
) -> list[StageReport]:
    """Run the pipeline until ``stop`` is set or a signal comes: the critical path (bronze, silver, the
    tumbling table) in one query that keeps running, and the followers (fraud alerts, the derived windows,
    the join, distinct URLs) in cycles of their own in a thread of their own (``runtime.followers``), at a
    lower CPU priority. ``warm_up(stop)`` (``runtime.warmup``) rehearses the critical path (and, while
    nothing waits and no stop came, the followers) before its query and the followers start. ``others``
    (settings view, source) are other pipelines, prepared by the caller: the followers' thread runs them.
    ``handlers`` are the kinds of handed work (``runtime.handover``) the followers' thread serves besides
    reconciles.

    Each of the source stream's micro-batches carries a landed line all the way to the tumbling table: none
    waits for a follower. A follower whose source has nothing new is skipped without starting a query (from
    its checkpoint and its source's files, no Spark job). SIGINT and SIGTERM stop the running queries; a
    batch cut off mid-way is re-run by the next start and writes nothing twice. A follower's failure stops
    the whole run.
    """
    prepare(spark, settings)
    older = drain_older_streams(spark, settings)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    pipeline = stages(settings, source)
    report = StageReport(pipeline.source.name)
    idle_report = StageReport(IDLE_ADVANCE)
    next_idle_check = 0.0
    recorder = recorder_for(spark, settings)
    recorder.start_continuous_run()
    notices = Notices(on_notice)
    followers: Followers | None = None

    def all_reports() -> list[StageReport]:
        shown = {stage.name: StageReport(stage.name) for stage in pipeline.followers}
        shown.update(followers.reports if followers else {})
        reports = [report, *shown.values()]
        return [*reports, idle_report] if idle_report.batches else reports

    critical = _SourceQuery(spark, settings, pipeline.source, report, notices)
    try:
        with hold_all(settings, pipeline.source.lock_names(settings), purpose=CONTINUOUS_RUN):
            if warm_up:
                notices.say(warm_up(stop).line(settings.spec.name))
            if pipeline.followers or others:
                # After the rehearsal: the followers' first batches would compile beside it and slow it down.
                followers = Followers(spark, settings, source, recorder.run_id, others, handlers or {})
            try:
                while not stop.is_set():
                    critical.keep_running()
                    failure = followers.failure() if followers else None
                    if failure:
                        raise RuntimeError(failure)
                    # The batch lock is free only between the source stream's batches: an idle advance never
                    # runs during one, and the progress shown is never half a batch's.
                    if critical.batch_lock.acquire(blocking=False):
                        try:
                            if time.monotonic() >= next_idle_check:
                                # A look costs a few small Spark jobs; windows close within this many s of due.
                                next_idle_check = time.monotonic() + max(
                                    settings.streams.trigger_interval_seconds, IDLE_CHECK_SECONDS
                                )
                                idle = advance_idle_watermark(spark, settings, stage_locked=True, follow=False)
                                if idle:
                                    idle_report.add(idle.figures, idle.seconds)
                            if on_progress:
                                on_progress(all_reports())
                        finally:
                            critical.batch_lock.release()
                    recorder.flush_if_due()
                    stop.wait(_LOOK_SECONDS)
            finally:
                stop.set()
                critical.stop()
                if followers:
                    followers.stop()
    finally:
        recorder.flush()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return [*older, *all_reports()]


class _SourceQuery:
    """The continuous run's source stream: one query for the whole run, started again only after a Kafka
    broker outage (or the re-run quirk in :func:`runtime.runner.drain_stage`); any other failure stops the run."""

    def __init__(
        self, spark: SparkSession, settings: Settings, stage: Stage, report: StageReport, notices: Notices
    ) -> None:
        self.spark, self.settings, self.stage, self.report, self.notices = spark, settings, stage, report, notices
        self.batch_lock = threading.Lock()
        self.query: StreamingQuery | None = None
        self.rerun: int | None = None
        self.next_broker_look = 0.0

    def keep_running(self) -> None:
        if self.query is not None and self.query.isActive:
            if self.stage.source == "kafka" and time.monotonic() >= self.next_broker_look:
                # A running Kafka query waits out an outage on its own; the user is told once each way.
                self.next_broker_look = time.monotonic() + self.settings.streams.trigger_interval_seconds
                self._broker_down()
            return
        checkpoint = checkpoint_dir(self.settings, self.stage)
        if self.query is not None:
            error, self.query = self.query.exception(), None
            if error is not None:
                rerun_done = self.rerun is not None and checkpoints.is_committed(checkpoint, self.rerun)
                # A Kafka batch cut off by a broker outage never committed: it is re-run from the same offsets
                # once the broker answers. Any other failure stops the run.
                if self.stage.source != "kafka" or not (rerun_done or self._broker_down()):
                    raise error
                if not rerun_done:
                    return
        if (self.stage.source == "kafka" and self._broker_down()) or starts_after_newest(self.settings, self.stage):
            return
        self.rerun = checkpoints.uncommitted_batch(checkpoint)
        self.query = start_stage(
            self.spark, self.settings, self.stage, self.report, keep_running=True, batch_lock=self.batch_lock
        )

    def _broker_down(self) -> bool:
        return broker_down(self.settings, self.stage, self.notices)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
