"""State size per stateful operator as history grows: does it stay flat?

Rounds of input, each covering the next ``--hours`` of event time (clicks with URLs, purchases, orders
and payments, for ``--users`` users), go through ``run_once`` in one process. After each round the state
each stateful stream holds (``ops.stream_progress.state_rows`` / ``state_memory_bytes`` of its last batch)
and the history behind it (silver rows) are printed. The state should follow the horizon each operator
keeps (24 h of URLs, 1 h of purchases, 15 min of orders + the watermark delay), not the history.

    .venv/bin/python -m bench.state                  # 6 rounds of 6 h, 20,000 events each
    .venv/bin/python -m bench.state --rounds 3       # a shorter run

Figures go to ``bench/results/state.json``.
"""

import argparse
import json
import random
import shutil
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import functions as F

from runtime.checkpoints import FRAUD_STAGE, ORDER_PAYMENTS_STAGE, UNIQUE_URLS_STAGE
from runtime.runner import run_once
from runtime.sources.landing import place_in_landing
from warehouse.catalog import OPS_STREAM_PROGRESS, SILVER_EVENTS
from warehouse.delta import read_table
from warehouse.session import spark_session
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
STATEFUL = (FRAUD_STAGE, UNIQUE_URLS_STAGE, ORDER_PAYMENTS_STAGE)
START = datetime(2024, 3, 1, tzinfo=UTC)


def round_lines(n: int, events: int, users: int, hours: float) -> list[str]:
    """Round ``n``: ``events`` events evenly over its ``hours`` of event time, in order."""
    rng = random.Random(n)
    lines = []
    for i in range(events):
        at = START + timedelta(hours=hours * (n + i / events))
        stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        user = f"user-{rng.randrange(users):05d}"
        roll = rng.random()
        if roll < 0.5:
            kind = f'"event_type":"click","url":"/page/{rng.randrange(200)}"'
        elif roll < 0.7:
            kind = '"event_type":"purchase"'
        elif roll < 0.85:
            kind = f'"event_type":"order","order_id":"o-{n}-{i}"'
        else:
            # Pays the order a few events earlier (within a minute of event time), or is a stray payment.
            kind = f'"event_type":"payment","order_id":"o-{n}-{max(0, i - rng.randrange(1, 20))}"'
        lines.append(
            f'{{"event_id":"r{n}-{i}","user_id":"{user}","event_time":"{stamp}","amount":{rng.randint(1, 500)},{kind}}}'
        )
    return lines


def measure(rounds: int, events: int, users: int, hours: float, home: Path) -> list[dict]:
    shutil.rmtree(home, ignore_errors=True)
    settings = replace(Settings.from_env(), home=home)
    settings.ensure_home()
    spark = spark_session(settings)
    figures = []
    for n in range(rounds):
        lines = round_lines(n, events, users, hours)
        place_in_landing(
            settings, f"round-{n}.jsonl", lambda handle, lines=lines: handle.writelines(f"{x}\n" for x in lines)
        )
        run_once(spark, settings)
        progress = read_table(spark, settings, OPS_STREAM_PROGRESS).where(F.col("stream").isin(*STATEFUL))
        last = {
            r.stream: (r.state_rows, r.state_memory_bytes)
            for r in progress.orderBy("recorded_at", "batch_id").collect()
        }
        row = {
            "round": n + 1,
            "history_events": read_table(spark, settings, SILVER_EVENTS).count(),
            **{f"{s}_rows": last.get(s, (0, 0))[0] for s in STATEFUL},
            **{f"{s}_bytes": last.get(s, (0, 0))[1] for s in STATEFUL},
        }
        figures.append(row)
        print(json.dumps(row), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=500)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--home", type=Path, default=REPO_ROOT / ".lakehouse" / "bench-state")
    args = parser.parse_args()
    figures = measure(args.rounds, args.events, args.users, args.hours, args.home)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "state.json").write_text(json.dumps({"args": vars(args) | {"home": None}, "rounds": figures}, indent=2))


if __name__ == "__main__":
    main()
