"""Landing → fraud alert latency of ``lakehouse run --continuous``, as an outside reader sees it.

In a scratch home, ``run --continuous`` starts (this checkout's code: ``PYTHONPATH`` is the repository).
Then, one at a time, a probe file goes in with ``lakehouse ingest``: three purchases of a user of its own
within 20 s of event time (stamped with the current time), so the third one raises a ``burst`` alert. A
reader polls ``gold.fraud_alerts`` with delta-rs and notes when the probe's alert appears. Latency is that
moment minus the moment the file was landed (its arrival stamp, which starts its name). After each alert
the next probe waits a random 0 to ``--gap`` seconds, so probes land at every phase of the run's cycle.

``--background N`` first lands N clicks and purchases over the last hour of event time (state to hold)
and waits until they are through. At the end: p50/max latency, the keyed streams' batch seconds and their
state (rows, bytes) as ``ops.stream_progress`` recorded it. Figures go to ``bench/results/fraud_latency.json``.

    .venv/bin/python -m bench.fraud_latency                       # 20 probes, trigger 1 s
    .venv/bin/python -m bench.fraud_latency --background 20000    # the same over state for 1,000 users
    .venv/bin/python -m bench.fraud_latency --probes 5 --gap 2    # a smoke run
    .venv/bin/python -m bench.fraud_latency --outputs fraud_alerts  # no other optional gold output in the cycle
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deltalake import DeltaTable

from bench.run import lakehouse_command
from runtime.checkpoints import FRAUD_STAGE, LANDING_STAGE, SILVER_STAGE, UNIQUE_URLS_STAGE
from runtime.stages import keyed_stages
from warehouse.catalog import GOLD_FRAUD_ALERTS, GOLD_UNIQUE_URLS, OPS_STREAM_PROGRESS
from warehouse.locks import lock_holder
from warehouse.settings import GOLD_OUTPUTS, REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
KEYED = (FRAUD_STAGE, UNIQUE_URLS_STAGE)


def _environment(home: Path, trigger: int) -> dict[str, str]:
    env = dict(os.environ)
    env["LAKEHOUSE_HOME"] = str(home)
    env["LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"] = str(trigger)
    env.setdefault("LAKEHOUSE_PIPELINES", "purchases")  # the purchases stream's fraud alerts are measured
    # This checkout's code, in the CLI and in Spark's Python workers (which import the processors).
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def _probe(n: int, now: datetime) -> list[str]:
    """Three purchases of ``probe-<n>`` 10 s apart ending now: the third raises ``burst:probe-<n>-3``."""
    lines = []
    for i in (1, 2, 3):
        stamp = (now - timedelta(seconds=10 * (3 - i))).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        lines.append(
            f'{{"event_id":"probe-{n}-{i}","user_id":"probe-{n}","event_time":"{stamp}","amount":1,'
            '"event_type":"purchase"}'
        )
    return lines


def _background(events: int, users: int, now: datetime) -> tuple[list[str], int]:
    """``events`` clicks (one of 40 URLs) and purchases over the last hour of event time, in order, for the
    state to hold something; then a burst of user ``warm-up``. Also returns how many users clicked."""
    rng = random.Random(11)
    lines, clickers = [], set()
    for i in range(events):
        at = now - timedelta(hours=1) + timedelta(hours=1) * i / max(1, events)
        stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        user = f"user-{rng.randrange(users):05d}"
        if rng.random() < 0.7:
            clickers.add(user)
            kind = f'"event_type":"click","url":"/page/{rng.randrange(40)}"'
        else:
            kind = '"event_type":"purchase"'
        lines.append(
            f'{{"event_id":"bg-{i}","user_id":"{user}","event_time":"{stamp}","amount":{rng.randint(1, 500)},{kind}}}'
        )
    lines.extend(line.replace("probe-", "warm-up-") for line in _probe(0, now))
    return lines, len(clickers)


def _rows(table: Path) -> int:
    try:
        return DeltaTable(str(table)).to_pyarrow_table(columns=["user_id"]).num_rows
    except Exception:
        return 0


def _alert_ids(table: Path) -> set[str]:
    try:
        return set(DeltaTable(str(table)).to_pyarrow_table(columns=["alert_id"]).column("alert_id").to_pylist())
    except Exception:  # not created yet, or a commit in flight: the next poll sees it
        return set()


def _running(settings: Settings) -> bool:
    names = (LANDING_STAGE, SILVER_STAGE, *(stage.name for stage in keyed_stages(settings)))
    return all(lock_holder(settings, name) for name in names) and GOLD_FRAUD_ALERTS.path(settings).is_dir()


def _ingest(env: dict[str, str], path: Path) -> float:
    """``lakehouse ingest``; returns the landed file's arrival stamp (epoch seconds)."""
    done = subprocess.run([lakehouse_command(), "ingest", str(path)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench: ingest failed: {done.stderr.strip()}")
    name = done.stdout.strip().rsplit("→", 1)[-1].strip()
    return int(name.split("-", 1)[0]) / 1e9


def _stream_figures(settings: Settings) -> dict[str, dict[str, float]]:
    rows = DeltaTable(str(OPS_STREAM_PROGRESS.path(settings))).to_pyarrow_table().to_pylist()
    figures = {}
    for stream in sorted({r["stream"] for r in rows}):
        batches = [r for r in rows if r["stream"] == stream]
        with_input = [r["batch_seconds"] for r in batches if r["rows_in"]] or [0.0]
        figures[stream] = {
            "batches": len(batches),
            "batch_seconds_p50_with_input": round(statistics.median(with_input), 2),
            "state_rows_max": max(r["state_rows"] or 0 for r in batches),
            "state_memory_bytes_max": max(r["state_memory_bytes"] or 0 for r in batches),
        }
    return figures


def measure(probes: int, gap: float, trigger: int, root: Path, background: int, users: int) -> dict:
    home = root / "home"
    env = _environment(home, trigger)
    settings = Settings.from_env(env)
    log = (root / "run.log").open("w")
    stream = subprocess.Popen([lakehouse_command(), "run", "--continuous"], env=env, stdout=log, stderr=log)
    latencies: list[float] = []
    rng = random.Random(7)
    alerts = GOLD_FRAUD_ALERTS.path(settings)
    try:
        deadline = time.monotonic() + 300
        while not _running(settings):
            if stream.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench: `run --continuous` did not start; see {root / 'run.log'}")
            time.sleep(0.5)
        if background:
            # Before the probes: a backlog for the state to hold, processed to the end (its last URL counts).
            lines, clickers = _background(background, users, datetime.now(UTC))
            source = root / "background.jsonl"
            source.write_text("\n".join(lines) + "\n")
            started = time.monotonic()
            _ingest(env, source)
            while _rows(GOLD_UNIQUE_URLS.path(settings)) < clickers or "burst:warm-up-0-3" not in _alert_ids(alerts):
                if stream.poll() is not None or time.monotonic() - started > 1800:
                    raise SystemExit(f"bench: the background was not processed; see {root / 'run.log'}")
                time.sleep(1)
            print(f"  background of {background:,} events in {time.monotonic() - started:.0f} s", flush=True)
            time.sleep(10)
        for n in range(probes):
            source = root / f"probe-{n}.jsonl"
            source.write_text("\n".join(_probe(n, datetime.now(UTC))) + "\n")
            landed = _ingest(env, source)
            wanted = f"burst:probe-{n}-3"
            give_up = time.monotonic() + 300
            while wanted not in _alert_ids(alerts):
                if time.monotonic() > give_up or stream.poll() is not None:
                    raise SystemExit(f"bench: no alert for probe {n}; see {root / 'run.log'}")
                time.sleep(0.1)
            latencies.append(round(time.time() - landed, 2))
            print(f"  probe {n}: {latencies[-1]} s", flush=True)
            time.sleep(rng.uniform(0, gap))
    finally:
        stream.send_signal(signal.SIGTERM)
        try:
            stream.wait(timeout=180)
        except subprocess.TimeoutExpired:
            stream.kill()
        log.close()
    ordered = sorted(latencies)
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        "trigger_interval_seconds": trigger,
        "gold_outputs": sorted(settings.gold_outputs),
        "background_events": background,
        "background_users": users,
        "probes": probes,
        "latencies": latencies,
        "p50": round(statistics.median(ordered), 2),
        "max": ordered[-1],
        # The first probe also pays for the first start of each keyed query (Python workers, RocksDB).
        "p50_after_first": round(statistics.median(ordered[1:]), 2) if len(ordered) > 1 else None,
        "streams": _stream_figures(settings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Landing → gold.fraud_alerts latency of `run --continuous`.")
    parser.add_argument("--probes", type=int, default=20, help="probe files, one alert each")
    parser.add_argument("--gap", type=float, default=4.0, help="at most this many seconds between probes")
    parser.add_argument("--trigger", type=int, default=1, help="LAKEHOUSE_TRIGGER_INTERVAL_SECONDS of the run")
    parser.add_argument("--background", type=int, default=0, help="events landed before the probes (state)")
    parser.add_argument("--users", type=int, default=1000, help="users of the background events")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    parser.add_argument(
        "--outputs", help="LAKEHOUSE_GOLD_OUTPUTS of the run (default: the environment's, else all); e.g. fraud_alerts"
    )
    args = parser.parse_args()
    if args.outputs:
        os.environ["LAKEHOUSE_GOLD_OUTPUTS"] = args.outputs
    root = REPO_ROOT / ".lakehouse" / f"bench-fraud-latency-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True)
    try:
        result = measure(args.probes, args.gap, args.trigger, root, args.background, args.users)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(
        f"landing → fraud alert: p50 {result['p50']} s, max {result['max']} s over {result['probes']} probes "
        f"(p50 without the first {result['p50_after_first']} s; trigger {result['trigger_interval_seconds']} s, "
        f"load {result['load_average_1m_at_end']} on {result['cpus']} cores)"
    )
    for stream, figures in result["streams"].items():
        print(f"  {stream}: {figures}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    # One file per choice of outputs: the default (all) run and a fraud-only run are both kept.
    kept = result["gold_outputs"]
    suffix = "" if len(kept) == len(GOLD_OUTPUTS) else "-" + ("-".join(kept) or "none")
    (RESULTS / f"fraud_latency{suffix}.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
