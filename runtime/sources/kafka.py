"""Sources: a Kafka topic, read as a stream of raw lines (one message value each) with their position.

The message value is the raw line and follows the same event rules as a landing-file line; the key
(the producer keys by ``user_id``) and the Kafka timestamp are kept in bronze but never decide anything:
event time comes from the line only.
"""

from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from runtime.checkpoints import KAFKA_STAGE, checkpoint_dir, consumed_offsets
from runtime.faults import Fault
from runtime.sources.kafka_client import topic_id, topics
from transforms.bronze import land_messages
from transforms.events import line_text
from warehouse.settings import Settings
from warehouse.storage import Location, ensure_folder, names, write_atomically


def kafka_options(settings: Settings) -> dict[str, str]:
    """Spark Kafka source options: servers, topic, where a new checkpoint starts, a batch's size bound, and
    every ``LAKEHOUSE_KAFKA_OPTION_*`` client setting (SASL, TLS) as ``kafka.<name>``."""
    kafka = settings.kafka
    return {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "subscribe": kafka.topic,
        "startingOffsets": kafka.starting_offsets,
        "maxOffsetsPerTrigger": str(kafka.max_offsets_per_trigger),
        # Offsets deleted by retention before the stream read them are lost data: stop and say so.
        "failOnDataLoss": "true",
        **{f"kafka.{name}": value for name, value in kafka.options},
    }


def read_kafka(spark: SparkSession, settings: Settings) -> DataFrame:
    """Stream every message of the topic, one row per message, in offset order within each partition.

    Time semantics: none yet. Offsets are the arrival order within a partition; the checkpoint holds the
    offsets each micro-batch read (written before the batch runs), so a batch re-run after a crash reads
    exactly the same messages. ``kafka_timestamp`` is the producer's or the broker's clock, not event time.
    """
    pin_topic(settings, checkpoint_dir(settings, KAFKA_STAGE))
    reader = spark.readStream.format("kafka")
    for name, value in kafka_options(settings).items():
        reader = reader.option(name, value)
    raw, raw_bytes = line_text(F.col("value"))
    return reader.load().select(
        raw.alias("raw"),
        F.lit("kafka").alias("source"),
        F.lit(None).cast("string").alias("source_file"),
        F.lit(None).cast("long").alias("source_line"),
        F.lit(None).cast("timestamp").alias("file_modified_at"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("key").cast("string").alias("kafka_key"),
        F.lit(None).cast("string").alias("kafka_topic_id"),  # the pinned id, set per batch
        raw_bytes.alias("raw_bytes"),
    )


def land_kafka_messages(
    messages: DataFrame,
    batch_id: int,
    settings: Settings,
    writer_id: str,
    checkpoint: Path,
    land: Callable[[DataFrame, int, Settings, str], dict[str, float]] = land_messages,
) -> dict[str, float]:
    """Append one micro-batch of messages to bronze exactly once, and measure the consumer lag it leaves:
    per partition, the broker's end offset minus the end offset of this batch (from the checkpoint's
    offset log, so no second read of the messages). Lag figures are left out when the broker does not
    answer right then; the batch itself is written either way."""
    pinned = pin_topic(settings, checkpoint)
    figures = land(messages.withColumn("kafka_topic_id", F.lit(pinned)), batch_id, settings, writer_id)
    try:
        lag = partition_lag(settings, checkpoint, batch_id)
    except Exception:
        return figures
    figures["kafka_lag"] = float(sum(lag.values()))
    figures.update({f"kafka_lag_partition_{partition}": float(n) for partition, n in sorted(lag.items())})
    return figures


#: In a Kafka stream's checkpoint: the id of the topic its offsets belong to.
TOPIC_ID_FILE = "topic-id"


def pinned_topic_id(checkpoint: Location) -> str | None:
    """The topic id a Kafka stream's checkpoint was pinned to; None before its first start (or when a
    version before topic ids wrote it)."""
    return (checkpoint / TOPIC_ID_FILE).read_text().strip() if TOPIC_ID_FILE in names(checkpoint) else None


def pin_topic(settings: Settings, checkpoint: Location) -> str | None:
    """Check that the topic is the one the stream's offsets belong to, and pin a checkpoint that has no topic
    yet to the current one; the pinned id (None when the broker does not answer now: the stream then waits
    out the outage, and the next batch checks).

    Raises :class:`Fault` when the topic was deleted and created again since: its offsets start over, so the
    old positions would skip the new topic's first messages (or, fewer, stop the stream on Spark's data-loss
    check) and bronze would hold two messages at one position."""
    try:
        current = topic_id(settings, timeout=10)
    except Exception:
        return pinned_topic_id(checkpoint)
    pinned = pinned_topic_id(checkpoint)
    if pinned is None and current is not None:
        ensure_folder(checkpoint)
        write_atomically(checkpoint / TOPIC_ID_FILE, current + "\n")
        return current
    if current is not None and pinned != current:
        raise Fault(
            f"the Kafka topic {settings.kafka.topic} was deleted and created again (its id is {current}, the "
            f"stream's offsets are of {pinned}); read on, they would skip or misplace the new topic's messages, "
            "so the stream does not start. Bronze keeps the old topic's messages; read the new topic from its "
            "start with `lakehouse replay --source kafka`"
        )
    return pinned


def partition_lag(settings: Settings, checkpoint: Path, batch_id: int | None = None) -> dict[int, int]:
    """partition → messages in the topic the Kafka stream has not read yet (end offset minus what its
    checkpoint says it consumed; a stream that has not started counts from the earliest retained offset).
    Asks the broker; raises when it cannot be reached."""
    consumed = consumed_offsets(checkpoint, batch_id)
    (state,) = [t for t in topics(settings, timeout=5) if t.name == settings.kafka.topic] or [None]
    if state is None:
        return {}
    return {p.partition: max(0, p.latest - consumed.get(p.partition, p.earliest)) for p in state.partitions}


def retention_gaps(settings: Settings, held: dict[int, tuple[int, int]]) -> list[str]:
    """What a re-read of the topic from its earliest retained offsets would miss, one phrase per
    partition: ``held`` is partition → (first, last) offset bronze holds. A partition misses messages when
    retention (or a delete-records) moved its earliest offset past ``first``, or when its end offset is
    at or below ``last`` (the topic was recreated). Asks the broker; raises when it cannot be reached."""
    topic = settings.kafka.topic
    (state,) = [t for t in topics(settings, timeout=10) if t.name == topic] or [None]
    if state is None:
        return [f"the topic {topic} does not exist"] if held else []
    retained = {p.partition: (p.earliest, p.latest) for p in state.partitions}
    gaps = []
    for partition, (first, last) in sorted(held.items()):
        earliest, end = retained.get(partition, (0, 0))
        if earliest > first:
            gaps.append(
                f"partition {partition}: offsets {first:,}..{earliest - 1:,} are gone (earliest retained {earliest:,})"
            )
        if end <= last:
            gaps.append(f"partition {partition}: bronze holds offsets up to {last:,} but the topic ends at {end:,}")
    return gaps
