"""Keyed state under skew: the fraud stream's backlog with uniform and with Zipf-skewed users.

For each ``--skews`` value (0: every user alike; 1.1: Zipf, the first of 10,000 users makes 15 % of the
events), in a scratch home that keeps only ``gold.fraud_alerts``: ``--events`` events from the generator
(``devtools/synthetic.py``; ``--purchases`` of them purchases, the rest clicks, refunds and views; 20 events
per second of event time, up to 30 s of disorder; no late, duplicate or invalid lines) of ``--users`` users,
landed in ``--files`` files. Bronze and silver (and gold's windows, where the source stream carries them)
take them in, timed together; then the fraud stream runs its backlog alone, as ``run --once`` would: a
first batch that judges every purchase, then a batch that fires the timers the watermark passed. Printed
per case: the fraud stream's batches (seconds, rows in, state rows and bytes after), its total seconds,
the alerts by rule, and the hottest user's purchases.

    .venv/bin/python -m bench.skew                                # 1,000,000 events, 10,000 users, 0 and 1.1
    .venv/bin/python -m bench.skew --events 100000 --skews 1.1    # one smaller case

The processors are this checkout's ``transforms/keyed_processors.py`` (Spark's Python workers import it); to time
another version, run the module from a copy of the tree with that file, ``PYTHONPATH`` set to the copy.
Figures go to ``bench/results/skew.json``.
"""

import argparse
import json
import shutil
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from pyspark.sql import functions as F

from devtools.synthetic import StreamSpec, generate_lines
from runtime.checkpoints import FRAUD_STAGE, LANDING_STAGE
from runtime.runner import StageReport, prepare, run_stage_once
from runtime.sources.landing import place_in_landing
from runtime.stages import stage_named
from warehouse.catalog import OPS_STREAM_PROGRESS
from warehouse.delta import read_table
from warehouse.session import spark_session
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"


def land_events(settings: Settings, spec: StreamSpec, files: int) -> dict[str, int]:
    """Generate the events into ``files`` landing files; return purchases per user (the hottest first)."""
    lines = list(generate_lines(spec))
    purchases = Counter(
        json.loads(line)["user_id"] for line in lines if '"event_type": "purchase"' in line and line.startswith("{")
    )
    per_file = -(-len(lines) // files)
    for number in range(files):
        chunk = lines[number * per_file : (number + 1) * per_file]
        if chunk:
            place_in_landing(
                settings,
                f"skew-{number:03d}.jsonl",
                lambda handle, chunk=chunk: handle.writelines(f"{x}\n" for x in chunk),
            )
    return dict(purchases.most_common())


def measure(spark, base: Settings, home: Path, spec: StreamSpec, files: int) -> dict:
    shutil.rmtree(home, ignore_errors=True)
    settings = replace(base, home=home, gold_outputs=frozenset({"fraud_alerts"}))
    settings.ensure_home()
    prepare(spark, settings)
    started = time.monotonic()
    purchases = land_events(settings, spec, files)
    generated = time.monotonic() - started
    started = time.monotonic()
    run_stage_once(spark, settings, stage_named(settings, LANDING_STAGE))
    # The source stream's batches carry silver (and the tumbling table): no stream of silver's own to run.
    ingest_seconds = time.monotonic() - started

    batches: list[dict] = []

    def each_batch(report: StageReport, figures: dict[str, float]) -> None:
        done = sum(b["seconds"] for b in batches)
        batches.append({"seconds": round(report.seconds - done, 1), "alerts": int(figures.get("rows_written", 0))})

    started = time.monotonic()
    report = run_stage_once(spark, settings, stage_named(settings, FRAUD_STAGE), listener=each_batch)
    fraud_seconds = time.monotonic() - started
    progress = (
        read_table(spark, settings, OPS_STREAM_PROGRESS)
        .where(F.col("stream") == FRAUD_STAGE)
        .orderBy("batch_id")
        .select("batch_id", "batch_seconds", "rows_in", "state_rows", "state_memory_bytes")
        .collect()
    )
    for batch, row in zip(batches, progress, strict=False):
        batch.update(rows_in=row.rows_in, state_rows=row.state_rows, state_bytes=row.state_memory_bytes)
    hottest = next(iter(purchases.items()), ("", 0))
    return {
        "skew": spec.skew,
        "events": spec.events,
        "users": spec.users,
        "purchases": sum(purchases.values()),
        "hottest_user_purchases": hottest[1],
        "generate_and_land_seconds": round(generated, 1),
        "ingest_seconds": round(ingest_seconds, 1),
        "fraud_seconds": round(fraud_seconds, 1),
        "fraud_batches": batches,
        "alerts": int(report.figures.get("rows_written", 0)),
        "large_amount": int(report.figures.get("large_amount", 0)),
        "burst": int(report.figures.get("burst", 0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--skews", type=float, nargs="+", default=[0.0, 1.1])
    parser.add_argument("--purchases", type=float, default=0.9, help="share of the events that are purchases")
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--home", type=Path, default=REPO_ROOT / ".lakehouse" / "bench-skew")
    args = parser.parse_args()
    base = Settings.from_env()
    spark = spark_session(replace(base, home=args.home))
    cases = []
    for skew in args.skews:
        spec = StreamSpec(
            events=args.events,
            users=args.users,
            skew=skew,
            purchase_fraction=args.purchases,
            duplicate_fraction=0.0,
            late_fraction=0.0,
            invalid_fraction=0.0,
            seed=args.seed,
        )
        figures = measure(spark, base, args.home / f"skew-{skew:g}", spec, args.files)
        cases.append(figures)
        print(json.dumps(figures), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "skew.json").write_text(json.dumps({"args": vars(args) | {"home": None}, "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
