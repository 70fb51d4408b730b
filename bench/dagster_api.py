"""Dagster's webserver as the chaos run asks it, over GraphQL: sensors switched, runs listed, a run's process
and last message, a sensor's cursor. The same queries the UI makes; nothing here talks to the instance's
storage (``bench.chaos_checks`` does, for the concurrency slots GraphQL does not show)."""

import re
from dataclasses import dataclass

from tests.sensor_flow import START_SENSOR, selector
from tests.ui_harness import graphql

LANDING_SENSOR, LATE_DATA_SENSOR = "landing_sensor", "late_data_sensor"
#: A run's statuses after which it holds nothing.
ENDED = {"SUCCESS", "FAILURE", "CANCELED"}
SENSOR_ID = (
    "query S($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { id sensorState "
    "{ typeSpecificData { ... on SensorData { lastCursor } } } } } }"
)
TICKS = (
    "query T($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { sensorState "
    "{ ticks(limit: 1) { timestamp status } } } } }"
)
#: A run no daemon has launched yet.
WAITING = {"QUEUED", "NOT_STARTED"}
STOP_SENSOR = "mutation Stop($id: String!) { stopSensor(id: $id) { __typename } }"
RUNS = (
    "query R($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results { runId jobName status startTime } } } }"
)
RUN_LOG = "query L($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events { __typename ... on MessageEvent { message } } } } }"  # noqa: E501


@dataclass(frozen=True)
class DagsterApi:
    """The webserver at ``url`` (``http://127.0.0.1:PORT``)."""

    url: str

    def gql(self, text: str, variables: dict | None = None) -> dict:
        return graphql(f"{self.url}/graphql", text, variables)

    def loaded(self) -> bool:
        """Whether the code location is loaded (the late-data sensor is known)."""
        try:
            return bool(self.gql(SENSOR_ID, {"s": selector(LATE_DATA_SENSOR)})["sensorOrError"].get("id"))
        except Exception:  # not answering yet, or answering with the location still loading
            return False

    def switch(self, sensor: str, on: bool) -> None:
        if on:
            self.gql(START_SENSOR, {"selector": selector(sensor)})
        else:
            sensor_id = self.gql(SENSOR_ID, {"s": selector(sensor)})["sensorOrError"]["id"]
            self.gql(STOP_SENSOR, {"id": sensor_id})

    def cursor(self, sensor: str) -> str:
        state = self.gql(SENSOR_ID, {"s": selector(sensor)})["sensorOrError"]["sensorState"]
        return (state["typeSpecificData"] or {}).get("lastCursor") or ""

    def newest_tick(self, sensor: str) -> float:
        """When the sensor was last evaluated (seconds since the epoch; 0.0 before any tick)."""
        state = self.gql(TICKS, {"s": selector(sensor)})["sensorOrError"]["sensorState"]
        return max((tick["timestamp"] for tick in state["ticks"]), default=0.0)

    def runs(self, job: str | None = None) -> list[dict]:
        """Every run (of ``job``), oldest first."""
        found = self.gql(RUNS, {"f": {"pipelineName": job} if job else {}})["runsOrError"]["results"]
        return sorted(found, key=lambda run: run["startTime"] or 0)

    def status(self, run_id: str) -> str:
        return self.gql(RUNS, {"f": {"runIds": [run_id]}})["runsOrError"]["results"][0]["status"]

    def _messages(self, run_id: str) -> list[str]:
        events = self.gql(RUN_LOG, {"id": run_id})["logsForRun"].get("events", [])
        return [event["message"] for event in events if event.get("message")]

    def run_pid(self, run_id: str) -> int | None:
        """The run's process, once its launcher has said it started."""
        for message in self._messages(run_id):
            match = re.search(r"Started process for run \(pid: (\d+)\)", message)
            if match:
                return int(match.group(1))
        return None

    def last_message(self, run_id: str) -> str:
        messages = self._messages(run_id)
        return (messages[-1] if messages else "")[:120]
