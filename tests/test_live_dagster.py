"""The continuous stream, live in Dagster: a real `lakehouse run --continuous` beside a real webserver and daemon
(`make ui`'s). Without any switch turned on, its batches show as materializations of bronze, silver and gold with
their figures (the daemon ticks ``stream_progress_sensor``), gold's freshness policy passes while the stream
delivers, and fails once gold has gone without a batch for longer than ``LAKEHOUSE_GOLD_FRESHNESS_SECONDS``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from deltalake import DeltaTable

from runtime.progress import CONTINUOUS_PREFIX
from runtime.sources.landing import place_in_landing
from tests.sensor_flow import event
from tests.ui_harness import REPO, VENV_PYTHON, DagsterUI, wait_for
from warehouse.settings import Settings

if TYPE_CHECKING:
    from playwright.sync_api import Page

# One Dagster UI at a time on the two cores: the same xdist worker as tests/test_ui.py.
pytestmark = [pytest.mark.system, pytest.mark.ui, pytest.mark.timeout(1200), pytest.mark.xdist_group("ui")]

#: Short enough to see the policy fail within the test, long enough to see it pass first on a loaded machine.
FRESHNESS_SECONDS = 60
ENV = {
    "LAKEHOUSE_GOLD_OUTPUTS": "none",  # bronze, silver and the tumbling gold: the streams this test is about
    "LAKEHOUSE_GOLD_FRESHNESS_SECONDS": str(FRESHNESS_SECONDS),
    "LAKEHOUSE_PROGRESS_FLUSH_SECONDS": "2",
    "LAKEHOUSE_SHUFFLE_PARTITIONS": "2",
    "LAKEHOUSE_DRIVER_MEMORY": "2g",
    # Dagster's freshness daemon evaluates every 30 s by default.
    "FRESHNESS_DAEMON_INTERVAL_SECONDS": "5",
}
ASSETS = ("bronze/events", "silver/events", "gold/user_spend_5m")
#: JVM start, then the first cycle of three streams, on two cores shared with other work.
FIRST_BATCHES_TIMEOUT = 420

ASSET_EVENTS = """
query AssetEvents($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) {
    __typename
    ... on Asset {
      assetMaterializations(limit: 20) {
        runId
        timestamp
        description
        metadataEntries {
          label
          __typename
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on TextMetadataEntry { text }
          ... on TimestampMetadataEntry { timestamp }
        }
      }
    }
  }
}
"""
FRESHNESS = """
query Freshness($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    __typename
    ... on AssetNode {
      freshnessStatusInfo { freshnessStatus freshnessStatusMetadata { lastMaterializedTimestamp } }
      internalFreshnessPolicy { __typename ... on TimeWindowFreshnessPolicy { failWindowSeconds } }
    }
  }
}
"""
SENSOR = """
query Sensor($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { status ticks(limit: 30) { status cursor skipReason error { message } } } }
  }
}
"""


FIRST = [
    event("a1", "A", "2024-01-01T10:00:00Z", 5),
    event("b1", "B", "2024-01-01T10:02:00Z", 3),
    event("a2", "A", "2024-01-01T10:04:00Z", 2),
]
SECOND = [event("b2", "B", "2024-01-01T10:06:00Z", 1), event("a2", "A", "2024-01-01T10:04:00Z", 2)]  # a duplicate


def land(home: Path, name: str, events: list[dict[str, Any]]) -> Path:
    settings = replace(Settings.from_env(), home=home)
    return place_in_landing(settings, name, lambda handle: handle.writelines(json.dumps(e) + "\n" for e in events))


@pytest.fixture(scope="module")
def live_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterUI]:
    """`make ui` (webserver + daemon) over a home whose gold freshness window is short."""
    with DagsterUI.start(tmp_path_factory.mktemp("dagster-live"), env=ENV) as ui:
        yield ui


@contextlib.contextmanager
def continuous_run(home: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`lakehouse run --continuous` in the UI's home, as a user deploys it; stopped by SIGINT (Ctrl-C) at the end."""
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "PYSPARK_PYTHON": str(VENV_PYTHON), **ENV}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "lakehouse"), "run", "--continuous"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the JVM and Python workers stop with it
        )
    try:
        yield process
    finally:
        for sig, wait in ((signal.SIGINT, 60), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=wait)


