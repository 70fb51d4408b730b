"""The lakehouse's own Kafka clients (confluent-kafka): the topic's offsets, creating it, producing lines.

Spark reads the topic with its own connector (``runtime.sources.kafka``); these clients answer what the
runtime asks without a JVM (how far behind a stream is, whether the broker answers) and send what
``lakehouse generate --to kafka`` produces. Client options (``LAKEHOUSE_KAFKA_OPTION_*``) may hold secrets
and are never printed.
"""

import base64
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from warehouse.settings import Settings


class BrokerError(RuntimeError):
    """The broker cannot be started, reached or stopped; the message is one line saying why."""


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition of a topic: the oldest offset still retained and the next offset to be written."""

    partition: int
    earliest: int
    latest: int


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: list[PartitionOffsets] = field(default_factory=list)

    @property
    def messages(self) -> int:
        """Messages retained now (end minus earliest offset, summed over partitions)."""
        return sum(p.latest - p.earliest for p in self.partitions)


#: librdkafka logs every failed connection to stderr; our clients log here instead, and the commands
#: say what went wrong in one line of their own.
_CLIENT_LOG = logging.getLogger("lakehouse.kafka.client")
_CLIENT_LOG.addHandler(logging.NullHandler())
_CLIENT_LOG.propagate = False


def client_config(settings: Settings) -> dict[str, object]:
    """librdkafka settings for the lakehouse's own admin and producer clients (options included)."""
    servers = settings.kafka.bootstrap_servers
    return {"bootstrap.servers": servers, **dict(settings.kafka.options), "logger": _CLIENT_LOG}


def ensure_topic(settings: Settings) -> None:
    """Create the topic with ``LAKEHOUSE_KAFKA_PARTITIONS`` partitions unless it exists."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client_config(settings))
    if settings.kafka.topic in admin.list_topics(timeout=10).topics:
        return
    futures = admin.create_topics([NewTopic(settings.kafka.topic, settings.kafka.partitions, 1)])
    for future in futures.values():
        try:
            future.result(timeout=30)
        except Exception as error:
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise BrokerError(f"could not create topic {settings.kafka.topic}: {error}") from None


def topics(settings: Settings, timeout: float = 10.0) -> list[TopicState]:
    """Every topic the cluster serves (internal ones left out) with each partition's earliest and end offsets."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient(client_config(settings))
    metadata = admin.list_topics(timeout=timeout)
    states = []
    for name in sorted(t for t in metadata.topics if not t.startswith("__")):
        partitions = sorted(metadata.topics[name].partitions)
        offsets = {}
        for spec_name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):
            request = {TopicPartition(name, p): spec for p in partitions}
            for tp, future in admin.list_offsets(request, request_timeout=timeout).items():
                offsets.setdefault(tp.partition, {})[spec_name] = future.result().offset
        states.append(
            TopicState(name, [PartitionOffsets(p, offsets[p]["earliest"], offsets[p]["latest"]) for p in partitions])
        )
    return states


def topic_id(settings: Settings, timeout: float = 10.0) -> str | None:
    """The broker's id of the configured topic (Kafka's topic ids, KIP-516): a topic deleted and created
    again under the same name gets a new one. None when the topic does not exist; raises when the broker
    cannot be reached."""
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(settings))
    (future,) = admin.describe_topics(TopicCollection([settings.kafka.topic]), request_timeout=timeout).values()
    try:
        uuid = future.result().topic_id
    except KafkaException as error:
        if "UNKNOWN_TOPIC" in str(error):
            return None
        raise
    # As Kafka's own tools print it: the 128 bits in URL-safe base64 without padding.
    bits = [uuid.get_most_significant_bits(), uuid.get_least_significant_bits()]
    raw = b"".join((bit & (2**64 - 1)).to_bytes(8, "big") for bit in bits)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def message_key(line: str) -> bytes | None:
    """The key a line is produced with: its ``user_id`` (so one user's events keep their order in one
    partition), or none when the line has no string ``user_id`` (invalid lines are sent too)."""
    try:
        user = json.loads(line).get("user_id")
    except (ValueError, AttributeError):
        return None
    return user.encode() if isinstance(user, str) else None


def produce_lines(
    settings: Settings,
    lines: Iterable[str],
    rate: float = 0.0,
    on_sent: Callable[[int], None] | None = None,
) -> int:
    """Send each line as one message of the topic, keyed by ``user_id``, at most ``rate`` messages per
    second (0: as fast as the broker takes them); waits until every message is acknowledged.

    Raises when a message could not be delivered (the producer retries inside its delivery timeout).
    """
    from confluent_kafka import KafkaException, Producer

    producer = Producer({**client_config(settings), "linger.ms": 20, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    started = time.monotonic()
    sent = 0
    for line in lines:
        while True:
            try:
                producer.produce(settings.kafka.topic, line.encode(), message_key(line), on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let the broker catch up
                producer.poll(0.1)
            except KafkaException as error:
                raise RuntimeError(f"could not send to Kafka at {settings.kafka.bootstrap_servers}: {error}") from None
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            if on_sent:
                on_sent(1000)
            if failures:
                break
        if rate > 0 and sent % max(1, int(rate / 50)) == 0:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    remaining = producer.flush(settings.kafka.broker_timeout_seconds)
    if on_sent and sent % 1000:
        on_sent(sent % 1000)
    if failures or remaining:
        reason = failures[0] if failures else f"{remaining} messages still unacknowledged"
        raise RuntimeError(f"could not deliver to Kafka at {settings.kafka.bootstrap_servers}: {reason}")
    return sent


def check_reachable(settings: Settings) -> None:
    """Stop with one line unless the broker answers and holds the topic (before any JVM starts)."""
    servers, topic = settings.kafka.bootstrap_servers, settings.kafka.topic
    try:
        names = {state.name for state in topics(settings, timeout=10)}
    except Exception as error:
        raise RuntimeError(
            f"Kafka at {servers} is not reachable ({type(error).__name__}); "
            "`lakehouse kafka up` starts the local broker"
        ) from None
    if topic not in names:
        raise RuntimeError(f"Kafka at {servers} has no topic {topic}; `lakehouse kafka up` creates it")
