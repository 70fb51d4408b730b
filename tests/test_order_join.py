"""gold.order_payments: orders ⋈ payments by Spark's stream-stream join (left outer, by order_id, payment
within [order_time, order_time + 15 min], watermarks on both sides), on real streams and Delta tables.

Golden values are worked out by hand from the rules in ``transforms/joins.py`` (watermark delay 120 s,
the query's watermark = min over both sides of max event time - delay; an order is ``unpaid`` once
``order_time + 15 min < watermark``), or recomputed in plain Python from the landing lines
(``tests.reference.order_payments``), never read back from our own output.
"""

import json
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal

import deltalake
import pytest
from pyspark.sql.types import StructType
from typer.testing import CliRunner

from cli.app import app
from runtime.checkpoints import LANDING_STAGE, ORDER_PAYMENTS_STAGE
from runtime.followers import Tended
from runtime.progress import Notices
from runtime.replay import run_replay
from runtime.runner import prepare, run_once, run_stage_once
from runtime.stages import stage_named
from tests.lines import land
from tests.reference import landing_lines, order_payments, parse
from warehouse.catalog import OPS_STREAM_PROGRESS, ORDER_PAYMENTS
from warehouse.delta import batch_scope, read_table

pytestmark = pytest.mark.gold_outputs("order_payments")


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2024-01-01T{clock}+00:00")


def order(order_id: str, when: str, amount: str = "10.00", event_id: str | None = None) -> str:
    return json.dumps(
        {"event_id": event_id or f"o-{order_id}", "user_id": f"u-{order_id}", "event_time": f"2024-01-01T{when}Z",
         "amount": float(amount), "event_type": "order", "order_id": order_id}
    )  # fmt: skip


def payment(order_id: str, event_id: str, when: str, amount: str = "10.00") -> str:
    return json.dumps(
        {"event_id": event_id, "user_id": f"u-{order_id}", "event_time": f"2024-01-01T{when}Z",
         "amount": float(amount), "event_type": "payment", "order_id": order_id}
    )  # fmt: skip


def pairs(spark, settings) -> Counter:
    """(order_id, payment_event_id, status) of every row, with multiplicity (a row written twice counts 2)."""
    rows = read_table(spark, settings, ORDER_PAYMENTS).collect()
    return Counter((r.order_id, r.payment_event_id, r.status) for r in rows)


def progress(spark, settings) -> list:
    rows = read_table(spark, settings, OPS_STREAM_PROGRESS).where(f"stream = '{ORDER_PAYMENTS_STAGE}'")
    return sorted(rows.collect(), key=lambda r: r.batch_id)


