"""Concurrent writers (issue 26): ``run --continuous`` under load while ``reconcile`` runs every 30 s,
``validate`` every minute, ``maintain`` twice and a ``replay`` is asked for midway, each a command of its own
as a user or a scheduler would start them, each on its own clock (so they overlap each other and the stream).

The load: one landing file a second, ``--rate`` events each (synthetic: disorder, duplicates, late events far
behind the watermark, invalid lines), in event-time order across files. Every command must end with exit 0,
or refuse in exactly one line on stderr with exit 1 (the replay is documented to refuse while a stream runs);
no output or log may hold ``ConcurrentAppendException`` (or any other concurrent-modification error) or a
traceback. Afterwards the run is stopped with SIGTERM, ``run --once`` and ``reconcile`` finish what is left,
and the invariants are checked against the plain-Python reference (``tests/reference.py``, independent of
Spark): bronze holds every landed line once; silver + quarantine + duplicates = bronze; gold equals the
reference's window totals; ``validate`` passes; a second ``run --once`` and ``reconcile`` change no value.

    .venv/bin/python -m bench.concurrency                   # 10 minutes at 200 events/s (``make concurrency``)
    .venv/bin/python -m bench.concurrency --minutes 2       # a smoke run

Figures and every command's outcome go to ``bench/results/concurrency.json``.
"""

import argparse
import json
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deltalake import DeltaTable, QueryBuilder

from bench.run import bench_environment, lakehouse_command
from devtools.synthetic import StreamSpec, generate_lines
from runtime.sources.landing import place_in_landing
from tests.reference import landing_lines, window_totals
from warehouse.catalog import BRONZE_EVENTS, SILVER_DUPLICATES, SILVER_EVENTS, SILVER_QUARANTINE, tumbling_table
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
#: What a lost race between writers looks like in Delta's and Spark's words.
CONFLICT = re.compile(r"Concurrent\w*Exception|ConcurrentModification|CommitFailedException|Traceback \(most recent")


@dataclass
class Outcome:
    """One command the run started: when, how it ended, and its stderr when it refused or failed."""

    command: str
    started_s: float
    seconds: float
    code: int
    stderr: str

    @property
    def kind(self) -> str:
        if self.code == 0:
            return "ok"
        lines = self.stderr.strip().splitlines()
        return "refused" if self.code == 1 and len(lines) == 1 and lines[0].startswith("lakehouse: ") else "failed"


