"""``make bench``, part three: how fresh gold stays while ``lakehouse run --continuous`` keeps up with a
steady stream of landing files, and the highest rate it holds.

For each rate, in its own scratch home, every gold output on (the default): ``run --continuous`` starts;
once its streams run, a generator lands one file per second holding ``rate`` events stamped with the
current time, plus the probes of a user of its own (``probe-<n>``): three purchases within a second (a
burst, so a fraud alert), a click with a URL, and an order with its payment (order id ``probe-<n>``); and a
purchase at the fraud amount limit by ``limit-<n>`` (the stateless rule's alert, shown as ``amount_limit``). A
reader polls every gold output with delta-rs (as any outside reader would) and notes when each probe
first appears in it. Freshness is that moment minus the moment the file was landed: landing → visible in
that output, for a reader outside the process; the headline figure is ``gold.user_spend_5m``'s.

With ``--readings RATE`` each rate is measured twice, in homes of their own: the purchases stream alone, then
both shipped pipelines at once (``run --continuous`` carrying the sensor readings pipeline too, fed ``RATE``
readings a second with probe devices of their own): each pipeline's landing → gold p50/p99, and the purchases'
beside its figures alone (``bench/results/freshness-two-pipelines.json``).

Before each rate, the bare twin (``bench.twin``: plain Structured Streaming, one query per output, one JVM)
runs on the same stream of files in a home of its own, its outputs read the same way; the figures end with
each output's twin/ours ratio of p50 and p99 (``--no-twin`` leaves it out).

The rate is held when every probe became visible, at least two thirds of them while the generator was
still landing files (not in the drain after it stopped), and the lag did not grow: the p50 of the last
third of the probes is at most twice the p50 of the first third (plus one trigger interval). The figures go to
``bench/results/freshness.json``.

    .venv/bin/python -m bench.freshness                                   # 1k and 10k events/s, 5 min each
    .venv/bin/python -m bench.freshness --rates 1000 --minutes 1          # a smoke run
    .venv/bin/python -m bench.freshness --rates 1000 --readings 200       # alone, then beside readings
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.procs import tree_rss_mb
from bench.run import bench_environment, lakehouse_command
from bench.twin import AMOUNT_LIMIT
from bench.twin import OUTPUTS as TWIN_OUTPUTS
from runtime.sources.landing import place_in_landing
from warehouse.catalog import gold_output_tables, tumbling_table
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
TARGET_P99_SECONDS = 5.0
#: Files landed in the first minute (one a second): left out of the steady-state percentiles.
WARM_UP_FILES = 60
USERS = 1_000


@dataclass
class RateResult:
    """One rate: how many probes became visible and how long each took."""

    rate: int
    seconds: float
    files: int
    events: int
    trigger_seconds: int
    latencies: list[float] = field(default_factory=list, repr=False)
    probes_missing: int = 0
    visible_while_landing: int = 0
    p50: float | None = None
    p99: float | None = None
    max: float | None = None
    first_third_p50: float | None = None
    last_third_p50: float | None = None
    #: The same over probes landed after the first minute: steady state, without the JVM's warm-up.
    steady_p50: float | None = None
    steady_p99: float | None = None
    kept_up: bool = False
    #: Readings a second of the readings pipeline run beside it (0: the purchases stream alone).
    readings_rate: int = 0
    #: "lakehouse", or "twin" for the bare twin (``bench.twin``) on the same stream.
    side: str = "lakehouse"
    #: Every gold output: landing → visible percentiles, and (seconds since the first file, latency) per probe.
    outputs: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict, repr=False)
    #: Resident memory of the run's process tree (the CLI, its driver JVM, Spark's Python workers), in MB:
    #: the highest sample, and the median of the samples after the first minute.
    rss_peak_mb: float | None = None
    rss_steady_mb: float | None = None
    #: Seconds from the process's start until it takes lines (every stream holds its lock; the twin's queries
    #: started): the lakehouse's warm-up, which no probe waits for, happens there (``runtime.warmup``).
    ready_seconds: float | None = None
    rss_samples: list[tuple[float, float]] = field(default_factory=list, repr=False)

    def summarize(self) -> None:
        seen = sorted(self.latencies)
        if seen:
            self.p50 = round(statistics.median(seen), 2)
            self.p99 = round(seen[min(len(seen) - 1, int(0.99 * len(seen)))], 2)
            self.max = round(seen[-1], 2)
            steady = sorted(self.latencies[WARM_UP_FILES:])
            if steady:
                self.steady_p50 = round(statistics.median(steady), 2)
                self.steady_p99 = round(steady[min(len(steady) - 1, int(0.99 * len(steady)))], 2)
            third = max(1, len(self.latencies) // 3)
            self.first_third_p50 = round(statistics.median(self.latencies[:third]), 2)
            self.last_third_p50 = round(statistics.median(self.latencies[-third:]), 2)
            self.kept_up = (
                self.probes_missing == 0
                and 3 * self.visible_while_landing >= 2 * self.files
                and self.last_third_p50 <= 2 * self.first_third_p50 + self.trigger_seconds
            )


def _lines(rate: int, n: int, now: datetime) -> list[str]:
    stamp = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    template = '{{"event_id":"f{n}-{i}","user_id":"user-{u:04d}","event_time":"{t}","amount":{a}.{c:02d}}}'
    lines = [template.format(n=n, i=i, u=i % USERS, t=stamp, a=i % 97, c=i % 100) for i in range(rate)]
    probe = f'"user_id":"probe-{n}","event_time":"{stamp}"'
    lines.extend(f'{{"event_id":"probe-{n}-{k}",{probe},"amount":1,"event_type":"purchase"}}' for k in range(3))
    lines.append(f'{{"event_id":"probe-{n}-click",{probe},"amount":0,"event_type":"click","url":"/p/{n}"}}')
    # A purchase at the stateless rule's limit, by a user of its own (``limit-<n>``): its alert's freshness.
    limit = f'"user_id":"limit-{n}","event_time":"{stamp}"'
    lines.append(f'{{"event_id":"limit-{n}",{limit},"amount":{AMOUNT_LIMIT},"event_type":"purchase"}}')
    for kind in ("order", "payment"):
        lines.append(
            f'{{"event_id":"probe-{n}-{kind}",{probe},"amount":5,"event_type":"{kind}","order_id":"probe-{n}"}}'
        )
    return lines


#: A probe device of the readings pipeline: its id carries the probe's number.
PROBE_DEVICE = 900_000


def _reading_lines(rate: int, n: int, now: datetime) -> list[str]:
    """``rate`` readings of 50 devices stamped ``now``, and one of the probe device ``dev-<900000 + n>``."""
    millis = int(now.timestamp() * 1000)
    sites = ("north", "south", "east", "west")
    template = '{{"reading_id":"r{n}-{i}","device_id":"dev-{d}","site":"{s}","read_at":{t},"temperature":{c}.5}}'
    lines = [template.format(n=n, i=i, d=i % 50, s=sites[i % 4], t=millis, c=i % 40) for i in range(rate)]
    lines.append(template.format(n=n, i="probe", d=PROBE_DEVICE + n, s="north", t=millis, c=20))
    return lines


class NewRows:
    """An outside reader of one Delta table that reads only what each new commit added: the table's log is
    brought up to date by delta-rs (its new commits only), and only the data files not seen before are read,
    one column of them. A key is visible from the poll that first finds it in a committed file. (Reading
    every table whole at each poll, as before, did not change the figures measured: decision 73.)"""

    def __init__(self, table: Path, column: str) -> None:
        self.table, self.column = table, column
        self.delta: DeltaTable | None = None
        self.read: set[str] = set()

    def fresh(self) -> list[str]:
        """The column's values in the files committed since the last call (nothing before the table exists)."""
        try:
            if self.delta is None:
                self.delta = DeltaTable(str(self.table))
            else:
                self.delta.update_incremental()
            fresh = [uri for uri in self.delta.file_uris() if uri not in self.read]
            values = [v for uri in fresh for v in pq.read_table(uri, columns=[self.column]).column(0).to_pylist()]
        except Exception:  # not created yet, or a file compacted away meanwhile: the next poll reads it again
            return []
        self.read.update(fresh)
        return values


