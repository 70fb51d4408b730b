"""The soak (issue 26): ``run --continuous`` at 1,000 events/s for 100 minutes, with late events, and
``maintain`` and ``reconcile`` on their schedules' cadence (every 15 minutes), every gold output on.

One landing file a second: ``--rate`` events stamped with the current time (moved back up to 20 s: disorder),
a share of purchases and of clicks on one of 100 URLs by one of 200 users, 1 % late events (30 to
60 minutes old: behind the watermark and the allowed lateness, so they go to ``silver.late_events`` and the
reconcile folds them), 3 % redeliveries and 1 % invalid lines. The key space is fixed on purpose: the unique-URL
state keeps each (user, URL) 24 hours after its last click, so with fresh keys it would grow for the whole run
by design; with at most 20,000 pairs, reached in minutes, clicks only refresh entries, and state that still
grows is a leak. Every 30 s a sample:

- the stream's RSS: the whole process tree of ``run --continuous`` (its Python, its JVM, the followers'
  process and its JVM), from ``/proc``;
- state bytes on disk per stream (each checkpoint's ``state/`` folder; the unique-URL stream's is RocksDB's);
- live files per table (what its current version references, delta-rs);
- batch seconds: each stream's batches since the last sample, from ``ops.stream_progress``.

Why 100 minutes: the fraud rules keep each user's purchases of the last hour of event time, so that state
grows for the first hour at any steady rate, by design; it is judged once every horizon is full.

Flat means: over the last 40 minutes, the second 20 minutes' median is at most the first 20 minutes' plus a
tolerance (RSS 10 %, state bytes 15 %, live files 25 % + 3, batch seconds 30 % + 0.5 s), per figure; each
figure's slope per 10 minutes is reported too. Figures go to ``bench/results/soak.json``, the plot to
``bench/results/soak.png``.

    .venv/bin/python -m bench.soak                        # 1,000 events/s for 100 minutes
    .venv/bin/python -m bench.soak --minutes 6            # a smoke run (judged over its last two thirds)
"""

import argparse
import json
import random
import shutil
import signal
import statistics
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deltalake import DeltaTable, QueryBuilder

from bench.files import maintain_timed, sample_tables
from bench.procs import tree_rss_mb
from bench.run import bench_environment, lakehouse_command
from runtime.checkpoints import checkpoint_dir
from runtime.sources.landing import place_in_landing
from runtime.stages import stages
from warehouse.catalog import OPS_STREAM_PROGRESS
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
#: Figure → (relative, absolute) tolerance of "flat": the last 20 minutes' median against the 20 before.
TOLERANCE = {"rss_mb": (0.10, 0), "state_mb": (0.15, 0), "live_files": (0.25, 3), "batch_seconds": (0.30, 0.5)}


def _lines(rng: random.Random, rate: int, second: int, now: datetime, recent: list[str]) -> list[str]:
    lines = []
    for i in range(rate):
        late = rng.random() < 0.01
        moment = now - timedelta(seconds=rng.uniform(1800, 3600) if late else rng.uniform(0, 20))
        stamp = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        kind = rng.choices(("purchase", "click", "view"), (0.5, 0.35, 0.15))[0]
        url = f',"url":"/p/{rng.randrange(100)}"' if kind == "click" else ""
        line = (
            f'{{"event_id":"s{second}-{i}","user_id":"user-{rng.randrange(200):04d}","event_time":"{stamp}",'
            f'"amount":{rng.randrange(1, 20000) / 100:.2f},"event_type":"{kind}"{url}}}'
        )
        lines.append(line)
        if recent and rng.random() < 0.03:
            lines.append(rng.choice(recent))
        if rng.random() < 0.01:
            lines.append('{"event_id": "", "user_id": "u", "event_time": "nope", "amount": 1}')
    recent[:] = lines[-500:]
    return lines


def _state_mb(settings: Settings) -> dict[str, float]:
    found = {}
    for stage in stages(settings):
        state = checkpoint_dir(settings, stage) / "state"
        if state.is_dir():
            found[stage.name] = round(sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) / 2**20, 2)
    return found


