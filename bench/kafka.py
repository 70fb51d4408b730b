"""``make bench``, part six: Kafka → gold.

In a scratch home with its own broker (``lakehouse kafka up`` on a free port): ``generate --to kafka`` sends
1,000,000 events (seed 42), then ``run --once --source kafka`` takes them to gold, timed as a whole process
(messages/s, beside the landing-folder figure of ``bench.run``). Then ``run --continuous --source kafka``
runs while ``generate --to kafka --send-rate 10000`` produces for ``--minutes``; the consumer lag (messages
the stream has not read, all partitions) is sampled every second from the broker and the checkpoint.
Kept up means the lag in the last third of the run is no higher than in the first third (plus one
second of input). Figures go to ``bench/results/kafka.json``.

    .venv/bin/python -m bench.kafka                                # 1 M messages, 10,000/s for 3 min
    .venv/bin/python -m bench.kafka --events 100000 --minutes 1     # a smoke run
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import threading
import time
from datetime import UTC, datetime

from bench.run import SEED, bench_environment, lakehouse_command, run_timed
from runtime.checkpoints import KAFKA_STAGE
from runtime.sources.kafka import partition_lag
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="Kafka → gold throughput and lag.")
    parser.add_argument("--events", type=int, default=1_000_000, help="events for the throughput run")
    parser.add_argument("--rate", type=int, default=10_000, help="messages per second for the lag run")
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the rate is held")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    args = parser.parse_args()
    root = REPO_ROOT / ".lakehouse" / f"bench-kafka-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    root.mkdir(parents=True)
    env = bench_environment(root / "home", 50)
    env["LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{_free_port()}"
    env["LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"] = "1"
    settings = Settings.from_env(env)
    lakehouse = lakehouse_command()
    report: dict[str, object] = {"timestamp": datetime.now(UTC).isoformat(timespec="seconds"), "cpus": os.cpu_count()}
    try:
        broker_seconds, _ = run_timed([lakehouse, "kafka", "up"], env, root / "kafka-up.log")
        report["broker_start_seconds"] = round(broker_seconds, 1)
        print(f"broker up in {broker_seconds:.1f} s", flush=True)

        generate = [lakehouse, "generate", "--to", "kafka", "--events", str(args.events), "--seed", str(SEED)]
        send_seconds, _ = run_timed([*generate, "--late", "0"], env, root / "generate.log")
        messages = sum(p.latest for p in _topic(settings))
        run_seconds, _ = run_timed([lakehouse, "run", "--once", "--source", "kafka"], env, root / "run.log")
        report["throughput"] = {
            "events": args.events,
            "messages": messages,
            "send_seconds": round(send_seconds, 1),
            "run_once_seconds": round(run_seconds, 1),
            "messages_per_second": round(messages / run_seconds),
        }
        landing = RESULTS / "run.json"
        if landing.exists():
            ours = json.loads(landing.read_text())["ours"]
            report["throughput"]["landing_lines_per_second"] = round(ours["lines_per_second"])
        print(f"run --once --source kafka: {messages:,} messages in {run_seconds:.1f} s", flush=True)

        report["lag"] = _lag_run(settings, env, lakehouse, args.rate, args.minutes * 60, root)
        print(f"lag at {args.rate:,}/s: {report['lag']}", flush=True)
    finally:
        subprocess.run([lakehouse, "kafka", "down"], env=env, capture_output=True, timeout=120)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "kafka.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


def _topic(settings: Settings):
    from runtime.sources.kafka_client import topics

    return next(t for t in topics(settings) if t.name == settings.kafka.topic).partitions


def _lag_run(settings: Settings, env: dict[str, str], lakehouse: str, rate: int, seconds: float, root) -> dict:
    log = (root / "continuous.log").open("w")
    stream = subprocess.Popen([lakehouse, "run", "--continuous", "--source", "kafka"], env=env, stdout=log, stderr=log)
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    checkpoint = settings.checkpoints_dir / KAFKA_STAGE

    def sample() -> None:
        started = time.monotonic()
        while not stop.wait(1.0):
            try:
                samples.append((time.monotonic() - started, sum(partition_lag(settings, checkpoint).values())))
            except Exception:
                continue

    time.sleep(15)  # the JVM's start, so the lag measured is the stream's, not its launch
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    events = int(rate * seconds)
    generate = [lakehouse, "generate", "--to", "kafka", "--events", str(events), "--send-rate", str(rate)]
    producer = subprocess.Popen(
        [*generate, "--seed", "7", "--late", "0", "--duplicates", "0", "--invalid", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    producer.wait()
    stop.set()
    sampler.join()
    stream.send_signal(signal.SIGTERM)
    stream.wait(timeout=120)
    log.close()
    lags = [lag for _, lag in samples]
    third = max(1, len(lags) // 3)
    first, last = statistics.median(lags[:third]), statistics.median(lags[-third:])
    return {
        "rate": rate,
        "seconds": seconds,
        "samples": len(lags),
        "lag_p50_messages": statistics.median(lags) if lags else None,
        "lag_max_messages": max(lags) if lags else None,
        "lag_first_third_p50": first,
        "lag_last_third_p50": last,
        "lag_p50_seconds": round(statistics.median(lags) / rate, 2) if lags else None,
        "kept_up": bool(lags) and last <= first + rate,
    }


if __name__ == "__main__":
    main()