def _readings_visible(rows: NewRows) -> set[int]:
    found = (int(k.removeprefix("dev-")) for k in rows.fresh() if k and k.startswith("dev-"))
    return {k - PROBE_DEVICE for k in found if k >= PROBE_DEVICE}


def outputs(settings: Settings) -> dict[str, tuple[Path, str]]:
    """Every gold output the home keeps → (its table's path, the column a probe's key appears in)."""
    found = {"user_spend_5m": (tumbling_table(settings).path(settings), "user_id")}
    for name, table in gold_output_tables(settings).items():
        if settings.keeps(name):
            found[name] = (table.path(settings), "order_id" if name == "order_payments" else "user_id")
    if settings.keeps("fraud_alerts"):  # the stateless rule's alerts, in the same table
        found["amount_limit"] = (found["fraud_alerts"][0], "user_id")
    return found


def _probes_visible(rows: NewRows, prefix: str = "probe-") -> set[int]:
    return {int(k.removeprefix(prefix)) for k in rows.fresh() if k and k.startswith(prefix)}


def _streams_running(env: dict[str, str]) -> bool:
    from runtime.stages import stages
    from warehouse.locks import lock_holder

    running = True
    for view in Settings.from_env(env).pipelines():
        names = stages(view).names
        running &= all(lock_holder(view, name) for name in names) and (view.tables_dir / "gold").is_dir()
    return running


