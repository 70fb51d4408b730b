"""Dagster resources: the lakehouse's settings and its one Spark+Delta session."""

from dataclasses import replace
from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from warehouse.session import spark_session
from warehouse.settings import Settings


class LakehouseResource(dg.ConfigurableResource):
    """Settings from ``LAKEHOUSE_*`` (``home`` overrides LAKEHOUSE_HOME) and the Spark session built on them."""

    home: str | None = None

    def settings(self) -> Settings:
        settings = Settings.from_env()
        if self.home:
            settings = replace(settings, home=Path(self.home).expanduser().resolve())
        return settings

    def spark(self) -> SparkSession:
        return spark_session(self.settings())
