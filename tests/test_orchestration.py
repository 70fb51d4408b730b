"""Dagster: the definitions load and validate, and a real materialization of every asset works."""

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest

from orchestration import definitions, quality, reconcile, streams
from orchestration.resources import lakehouse_resource
from transforms.landing import place_in_landing
from warehouse.catalog import user_spend_table

REPO = Path(__file__).resolve().parents[1]
SEED_EXAMPLE = [
    '{"event_id": "a1", "user_id": "A", "event_time": "2024-01-01T10:00:00Z", "amount": 5}',
    '{"event_id": "b1", "user_id": "B", "event_time": "2024-01-01T10:02:00Z", "amount": 3}',
    '{"event_id": "a2", "user_id": "A", "event_time": "2024-01-01T10:04:00Z", "amount": 2}',
    '{"event_id": "b2", "user_id": "B", "event_time": "2024-01-01T10:06:00Z", "amount": 1}',
    '{"event_id": "a2", "user_id": "A", "event_time": "2024-01-01T10:04:00Z", "amount": 2}',
    "not json at all",
]
EXPECTED_KEYS = {
    "bronze/events",
    "silver/events",
    "silver/quarantine",
    "silver/duplicates",
    "silver/late_events",
    "gold/user_spend_5m",
    "gold/corrections",
}


def test_definitions_load_with_layer_keys_and_groups() -> None:
    repository = definitions.defs.get_repository_def()
    graph = repository.asset_graph
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == EXPECTED_KEYS
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name == key.path[0]
        assert node.description
        assert "dagster/column_schema" in node.metadata
    assert definitions.defs.resolve_job_def("lakehouse_once")


@pytest.mark.slow
def test_dagster_definitions_validate_on_workspace(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LAKEHOUSE_HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Validation successful" in result.stderr + result.stdout


def test_materialize_every_asset_with_real_resources(spark, settings) -> None:
    place_in_landing(settings, "seed.jsonl", lambda h: h.writelines(line + "\n" for line in SEED_EXAMPLE))
    defs = dg.Definitions.merge(
        streams.defs,
        reconcile.defs,
        quality.defs,
        dg.Definitions(
            resources={"lakehouse": lakehouse_resource(str(settings.home))}, executor=dg.in_process_executor
        ),
    )
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("lakehouse_once").execute_in_process(instance=instance)
    assert result.success

    materialized = {
        event.asset_key.to_user_string(): event.materialization.metadata
        for event in result.get_asset_materialization_events()
    }
    assert set(materialized) == EXPECTED_KEYS
    bronze = materialized["bronze/events"]
    assert bronze["rows_in"].value == 6
    assert bronze["dagster/row_count"].value == 6
    silver = materialized["silver/events"]
    assert (silver["rows_written"].value, silver["quarantined"].value, silver["duplicates"].value) == (4, 1, 1)
    gold = materialized["gold/user_spend_5m"]
    assert gold["dagster/row_count"].value == 3
    for metadata in materialized.values():
        assert {"batch_seconds", "table_version", "rows_written", "dagster/row_count"} <= set(metadata)

    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [("conservation", True)]

    rows = {
        (r.user_id, r.window_start.strftime("%H:%M")): (r.total_amount, r.event_count)
        for r in spark.read.format("delta").load(str(user_spend_table(settings).path(settings))).collect()
    }
    assert rows == {
        ("A", "10:00"): (Decimal("7.00"), 2),
        ("B", "10:00"): (Decimal("3.00"), 1),
        ("B", "10:05"): (Decimal("1.00"), 1),
    }
