"""The Dagster UI in a real browser: the layers' assets and groups show, as a person opening `make ui` sees them;
then the hands-free loop on the same server: sensors on, files land, runs follow, late data gets reconciled."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.sensor_flow import LANDING_SENSOR, LATE_DATA_SENSOR, RECONCILE_JOB, STREAMS_JOB, hands_free_loop
from tests.ui_harness import LOCATION, REPO, DagsterUI, artifacts_dir

if TYPE_CHECKING:
    from playwright.sync_api import Page

# The tests share one Dagster UI (a session fixture): xdist keeps them on one worker.
pytestmark = [pytest.mark.system, pytest.mark.ui, pytest.mark.timeout(180), pytest.mark.xdist_group("ui")]

ASSET_NODES = """
query AssetNodes {
  assetNodes { assetKey { path } groupName }
}
"""
EXPECTED_GROUPS = {"bronze/events": "bronze", "silver/events": "silver", "gold/user_spend_5m": "gold"}
LAYERS = ("bronze", "silver", "gold")


def test_asset_graph_shows_the_layers(dagster_ui: DagsterUI) -> None:
    nodes = dagster_ui.query(ASSET_NODES)["assetNodes"]
    groups = {"/".join(node["assetKey"]["path"]): node["groupName"] for node in nodes}
    for key, group in EXPECTED_GROUPS.items():
        assert groups.get(key) == group, f"asset {key} in group {group} expected; the UI has {groups}"

    # The global asset lineage: one collapsed node per group, drawn in the graph's SVG.
    graph = dagster_ui.screenshot(
        "/asset-groups",
        "asset-lineage.png",
        expect_text=["Global asset lineage"],
        expect_selector=[f'svg foreignObject [data-tooltip="{layer}"]' for layer in LAYERS],
    )
    for layer in LAYERS:
        assert layer in graph.text.split(), f"group {layer} not shown on {graph.url} (see {graph.path})"

    asset = dagster_ui.screenshot(
        "/assets/gold/user_spend_5m", "asset-gold-user_spend_5m.png", expect_text=["user_spend_5m", "Definition"]
    )
    assert asset.url.endswith("/assets/gold/user_spend_5m")
    assert "silver / events" in asset.text, f"upstream silver/events not shown (see {asset.path})"
    assert "gold" in asset.text.split(), f"group gold not shown (see {asset.path})"


def show_requested_ticks(runs: list[dict[str, Any]]) -> Callable[[Page], None]:
    """On a sensor's page, pick "Requested" in the ticks filter and wait for the rows of ``runs`` to show."""

    def action(page: Page) -> None:
        page.get_by_role("button", name="All ticks").click()
        page.get_by_role("menuitem", name="Requested").click()
        for run in runs:
            page.get_by_text(run["runId"][:8], exact=True).first.wait_for(state="visible", timeout=30_000)

    return action


def show_metadata_plots(page: Page) -> None:
    """On an asset's overview: its Metadata section, switched to the plots of its numeric metadata."""
    page.get_by_text("Metadata", exact=True).last.scroll_into_view_if_needed()
    page.get_by_text("Plots", exact=True).last.click(timeout=15_000)
    page.locator("canvas").first.wait_for(state="visible", timeout=30_000)
    page.locator("canvas").first.scroll_into_view_if_needed()


def switches_loaded(on: int, automations: int) -> Callable[[Page], None]:
    """On the Automation page, wait until every row's switch replaced its spinner and ``on`` of them are on.

    Each row has a selection checkbox and an on/off switch (a checkbox too), and the list one "select all".
    """

    def action(page: Page) -> None:
        page.wait_for_function(
            """([on, total]) => document.querySelectorAll('input[type=checkbox]').length >= total
                && document.querySelectorAll('input[type=checkbox]:checked').length === on""",
            arg=[on, 1 + 2 * automations],
            timeout=30_000,
            polling=250,
        )

    return action


