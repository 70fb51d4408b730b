"""Keyed state with timers (transformWithState) on real streams and Delta tables, against figures worked out
by hand: distinct URLs per user over 24 h of event time, expiring when the watermark passes, and fraud
alerts judged on arrival (a burst alerts once per episode). Settings: watermark delay 120 s (the default)."""

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import transforms.keyed_processors
from runtime import checkpoints
from runtime.checkpoints import FRAUD_STAGE, LANDING_STAGE, SILVER_STAGE, UNIQUE_URLS_STAGE
from runtime.replay import run_replay
from runtime.runner import flush_progress, prepare, run_stage_once
from runtime.stages import Stage, stage_named
from tests.lines import land
from transforms.fraud_rules import Purchase, judge_purchase
from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS, OPS_STREAM_PROGRESS
from warehouse.delta import read_table
from warehouse.settings import Settings

pytestmark = pytest.mark.gold_outputs("fraud_alerts", "unique_urls")


def click(event_id: str, user: str, when: str, url: str | None) -> str:
    url_field = "" if url is None else f', "url": "{url}"'
    return (
        f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "{when}", "amount": 0, '
        f'"event_type": "click"{url_field}}}'
    )


def purchase(event_id: str, user: str, when: str, amount: str) -> str:
    return (
        f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "{when}", "amount": {amount}, '
        '"event_type": "purchase", "url": "/checkout"}'
    )


def at(day: int, clock: str) -> datetime:
    return datetime.fromisoformat(f"2024-01-0{day}T{clock}+00:00")


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def run_through(spark: SparkSession, settings: Settings, *keyed: str) -> None:
    """Landing → bronze → silver, then the given keyed streams (the window stream is not needed here)."""
    prepare(spark, settings)
    ran = []
    for name in (LANDING_STAGE, SILVER_STAGE, *keyed):
        stage = stage_named(settings, name)
        if name == SILVER_STAGE and carried(settings, stage):
            continue
        run_stage_once(spark, settings, stage, record_progress=False)
        ran.append(stage)
    flush_progress(spark, settings, ran)


def carried(settings: Settings, stage: Stage) -> bool:
    """Whether the source stream's batches carry the stage (``runtime.carry``, once they have run)."""
    return checkpoints.is_carried(checkpoints.checkpoint_dir(settings, stage))


def counts(spark: SparkSession, settings: Settings) -> dict[str, tuple]:
    rows = read_table(spark, settings, GOLD_UNIQUE_URLS).collect()
    return {r.user_id: (r.unique_urls, utc(r.window_end), r.urls_in_state) for r in rows}


