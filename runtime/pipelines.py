"""Every declared pipeline of a home at once: runs, reconciles and status across pipelines.

Each pipeline keeps its own streams, checkpoints, locks and tables (its settings' view); they share the one
Spark session (their query names carry the pipeline: ``runtime.progress.query_name``). A bounded run takes
them one after the other; a continuous run keeps each pipeline's critical path running side by side, each
with its followers as one pipeline's run has them, until one stop (SIGINT, SIGTERM) ends them all.
"""

import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date

from pyspark.sql import SparkSession

from runtime.checkpoints import checkpoint_dir
from runtime.progress import StageReport, StreamStatus, query_prefix, stream_status
from runtime.runner import run_continuous, run_once, run_reconcile
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
    """Every pipeline's continuous run side by side until ``stop`` is set or a signal comes; a pipeline whose
    run fails stops the others, and its failure is raised once all have stopped."""
    if len(views) == 1:
        view = views[0]
        return _named(view, run_continuous(spark, view, stop, source=source_of(view, source), on_notice=on_notice))
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    results: dict[str, list[StageReport]] = {}
    failures: list[BaseException] = []

    def run(view: Settings) -> None:
        try:
            results[view.spec.name] = run_continuous(
                spark, view, stop, source=source_of(view, source), on_notice=on_notice
            )
        except BaseException as error:
            failures.append(error)
        finally:
            stop.set()

    threads = [
        threading.Thread(target=run, args=(view,), name=f"lakehouse-{view.spec.name}", daemon=True) for view in views
    ]
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if failures:
        raise failures[0]
    return [report for view in views for report in _named(view, results.get(view.spec.name, []))]


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
