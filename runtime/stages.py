"""The pipeline's streams, by name: where each reads and which batch writer it runs.

``source → bronze.events → silver.* → gold windows``, then the followers that read silver on their own
(orders ⋈ payments, fraud alerts, distinct URLs, each when ``LAKEHOUSE_GOLD_OUTPUTS`` keeps it), and the
reconcile stream over ``silver.late_events``. Each stage's name is also its checkpoint folder's, its
lock's and its progress rows' ``stream``. The batch writers themselves are ``transforms``' plain
functions; a stage only adds what the runtime knows (its checkpoint).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from runtime import checkpoints
from runtime.carry import carry_to_gold
from runtime.checkpoints import (
    FRAUD_STAGE,
    KAFKA_STAGE,
    LANDING_STAGE,
    ORDER_PAYMENTS_STAGE,
    RECONCILE_STAGE,
    SILVER_STAGE,
    UNIQUE_URLS_STAGE,
    checkpoint_dir,
    derived_stage_name,
    windows_stage_name,
)
from runtime.sources.kafka import land_kafka_messages, read_kafka
from runtime.sources.landing import batch_has_glob_names, read_landing, report_files_gone
from transforms.bronze import land_lines
from transforms.gold.derived import derive_windows, derived_outputs
from transforms.gold.tumbling import update_windows
from transforms.joins import pair_orders_with_payments, record_order_payments
from transforms.keyed_state import distinct_url_counts, fraud_alerts, write_fraud_alerts, write_unique_urls
from transforms.reconcile import fold_late_events
from transforms.silver import canonical, refine_events
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_FRAUD_ALERTS,
    GOLD_UNIQUE_URLS,
    OPS_WATERMARKS,
    ORDER_PAYMENTS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    Table,
    all_tables,
    corrections_log,
    events_table,
    gold_output_tables,
    late_table,
    tumbling_table,
)
from warehouse.locks import DERIVED_LOCK, GOLD_LOCK
from warehouse.settings import Settings

BatchFunction = Callable[[DataFrame, int, Settings, str], dict[str, float]]

#: Where bronze's lines come from: the landing folder (the embedded default) or a Kafka topic.
SOURCES = ("landing", "kafka")

#: Delta sources admit whole commits in practice: a batch ending part-way through a commit would leave the
#: gold stream unable to say which silver it reflects (and a split bronze commit could reorder arrivals).
_DELTA_SOURCE_MAX_FILES = 1_000_000


@dataclass(frozen=True)
class Stage:
    """One arrow of the pipeline: where it reads, what it does with each micro-batch.

    ``locks`` name the locks each batch holds while it runs (``gold`` for every read-modify-write of the
    tumbling table, ``gold_derived`` of the derived windows), taken in that order.
    """

    name: str
    read: Callable[[SparkSession, Settings], DataFrame]
    process: BatchFunction
    locks: tuple[str, ...] = ()
    #: What it reads: ``landing``, ``kafka`` or the Delta table's name.
    source: str = "landing"
    #: Whether its batches carry silver and the windows (a source stream's do): it locks their names too.
    carries: bool = False
    #: Whether a run of it ends with Spark's no-data batch, which fires the timers and evicts the state the
    #: run's last data batch moved the watermark past. A stage whose timers only evict state, and whose
    #: verdicts bound their own spans of event time, leaves that to its next data batch: the same eviction
    #: one run later, and one batch's fixed cost fewer each run. (A continuous run's followers never settle:
    #: their next run comes with the next input; ``runtime.followers``.)
    settles: bool = True
    #: Whether its query keeps Spark state (a stream-stream join, keyed state): it starts on RocksDB with
    #: ``LAKEHOUSE_STATE_PARTITIONS`` state partitions (``runtime.runner.start_stage``).
    keeps_state: bool = False

    def lock_names(self, settings: Settings) -> list[str]:
        """What a run of the stage locks: its own name, and those of the stages its batches carry."""
        return [self.name, SILVER_STAGE, windows_stage_name(settings)] if self.carries else [self.name]


def _read_delta(table_name: str, stage_name: str) -> Callable[[SparkSession, Settings], DataFrame]:
    def read(spark: SparkSession, settings: Settings) -> DataFrame:
        table = {t.name: t for t in all_tables(settings)}[table_name]
        # Both sources are append-only tables, so a plain Delta stream sees every row exactly once.
        reader = spark.readStream.format("delta").option("maxFilesPerTrigger", _DELTA_SOURCE_MAX_FILES)
        start = checkpoints.starting_version(settings.checkpoints_dir, stage_name)
        if start is not None:
            reader = reader.option("startingVersion", start)
        return reader.load(str(table.path(settings)))

    return read


def _land_landing_lines(lines: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    checkpoint = checkpoint_dir(settings, LANDING_STAGE)
    reread = batch_has_glob_names(checkpoint, batch_id)
    figures = land_lines(lines, batch_id, settings, writer_id, reread_positions=reread)
    return report_files_gone(settings, checkpoint, batch_id, lines, figures)


def _carry_landing_lines(lines: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    checkpoint = checkpoint_dir(settings, LANDING_STAGE)
    if batch_has_glob_names(checkpoint, batch_id):
        # Spark read the batch's other files more than once (SPARK-58518); a line is received once.
        lines = lines.dropDuplicates(["source_file", "source_line"])
    figures = carry_to_gold(lines, batch_id, settings, writer_id, LANDING_STAGE, checkpoint)
    return report_files_gone(settings, checkpoint, batch_id, lines, figures)


def _land_kafka_messages(messages: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    return land_kafka_messages(messages, batch_id, settings, writer_id, checkpoint_dir(settings, KAFKA_STAGE))


def _carry_kafka_messages(messages: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    checkpoint = checkpoint_dir(settings, KAFKA_STAGE)

    def carry(lines: DataFrame, batch: int, s: Settings, writer: str) -> dict[str, float]:
        return carry_to_gold(lines, batch, s, writer, KAFKA_STAGE, checkpoint)

    return land_kafka_messages(messages, batch_id, settings, writer_id, checkpoint, land=carry)


def source_stage(source: str, carry: bool = True) -> Stage:
    """The stream from ``source``; each source has its own stream and checkpoint. With ``carry`` (the
    pipeline's), each of its batches goes on through silver to the tumbling table (``runtime.carry``);
    without, it only lands lines in bronze (a replay's re-read of the topic)."""
    if source == "landing":
        process = _carry_landing_lines if carry else _land_landing_lines
        return Stage(LANDING_STAGE, read_landing, process, carries=carry)
    if source == "kafka":
        process = _carry_kafka_messages if carry else _land_kafka_messages
        return Stage(KAFKA_STAGE, read_kafka, process, source="kafka", carries=carry)
    raise ValueError(f"the source must be one of {', '.join(SOURCES)}, got {source!r}")


def _silver_stage() -> Stage:
    return Stage(SILVER_STAGE, _read_delta(BRONZE_EVENTS.name, SILVER_STAGE), refine_events, source=BRONZE_EVENTS.name)


def _windows_stage(settings: Settings) -> Stage:
    name = windows_stage_name(settings)

    def windows(df: DataFrame, batch_id: int, s: Settings, writer: str) -> dict[str, float]:
        silver_version = checkpoints.completed_source_version(checkpoint_dir(s, name), batch_id)
        return update_windows(canonical(df, s.spec), batch_id, s, writer, name, silver_version)

    return Stage(name, _read_delta(SILVER_EVENTS.name, name), windows, (GOLD_LOCK,), SILVER_EVENTS.name)


def derived_stage(settings: Settings) -> Stage:
    """ops.watermarks (the window stream's batches) → hopping, sessions and global windows."""
    name = derived_stage_name(settings)
    windows_query = windows_stage_name(settings)

    def derive(marks: DataFrame, batch_id: int, s: Settings, writer: str) -> dict[str, float]:
        return derive_windows(marks, batch_id, s, writer, windows_query)

    return Stage(name, _read_delta(OPS_WATERMARKS.name, name), derive, (DERIVED_LOCK,), OPS_WATERMARKS.name)


def _read_order_payments(spark: SparkSession, settings: Settings) -> DataFrame:
    """Orders ⋈ payments: two streaming reads of silver.events in one query, one per side of the join
    (Spark would make a self-join of one read into two sources anyway), each side with its own watermark."""
    read = _read_delta(SILVER_EVENTS.name, ORDER_PAYMENTS_STAGE)
    return pair_orders_with_payments(read(spark, settings), read(spark, settings), settings)


def _record_order_payments(pairs: DataFrame, batch_id: int, settings: Settings, writer_id: str) -> dict[str, float]:
    watermark = checkpoints.batch_watermark(checkpoint_dir(settings, ORDER_PAYMENTS_STAGE), batch_id)
    return record_order_payments(pairs, batch_id, settings, writer_id, watermark)


def _keyed(
    stage_name: str, operator: Callable[[DataFrame, Settings], DataFrame]
) -> Callable[[SparkSession, Settings], DataFrame]:
    """Read silver.events as a stream and apply a keyed stateful operator; the batches are its output."""
    read_silver = _read_delta(SILVER_EVENTS.name, stage_name)
    return lambda spark, settings: operator(read_silver(spark, settings), settings)


def keyed_stages(settings: Settings) -> list[Stage]:
    """Fraud alerts (first: low latency is their point), then distinct URLs, each when the home keeps it
    (``LAKEHOUSE_GOLD_OUTPUTS``); neither touches the windows gold, so they take no gold lock (each table
    has one writer, its stream)."""
    keyed = []
    if settings.keeps("fraud_alerts"):
        keyed.append(
            Stage(
                FRAUD_STAGE,
                _keyed(FRAUD_STAGE, fraud_alerts),
                write_fraud_alerts,
                source=SILVER_EVENTS.name,
                # Its timers only evict minutes past the hour the rules look back (fraud_rules: every rule
                # names its own span), so a run ends with its data: no alert waits for the eviction.
                settles=False,
                keeps_state=True,
            )
        )
    if settings.keeps("unique_urls"):
        keyed.append(
            Stage(
                UNIQUE_URLS_STAGE,
                _keyed(UNIQUE_URLS_STAGE, distinct_url_counts),
                write_unique_urls,
                source=SILVER_EVENTS.name,
                keeps_state=True,
            )
        )
    return keyed


@dataclass(frozen=True)
class Pipeline:
    """The streams of one run, by role; iterating gives the streams that run, in the order a cycle runs them.

    ``silver`` and ``windows`` are carried by the source stream's batches (``runtime.carry``): they do not
    run as streams of their own, but keep their names (locks, the ledgers of their batch numbers) and run
    as streams in a replay's staging and to finish what an older version of the lakehouse left unread.
    """

    source: Stage
    silver: Stage
    windows: Stage
    #: Streams beside the critical path: fraud alerts, the derived windows, orders ⋈ payments, distinct URLs
    #: (each when kept).
    followers: tuple[Stage, ...]

    @property
    def derived(self) -> Stage | None:
        """The derived windows' stream, when the home keeps any of them."""
        return next((stage for stage in self.followers if stage.source == OPS_WATERMARKS.name), None)

    @property
    def downstream(self) -> tuple[Stage, ...]:
        """Every stream after bronze."""
        return (self.silver, self.windows, *self.followers)

    def __iter__(self) -> Iterator[Stage]:
        return iter((self.source, *self.followers))

    @property
    def names(self) -> list[str]:
        """Every stream's name, the carried ones included (what a run locks)."""
        return [stage.name for stage in (self.source, self.silver, self.windows, *self.followers)]


def stages(settings: Settings, source: str = "landing") -> Pipeline:
    """The pipeline's streams: from ``source`` into bronze, then silver, then the gold windows, then the
    followers over silver that ``LAKEHOUSE_GOLD_OUTPUTS`` keeps."""
    keyed = keyed_stages(settings)
    # Fraud alerts first: low latency is their point. The join before the derived windows: a plain stream-stream
    # join is the twin's quickest follower, and the join's batch is the shorter of the two (decision 81).
    followers = [stage for stage in keyed if stage.name == FRAUD_STAGE]
    if settings.keeps("order_payments"):
        followers.append(
            Stage(
                ORDER_PAYMENTS_STAGE,
                _read_order_payments,
                _record_order_payments,
                source=SILVER_EVENTS.name,
                keeps_state=True,
            )
        )
    if derived_outputs(settings):
        followers.append(derived_stage(settings))
    followers.extend(stage for stage in keyed if stage.name != FRAUD_STAGE)
    return Pipeline(source_stage(source), _silver_stage(), _windows_stage(settings), tuple(followers))


def reconcile_stage(settings: Settings) -> Stage:
    """Late events → gold: each batch of newly late events recomputes its windows from silver."""
    return Stage(
        RECONCILE_STAGE,
        _read_delta(SILVER_LATE_EVENTS.name, RECONCILE_STAGE),
        fold_late_events,
        (GOLD_LOCK, DERIVED_LOCK),
        SILVER_LATE_EVENTS.name,
    )


def stage_named(settings: Settings, name: str) -> Stage:
    pipeline = stages(settings)
    for stage in [*pipeline, pipeline.silver, pipeline.windows, source_stage("kafka"), reconcile_stage(settings)]:
        if stage.name == name:
            return stage
    raise KeyError(name)


def delta_readers(settings: Settings, streams: list[str]) -> dict[str, list[str]]:
    """Table name → the streams among ``streams`` that read it as a Delta stream."""
    found: dict[str, list[str]] = {}
    for stream in streams:
        try:
            found.setdefault(stage_named(settings, stream).source, []).append(stream)
        except KeyError:
            continue
    return found


def stream_outputs(settings: Settings) -> dict[str, tuple[Table, ...]]:
    """Stream name → the tables its batches write (kept outputs only): which assets a stream's progress
    rows (``ops.stream_progress.stream``) speak for."""
    kept = gold_output_tables(settings)
    windows = [tumbling_table(settings), corrections_log(settings)]
    if settings.keeps("firings"):
        windows.append(kept["firings"])
    derived = tuple(kept[name] for name in derived_outputs(settings))
    pipeline = stages(settings)
    silver = (events_table(settings), SILVER_QUARANTINE, SILVER_DUPLICATES)
    # The source streams carry their batches through silver to the tumbling table (``runtime.carry``).
    carried = (BRONZE_EVENTS, *silver, *windows, late_table(settings))
    outputs: dict[str, tuple[Table, ...]] = {source_stage(source).name: carried for source in SOURCES}
    # As streams of their own they run only in a replay's staging or to finish an older home's backlog.
    outputs[pipeline.silver.name] = silver
    outputs[pipeline.windows.name] = (*windows, late_table(settings))
    followers = {
        ORDER_PAYMENTS_STAGE: (ORDER_PAYMENTS,),
        FRAUD_STAGE: (GOLD_FRAUD_ALERTS,),
        UNIQUE_URLS_STAGE: (GOLD_UNIQUE_URLS,),
        derived_stage_name(settings): derived,
    }
    for stage in pipeline.followers:
        outputs[stage.name] = followers[stage.name]
    outputs[RECONCILE_STAGE] = (*windows, *derived)
    return outputs