def measure(
    rate: int,
    seconds: float,
    trigger: int,
    root: Path,
    extra_env: dict[str, str] | None = None,
    readings: int = 0,
    round_number: int = 1,
    twin: bool = False,
) -> RateResult:
    """One rate held for ``seconds``, in a scratch home of its own; ``extra_env`` adds settings (a cluster's
    master, say); ``readings`` > 0 runs the readings pipeline beside it at that many readings a second (its
    output ``readings_1m``). ``twin``: the bare twin (``bench.twin``) instead of the lakehouse, on the same
    stream of files, its outputs read the same way."""
    label = f"rate-{rate}" + (f"-with-readings-{readings}" if readings else "") + ("-twin" if twin else "")
    home = root / f"{label}-round-{round_number}"
    env = bench_environment(home, 50)
    env["LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"] = str(trigger)
    env["LAKEHOUSE_PIPELINES"] = "purchases,readings" if readings else "purchases"
    env.update(extra_env or {})
    settings = Settings.from_env(env)
    watched = outputs(settings)
    sensors = settings.for_pipeline("readings") if readings else None
    if sensors is not None:
        sensors.ensure_home()
        watched["readings_1m"] = (sensors.tables_dir / "gold" / "readings_1m", "device_id")
    log = (home.parent / f"{home.name}.log").open("w")
    command = [lakehouse_command(), "run", "--continuous"]
    if twin:
        settings.ensure_home()
        out = home / "twin"
        out.mkdir()
        watched = {name: (out / "tables" / name, column) for name, column in TWIN_OUTPUTS.items() if name in watched}
        command = [sys.executable, "-m", "bench.twin", "--landing", str(settings.landing_dir), "--out", str(out),
                   "--trigger", str(trigger)]  # fmt: skip
    stream = subprocess.Popen(command, env=env, stdout=log, stderr=log)
    launched = time.monotonic()
    result = RateResult(rate, seconds, 0, 0, trigger)
    landed: dict[int, float] = {}
    seen: dict[str, dict[int, float]] = {name: {} for name in watched}
    visible = seen["user_spend_5m"]
    stop = threading.Event()
    readers = {name: NewRows(table, column) for name, (table, column) in watched.items()}

    def poll() -> None:
        next_sample = 0.0
        while not stop.wait(0.2):
            if time.monotonic() >= next_sample:
                next_sample = time.monotonic() + 1.0
                result.rss_samples.append((round(time.monotonic() - started, 1), tree_rss_mb(stream.pid)))
            for name, rows in readers.items():
                if name == "readings_1m":
                    found = _readings_visible(rows)
                else:
                    found = _probes_visible(rows, "limit-" if name == "amount_limit" else "probe-")
                now = time.time()
                for n in found - seen[name].keys():
                    seen[name][n] = now

    try:
        deadline = time.monotonic() + 180
        while not ((home / "twin" / "ready").exists() if twin else _streams_running(env)):
            if stream.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench: {'the twin' if twin else '`run --continuous`'} did not start; see {log.name}")
            time.sleep(0.5)
        started = time.monotonic()
        result.ready_seconds = round(started - launched, 1)
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        n = 0
        while time.monotonic() - started < seconds:
            tick = started + n
            time.sleep(max(0.0, tick - time.monotonic()))
            lines = _lines(rate, n, datetime.now(UTC))
            place_in_landing(settings, f"fresh-{n:06d}.jsonl", lambda h, lines=lines: h.write("\n".join(lines) + "\n"))
            if sensors is not None:
                read = _reading_lines(readings, n, datetime.now(UTC))
                place_in_landing(sensors, f"fresh-{n:06d}.jsonl", lambda h, read=read: h.write("\n".join(read) + "\n"))
            landed[n] = time.time()
            result.events += rate
            n += 1
        result.files = n
        stopped_landing = time.time()
        result.visible_while_landing = sum(1 for moment in list(visible.values()) if moment <= stopped_landing)
        drain = time.monotonic() + 120
        while min(len(found) for found in seen.values()) < n and time.monotonic() < drain:
            time.sleep(0.5)
        stop.set()
        poller.join()
    finally:
        stream.send_signal(signal.SIGTERM)
        try:
            stream.wait(timeout=120)
        except subprocess.TimeoutExpired:
            stream.kill()
        log.close()
    result.latencies = [round(visible[i] - landed[i], 3) for i in sorted(landed) if i in visible]
    result.probes_missing = len(landed) - len(result.latencies)
    result.summarize()
    if result.rss_samples:
        result.rss_peak_mb = max(mb for _, mb in result.rss_samples)
        steady = [mb for at, mb in result.rss_samples if at >= WARM_UP_FILES] or [mb for _, mb in result.rss_samples]
        result.rss_steady_mb = round(statistics.median(steady), 1)
    for name, found in seen.items():
        latencies = [round(found[i] - landed[i], 3) for i in sorted(landed) if i in found]
        result.series[name] = [(round(landed[i] - landed[0], 1), round(found[i] - landed[i], 3))
                               for i in sorted(landed) if i in found]  # fmt: skip
        result.outputs[name] = _percentiles(latencies, len(landed) - len(latencies))
    return result


