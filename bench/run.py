"""``make bench``: time ``lakehouse run --once`` against bare Spark on the same files (a streaming job and a
batch job that write the tumbling table alone, and ``bench.twin_tables``, which writes the same fourteen
tables the plain way), and a full ``lakehouse validate`` of what the run built.

All are timed as whole processes (wall clock, Spark start-up included), on the same landing files and
the same files per micro-batch. The report gives lines processed, seconds and lines per second of each,
the throughput ratio ours/bare (target ≥ 0.5x) and validate/run (target ≤ 0.5x); the figures also go to
``bench/results/run.json``.

    .venv/bin/python -m bench.run                  # 1,000,000 events
    .venv/bin/python -m bench.run --events 20000   # a smoke run
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from warehouse.catalog import tumbling_table
from warehouse.settings import REPO_ROOT, Settings
from warehouse.storage import Location, open_delta

SEED = 42
#: Issue 8: ours against the bare streaming job, and against the aggregate-only floor.
TARGET_RATIO = 0.8
FLOOR_TARGET_RATIO = 0.5
#: A full validation may take at most this share of `run --once` on the same events.
VALIDATE_TARGET_RATIO = 0.5
RESULTS_PATH = REPO_ROOT / "bench" / "results" / "run.json"


@dataclass(frozen=True)
class Timing:
    """One timed process: wall-clock seconds, throughput, and what its output table holds."""

    seconds: float
    lines_per_second: float
    table_rows: int
    table_event_count: int


def lakehouse_command() -> str:
    """The project's CLI next to this interpreter (the venv), else whatever is on PATH."""
    beside = Path(sys.executable).parent / "lakehouse"
    found = str(beside) if beside.exists() else shutil.which("lakehouse")
    if found is None:
        raise SystemExit("bench: the `lakehouse` command is missing; run `make setup` first")
    return found


