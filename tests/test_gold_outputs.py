"""LAKEHOUSE_GOLD_OUTPUTS: an output left out costs nothing and is left alone.

Every output is covered with all outputs on (the default a user gets) elsewhere: the batch re-run test and
the Dagster lakehouse_once test keep them all. Here: a left-out output creates no table, its stream never
runs, and a replay leaves a table it kept from before untouched.
"""

from dataclasses import replace
from decimal import Decimal

from runtime.replay import run_replay
from runtime.runner import run_once
from tests.lines import SEEDS_EXAMPLE, event, land
from warehouse.catalog import gold_output_tables, sessions_table, tumbling_table
from warehouse.delta import is_delta_table, read_table, table_version


def test_a_left_out_output_has_no_table_and_a_replay_leaves_it_untouched(spark, settings) -> None:
    sessions_only = replace(settings, gold_outputs=frozenset({"sessions"}))
    land(sessions_only, "seeds.jsonl", SEEDS_EXAMPLE)
    run_once(spark, sessions_only)
    for output, table in gold_output_tables(settings).items():
        assert is_delta_table(table.path(settings)) == (output == "sessions"), output
    assert not (settings.checkpoints_dir / "gold_fraud_alerts").exists()
    assert not (settings.checkpoints_dir / "gold_order_payments").exists()
    sessions = sessions_table(settings)
    kept_version = table_version(spark, settings, sessions)
    kept_rows = sorted(read_table(spark, settings, sessions).collect())

    # Sessions left out from now on: new events reach gold, not the sessions table, and no other table appears.
    none = replace(settings, gold_outputs=frozenset())
    land(none, "more.jsonl", [event("a9", "A", "2024-01-01T10:03:00Z", "4")])
    run_once(spark, none)
    assert table_version(spark, none, sessions) == kept_version
    for output, table in gold_output_tables(settings).items():
        assert is_delta_table(table.path(settings)) == (output == "sessions"), output
    gold = {
        (r.user_id, r.window_start.strftime("%H:%M")): (r.total_amount, r.event_count)
        for r in read_table(spark, none, tumbling_table(none)).collect()
    }
    # By hand: A 10:00 + 10:04 + 10:03 = 5 + 2 + 4 in [10:00, 10:05).
    assert gold[("A", "10:00")] == (Decimal("11.00"), 3)

    run_replay(spark, none)
    assert table_version(spark, none, sessions) == kept_version
    assert sorted(read_table(spark, none, sessions).collect()) == kept_rows
    for output, table in gold_output_tables(settings).items():
        assert is_delta_table(table.path(settings)) == (output == "sessions"), output
    replayed = {
        (r.user_id, r.window_start.strftime("%H:%M")): (r.total_amount, r.event_count)
        for r in read_table(spark, none, tumbling_table(none)).collect()
    }
    assert replayed == gold
