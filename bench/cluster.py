"""``make bench``, the cluster part, every gold output on:

- the same backlog through ``lakehouse run --once`` in local mode, on a Spark standalone cluster of this
  machine (``lakehouse cluster up``: two workers of one core each), and in local mode with the tables,
  checkpoints and landing zone on an S3-compatible server on 127.0.0.1 (moto's): local mode against the
  cluster, and local disk against object storage, for the same work;
- the landing → gold freshness of ``run --continuous`` at 1,000 events/s (``bench.freshness``'s probes),
  in local mode and on the cluster (each of the run's two applications on one worker's core).

Every home gets a copy of one generated landing zone; each run is timed as a whole process (the JVM's
start included, and on the cluster the executors' starts). Gold must be the same in every home (its rows
and event count, read with delta-rs). The figures go to ``bench/results/cluster.json``.

    .venv/bin/python -m bench.cluster                                       # 1,000,000 events, 3 min each
    .venv/bin/python -m bench.cluster --events 20000 --fresh-minutes 0.5    # a smoke run
"""

import argparse
import json
import os
import shutil
import sys
from datetime import UTC, datetime

from bench.freshness import measure
from bench.run import SEED, bench_environment, count_lines, lakehouse_command, landing_files, run_timed, table_figures
from devtools.daemons import free_port
from devtools.objectstore import ObjectStore
from warehouse.catalog import tumbling_table
from warehouse.settings import REPO_ROOT, Settings

RESULTS_PATH = REPO_ROOT / "bench" / "results" / "cluster.json"
WORKERS, WORKER_CORES = 2, 1
FRESH_RATE = 1000


def _cluster_settings(env: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith("LAKEHOUSE_CLUSTER_")}


