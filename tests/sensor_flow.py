"""The hands-free loop as the Dagster UI's GraphQL shows it: sensors switched on, files landed as `lakehouse ingest`
lands them, the runs the sensors launch waited for (a failed run or tick fails at once, with its event log).

Shared by the UI test (SQLite instance, local Spark) and the PostgreSQL one (PostgreSQL instance, the cluster).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from runtime.sources.landing import place_in_landing
from tests.ui_harness import LOCATION, DagsterUI, wait_for
from warehouse.settings import Settings

REPOSITORY = "__repository__"
LANDING_SENSOR, LATE_DATA_SENSOR = "landing_sensor", "late_data_sensor"
STREAMS_JOB, RECONCILE_JOB = "lakehouse_once", "reconcile_job"
# Each run starts its own Spark: 1.5 min on two quiet cores, up to 4 min while other Spark tests share them.
RUN_TIMEOUT = 480
TERMINAL_FAILURES = {"FAILURE", "CANCELED", "CANCELING"}

START_SENSOR = """
mutation StartSensor($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) {
    __typename
    ... on Sensor { name sensorState { status } }
    ... on Error { message }
  }
}
"""
SENSOR_STATE = """
query SensorState($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor {
      name
      sensorState {
        status
        typeSpecificData { ... on SensorData { lastCursor lastRunKey lastTickTimestamp } }
        ticks(limit: 10) { ...Tick }
        requested: ticks(limit: 10, statuses: [SUCCESS]) { ...Tick }
      }
    }
    ... on Error { message }
  }
}
fragment Tick on InstigationTick { tickId status timestamp cursor skipReason runIds runKeys error { message } }
"""
SENSOR_RUNS = """
query SensorRuns($filter: RunsFilter!) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId jobName status creationTime startTime endTime tags { key value } } }
    ... on PythonError { message }
  }
}
"""
RUN_EVENTS = """
query RunEvents($runId: ID!) {
  logsForRun(runId: $runId) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message stepKey eventType }
        ... on ErrorEvent { error { message cause { message } } }
      }
    }
    ... on Error { message }
  }
}
"""


def event(event_id: str, user: str, when: str, amount: int) -> dict[str, Any]:
    return {"event_id": event_id, "user_id": user, "event_time": when, "amount": amount}


# The seeds' running example (A 10:00 → 5, B 10:02 → 3, A 10:04 → 2, B 10:06 → 1) and one event hours later
# that moves the watermark past every 10:xx window; then A 10:01 → 1, too late for its (closed) window.
SEEDS = [
    event("a1", "A", "2024-01-01T10:00:00Z", 5),
    event("b1", "B", "2024-01-01T10:02:00Z", 3),
    event("a2", "A", "2024-01-01T10:04:00Z", 2),
    event("b2", "B", "2024-01-01T10:06:00Z", 1),
    event("c1", "C", "2024-01-01T13:00:00Z", 4),
]
TOO_LATE = [event("a3", "A", "2024-01-01T10:01:00Z", 1)]


def land(home: Path, name: str, events: Iterable[dict[str, Any]]) -> Path:
    """Place a JSON Lines file in the UI's landing zone as `lakehouse ingest` does (atomically)."""
    settings = replace(Settings.from_env(), home=home)
    return place_in_landing(settings, name, lambda handle: handle.writelines(json.dumps(e) + "\n" for e in events))


