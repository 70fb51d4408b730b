"""Faults met on real streams and Delta tables: each stops the run before a stream starts, with one line
that names the recovery, and the recovery ends with bronze holding every landed line once and gold equal
to the plain-Python reference."""

import os
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from devtools.synthetic import StreamSpec, generate_lines
from runtime.checkpoints import LANDING_STAGE, checkpoint_dir
from runtime.faults import Fault
from runtime.replay import run_replay
from runtime.runner import run_once, run_reconcile
from tests.lines import land
from tests.reference import landing_lines, window_totals
from tests.servers import LAKEHOUSE
from warehouse.catalog import BRONZE_EVENTS, SILVER_EVENTS, user_spend_table
from warehouse.delta import read_table


def _land_events(settings, name: str, seed: int) -> None:
    spec = StreamSpec(
        events=200, users=6, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.04, invalid_fraction=0.03, seed=seed,
    )  # fmt: skip
    land(settings, name, list(generate_lines(spec)))


def _assert_exact(spark, settings) -> None:
    """Invariants 1 and 2 after a reconcile: bronze = the lines landed; gold = the reference."""
    run_reconcile(spark, settings)
    lines = landing_lines(settings.landing_dir)
    assert read_table(spark, settings, BRONZE_EVENTS).count() == len(lines)
    gold = {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, user_spend_table(settings)).collect()
    }
    expected: dict[tuple[str, datetime], tuple[Decimal, int]] = window_totals(lines)
    assert gold == expected


def _newest(folder) -> str:
    return str(max(int(name.name) for name in folder.iterdir() if name.name.isdigit()))


def test_a_lost_source_checkpoint_is_refused_in_one_line_and_a_replay_from_the_landing_zone_recovers(
    spark, settings
) -> None:
    """The landing stream's checkpoint deleted: a restart would read every landed file again (bronze and
    silver twice). It is refused, in one line from the command too, and `replay --source landing` rebuilds
    bronze's file rows and the stream's position from the landing zone."""
    _land_events(settings, "first.jsonl", seed=1)
    run_once(spark, settings)
    shutil.rmtree(checkpoint_dir(settings, LANDING_STAGE))
    _land_events(settings, "second.jsonl", seed=2)
    with pytest.raises(Fault, match=r"bronze_events stream is gone .* `lakehouse replay --source landing`"):
        run_once(spark, settings)
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home)}
    command = subprocess.run([LAKEHOUSE, "run", "--once"], env=env, capture_output=True, text=True, timeout=120)
    assert command.returncode == 1
    assert command.stderr.count("\n") == 1 and "replay --source landing" in command.stderr, command.stderr

    run_replay(spark, settings, source="landing")
    run_once(spark, settings)  # the second file came in with the rebuild: nothing new
    _land_events(settings, "third.jsonl", seed=3)
    run_once(spark, settings)
    _assert_exact(spark, settings)


@pytest.mark.parametrize("damage", ["truncated offset entry", "ledger without its writer"])
def test_a_damaged_checkpoint_file_is_named_and_the_replay_recovers(spark, settings, damage: str) -> None:
    """A truncated offset entry of the landing stream, or silver's ledger of carried batch numbers without
    the writer id its commits carry: named in the refusal, and the replay it names ends exact."""
    _land_events(settings, "first.jsonl", seed=4)
    run_once(spark, settings)
    if damage == "truncated offset entry":
        offsets = checkpoint_dir(settings, LANDING_STAGE) / "offsets"
        entry = offsets / _newest(offsets)
        entry.write_text(entry.read_text().splitlines()[0] + "\n")
        expected, recovery = rf"offsets/{entry.name} is truncated", ["--source", "landing"]
    else:
        (checkpoint_dir(settings, "silver_events") / "carried" / "writer").unlink()
        expected, recovery = r"carried/writer is missing", []
    _land_events(settings, "second.jsonl", seed=5)
    with pytest.raises(Fault, match=rf"damaged \({expected}\).*`lakehouse replay{' ' if recovery else ''}"):
        run_once(spark, settings)
    run_replay(spark, settings, source=recovery[1] if recovery else "bronze")
    run_once(spark, settings)
    _assert_exact(spark, settings)


def test_a_corrupt_delta_commit_is_named_and_moving_the_table_aside_then_replaying_recovers(spark, settings) -> None:
    """Silver's newest commit cut short (a disk that lost the file's end): every reader would fail on it.
    The run names the table and file; with the table's folder moved aside, `replay` rebuilds silver from
    bronze into a new table and everything after it, exact."""
    _land_events(settings, "first.jsonl", seed=6)
    run_once(spark, settings)
    log = SILVER_EVENTS.path(settings) / "_delta_log"
    newest = max(log.glob("*.json"))
    newest.write_bytes(newest.read_bytes()[:100])
    with pytest.raises(Fault, match=rf"Delta log of silver.events is damaged \({newest.name} is truncated"):
        run_once(spark, settings)
    SILVER_EVENTS.path(settings).rename(settings.home / "silver-events-damaged")
    run_replay(spark, settings)
    _land_events(settings, "second.jsonl", seed=7)
    run_once(spark, settings)
    _assert_exact(spark, settings)
