"""Dagster: the definitions load and validate, and a real materialization of every asset works."""

import os
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest

from orchestration import definitions, maintenance, pipeline, quality, reconcile
from runtime.runner import run_once
from runtime.sources.landing import place_in_landing
from warehouse.catalog import tumbling_table

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
    "gold/user_spend_1h_hopping",
    "gold/user_sessions",
    "gold/user_spend_global",
    "gold/user_spend_5m_firings",
    "gold/order_payments",
    "gold/fraud_alerts",
    "gold/unique_urls",
    "gold/corrections",
    "maintenance/tables",
}


@pytest.mark.quick
def test_definitions_load_with_layer_keys_and_groups() -> None:
    repository = definitions.defs.get_repository_def()
    graph = repository.asset_graph
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == EXPECTED_KEYS
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name == key.path[0]
        assert node.description
        if key.path[0] != "maintenance":  # the one asset that is not a table
            assert "dagster/column_schema" in node.metadata
    assert definitions.defs.resolve_job_def("lakehouse_once")


@pytest.mark.system
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


@pytest.mark.gold_outputs("all")
def test_materialize_every_asset_with_real_resources(spark, settings) -> None:
    place_in_landing(settings, "seed.jsonl", lambda h: h.writelines(line + "\n" for line in SEED_EXAMPLE))
    defs = definitions.build_defs(settings, [pipeline, reconcile, quality])
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("lakehouse_once").execute_in_process(instance=instance)
    assert result.success

    materialized = {
        event.asset_key.to_user_string(): event.materialization.metadata
        for event in result.get_asset_materialization_events()
    }
    assert set(materialized) == EXPECTED_KEYS - {"maintenance/tables"}
    bronze = materialized["bronze/events"]
    assert bronze["rows_in"].value == 6
    assert bronze["dagster/row_count"].value == 6
    silver = materialized["silver/events"]
    assert (silver["rows_written"].value, silver["quarantined"].value, silver["duplicates"].value) == (4, 1, 1)
    gold = materialized["gold/user_spend_5m"]
    assert gold["dagster/row_count"].value == 3
    assert gold["watermark_delay_seconds"].value == 120
    assert materialized["gold/user_spend_1h_hopping"]["rows_written"].value > 0
    assert materialized["gold/user_sessions"]["rows_written"].value > 0
    assert materialized["gold/user_spend_global"]["dagster/row_count"].value > 0
    assert materialized["gold/user_spend_5m_firings"]["dagster/row_count"].value >= 3
    for metadata in materialized.values():
        assert {"batch_seconds", "table_version", "rows_written", "dagster/row_count"} <= set(metadata)

    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [("conservation", True)]

    rows = {
        (r.user_id, r.window_start.strftime("%H:%M")): (r.total_amount, r.event_count)
        for r in spark.read.format("delta").load(str(tumbling_table(settings).path(settings))).collect()
    }
    assert rows == {
        ("A", "10:00"): (Decimal("7.00"), 2),
        ("B", "10:00"): (Decimal("3.00"), 1),
        ("B", "10:05"): (Decimal("1.00"), 1),
    }


def test_maintenance_compacts_vacuums_and_streams_go_on(spark, settings) -> None:
    """Three small runs leave small files in every table; the maintenance asset compacts them (gold
    Z-ordered), VACUUM (retention 0 here) deletes the replaced ones, no value changes, and the streams
    then carry on from where they were: compaction commits are no new data for them."""
    settings = replace(settings, schedules=replace(settings.schedules, vacuum_retention_hours=0))
    for n in range(3):
        lines = [line.replace('"a1"', f'"a1-{n}"').replace('"b1"', f'"b1-{n}"') for line in SEED_EXAMPLE[:2]]
        place_in_landing(settings, f"part-{n}.jsonl", lambda h, lines=lines: h.writelines(x + "\n" for x in lines))
        run_once(spark, settings)
    gold_path = str(tumbling_table(settings).path(settings))
    before = sorted(spark.read.format("delta").load(gold_path).collect())
    defs = definitions.build_defs(settings, [maintenance, pipeline])
    with dg.DagsterInstance.ephemeral() as instance:
        result = defs.resolve_job_def("maintenance").execute_in_process(instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    per_table = {r["table"]: r for r in event.materialization.metadata["per_table"].value}
    for name in ("bronze.events", "silver.events", "gold.user_spend_5m", "gold.corrections"):
        entry = per_table[name]
        assert entry["files_on_disk_after"] == entry["live_files_after"] == 1 < entry["files_on_disk_before"], entry
        if name != "gold.user_spend_5m":  # MERGE already rewrote gold's one file each run
            assert entry["live_files_before"] > 1, entry
    observed = {e.asset_key.to_user_string() for e in result.get_asset_observation_events()}
    assert {"bronze/events", "gold/user_spend_5m"} <= observed
    assert sorted(spark.read.format("delta").load(gold_path).collect()) == before

    place_in_landing(settings, "after.jsonl", lambda h: h.write(SEED_EXAMPLE[2] + "\n"))
    reports = {r.name: r.figures for r in run_once(spark, settings)}
    assert reports["bronze_events"]["rows_in"] == 1
    assert reports["bronze_events"]["events"] == 1  # carried through silver to gold in the same batch
    assert spark.read.format("delta").load(gold_path).agg({"event_count": "sum"}).first()[0] == 7