def test_distinct_urls_per_user_expire_24_hours_after_the_last_click(spark, settings) -> None:
    # The processors run in Spark's Python workers, which import this module: it must be this checkout's.
    assert Path(transforms.keyed_processors.__file__).resolve().is_relative_to(Path(__file__).resolve().parents[1])
    land(
        settings,
        "day1.jsonl",
        [
            click("a1", "A", "2024-01-01T10:00:00Z", "/a"),
            click("a2", "A", "2024-01-01T10:30:00Z", "/b"),
            click("a3", "A", "2024-01-01T11:00:00Z", "/a"),  # /a again: counted once, its last click moves on
            click("a4", "A", "2024-01-01T11:10:00Z", None),  # no url: not counted
            purchase("a5", "A", "2024-01-01T11:20:00Z", "5"),  # not a click
            click("b1", "B", "2024-01-01T10:15:00Z", "/a"),
            click("d1", "D", "2024-01-01T00:00:00Z", "/p"),
            # Exactly 24 h later: /p (last click 24 h before the newest) no longer counts, but is still held.
            click("d2", "D", "2024-01-02T00:00:00Z", "/q"),
        ],
    )
    run_through(spark, settings, UNIQUE_URLS_STAGE)
    assert counts(spark, settings) == {
        "A": (2, at(1, "11:00:00"), 2),
        "B": (1, at(1, "10:15:00"), 1),
        "D": (1, at(2, "00:00:00"), 2),
    }
    first_update = {r.user_id: r.updated_at for r in read_table(spark, settings, GOLD_UNIQUE_URLS).collect()}

    # Newest event 2024-01-02 10:31:59.999 → watermark 10:29:59.999. A timer fires once the watermark reaches
    # it: D's /p (expires 01-02 00:00) and B's /a (10:15) go; A's /b (expires 10:30:00) not yet.
    land(settings, "day2-a.jsonl", [click("c1", "C", "2024-01-02T10:31:59.999Z", "/x")])
    run_through(spark, settings, UNIQUE_URLS_STAGE)
    assert counts(spark, settings) == {
        "A": (2, at(1, "11:00:00"), 2),
        "B": (0, at(2, "10:15:00"), 0),
        "C": (1, at(2, "10:31:59.999"), 1),
        "D": (1, at(2, "00:00:00"), 1),
    }
    second_update = {r.user_id: r.updated_at for r in read_table(spark, settings, GOLD_UNIQUE_URLS).collect()}
    assert second_update["A"] == first_update["A"]  # not changed, not rewritten

    # A millisecond more: the watermark reaches 10:30:00, A's /b leaves; /a (last click 11:00) stays.
    land(settings, "day2-b.jsonl", [click("c2", "C", "2024-01-02T10:32:00Z", "/y")])
    run_through(spark, settings, UNIQUE_URLS_STAGE)
    assert counts(spark, settings) == {
        "A": (1, at(2, "10:30:00"), 1),
        "B": (0, at(2, "10:15:00"), 0),
        "C": (2, at(2, "10:32:00"), 2),
        "D": (1, at(2, "00:00:00"), 1),
    }

    arrow = DeltaTable(str(GOLD_UNIQUE_URLS.path(settings))).to_pyarrow_table()
    assert arrow.num_rows == 4 and arrow.column_names == GOLD_UNIQUE_URLS.column_names
    # The operator's state is in Spark's progress, hence in ops.stream_progress.
    progress = (
        read_table(spark, settings, OPS_STREAM_PROGRESS)
        .where(F.col("stream") == UNIQUE_URLS_STAGE)
        .select("state_rows", "state_memory_bytes")
        .collect()
    )
    assert progress and all(r.state_rows > 0 and r.state_memory_bytes > 0 for r in progress)


FRAUD_LINES = [
    purchase("f1", "F", "2024-01-01T09:00:00Z", "1000"),  # a first purchase: nothing to compare with
    purchase("l1", "L", "2024-01-01T10:00:00Z", "10"),
    purchase("u1", "U", "2024-01-01T10:00:00Z", "10"),
    purchase("h1", "H", "2024-01-01T10:00:00Z", "5"),
    click("c1", "L", "2024-01-01T10:10:00Z", "/x"),
    purchase("l2", "L", "2024-01-01T10:20:00Z", "30"),
    purchase("u2", "U", "2024-01-01T10:20:00Z", "30"),
    purchase("l3", "L", "2024-01-01T10:40:00Z", "200"),  # mean of 10 and 30 is 20: exactly 10x → alert
    purchase("u3", "U", "2024-01-01T10:40:00Z", "199.99"),  # just under 10x → none
    purchase("h2", "H", "2024-01-01T11:00:00Z", "50"),  # h1 is exactly 1 h before: in the hour, 10x → alert
    purchase("g1", "G", "2024-01-01T10:59:59Z", "5"),
    purchase("g2", "G", "2024-01-01T12:00:00Z", "50"),  # g1 is 1 h 1 s before: no earlier purchase in the hour
    purchase("b1", "B", "2024-01-01T12:00:00Z", "1"),
    purchase("s1", "S", "2024-01-01T12:00:00Z", "1"),
    purchase("b2", "B", "2024-01-01T12:00:30Z", "1"),
    purchase("s2", "S", "2024-01-01T12:00:30Z", "1"),
    purchase("b3", "B", "2024-01-01T12:01:00Z", "1"),  # 3 within 60 s → burst
    purchase("b4", "B", "2024-01-01T12:01:20Z", "1"),  # with b2 and b3, already a burst: same episode, none
    purchase("s3", "S", "2024-01-01T12:01:01Z", "1"),  # 3 spread over 61 s → none
    # Out of event-time order, within the watermark delay: judged in arrival order, o3 completes the burst.
    purchase("o1", "O", "2024-01-01T12:02:00Z", "1"),
    purchase("o2", "O", "2024-01-01T12:01:00Z", "1"),
    purchase("o3", "O", "2024-01-01T12:01:30Z", "1"),
]