def _batch_seconds(settings: Settings, seen: set[tuple[str, str, int]]) -> dict[str, float]:
    """Median batch seconds per stream over the batches recorded since the last look (``seen`` holds those
    already counted). By batch, not by recording time: the followers' thread appends its rows a while
    after their batches, and a time window would miss them."""
    path = OPS_STREAM_PROGRESS.path(settings)
    try:
        table = (
            QueryBuilder()
            .register("t", DeltaTable(str(path)))
            .execute("SELECT stream, run_id, batch_id, batch_seconds FROM t WHERE batch_seconds IS NOT NULL")
            .read_all()
        )
    except Exception:  # not created yet, or a commit in flight: the next sample sees it
        return {}
    by_stream: dict[str, list[float]] = {}
    for stream, run_id, batch_id, seconds in zip(*(table.column(n).to_pylist() for n in range(4)), strict=True):
        if (stream, run_id, batch_id) not in seen:
            seen.add((stream, run_id, batch_id))
            by_stream.setdefault(stream, []).append(seconds)
    return {stream: round(statistics.median(values), 2) for stream, values in by_stream.items()}


def _series(samples: list[dict], figure: str) -> dict[str, list[tuple[float, float]]]:
    """Each thing a figure is measured on (a stream, a table) → [(minute, value)]."""
    found: dict[str, list[tuple[float, float]]] = {}
    for sample in samples:
        values = sample[figure] if isinstance(sample[figure], dict) else {"stream": sample[figure]}
        for name, value in values.items():
            found.setdefault(name, []).append((sample["minute"], value))
    return found


def _flatness(points: list[tuple[float, float]], start: float, middle: float, tolerance: tuple[float, float]) -> dict:
    first = [v for m, v in points if start <= m < middle]
    second = [v for m, v in points if m >= middle]
    if len(first) < 3 or len(second) < 3:
        return {"flat": None}
    window = [(m, v) for m, v in points if m >= start]
    mean_m = statistics.fmean(m for m, _ in window)
    mean_v = statistics.fmean(v for _, v in window)
    spread = sum((m - mean_m) ** 2 for m, _ in window) or 1.0
    slope = sum((m - mean_m) * (v - mean_v) for m, v in window) / spread
    before, after = statistics.median(first), statistics.median(second)
    relative, absolute = tolerance
    return {
        "median_first": round(before, 2),
        "median_second": round(after, 2),
        "slope_per_10_min": round(10 * slope, 3),
        "flat": after <= before * (1 + relative) + absolute,
    }


