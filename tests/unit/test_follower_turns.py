"""The followers' cycle order in `run --continuous` (no JVM)."""

from dataclasses import replace

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