@dataclass
class Run:
    minutes: float
    rate: int
    home: Path
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    outcomes: list[Outcome] = field(default_factory=list)
    files: int = 0
    lines: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def command(self, *args: str, timeout: float = 1800) -> Outcome:
        started = time.monotonic()
        done = subprocess.run(
            [lakehouse_command(), *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        outcome = Outcome(" ".join(args), started - self.started, time.monotonic() - started, done.returncode, "")
        outcome.stderr = done.stderr
        with self.lock:
            self.outcomes.append(outcome)
        if CONFLICT.search(done.stdout + done.stderr):
            outcome.code = outcome.code or 99  # a conflict told on the side is a failure even with exit 0
        print(f"  {outcome.started_s:6.0f} s  {outcome.command:12s} {outcome.kind:8s} {outcome.seconds:5.1f} s"
              + (f"  {done.stderr.strip()[:160]}" if outcome.kind != "ok" else ""), flush=True)  # fmt: skip
        return outcome


def _load(run: Run, stop: threading.Event) -> None:
    """One landing file a second, ``rate`` events each, until ``stop``."""
    seconds = int(run.minutes * 60)
    spec = StreamSpec(
        events=run.rate * seconds, users=500, rate=float(run.rate), disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.01, invalid_fraction=0.01, seed=26,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    per_file = max(1, len(lines) // seconds)
    settings = Settings.from_env(run.env)
    for index, at in enumerate(range(0, len(lines), per_file)):
        if stop.is_set():
            break
        chunk = lines[at : at + per_file]
        place_in_landing(settings, f"load-{index:05d}.jsonl", lambda out, c=chunk: out.writelines(f"{x}\n" for x in c))
        run.files, run.lines = run.files + 1, run.lines + len(chunk)
        stop.wait(max(0.0, run.started + index + 1 - time.monotonic()))


def _every(run: Run, stop: threading.Event, seconds: float, first: float, *args: str) -> None:
    """``lakehouse <args>`` at ``first`` s and then every ``seconds`` s after the last one ended, until ``stop``."""
    if stop.wait(first):
        return
    while not stop.is_set():
        run.command(*args)
        stop.wait(seconds)


def _at(run: Run, stop: threading.Event, moments: list[float], *args: str) -> None:
    for moment in moments:
        if stop.wait(max(0.0, run.started + moment - time.monotonic())):
            return
        run.command(*args)


def query_table(path: Path, sql: str) -> list[tuple]:
    table = QueryBuilder().register("t", DeltaTable(str(path))).execute(sql).read_all()
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return list(zip(*columns, strict=True))


def _count(path: Path) -> int:
    return int(query_table(path, "SELECT count(*) FROM t")[0][0])


def _checks(run: Run) -> dict[str, object]:
    """The invariants after the last command, against the plain-Python reference over the landed lines."""
    settings = Settings.from_env(run.env)
    lines = landing_lines(settings.landing_dir)
    bronze = _count(BRONZE_EVENTS.path(settings))
    silver = _count(SILVER_EVENTS.path(settings))
    quarantine = _count(SILVER_QUARANTINE.path(settings))
    duplicates = _count(SILVER_DUPLICATES.path(settings))
    rows = query_table(
        tumbling_table(settings).path(settings), "SELECT user_id, window_start, total_amount, event_count FROM t"
    )
    gold = {(user, start.astimezone(UTC)): (total, count) for user, start, total, count in rows}
    expected = window_totals(lines, settings.windows.minutes)
    wrong = sum(1 for key in expected.keys() | gold.keys() if gold.get(key) != expected.get(key))
    return {
        "lines_landed": len(lines),
        "bronze_rows": bronze,
        "bronze_holds_every_line_once": bronze == len(lines),
        "silver_quarantine_duplicates_equal_bronze": silver + quarantine + duplicates == bronze,
        "gold_windows": len(gold),
        "gold_windows_wrong": wrong,
        "gold_equals_reference": wrong == 0,
    }


def table_versions(settings: Settings) -> dict[str, int]:
    found = {}
    for folder in sorted((settings.home / "tables").glob("*/*")):
        if (folder / "_delta_log").is_dir():
            found[f"{folder.parent.name}.{folder.name}"] = DeltaTable(str(folder)).version()
    return found


def tumbling_values(settings: Settings) -> list[tuple]:
    return sorted(query_table(tumbling_table(settings).path(settings), "SELECT * FROM t"), key=repr)


def main() -> None:
    parser = argparse.ArgumentParser(description="Concurrent writers beside `run --continuous` under load.")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the load and the writers run")
    parser.add_argument("--rate", type=int, default=200, help="events per second landed (one file a second)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    args = parser.parse_args()
    home = REPO_ROOT / ".lakehouse" / f"bench-concurrency-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    env = bench_environment(home, files_per_trigger=20)
    env["LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"] = "2"
    Settings.from_env(env).ensure_home()
    run = Run(args.minutes, args.rate, home, env)
    logs = home / "concurrency-logs"
    logs.mkdir(parents=True)
    seconds = args.minutes * 60
    print(f"{args.minutes:g} min at {args.rate:,} events/s; home {home}", flush=True)
    with (logs / "run.out").open("w") as out, (logs / "run.err").open("w") as err:
        stream = subprocess.Popen([lakehouse_command(), "run", "--continuous"], env=env, stdout=out, stderr=err)
        stop = threading.Event()
        workers = [
            threading.Thread(target=_load, args=(run, stop)),
            threading.Thread(target=_every, args=(run, stop, 30, 30, "reconcile")),
            threading.Thread(target=_every, args=(run, stop, 60, 45, "validate")),
            threading.Thread(target=_at, args=(run, stop, [seconds / 3, 2 * seconds / 3], "maintain")),
            threading.Thread(target=_at, args=(run, stop, [seconds / 2], "replay")),
        ]
        for worker in workers:
            worker.start()
        stop.wait(seconds)
        stop.set()
        for worker in workers:
            worker.join()
        stream_alive = stream.poll() is None
        stream.send_signal(signal.SIGTERM)
        stream_code = stream.wait(timeout=300)
    stream_err = (logs / "run.err").read_text()
    print(f"  the continuous run {'stopped on SIGTERM' if stream_alive else 'HAD STOPPED'}, exit {stream_code}")
    after = [run.command("run", "--once"), run.command("reconcile"), run.command("validate")]
    settings = Settings.from_env(env)
    versions, values = table_versions(settings), tumbling_values(settings)
    again = [run.command("run", "--once"), run.command("reconcile")]
    checks = _checks(run)
    checks["second_run_changes_no_value"] = tumbling_values(settings) == values
    checks["second_run_tables_changed"] = sorted(k for k, v in table_versions(settings).items() if versions.get(k) != v)
    checks["continuous_run_ran_to_the_end"] = stream_alive and stream_code == 0
    checks["no_conflict_in_the_run_log"] = not CONFLICT.search(stream_err)
    checks["validate_passes"] = after[2].code == 0
    by_command: dict[str, dict[str, int]] = {}
    for outcome in run.outcomes:
        by_command.setdefault(outcome.command, {}).setdefault(outcome.kind, 0)
        by_command[outcome.command][outcome.kind] += 1
    failed = [o for o in run.outcomes if o.kind == "failed"]
    checks["every_command_ok_or_one_line_refusal"] = not failed and all(o.code == 0 for o in after + again)
    passed = all(v for k, v in checks.items() if isinstance(v, bool))
    result = {
        "minutes": args.minutes,
        "rate": args.rate,
        "files": run.files,
        "lines": run.lines,
        "commands": by_command,
        "refusals": sorted({o.stderr.strip() for o in run.outcomes if o.kind == "refused"}),
        "failures": [asdict(o) for o in failed],
        "checks": checks,
        "passed": passed,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "concurrency.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({"commands": by_command, "checks": checks}, indent=2, default=str))
    print("PASSED" if passed else "FAILED", flush=True)
    if not args.keep and passed:
        shutil.rmtree(home, ignore_errors=True)
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