def utc(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None else None


PAID_IN_RUN_1 = {
    ("o1", "p1", "paid"),  # payment exactly 15 min after the order: inside the bound
    ("o3", "p3", "paid"),  # 7.5 min after
    ("o4", "p4", "paid"),  # at the order's own instant
    ("o8", "p8", "paid"),  # the order delivered twice, the payment redelivered (another amount) in run 2
    ("o9", "p9a", "paid"),  # two payments inside the bound: two pairs
    ("o9", "p9b", "paid"),
}


def test_hand_computed_pairs_bounds_watermark_and_exactly_once(spark, settings) -> None:
    # Run 1. Newest order 10:02 → 10:00:00; newest payment 10:15:00.001 → 10:13:00.001: the watermark
    # after it is 10:00:00, past no order's bound (10:00 + 15 min).
    land(
        settings,
        "run-1.jsonl",
        [
            payment("o2", "p2", "10:05:00", "2.00"),  # arrives a run before its order
            order("o1", "10:00:00"),
            payment("o1", "p1", "10:15:00.000"),
            order("o3", "10:00:00"),
            payment("o3", "p3", "10:07:30"),
            order("o4", "10:01:00"),
            payment("o4", "p4", "10:01:00"),
            order("o5", "10:00:00"),
            payment("o5", "p5", "10:15:00.001"),  # 15 min + 1 ms: outside the bound
            order("o6", "10:00:00"),  # never paid
            order("o7", "10:00:00"),
            payment("o7", "p7", "09:59:59.999"),  # 1 ms before its order: does not count
            order("o8", "10:01:30", "8.00"),
            order("o8", "10:01:30", "8.00"),  # the same line again
            payment("o8", "p8", "10:02:00", "8.00"),
            order("o9", "10:02:00"),
            payment("o9", "p9a", "10:03:00", "4.00"),
            payment("o9", "p9b", "10:10:00", "6.00"),
        ],
    )
    run_once(spark, settings)
    assert pairs(spark, settings) == Counter(PAID_IN_RUN_1)

    # Run 2. o2's order meets the payment that waited in the join's state. o10's pair moves both sides'
    # newest event time to 10:17:00: watermark 10:15:00.000 exactly, which is not *past* 10:00 + 15 min.
    land(
        settings,
        "run-2.jsonl",
        [
            order("o2", "10:00:30", "2.00"),
            order("o8", "10:01:30", "8.00"),
            payment("o8", "p8", "10:02:00", "9.00"),  # conflicting redelivery: the first arrival counts
            order("o10", "10:17:00"),
            payment("o10", "p10", "10:17:00"),
        ],
    )
    run_once(spark, settings)
    paid_in_run_2 = {("o2", "p2", "paid"), ("o10", "p10", "paid")}
    assert pairs(spark, settings) == Counter(PAID_IN_RUN_1 | paid_in_run_2)
    assert utc(progress(spark, settings)[-1].watermark) == at("10:15:00")

    # Run 3. One more millisecond: watermark 10:15:00.001 passes 10:00 + 15 min, and the orders of 10:00
    # without a payment inside the bound come out unpaid, in this run (Spark's no-data batch at the end).
    land(settings, "run-3.jsonl", [order("o11", "10:17:00.001"), payment("o11", "p11", "10:17:00.001")])
    run_once(spark, settings)
    unpaid = {("o5", None, "unpaid"), ("o6", None, "unpaid"), ("o7", None, "unpaid")}
    after_run_3 = PAID_IN_RUN_1 | paid_in_run_2 | {("o11", "p11", "paid")} | unpaid
    assert pairs(spark, settings) == Counter(after_run_3)
    assert utc(progress(spark, settings)[-1].watermark) == at("10:15:00.001")

    # Run 4. Orders and payments behind the watermark are dropped by Spark: o6's payment at 10:14 does not
    # turn it paid, o13 never appears. Nothing is written twice; the watermark moves to 10:28.
    land(
        settings,
        "run-4.jsonl",
        [
            payment("o6", "p6", "10:14:00"),
            order("o13", "10:14:00"),
            order("o12", "10:30:00"),
            payment("o12", "p12", "10:30:00"),
        ],
    )
    run_once(spark, settings)
    assert pairs(spark, settings) == Counter(after_run_3 | {("o12", "p12", "paid")})

    rows = {(r.order_id, r.payment_event_id): r for r in read_table(spark, settings, ORDER_PAYMENTS).collect()}
    o8 = rows[("o8", "p8")]
    assert (o8.order_event_id, utc(o8.order_time), str(o8.order_amount)) == ("o-o8", at("10:01:30"), "8.00")
    assert (utc(o8.payment_time), str(o8.payment_amount), o8.user_id) == (at("10:02:00"), "8.00", "u-o8")
    assert utc(rows[("o1", "p1")].payment_time) == at("10:15:00")
    o5 = rows[("o5", None)]
    assert (o5.payment_time, o5.payment_amount, utc(o5.order_time)) == (None, None, at("10:00:00"))
    assert all(r.joined_at is not None for r in rows.values())
    unpaid_batches = {rows[(o, None)].join_batch for o in ("o5", "o6", "o7")}
    assert len(unpaid_batches) == 1, "the three unpaid orders left the state together"

    batches = progress(spark, settings)
    assert [r.batch_id for r in batches] == list(range(len(batches)))
    by_batch = {r.batch_id: r for r in batches}
    (evicting,) = unpaid_batches
    assert json.loads(by_batch[evicting].figures)["unpaid"] == 3
    assert by_batch[evicting].rows_in == 0, "a no-data batch: the watermark alone closed them"
    assert sum(r.late for r in batches) == 2, "o6's late payment and o13"
    # State held after the last batch (watermark 10:28): orders whose bound the watermark has not passed
    # (o10 10:17, o11 10:17:00.001, o12 10:30) and payments not behind it (p12 10:30).
    assert utc(batches[-1].watermark) == at("10:28:00")
    assert batches[-1].state_rows == 4
    assert all(r.state_memory_bytes > 0 for r in batches)

    delta_rs = deltalake.DeltaTable(str(ORDER_PAYMENTS.path(settings))).to_pyarrow_table().to_pylist()
    assert Counter((r["order_id"], r["payment_event_id"], r["status"]) for r in delta_rs) == pairs(spark, settings)


def generate_orders(settings, seed: int, start: str) -> None:
    result = CliRunner().invoke(
        app,
        ["generate", "--kind", "orders", "--events", "300", "--rate", "0.2", "--seed", str(seed), "--start", start,
         "--files", "2"],
        env={"LAKEHOUSE_HOME": str(settings.home)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def table_rows(spark, settings) -> Counter:
    return Counter(
        (r.order_id, r.user_id, r.order_event_id, utc(r.order_time), r.order_amount, r.payment_event_id,
         utc(r.payment_time), r.payment_amount, r.status)
        for r in read_table(spark, settings, ORDER_PAYMENTS).collect()
    )  # fmt: skip


def test_generated_orders_equal_a_plain_python_recomputation_across_a_replay(spark, settings) -> None:
    """300 orders over 25 min of event time (0.2/s), payments up to 30 min after (or 5 min before) their
    order, 30 s of disorder, duplicates. The second stream starts at 00:30, so even its earliest payment
    (00:25) is ahead of the watermark the first left (about 00:23): nothing reaches the join late, and
    the reference needs no batch boundaries."""
    generate_orders(settings, 21, "2024-01-01T00:00:00")
    lines = landing_lines(settings.landing_dir)
    assert all(parse(line) is not None for line in lines), "every generated line is a valid contract event"
    kinds = Counter(json.loads(line)["event_type"] for line in lines)
    assert kinds["order"] > 300 and kinds["payment"] > 200  # duplicates included
    run_once(spark, settings)
    first = table_rows(spark, settings)
    expected = order_payments(lines, settings.watermarks.delay_seconds)
    statuses = Counter(row[-1] for row in expected.elements())
    assert statuses["paid"] > 200 and statuses["unpaid"] > 10
    assert first == expected

    # A replay rebuilds the table and the join's state from the replayed silver: same rows, and the
    # orders still waiting for a payment are still waited for.
    report = run_replay(spark, settings)
    assert report.rows_swapped[ORDER_PAYMENTS.name] == sum(first.values())
    assert table_rows(spark, settings) == first

    generate_orders(settings, 22, "2024-01-01T00:30:00")
    run_once(spark, settings)
    lines = landing_lines(settings.landing_dir)
    assert table_rows(spark, settings) == order_payments(lines, settings.watermarks.delay_seconds)

    delta_rs = deltalake.DeltaTable(str(ORDER_PAYMENTS.path(settings))).to_pyarrow_table()
    assert delta_rs.num_rows == sum(table_rows(spark, settings).values())


@pytest.mark.quick
def test_a_join_batch_rerun_after_a_crash_writes_nothing_twice(spark, settings) -> None:
    """The sink alone, as the runner calls it: the same batch (writer, id) handed over twice, as after a
    crash between the Delta commit and Spark's commit log, is written once."""
    prepare(spark, settings)
    offsets = settings.checkpoints_dir / ORDER_PAYMENTS_STAGE / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text('v1\n{"batchWatermarkMs":1704103200000}\n')
    output = [c for c in ORDER_PAYMENTS.schema.fields if c.name not in ("joined_at", "join_batch")]
    rows = [
        ("o1", "u", "o-o1", at("10:00:00"), Decimal("1.00"), "p1", at("10:01:00"), Decimal("1.00"), "paid"),
        ("o2", "u", "o-o2", at("09:40:00"), Decimal("2.00"), None, None, None, "unpaid"),
    ]
    batch = spark.createDataFrame(rows, StructType(output))
    with batch_scope("lakehouse:test-join", 0, time.time()):
        sink = stage_named(settings, ORDER_PAYMENTS_STAGE).process
        first = sink(batch, 0, settings, "lakehouse:test-join")
        again = sink(batch, 0, settings, "lakehouse:test-join")
    assert first == again == {"rows_written": 2.0, "paid": 1.0, "unpaid": 1.0, "watermark": at("10:00:00").timestamp()}
    assert pairs(spark, settings) == Counter({("o1", "p1", "paid"): 1, ("o2", None, "unpaid"): 1})


def test_in_a_continuous_runs_cycle_the_unpaid_rows_come_with_the_joins_next_run_and_no_run_is_empty(
    spark, settings
) -> None:
    """A continuous run's followers run the join in turns; no turn ends with Spark's batch of no data
    (decision 77): the unpaid row that batch would have written comes in the first batch of the join's next
    run, which has new input. (``run --once`` still ends with it: the test above, run 3.)"""
    prepare(spark, settings)
    pipeline, stop, notices = Tended.of(settings, "landing", own=True), threading.Event(), Notices(None)
    join = stage_named(settings, ORDER_PAYMENTS_STAGE)

    def turn(name: str, lines: list[str]) -> bool:
        land(settings, name, lines)
        run_stage_once(spark, settings, stage_named(settings, LANDING_STAGE))  # carries the lines to silver
        return pipeline.turn(spark, join, stop, notices)

    # The newest order and payment at 10:17:00.001: the watermark after this batch is 10:15:00.001, past
    # o6's bound (10:00 + 15 min), but this batch ran under the one before it (none yet).
    assert turn(
        "turn-1.jsonl", [order("o6", "10:00:00"), order("o11", "10:17:00.001"), payment("o11", "p11", "10:17:00.001")]
    )
    assert pairs(spark, settings) == Counter({("o11", "p11", "paid"): 1})
    assert pipeline.report(join).batches == 1
    assert turn("turn-2.jsonl", [order("o12", "10:18:00"), payment("o12", "p12", "10:18:00")])
    assert pairs(spark, settings) == Counter(
        {("o11", "p11", "paid"): 1, ("o12", "p12", "paid"): 1, ("o6", None, "unpaid"): 1}
    )
    assert pipeline.report(join).batches == 2
    # Its state: on RocksDB, in LAKEHOUSE_STATE_PARTITIONS partitions, as recorded when its checkpoint was
    # made; the session's own partitions are as they were (the tests' 2).
    offsets = settings.checkpoints_dir / ORDER_PAYMENTS_STAGE / "offsets" / "0"
    recorded = json.loads(offsets.read_text().splitlines()[1])
    assert recorded["conf"]["spark.sql.shuffle.partitions"] == str(settings.spark.state_partitions) == "1"
    assert recorded["conf"]["spark.sql.streaming.stateStore.providerClass"].endswith("RocksDBStateStoreProvider")
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
