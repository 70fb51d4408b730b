"""Dagster resources: the lakehouse's settings, its one Spark+Delta session (from dagster-pyspark), and the
Kafka source."""

from dataclasses import replace
from pathlib import Path

import dagster as dg
from dagster_pyspark import PySparkResource
from pyspark.sql import SparkSession

from warehouse.session import spark_conf
from warehouse.settings import Settings


class LakehouseResource(dg.ConfigurableResource):
    """Settings from ``LAKEHOUSE_*`` (``home`` overrides LAKEHOUSE_HOME) and the Spark session built on them.

    The session comes from ``pyspark`` (dagster-pyspark's resource), configured by
    ``warehouse.session.spark_conf``: the CLI and Dagster share one source of Spark configuration.
    """

    pyspark: PySparkResource
    home: str | None = None

    def settings(self) -> Settings:
        settings = Settings.from_env()
        if self.home:
            settings = replace(settings, home=Path(self.home).expanduser().resolve())
        return settings

    def spark(self) -> SparkSession:
        self.settings().ensure_home()
        return self.pyspark.spark_session


def lakehouse_resource(home: str | None = None) -> LakehouseResource:
    """The resource for a home (default: LAKEHOUSE_HOME), with Spark configured from the same settings."""
    settings = Settings.from_env()
    if home:
        settings = replace(settings, home=Path(home).expanduser().resolve())
    return LakehouseResource(pyspark=PySparkResource(spark_config=spark_conf(settings)), home=home)


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


def lakehouse_resources(home: str | None = None) -> dict[str, dg.ConfigurableResource]:
    """Every resource the code location's assets and jobs use, for a home (default: LAKEHOUSE_HOME)."""
    return {"lakehouse": lakehouse_resource(home), "kafka": KafkaSourceResource()}
