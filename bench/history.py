"""``make bench``, part four: what one new file costs as history grows.

For each history size, in its own scratch home: ``lakehouse generate`` (seed 42) and ``run --once``
build the history (untimed, but its throughput is reported: the backlog figure at that size). Then,
timed as whole processes: one 1,000-line file and ``run --once`` (the small increment a sensor-driven
run pays), then one 10,000-event file and ``run --once`` (batch cost against history). Each stream's
own batch seconds come from ``ops.stream_progress``. Targets: the 1,000-line increment ≤ 15 s on 1 M
events; the 10,000-event batch within 20% between 1 M and 10 M. Figures go to
``bench/results/history.json``.

    .venv/bin/python -m bench.history                         # 1 M and 10 M
    .venv/bin/python -m bench.history --history 200000        # a smoke run
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deltalake import DeltaTable

from bench.procs import tree_rss_mb
from bench.run import SEED, bench_environment, count_lines, lakehouse_command, landing_files, run_timed
from runtime.sources.landing import place_in_landing
from warehouse.catalog import OPS_STREAM_PROGRESS
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
SMALL_TARGET_SECONDS = 15.0
FLAT_TOLERANCE = 0.2


def _rss_peak_mb(command: list[str], env: dict[str, str], log: Path) -> tuple[float, float]:
    """Run ``command``; return (seconds, peak RSS in MB of the process tree: the CLI and its driver JVM),
    sampled every 0.2 s from /proc (the JVM is not a waited-for child, so rusage would miss it)."""
    started = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=out, stderr=out)
        peak = 0.0
        while process.poll() is None:
            peak = max(peak, tree_rss_mb(process.pid))
            time.sleep(0.2)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"bench: `{' '.join(command)}` failed; see {log}")
    return seconds, peak


def _increment(settings: Settings, name: str, events: int, start: datetime) -> None:
    """One landing file of ``events`` new valid events just after the history's end (no lateness)."""
    lines = [
        json.dumps(
            {
                "event_id": f"{name}-{i}",
                "user_id": f"user-{i % 997:05d}",
                "event_time": (start + timedelta(milliseconds=10 * i)).isoformat(timespec="milliseconds"),
                "amount": round((i % 5000) / 100 + 0.01, 2),
            }
        )
        for i in range(events)
    ]
    place_in_landing(settings, f"{name}.jsonl", lambda h: h.write("\n".join(lines) + "\n"))


def _stream_seconds(settings: Settings, since: datetime) -> dict[str, float]:
    progress = DeltaTable(str(OPS_STREAM_PROGRESS.path(settings))).to_pyarrow_table().to_pylist()
    seconds: dict[str, float] = {}
    for row in progress:
        if row["recorded_at"].replace(tzinfo=UTC) >= since:
            seconds[row["stream"]] = round(seconds.get(row["stream"], 0.0) + row["batch_seconds"], 2)
    return seconds


def measure(history: int, root: Path) -> dict[str, object]:
    home = root / f"history-{history}"
    env = bench_environment(home, 5)
    settings = Settings.from_env(env)
    lakehouse = lakehouse_command()
    generate = [lakehouse, "generate", "--events", str(history), "--seed", str(SEED), "--files", "20"]
    generate += ["--late", "0", "--start", "2024-01-01T00:00:00"]
    run_timed(generate, env, root / f"generate-{history}.log")
    lines = count_lines(landing_files(settings.landing_dir))
    backlog_seconds, backlog_rss = _rss_peak_mb([lakehouse, "run", "--once"], env, root / f"backlog-{history}.log")
    print(
        f"  history {history:,}: backlog {lines:,} lines in {backlog_seconds:.1f} s "
        f"({lines / backlog_seconds:,.0f} lines/s, peak RSS {backlog_rss:,.0f} MB)",
        flush=True,
    )
    # The generator's event time runs at 20 events/s from its start; new events continue from there.
    history_end = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=history / 20.0)
    figures: dict[str, object] = {
        "history": history,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "backlog_lines": lines,
        "backlog_seconds": round(backlog_seconds, 1),
        "backlog_lines_per_second": round(lines / backlog_seconds),
        "backlog_peak_rss_mb": round(backlog_rss),
    }
    for size, key in ((1_000, "small"), (10_000, "batch")):
        _increment(settings, f"{key}-{size}", size, history_end + timedelta(minutes=1 if key == "small" else 2))
        since = datetime.now(UTC)
        seconds, rss = _rss_peak_mb([lakehouse, "run", "--once"], env, root / f"{key}-{history}.log")
        figures[f"{key}_peak_rss_mb"] = round(rss)
        figures[f"{key}_events"] = size
        figures[f"{key}_seconds"] = round(seconds, 2)
        figures[f"{key}_stream_seconds"] = _stream_seconds(settings, since)
        print(f"  + {size:,} events: run --once {seconds:.1f} s; per stream {figures[f'{key}_stream_seconds']}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="Cost of one new file as history grows.")
    parser.add_argument("--history", default="1000000,10000000", help="history sizes in events, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the scratch homes")
    args = parser.parse_args()
    root = REPO_ROOT / ".lakehouse" / f"bench-history-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True)
    sizes = [int(h) for h in args.history.split(",")]
    results = []
    try:
        for size in sizes:
            print(f"history {size:,} events ...", flush=True)
            results.append(measure(size, root))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    # Sizes measured by an earlier run (a 10 M run takes most of an hour) are kept unless re-measured.
    previous = RESULTS / "history.json"
    if previous.exists():
        measured = {size["history"] for size in results}
        kept = [size for size in json.loads(previous.read_text())["sizes"] if size["history"] not in measured]
        results = sorted(kept + results, key=lambda size: size["history"])
    report: dict[str, object] = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "small_target_seconds": SMALL_TARGET_SECONDS,
        "flat_tolerance": FLAT_TOLERANCE,
        "sizes": results,
    }
    if len(results) >= 2:
        first, last = results[0], results[-1]
        report["batch_cost_ratio"] = round(float(last["batch_seconds"]) / float(first["batch_seconds"]), 3)
        report["backlog_rate_ratio"] = round(
            float(last["backlog_lines_per_second"]) / float(first["backlog_lines_per_second"]), 3
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "history.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "sizes"}))


if __name__ == "__main__":
    main()
