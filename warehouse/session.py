"""The one SparkSession factory: local Spark with Delta Lake, UTC session time, few shuffle partitions."""

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from warehouse.settings import Settings, SettingsError


def delta_jars(settings: Settings) -> list[Path]:
    """The Delta jars fetched once by the set-up into the jars cache."""
    jars = sorted(settings.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("delta-spark_") for j in jars):
        raise SettingsError(
            f"LAKEHOUSE_JARS_DIR={settings.jars_dir} holds no Delta jars: run `make setup` to fetch them"
        )
    return jars


def spark_conf(settings: Settings, app_name: str = "lakehouse") -> dict[str, str]:
    """Every Spark setting of the lakehouse: the CLI's session and Dagster's PySparkResource both use it."""
    scratch = settings.home / "spark"
    return {
        "spark.master": os.environ.get("LAKEHOUSE_SPARK_MASTER", "local[*]"),
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in delta_jars(settings)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.default.parallelism": str(max(2, settings.shuffle_partitions)),
        "spark.driver.memory": settings.driver_memory,
        "spark.ui.enabled": str(settings.spark_ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # Spark's Python workers start this interpreter; without it they would pick python3 from PATH.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.local.dir": str(scratch / "tmp"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={scratch / 'derby'}",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        # Small tables: keep Delta's log replay and stats collection cheap.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.autoCompact.enabled": "false",
        # A checkpoint is written inside the commit that reaches it, and costs seconds: every 10 commits
        # (the default) made every tenth micro-batch of each table slow. Log replay of 100 small JSON
        # commits is cheap; the maintenance job compacts and cleans up.
        "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
        "spark.sql.adaptive.enabled": "true",
    }


def spark_session(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """Return the process's SparkSession, building it with Delta configured if none exists yet.

    ``getOrCreate`` ignores JVM-level settings once a session exists, so this is the only place a session
    is built; tests build theirs here too.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark binds to 127.0.0.1 (spark_conf); saying so up front also silences its loopback-address warnings.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.ensure_home()
    builder = SparkSession.builder
    for key, value in spark_conf(settings, app_name).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
