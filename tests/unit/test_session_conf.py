"""The session's Spark settings that bound what a long run keeps on disk."""

from warehouse.session import MIN_BATCHES_TO_RETAIN, spark_conf
from warehouse.settings import Settings


def test_streams_keep_a_bounded_number_of_state_versions_and_log_entries() -> None:
    conf = spark_conf(Settings.from_env({}))
    assert conf["spark.sql.streaming.minBatchesToRetain"] == str(MIN_BATCHES_TO_RETAIN)
    # Enough for a restart (the newest version) with room to look back; far below Spark's 100.
    assert 2 <= MIN_BATCHES_TO_RETAIN <= 30
