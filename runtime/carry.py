"""One micro-batch carries a landed line to gold: bronze, silver and the tumbling table in one batch.

The source stream's ``foreachBatch`` (landing files or Kafka) appends the batch's lines to
``bronze.events``, classifies them into ``silver.*`` from memory (no read of bronze back), and folds the
new events into ``gold.user_spend_<n>m`` (firings, corrections, late events, the watermark row that the
derived windows' stream follows). One query start and one source read per batch instead of three. The
lines are spread evenly over the task slots first, and bronze's append runs while silver parses them;
silver commits only after bronze has (decision 81).

Exactly once, each part under its own identity, as when silver and gold were streams of their own: bronze
as (source writer, source batch); silver as (silver writer, silver batch) and gold as (gold writer, gold
batch), numbers a ledger beside the old streams' checkpoints assigns once per source batch (a re-run after
a crash gets the same ones) and that go on from the old streams' own numbering. Silver's dedup history
is every silver batch before its number, so a re-run classifies as the first attempt did; the batch's
``ingest_time`` is the source batch's planned time (in its offset entry), so a re-run stamps the lines
as bronze holds them.

Time semantics: processing time only stamps ``ingest_time``; event time starts in the window step (the
watermark as the gold writer's previous batch left it).
"""

import time
from pathlib import Path

from pyspark.sql import DataFrame

from runtime import checkpoints
from runtime.checkpoints import SILVER_STAGE, checkpoint_dir, windows_stage_name
from transforms.bronze import lines_figures, spread, stamp, write_lines
from transforms.fraud_rules import AMOUNT_LIMIT
from transforms.gold.open_windows import OpenWindows
from transforms.gold.tumbling import update_windows
from transforms.latency import ARRIVAL_KEYS
from transforms.seen_keys import SeenKeys
from transforms.silver import refined
from warehouse.catalog import SILVER_EVENTS, tumbling_table
from warehouse.delta import batch_scope, in_background, latest_version, materialized
from warehouse.locks import hold_gold
from warehouse.session import task_slots
from warehouse.settings import Settings

#: Each home's index of stored event keys, kept for the life of the process (its batches' dedup pre-filter).
_SEEN: dict[Path, SeenKeys] = {}
#: Each tumbling table's open windows (by its path), kept for the life of the process (its batches' old values).
_OPEN: dict[Path, OpenWindows] = {}


def forget(home: Path, tumbling: Path) -> None:
    """Drop what this process keeps of a home it no longer writes (a warm-up's scratch home)."""
    _SEEN.pop(home, None)
    _OPEN.pop(tumbling, None)


def carried_writer(settings: Settings, stage: str) -> str:
    """The Delta writer id of a carried stage (silver or the windows), as its own stream had it."""
    return f"lakehouse:{stage}:{checkpoints.carried_writer(checkpoint_dir(settings, stage))}"


def carry_to_gold(
    lines: DataFrame, batch_id: int, settings: Settings, writer_id: str, source: str, checkpoint: Path
) -> dict[str, float]:
    """Bronze, silver and the tumbling table for one micro-batch of the source stream ``source`` (whose
    checkpoint is ``checkpoint``); the runner has scoped the bronze write to (``writer_id``, ``batch_id``)."""
    since = checkpoints.batch_earliest_start(checkpoint, batch_id)
    planned = checkpoints.batch_timestamp(checkpoint, batch_id)
    started = time.monotonic()
    with materialized(spread(stamp(lines, batch_id, planned), task_slots(settings))) as stamped:
        figures = lines_figures(stamped)
        if not figures["rows_in"]:
            figures["bronze_seconds"] = round(time.monotonic() - started, 3)
            return figures

        def land() -> None:
            write_lines(stamped, batch_id, settings, writer_id, figures["rows_in"])
            figures["bronze_seconds"] = round(time.monotonic() - started, 3)

        silver_batch = checkpoints.carried_batch(checkpoint_dir(settings, SILVER_STAGE), source, batch_id)
        silver_writer = carried_writer(settings, SILVER_STAGE)
        # Bronze's append runs while silver parses and classifies the same lines (its commit is driver time,
        # the parse executor time); silver commits only after bronze has.
        with (
            in_background(land) as landing,
            batch_scope(silver_writer, silver_batch, since),
            refined(
                stamped, silver_batch, settings, silver_writer, _SEEN.setdefault(settings.home, SeenKeys()), planned,
                landing.result,
            ) as (silver, events),
        ):  # fmt: skip
            figures.update(
                events=silver["rows_written"],
                quarantined=silver["quarantined"],
                duplicates=silver["duplicates"],
                conflicting=silver["conflicting"],
                silver_seconds=round(time.monotonic() - started, 3),
            )
            if AMOUNT_LIMIT in silver:  # gold.fraud_alerts kept: the batch's alerts of the rule without state
                figures[AMOUNT_LIMIT] = silver[AMOUNT_LIMIT]
            if silver["rows_written"]:
                folded = time.monotonic()
                figures.update(_fold(events, settings, source, batch_id, since))
                figures["gold_seconds"] = round(time.monotonic() - folded, 3)
    return figures


def _fold(events: DataFrame, settings: Settings, source: str, batch_id: int, since: float) -> dict[str, float]:
    """The batch's new events into the tumbling table, as the windows stream's next batch would."""
    windows = windows_stage_name(settings)
    gold_batch = checkpoints.carried_batch(checkpoint_dir(settings, windows), source, batch_id)
    gold_writer = carried_writer(settings, windows)
    # Only this stream writes silver.events (its stage locks), so its newest version holds the batch.
    silver_version = latest_version(SILVER_EVENTS.path(settings) / "_delta_log")
    with batch_scope(gold_writer, gold_batch, since), hold_gold(settings, f"{windows} batch", derived=False):
        gold = update_windows(
            events, gold_batch, settings, gold_writer, windows, silver_version,
            _OPEN.setdefault(tumbling_table(settings).path(settings), OpenWindows()),
        )  # fmt: skip
    # The batch's latency is measured from bronze's arrival figures, to the end of the whole batch.
    return {
        ("windows_changed" if key == "rows_written" else key): value
        for key, value in gold.items()
        if key not in ("rows_in", *ARRIVAL_KEYS)
    }
