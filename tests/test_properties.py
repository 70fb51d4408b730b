"""Property-based tests (hypothesis) of the streaming semantics on real streams and Delta tables.

For random events arriving in any order that stays within the watermark delay (so no event is late),
and split into any number of micro-batches, every gold table ends equal to a direct recomputation by
the plain-Python reference over the same lines: tumbling and hopping windows, sessions, global windows
and the firings log. Equal to one recomputation means equal to each other: neither the arrival order
nor the batch boundaries change a final result. Each example runs whole ``run_once`` passes, so the
number of examples is small; every run draws new ones.
"""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from runtime.runner import run_once
from tests.lines import event, land
from tests.reference import first_arrivals, hopping_totals, landing_lines, session_totals, window_totals
from warehouse.catalog import (
    SILVER_LATE_EVENTS,
    firings_table,
    global_table,
    hopping_table,
    sessions_table,
    tumbling_table,
)
from warehouse.delta import read_table

pytestmark = pytest.mark.gold_outputs("hopping", "sessions", "global", "firings")

BASE = datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
DELAY_SECONDS = 120

events_strategy = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "C"]),
        st.integers(min_value=0, max_value=3 * 3600),  # event time: seconds after 10:00
        st.integers(min_value=-500, max_value=5000),  # amount in cents
        st.integers(min_value=0, max_value=DELAY_SECONDS - 1),  # arrival jitter, below the delay
    ),
    min_size=1,
    max_size=30,
)


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


@hypothesis_settings(
    max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(drawn=events_strategy, cuts=st.lists(st.integers(min_value=1, max_value=29), max_size=2), home=st.uuids())
def test_final_gold_equals_a_direct_recomputation_for_any_order_and_batching(
    spark, settings, drawn, cuts, home
) -> None:
    windows = replace(settings.windows, global_trigger_count=3)
    settings = replace(settings, home=settings.home.parent / f"example-{home}", windows=windows)
    settings.ensure_home()
    # Arrival order: by event time + a jitter under the delay, so each event is less than the delay behind
    # the largest event time that arrived before it: never late.
    arrivals = sorted(enumerate(drawn), key=lambda item: item[1][1] + item[1][3])
    lines = [
        event(f"e{n}", user, (BASE + timedelta(seconds=at)).isoformat().replace("+00:00", "Z"),
              str(Decimal(cents) / 100))
        for n, (user, at, cents, _) in arrivals
    ]  # fmt: skip
    bounds = [0, *sorted({c for c in cuts if c < len(lines)}), len(lines)]
    for part, (start, end) in enumerate(pairwise(bounds)):
        land(settings, f"part-{part}.jsonl", lines[start:end])
        run_once(spark, settings)

    assert read_table(spark, settings, SILVER_LATE_EVENTS).count() == 0
    received = landing_lines(settings.landing_dir)
    windows = window_totals(received)
    gold = {
        (r.user_id, utc(r.window_start)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }
    assert gold == windows
    hours = {
        (r.user_id, utc(r.window_start)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, hopping_table(settings)).collect()
    }
    assert hours == hopping_totals(windows)
    sessions = {
        (r.user_id, utc(r.session_start)): (utc(r.session_end), r.total_amount, r.event_count)
        for r in read_table(spark, settings, sessions_table(settings)).collect()
    }
    assert sessions == session_totals(received)

    per_user: dict[str, list] = {}
    for e in first_arrivals(received):
        figures = per_user.setdefault(e["user_id"], [0, Decimal("0.00")])
        figures[0] += 1
        figures[1] += e["amount"]
    global_rows = read_table(spark, settings, global_table(settings)).collect()
    assert {r.user_id: [r.event_count, r.total_amount] for r in global_rows} == per_user
    assert all(r.firings == r.event_count // 3 for r in global_rows)

    # Accumulating firings: each window's newest firing carries gold's value.
    newest = (
        read_table(spark, settings, firings_table(settings))
        .groupBy("user_id", "window_start")
        .agg(F.max_by(F.struct("total_amount", "event_count"), "revision").alias("v"))
        .collect()
    )
    assert {(r.user_id, utc(r.window_start)): (r.v.total_amount, r.v.event_count) for r in newest} == gold
