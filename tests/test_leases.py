"""Locks that span hosts: with the data on object storage, two lakehouse processes that share only the
storage (each with a home of its own, as on two hosts) contend for the same leases on an S3 server the test
starts (moto's, on 127.0.0.1)."""

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from devtools.objectstore import TEST_CREDENTIALS, ObjectStore
from tests.lines import HOURS_LATER, SEEDS_EXAMPLE, TOO_LATE, land
from warehouse.catalog import SILVER_LATE_EVENTS, tumbling_table
from warehouse.delta import is_delta_table
from warehouse.leases import _HELD, LeaseLostError, check_held, lease_location
from warehouse.locks import LockBusyError, hold, lock_holder
from warehouse.settings import Settings
from warehouse.storage import names, open_delta

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("leases")]

#: Short enough to wait for, long enough that a heartbeat (every third of it) is never late on a loaded machine.
LEASE_SECONDS = 9
LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


@pytest.fixture
def hosts(object_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """Two hosts' environments: a home each, one storage (a prefix of its own per test)."""
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    uri = f"{object_store.env['LAKEHOUSE_STORAGE_URI']}/{tmp_path.name}"
    shared = {**object_store.env, "LAKEHOUSE_STORAGE_URI": uri}
    shared["LAKEHOUSE_LOCK_LEASE_SECONDS"] = str(LEASE_SECONDS)
    return {host: {**shared, "LAKEHOUSE_HOME": str(tmp_path / host)} for host in ("host-a", "host-b")}


def _python(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


CONTENDER = """
    import json, sys, time
    from warehouse.locks import hold_gold
    from warehouse.settings import Settings
    settings = Settings.from_env()
    print("ready", flush=True)
    sys.stdin.readline()  # both start together, whatever their start-up took
    held = []
    for turn in range(12):
        with hold_gold(settings, f"{settings.home.name} turn {turn}"):
            start = time.time()
            time.sleep(0.05)
            held.append((start, time.time()))
    print(json.dumps(held))
"""


def test_two_hosts_never_hold_the_gold_lock_at_once(hosts: dict[str, dict[str, str]]) -> None:
    runs = {host: _python(CONTENDER, env) for host, env in hosts.items()}
    for run in runs.values():
        assert run.stdout.readline().strip() == "ready", run.stderr.read()
    for run in runs.values():
        run.stdin.write("go\n")
        run.stdin.flush()
    held = {}
    for host, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        held[host] = json.loads(out)
    intervals = sorted((start, end, host) for host, spans in held.items() for start, end in spans)
    assert len(intervals) == 24
    for (_, end, host), (start, _, other) in itertools.pairwise(intervals):
        assert end <= start, f"{host} held the gold lock until {end}, {other} took it at {start}"
    # Both got turns while the other was contending (the turnstile lets a waiter in between).
    first_end = {host: max(end for _, end in spans) for host, spans in held.items()}
    last_start = {host: min(start for start, _ in spans) for host, spans in held.items()}
    assert max(last_start.values()) < min(first_end.values())
    settings = Settings.from_env(hosts["host-a"])
    assert lock_holder(settings, "gold") is None and not lease_location(settings, "gold").exists()


HOLDER = """
    import socket, sys, time
    if sys.argv[1:] == ["elsewhere"]:
        socket.gethostname = lambda: "another-host.example"  # this process plays a second host
    from warehouse.locks import hold
    from warehouse.settings import Settings
    with hold(Settings.from_env(), "bronze_events", purpose="lakehouse run --continuous"):
        print("held", flush=True)
        time.sleep(600)
"""


def _holder(env: dict[str, str], *where: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), *where],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held", holder.stderr.read()
    return holder


def test_a_crashed_holders_lease_on_another_host_is_refused_in_one_line_then_expires(
    hosts: dict[str, dict[str, str]],
) -> None:
    holder = _holder(hosts["host-a"], "elsewhere")
    other = Settings.from_env(hosts["host-b"])
    with pytest.raises(LockBusyError) as refused, hold(other, "bronze_events"):
        pass
    message = str(refused.value)
    assert message.startswith("the bronze_events lock is held by lakehouse run --continuous on another-host.example ")
    assert f"(pid {holder.pid})" in message and "/locks/bronze_events.lease)" in message and "\n" not in message
    # Alive, the holder keeps its lease past the lease time.
    time.sleep(LEASE_SECONDS + 1)
    assert lock_holder(other, "bronze_events") is not None

    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    killed = time.monotonic()
    # Its host could be alive and merely slow to renew: the lease stays until it expires.
    with pytest.raises(LockBusyError), hold(other, "bronze_events"):
        pass
    with hold(other, "bronze_events", wait_seconds=LEASE_SECONDS * 4, purpose="host-b"):
        waited = time.monotonic() - killed
        assert lock_holder(other, "bronze_events").startswith("host-b on ")
    # Taken over once the lease went unrenewed for the lease time by the server's clock (whole seconds).
    assert waited <= LEASE_SECONDS * 3, waited
    assert lock_holder(other, "bronze_events") is None


def test_a_crashed_holder_on_this_host_frees_its_lease_at_once(hosts: dict[str, dict[str, str]]) -> None:
    holder = _holder(hosts["host-a"])
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    restarted = Settings.from_env(hosts["host-a"])
    assert lock_holder(restarted, "bronze_events") is None  # `run`'s fast pre-check sees it free too
    started = time.monotonic()
    with hold(restarted, "bronze_events", purpose="the restart"):  # no waiting: the holder is known dead
        assert lock_holder(restarted, "bronze_events").startswith("the restart on ")
    assert time.monotonic() - started < LEASE_SECONDS


def test_a_holder_that_stalls_past_its_lease_loses_it_and_says_so(hosts: dict[str, dict[str, str]]) -> None:
    first, second = (Settings.from_env(env) for env in hosts.values())
    lost = r"^the gold lock's lease \(s3://.*\) was taken over by another host"
    with pytest.raises(LeaseLostError, match=lost), hold(first, "gold", purpose="stalls"):
        (lease,) = [lease for lease in _HELD if lease.name == "gold"]
        lease._stop.set()  # its heartbeat stops, as in a pause longer than the lease time
        lease._beat.join()
        with hold(second, "gold", wait_seconds=LEASE_SECONDS * 4, purpose="takes over"):
            assert lock_holder(first, "gold").startswith("takes over on ")
            lease._stop.clear()
            lease.start_heartbeat()  # the stalled holder wakes up: its next beat finds the lease gone
            deadline = time.monotonic() + LEASE_SECONDS
            while not lease.lost and time.monotonic() < deadline:
                time.sleep(0.1)
            assert lease.lost
            with pytest.raises(LeaseLostError):
                check_held()  # what each stream batch calls before writing
    assert lock_holder(first, "gold") is None


def _gold_total(settings: Settings, user: str) -> tuple[Decimal, int] | None:
    path = tumbling_table(settings).path(settings)
    if not is_delta_table(path):
        return None
    for row in open_delta(path).to_pyarrow_table().to_pylist():
        if row["user_id"] == user and row["window_start"].astimezone(UTC) == datetime(2024, 1, 1, 10, 0, tzinfo=UTC):
            return row["total_amount"], row["event_count"]
    return None


def _late_event_ids(settings: Settings) -> list[str]:
    path = SILVER_LATE_EVENTS.path(settings)
    return [r["event_id"] for r in open_delta(path).to_pyarrow_table().to_pylist()] if is_delta_table(path) else []


def _wait(predicate: Callable[[], bool], what: str, stream: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert stream.poll() is None, f"the stream stopped: {stream.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_stream_on_one_host_and_a_reconcile_and_a_replay_on_another(hosts: dict[str, dict[str, str]]) -> None:
    """`run --continuous` on host A; on host B, sharing only the storage: `replay` is refused in one line
    naming the stream and its host, `status` sees the stream running, `reconcile` takes its turn at gold
    between the stream's batches and folds a late event. Gold ends as the event rules say."""
    a, b = hosts["host-a"], hosts["host-b"]
    on_a, on_b = Settings.from_env(a), Settings.from_env(b)
    quick = {"LAKEHOUSE_GOLD_OUTPUTS": "none", "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "1"}
    land(on_a, "seeds.jsonl", [*SEEDS_EXAMPLE, HOURS_LATER])

    def on_host_b(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [LAKEHOUSE, *args],
            env={**os.environ, **b, **quick, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=600,
        )

    stream = subprocess.Popen(
        [LAKEHOUSE, "run", "--continuous"],
        env={**os.environ, **a, **quick},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: _gold_total(on_a, "A") == (Decimal("7.00"), 2), "gold from the seeds", stream)
        land(on_b, "too-late.jsonl", [TOO_LATE])  # landed from host B, taken by host A's stream
        _wait(lambda: _late_event_ids(on_b) == ["a3"], "the too-late event set aside", stream)

        replay = on_host_b("replay")
        assert replay.returncode == 1
        assert replay.stderr.count("\n") == 1, replay.stderr
        holder = f"a continuous run on {socket.gethostname()} (pid {stream.pid})"
        assert f"lock is held by {holder}" in replay.stderr, replay.stderr
        status = {s["stream"]: s for s in json.loads(on_host_b("status", "--json").stdout)}
        assert status["bronze_events"]["running"] and status["bronze_events"]["held_by"] == holder, status
        reconcile = on_host_b("reconcile")
        assert reconcile.returncode == 0, reconcile.stderr[-3000:]
        assert _gold_total(on_b, "A") == (Decimal("8.00"), 3)
        assert stream.poll() is None, "the stream ran on beside the reconcile"
    finally:
        stream.send_signal(signal.SIGTERM)
        stream.wait(timeout=120)
    assert stream.returncode == 0, stream.stderr.read()[-2000:]
    # Every lease was given back; gold is the event rules' (A 10:00 holds a1, a2 and the late a3).
    locks = on_a.data_root() / "locks"
    assert [name for name in names(locks) if name.endswith(".lease")] == []
    assert _gold_total(on_a, "A") == (Decimal("8.00"), 3) and _gold_total(on_a, "B") == (Decimal("3.00"), 1)
    # The delta-rs readers on host B read the same URIs: the catalog's states (what Dagster's metadata shows),
    # history, show, and time travel to before the reconcile.
    states = {t["name"]: t for t in json.loads(on_host_b("tables", "--json").stdout)}
    gold = states["gold.user_spend_5m"]
    assert gold["exists"] and gold["rows"] == 4 and gold["path"].startswith("s3://"), gold
    assert states["silver.late_events"]["rows"] == 1 and states["bronze.events"]["rows"] == 6, states
    commits = json.loads(on_host_b("history", "gold.user_spend_5m", "--json").stdout)
    assert commits and commits[0]["operation"] == "MERGE", commits
    latest = on_host_b("show", "gold.user_spend_5m")
    assert latest.returncode == 0 and "8.00" in latest.stdout and "4 of 4 rows shown" in latest.stdout, latest
    earlier = [on_host_b("show", "gold.user_spend_5m", "--as-of", str(c["version"])).stdout for c in commits[1:]]
    before = next(out for out in earlier if "8.00" not in out)
    assert "7.00" in before and "3.00" in before, before