def selector(sensor: str) -> dict[str, str]:
    return {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": sensor}


def sensor_state(ui: DagsterUI, sensor: str) -> dict[str, Any]:
    answer = ui.query(SENSOR_STATE, {"selector": selector(sensor)})["sensorOrError"]
    assert answer["__typename"] == "Sensor", f"sensor {sensor}: {answer}"
    return answer["sensorState"]


def describe_ticks(state: dict[str, Any], limit: int = 6) -> str:
    """The sensor's latest ticks and the latest that requested runs, newest first, one line each."""
    lines = []
    latest = state["ticks"][:limit]
    for tick in latest + [t for t in state["requested"][:limit] if t not in latest]:
        when = datetime.fromtimestamp(tick["timestamp"], UTC).strftime("%H:%M:%S")
        outcome = tick["skipReason"] or (tick["error"] or {}).get("message", "").strip()[:300] or tick["runKeys"]
        lines.append(f"  {when} {tick['status']}: {outcome} (cursor {tick['cursor']!r})")
    return "\n".join(lines) or "  (no ticks)"


def sensor_runs(ui: DagsterUI, job: str, sensor: str) -> list[dict[str, Any]]:
    """The runs of ``job`` the sensor launched, oldest first."""
    run_filter = {"pipelineName": job, "tags": [{"key": "dagster/sensor_name", "value": sensor}]}
    answer = ui.query(SENSOR_RUNS, {"filter": run_filter})["runsOrError"]
    assert answer["__typename"] == "Runs", f"runs of {job}: {answer}"
    return sorted(answer["results"], key=lambda run: run["creationTime"])


def event_log_tail(ui: DagsterUI, run_id: str, lines: int = 25) -> str:
    answer = ui.query(RUN_EVENTS, {"runId": run_id})["logsForRun"]
    if answer["__typename"] != "EventConnection":
        return f"(no event log for run {run_id}: {answer})"
    rendered = []
    for item in answer["events"][-lines:]:
        text = f"  [{item.get('stepKey') or '-'}] {item.get('eventType')}: {item.get('message', '').strip()[:400]}"
        error = item.get("error")
        while error:
            text += f"\n      {error['message'].strip()[:1500]}"
            error = error.get("cause")
        rendered.append(text)
    return f"--- last {lines} events of run {run_id} ---\n" + "\n".join(rendered)


def run_tag(run: dict[str, Any], key: str) -> str | None:
    return next((tag["value"] for tag in run["tags"] if tag["key"] == key), None)


def wait_for_sensor_run(ui: DagsterUI, *, job: str, sensor: str, before: set[str]) -> dict[str, Any]:
    """The one new run of ``job`` that ``sensor`` launches (not in ``before``), once it succeeded.

    A failed run, or a failed tick of the sensor, fails at once with its event log (or error); a time-out names
    the sensor's last ticks, the run's status and the server log's tail.
    """
    seen: dict[str, Any] = {}

    def succeeded() -> dict[str, Any] | None:
        new = [run for run in sensor_runs(ui, job, sensor) if run["runId"] not in before]
        if not new:
            state = sensor_state(ui, sensor)
            failed = [tick for tick in state["ticks"] if tick["status"] == "FAILURE"]
            assert not failed, f"sensor {sensor} failed a tick:\n{describe_ticks(state)}"
            return None
        run = seen["run"] = new[0]
        if run["status"] in TERMINAL_FAILURES:
            pytest.fail(f"{job} run {run['runId']} from {sensor}: {run['status']}\n{event_log_tail(ui, run['runId'])}")
        return run if run["status"] == "SUCCESS" else None

    def detail() -> str:
        run = seen.get("run")
        status = f"run {run['runId']}: {run['status']}\n{event_log_tail(ui, run['runId'])}" if run else "no run yet"
        ticks = describe_ticks(sensor_state(ui, sensor))
        return f"{status}\nticks of {sensor} (latest, then those that requested runs):\n{ticks}\n{ui.log_tail()}"

    # A GraphQL call that times out while two Spark runs load the machine is "not yet", not a failure.
    run = wait_for(
        succeeded, RUN_TIMEOUT, f"a {job} run from {sensor} to succeed", interval=2, ignore=(OSError,), detail=detail
    )
    others = [r["runId"] for r in sensor_runs(ui, job, sensor) if r["runId"] not in before | {run["runId"]}]
    assert not others, f"{sensor} launched more than one {job} run: {run['runId']} and {others}"
    print(f"[ui] {sensor} → {job} run {run['runId']}: SUCCESS in {run['endTime'] - run['creationTime']:.0f} s")
    return run


def successful_tick(state: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The tick that requested ``run_id`` (ticks that request runs are SUCCESS ticks)."""
    ticks = [tick for tick in state["requested"] if run_id in tick["runIds"]]
    assert ticks, f"no tick launched run {run_id}:\n{describe_ticks(state)}"
    return ticks[0]


def delta_rows(path: Path) -> list[dict[str, Any]]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class Loop:
    """What the hands-free loop left behind: its three runs, the two landed files, and when each part ended."""

    first: dict[str, Any]
    second: dict[str, Any]
    reconcile: dict[str, Any]
    seeds: Path
    too_late: Path
    started: float
    first_done: float
    reconciled: float


def hands_free_loop(ui: DagsterUI, home: Path) -> Loop:
    """Both sensors on; the seeds land and the landing sensor runs the streams; a 10:01 lands after its window
    closed, is set aside, and the late-data sensor's reconcile folds it into gold. Checks every step: each
    run's key, the sensors' cursors, gold before and after, the corrections."""
    started = time.monotonic()

    # 1. Both sensors on, as the toggle on the Automation page does.
    for sensor in (LANDING_SENSOR, LATE_DATA_SENSOR):
        answer = ui.query(START_SENSOR, {"selector": selector(sensor)})["startSensor"]
        assert answer["__typename"] == "Sensor", f"startSensor {sensor}: {answer}"
        assert answer["sensorState"]["status"] == "RUNNING"
        assert sensor_state(ui, sensor)["status"] == "RUNNING"
    runs_before = {run["runId"] for run in sensor_runs(ui, STREAMS_JOB, LANDING_SENSOR)}
    reconciles_before = {run["runId"] for run in sensor_runs(ui, RECONCILE_JOB, LATE_DATA_SENSOR)}

    # 2-3. The seeds land; the landing sensor's next tick runs the streams once.
    seeds = land(home, "seeds.jsonl", SEEDS)
    first = wait_for_sensor_run(ui, job=STREAMS_JOB, sensor=LANDING_SENSOR, before=runs_before)
    assert run_tag(first, "dagster/run_key") == f"landing:{seeds.stat().st_mtime_ns}/{seeds.name}"
    gold_path = home / "tables" / "gold" / "user_spend_5m"
    before_late = {(r["user_id"], utc(r["window_start"])): r for r in delta_rows(gold_path)}
    window = ("A", datetime(2024, 1, 1, 10, 0, tzinfo=UTC))
    assert (before_late[window]["total_amount"], before_late[window]["event_count"]) == (Decimal("7.00"), 2)
    first_done = time.monotonic()

    # 4. A 10:01 arrives after the watermark closed its window: set aside, then reconciled hands-free.
    too_late = land(home, "too-late.jsonl", TOO_LATE)
    second = wait_for_sensor_run(ui, job=STREAMS_JOB, sensor=LANDING_SENSOR, before=runs_before | {first["runId"]})
    assert run_tag(second, "dagster/run_key") == f"landing:{too_late.stat().st_mtime_ns}/{too_late.name}"
    late_events = delta_rows(home / "tables" / "silver" / "late_events")
    assert [e["event_id"] for e in late_events] == ["a3"], late_events
    late_table = DeltaTable(str(home / "tables" / "silver" / "late_events"))
    late_cursor = f"{late_table.version()}@{late_table.metadata().id}"
    reconcile = wait_for_sensor_run(ui, job=RECONCILE_JOB, sensor=LATE_DATA_SENSOR, before=reconciles_before)
    assert run_tag(reconcile, "dagster/run_key") == f"late_events:v{late_cursor}"
    reconciled = time.monotonic()

    # The sensors' ticks and cursors, as their pages show them.
    landing = sensor_state(ui, LANDING_SENSOR)
    assert landing["typeSpecificData"]["lastCursor"] == f"{too_late.stat().st_mtime_ns}/{too_late.name}", (
        describe_ticks(landing)
    )
    assert successful_tick(landing, first["runId"])["cursor"] == f"{seeds.stat().st_mtime_ns}/{seeds.name}"
    assert successful_tick(landing, second["runId"])["cursor"] == f"{too_late.stat().st_mtime_ns}/{too_late.name}"
    late = sensor_state(ui, LATE_DATA_SENSOR)
    assert late["typeSpecificData"]["lastCursor"] == late_cursor, describe_ticks(late)
    assert successful_tick(late, reconcile["runId"])["cursor"] == late_cursor
    print(f"[ui] {LANDING_SENSOR} ticks (latest, then those that requested runs):\n{describe_ticks(landing)}")
    print(f"[ui] {LATE_DATA_SENSOR} ticks (latest, then those that requested runs):\n{describe_ticks(late)}")

    # 5. Gold has folded the late event; one correction records why.
    gold = {(r["user_id"], utc(r["window_start"])): r for r in delta_rows(gold_path)}
    assert (gold[window]["total_amount"], gold[window]["event_count"]) == (Decimal("8.00"), 3), gold[window]
    corrections = delta_rows(home / "tables" / "gold" / "corrections")
    reconciliations = [
        c for c in corrections if c["cause"] == "reconciliation" and c["table_name"] == "gold.user_spend_5m"
    ]
    assert len(reconciliations) == 1, corrections
    hourly = "gold.user_spend_1h_hopping"
    hours = [c for c in corrections if c["cause"] == "reconciliation" and c["table_name"] == hourly]
    assert len(hours) == 12, "every hour over A's 10:00 window follows it"
    fix = reconciliations[0]
    assert (fix["user_id"], utc(fix["window_start"])) == window
    assert (fix["old_total_amount"], fix["new_total_amount"]) == (Decimal("7.00"), Decimal("8.00")), fix
    return Loop(first, second, reconcile, seeds, too_late, started, first_done, reconciled)