def materializations(ui: DagsterUI, asset: str) -> list[dict[str, Any]]:
    """The asset's materializations, newest first, each with its metadata as ``values`` (label → value)."""
    answer = ui.query(ASSET_EVENTS, {"key": {"path": asset.split("/")}})["assetOrError"]
    if answer["__typename"] != "Asset":
        return []
    found = []
    for item in answer["assetMaterializations"]:
        values = {}
        for entry in item["metadataEntries"]:
            values[entry["label"]] = next(
                (entry[k] for k in ("intValue", "floatValue", "text", "timestamp") if entry.get(k) is not None), None
            )
        found.append({**item, "values": values})
    return found


def live_materializations(ui: DagsterUI, asset: str) -> list[dict[str, Any]]:
    """Those the sensor reported for a continuous run (runless: no Dagster run id)."""
    return [m for m in materializations(ui, asset) if str(m["values"].get("run_id", "")).startswith(CONTINUOUS_PREFIX)]


def freshness(ui: DagsterUI, asset: str) -> dict[str, Any]:
    answer = ui.query(FRESHNESS, {"key": {"path": asset.split("/")}})["assetNodeOrError"]
    assert answer["__typename"] == "AssetNode", answer
    return answer


def sensor_state(ui: DagsterUI) -> dict[str, Any]:
    selector = {"repositoryLocationName": "lakehouse", "repositoryName": "__repository__"}
    answer = ui.query(SENSOR, {"selector": {**selector, "sensorName": "stream_progress_sensor"}})["sensorOrError"]
    assert answer["__typename"] == "Sensor", answer
    return answer["sensorState"]


def sensor_status(ui: DagsterUI) -> str:
    return sensor_state(ui)["status"]


def sensor_ticks(ui: DagsterUI) -> str:
    ticks = sensor_state(ui)["ticks"][:8]
    lines = [f"  {t['status']}: {t['skipReason'] or (t['error'] or {}).get('message', '')[:300]} ({t['cursor']})"
             for t in ticks]  # fmt: skip
    return "stream_progress_sensor ticks, newest first:\n" + ("\n".join(lines) or "  (none)")


def show_plots(labels: list[str]) -> Callable[[Page], None]:
    """On an asset's overview, switch its metadata to plots (one per numeric key over the materializations),
    in a window tall enough to show them all, once the ``labels`` plots are drawn."""

    def action(page: Page) -> None:
        page.set_viewport_size({"width": 1600, "height": 3000})
        page.get_by_role("button", name="Plots").first.click()
        for label in labels:
            page.get_by_text(label, exact=True).first.wait_for(state="visible", timeout=30_000)
        page.get_by_text("Metadata", exact=True).first.scroll_into_view_if_needed()

    return action


def progress_rows(home: Path) -> list[dict[str, Any]]:
    path = home / "tables" / "ops" / "stream_progress"
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist() if (path / "_delta_log").is_dir() else []


