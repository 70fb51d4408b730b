"""``make bench``, part two: fold 1,000 late events into gold (`lakehouse reconcile`) against rebuilding
everything from bronze (`lakehouse replay`), over 1 M and over 10 M events of history.

For each history size, in its own scratch home:

1. ``lakehouse generate`` (seed 42) and ``lakehouse run --once`` build the history (untimed; the
   generator's own too-late events are set aside, and the reconcile folds them with the 1,000).
2. 1,000 late events land: each far behind the watermark, within the last six hours of event time,
   spread over the users; ``run --once`` sets them aside in ``silver.late_events`` (untimed).
3. Timed: ``lakehouse reconcile`` (the 1,000 are folded), then ``lakehouse replay`` (the whole history).
4. Sanity: every late event was set aside and folded, and the replay leaves gold's rows and events as
   the reconcile left them.

Both are timed as whole processes (wall clock, Spark start-up included). The target is reconcile ≤ 0.1x
replay at 10 M; the figures also go to ``bench/results/reconcile.json``.

    .venv/bin/python -m bench.reconcile                        # 1 M and 10 M
    .venv/bin/python -m bench.reconcile --history 200000       # a smoke run
"""

import argparse
import json
import os
import random
import re
import shutil
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from deltalake import DeltaTable

from bench.run import SEED, bench_environment, lakehouse_command, run_timed, table_figures
from warehouse.catalog import OPS_WATERMARKS, SILVER_LATE_EVENTS, tumbling_table
from warehouse.settings import REPO_ROOT, Settings

TARGET_RATIO = 0.1
LATE_EVENTS = 1_000
RESULTS_PATH = REPO_ROOT / "bench" / "results" / "reconcile.json"


def late_lines(settings: Settings, users: int, count: int, seed: int) -> list[str]:
    """``count`` events for windows the watermark closed long ago (the last six hours before it)."""
    marks = DeltaTable(str(OPS_WATERMARKS.path(settings))).to_pyarrow_table(columns=["watermark"])
    watermark = max(m for m in marks.column("watermark").to_pylist() if m is not None)
    closed_before = watermark - settings.windows.allowed_lateness - settings.windows.length
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        moment = closed_before - timedelta(seconds=rng.uniform(0, 6 * 3600))
        event = {
            "event_id": f"bench-late-{n:06d}",
            "user_id": f"user-{rng.randrange(users):05d}",
            "event_time": moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "amount": float(Decimal(rng.randrange(1, 50_000)) / 100),
            "event_type": "purchase",
        }
        lines.append(json.dumps(event))
    return lines


def bench_history(lakehouse: str, root: Path, events: int, files: int, users: int) -> dict[str, float]:
    home = root / f"history-{events}"
    env = {**bench_environment(home, files_per_trigger=5), "COLUMNS": "200"}
    settings = Settings.from_env(env)
    log = root / f"{events}"

    def step(name: str, *args: str) -> tuple[float, str]:
        print(f"  {name} ...", flush=True)
        return run_timed([lakehouse, *args], env, Path(f"{log}-{name}.log"))

    print(f"history of {events:,} events ({home})")
    step(
        "generate",
        "generate",
        "--events",
        str(events),
        "--seed",
        str(SEED),
        "--files",
        str(files),
        "--users",
        str(users),
    )
    build_seconds, _ = step("build", "run", "--once")

    late_file = root / f"late-{events}.jsonl"
    late_file.write_text("\n".join(late_lines(settings, users, LATE_EVENTS, SEED)) + "\n")
    step("ingest-late", "ingest", str(late_file))
    step("set-aside", "run", "--once")
    late_rows = DeltaTable(str(SILVER_LATE_EVENTS.path(settings))).to_pyarrow_table(columns=["event_id"])
    aside = sum(1 for e in late_rows.column("event_id").to_pylist() if e.startswith("bench-late-"))
    if aside != LATE_EVENTS:
        raise SystemExit(f"bench: {aside} of the {LATE_EVENTS} late events were set aside, not all of them")

    reconcile_seconds, output = step("reconcile", "reconcile")
    folded = re.search(r"late_events=([\d,]+)", output)
    gold = tumbling_table(settings).path(settings)
    rows, events_in_gold = table_figures(gold)
    replay_seconds, output = step("replay", "replay")
    changed = re.search(r"gold keys changed by the replay: ([\d,]+)", output)
    rows_after, events_after = table_figures(gold)
    if (rows_after, events_after) != (rows, events_in_gold):
        raise SystemExit(f"bench: replay changed gold ({rows:,}/{events_in_gold:,} → {rows_after:,}/{events_after:,})")
    return {
        "history_events": events,
        "build_seconds": build_seconds,
        "late_events": LATE_EVENTS,
        "late_events_folded": int(folded.group(1).replace(",", "")) if folded else -1,
        "reconcile_seconds": reconcile_seconds,
        "replay_seconds": replay_seconds,
        "ratio_reconcile_over_replay": reconcile_seconds / replay_seconds,
        "gold_rows": rows,
        "gold_events": events_in_gold,
        "replay_gold_keys_changed": int(changed.group(1).replace(",", "")) if changed else -1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Time reconcile of 1,000 late events against a full replay.")
    parser.add_argument("--history", type=int, action="append", help="events of history (repeatable)")
    parser.add_argument("--users", type=int, default=1000, help="distinct users in the history")
    parser.add_argument("--events-per-file", type=int, default=100_000, help="landing file size")
    parser.add_argument("--keep", action="store_true", help="keep the scratch homes afterwards")
    args = parser.parse_args()
    sizes = args.history or [1_000_000, 10_000_000]

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    root = REPO_ROOT / ".lakehouse" / f"bench-reconcile-{stamp}"
    root.mkdir(parents=True)
    lakehouse = lakehouse_command()
    results = []
    finished = False
    try:
        for events in sizes:
            files = max(1, events // args.events_per_file)
            results.append(bench_history(lakehouse, root, events, files, args.users))
        finished = True
    finally:
        if not finished or args.keep:
            print(f"bench: kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    print()
    print(
        f"{'history':>12} {'reconcile 1,000 late':>22} {'full replay':>13} {'ratio':>8}"
        f"  (target ≤ {TARGET_RATIO}x at 10 M)"
    )
    for r in results:
        print(
            f"{r['history_events']:>12,} {r['reconcile_seconds']:>20.1f} s {r['replay_seconds']:>11.1f} s "
            f"{r['ratio_reconcile_over_replay']:>7.3f}x"
        )
    for r in results:
        print(
            f"sanity {r['history_events']:,}: folded {r['late_events_folded']:,} late events; "
            f"gold {r['gold_rows']:,} rows, "
            f"{r['gold_events']:,} events; replay changed {r['replay_gold_keys_changed']} gold keys"
        )
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    payload = {"timestamp": stamp, "cpus": os.cpu_count(), "target_ratio": TARGET_RATIO, "runs": results}
    RESULTS_PATH.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"results written to {RESULTS_PATH.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