@pytest.mark.timeout(1800)  # three runs of up to RUN_TIMEOUT each, then screenshots
def test_sensors_run_the_streams_and_reconcile_late_data(dagster_ui: DagsterUI) -> None:
    ui = dagster_ui
    loop = hands_free_loop(ui, ui.workdir / "home")
    first, second, reconcile, too_late = loop.first, loop.second, loop.reconcile, loop.too_late

    # 6. What a person sees: the lineage up to gold, gold's materializations, the sensors' ticks and cursors, the runs.
    shots = [
        # Upstream of gold, one node per asset: all three materialized (a green "Materialized" footer each).
        ui.screenshot(
            "/assets/gold/user_spend_5m?view=lineage&lineageScope=upstream&lineageDepth=2",
            "sensors-lineage-gold.png",
            expect_text=["user_spend_5m", "bronze", "silver"],
            expect_selector=[':nth-match(:text-is("Materialized"), 3)'],
        ),
        # Gold's events: the newest materialization is the reconcile run's, with its figures.
        ui.screenshot(
            "/assets/gold/user_spend_5m?view=events",
            "sensors-asset-gold-user_spend_5m-events.png",
            expect_text=[f"Materialized in run {reconcile['runId'][:8]}", "late_events_folded", "corrections_written"],
        ),
        # Every automation of the location with its on/off switch: four sensors on (landing, late data, the
        # continuous stream's progress, dead runs), the schedules off.
        ui.screenshot(
            "/automation",
            "sensors-automation.png",
            expect_text=[LANDING_SENSOR, LATE_DATA_SENSOR, "reconcile_schedule", "completeness_sweep_schedule"],
            action=switches_loaded(on=4, automations=6),
        ),
        # Each sensor's page, its ticks filtered to those that requested runs: cursor, run, the run's status.
        ui.screenshot(
            f"/locations/{LOCATION}/sensors/{LATE_DATA_SENSOR}",
            "sensors-late_data_sensor.png",
            expect_text=[LATE_DATA_SENSOR, "Cursor", "reconcile_job"],
            action=show_requested_ticks([reconcile]),
        ),
        ui.screenshot(
            f"/locations/{LOCATION}/sensors/{LANDING_SENSOR}",
            "sensors-landing_sensor.png",
            expect_text=[LANDING_SENSOR, "Cursor", too_late.name],
            action=show_requested_ticks([first, second]),
        ),
        ui.screenshot(
            "/runs",
            "sensors-runs.png",
            expect_text=[STREAMS_JOB, RECONCILE_JOB, *(run["runId"][:8] for run in (first, second, reconcile))],
        ),
    ]
    # 7. What the docs show (docs/guides/dagster-ui.md, the README): the graph up to gold, gold's figures plotted
    # over its materializations, and this home's data-quality report, written by `lakehouse validate`.
    plots = ui.screenshot(
        "/assets/gold/user_spend_5m",
        "ui-gold-asset-plots.png",
        expect_text=["user_spend_5m", "Latest materialization", "Freshness policy", "total_amount"],
        action=show_metadata_plots,
    )
    validated = subprocess.run(
        [str(REPO / ".venv" / "bin" / "lakehouse"), "validate", "--json"],
        env={**os.environ, "LAKEHOUSE_HOME": str(ui.workdir / "home")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert validated.returncode == 0, validated.stderr[-2000:]
    report = ui.screenshot_file(
        Path(json.loads(validated.stdout)["report"]), "ui-data-quality-report.png", expect_text=["completeness"]
    )
    shots += [plots, report]
    for shot in shots:
        assert shot.path.stat().st_size > 10_000, f"{shot.path} looks empty"
    publish_for_docs({"sensors-lineage-gold.png": "ui-asset-graph.png", plots.path.name: plots.path.name,
                      report.path.name: report.path.name})  # fmt: skip
    print(
        f"[ui] timings: first landing run {loop.first_done - loop.started:.0f} s, "
        f"late event to reconciled {loop.reconciled - loop.first_done:.0f} s, "
        f"screenshots {time.monotonic() - loop.reconciled:.0f} s"
    )


def publish_for_docs(names: Mapping[str, str]) -> None:
    """With ``LAKEHOUSE_DOCS_IMAGES`` set (``make screenshots`` sets it to ``docs/images``), copy the screenshots
    the docs show there under their docs names; the test takes them either way."""
    target = os.environ.get("LAKEHOUSE_DOCS_IMAGES")
    if not target:
        return
    Path(target).mkdir(parents=True, exist_ok=True)
    for taken, shown in names.items():
        shutil.copyfile(artifacts_dir() / taken, Path(target) / shown)
