"""The followers' cycle order in `run --continuous` (no JVM)."""

from dataclasses import replace

import pytest

from runtime.faults import retry_slow_start
from runtime.followers import Tended, _turns
from warehouse.settings import Settings


def _names(*tended: Tended) -> list[str]:
    return [pipeline.report(stage).name for pipeline, stage in _turns(tended)]


def test_fraud_alerts_take_a_turn_before_each_other_follower_the_join_before_the_derived_windows() -> None:
    assert _names(Tended.of(Settings.from_env({}), "landing", own=True)) == [
        "gold_fraud_alerts", "gold_order_payments",
        "gold_fraud_alerts", "gold_user_spend_5m_derived",
        "gold_fraud_alerts", "gold_unique_urls",
    ]  # fmt: skip


def test_without_fraud_alerts_or_alone_the_order_is_the_pipelines() -> None:
    kept = Settings.from_env({"LAKEHOUSE_GOLD_OUTPUTS": "hopping,unique_urls"})
    assert _names(Tended.of(kept, "landing", own=True)) == ["gold_user_spend_5m_derived", "gold_unique_urls"]
    alone = replace(kept, gold_outputs=frozenset({"fraud_alerts"}))
    assert _names(Tended.of(alone, "landing", own=True)) == ["gold_fraud_alerts"]
    none = replace(kept, gold_outputs=frozenset())
    assert _names(Tended.of(none, "landing", own=True)) == []


def test_another_pipeline_runs_whole_its_source_stream_first_and_its_followers_last() -> None:
    """Another pipeline in the followers' process: its source stream (its critical path) takes a turn before
    each follower, as fraud alerts do, and its followers come after the parent pipeline's; it locks every
    stream of its own, the parent's pipeline only its followers."""
    root = Settings.from_env({"LAKEHOUSE_PIPELINES": "all", "LAKEHOUSE_GOLD_OUTPUTS": "fraud_alerts,hopping"})
    purchases, readings = root.pipelines()
    own, other = Tended.of(purchases, "landing", own=True), Tended.of(readings, "kafka", own=False)
    assert _names(own, other) == [
        "readings:bronze_events_kafka", "gold_fraud_alerts", "gold_user_spend_5m_derived",
        "readings:bronze_events_kafka", "gold_fraud_alerts", "readings:gold_readings_1m_derived",
    ]  # fmt: skip
    assert "bronze_events" not in own.lock_names and "gold_fraud_alerts" in own.lock_names
    assert {"bronze_events_kafka", "silver_events", "gold_readings_1m_derived"} <= set(other.lock_names)


def test_a_query_whose_python_worker_was_slow_to_connect_is_started_again_and_others_stop(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spark's fixed 10 s wait for transformWithState's Python worker, missed on two busy cores, costs a
    retry (told in one line), in a continuous run's followers and in ``run --once`` alike, with longer pauses
    for about five minutes; any other failure, or one after those five minutes, still stops the run."""
    failures = [RuntimeError("Python worker failed to connect back.\n=== Streaming Query ===")] * 2
    calls, pauses = [], []

    def drain() -> None:
        calls.append(1)
        if failures:
            raise failures.pop()

    retry_slow_start(drain, "gold_fraud_alerts", pauses.append)
    assert len(calls) == 3 and pauses == [5, 10]
    told = [line for line in capsys.readouterr().err.splitlines() if "trying again" in line]
    assert len(told) == 2 and "gold_fraud_alerts stream failed to start" in told[0]

    failures[:] = [RuntimeError("Python worker failed to connect back.")] * 20
    pauses.clear()
    with pytest.raises(RuntimeError, match="connect back"):
        retry_slow_start(drain, "gold_fraud_alerts", pauses.append)
    assert pauses == [5, 10, 20, 40, 60, 60, 60, 60] and len(failures) == 20 - 9
    failures[:] = [ValueError("a real fault")]
    with pytest.raises(ValueError, match="a real fault"):
        retry_slow_start(drain, "gold_fraud_alerts", pauses.append)
