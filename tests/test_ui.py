"""The Dagster UI in a real browser: the layers' assets and groups show, as a person opening `make ui` sees them."""

import pytest

from tests.ui_harness import DagsterUI

pytestmark = [pytest.mark.slow, pytest.mark.ui, pytest.mark.timeout(180)]

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
