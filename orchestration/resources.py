"""Dagster resources: the lakehouse's settings and its one Spark+Delta session (from dagster-pyspark)."""

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
