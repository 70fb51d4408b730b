"""The streaming runner: the source stream (landing or Kafka → bronze → silver → the tumbling table, one
micro-batch) and its followers, each a Structured Streaming query with its own checkpoint.

``run_once`` runs each query with ``availableNow`` (everything that has arrived, in bounded micro-batches,
then stop); ``runtime.continuous`` keeps the source stream's query running instead, with the followers in
cycles of their own beside it (``runtime.followers``).
Each micro-batch is written through ``foreachBatch`` exactly once (commit metadata or Delta transaction
ids), so a batch replayed after a crash writes nothing twice.
"""

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from runtime import checkpoints
from runtime.carry import carried_writer
from runtime.checkpoints import KAFKA_STAGE, RECONCILE_STAGE, checkpoint_dir
from runtime.faults import check_home, retry_slow_start
from runtime.progress import (
    Notices,
    StageReport,
    pending_landing_files,
    pending_source_commits,
    query_name,
    recorder_for,
)
from runtime.sources.kafka import partition_lag
from runtime.stages import SOURCES, Stage, delta_readers, reconcile_stage, source_stage, stages
from transforms.gold.tumbling import advance_idle
from transforms.keyed_state import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER
from transforms.latency import latencies
from transforms.reconcile import repair_dates
from warehouse.catalog import BRONZE_EVENTS, kept_tables
from warehouse.delta import batch_scope, latest_version, side_by_side
from warehouse.leases import check_held
from warehouse.locks import GOLD_LOCK_WAIT_SECONDS, hold_all, hold_gold
from warehouse.settings import Settings
from warehouse.spec_changes import check_spec
from warehouse.tables import ensure_tables


def stage_lock(settings: Settings, stage: Stage, wait_seconds: float = 0.0):
    """Hold an exclusive lock on the stage's checkpoint; two writers on one checkpoint would corrupt it."""
    return hold_all(settings, stage.lock_names(settings), wait_seconds=wait_seconds, purpose=f"the {stage.name} stream")


#: Read by Spark when a query starts (its session is cloned then): each start sets its stage's values. A
#: stateful query's first start records the state's provider and partitions in its checkpoint, and every
#: later start takes them from there.
NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: One start at a time in this process, so no start sees the value set for another stage's.
_STARTING = threading.Lock()


def start_stage(
    spark: SparkSession,
    settings: Settings,
    stage: Stage,
    report: StageReport,
    keep_running: bool = False,
    batch_lock: AbstractContextManager | None = None,
    settle: bool = True,
) -> StreamingQuery:
    """Start one stage's query: with ``availableNow`` (everything its source holds now, in bounded
    micro-batches, then it stops), or with ``keep_running`` a trigger every ``trigger_interval_seconds``
    until it is stopped. Each batch holds ``batch_lock`` (a continuous run's idle advance takes it too).
    Without ``settle`` no run ends with Spark's no-data batch (``Stage.settles``): a run that will be followed
    by another with data leaves its timers to that run's first batch."""
    checkpoint = checkpoint_dir(settings, stage)
    writer: dict[str, str] = {}
    recorder = recorder_for(spark, settings)

    def each_batch(batch: DataFrame, batch_id: int) -> None:
        check_held()  # a stream whose lease was taken over (it stalled past the lease time) writes nothing more
        if "id" not in writer:
            writer["id"] = checkpoints.writer_id(stage.name, checkpoint)
        started = time.monotonic()
        with (
            batch_lock or nullcontext(),
            batch_scope(writer["id"], batch_id, checkpoints.batch_earliest_start(checkpoint, batch_id)),
            hold_all(settings, list(stage.locks), wait_seconds=GOLD_LOCK_WAIT_SECONDS, purpose=f"{stage.name} batch"),
        ):
            figures = stage.process(batch, batch_id, settings, writer["id"])
            figures = latencies(figures, time.time())
            recorder.batch_figures(stage.name, batch_id, figures)
            report.add(figures, time.monotonic() - started)

    trigger = (
        {"processingTime": f"{settings.streams.trigger_interval_seconds} seconds"}
        if keep_running
        else {"availableNow": True}
    )
    conf = {NO_DATA_BATCHES: str((stage.settles and settle) or keep_running).lower()}
    if stage.keeps_state:
        conf |= {STATE_STORE_PROVIDER: ROCKSDB_PROVIDER, SHUFFLE_PARTITIONS: str(settings.spark.state_partitions)}
    with _STARTING, _conf_while(spark, conf):
        return (
            stage.read(spark, settings)
            .writeStream.queryName(query_name(settings, stage.name))
            .option("checkpointLocation", str(checkpoint))
            .foreachBatch(each_batch)
            .trigger(**trigger)
            .start()
        )


