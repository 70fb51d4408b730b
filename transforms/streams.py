"""The streaming runner: one Structured Streaming query per arrow, each with its own checkpoint.

``landing → bronze.events → silver.* → gold.*``. The same queries run with ``availableNow`` (a bounded,
incremental run: everything that has arrived, in bounded micro-batches, then stop) or with a
processing-time trigger (continuous). Each micro-batch is written through ``foreachBatch`` with Delta
transaction ids, so a batch replayed after a crash writes nothing twice.
"""

import fcntl
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from transforms.bronze import land_lines
from transforms.landing import read_landing
from transforms.silver import refine_events
from transforms.windows import update_windows
from warehouse.catalog import BRONZE_EVENTS, SILVER_EVENTS, all_tables, user_spend_table
from warehouse.delta import ensure_tables
from warehouse.settings import Settings

BatchFunction = Callable[[DataFrame, int, Settings, str], dict[str, float]]


class StreamBusyError(RuntimeError):
    """Another process is running the same stream (same checkpoint)."""


@dataclass
class StageReport:
    """Figures of one stream over one run: per-batch figures summed, plus the last batch's watermark."""

    name: str
    batches: int = 0
    seconds: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)

    def add(self, batch_figures: dict[str, float], seconds: float) -> None:
        self.batches += 1
        self.seconds += seconds
        for key, value in batch_figures.items():
            if key == "watermark":
                self.figures[key] = value
            else:
                self.figures[key] = self.figures.get(key, 0) + value


@dataclass(frozen=True)
class Stage:
    """One arrow of the pipeline: where it reads, what it does with each micro-batch."""

    name: str
    read: Callable[[SparkSession, Settings], DataFrame]
    process: BatchFunction


def _read_delta(table_name: str) -> Callable[[SparkSession, Settings], DataFrame]:
    def read(spark: SparkSession, settings: Settings) -> DataFrame:
        table = {t.name: t for t in all_tables(settings)}[table_name]
        # Both sources are append-only tables, so a plain Delta stream sees every row exactly once.
        return spark.readStream.format("delta").load(str(table.path(settings)))

    return read


def stages(settings: Settings) -> list[Stage]:
    """The pipeline's arrows in order; each stage's name is also its checkpoint folder's name."""
    gold_name = user_spend_table(settings).name.replace(".", "_")
    return [
        Stage("bronze_events", read_landing, land_lines),
        Stage("silver_events", _read_delta(BRONZE_EVENTS.name), refine_events),
        Stage(
            gold_name,
            _read_delta(SILVER_EVENTS.name),
            lambda df, batch_id, s, writer: update_windows(df, batch_id, s, writer, gold_name),
        ),
    ]


def stage_named(settings: Settings, name: str) -> Stage:
    for stage in stages(settings):
        if stage.name == name:
            return stage
    raise KeyError(name)


def checkpoint_dir(settings: Settings, stage: Stage) -> Path:
    return settings.checkpoints_dir / stage.name


def _writer_id(checkpoint: Path, stage: Stage) -> str:
    """Delta transaction app id: stable for the life of a checkpoint, new when it is reset."""
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    return f"lakehouse:{stage.name}:{query_id}"


@contextmanager
def stage_lock(settings: Settings, stage: Stage) -> Iterator[None]:
    """Hold an exclusive lock on the stage's checkpoint; two writers on one checkpoint would corrupt it."""
    settings.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    lock_path = settings.checkpoints_dir / f"{stage.name}.lock"
    handle = lock_path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StreamBusyError(
            f"the {stage.name} stream is already running in another process (lock {lock_path})"
        ) from None
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def start_stage(
    spark: SparkSession, settings: Settings, stage: Stage, report: StageReport, *, once: bool
) -> StreamingQuery:
    """Start one stage's query, ``availableNow`` when ``once`` else on a processing-time trigger."""
    checkpoint = checkpoint_dir(settings, stage)
    writer: dict[str, str] = {}

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        if "id" not in writer:
            writer["id"] = _writer_id(checkpoint, stage)
        started = time.monotonic()
        figures = stage.process(batch, batch_id, settings, writer["id"])
        report.add(figures, time.monotonic() - started)

    stream = (
        stage.read(spark, settings)
        .writeStream.queryName(stage.name)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(each_batch)
    )
    if once:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{settings.trigger_interval_seconds} seconds")
    return stream.start()


def prepare(spark: SparkSession, settings: Settings) -> None:
    """Create the home's folders and every catalog table that does not exist yet."""
    settings.ensure_home()
    ensure_tables(spark, settings, all_tables(settings))


def run_stage_once(spark: SparkSession, settings: Settings, stage: Stage) -> StageReport:
    """Process everything available to one stage now, in bounded micro-batches, then return."""
    report = StageReport(stage.name)
    with stage_lock(settings, stage):
        query = start_stage(spark, settings, stage, report, once=True)
        query.awaitTermination()
    return report


def run_once(spark: SparkSession, settings: Settings) -> list[StageReport]:
    """Bounded run of the whole pipeline: bronze, then silver, then gold, each until caught up."""
    prepare(spark, settings)
    return [run_stage_once(spark, settings, stage) for stage in stages(settings)]


def run_continuous(
    spark: SparkSession,
    settings: Settings,
    stop: threading.Event | None = None,
    on_progress: Callable[[list[StageReport]], None] | None = None,
) -> list[StageReport]:
    """Run every stage side by side on the processing-time trigger until ``stop`` is set or a signal comes.

    SIGINT and SIGTERM stop the queries; a batch cut off mid-way is re-run by the next start, and its
    Delta transaction ids make that re-run write nothing twice.
    """
    prepare(spark, settings)
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    reports = [StageReport(stage.name) for stage in stages(settings)]
    queries: list[StreamingQuery] = []
    try:
        with _all_locks(settings):
            for stage, report in zip(stages(settings), reports, strict=True):
                queries.append(start_stage(spark, settings, stage, report, once=False))
            while not stop.wait(1.0):
                for query in queries:
                    if not query.isActive and query.exception() is not None:
                        raise query.exception()
                if on_progress:
                    on_progress(reports)
    finally:
        for query in queries:
            query.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return reports


@contextmanager
def _all_locks(settings: Settings) -> Iterator[None]:
    with ExitStack() as held:
        for stage in stages(settings):
            held.enter_context(stage_lock(settings, stage))
        yield