def _on_object_storage(files: list, env: dict[str, str], root) -> tuple[float, tuple[int, int]]:
    """``run --once`` over the same files with the data on an S3 server of its own: seconds, gold figures."""
    store = ObjectStore.start("lakehouse-bench", root / "s3.log")
    try:
        env = {**env, **store.env}
        client = store.client()
        prefix = store.env["LAKEHOUSE_STORAGE_URI"].split("/", 3)[3]
        for path in files:  # in arrival order (their names): S3 orders a second's files by name
            client.upload_file(str(path), store.bucket, f"{prefix}/landing/{path.name}")
        seconds, _ = run_timed([lakehouse_command(), "run", "--once"], env, root / "s3-run.log")
        os.environ.update({k: v for k, v in store.env.items() if k.startswith("AWS_")})
        settings = Settings.from_env(env)
        return seconds, table_figures(tumbling_table(settings).path(settings))
    finally:
        store.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="`run --once` in local mode and on a standalone cluster.")
    parser.add_argument("--events", type=int, default=1_000_000, help="valid events to generate (seed 42)")
    parser.add_argument("--files", type=int, default=20, help="landing files to spread the lines over")
    parser.add_argument("--files-per-trigger", type=int, default=5, help="landing files per micro-batch")
    parser.add_argument("--fresh-minutes", type=float, default=3.0, help="how long each freshness run lands files")
    parser.add_argument("--keep", action="store_true", help="keep the scratch homes afterwards")
    args = parser.parse_args()

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    root = REPO_ROOT / ".lakehouse" / f"bench-cluster-{stamp}"
    local_env = bench_environment(root / "local", args.files_per_trigger)
    cluster_env = bench_environment(root / "cluster", args.files_per_trigger)
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
    lakehouse = lakehouse_command()
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
        run_timed(generate, local_env, root / "generate.log")
        local_landing = Settings.from_env(local_env).landing_dir
        cluster_landing = Settings.from_env(cluster_env).landing_dir
        cluster_landing.mkdir(parents=True, exist_ok=True)
        files = landing_files(local_landing)
        for path in files:
            shutil.copy2(path, cluster_landing / path.name)
        lines = count_lines(files)
        print(f"generated {args.events:,} events → {lines:,} lines in {len(files)} files")

        print("timing `lakehouse run --once` in local mode ...", flush=True)
        local_seconds, _ = run_timed([lakehouse, "run", "--once"], local_env, root / "local.log")
        up_seconds, _ = run_timed([lakehouse, "cluster", "up"], cluster_env, root / "cluster-up.log")
        try:
            print(f"timing `lakehouse run --once` on the cluster ({WORKERS} workers x {WORKER_CORES} core) ...")
            on_cluster = {**cluster_env, "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{port}"}
            cluster_seconds, _ = run_timed([lakehouse, "run", "--once"], on_cluster, root / "cluster.log")
        finally:
            run_timed([lakehouse, "cluster", "down"], cluster_env, root / "cluster-down.log")
        print("timing `lakehouse run --once` with the data on the S3 server ...", flush=True)
        s3_seconds, s3_figures = _on_object_storage(files, bench_environment(root / "s3", args.files_per_trigger), root)
        figures = {
            mode: table_figures(tumbling_table(Settings.from_env(env)).path(Settings.from_env(env)))
            for mode, env in (("local", local_env), ("cluster", cluster_env))
        }
        figures["s3"] = s3_figures
        if len(set(figures.values())) != 1:
            raise SystemExit(f"bench: gold differs between local mode, the cluster and object storage: {figures}")

        freshness = {}
        for mode in ("local", "cluster"):
            print(f"freshness of `run --continuous` at {FRESH_RATE:,} events/s, {mode} ...", flush=True)
            extra = {}
            if mode == "cluster":
                run_timed([lakehouse, "cluster", "up"], cluster_env, root / "cluster-up-2.log")
                # Two applications (the critical path, the followers): one core each.
                extra = {**_cluster_settings(cluster_env), "LAKEHOUSE_SPARK_MASTER": f"spark://127.0.0.1:{port}",
                         "LAKEHOUSE_SPARK_CORES_MAX": "1"}  # fmt: skip
            (root / f"fresh-{mode}").mkdir()
            try:
                measured = measure(FRESH_RATE, args.fresh_minutes * 60, 1, root / f"fresh-{mode}", extra)
            finally:
                if mode == "cluster":
                    run_timed([lakehouse, "cluster", "down"], cluster_env, root / "cluster-down-2.log")
            freshness[mode] = {
                "kept_up": measured.kept_up,
                "probes_missing": measured.probes_missing,
                **{name: figures_ for name, figures_ in measured.outputs.items()},
            }
            gold = measured.outputs["user_spend_5m"]
            print(f"  gold.user_spend_5m p50 {gold['p50']} s, p99 {gold['p99']} s, kept up: {measured.kept_up}")
        finished = True
    finally:
        if not finished:
            print(f"bench: kept {root} for its logs", file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    ratio = local_seconds / cluster_seconds
    s3_ratio = local_seconds / s3_seconds
    print()
    print(f"lines processed          {lines:>12,}  ({args.events:,} events, {args.files} files, seed {SEED})")
    print(f"run --once, local[*]     {local_seconds:>10.1f} s  {lines / local_seconds:>12,.0f} lines/s")
    print(f"run --once, cluster      {cluster_seconds:>10.1f} s  {lines / cluster_seconds:>12,.0f} lines/s")
    print(f"cluster / local          {ratio:>10.2f} x  throughput (the cluster's `up`: {up_seconds:.1f} s)")
    print(f"run --once, S3 (local[*]) {s3_seconds:>9.1f} s  {lines / s3_seconds:>12,.0f} lines/s")
    print(f"object storage / disk    {s3_ratio:>10.2f} x  throughput")
    for mode, fresh in freshness.items():
        gold = fresh["user_spend_5m"]
        print(f"freshness {mode:8s}       p50 {gold['p50']} s, p99 {gold['p99']} s at {FRESH_RATE:,} events/s")
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
        "s3_seconds": s3_seconds,
        "throughput_s3_over_disk": s3_ratio,
        "freshness_rate": FRESH_RATE,
        "freshness_minutes": args.fresh_minutes,
        "freshness": freshness,
        "gold_rows": figures["local"][0],
        "gold_events": figures["local"][1],
    }
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {RESULTS_PATH.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