EXPECTED_ALERTS = {
    # alert_id: (rule, user, running mean, evidence)
    "large_amount:l3": ("large_amount", "L", Decimal("20.0000"), ["l1", "l2", "l3"]),
    "large_amount:h2": ("large_amount", "H", Decimal("5.0000"), ["h1", "h2"]),
    "burst:b3": ("burst", "B", None, ["b1", "b2", "b3"]),
    "burst:o3": ("burst", "O", None, ["o2", "o3", "o1"]),
}


def alerts(spark: SparkSession, settings: Settings) -> dict[str, tuple]:
    rows = read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()
    return {r.alert_id: (r.rule, r.user_id, r.running_mean, list(r.triggering_event_ids)) for r in rows}


def test_fraud_alerts_are_the_hand_computed_ones_in_one_batch_or_split_across_runs(spark, settings, tmp_path) -> None:
    land(settings, "all.jsonl", FRAUD_LINES)
    run_through(spark, settings, FRAUD_STAGE)
    assert alerts(spark, settings) == EXPECTED_ALERTS
    rows = {r.alert_id: r for r in read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()}
    assert rows["large_amount:l3"].amount == Decimal("200.00")
    assert utc(rows["large_amount:l3"].event_time) == at(1, "10:40:00")
    assert all(r.ingest_time is not None and r.detected_at is not None for r in rows.values())
    arrow = DeltaTable(str(GOLD_FRAUD_ALERTS.path(settings))).to_pyarrow_table()
    assert arrow.num_rows == len(EXPECTED_ALERTS) and arrow.column_names == GOLD_FRAUD_ALERTS.column_names

    # The same lines in three runs (each after the watermark the one before left: nothing is late).
    # State carries across batches; the 1-hour eviction timers a run's watermark passed fire in the next run.
    split = replace(settings, home=tmp_path / "split")
    split.ensure_home()
    for n, (start, end) in enumerate([(0, 7), (7, 12), (12, len(FRAUD_LINES))]):
        land(split, f"part-{n}.jsonl", FRAUD_LINES[start:end])
        run_through(spark, split, FRAUD_STAGE)
    assert alerts(spark, split) == EXPECTED_ALERTS
    batches = read_table(spark, split, OPS_STREAM_PROGRESS).where(F.col("stream") == FRAUD_STAGE)
    assert batches.agg(F.sum("late")).first()[0] == 0
    # Each run ends with its data batch (no batch of no data after it): the eviction timers a run's watermark
    # passed fire in the next run's data batch, and no verdict above changed for it.
    assert sorted(r.rows_in for r in batches.collect()) == sorted([7, 5, len(FRAUD_LINES) - 12])