def test_the_continuous_stream_is_live_in_dagster(live_ui: DagsterUI) -> None:
    ui = live_ui
    home = ui.workdir / "home"
    log = ui.workdir / "continuous.log"
    started = time.monotonic()
    # No toggle: the sensor is on by default; gold carries its freshness policy.
    assert sensor_status(ui) == "RUNNING"
    assert freshness(ui, "gold/user_spend_5m")["internalFreshnessPolicy"] == {
        "__typename": "TimeWindowFreshnessPolicy",
        "failWindowSeconds": FRESHNESS_SECONDS,
    }
    land(home, "first.jsonl", FIRST)

    with continuous_run(home, log) as service:

        def detail() -> str:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else "(no log)"
            return f"{sensor_ticks(ui)}\n--- continuous run (exit {service.poll()}) ---\n{tail}\n{ui.log_tail(20)}"

        def reported(assets: tuple[str, ...]) -> dict[str, list[dict[str, Any]]] | None:
            assert service.poll() is None, f"the continuous run stopped\n{detail()}"
            found = {asset: live_materializations(ui, asset) for asset in assets}
            return found if all(found.values()) else None

        first = wait_for(
            lambda: reported(ASSETS), FIRST_BATCHES_TIMEOUT, "the first batches in Dagster", interval=3,
            ignore=(OSError,), detail=detail,
        )  # fmt: skip
        first_seen = time.monotonic()
        land(home, "second.jsonl", SECOND)

        # Each asset's events carry the batch's figures under the runs' keys.
        rows = [r for r in progress_rows(home) if r["run_id"].startswith(CONTINUOUS_PREFIX)]
        for asset, events in first.items():
            newest = events[0]
            assert newest["runId"] == "", f"{asset}: a runless materialization expected, got run {newest['runId']}"
            values = newest["values"]
            for key in ("stream", "batch_id", "batches", "rows_in", "rows_written", "batch_seconds", "rows_per_second",
                        "table_version", "dagster/row_count"):  # fmt: skip
                assert key in values, f"{asset}: {key} missing from {sorted(values)}"
            stream_rows = [r for r in rows if r["stream"] == values["stream"]]
            assert stream_rows, f"{asset}: no progress row of stream {values['stream']}"
            # Latencies are reported whenever the stream's batches measured them.
            if any(r["latency_p50_seconds"] is not None for r in stream_rows):
                for key in ("latency_p50_seconds", "latency_p99_seconds", "latency_max_seconds"):
                    assert key in values, f"{asset}: {key} missing from {sorted(values)}"
            print(f"[live] {asset}: {newest['description']}: {json.dumps(values, sort_keys=True, default=str)}")
        bronze = first["bronze/events"][-1]["values"]
        assert bronze["rows_in"] == len(FIRST) and bronze["rows_written"] == len(FIRST), bronze
        gold = first["gold/user_spend_5m"][0]["values"]
        assert gold["dagster/row_count"] >= 2 and "watermark" in gold, gold

        # Gold was just materialized: the freshness daemon judges it fresh.
        def gold_status(expected: str) -> dict[str, Any] | None:
            info = freshness(ui, "gold/user_spend_5m")["freshnessStatusInfo"]
            return info if info and info["freshnessStatus"] == expected else None

        healthy = wait_for(lambda: gold_status("HEALTHY"), FRESHNESS_SECONDS, "gold to pass its freshness policy",
                           interval=2, ignore=(OSError,), detail=detail)  # fmt: skip
        assert healthy["freshnessStatusMetadata"]["lastMaterializedTimestamp"]

        # The second file (one new event, one duplicate) follows as more batches.
        after = wait_for(
            lambda: (found := reported(ASSETS)) and all(len(found[a]) > len(first[a]) for a in ASSETS) and found,
            FIRST_BATCHES_TIMEOUT, "the second file's batches in Dagster", interval=3, ignore=(OSError,),
            detail=detail,
        )  # fmt: skip
        silver = after["silver/events"][0]["values"]
        assert (silver["rows_in"], silver["rows_written"], silver["duplicates"]) == (2, 1, 1), silver
        print(f"[live] first batches in Dagster {first_seen - started:.0f} s after start")

        # Gold fresh again after the second file's batch: its overview says the policy passes.
        wait_for(lambda: gold_status("HEALTHY"), FRESHNESS_SECONDS, "gold to pass its freshness policy again",
                 interval=2, ignore=(OSError,), detail=detail)  # fmt: skip
        shots = [
            ui.screenshot("/assets/gold/user_spend_5m", "live-gold-freshness-passing.png",
                          expect_text=["user_spend_5m", "Freshness policy", "Passing"]),
            # The asset pages' metadata plots over the batches: latencies, rows, seconds, backlog, watermark.
            ui.screenshot("/assets/gold/user_spend_5m", "live-gold-plots.png", expect_text=["Metadata"],
                          action=show_plots(["rows_written", "batch_seconds", "watermark"])),
            ui.screenshot("/assets/silver/events", "live-silver-plots.png", expect_text=["Metadata"],
                          action=show_plots(["rows_in", "duplicates", "quarantined"])),
            # Each event names its stream, batch and continuous run ("Reported": no run of Dagster's).
            ui.screenshot("/assets/bronze/events?view=events", "live-bronze-events.png",
                          expect_text=["Reported", "bronze_events: batch 1 of continuous-", "rows_written"]),
            ui.screenshot("/locations/lakehouse/sensors/stream_progress_sensor", "live-sensor.png",
                          expect_text=["stream_progress_sensor", "Running", "Cursor"]),
        ]  # fmt: skip

        # Nothing lands any more: gold goes without a batch, and the policy fails it once the window has passed.
        degraded = wait_for(lambda: gold_status("DEGRADED"), FRESHNESS_SECONDS + 90, "gold to fail its freshness",
                            interval=3, ignore=(OSError,), detail=detail)  # fmt: skip
        assert degraded["freshnessStatus"] == "DEGRADED"
        shots.append(
            ui.screenshot("/assets/gold/user_spend_5m", "live-gold-freshness-failing.png",
                          expect_text=["user_spend_5m", "Freshness policy", "Failed"])
        )  # fmt: skip
        assert service.poll() is None, detail()

    for shot in shots:
        assert shot.path.stat().st_size > 10_000, f"{shot.path} looks empty"
    print(f"[live] done in {time.monotonic() - started:.0f} s; screenshots in {shots[0].path.parent}")
