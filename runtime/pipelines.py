"""Every declared pipeline of a home at once: runs, reconciles and status across pipelines.

Each pipeline keeps its own streams, checkpoints, locks and tables (its settings' view). A bounded run takes
them one after the other in the one Spark session (their query names carry the pipeline:
``runtime.progress.query_name``); a continuous run keeps the first pipeline in this process and each other
one in a lower-priority process of its own, until one stop (SIGINT, SIGTERM) ends them all.
"""

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date

from pyspark.sql import SparkSession

from runtime.checkpoints import checkpoint_dir
from runtime.progress import StageReport, StreamStatus, query_prefix, stream_status
from runtime.runner import run_continuous, run_once, run_reconcile, stop_child
from runtime.sources.kafka import partition_lag
from runtime.stages import Stage, reconcile_stage, source_stage, stages
from warehouse.settings import Settings


def _named(view: Settings, reports: Sequence[StageReport]) -> list[StageReport]:
    """Reports named as the user sees them: another pipeline's carry its name (``readings:bronze_events``)."""
    prefix = query_prefix(view)
    return [replace(report, name=prefix + report.name) if prefix else report for report in reports]


def source_of(view: Settings, source: str | None) -> str:
    """Where a pipeline's bronze reads: the one asked for, else its own default (spec or LAKEHOUSE_SOURCE)."""
    return source or view.streams.source


def run_all_once(spark: SparkSession, views: Sequence[Settings], source: str | None = None) -> list[StageReport]:
    """Everything available now through each pipeline, one pipeline after the other."""
    reports: list[StageReport] = []
    for view in views:
        reports += _named(view, run_once(spark, view, source_of(view, source)))
    return reports


def run_all_continuous(
    spark: SparkSession,
    views: Sequence[Settings],
    source: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> list[StageReport]:
    """Every pipeline's continuous run until ``stop`` is set or a signal comes. The first pipeline runs here;
    each other one in a process of its own at half ``LAKEHOUSE_FOLLOWERS_NICENESS`` (:class:`PipelineProcess`),
    so on shared cores the kernel serves the first pipeline's critical path first, then the others', then the
    followers of each. A pipeline whose run fails stops the others; its failure is raised once all have
    stopped."""
    first, others = views[0], list(views[1:])
    stop = stop or threading.Event()
    children = [PipelineProcess(view, source) for view in others]
    failures: list[str] = []

    def watch() -> None:
        while not stop.wait(0.5):
            for child in children:
                failure = child.failure()
                if failure:
                    failures.append(failure)
                if child.process.poll() is not None:
                    stop.set()  # a Ctrl-C reaches the whole process group: it may stop a child first

    watcher = threading.Thread(target=watch, name="lakehouse-pipelines", daemon=True)
    watcher.start()
    try:
        reports = _named(
            first, run_continuous(spark, first, stop, source=source_of(first, source), on_notice=on_notice)
        )
    finally:
        stop.set()
        watcher.join()
        for child in children:
            child.stop()
    if failures:
        raise RuntimeError(failures[0])
    return reports + [StageReport(f"{child.name}: its own process (see {child.log})") for child in children]


class PipelineProcess:
    """Another pipeline's ``run --continuous``, in a child process (``python -m runtime.pipelines``) at half
    ``LAKEHOUSE_FOLLOWERS_NICENESS``, dying with its parent; its output goes to ``logs/pipeline-<name>.log``."""

    def __init__(self, view: Settings, source: str | None) -> None:
        self.name = view.spec.name
        self.log = view.logs_dir / f"pipeline-{self.name}.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        root = view.root()
        env = {
            **os.environ,
            "LAKEHOUSE_HOME": str(root.home),
            "LAKEHOUSE_PIPELINES_DIR": str(root.pipelines_dir or "none"),
            "LAKEHOUSE_PIPELINES": self.name,
        }
        command = [sys.executable, "-m", "runtime.pipelines", str(os.getpid()), source_of(view, source)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._stopping = False

    def failure(self) -> str | None:
        """One line when the child ended without being asked to."""
        code = self.process.poll()
        if not code or self._stopping:
            return None
        return f"the {self.name} pipeline's run ended (exit status {code}); see {self.log}"

    def stop(self) -> None:
        self._stopping = True
        stop_child(self.process)


def reconcile_all(
    spark: SparkSession, views: Sequence[Settings], dates: Sequence[date] = (), wait_seconds: float = 0.0
) -> list[StageReport]:
    """Each pipeline's late events folded into its gold (and ``dates`` repaired), one after the other."""
    reports: list[StageReport] = []
    for view in views:
        reports += _named(view, run_reconcile(spark, view, dates, wait_seconds=wait_seconds))
    return reports


def status_all(views: Sequence[Settings]) -> list[StreamStatus]:
    """Every pipeline's streams, from files alone (no Spark session)."""
    found: list[StreamStatus] = []
    for view in views:
        prefix = query_prefix(view)
        found += [replace(status, stream=prefix + status.stream) for status in pipeline_status(view)]
    return found


def pipeline_status(settings: Settings) -> list[StreamStatus]:
    """Every stream's state, backlog and newest batch, from files alone (no Spark session)."""
    statuses = [
        stream_status(settings, stage.name, stage.source, checkpoint_dir(settings, stage))
        for stage in [*stages(settings), reconcile_stage(settings)]
    ]
    kafka = source_stage("kafka")
    if checkpoint_dir(settings, kafka).is_dir():
        statuses.insert(1, kafka_status(settings, kafka))
    return statuses


def kafka_status(settings: Settings, stage: Stage) -> StreamStatus:
    """The Kafka stream's state; its backlog is messages per partition not read yet (asks the broker)."""
    status = stream_status(settings, stage.name, "kafka", checkpoint_dir(settings, stage))
    try:
        lag = partition_lag(settings, checkpoint_dir(settings, stage))
    except Exception:
        return replace(status, backlog=-1, backlog_unit="messages (broker not reachable)")
    return replace(status, backlog=sum(lag.values()))


def main() -> None:
    """The child: ``python -m runtime.pipelines <parent pid> <source>``, the pipeline ``LAKEHOUSE_PIPELINES``
    names run continuously until SIGTERM or SIGINT."""
    from runtime.followers import die_with_parent
    from warehouse.session import spark_session

    die_with_parent(int(sys.argv[1]))
    (view,) = Settings.from_env().pipelines()
    # Before the JVM starts, so its threads inherit it too. Half the followers' niceness: on shared cores the first
    # pipeline's critical path goes first, then this one's, then every pipeline's followers (its own add theirs).
    os.nice(view.streams.followers_niceness // 2)
    spark = spark_session(view.root())
    reports = run_continuous(spark, view, source=sys.argv[2], on_notice=lambda line: print(line, flush=True))
    for report in reports:
        print(f"{report.name}: {report.batches} batches, {report.seconds:.1f} s, {report.figures}", flush=True)


if __name__ == "__main__":
    main()
