"""Every declared pipeline of a home at once: runs, reconciles and status across pipelines.

Each pipeline keeps its own streams, checkpoints, locks and tables (its settings' view). A bounded run takes
them one after the other in the one Spark session (their query names carry the pipeline:
``runtime.progress.query_name``); a continuous run keeps the first pipeline's critical path in its main
thread and runs every other pipeline in the first's lower-priority followers' thread, until one stop
(SIGINT, SIGTERM) ends them all.
"""

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import date
from typing import Any

from pyspark.sql import SparkSession

from runtime import warmup
from runtime.checkpoints import checkpoint_dir
from runtime.continuous import run_continuous
from runtime.handover import Handler, as_result
from runtime.progress import StageReport, StreamStatus, query_prefix, stream_status
from runtime.runner import drain_older_streams, prepare, run_once, run_reconcile
from runtime.sources.kafka import partition_lag
from runtime.stages import Stage, reconcile_stage, source_stage, stages
from warehouse.settings import Settings


def _named(view: Settings, reports: Sequence[StageReport]) -> list[StageReport]:
    """Reports named as the user sees them: another pipeline's carry its name (``readings:bronze_events``)."""
    prefix = query_prefix(view)
    # Another pipeline's reports from the followers' thread come named already.
    return [replace(report, name=prefix + report.name) if prefix and ":" not in report.name else report
            for report in reports]  # fmt: skip


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
    warmup_lines: Sequence[str] = (),
    handlers: Mapping[str, Handler] | None = None,
    warmup_volume: Callable[[], Sequence[str]] | None = None,
) -> list[StageReport]:
    """Every pipeline's continuous run until ``stop`` is set or a signal comes: the first pipeline's critical
    path runs here, and every other pipeline runs whole in the first's followers' thread, in its cycles
    (``runtime.followers``): on shared cores the kernel serves the first pipeline's critical path first, and
    the other pipelines take what its followers did, in one JVM whatever their number. Each is prepared
    here first, so a damaged home or a refused spec change stops the run in one line before anything starts.
    With nothing waiting, the first pipeline's critical path rehearses on ``warmup_lines`` (lines of its spec)
    before it takes lines, then on ``warmup_volume()`` (valid lines, as many as a busy run's first batches)
    and its followers until a line arrives in any pipeline or a stop comes (``runtime.warmup``).
    ``handlers``: kinds of work the run can be handed besides reconciles (``runtime.handover``)."""
    first, others = views[0], list(views[1:])
    reports: list[StageReport] = []
    for view in others:
        prepare(spark, view)
        reports += _named(view, drain_older_streams(spark, view))
    sources = [(view, source_of(view, source)) for view in views]
    warm = bool(warmup_lines) and warmup.worth_warming(first, source_of(first, source))

    def rehearse(stop: threading.Event) -> warmup.Rehearsal:
        return warmup.warm_up(
            spark, first, warmup_lines, lambda: stop.is_set() or warmup.lines_waiting(sources), warmup_volume
        )

    return reports + _named(
        first,
        run_continuous(
            spark,
            first,
            stop,
            source=source_of(first, source),
            on_notice=on_notice,
            others=[(view, source_of(view, source)) for view in others],
            warm_up=rehearse if warm else None,
            handlers={"reconcile": reconcile_handed, **(handlers or {})},
        ),
    )


def reconcile_handed(spark: SparkSession, views: list[Settings], request: dict[str, Any]) -> dict[str, Any]:
    """A reconcile handed to the run: of the named pipelines, the dates asked for (``lakehouse reconcile``)."""
    dates = [date.fromisoformat(day) for day in request.get("dates", ())]
    return as_result(reconcile_all(spark, views, dates, wait_seconds=float(request.get("wait", 0))))


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


def await_caught_up(views: Sequence[Settings], wait: float) -> list[StreamStatus]:
    """Wait until every stream a running process runs has read all its input (its backlog is 0), for up to
    ``wait`` seconds; then every stream's status. Meant for after the last file or message: a stream fed
    all the time is never caught up. Streams no process runs (a reconcile between its runs) are not waited
    for. Raises TimeoutError naming the streams still behind, and RuntimeError when no process runs any."""
    deadline = time.monotonic() + wait
    while True:
        statuses = status_all(views)
        running = [status for status in statuses if status.running]
        if not running:
            raise RuntimeError("no running `lakehouse run --continuous` runs these pipelines' streams")
        behind = [status for status in running if status.backlog != 0]
        if not behind:
            return statuses
        if time.monotonic() > deadline:
            named = ", ".join(f"{status.stream} ({status.backlog} {status.backlog_unit})" for status in behind)
            raise TimeoutError(f"not caught up within {wait:g} s: {named}")
        time.sleep(0.5)


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
