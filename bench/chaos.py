"""Chaos at scale (issue 26): SIGKILLs at random moments of every writer, in turn, while events arrive from
the landing folder and from Kafka together; afterwards the contract's invariants, checked against the
plain-Python reference.

One scratch home with everything a deployment runs, each a process of its own: the Kafka broker (``lakehouse
kafka up``), a Spark standalone cluster of two one-core workers (``lakehouse cluster up``), Dagster's webserver
and daemon as separate services (the instance as ``make ui`` writes it, the late-data sensor on), and ``run
--continuous``, whose source and Spark master change at every restart (landing or Kafka; local or the cluster).
A loader lands one file a second and produces to the topic at the same time (two generated streams with
duplicates, disorder, late and invalid lines; a share of the file events also redelivered through Kafka).

A cycle kills, in this order, each after a random wait:
  stream      ``run --continuous`` (its followers' thread dies with it), then started on the next source/master
  worker      a Spark worker (and its executor) under the stream on the cluster, then ``cluster up`` again
  reconcile   ``lakehouse reconcile`` beside the stream, then run again to its end
  maintain    ``lakehouse maintain`` beside the stream (the next cycle's, or the last, runs to its end)
  stream      again, left down for the Dagster part: the landing sensor is switched on
  sensor run  the process of a run the landing sensor launched (run monitoring must fail it, freeing its pools)
  daemon      ``dagster-daemon`` itself, then started again (its sensors must tick, a run it launches succeed)
  replay      ``lakehouse replay`` (the stream is down: it refuses otherwise), then run again to its end
Then the stream starts again and the next cycle begins. After the last kill: the sensors are switched off, the
runs end, ``run --once`` from both sources, ``reconcile``, ``maintain`` and ``validate`` finish, and the checks
run: bronze holds every line received once (files + topic); silver + quarantine + duplicates = bronze; every
gold table with a reference equals it (5-minute and hopping windows, sessions, global windows, firings' newest
revision); ``validate`` passes; a second ``run --once`` + ``reconcile`` changes no value; no run is left
started, no concurrency slot claimed, no lock held; the sensors' cursors name what exists.

    .venv/bin/python -m bench.chaos                 # 3 cycles: 24 kills over 310,000 events (``make chaos``)
    .venv/bin/python -m bench.chaos --short         # 1 cycle without the cluster, 6,000 events over 2 minutes

The kills, what each hit, and the checks go to ``bench/results/chaos.json`` (``--short``:
``.lakehouse/chaos-short.json``).
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.chaos_checks import dagster_checks, table_checks, tally
from bench.concurrency import CONFLICT, table_versions, tumbling_values
from bench.dagster_api import ENDED, LANDING_SENSOR, LATE_DATA_SENSOR, WAITING, DagsterApi
from bench.run import bench_environment, lakehouse_command
from devtools.daemons import free_port
from devtools.synthetic import StreamSpec, generate_lines
from runtime.checkpoints import checkpoint_dir, committed_batches, uncommitted_batch
from runtime.sources.kafka_client import produce_lines
from runtime.sources.landing import place_in_landing
from runtime.stages import source_stage
from warehouse.settings import REPO_ROOT, Settings

RESULTS = REPO_ROOT / "bench" / "results"
BIN = REPO_ROOT / ".venv" / "bin"
#: The stream's (source, Spark master) at each start, in turn.
PLACES = (("landing", "local"), ("kafka", "cluster"), ("kafka", "local"), ("landing", "cluster"))


@dataclass
class Kill:
    """One SIGKILL: its target, when (seconds into the chaos run and into the target's life), what it hit."""

    index: int
    target: str
    at_s: float
    pid: int
    into_s: float
    hit: str
    then: str = ""


@dataclass
class Chaos:
    cycles: int
    cluster: bool
    file_events: int
    kafka_events: int
    seconds: float
    home: Path
    env: dict[str, str]
    rng: random.Random
    started: float = field(default_factory=time.monotonic)
    kills: list[Kill] = field(default_factory=list)
    commands: list[dict] = field(default_factory=list)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    place: int = 0
    stream_place: tuple[str, str] = ("landing", "local")
    stream_born: float = 0.0
    stream_newest_batch: int = -1
    #: Each command's last whole run, in seconds: its kill is drawn within it.
    durations: dict[str, float] = field(default_factory=dict)
    #: Where a kill is drawn, in seconds, for a command whose whole run has not been seen yet.
    first_kill_window: tuple[float, float] = (20.0, 120.0)
    daemon_born: float = 0.0
    landed: int = 0
    nudges: int = 0
    load_done: bool = False
    produced: int = 0

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    @property
    def dagster(self) -> DagsterApi:
        return DagsterApi(f"http://127.0.0.1:{self.env['DAGSTER_PORT']}")

    @property
    def logs(self) -> Path:
        return self.home / "chaos-logs"

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def say(self, text: str) -> None:
        print(f"  {self.now():7.1f} s  {text}", flush=True)

    # -- processes ------------------------------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        with (self.logs / f"{name}.log").open("a") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                argv, env=env or self.env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes[name] = process
        return process

    def command(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run(
            [lakehouse_command(), *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        lines = done.stderr.strip().splitlines()
        kind = "ok" if done.returncode == 0 else "failed"
        if done.returncode == 1 and len(lines) == 1 and lines[0].startswith("lakehouse: "):
            kind = "refused"
        if CONFLICT.search(done.stdout + done.stderr):
            kind = "failed"
        self.commands.append(
            {"command": " ".join(args), "at_s": self.now(), "kind": kind, "stderr": done.stderr[-600:]}
        )
        self.say(f"lakehouse {' '.join(args)}: {kind} in {time.monotonic() - started:.0f} s"
                 + (f" ({done.stderr.strip()[-200:]})" if kind != "ok" else ""))  # fmt: skip
        return done

    def until_done(self, *args: str) -> None:
        """Run a command until it ends with exit 0; a one-line refusal (another writer's turn) waits and tries again."""
        for _ in range(20):
            started = time.monotonic()
            done = self.command(*args)
            if done.returncode == 0:
                self.durations[args[0]] = time.monotonic() - started
                return
            if self.commands[-1]["kind"] != "refused":
                return
            time.sleep(10)

    def kill(self, target: str, pid: int, into_s: float, hit: Callable[[], str], group: bool = False) -> Kill:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
        kill = Kill(len(self.kills) + 1, target, self.now(), pid, round(into_s, 1), hit())
        self.kills.append(kill)
        self.say(f"KILL {kill.index:2d} {target}: pid {pid} after {kill.into_s} s; {kill.hit}")
        return kill

    # -- the load -------------------------------------------------------------------------------------------
    def load(self, stop: threading.Event) -> None:
        """One landing file a second and the topic's share of messages, until every event is out."""
        common = {"users": 400, "disorder_seconds": 30, "duplicate_fraction": 0.04, "late_fraction": 0.01,
                  "late_seconds": 900.0, "invalid_fraction": 0.01}  # fmt: skip
        files = list(generate_lines(StreamSpec(events=self.file_events, rate=self.file_events / self.seconds,
                                               seed=26, **common)))  # fmt: skip
        topic = list(generate_lines(StreamSpec(events=self.kafka_events, rate=self.kafka_events / self.seconds,
                                               seed=27, **common)))  # fmt: skip
        # A redelivery across sources: every 200th file line that is an event's first arrival is sent through
        # Kafka too, as it is. (A conflicting redelivery copied across would make "first arrival" a race
        # between the two streams, which no reference can call.)
        seen: set[str] = set()
        copies: set[int] = set()
        for index, line in enumerate(files):
            event_id = _event_id(line)
            if event_id is not None and event_id not in seen and index % 200 == 0:
                copies.add(index)
            seen.add(event_id)
        per_second = max(1, round(len(files) / self.seconds)), max(1, round(len(topic) / self.seconds))
        settings = self.settings
        for second in range(int(self.seconds) + 2):
            if stop.is_set():
                break
            chunk = files[second * per_second[0] : (second + 1) * per_second[0]]
            first = second * per_second[0]
            sent = topic[second * per_second[1] : (second + 1) * per_second[1]]
            sent += [line for n, line in enumerate(chunk, first) if n in copies]
            if not chunk and not sent:
                break
            if chunk:
                place_in_landing(
                    settings, f"chaos-{second:05d}.jsonl", lambda out, c=chunk: out.writelines(f"{x}\n" for x in c)
                )
                self.landed += len(chunk)
            if sent:
                self.produced += produce_lines(settings, sent)
            stop.wait(max(0.0, self.started + second + 1 - time.monotonic()))
        self.load_done = True
        self.say(f"load done: {self.landed:,} lines landed, {self.produced:,} messages produced")

    def nudge(self, source: str = "landing") -> None:
        """Land a small file (or send as many messages) of its own, so a sensor or the stream has something new
        even after the load ended (its events are in the load's first minute of event time: late)."""
        self.nudges += 1
        spec = StreamSpec(events=40, users=20, rate=1.0, seed=1000 + self.nudges, invalid_fraction=0.05)
        lines = list(generate_lines(spec))
        if source == "kafka":
            self.produced += produce_lines(self.settings, lines)
            return
        name = f"chaos-extra-{self.nudges:03d}.jsonl"
        place_in_landing(self.settings, name, lambda out: out.writelines(f"{x}\n" for x in lines))
        self.landed += len(lines)

    # -- the continuous stream ------------------------------------------------------------------------------
    def start_stream(self) -> None:
        source, master = PLACES[self.place % len(PLACES)]
        if master == "cluster" and not self.cluster:
            source, master = source, "local"
        env = dict(self.env)
        if master == "cluster":
            env["LAKEHOUSE_SPARK_MASTER"] = f"spark://127.0.0.1:{self.env['LAKEHOUSE_CLUSTER_PORT']}"
            env["LAKEHOUSE_SPARK_CORES_MAX"] = "2"
        self.spawn("stream", [lakehouse_command(), "run", "--continuous", "--source", source], env)
        self.stream_place, self.stream_born = (source, master), time.monotonic()
        checkpoint = checkpoint_dir(self.settings, source_stage(source))
        self.stream_newest_batch = _newest_batch(checkpoint)
        self.say(f"run --continuous --source {source} on {master} (pid {self.processes['stream'].pid})")

    def stream_moment(self) -> str:
        source, master = self.stream_place
        checkpoint = checkpoint_dir(self.settings, source_stage(source))
        open_batch = uncommitted_batch(checkpoint) if checkpoint.is_dir() else None
        where = f"mid-batch {open_batch} (planned, not committed)" if open_batch is not None else "between batches"
        return f"{source} on {master}: {where}, {_newest_batch(checkpoint) + 1} batches committed"

    def stream_alive(self) -> bool:
        stream = self.processes.get("stream")
        return stream is not None and stream.poll() is None

    def kill_stream(self, restart: bool) -> None:
        """SIGKILL the stream a random 2 to 30 s after it committed a batch of its own (not in its start-up)."""
        self.ensure_stream()
        checkpoint = checkpoint_dir(self.settings, source_stage(self.stream_place[0]))
        at_start = self.stream_newest_batch
        if self.load_done:
            self.nudge(self.stream_place[0])
        self.wait("the stream to commit a batch", lambda: _newest_batch(checkpoint) > at_start, 600)
        time.sleep(self.rng.uniform(2, 30))
        self.ensure_stream()
        stream = self.processes["stream"]
        kill = self.kill("stream", stream.pid, time.monotonic() - self.stream_born, self.stream_moment)
        stream.wait()
        self.place += 1
        if restart:
            self.start_stream()
            kill.then = f"started again: {self.stream_place[0]} on {self.stream_place[1]}"
        else:
            kill.then = "left down for the Dagster part"

    def ensure_stream(self) -> None:
        """A stream that stopped by itself is a finding: its last lines are recorded and it starts again."""
        stream = self.processes.get("stream")
        if stream is not None and stream.poll() is not None:
            tail = (self.logs / "stream.log").read_text().strip().splitlines()[-3:]
            self.commands.append({"command": "run --continuous", "at_s": self.now(), "kind": "stopped",
                                  "code": stream.returncode, "stderr": "\n".join(tail)})  # fmt: skip
            self.say(f"the stream had stopped (exit {stream.returncode}): {' | '.join(tail)[-300:]}")
            self.start_stream()

    def stop_stream(self) -> None:
        stream = self.processes.get("stream")
        if stream is not None and stream.poll() is None:
            stream.send_signal(signal.SIGTERM)
            stream.wait(timeout=600)

    # -- commands beside the stream -------------------------------------------------------------------------
    def kill_command(self, target: str, *args: str) -> Kill | None:
        """Start ``lakehouse <args>`` and SIGKILL it at a random moment of its last whole run's length (within
        ``first_kill_window`` before one is known); None when it ended first."""
        before = table_versions(self.settings)
        born = time.monotonic()
        process = self.spawn(target, [lakehouse_command(), *args])
        known = self.durations.get(target)
        try:
            wait = self.rng.uniform(0.3, 0.95) * known if known else self.rng.uniform(*self.first_kill_window)
            process.wait(timeout=wait)
            if process.returncode == 0:  # its work shrank (a quieter moment): the next kill is drawn within this run
                self.durations[target] = time.monotonic() - born
            self.say(f"{target} ended (exit {process.returncode}) before its kill; trying again")
            return None
        except subprocess.TimeoutExpired:
            pass

        def hit() -> str:
            after = table_versions(self.settings)
            wrote = sorted(name for name, version in after.items() if before.get(name) != version)
            share = f" ({(time.monotonic() - born) / known:.0%} of its last whole run)" if known else ""
            return f"{time.monotonic() - born:.0f} s in{share}; committed meanwhile (by it or a stream): " + (
                ", ".join(wrote) or "nothing"
            )

        kill = self.kill(target, process.pid, time.monotonic() - born, hit)
        process.wait()
        return kill

    def kill_and_rerun(self, target: str, *args: str, rerun: bool = True) -> None:
        """Kill ``target`` once; while it is refused (another run holds its lock) or ends first, try again."""
        for _ in range(12):
            kill = self.kill_command(target, *args)
            if kill is not None:
                break
            time.sleep(15)
        else:
            raise SystemExit(f"chaos: {target} ended or was refused 12 times; it was never killed")
        if rerun:
            self.until_done(*args)
            kill.then = f"run again: {self.commands[-1]['kind']}"

    # -- Dagster --------------------------------------------------------------------------------------------
    def start_daemon(self) -> None:
        self.spawn("daemon", [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"])
        self.daemon_born = time.monotonic()

    def start_dagster(self) -> None:
        subprocess.run([str(BIN / "python"), "-m", "orchestration.instance", self.env["DAGSTER_HOME"]], env=self.env,
                       check=True, cwd=REPO_ROOT)  # fmt: skip
        self.spawn("webserver", [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
                                 "-p", self.env["DAGSTER_PORT"]])  # fmt: skip
        self.start_daemon()
        self.wait("the Dagster webserver to load the code location", self.dagster.loaded, 240)
        self.switch(LATE_DATA_SENSOR, True)

    def switch(self, sensor: str, on: bool) -> None:
        self.dagster.switch(sensor, on)
        self.say(f"{sensor} {'on' if on else 'off'}")

    def wait(self, what: str, ready: Callable[[], object], timeout: float = 900) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = ready()
            if found:
                return found
            time.sleep(2)
        raise SystemExit(f"chaos: timed out after {timeout:.0f} s waiting for {what}")

    def kill_sensor_run(self) -> Kill:
        """Kill the process of a run the landing sensor launched, once it has worked a random while; return
        once run monitoring has ended it (the daemon's kill that follows waits for a later run to succeed,
        which needs the slots run monitoring freed)."""
        seen = {run["runId"] for run in self.dagster.runs()}
        self.nudge()

        def started() -> dict | None:
            fresh = [
                r for r in self.dagster.runs("lakehouse_once") if r["runId"] not in seen and r["status"] == "STARTED"
            ]
            return fresh[0] if fresh and self.dagster.run_pid(fresh[0]["runId"]) else None

        run = self.wait("a run launched by the landing sensor", started)
        pid = self.dagster.run_pid(run["runId"])
        time.sleep(self.rng.uniform(5, 60))
        if self.dagster.status(run["runId"]) != "STARTED":
            self.say("the sensor's run ended before its kill; waiting for another")
            return self.kill_sensor_run()
        moment = f"run {run['runId'][:8]} of lakehouse_once at: {self.dagster.last_message(run['runId'])}"
        kill = self.kill("sensor run", pid, time.time() - (run["startTime"] or time.time()), lambda: moment)

        def failed() -> str | None:
            status = self.dagster.status(run["runId"])
            return status if status in ENDED else None

        status = self.wait("run monitoring to end the killed run", failed, timeout=300)
        kill.then = f"marked {status} by run monitoring"
        return kill

    def kill_daemon(self, killed_run: Kill) -> None:
        """SIGKILL the daemon's whole process group, as a host or container dies: the daemon, the code server
        it started and the runs that server launched. Nobody is left to mark those runs failed but run
        monitoring in the next daemon (``orchestration/launcher.py``)."""
        time.sleep(self.rng.uniform(5, 30))
        daemon = self.processes["daemon"]
        running = [r["runId"][:8] for r in self.dagster.runs() if r["status"] == "STARTED"]
        moment = f"with it the runs in progress: {', '.join(running) or 'none'}"
        kill = self.kill("daemon", daemon.pid, time.monotonic() - self.daemon_born, lambda: moment, group=True)
        daemon.wait()
        # A run the old daemon queued and never launched counts once the new one launches it: launching is the
        # new daemon's work. That its sensors work too is told by the landing sensor's first tick.
        launched = {run["runId"] for run in self.dagster.runs() if run["status"] not in WAITING}
        restarted = time.time()
        self.start_daemon()
        self.nudge()
        self.wait(
            "the new daemon's landing sensor to tick", lambda: self.dagster.newest_tick(LANDING_SENSOR) > restarted
        )
        # Under the load, with the stream down, each run carries minutes of backlog; a run the old daemon left
        # STARTING is failed by the dead-run sensor (orchestration/launcher.py).
        self.wait(
            "a sensor run launched by the new daemon to succeed",
            lambda: any(
                r["status"] == "SUCCESS" for r in self.dagster.runs("lakehouse_once") if r["runId"] not in launched
            ),
            timeout=1800,
        )
        stuck = [r["runId"][:8] for r in self.dagster.runs() if r["runId"][:8] in running and r["status"] not in ENDED]
        kill.then = "started again; its landing sensor ticked and a run it launched succeeded" + (
            f"; still not ended: {', '.join(stuck)}" if stuck else ""
        )
        killed_run.then += "; a later sensor run succeeded"

    def quiet_dagster(self) -> None:
        """The landing sensor off and every run ended (a killed one is failed by run monitoring)."""
        self.switch(LANDING_SENSOR, False)
        self.wait("every Dagster run to end", lambda: all(r["status"] in ENDED for r in self.dagster.runs()), 1800)

    # -- the cluster ----------------------------------------------------------------------------------------
    def kill_worker(self) -> None:
        if self.stream_place[1] != "cluster":
            return
        time.sleep(self.rng.uniform(10, 40))
        pid_file = self.settings.cluster_dir / f"worker-{self.rng.randint(1, 2)}.pid"
        pid = int(pid_file.read_text().split()[0])
        kill = self.kill(
            "worker", pid, time.monotonic() - self.stream_born, lambda: f"under the stream: {self.stream_moment()}"
        )
        self.command("cluster", "up")
        kill.then = "cluster up started it again"

    # -- a cycle --------------------------------------------------------------------------------------------
    def cycle(self, number: int) -> None:
        self.say(f"cycle {number}")
        self.kill_stream(restart=True)
        if self.cluster:
            self.kill_worker()
        self.kill_and_rerun("reconcile", "reconcile", "--wait", "900")
        self.kill_and_rerun("maintain", "maintain", rerun=False)
        self.kill_stream(restart=False)
        self.switch(LANDING_SENSOR, True)
        self.kill_daemon(self.kill_sensor_run())
        self.quiet_dagster()
        self.kill_and_rerun("replay", "replay")
        if number < self.cycles:  # after the last cycle, finish() runs the bounded runs instead
            self.start_stream()

    # -- the end --------------------------------------------------------------------------------------------
    def finish(self) -> None:
        """What an operator does after the last kill: every writer's work finished, in the documented order."""
        self.switch(LATE_DATA_SENSOR, False)
        self.wait("every Dagster run to end", lambda: all(r["status"] in ENDED for r in self.dagster.runs()))
        self.stop_stream()
        for source in ("landing", "kafka"):
            self.until_done("run", "--once", "--source", source)
        self.until_done("reconcile", "--wait", "900")
        self.until_done("maintain")

    def teardown(self) -> None:
        self.stop_stream()
        for name in ("daemon", "webserver"):
            process = self.processes.get(name)
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
        if self.cluster:
            self.command("cluster", "down")
        self.command("kafka", "down")


def _newest_batch(checkpoint: Path) -> int:
    """The newest batch a stream committed (-1 before any): Spark purges its oldest commit entries, so their
    count stops growing once it keeps ``minBatchesToRetain`` of them."""
    done = committed_batches(checkpoint) if checkpoint.is_dir() else []
    return done[-1] if done else -1


def _event_id(line: str) -> str | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event.get("event_id") if isinstance(event, dict) else None


def result_file(short: bool) -> Path:
    """Where the figures go: ``bench/results/chaos.json``; the short run's (a test's) stay out of the repository."""
    return REPO_ROOT / ".lakehouse" / "chaos-short.json" if short else RESULTS / "chaos.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SIGKILLs of every writer while events arrive from files and Kafka.")
    parser.add_argument("--cycles", type=int, default=3, help="cycles of kills (eight a cycle with the cluster)")
    parser.add_argument("--events", type=int, default=310_000, help="events generated, files and Kafka together")
    parser.add_argument("--minutes", type=float, default=25.0, help="how long the events take to arrive")
    parser.add_argument("--short", action="store_true", help="one cycle, no cluster, 6,000 events over 2 minutes")
    parser.add_argument("--seed", type=int, default=26, help="the random moments' seed")
    parser.add_argument("--keep", action="store_true", help="keep the scratch home")
    args = parser.parse_args(argv)
    if args.short:
        args.cycles, args.events, args.minutes = 1, 6_000, 2.0
    home = REPO_ROOT / ".lakehouse" / f"chaos-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    env = bench_environment(home, files_per_trigger=20)
    env.update({
        "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "2",
        "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "LAKEHOUSE_CLUSTER_PORT": str(free_port()),
        "LAKEHOUSE_CLUSTER_UI_PORT": str(free_port()),
        "LAKEHOUSE_CLUSTER_WORKERS": "2",
        "LAKEHOUSE_CLUSTER_WORKER_CORES": "1",
        "LAKEHOUSE_CLUSTER_WORKER_MEMORY": "1g",
        "DAGSTER_HOME": str(home / "dagster"),
        "DAGSTER_PORT": str(free_port()),
    })  # fmt: skip
    files = args.events * 55 // 100
    chaos = Chaos(args.cycles, not args.short, files, args.events - files, args.minutes * 60, home, env,
                  random.Random(args.seed))  # fmt: skip
    if args.short:  # its commands' whole runs are shorter too
        chaos.first_kill_window = (10.0, 60.0)
    chaos.settings.ensure_home()
    chaos.logs.mkdir(parents=True)
    print(f"chaos: {args.cycles} cycles, {args.events:,} events over {args.minutes:g} min; home {home}", flush=True)
    stop = threading.Event()
    loader = threading.Thread(target=chaos.load, args=(stop,))
    passed = False
    try:
        chaos.command("kafka", "up")
        if chaos.cluster:
            chaos.command("cluster", "up")
        chaos.start_dagster()
        loader.start()
        chaos.start_stream()
        for number in range(1, args.cycles + 1):
            chaos.cycle(number)
        loader.join()
        chaos.finish()
        versions, values = table_versions(chaos.settings), tumbling_values(chaos.settings)
        validate = chaos.command("validate")
        checks = table_checks(chaos.settings)
        checks["validate_passes"] = validate.returncode == 0
        checks.update(dagster_checks(chaos.settings, chaos.dagster, chaos.env["DAGSTER_HOME"]))
        for source in ("landing", "kafka"):
            chaos.command("run", "--once", "--source", source)
        chaos.command("reconcile")
        checks["invariant_3_a_second_run_changes_no_value"] = tumbling_values(chaos.settings) == values
        checks["tables_changed_by_the_second_run"] = sorted(
            k for k, v in table_versions(chaos.settings).items() if versions.get(k) != v
        )
        failed = [c for c in chaos.commands if c["kind"] in ("failed", "stopped")]
        checks["no_command_failed_and_no_stream_stopped_by_itself"] = not failed
        passed = all(v for k, v in checks.items() if isinstance(v, bool))
    finally:
        stop.set()
        if loader.is_alive():
            loader.join()
        chaos.teardown()
    by_target = tally(k.target for k in chaos.kills)
    result = {
        "cycles": args.cycles,
        "events": args.events,
        "lines_landed": chaos.landed,
        "messages_produced": chaos.produced,
        "kills": len(chaos.kills),
        "kills_by_target": by_target,
        "kill_log": [asdict(k) for k in chaos.kills],
        "commands_not_ok": [c for c in chaos.commands if c["kind"] != "ok"],
        "checks": checks,
        "seconds": chaos.now(),
        "passed": passed,
    }
    result_file(args.short).parent.mkdir(parents=True, exist_ok=True)
    result_file(args.short).write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\n{len(chaos.kills)} kills: {by_target}")
    for kill in chaos.kills:
        print(f" {kill.index:2d} {kill.at_s:6.0f} s {kill.target:10s} {kill.into_s:5.1f} s in: {kill.hit}; {kill.then}")
    print(json.dumps(checks, indent=2, default=str))
    print("PASSED" if passed else "FAILED", flush=True)
    if passed and not args.keep:
        shutil.rmtree(home, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