def _plot(samples: list[dict], start: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (("rss_mb", "RSS of the run's process tree (MB)"), ("state_mb", "state on disk (MB)"),
              ("live_files", "live files per table"), ("batch_seconds", "median batch seconds"))  # fmt: skip
    figure, axes = plt.subplots(len(panels), 1, figsize=(11, 13), sharex=True)
    for axis, (key, title) in zip(axes, panels, strict=True):
        for name, points in sorted(_series(samples, key).items()):
            if key == "live_files" and not name.startswith(("gold", "silver.events", "bronze")):
                continue
            axis.plot([m for m, _ in points], [v for _, v in points], label=name, linewidth=1)
        axis.axvspan(start, samples[-1]["minute"], color="0.92", zorder=0)
        axis.set_title(title, fontsize=10)
        axis.legend(fontsize=6, ncol=3, loc="upper left")
    axes[-1].set_xlabel("minutes of the run (shaded: the window judged flat or not)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description="`run --continuous` held for an hour: memory, state, files, batches.")
    parser.add_argument("--rate", type=int, default=1_000, help="events per second landed (one file a second)")
    parser.add_argument("--minutes", type=float, default=100.0, help="how long the rate is held")
    parser.add_argument("--every", type=float, default=15.0, help="minutes between `maintain` and `reconcile`")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    args = parser.parse_args()
    home = REPO_ROOT / ".lakehouse" / f"bench-soak-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    env = bench_environment(home, 50)
    env["LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"] = "2"
    settings = Settings.from_env(env)
    settings.ensure_home()
    log = home / "soak.log"
    samples: list[dict] = []
    chores: list[dict] = []
    stop = threading.Event()
    with log.open("w") as out:
        stream = subprocess.Popen([lakehouse_command(), "run", "--continuous"], env=env, stdout=out, stderr=out)
    started = time.monotonic()
    print(f"{args.rate:,} events/s for {args.minutes:g} min; home {home}", flush=True)

    def land() -> None:
        rng, recent = random.Random(26), []
        for second in range(int(args.minutes * 60)):
            lines = _lines(rng, args.rate, second, datetime.now(UTC), recent)
            place_in_landing(settings, f"soak-{second:05d}.jsonl", lambda o, x=lines: o.writelines(f"{y}\n" for y in x))
            if stop.wait(max(0.0, started + second + 1 - time.monotonic())):
                return

    def chores_on_schedule() -> None:
        while not stop.wait(args.every * 60):
            for chore in ("reconcile", "maintain"):
                began = time.monotonic()
                if chore == "maintain":
                    done = maintain_timed(env, home / "maintain.log")
                    code = done["exit_code"]
                else:
                    code = subprocess.run([lakehouse_command(), chore], env=env, capture_output=True).returncode
                chores.append({"minute": round((time.monotonic() - started) / 60, 2), "chore": chore,
                               "exit_code": code, "seconds": round(time.monotonic() - began, 1)})  # fmt: skip

    workers = [threading.Thread(target=land), threading.Thread(target=chores_on_schedule, daemon=True)]
    for worker in workers:
        worker.start()
    counted: set[tuple[str, str, int]] = set()
    try:
        while time.monotonic() - started < args.minutes * 60 and stream.poll() is None:
            time.sleep(30)
            sample = sample_tables(settings, started)
            samples.append({
                "minute": sample["minute"],
                "rss_mb": tree_rss_mb(stream.pid),
                "state_mb": _state_mb(settings),
                "live_files": {name: figures["live"] for name, figures in sample["tables"].items()},
                "batch_seconds": _batch_seconds(settings, counted),
            })  # fmt: skip
            print(f"  {samples[-1]['minute']:5.1f} min  RSS {samples[-1]['rss_mb']:7.1f} MB  state "
                  f"{sum(samples[-1]['state_mb'].values()):7.1f} MB", flush=True)  # fmt: skip
    finally:
        stop.set()
        alive = stream.poll() is None
        stream.send_signal(signal.SIGTERM)
        code = stream.wait(timeout=600)
    # The last 40 minutes (a shorter run: its last two thirds).
    start = max(args.minutes - 40, args.minutes / 3)
    middle = (start + args.minutes) / 2
    flatness = {
        figure: {name: _flatness(points, start, middle, TOLERANCE[figure]) for name, points in series.items()}
        for figure, series in ((f, _series(samples, f)) for f in TOLERANCE)
    }
    verdicts = [v["flat"] for per_name in flatness.values() for v in per_name.values() if v["flat"] is not None]
    # A figure with no verdict at all (never sampled) must not pass as flat.
    unjudged = [f for f, per in flatness.items() if not any(v["flat"] is not None for v in per.values())]
    report = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "rate": args.rate,
        "minutes": args.minutes,
        "ran_to_the_end": alive and code == 0,
        "chores": chores,
        "judged_from_minute": round(start, 1),
        "flat": bool(verdicts) and all(verdicts) and not unjudged,
        "unjudged": unjudged,
        "not_flat": {f: [n for n, v in per.items() if v["flat"] is False] for f, per in flatness.items()},
        "flatness": flatness,
        "samples": samples,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(report, indent=2) + "\n")
    if samples:
        _plot(samples, start, RESULTS / "soak.png")
    print(json.dumps({k: report[k] for k in ("ran_to_the_end", "flat", "not_flat", "unjudged", "chores")}, indent=2))
    if not args.keep and report["flat"] and report["ran_to_the_end"]:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
