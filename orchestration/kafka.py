"""Kafka in Dagster: a sensor that runs the bounded ingestion (``lakehouse_once`` with bronze reading the
topic) whenever the topic holds messages the Kafka stream has not read; the consumer lag each run leaves
is metadata of ``bronze/events`` (see ``orchestration.pipeline``). Where the lakehouse lives (the Kafka
stream's checkpoint) comes from the ``lakehouse`` resource, the servers and topic from the ``kafka`` one."""

import dagster as dg

from orchestration.names import named, view
from orchestration.pipeline import CARRY_OP, STREAMS_JOB
from orchestration.resources import KafkaSourceResource, LakehouseResource
from runtime.checkpoints import KAFKA_STAGE, consumed_offsets
from runtime.sources.kafka_client import topics
from warehouse.settings import Settings

#: The run config that makes ``lakehouse_once`` read bronze's lines from Kafka.
KAFKA_RUN_CONFIG = {"ops": {CARRY_OP: {"config": {"source": "kafka"}}}}


def kafka_run_config(settings: Settings) -> dict:
    """The run config that makes the pipeline's streams job read bronze's lines from Kafka."""
    return {"ops": {named(settings, CARRY_OP): {"config": {"source": "kafka"}}}}


def build_defs(settings: Settings) -> dg.Definitions:
    """``kafka_sensor``: new messages in the topic → one run of ``lakehouse_once`` reading Kafka. Nothing of it
    depends on ``settings`` yet: at each tick it reads them from its resources."""

    # The streams job is orchestration.pipeline's: named here, resolved when the definitions are merged.
    built_for = settings

    @dg.sensor(
        name=named(settings, "kafka_sensor"),
        job_name=named(settings, STREAMS_JOB),
        minimum_interval_seconds=30,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="New messages in the Kafka topic → one run of the streams reading Kafka. Cursor: end offsets seen.",
    )
    def kafka_sensor(
        context: dg.SensorEvaluationContext, lakehouse: LakehouseResource, kafka: KafkaSourceResource
    ) -> dg.SensorResult | dg.SkipReason:
        """Asks the broker for the topic's end offsets and compares them with the Kafka stream's checkpoint;
        the cursor is the end offsets of the last run requested (``<partition>:<offset>,…``), so a run is
        asked for once per new position, not on every tick while it runs."""
        # The kafka resource names the first pipeline's topic; another pipeline reads its spec's.
        settings = kafka.apply(lakehouse.settings()) if built_for.pipeline is None else view(lakehouse, built_for)
        servers, topic = settings.kafka.bootstrap_servers, settings.kafka.topic
        try:
            (state,) = [t for t in topics(settings, timeout=10) if t.name == topic] or [None]
        except Exception as error:
            return dg.SkipReason(f"Kafka at {servers} is not reachable ({type(error).__name__})")
        if state is None:
            return dg.SkipReason(f"topic {topic} does not exist at {servers}")
        consumed = consumed_offsets(settings.checkpoints_dir / KAFKA_STAGE)
        behind = sum(max(0, p.latest - consumed.get(p.partition, p.earliest)) for p in state.partitions)
        cursor = ",".join(f"{p.partition}:{p.latest}" for p in state.partitions)
        if not behind or cursor == context.cursor:
            return dg.SkipReason(f"no new messages in {settings.kafka.topic} (end offsets {cursor})")
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=f"kafka:{settings.kafka.topic}:{cursor}",
                    run_config=kafka_run_config(built_for),
                    tags={"lakehouse/source": "kafka", "lakehouse/kafka_lag": str(behind)},
                )
            ],
            cursor=cursor,
        )

    return dg.Definitions(sensors=[kafka_sensor])