@contextmanager
def _conf_while(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """The session's settings ``conf`` for the block (a query's start), each put back as it was after it."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def swap_marker(settings: Settings) -> Path:
    """Exists while a replay swaps tables and checkpoints; no stream may start meanwhile."""
    return settings.home / "replay" / "SWAP_IN_PROGRESS"


def prepare(
    spark: SparkSession, settings: Settings, allow_interrupted_swap: bool = False, rebuilt: Sequence[str] = (),
    accept_rebuild: bool = False,
) -> None:  # fmt: skip
    """Create the home's folders and every catalog table missing, once no stream's checkpoint or table's log is
    damaged or lost (``runtime.faults``; a replay names the streams it ``rebuilt``s) and the spec changed in no
    way its state cannot take (``warehouse.spec_changes``; unless a replay rebuilds it all: ``accept_rebuild``)."""
    settings.ensure_home()
    if not allow_interrupted_swap and swap_marker(settings).exists():
        raise RuntimeError(
            "a replay was interrupted while swapping tables and checkpoints; run `lakehouse replay` to finish it"
        )
    streams = [*stages(settings).names, KAFKA_STAGE, RECONCILE_STAGE]
    check_home(settings, streams, kept_tables(settings), skip=rebuilt, reads=delta_readers(settings, streams))
    check_spec(settings, BRONZE_EVENTS, accept_rebuild)
    ensure_tables(spark, settings, kept_tables(settings))


def run_stage_once(
    spark: SparkSession,
    settings: Settings,
    stage: Stage,
    listener: Callable[[StageReport, dict[str, float]], None] | None = None,
    record_progress: bool = True,
    wait_seconds: float = 0.0,
) -> StageReport:
    """Process everything available to one stage now, in bounded micro-batches, then return (and, with
    ``record_progress``, append its batches' progress rows; a caller running several stages does it once).
    Another writer of the stage: wait up to ``wait_seconds`` for it, then refuse."""
    if checkpoints.is_carried(checkpoint_dir(settings, stage)):
        raise RuntimeError(f"{stage.name} is carried by the source stream's batches; it does not run on its own")
    report = StageReport(stage.name, listener=listener)
    with stage_lock(settings, stage, wait_seconds):
        drain = partial(drain_stage, spark, settings, stage, report, threading.Event())
        retry_slow_start(drain, stage.name, time.sleep)
    if record_progress:
        flush_progress(spark, settings, [stage])
    return report


def flush_progress(spark: SparkSession, settings: Settings, done: Sequence[Stage]) -> None:
    """Wait for Spark to report the finished stages' last batches, then append the progress rows."""
    recorder = recorder_for(spark, settings)
    recorder.await_reported({stage.name for stage in done})
    recorder.flush()


def run_once(spark: SparkSession, settings: Settings, source: str = "landing") -> list[StageReport]:
    """Bounded run of the whole pipeline: bronze (from ``source``), then silver, then gold, each until
    caught up."""
    prepare(spark, settings)
    pipeline = stages(settings, source)
    reports = drain_older_streams(spark, settings)
    reports.append(run_stage_once(spark, settings, pipeline.source, record_progress=False))
    # Before the followers, so the derived windows take the windows it closes in this run.
    idle = advance_idle_watermark(spark, settings, follow=False)
    # Side by side: each follower reads only what the critical path committed and writes its own tables, and
    # their fixed costs (query starts, planning, commits) overlap (decision 45). One with nothing new to read
    # and no batch to re-run is not started, as a continuous run's cycle skips it: its query would find no
    # batch to run, at the cost of a start.
    due = [stage for stage in pipeline.followers if _has_work(settings, stage)]
    ran = side_by_side(*(partial(run_stage_once, spark, settings, stage, record_progress=False) for stage in due))
    by_name = {report.name: report for report in ran}
    reports.extend(by_name.get(stage.name, StageReport(stage.name)) for stage in pipeline.followers)
    flush_progress(spark, settings, pipeline)
    return [*reports, idle] if idle else reports


#: What a continuous run writes into the locks it holds: ``lock_holder`` tells it from a bounded run.
CONTINUOUS_RUN = "a continuous run"

#: The report name of an idle watermark advance (it is not a stream of its own).
IDLE_ADVANCE = "watermark_idle"
#: How often an idle ``run --continuous`` looks whether the idle-advancing watermark closes a window.
IDLE_CHECK_SECONDS = 10


def advance_idle_watermark(
    spark: SparkSession,
    settings: Settings,
    now: datetime | None = None,
    stage_locked: bool = False,
    follow: bool = True,
) -> StageReport | None:
    """Idle-advancing watermark (``LAKEHOUSE_WATERMARK_IDLE_SECONDS`` > 0): when the window stream has had
    no events for the idle time, move its watermark on with processing time and finalize the windows it
    closes. None when the policy is off, the stream has unread input or a batch left uncommitted (its
    re-run must see the watermark it first saw), or nothing moved. Checks files before any Spark job:
    the stream's last commit (its newest batch) must be older than the idle time. With ``follow``, the
    derived windows' stream then takes the advance (hopping windows and sessions it closes); a caller
    that runs that stream next anyway passes False."""
    if settings.watermarks.idle_seconds <= 0:
        return None
    gold = stages(settings).windows
    now = now or datetime.now(UTC)
    last = _last_gold_batch(settings, gold)
    if last is None:
        return None
    writer, batch_id, last_batch_at = last
    if now.timestamp() - last_batch_at < settings.watermarks.idle_seconds:
        return None
    report = StageReport(IDLE_ADVANCE)
    gold_lock = hold_gold(settings, "an idle watermark advance", derived=False)
    with nullcontext() if stage_locked else stage_lock(settings, gold), gold_lock:
        started = time.monotonic()
        figures = advance_idle(spark, settings, gold.name, writer, batch_id, now)
    if figures is None:
        return None
    report.add(figures, time.monotonic() - started)
    derived = stages(settings).derived
    if follow and derived is not None:
        run_stage_once(spark, settings, derived)
    return report


def _last_gold_batch(settings: Settings, gold: Stage) -> tuple[str, int, float] | None:
    """(writer, batch, when it finished) of the tumbling table's newest batch, when nothing is left to fold
    into it: no source batch left uncommitted (its re-run must see the watermark it first saw) and no
    input waiting. None otherwise, or before any batch."""
    checkpoint = checkpoint_dir(settings, gold)
    if not checkpoints.is_carried(checkpoint):
        # The windows stream of an older home that has not run since: its own checkpoint says.
        batches = checkpoints.committed_batches(checkpoint)
        if not batches or checkpoints.uncommitted_batch(checkpoint) is not None or has_new_input(settings, gold):
            return None
        newest = batches[-1]
        return checkpoints.writer_id(gold.name, checkpoint), newest, checkpoints.committed_at(checkpoint, newest)
    carried = checkpoints.carried_batches(checkpoint)
    if not carried:
        return None
    source, source_batch, batch_id = carried[-1]
    for stage in (source_stage(name) for name in SOURCES):
        stage_checkpoint = checkpoint_dir(settings, stage)
        if checkpoints.uncommitted_batch(stage_checkpoint) is not None:
            return None
        if stage.source == "landing" and stage_checkpoint.is_dir() and has_new_input(settings, stage):
            return None
    source_checkpoint = checkpoint_dir(settings, source)
    if not checkpoints.is_committed(source_checkpoint, source_batch):
        return None
    return carried_writer(settings, gold.name), batch_id, checkpoints.committed_at(source_checkpoint, source_batch)


def drain_older_streams(spark: SparkSession, settings: Settings) -> list[StageReport]:
    """Finish what silver's and the windows' own streams (an older version of the lakehouse) left unread,
    before the source stream carries batches through them; nothing once it has carried one."""
    pipeline = stages(settings)
    reports = []
    for stage in (pipeline.silver, pipeline.windows):
        checkpoint = checkpoint_dir(settings, stage)
        if checkpoints.is_carried(checkpoint) or not checkpoints.committed_batches(checkpoint):
            continue
        if checkpoints.uncommitted_batch(checkpoint) is not None or has_new_input(settings, stage):
            reports.append(run_stage_once(spark, settings, stage, record_progress=False))
    return reports


def run_reconcile(
    spark: SparkSession, settings: Settings, dates: Sequence[date] = (), wait_seconds: float = 0.0
) -> list[StageReport]:
    """Fold every late event not folded yet into gold, then (``dates``) repair those event dates; another
    reconcile running: wait up to ``wait_seconds`` for it (a scheduled run), or refuse (0: the CLI).

    Late events are read as a stream with its own checkpoint, so each is folded exactly once, and a
    reconcile with nothing new writes nothing. Both steps hold the gold lock while they read and write
    gold, so they interleave safely with a running window stream.
    """
    prepare(spark, settings)
    reports = [run_stage_once(spark, settings, reconcile_stage(settings), wait_seconds=wait_seconds)]
    if dates:
        report = StageReport("reconcile_dates")
        with hold_gold(settings, "a reconcile of dates"):
            started = time.monotonic()
            report.add(repair_dates(spark, settings, dates), time.monotonic() - started)
        reports.append(report)
    return reports


def broker_down(settings: Settings, stage: Stage, notices: Notices) -> bool:
    """Whether the Kafka broker does not answer now (told once each way through ``notices``)."""
    try:
        partition_lag(settings, checkpoint_dir(settings, stage))
    except Exception as error:
        notices.broker(settings, error)
        return True
    notices.broker(settings, None)
    return False


def _has_work(settings: Settings, stage: Stage) -> bool:
    """Whether a stage's query would run a batch now: new input, or a batch a crash left to re-run."""
    checkpoint = checkpoint_dir(settings, stage)
    return checkpoints.uncommitted_batch(checkpoint) is not None or has_new_input(settings, stage)


def has_new_input(settings: Settings, stage: Stage) -> bool:
    """Whether the stage's source holds anything its checkpoint has not taken (files, or the broker's end
    offsets against the checkpoint's; no JVM)."""
    checkpoint = checkpoint_dir(settings, stage)
    if stage.source == "kafka":
        return sum(partition_lag(settings, checkpoint).values()) > 0
    if stage.source == "landing":
        return bool(pending_landing_files(settings, checkpoint))
    return bool(pending_source_commits(settings.tables_dir / stage.source.replace(".", "/"), checkpoint))


def drain_stage(
    spark: SparkSession,
    settings: Settings,
    stage: Stage,
    report: StageReport,
    stop: threading.Event,
    settle: bool = True,
) -> None:
    """Run one stage's query over everything available now; stop it early when ``stop`` is set. ``settle``:
    as ``start_stage``'s."""
    checkpoint = checkpoint_dir(settings, stage)
    if starts_after_newest(settings, stage):
        return
    rerun = checkpoints.uncommitted_batch(checkpoint)
    error = _await(start_stage(spark, settings, stage, report, settle=settle), stop)
    if error is not None and rerun is not None and checkpoints.is_committed(checkpoint, rerun):
        # Spark's Kafka source fails the progress report of a batch re-run after a crash (its latest offsets
        # were never fetched in this run: a NullPointerException in KafkaMicroBatchStream.metrics), after
        # the batch itself was written and committed. Starting again goes on from there.
        error = _await(start_stage(spark, settings, stage, report, settle=settle), stop)
    if error is not None:
        raise error


def starts_after_newest(settings: Settings, stage: Stage) -> bool:
    """A stream of a Delta table reset by a replay to start after its source's swap commit, with no commit
    after that yet: it has nothing to read, and Delta refuses a starting version that does not exist."""
    start = checkpoints.starting_version(settings.checkpoints_dir, stage.name)
    if start is None or stage.source in SOURCES or checkpoints.committed_batches(checkpoint_dir(settings, stage)):
        return False
    return start > latest_version(settings.tables_dir / stage.source.replace(".", "/") / "_delta_log")


def _await(query: StreamingQuery, stop: threading.Event) -> Exception | None:
    """Wait for the query to end (stopping it when ``stop`` is set); its failure, if it failed."""
    try:
        while not query.awaitTermination(0.2):
            if stop.is_set():
                query.stop()
                break
    except StreamingQueryException:
        pass  # awaitTermination raises the query's failure; it is returned below
    return query.exception()