def test_replay_rebuilds_the_keyed_tables_and_their_streams_keep_the_state(spark, settings) -> None:
    land(
        settings,
        "before.jsonl",
        [
            purchase("b1", "B", "2024-01-01T12:00:00Z", "1"),
            purchase("b2", "B", "2024-01-01T12:00:30Z", "1"),
            purchase("b3", "B", "2024-01-01T12:01:00Z", "1"),
            click("k1", "K", "2024-01-01T12:00:00Z", "/x"),
        ],
    )
    run_through(spark, settings, FRAUD_STAGE, UNIQUE_URLS_STAGE)
    before = {r.alert_id: r.detected_at for r in read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()}
    assert list(before) == ["burst:b3"]
    counted = {r.user_id: r.updated_at for r in read_table(spark, settings, GOLD_UNIQUE_URLS).collect()}

    report = run_replay(spark, settings)
    assert {FRAUD_STAGE, UNIQUE_URLS_STAGE} <= {stream.name for stream in report.streams}
    assert report.rows_swapped[GOLD_FRAUD_ALERTS.name] == 1 and report.rows_swapped[GOLD_UNIQUE_URLS.name] == 1
    # The rebuild agrees: same rows, same processing times.
    assert {r.alert_id: r.detected_at for r in read_table(spark, settings, GOLD_FRAUD_ALERTS).collect()} == before
    assert {r.user_id: r.updated_at for r in read_table(spark, settings, GOLD_UNIQUE_URLS).collect()} == counted

    # The streams go on from the rebuilt state: b4 is judged against b1-b3 (10x their mean; within 60 s of
    # b2 and b3, which were a burst: the episode goes on, no second burst alert), /y is counted beside /x.
    land(
        settings,
        "after.jsonl",
        [purchase("b4", "B", "2024-01-01T12:01:30Z", "10"), click("k2", "K", "2024-01-01T12:02:00Z", "/y")],
    )
    run_through(spark, settings, FRAUD_STAGE, UNIQUE_URLS_STAGE)
    assert alerts(spark, settings) == {
        "burst:b3": ("burst", "B", None, ["b1", "b2", "b3"]),
        "large_amount:b4": ("large_amount", "B", Decimal("1.0000"), ["b1", "b2", "b3", "b4"]),
    }
    assert counts(spark, settings) == {"K": (2, at(1, "12:02:00"), 2)}


def test_the_fraud_rules_by_themselves() -> None:
    """``judge_purchase`` without Spark: the boundaries of both rules."""
    minute = 60_000_000

    def p(event_id: str, at_minutes: float, cents: int) -> Purchase:
        return Purchase(event_id, int(at_minutes * minute), cents)

    def judge(new: Purchase, *earlier: Purchase) -> list[tuple]:
        return [(f.rule, f.evidence, f.running_mean) for f in judge_purchase(new, earlier)]

    assert judge(p("x", 0, 100_000)) == []  # a first purchase
    assert judge(p("x", 60, 1000), p("a", 0, 100)) == [("large_amount", ("a", "x"), Decimal("1.0000"))]
    assert judge(p("x", 60.001, 1000), p("a", 0, 100)) == []  # the hour is [t - 1 h, t]
    assert judge(p("x", 10, 1000), p("a", 0, 0)) == []  # a mean of zero makes nothing large
    assert judge(p("x", 10, 1000), p("a", 0, 100), p("b", 5, -100)) == []
    # Mean of 1.00 and 2.00 is 1.50: 15.00 is exactly 10x; the mean is kept to 4 places, half-even.
    assert judge(p("x", 10, 1500), p("a", 0, 100), p("b", 5, 200))[0][2] == Decimal("1.5000")
    assert judge(p("x", 10, 1000), p("a", 0, 100), p("b", 5, 200)) == []
    third = p("c", 1, 100)
    assert judge(third, p("a", 0, 100), p("b", 0.5, 100)) == [("burst", ("a", "b", "c"), None)]
    # A purchase later in event time that arrived earlier counts: d, between a and c, makes three.
    assert judge(p("d", 0.75, 100), p("a", 0, 100), p("c", 1, 100)) == [("burst", ("a", "d", "c"), None)]
    # A fourth within the minute of a burst continues its episode: no second alert.
    assert judge(p("d", 0.75, 100), p("a", 0, 100), p("b", 0.5, 100), third) == []
