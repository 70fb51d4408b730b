"""Fraud alerts that need no state: a purchase of at least ``LAKEHOUSE_FRAUD_AMOUNT_LIMIT`` is an alert.

``new silver events (one carried micro-batch) → purchases at or over the limit → gold.fraud_alerts``

Each purchase is judged alone, so the micro-batch that carries its line to silver raises the alert (rule
``amount_limit``) in the same batch, instead of waiting for the stateful rules' stream (``keyed_state``),
which judges ``large_amount`` and ``burst`` a follower cycle later.

Time semantics: none in the rule (no window, no watermark: a late purchase over the limit is an alert too,
a duplicate never, since only a line's first arrival is a new silver event). ``detected_at``, in a carrying
batch, is the source batch's planned time (its lines' ``ingest_time`` too), the same when a batch is re-run
after a crash; a replay's silver stage stamps its own batch's time, and its swap keeps the live row's.

Never imports Dagster.
"""

from datetime import datetime
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from transforms.fraud_rules import AMOUNT_LIMIT
from warehouse.catalog import GOLD_FRAUD_ALERTS
from warehouse.delta import append_once
from warehouse.settings import Settings


def over_the_limit(limit: Decimal) -> Column:
    """Which new silver events are purchases of at least ``limit``."""
    return (F.col("event_type") == "purchase") & (F.col("amount") >= F.lit(limit))


def limit_alerts(events: DataFrame, limit: Decimal, detected_at: datetime) -> DataFrame:
    """The ``amount_limit`` alerts (``gold.fraud_alerts``' columns) of a batch's new silver events: the
    purchase is its own evidence, and there is no mean."""
    return events.where(over_the_limit(limit)).select(
        F.concat(F.lit(f"{AMOUNT_LIMIT}:"), "event_id").alias("alert_id"),
        "user_id",
        F.lit(AMOUNT_LIMIT).alias("rule"),
        "event_id",
        "event_time",
        "amount",
        F.lit(None).cast(GOLD_FRAUD_ALERTS.schema["running_mean"].dataType).alias("running_mean"),
        F.array("event_id").alias("triggering_event_ids"),
        "ingest_time",
        F.lit(detected_at).cast("timestamp").alias("detected_at"),
    )


def write_limit_alerts(
    events: DataFrame, settings: Settings, writer_id: str, batch_id: int, detected_at: datetime, rows: int
) -> None:
    """Append the batch's ``amount_limit`` alerts (``rows`` of them, counted by the caller, at least one) to
    ``gold.fraud_alerts``, exactly once under the batch's writer identity."""
    alerts = limit_alerts(events, settings.fraud_amount_limit, detected_at)
    append_once(alerts, settings, GOLD_FRAUD_ALERTS, writer_id, batch_id, rows)
