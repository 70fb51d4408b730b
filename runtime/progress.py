"""Every micro-batch made visible: Spark's progress of each stream, joined with the stream's own figures.

A ``StreamingQueryListener`` receives each query's progress after every micro-batch (processing time:
when the trigger fired, how long each phase took, rows and rates, the source's backlog). The runner adds
what only the batch function knows (rows written, late events, the event-time watermark). Each batch
becomes one row of ``ops.stream_progress`` (appended in bulk every few seconds and when a run ends, so
recording costs the streams no commit of their own) and the newest one per stream is also kept as a small
JSON file under ``LAKEHOUSE_HOME/status``, which ``lakehouse status`` reads without starting Spark.

Progress rows are observations, not data: a process killed between two flushes loses the rows of its last
few seconds, never a line of the pipeline.
"""

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from runtime.checkpoints import checkpoint_dir, committed_at, is_committed, read_before_version, source_log
from runtime.stages import source_stage
from warehouse.catalog import OPS_STREAM_PROGRESS
from warehouse.delta import append_rows, is_delta_table, latest_version
from warehouse.locks import lock_holder
from warehouse.settings import Settings
from warehouse.storage import entries


def status_dir(settings: Settings) -> Path:
    return settings.home / "status"


def rehearsing_marker(settings: Settings) -> Path:
    """Present while a continuous run's followers rehearse (``runtime.warmup``): its critical path is warm, and
    a line landed now cuts the rehearsal short and is taken at once."""
    return status_dir(settings) / "rehearsing-followers"


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _source_backlog(sources: list[Any]) -> tuple[int | None, int | None]:
    """(files, bytes) the query's sources still have to read, when they say (Delta sources do)."""
    files = bytes_ = None
    for source in sources:
        metrics = dict(source.metrics or {})
        if "numFilesOutstanding" in metrics:
            files = (files or 0) + int(metrics["numFilesOutstanding"])
        if "numBytesOutstanding" in metrics:
            bytes_ = (bytes_ or 0) + int(metrics["numBytesOutstanding"])
    return files, bytes_


#: A report's figure: the stream's input had more for it when its run stopped (left for the next run).
INPUT_LEFT = "input_left"


@dataclass
class StageReport:
    """Figures of one stream over one run: per-batch figures summed, plus the last batch's watermark."""

    name: str
    batches: int = 0
    seconds: float = 0.0
    slowest_batch_seconds: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)
    #: Called after every batch with the report and that batch's figures (progress bars).
    listener: Callable[["StageReport", dict[str, float]], None] | None = field(default=None, repr=False)

    def add(self, batch_figures: dict[str, float], seconds: float) -> None:
        self.batches += 1
        self.seconds += seconds
        self.slowest_batch_seconds = max(self.slowest_batch_seconds, seconds)
        for key, value in batch_figures.items():
            # Levels (where event time or a consumer stands after the batch) keep the last; counts add up.
            if key.startswith(("watermark", "kafka_lag")):
                self.figures[key] = value
            else:
                self.figures[key] = self.figures.get(key, 0) + value
        if self.listener:
            self.listener(self, batch_figures)

    def to_json(self) -> dict[str, Any]:
        """The report as another process reads it back (``StageReport(**shown)``): everything but the listener."""
        return {key: value for key, value in vars(self).items() if key != "listener"}


#: ``ops.stream_progress.run_id`` of a ``run --continuous`` process starts with this.
CONTINUOUS_PREFIX = "continuous-"