def run_timed(command: list[str], env: dict[str, str], log: Path) -> tuple[float, str]:
    """Run ``command`` to completion; return its wall-clock seconds and stdout. Exit on failure."""
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    log.write_text(f"$ {' '.join(command)}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise SystemExit(f"bench: `{' '.join(command)}` failed with exit code {done.returncode}:\n{tail}")
    return seconds, done.stdout


def landing_files(landing: Path) -> list[Path]:
    """The files Spark's file source reads: everything not hidden (``.``) or partial (``_``)."""
    return sorted(p for p in landing.iterdir() if p.is_file() and not p.name.startswith((".", "_")))


def count_lines(files: list[Path]) -> int:
    """Lines across ``files`` (every line the generator writes ends with a line break)."""
    total = 0
    for path in files:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                total += chunk.count(b"\n")
    return total


def table_figures(path: Location) -> tuple[int, int]:
    """Row count and sum of ``event_count`` of a Delta table, read with delta-rs (no Spark)."""
    arrow = open_delta(path).to_pyarrow_table(columns=["event_count"])
    counts = arrow.column("event_count").to_pylist()
    return arrow.num_rows, sum(c or 0 for c in counts)


def bench_environment(home: Path, files_per_trigger: int) -> dict[str, str]:
    env = dict(os.environ)
    env["LAKEHOUSE_HOME"] = str(home)
    env["LAKEHOUSE_MAX_FILES_PER_TRIGGER"] = str(files_per_trigger)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # The benches measure the purchases stream (bench.freshness --readings adds the second pipeline itself).
    env.setdefault("LAKEHOUSE_PIPELINES", "purchases")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description="Time `lakehouse run --once` against a bare Spark job.")
    parser.add_argument("--events", type=int, default=1_000_000, help="valid events to generate (seed 42)")
    parser.add_argument("--files", type=int, default=20, help="landing files to spread the lines over")
    parser.add_argument("--files-per-trigger", type=int, default=5, help="landing files per micro-batch (both)")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark's scratch homes afterwards")
    args = parser.parse_args()

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    root = REPO_ROOT / ".lakehouse" / f"bench-{stamp}"
    ours_home, bare_home = root / "lakehouse", root / "bare"
    root.mkdir(parents=True)
    ours_env = bench_environment(ours_home, args.files_per_trigger)
    bare_env = bench_environment(bare_home, args.files_per_trigger)
    lakehouse = lakehouse_command()
    finished = False
    try:
        print(f"bench home {root}")
        generate = [lakehouse, "generate", "--events", str(args.events), "--seed", str(SEED)]
        generate += ["--files", str(args.files)]
        seconds, output = run_timed(generate, ours_env, root / "generate.log")
        written = re.search(r"wrote (\d+) lines", output)
        landing = Settings.from_env(ours_env).landing_dir
        files = landing_files(landing)
        lines = count_lines(files)
        print(f"generated {args.events:,} events → {lines:,} lines in {len(files)} files ({seconds:.1f}s)")
        if written and int(written.group(1)) != lines:
            print(f"warning: the CLI reported {written.group(1)} lines but the landing files hold {lines}")

        print(f"timing `lakehouse run --once` ({args.files_per_trigger} files per trigger) ...", flush=True)
        ours_seconds, _ = run_timed([lakehouse, "run", "--once"], ours_env, root / "ours.log")
        gold = tumbling_table(Settings.from_env(ours_env)).path(Settings.from_env(ours_env))
        ours = Timing(ours_seconds, lines / ours_seconds, *table_figures(gold))

        print("timing `lakehouse validate` (every suite) ...", flush=True)
        validating = [lakehouse, "validate", "--json"]
        validate_seconds, validate_output = run_timed(validating, ours_env, root / "validate.log")
        validation = json.loads(validate_output)
        if not validation["passed"]:
            raise SystemExit(f"bench: validation of the generated lakehouse failed; see {root / 'validate.log'}")

        print("timing bench.bare_spark ...", flush=True)
        bare_table = bare_home / "bare_user_spend"
        bare_command = [sys.executable, "-m", "bench.bare_spark", "--landing", str(landing)]
        bare_command += ["--out", str(bare_table), "--files-per-trigger", str(args.files_per_trigger)]
        bare_seconds, _ = run_timed(bare_command, bare_env, root / "bare.log")
        bare = Timing(bare_seconds, lines / bare_seconds, *table_figures(bare_table))

        print("timing bench.bare_spark --aggregate-only ...", flush=True)
        floor_table = bare_home / "aggregate_only"
        floor_command = [sys.executable, "-m", "bench.bare_spark", "--landing", str(landing)]
        floor_command += ["--out", str(floor_table), "--aggregate-only"]
        floor_seconds, _ = run_timed(floor_command, bare_env, root / "aggregate-only.log")
        floor = Timing(floor_seconds, lines / floor_seconds, *table_figures(floor_table))

        print("timing bench.twin_tables (the fourteen tables, plain) ...", flush=True)
        twin_out = bare_home / "twin_tables"
        twin_command = [sys.executable, "-m", "bench.twin_tables", "--landing", str(landing), "--out", str(twin_out)]
        twin_command += ["--files-per-trigger", str(args.files_per_trigger)]
        twin_seconds, _ = run_timed(twin_command, bare_env, root / "twin-tables.log")
        twin = Timing(twin_seconds, lines / twin_seconds, *table_figures(twin_out / "tables" / "user_spend_5m"))
        finished = True
    finally:
        if not finished:
            print(f"bench: kept {root} for its logs", file=sys.stderr)
        elif not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    ratio = ours.lines_per_second / bare.lines_per_second
    verdict = "meets" if ratio >= TARGET_RATIO else "BELOW"
    validate_ratio = validate_seconds / ours.seconds
    validate_verdict = "meets" if validate_ratio <= VALIDATE_TARGET_RATIO else "ABOVE"
    print()
    print(f"lines processed        {lines:>12,}  ({args.events:,} events, {args.files} files, seed {SEED})")
    print(f"lakehouse run --once   {ours.seconds:>10.1f} s  {ours.lines_per_second:>12,.0f} lines/s")
    print(f"bare Spark streaming   {bare.seconds:>10.1f} s  {bare.lines_per_second:>12,.0f} lines/s")
    print(f"ratio ours/bare        {ratio:>10.2f} x  ({verdict} the {TARGET_RATIO}x target)")
    floor_ratio = ours.lines_per_second / floor.lines_per_second
    floor_verdict = "meets" if floor_ratio >= FLOOR_TARGET_RATIO else "BELOW"
    print(f"bare aggregate only    {floor.seconds:>10.1f} s  {floor.lines_per_second:>12,.0f} lines/s")
    print(f"ratio ours/aggregate   {floor_ratio:>10.2f} x  ({floor_verdict} the {FLOOR_TARGET_RATIO}x target)")
    twin_ratio = ours.lines_per_second / twin.lines_per_second
    twin_verdict = "meets" if twin_ratio >= TARGET_RATIO else "BELOW"
    print(f"bare fourteen tables   {twin.seconds:>10.1f} s  {twin.lines_per_second:>12,.0f} lines/s")
    print(f"ratio ours/fourteen    {twin_ratio:>10.2f} x  ({twin_verdict} the {TARGET_RATIO}x target)")
    print(f"lakehouse validate     {validate_seconds:>10.1f} s  (every suite passed)")
    suites = ", ".join(f"{s['suite']} {s['seconds']:.1f}s" for s in validation["suites"])
    print(f"  per suite            {suites}")
    print(
        f"ratio validate/run     {validate_ratio:>10.2f} x  ({validate_verdict} the ≤ {VALIDATE_TARGET_RATIO}x target)"
    )
    print(
        f"sanity: gold rows {ours.table_rows:,} (events {ours.table_event_count:,}); "
        f"bare rows {bare.table_rows:,} (events {bare.table_event_count:,}); "
        f"fourteen-table twin rows {twin.table_rows:,} (events {twin.table_event_count:,})"
    )
    results = {
        "timestamp": stamp,
        "events": args.events,
        "seed": SEED,
        "files": args.files,
        "files_per_trigger": args.files_per_trigger,
        "lines": lines,
        "cpus": os.cpu_count(),
        "ours": asdict(ours),
        "bare": asdict(bare),
        "ratio_ours_over_bare": ratio,
        "aggregate_only": asdict(floor),
        "ratio_ours_over_aggregate_only": floor_ratio,
        "twin_tables": asdict(twin),
        "ratio_ours_over_twin_tables": twin_ratio,
        "aggregate_only_target_ratio": FLOOR_TARGET_RATIO,
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "validate_seconds": validate_seconds,
        "validate_suite_seconds": {s["suite"]: s["seconds"] for s in validation["suites"]},
        "ratio_validate_over_run": validate_ratio,
        "validate_target_ratio": VALIDATE_TARGET_RATIO,
        "validate_meets_target": validate_ratio <= VALIDATE_TARGET_RATIO,
    }
    RESULTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_PATH.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {RESULTS_PATH.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
