"""The session's Spark settings: what bounds a long run's disk, the JVMs' options, and its task slots."""

import os

from warehouse.session import MIN_BATCHES_TO_RETAIN, spark_conf, task_slots
from warehouse.settings import Settings


def test_streams_keep_a_bounded_number_of_state_versions_and_log_entries() -> None:
    conf = spark_conf(Settings.from_env({}))
    assert conf["spark.sql.streaming.minBatchesToRetain"] == str(MIN_BATCHES_TO_RETAIN)
    # Enough for a restart (the newest version) with room to look back; far below Spark's 100.
    assert 2 <= MIN_BATCHES_TO_RETAIN <= 30


def test_the_jvm_options_go_after_the_built_in_stack_size_on_the_driver_and_on_a_clusters_executors() -> None:
    local = spark_conf(Settings.from_env({"LAKEHOUSE_JVM_OPTIONS": "-XX:TieredStopAtLevel=1"}))
    driver = local["spark.driver.extraJavaOptions"].split()
    assert "-Xss8m" in driver and driver[-1] == "-XX:TieredStopAtLevel=1"
    assert "spark.executor.extraJavaOptions" not in local  # local mode: the driver runs the tasks
    env = {
        "LAKEHOUSE_SPARK_MASTER": "spark://127.0.0.1:7077",
        "LAKEHOUSE_EXECUTOR_JVM_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m",
    }
    on_cluster = spark_conf(Settings.from_env(env))
    executor = on_cluster["spark.executor.extraJavaOptions"]
    assert executor == "-Xss8m -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
    assert "TieredStopAtLevel" not in on_cluster["spark.driver.extraJavaOptions"]  # each JVM its own options


def test_task_slots_are_the_masters_threads_or_the_clusters_cores() -> None:
    """What a carried batch spreads its lines over (``transforms.bronze.spread``)."""
    slots = lambda master, **env: task_slots(Settings.from_env({"LAKEHOUSE_SPARK_MASTER": master, **env}))  # noqa: E731
    assert slots("local") == 1
    assert slots("local[3]") == 3
    assert slots("local[*]") == len(os.sched_getaffinity(0))
    assert slots("spark://127.0.0.1:7077", LAKEHOUSE_SPARK_CORES_MAX="4") == 4
