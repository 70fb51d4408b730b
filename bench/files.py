"""``make bench``, part five: small files over a long continuous run, kept bounded by maintenance.

``run --continuous`` holds a steady rate (``bench.freshness``'s generator and probes) for an hour while
``lakehouse maintain`` runs beside it every ``--maintain-every`` minutes, as the maintenance schedule would.
Every minute each table's live files (what its current version references: what every reader and the
log replay pay for) and files on disk are sampled with delta-rs and ``os.walk``. Bounded means the
live files of every table after the last maintenance are no more than after the first one (or 5): whatever
history accumulates, compaction brings each table back to a few files. Between two maintenances a
table gains one file per micro-batch that wrote it, so the peaks follow the batch rate of that interval
(reported, not judged). Figures (and freshness over the hour) go to ``bench/results/files.json``.

    .venv/bin/python -m bench.files                                  # 1,000 events/s for 60 min
    .venv/bin/python -m bench.files --minutes 4 --maintain-every 2   # a smoke run
"""

import argparse
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bench.freshness import measure
from bench.run import bench_environment, lakehouse_command
from warehouse.catalog import all_tables
from warehouse.delta import is_delta_table
from warehouse.maintenance import files_on_disk, live_files
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"


def sample_tables(settings: Settings, started: float) -> dict[str, object]:
    tables = {}
    for table in all_tables(settings):
        path = table.path(settings)
        if is_delta_table(path):
            try:
                tables[table.name] = {"live": live_files(path), "on_disk": files_on_disk(path)}
            except Exception:  # a commit in flight: the next sample will see it
                continue
    return {"minute": round((time.monotonic() - started) / 60, 2), "tables": tables}


def maintain_timed(env: dict[str, str], log: Path) -> dict[str, object]:
    began = time.monotonic()
    with log.open("a") as out:
        done = subprocess.run(
            [lakehouse_command(), "maintain", "--json"], env=env, stdout=subprocess.PIPE, stderr=out, text=True
        )
    return {
        "seconds": round(time.monotonic() - began, 1),
        "exit_code": done.returncode,
        "tables": json.loads(done.stdout) if done.returncode == 0 else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Files per table over a long `run --continuous`, with maintenance.")
    parser.add_argument("--rate", type=int, default=1_000, help="events per second landed")
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the rate is held")
    parser.add_argument("--maintain-every", type=float, default=15.0, help="minutes between `lakehouse maintain`")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    args = parser.parse_args()
    root = REPO_ROOT / ".lakehouse" / f"bench-files-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True)
    home = root / f"rate-{args.rate}"
    env = bench_environment(home, 50)
    settings = Settings.from_env(env)
    samples: list[dict[str, object]] = []
    maintenances: list[dict[str, object]] = []
    stop = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        next_maintenance = started + args.maintain_every * 60
        while not stop.wait(60):
            samples.append(sample_tables(settings, started))
            if time.monotonic() >= next_maintenance:
                maintenances.append({"minute": round((time.monotonic() - started) / 60, 2)})
                maintenances[-1].update(maintain_timed(env, root / "maintain.log"))
                samples.append({**sample_tables(settings, started), "after_maintenance": True})
                next_maintenance += args.maintain_every * 60

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        print(f"holding {args.rate:,} events/s for {args.minutes:g} min, maintain every {args.maintain_every:g} min")
        result = measure(args.rate, args.minutes * 60, 1, root)
    finally:
        stop.set()
        watcher.join()
        final = sample_tables(settings, started)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    after = [s for s in samples if s.get("after_maintenance")]
    names = sorted({name for s in samples for name in s["tables"]})

    def peak(name: str, window: list[dict[str, object]]) -> int:
        return max((s["tables"].get(name, {}).get("live", 0) for s in window), default=0)

    # Peaks of live files between maintenances: interval k runs from maintenance k-1 to maintenance k.
    cuts = [0.0] + [float(m["minute"]) for m in maintenances] + [float("inf")]
    intervals = [[s for s in samples if lo <= float(s["minute"]) < hi] for lo, hi in itertools.pairwise(cuts)]
    per_table = {}

    def live_after(sample: dict[str, object], name: str) -> int:
        return sample["tables"].get(name, {}).get("live", 0)

    for name in names:
        peaks = [peak(name, window) for window in intervals if window]
        per_table[name] = {
            "live_files_end": final["tables"].get(name, {}).get("live"),
            "files_on_disk_end": final["tables"].get(name, {}).get("on_disk"),
            "live_files_after_each_maintenance": [live_after(s, name) for s in after],
            "peak_live_files_per_interval": peaks,
            # A MERGE or append landing during the maintenance itself leaves a file or two: 5 is "a few".
            "bounded": bool(after) and live_after(after[-1], name) <= max(5, live_after(after[0], name)),
        }
    report = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "rate": args.rate,
        "minutes": args.minutes,
        "maintain_every_minutes": args.maintain_every,
        "vacuum_retention_hours": settings.schedules.vacuum_retention_hours,
        "all_bounded": all(t["bounded"] for t in per_table.values()),
        "tables": per_table,
        "maintenances": [{k: v for k, v in m.items() if k != "tables"} for m in maintenances],
        "freshness": {k: v for k, v in asdict(result).items() if k != "latencies"},
        "samples": samples,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "files.json").write_text(json.dumps(report, indent=2) + "\n")
    for name, figures in per_table.items():
        print(
            f"  {name:<24} live files at end {figures['live_files_end']}, after each maintenance "
            f"{figures['live_files_after_each_maintenance']}, peaks {figures['peak_live_files_per_interval']}"
        )
    print(f"  freshness p50 {result.p50} s, p99 {result.p99} s, {'kept up' if result.kept_up else 'FELL BEHIND'}")


if __name__ == "__main__":
    main()