class ProgressRecorder(StreamingQueryListener):
    """Collects one row per micro-batch of every query in the session; ``flush`` appends them."""

    def __init__(self, settings: Settings, run_id: str, flush_seconds: float = 10.0) -> None:
        self.settings = settings
        #: Every pipeline's streams share the session: this recorder takes its own pipeline's queries only.
        self.prefix = query_prefix(settings)
        self.run_id = run_id
        self.flush_seconds = flush_seconds
        self._rows: list[dict[str, Any]] = []
        self._figures: dict[tuple[str, int], dict[str, float]] = {}
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        status_dir(settings).mkdir(parents=True, exist_ok=True)

    def start_continuous_run(self) -> None:
        """Mark the rows from here on as a continuous run's (``run_id`` starts with ``continuous-``): what
        Dagster reports as runless materializations, since no Dagster run records them."""
        if not self.run_id.startswith(CONTINUOUS_PREFIX):
            self.run_id = f"{CONTINUOUS_PREFIX}{self.run_id}"

    # Called by the stream runner inside each batch, before Spark reports the batch's progress.
    def batch_figures(self, stream: str, batch_id: int, figures: dict[str, float]) -> None:
        with self._lock:
            self._figures[(stream, batch_id)] = dict(figures)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        name = progress.name or str(progress.id)
        if not name.startswith(self.prefix) or (not self.prefix and ":" in name):
            return  # another pipeline's query
        name = name.removeprefix(self.prefix)
        with self._lock:
            figures = self._figures.pop((name, progress.batchId), None)
        if figures is None:
            # A trigger that found nothing new still reports progress; only batches that ran are rows.
            if not progress.numInputRows:
                return
            figures = {}
        durations = dict(progress.durationMs or {})
        rows_in = int(progress.numInputRows or 0)
        # Spark counts source rows (the landing stream reads whole files); the batch function counts lines.
        scale = float(figures["rows_in"]) / rows_in if rows_in and "rows_in" in figures else 1.0
        files, bytes_ = _source_backlog(list(progress.sources or []))
        operators = list(progress.stateOperators or [])
        state_rows = sum(int(op.numRowsTotal or 0) for op in operators)
        state_bytes = sum(int(op.memoryUsedBytes or 0) for op in operators)
        # Spark's stateful operators drop input at or behind the watermark themselves: late, too.
        dropped = sum(int(op.numRowsDroppedByWatermark or 0) for op in operators)
        watermark = figures.get("watermark")
        row = {
            "stream": name,
            "run_id": self.run_id,
            "batch_id": int(progress.batchId),
            "batch_time": _instant(progress.timestamp),
            "rows_in": int(figures.get("rows_in", rows_in)),
            "rows_out": int(figures.get("rows_written", 0)),
            "input_rows_per_second": float(progress.inputRowsPerSecond or 0.0) * scale,
            "processed_rows_per_second": float(progress.processedRowsPerSecond or 0.0) * scale,
            "batch_seconds": durations.get("triggerExecution", 0) / 1000.0,
            "write_seconds": durations.get("addBatch", 0) / 1000.0,
            "watermark": datetime.fromtimestamp(watermark, UTC) if watermark else None,
            "late": int(figures.get("late", 0)) + dropped,
            "quarantined": int(figures.get("quarantined", 0)),
            "duplicates": int(figures.get("duplicates", 0)),
            "state_rows": state_rows,
            "state_memory_bytes": state_bytes,
            "backlog_files": files,
            "backlog_bytes": bytes_,
            "backlog_messages": int(figures["kafka_lag"]) if "kafka_lag" in figures else None,
            "latency_p50_seconds": figures.get("latency_p50_seconds"),
            "latency_p99_seconds": figures.get("latency_p99_seconds"),
            "latency_max_seconds": figures.get("latency_max_seconds"),
            "figures": json.dumps(figures, sort_keys=True),
            "recorded_at": datetime.now(UTC),
        }
        with self._lock:
            self._rows.append(row)
        self._write_status(row)

    def _write_status(self, row: dict[str, Any]) -> None:
        shown = {key: value.isoformat() if isinstance(value, datetime) else value for key, value in row.items()}
        shown["pid"] = os.getpid()
        target = status_dir(self.settings) / f"{row['stream']}.json"
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(json.dumps(shown, sort_keys=True))
        partial.replace(target)

    def await_reported(self, streams: set[str], timeout: float = 5.0) -> None:
        """Wait until Spark has reported the last batch of each of ``streams`` (listeners are asynchronous)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                waiting = {stream for stream, _ in self._figures}
            if not waiting & streams:
                return
            time.sleep(0.05)

    def flush_if_due(self) -> None:
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> int:
        """Append the rows collected so far to ops.stream_progress in one commit; returns how many."""
        with self._lock:
            rows, self._rows = self._rows, []
        self._last_flush = time.monotonic()
        if not rows or not is_delta_table(OPS_STREAM_PROGRESS.path(self.settings)):
            return 0
        append_rows(rows, self.settings, OPS_STREAM_PROGRESS)
        return len(rows)


_RECORDERS: dict[tuple[int, str], ProgressRecorder] = {}


def query_prefix(settings: Settings) -> str:
    """What a pipeline's query names start with in a session every pipeline shares (the first's: nothing)."""
    return "" if settings.pipeline is None else f"{settings.spec.name}:"


def query_name(settings: Settings, stream: str) -> str:
    """The Spark query name of a pipeline's stream: unique among every pipeline's in one session."""
    return query_prefix(settings) + stream


def recorder_for(spark: SparkSession, settings: Settings) -> ProgressRecorder:
    """The session's recorder of the pipeline, registered with Spark on first use (one per session and
    pipeline, every run shares it)."""
    key = (id(spark), query_prefix(settings))
    recorder = _RECORDERS.get(key)
    if recorder is None or recorder.settings.home != settings.home:
        if recorder is not None:
            spark.streams.removeListener(recorder)
        run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
        recorder = ProgressRecorder(settings, run_id, settings.streams.progress_flush_seconds)
        spark.streams.addListener(recorder)
        _RECORDERS[key] = recorder
    return recorder


@contextmanager
def recorder_aside(spark: SparkSession, settings: Settings) -> Iterator[None]:
    """Within the block, the pipeline's recorder stops listening (a rehearsal's queries, named as its own, are
    not its progress); after it, the same recorder listens again."""
    key = (id(spark), query_prefix(settings))
    kept = _RECORDERS.pop(key, None)
    if kept is not None:
        spark.streams.removeListener(kept)
    try:
        yield
    finally:
        stand_in = _RECORDERS.pop(key, None)
        if stand_in is not None:
            spark.streams.removeListener(stand_in)
        if kept is not None:
            spark.streams.addListener(kept)
            _RECORDERS[key] = kept


@dataclass(frozen=True)
class StreamStatus:
    """What ``lakehouse status`` shows for one stream: read from files only (no Spark)."""

    stream: str
    source: str
    running: bool
    held_by: str | None
    #: Work the stream has not read yet: landing files (bronze) or commits of its Delta source.
    backlog: int
    backlog_unit: str
    #: Seconds since the oldest unread input arrived (0 when there is none): how far behind it is.
    lag_seconds: float
    last_batch: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def stream_status(settings: Settings, stream: str, source: str, checkpoint: Path) -> StreamStatus:
    """One stream's state: is a process running it (its lock is held), its backlog, its newest batch."""
    held_by = lock_holder(settings, stream)
    if source == "landing":
        pending = pending_landing_files(settings, checkpoint)
        unit = "files"
    elif source == "kafka":
        pending = []  # the broker knows the backlog (``runtime.sources.kafka.partition_lag``), not the files
        unit = "messages"
    else:
        pending = pending_source_commits(settings.tables_dir / source.replace(".", "/"), checkpoint)
        unit = "commits"
    now = time.time()
    lag = max(0.0, now - min(mtime for _, mtime in pending)) if pending else 0.0
    status_file = status_dir(settings) / f"{stream}.json"
    last = json.loads(status_file.read_text()) if status_file.exists() else None
    return StreamStatus(stream, source, held_by is not None, held_by, len(pending), unit, round(lag, 1), last)


