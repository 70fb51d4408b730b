"""Orders ⋈ payments: Spark's own stream-stream join on ``order_id`` within an event-time bound.

Both sides are silver events (deduplicated by event_id, so a redelivered order or payment never joins
twice): ``event_type = 'order'`` and ``event_type = 'payment'``, each with a non-null ``order_id``.
The pipeline's steps:

``order_events`` / ``payment_events`` (assign timestamp, watermark each side) → ``match_payments``
(key by ``order_id``, time-range join, left outer) → ``record_order_payments`` (foreachBatch sink,
exactly once per micro-batch).

Time semantics (event time throughout; processing time only stamps ``joined_at``):

- A payment settles an order when ``order_time <= payment_time <= order_time + 15 min`` (both ends
  inclusive). A payment dated before its order does not count: it is a payment for something else, or a
  clock error, and counting it would make the join's state unbounded in the other direction too.
- Each side carries Spark's fixed-delay watermark, ``withWatermark(time, settings.watermarks.delay)``: that
  side's max event time seen minus the delay. The query's watermark is the minimum over both sides
  (Spark's default policy), advanced after each micro-batch and kept in the checkpoint.
- A ``paid`` row is written in the micro-batch where the pair meets, whichever side arrived first.
- An ``unpaid`` row is written once, in the first micro-batch whose watermark is past
  ``order_time + 15 min`` (strictly: Spark evicts the order's state when ``order_time + 15 min <
  watermark``), for an order that matched no payment by then. Under ``availableNow`` Spark runs that
  extra no-data batch at the end of the same run (``run --once``), so it is not left for the next input; a
  continuous run's followers leave it to the next run, which comes with the next input (decision 77).
- Rows behind the watermark when they reach the join (``event_time <= watermark`` of the previous batch)
  are dropped by Spark; they show as ``late`` in ``ops.stream_progress``. The project's adaptive and
  idle-advancing watermark policies apply to the window stream only, not to this join.

State stays bounded by the time-range condition: an order is kept until ``watermark > order_time + 15
min``, a payment until ``watermark > payment_time`` (no later order can still match it).
"""

from datetime import UTC, datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from warehouse.catalog import ORDER_PAYMENT_BOUND_MINUTES, ORDER_PAYMENTS
from warehouse.delta import append_once, materialized
from warehouse.settings import Settings

ORDER, PAYMENT = "order", "payment"


def _watermark_delay(settings: Settings) -> str:
    return f"{settings.watermarks.delay_seconds} seconds"


def order_events(events: DataFrame, settings: Settings) -> DataFrame:
    """Order events with their event time as ``order_time``, watermarked by the max order time seen."""
    return (
        events.where((F.col("event_type") == ORDER) & F.col("order_id").isNotNull())
        .select(
            "order_id",
            "user_id",
            F.col("event_id").alias("order_event_id"),
            F.col("event_time").alias("order_time"),
            F.col("amount").alias("order_amount"),
        )
        .withWatermark("order_time", _watermark_delay(settings))
    )


def payment_events(events: DataFrame, settings: Settings) -> DataFrame:
    """Payment events with their event time as ``payment_time``, watermarked by the max payment time seen."""
    return (
        events.where((F.col("event_type") == PAYMENT) & F.col("order_id").isNotNull())
        .select(
            F.col("order_id").alias("paid_order_id"),
            F.col("event_id").alias("payment_event_id"),
            F.col("event_time").alias("payment_time"),
            F.col("amount").alias("payment_amount"),
        )
        .withWatermark("payment_time", _watermark_delay(settings))
    )


def match_payments(orders: DataFrame, payments: DataFrame) -> DataFrame:
    """Left outer stream-stream join: every (order, payment) pair with ``order_time <= payment_time <=
    order_time + bound``, and each order without one (null payment columns) once the watermark passes
    ``order_time + bound``. The range on both event times is what lets Spark drop state."""
    bound = F.expr(f"INTERVAL {ORDER_PAYMENT_BOUND_MINUTES} MINUTES")
    condition = (
        (F.col("order_id") == F.col("paid_order_id"))
        & (F.col("payment_time") >= F.col("order_time"))
        & (F.col("payment_time") <= F.col("order_time") + bound)
    )
    return orders.join(payments, condition, "leftOuter").select(
        "order_id",
        "user_id",
        "order_event_id",
        "order_time",
        "order_amount",
        "payment_event_id",
        "payment_time",
        "payment_amount",
        F.when(F.col("payment_event_id").isNull(), "unpaid").otherwise("paid").alias("status"),
    )


def pair_orders_with_payments(order_source: DataFrame, payment_source: DataFrame, settings: Settings) -> DataFrame:
    """The streaming join over two reads of silver.events, one per side. The event-type filters reach the
    scans (Delta file skipping, Parquet row groups), so Spark's input rows are what the two scans return."""
    return match_payments(order_events(order_source, settings), payment_events(payment_source, settings))


def record_order_payments(
    pairs: DataFrame, batch_id: int, settings: Settings, writer_id: str, watermark: datetime | None
) -> dict[str, float]:
    """Append one micro-batch of the join's output to gold.order_payments, exactly once per batch.

    The batch is computed once (the join's state store commits this batch's version while it runs, so it
    must run even when nothing comes out) and written under the stream's writer id and batch id: a batch
    re-run after a crash recomputes the same rows from the same state version and writes nothing twice.
    ``watermark`` is the one Spark ran the batch with (its evictions, hence ``unpaid`` rows, follow it).
    """
    now = datetime.now(UTC)
    with materialized(pairs) as rows:
        paid, unpaid = rows.agg(F.count_if(F.col("status") == "paid"), F.count_if(F.col("status") == "unpaid")).first()
        if paid or unpaid:
            written = rows.withColumns(
                {"joined_at": F.lit(now).cast("timestamp"), "join_batch": F.lit(batch_id).cast("long")}
            )
            append_once(written, settings, ORDER_PAYMENTS, writer_id, batch_id)
    return {
        "rows_written": float(paid + unpaid),
        "paid": float(paid),
        "unpaid": float(unpaid),
        "watermark": watermark.timestamp() if watermark else 0.0,
    }