def _percentiles(latencies: list[float], missing: int) -> dict[str, float | int | None]:
    """p50, p99 and max of landing → visible, and how many probes never became visible."""
    seen = sorted(latencies)
    if not seen:
        return {"p50": None, "p99": None, "max": None, "missing": missing}
    p99 = seen[min(len(seen) - 1, int(0.99 * len(seen)))]
    return {
        "p50": round(statistics.median(seen), 2),
        "p99": round(p99, 2),
        "max": round(seen[-1], 2),
        "missing": missing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Landing → gold freshness of `run --continuous` at steady rates.")
    parser.add_argument("--rates", default="1000,10000", help="events per second to try, comma-separated")
    parser.add_argument("--minutes", type=float, default=5.0, help="how long each rate is held")
    parser.add_argument("--trigger", type=int, default=1, help="LAKEHOUSE_TRIGGER_INTERVAL_SECONDS of the run")
    parser.add_argument("--keep", action="store_true", help="keep the scratch homes")
    parser.add_argument(
        "--readings", type=int, default=0, help="also run each rate beside the readings pipeline at this many a second"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --readings: alone and beside, alternated this many times"
    )
    parser.add_argument(
        "--no-twin", dest="twin", action="store_false", help="leave out the bare twin run before each rate"
    )
    args = parser.parse_args()
    root = REPO_ROOT / ".lakehouse" / f"bench-freshness-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True)
    results = []
    try:
        for rate in (int(r) for r in args.rates.split(",")):
            if args.twin and not args.readings:
                print(f"holding {rate:,} events/s for {args.minutes:g} min, the bare twin ...", flush=True)
                result = measure(rate, args.minutes * 60, args.trigger, root, twin=True)
                result.side = "twin"
                results.append(result)
                _print(result)
            sides = [0, args.readings] * max(1, args.rounds) if args.readings else [0]
            for number, readings in enumerate(sides):
                beside = f" beside {readings:,} readings/s" if readings else ""
                print(f"holding {rate:,} events/s{beside} for {args.minutes:g} min ...", flush=True)
                result = measure(rate, args.minutes * 60, args.trigger, root, readings=readings,
                                 round_number=number // 2 + 1)  # fmt: skip
                result.readings_rate = readings
                results.append(result)
                _print(result)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    held = [r.rate for r in results if r.kept_up and not r.readings_rate and r.side == "lakehouse"]
    ratios = _beside_over_alone(results)
    anchored = _twin_over_ours(results)
    for row in anchored:
        print(f"  {row['rate']:,} events/s {row['output']:16s} twin/ours p50 {row['p50_ratio']}x "
              f"({row['twin_p50']} / {row['ours_p50']} s), p99 {row['p99_ratio']}x "
              f"({row['twin_p99']} / {row['ours_p99']} s)", flush=True)  # fmt: skip
    for row in _memory_ratios(results):
        print(f"  {row['rate']:,} events/s resident memory ours/twin peak {row['peak_ratio']}x "
              f"({row['ours_peak_mb']} / {row['twin_peak_mb']} MB), steady {row['steady_ratio']}x "
              f"({row['ours_steady_mb']} / {row['twin_steady_mb']} MB)", flush=True)  # fmt: skip
    for line in ratios:
        print(f"  {line['rate']:,} events/s, purchases beside readings over alone (medians of "
              f"{line['rounds']} rounds, after the first minute): p50 {line['p50_ratio']}x, "
              f"p99 {line['p99_ratio']}x", flush=True)  # fmt: skip
    report = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "minutes": args.minutes,
        "target_p99_seconds": TARGET_P99_SECONDS,
        "highest_rate_kept_up": max(held) if held else None,
        "load_average": os.getloadavg(),
        **({"beside_over_alone": ratios} if ratios else {}),
        **({"twin_over_ours": anchored} if anchored else {}),
        **({"memory_ours_over_twin": _memory_ratios(results)} if anchored else {}),
        "rates": [
            {k: v for k, v in asdict(r).items() if k not in ("latencies", "series", "rss_samples")} for r in results
        ],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    # Beside another pipeline the run is a comparison of its own: the single-stream figures stay as they are.
    name = "freshness-two-pipelines.json" if args.readings else "freshness.json"
    (RESULTS / name).write_text(json.dumps(report, indent=2) + "\n")
    _plot(results)
    print(json.dumps({k: v for k, v in report.items() if k != "rates"}))


def _twin_over_ours(results: list[RateResult]) -> list[dict]:
    """Per rate and output: the bare twin's p50 and p99 (landing → visible) over the lakehouse's, in one run.
    At least 1.0 is the target: as fresh as plain Spark, or fresher. None where a side never showed a probe
    (the twin's sessions: append mode writes a session only once it has closed)."""
    rows = []
    for rate in sorted({r.rate for r in results if r.side == "twin"}):
        twin = next(r for r in results if r.rate == rate and r.side == "twin")
        ours = next((r for r in results if r.rate == rate and r.side == "lakehouse" and not r.readings_rate), None)
        for output in twin.outputs if ours is not None else ():
            row: dict = {"rate": rate, "output": output}
            for figure in ("p50", "p99"):
                theirs, mine = twin.outputs[output][figure], ours.outputs.get(output, {}).get(figure)
                row[f"twin_{figure}"], row[f"ours_{figure}"] = theirs, mine
                row[f"{figure}_ratio"] = round(theirs / mine, 2) if theirs and mine else None
            rows.append(row)
    return rows


def _memory_ratios(results: list[RateResult]) -> list[dict]:
    """Per rate: the lakehouse's resident memory (process tree, peak and steady) over the twin's, in one run.
    At most 1.5 is issue 50's target."""
    rows = []
    for rate in sorted({r.rate for r in results if r.side == "twin"}):
        twin = next(r for r in results if r.rate == rate and r.side == "twin")
        ours = next((r for r in results if r.rate == rate and r.side == "lakehouse" and not r.readings_rate), None)
        if ours is None:
            continue
        row: dict = {"rate": rate}
        for figure in ("peak", "steady"):
            mine, theirs = getattr(ours, f"rss_{figure}_mb"), getattr(twin, f"rss_{figure}_mb")
            row[f"ours_{figure}_mb"], row[f"twin_{figure}_mb"] = mine, theirs
            row[f"{figure}_ratio"] = round(mine / theirs, 2) if mine and theirs else None
        row["ours_ready_seconds"], row["twin_ready_seconds"] = ours.ready_seconds, twin.ready_seconds
        rows.append(row)
    return rows


def _beside_over_alone(results: list[RateResult]) -> list[dict]:
    """Per rate: the purchases stream's steady p50 and p99 beside the readings pipeline over alone, each side
    the median of its rounds (alternated, so a noisy stretch of a shared machine weighs on both)."""
    ratios = []
    for rate in sorted({r.rate for r in results if r.readings_rate}):
        alone = [r for r in results if r.rate == rate and not r.readings_rate]
        beside = [r for r in results if r.rate == rate and r.readings_rate]
        row: dict = {"rate": rate, "rounds": min(len(alone), len(beside))}
        for figure in ("steady_p50", "steady_p99"):
            sides = [statistics.median(getattr(r, figure) for r in side) for side in (alone, beside)]
            row[f"alone_{figure}"], row[f"beside_{figure}"] = sides
            row[f"{figure.removeprefix('steady_')}_ratio"] = round(sides[1] / sides[0], 2) if sides[0] else None
        ratios.append(row)
    return ratios


def _print(result: RateResult) -> None:
    for name, figures in result.outputs.items():
        print(f"    {name:16s} p50 {figures['p50']} s, p99 {figures['p99']} s, max {figures['max']} s, "
              f"missing {figures['missing']}", flush=True)  # fmt: skip
    print(
        f"  p50 {result.p50} s, p99 {result.p99} s, max {result.max} s "
        f"(after the first minute: p50 {result.steady_p50} s, p99 {result.steady_p99} s), probes missing "
        f"{result.probes_missing}, lag first/last third {result.first_third_p50}/{result.last_third_p50} s, "
        f"{'kept up' if result.kept_up else 'FELL BEHIND'}; resident memory peak {result.rss_peak_mb} MB, "
        f"steady {result.rss_steady_mb} MB; taking lines {result.ready_seconds} s after its start",
        flush=True,
    )


def _plot(results: list[RateResult]) -> None:
    """Latency over time per output, one panel per rate: ``bench/results/freshness-<rate>.png``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # `make bench` installs it; a bare run still writes the figures
        return
    for result in results:
        figure, axis = plt.subplots(figsize=(9, 4.5))
        for name, points in sorted(result.series.items()):
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker=".", linewidth=1, label=name)
        axis.axhline(TARGET_P99_SECONDS, linestyle="--", color="grey", label="gold p99 target")
        axis.set(
            xlabel="seconds since the first file",
            ylabel="seconds landing → visible",
            title=f"{'the bare twin' if result.side == 'twin' else 'run --continuous'} at {result.rate:,} events/s: "
            "landing → each gold output",
        )
        axis.legend(fontsize="small", ncol=2)
        figure.tight_layout()
        beside = f"-with-readings-{result.readings_rate}" if result.readings_rate else ""
        twin = "-twin" if result.side == "twin" else ""
        figure.savefig(RESULTS / f"freshness-{result.rate}{beside}{twin}.png", dpi=110)
        plt.close(figure)


if __name__ == "__main__":
    main()