def pending_landing_files(settings: Settings, checkpoint: Path) -> list[tuple[str, float]]:
    """(name, arrival time) of landing files the bronze stream has not taken yet."""
    found = entries(settings.landing_dir)
    if not found:
        return []
    taken = {unquote(path.rsplit("/", 1)[-1]) for path in source_log(checkpoint)}
    return [
        (name, mtime_ns / 1e9) for name, mtime_ns, _ in found if not name.startswith((".", "_")) and name not in taken
    ]


def pending_source_commits(table: Path, checkpoint: Path) -> list[tuple[str, float]]:
    """(commit file, commit time) of the Delta source's commits the stream has not finished reading."""
    log = table / "_delta_log"
    if not log.is_dir():
        return []
    latest = latest_version(log)
    pending = []
    for version in range(read_before_version(checkpoint) + 1, latest + 1):
        commit = log / f"{version:020d}.json"
        with suppress(FileNotFoundError):
            # Only commits that add data are work for the stream (not a table's creation or a compaction).
            text = commit.read_text()
            if '{"add"' in text and '"dataChange":true' in text:
                pending.append((commit.name, commit.stat().st_mtime))
    return pending


#: How a continuous run's lock on a stream it runs in turns (another pipeline's, in the followers' thread) ends.
IN_TURNS = "in turns"


def await_landing_stream(settings: Settings, wait: float) -> None:
    """Return once a continuous run's landing stream takes files: its lock is held by a continuous run and its
    query has started (Spark wrote the checkpoint's metadata), or its followers are rehearsing (a file landed
    cuts that short), so a file landed from here on is picked up at once, with no warm-up in between. Another
    pipeline's stream runs in the followers' turns (a query per turn, started over what has landed): it takes
    files as soon as its lock is held. Raises TimeoutError after ``wait`` seconds."""
    checkpoint = checkpoint_dir(settings, source_stage("landing"))
    deadline = time.monotonic() + wait

    def ready() -> bool:
        holder = lock_holder(settings, checkpoint.name) or ""
        started = (checkpoint / "metadata").exists() or rehearsing_marker(settings).exists()
        return "continuous" in holder and (IN_TURNS in holder or started)

    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no `lakehouse run --continuous` took landing files within {wait:g} s")
        time.sleep(0.2)


def await_in_gold(settings: Settings, name: str, landed_at: float, wait: float) -> float:
    """Seconds from ``landed_at`` (processing time) to the commit of the landing stream's batch that took the
    file ``name``: that batch carried its lines through bronze and silver into the tumbling table (one
    micro-batch). Raises TimeoutError when no committed batch has taken it within ``wait`` seconds."""
    checkpoint = checkpoint_dir(settings, source_stage("landing"))
    deadline = time.monotonic() + wait
    while True:
        for path, batch in source_log(checkpoint).items():
            if unquote(path.rsplit("/", 1)[-1]) == name and is_committed(checkpoint, batch):
                return committed_at(checkpoint, batch) - landed_at
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} was not in gold within {wait:g} s of landing")
        time.sleep(0.1)


class Notices:
    """One line when the Kafka broker becomes unreachable, one when it answers again (not one per cycle)."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self.say = say or (lambda _: None)
        self.outage_since: float | None = None

    def broker(self, settings: Settings, error: Exception | None) -> None:
        servers = settings.kafka.bootstrap_servers
        if error is not None and self.outage_since is None:
            self.outage_since = time.monotonic()
            self.say(f"Kafka at {servers} is not reachable ({type(error).__name__}); retrying every cycle")
        elif error is None and self.outage_since is not None:
            self.say(
                f"Kafka at {servers} answers again after {time.monotonic() - self.outage_since:.0f} s; catching up"
            )
            self.outage_since = None
