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


def spark_session(settings: Settings, app_name: str = "lakehouse") -> SparkSession:
    """Return the process's SparkSession, building it with Delta configured if none exists yet.

    ``getOrCreate`` ignores JVM-level settings once a session exists, so this is the only place a session
    is built; tests build theirs here too.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Spark's Python workers start the interpreter named here; without it they would pick python3 from PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings.ensure_home()
    scratch = settings.home / "spark"
    builder = (
        SparkSession.builder.master(os.environ.get("LAKEHOUSE_SPARK_MASTER", "local[*]"))
        .appName(app_name)
        .config("spark.jars", ",".join(str(j) for j in delta_jars(settings)))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, settings.shuffle_partitions)))
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.ui.enabled", str(settings.spark_ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(scratch / "tmp"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        # Small tables: keep Delta's log replay and stats collection cheap.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.databricks.delta.autoCompact.enabled", "false")
        .config("spark.sql.adaptive.enabled", "true")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
