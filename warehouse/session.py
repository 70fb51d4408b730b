"""The one SparkSession factory: local Spark with Delta Lake, UTC session time, few shuffle partitions."""

import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from warehouse.settings import Settings, SettingsError
from warehouse.storage import hadoop_conf, hand_credentials_to_executors, s3_jars

#: State versions (and offset and commit entries) each stream keeps. Spark's state store maintenance (once
#: a minute, short ``availableNow`` runs included) deletes older ones once 6 more are stale.
MIN_BATCHES_TO_RETAIN = 20


def delta_jars(settings: Settings) -> list[Path]:
    """The Delta jars fetched once by the set-up into the jars cache."""
    jars = sorted(settings.spark.jars_dir.glob("*.jar"))
    if not any(j.name.startswith("delta-spark_") for j in jars):
        raise SettingsError(
            f"LAKEHOUSE_JARS_DIR={settings.spark.jars_dir} holds no Delta jars: run `make setup` to fetch them"
        )
    return jars


def spark_conf(settings: Settings, app_name: str = "lakehouse") -> dict[str, str]:
    """Every Spark setting of the lakehouse: the CLI's session and Dagster's PySparkResource both use it."""
    scratch = settings.home / "spark"
    return {
        "spark.master": settings.spark.master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in [*delta_jars(settings), *s3_jars(settings)]),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        "spark.default.parallelism": str(max(2, settings.spark.shuffle_partitions)),
        "spark.driver.memory": settings.spark.driver_memory,
        "spark.ui.enabled": str(settings.spark.ui).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": settings.spark.driver_host,
        "spark.driver.host": settings.spark.driver_host,
        # Spark's Python workers start this interpreter; without it they would pick python3 from PATH.
        "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "spark.local.dir": str(scratch / "tmp"),
        "spark.sql.warehouse.dir": str(scratch / "warehouse"),
        "spark.driver.extraJavaOptions": " ".join(
            [f"-Dderby.system.home={scratch / 'derby'}", *driver_jvm_options(settings)]
        ),
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        # Jobs a batch runs side by side (its table appends) share the task slots instead of queueing.
        "spark.scheduler.mode": "FAIR",
        # Small tables: keep Delta's log replay and stats collection cheap.
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.autoCompact.enabled": "false",
        # A checkpoint is written inside the commit that reaches it, and costs seconds: every 10 commits
        # (the default) made every tenth micro-batch of each table slow. Log replay of 100 small JSON
        # commits is cheap; the maintenance job compacts and cleans up.
        "spark.databricks.delta.properties.defaults.checkpointInterval": "100",
        "spark.sql.adaptive.enabled": "true",
        # Spark keeps a stateful stream's last 100 state versions and deletes none until 30 more are stale:
        # at a follower's tens of seconds a batch, RocksDB files of two hours, which the soak saw grow for
        # its whole run. A restart needs the newest version only; a replay rebuilds from bronze, never from
        # an old version. Offset and commit logs are trimmed alike (decision 58).
        "spark.sql.streaming.minBatchesToRetain": str(MIN_BATCHES_TO_RETAIN),
        # Each batch plans the same queries again, which compile a few hundred generated classes; Spark keeps
        # 100, so by the next batch they were gone and were compiled again (decision 46).
        "spark.sql.codegen.cache.maxEntries": "1000",
        # File listings (VACUUM's, the file source's) ran up to 10,000 tasks: 80 s for an empty table.
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(max(2, settings.spark.shuffle_partitions)),
        **_cluster_conf(settings),
        **hadoop_conf(settings),
    }


def _cluster_conf(settings: Settings) -> dict[str, str]:
    """What an application asks of a standalone cluster (nothing in local mode, where the driver runs the tasks)."""
    if not settings.spark.master.startswith("spark://"):
        return {}
    return {
        "spark.cores.max": str(settings.spark.cores_max),
        "spark.executor.memory": settings.spark.executor_memory,
        # The executors parse the lines now: the same stack as the driver's for deeply nested JSON.
        "spark.executor.extraJavaOptions": " ".join(["-Xss8m", *settings.spark.executor_jvm_options.split()]),
    }


def driver_jvm_options(settings: Settings) -> list[str]:
    """The driver JVM's own options: the class-data archive when the set-up built one, then the user's.

    Starting from an archive of the classes a pipeline run loads (AppCDS) saves the JVM parsing and
    verifying thousands of Spark, Delta and Catalyst classes: measured 3.5 s of a 28 s ``run --once``.
    An archive from another JVM or class path is ignored by the JVM (``-Xshare:auto``), never fatal.
    """
    # Spark walks a parsed JSON document recursively (its schema, its canonical text): a line nested 999
    # deep, which the event rules accept, overflowed the default 1 MB thread stack and killed the JVM.
    options = ["-Xss8m"]
    if settings.spark.class_archive is not None and settings.spark.class_archive.is_file():
        options.append(f"-XX:SharedArchiveFile={settings.spark.class_archive}")
    options.extend(settings.spark.jvm_options.split())
    return options


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
    _check_master(settings.spark.master)
    builder = SparkSession.builder
    for key, value in spark_conf(settings, app_name).items():
        builder = builder.config(key, value)
    with _jvm_output(None if settings.spark.verbose else spark_log(settings)):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    hand_credentials_to_executors(spark, settings)
    return spark


def task_slots(settings: Settings) -> int:
    """How many tasks the session runs at once: ``local``'s one, ``local[N]``'s N, the cores this process
    may use for ``local[*]``, a standalone cluster's ``LAKEHOUSE_SPARK_CORES_MAX``."""
    master = settings.spark.master
    if master.startswith("spark://"):
        return settings.spark.cores_max
    inner = master.removeprefix("local").strip("[]")
    if inner == "*":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return int(inner) if inner else 1


def _check_master(master: str) -> None:
    """A standalone master that does not answer stops the command in one line at once (Spark itself would
    retry for a minute, then fail with a stack trace)."""
    if not master.startswith("spark://"):
        return
    host, _, port = master.removeprefix("spark://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise SettingsError(
            f"LAKEHOUSE_SPARK_MASTER={master}: nothing answers there ({error.strerror or error}); "
            "start a local cluster with `lakehouse cluster up`"
        ) from None


def spark_log(settings: Settings) -> Path:
    """Where the JVM's own output goes (start-up notices, log4j warnings, stack traces of failed queries)."""
    return settings.logs_dir / "spark.log"


@contextmanager
def _jvm_output(log: Path | None) -> Iterator[None]:
    """Point this process's stdout and stderr at ``log`` while the JVM starts: the JVM inherits them and
    keeps writing there for its whole life, while Python's own output goes back to the terminal."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with log.open("ab") as target:
            os.dup2(target.fileno(), 1)
            os.dup2(target.fileno(), 2)
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
