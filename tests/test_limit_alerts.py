"""The fraud rule that needs no state (``amount_limit``): a purchase of at least LAKEHOUSE_FRAUD_AMOUNT_LIMIT is
an alert in the micro-batch that carries it to silver, late or not, once however often its line arrives or
its batch runs; a replay rebuilds the same alerts with the same detection times. Expected rows by hand from
the rule (limit 10,000.00, the default)."""

from decimal import Decimal

import pytest

from runtime.replay import run_replay
from runtime.runner import run_once
from tests.lines import land
from warehouse.catalog import GOLD_FRAUD_ALERTS
from warehouse.delta import latest_version, read_table

pytestmark = pytest.mark.gold_outputs("fraud_alerts")


def purchase(event_id: str, user: str, when: str, amount: str, event_type: str = "purchase") -> str:
    return (
        f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "{when}", "amount": {amount}, '
        f'"event_type": "{event_type}", "url": "/checkout"}}'
    )


FIRST = [
    purchase("p1", "A", "2024-01-01T10:00:00Z", "10000.00"),  # at the limit: an alert
    purchase("p2", "A", "2024-01-01T10:00:10Z", "9999.99"),  # a cent under: none
    purchase("p3", "B", "2024-01-01T10:01:00Z", "25000.00"),  # over: an alert
    purchase("p1", "A", "2024-01-01T10:00:00Z", "10000.00"),  # p1 again (a duplicate): no second alert
    purchase("c1", "B", "2024-01-01T10:02:00Z", "50000.00", event_type="click"),  # not a purchase: none
    '{"event_id": "bad", "user_id": "B", "event_time": "2024-01-01T10:03:00Z", "amount": "lots"}',  # quarantined
    purchase("w1", "C", "2024-01-01T12:00:00Z", "5.00"),  # moves the watermark to 11:58
]
#: Two hours behind the watermark: late for the windows and the stateful rules, an alert all the same.
LATE = [purchase("p4", "C", "2024-01-01T09:00:00Z", "12000.00")]


def limit_alerts(spark, settings) -> dict[str, tuple]:
    rows = read_table(spark, settings, GOLD_FRAUD_ALERTS).where("rule = 'amount_limit'").collect()
    return {r.alert_id: (r.user_id, r.event_id, r.amount, r.running_mean, tuple(r.triggering_event_ids)) for r in rows}


def test_a_purchase_at_or_over_the_limit_is_an_alert_in_its_own_batch_once_and_after_a_replay(spark, settings):
    land(settings, "first.jsonl", FIRST)
    run_once(spark, settings)
    expected = {
        "amount_limit:p1": ("A", "p1", Decimal("10000.00"), None, ("p1",)),
        "amount_limit:p3": ("B", "p3", Decimal("25000.00"), None, ("p3",)),
    }
    assert limit_alerts(spark, settings) == expected
    # The stateful rules found nothing here (no earlier purchase of A's, B's or C's to compare with, no burst).
    assert read_table(spark, settings, GOLD_FRAUD_ALERTS).where("rule != 'amount_limit'").count() == 0
    rows = read_table(spark, settings, GOLD_FRAUD_ALERTS).where("rule = 'amount_limit'").collect()
    # Raised by the batch that carried the lines to silver: detected at its planned time, the lines' ingest time
    # (the stateful rules' stream detects in a batch of its own, later).
    assert rows and all(r.ingest_time is not None and r.detected_at == r.ingest_time for r in rows)

    land(settings, "late.jsonl", LATE)
    run_once(spark, settings)
    expected["amount_limit:p4"] = ("C", "p4", Decimal("12000.00"), None, ("p4",))
    assert limit_alerts(spark, settings) == expected

    # Nothing new: nothing written.
    version = latest_version(GOLD_FRAUD_ALERTS.path(settings) / "_delta_log")
    run_once(spark, settings)
    assert latest_version(GOLD_FRAUD_ALERTS.path(settings) / "_delta_log") == version

    # A replay from bronze raises the same alerts, and keeps when each was detected.
    detected = {r.alert_id: r.detected_at for r in read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()}
    run_replay(spark, settings)
    assert limit_alerts(spark, settings) == expected
    assert {r.alert_id: r.detected_at for r in read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()} == detected
