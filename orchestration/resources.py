"""Dagster resources: the lakehouse's settings, its one Spark+Delta session (from dagster-pyspark), and the
Kafka source."""

from dataclasses import replace

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession

from warehouse.session import spark_conf
from warehouse.settings import Settings
from warehouse.storage import hand_credentials_to_executors


class LakehouseResource(dg.ConfigurableResource):
    """The code location's one ``Settings`` (read once, by ``orchestration.definitions``) and the Spark
    session built on them.

    The session comes from dagster-pyspark's lazy resource, configured by ``warehouse.session.spark_conf``
    from the same settings: the CLI and Dagster share one source of Spark configuration. It starts the first
    time a step asks for it, so a sensor, which takes this resource only to know where the lakehouse lives,
    never starts a JVM.
    """

    pyspark: LazyPySparkResource
    #: A plain value, not config: the ``Settings`` the definitions were built from.
    lakehouse_settings: dg.ResourceDependency[Settings]

    def settings(self) -> Settings:
        return self.lakehouse_settings

    def spark(self) -> SparkSession:
        self.settings().ensure_home()
        spark = self.pyspark.spark_session
        hand_credentials_to_executors(spark, self.settings())
        return spark


def lakehouse_resource(settings: Settings) -> LakehouseResource:
    """The resource for these settings, with Spark configured from the same settings."""
    pyspark = LazyPySparkResource(spark_config=spark_conf(settings))
    return LakehouseResource(pyspark=pyspark, lakehouse_settings=settings)


class KafkaSourceResource(dg.ConfigurableResource):
    """Where the Kafka source reads: each field left unset keeps its ``LAKEHOUSE_KAFKA_*`` setting.

    Client options (SASL, TLS, …) are not configurable here on purpose: they may hold secrets and come
    only from the environment (``LAKEHOUSE_KAFKA_OPTION_*``).
    """

    bootstrap_servers: str | None = None
    topic: str | None = None
    max_offsets_per_trigger: int | None = None
    starting_offsets: str | None = None

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with this resource's fields in place of the environment's."""
        overrides = {
            name: value
            for name in ("bootstrap_servers", "topic", "max_offsets_per_trigger", "starting_offsets")
            if (value := getattr(self, name)) is not None
        }
        return replace(settings, kafka=replace(settings.kafka, **overrides)) if overrides else settings


def lakehouse_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """Every resource the code location's assets, jobs and sensors use, for these settings."""
    return {"lakehouse": lakehouse_resource(settings), "kafka": KafkaSourceResource()}
