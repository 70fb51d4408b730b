"""The followers' cycle order in `run --continuous` (no JVM)."""

from dataclasses import replace

import pytest

from runtime.faults import retry_slow_start
from runtime.followers import _turns
from runtime.stages import stages
from warehouse.settings import Settings


def test_fraud_alerts_take_a_turn_before_each_other_follower() -> None:
    followers = stages(Settings.from_env({})).followers
    assert [stage.name for stage in _turns(followers)] == [
        "gold_fraud_alerts", "gold_user_spend_5m_derived",
        "gold_fraud_alerts", "gold_order_payments",
        "gold_fraud_alerts", "gold_unique_urls",
    ]  # fmt: skip


def test_without_fraud_alerts_or_alone_the_order_is_the_pipelines() -> None:
    kept = Settings.from_env({"LAKEHOUSE_GOLD_OUTPUTS": "hopping,unique_urls"})
    assert [stage.name for stage in _turns(stages(kept).followers)] == [
        "gold_user_spend_5m_derived",
        "gold_unique_urls",
    ]
    alone = replace(kept, gold_outputs=frozenset({"fraud_alerts"}))
    assert [stage.name for stage in _turns(stages(alone).followers)] == ["gold_fraud_alerts"]
    assert _turns(()) == []


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
