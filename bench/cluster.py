"""``make bench``, the cluster part: the same backlog through ``lakehouse run --once`` in local mode and on a
Spark standalone cluster of this machine (``lakehouse cluster up``: two workers of one core each), same
files, same run, one after the other.

Both homes get a copy of one generated landing zone; each run is timed as a whole process (the JVM's
start included, and on the cluster the executors' starts). Gold must be the same in both homes (its rows
and event count, read with delta-rs). The figures go to ``bench/results/cluster.json``.

    .venv/bin/python -m bench.cluster                  # 1,000,000 events
    .venv/bin/python -m bench.cluster --events 20000   # a smoke run
"""

import argparse
import json
import os
import shutil
import sys
from datetime import UTC, datetime

from bench.run import SEED, _environment, _lakehouse_command, _run, count_lines, landing_files, table_figures
from devtools.daemons import free_port
from warehouse.catalog import user_spend_table
from warehouse.settings import REPO_ROOT, Settings

RESULTS_PATH = REPO_ROOT / "bench" / "results" / "cluster.json"
WORKERS, WORKER_CORES = 2, 1


def main() -> None:
    parser = argparse.ArgumentParser(description="`run --once` in local mode and on a standalone cluster.")
    parser.add_argument("--events", type=int, default=1_000_000, help="valid events to generate (seed 42)")
    parser.add_argument("--files", type=int, default=20, help="landing files to spread the lines over")
    parser.add_argument("--files-per-trigger", type=int, default=5, help="landing files per micro-batch")
    parser.add_argument("--keep", action="store_true", help="keep the scratch homes afterwards")
    args = parser.parse_args()

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    root = REPO_ROOT / ".lakehouse" / f"bench-cluster-{stamp}"
    local_env = _environment(root / "local", args.files_per_trigger)
    cluster_env = _environment(root / "cluster", args.files_per_trigger)
    port = free_port()
    cluster_env.update(
        LAKEHOUSE_CLUSTER_PORT=str(port),
        LAKEHOUSE_CLUSTER_UI_PORT=str(free_port()),
        LAKEHOUSE_CLUSTER_WORKERS=str(WORKERS),
        LAKEHOUSE_CLUSTER_WORKER_CORES=str(WORKER_CORES),
        LAKEHOUSE_CLUSTER_WORKER_MEMORY="2g",
        LAKEHOUSE_EXECUTOR_MEMORY="2g",
        LAKEHOUSE_SPARK_CORES_MAX=str(WORKERS * WORKER_CORES),
    )
    lakehouse = _lakehouse_command()
    root.mkdir(parents=True)
    finished = False
    try:
        print(f"bench home {root}")
        generate = [
            lakehouse,
            "generate",
            "--events",
            str(args.events),
            "--seed",
            str(SEED),
            "--files",
            str(args.files),
        ]
        _run(generate, local_env, root / "generate.log")
        local_landing = Settings.from_env(local_env).landing_dir
        cluster_landing = Settings.from_env(cluster_env).landing_dir
        cluster_landing.mkdir(parents=True, exist_ok=True)
        files = landing_files(local_landing)
        for path in files:
            shutil.copy2(path, cluster_landing / path.name)
        lines = count_lines(files)
        print(f"generated {args.events:,} events → {lines:,} lines in {len(files)} files")

        print("timing `lakehouse run --once` in local mode ...", flush=True)
        local_seconds, _ = _run([lakehouse, "run", "--once"], local_env, root / "local.log")
        up_seconds, _ = _run([lakehouse, "cluster", "up"], cluster_env, root / "cluster-up.log")
        try:
            print(f"timing `lakehouse run --once` on the cluster ({WORKERS} workers x {WORKER_CORES} core) ...")
            on_cluster = {**cluster_env, "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{port}"}
            cluster_seconds, _ = _run([lakehouse, "run", "--once"], on_cluster, root / "cluster.log")
        finally:
            _run([lakehouse, "cluster", "down"], cluster_env, root / "cluster-down.log")
        figures = {
            mode: table_figures(user_spend_table(Settings.from_env(env)).path(Settings.from_env(env)))
            for mode, env in (("local", local_env), ("cluster", cluster_env))
        }
        if figures["local"] != figures["cluster"]:
            raise SystemExit(f"bench: gold differs between local mode and the cluster: {figures}")
        finished = True
    finally:
        if not finished:
            print(f"bench: kept {root} for its logs", file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    ratio = local_seconds / cluster_seconds
    print()
    print(f"lines processed          {lines:>12,}  ({args.events:,} events, {args.files} files, seed {SEED})")
    print(f"run --once, local[*]     {local_seconds:>10.1f} s  {lines / local_seconds:>12,.0f} lines/s")
    print(f"run --once, cluster      {cluster_seconds:>10.1f} s  {lines / cluster_seconds:>12,.0f} lines/s")
    print(f"cluster / local          {ratio:>10.2f} x  throughput (the cluster's `up`: {up_seconds:.1f} s)")
    print(f"gold in both             {figures['local'][0]:,} rows, {figures['local'][1]:,} events")
    results = {
        "timestamp": stamp,
        "events": args.events,
        "lines": lines,
        "files": args.files,
        "files_per_trigger": args.files_per_trigger,
        "cpus": os.cpu_count(),
        "workers": WORKERS,
        "worker_cores": WORKER_CORES,
        "local_seconds": local_seconds,
        "cluster_seconds": cluster_seconds,
        "cluster_up_seconds": up_seconds,
        "throughput_cluster_over_local": ratio,
        "gold_rows": figures["local"][0],
        "gold_events": figures["local"][1],
    }
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {RESULTS_PATH.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
