"""Every declared pipeline in Dagster and on the command line, without Spark: each pipeline's assets, jobs,
sensors, schedules, checks and freshness policy in one code location (the first keeps its names, the readings
pipeline's carry its own), and `pipelines`, `tables --json`, `ingest`, `pipeline new` as a user calls them."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from cli.app import app
from orchestration import definitions
from warehouse.pipelines import load_spec, schema_text
from warehouse.settings import REPO_ROOT, Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_PIPELINES": "all"}


def test_each_pipeline_has_its_own_group_jobs_sensors_schedules_and_checks(env: dict[str, str]) -> None:
    defs = definitions.build_defs(Settings.from_env(env))
    repository = defs.get_repository_def()
    graph = repository.asset_graph
    groups = {key.to_user_string(): graph.get(key).group_name for key in graph.get_all_asset_keys()}
    assert {k: g for k, g in groups.items() if g == "readings"} == {
        "bronze/readings_events": "readings",
        "silver/readings_events": "readings",
        "silver/readings_quarantine": "readings",
        "silver/readings_duplicates": "readings",
        "silver/readings_late_events": "readings",
        "gold/readings_1m": "readings",
        "gold/readings_sessions": "readings",
        "gold/readings_corrections": "readings",
    }
    assert groups["gold/user_spend_5m"] == "gold" and groups["bronze/events"] == "bronze"
    jobs = {job.name for job in repository.get_all_jobs()}
    assert {"lakehouse_once", "readings_lakehouse_once", "reconcile_job", "readings_reconcile_job"} <= jobs
    assert {"data_quality", "readings_data_quality", "readings_completeness_sweep", "readings_maintenance"} <= jobs
    sensors = {sensor.name for sensor in repository.sensor_defs}
    assert {"readings_landing_sensor", "readings_late_data_sensor", "readings_stream_progress_sensor"} <= sensors
    assert {"readings_kafka_sensor", "readings_after_reconcile_sensor", "landing_sensor", "dead_run_sensor"} <= sensors
    schedules = {schedule.name for schedule in repository.schedule_defs}
    assert {"readings_reconcile_schedule", "readings_data_quality_schedule", "reconcile_schedule"} <= schedules
    checks = {(key.asset_key.to_user_string(), key.name) for key in graph.asset_check_keys}
    assert {
        ("bronze/readings_events", "bronze_events"),
        ("silver/readings_events", "silver_events"),
        ("silver/readings_events", "conservation"),
        ("gold/readings_1m", "completeness"),
        ("gold/readings_1m", "freshness"),
    } <= checks
    # The readings spec's quality.freshness (10m) is its gold assets' freshness policy.
    policy = graph.get(dg.AssetKey(["gold", "readings_1m"])).freshness_policy
    assert policy is not None and policy.fail_window.to_timedelta().total_seconds() == 600
    assert (
        graph.get(dg.AssetKey(["gold", "user_spend_5m"])).freshness_policy.fail_window.to_timedelta().total_seconds()
        == 300
    )


def test_the_readings_streams_job_runs_its_own_assets_with_its_conservation_check(env: dict[str, str]) -> None:
    repository = definitions.build_defs(Settings.from_env(env)).get_repository_def()
    job = repository.get_job("readings_lakehouse_once")
    keys = {key.to_user_string() for key in job.asset_layer.executable_asset_keys}
    assert "gold/readings_1m" in keys and "gold/readings_sessions" in keys and "gold/user_spend_5m" not in keys


def invoke(env: dict[str, str], *args: str):
    return CliRunner().invoke(app, list(args), env=env)


def test_pipelines_json_lists_the_declarations_and_their_tables(env: dict[str, str]) -> None:
    result = invoke(env, "pipelines", "--json")
    assert result.exit_code == 0, result.output
    records = {record["name"]: record for record in json.loads(result.stdout)}
    readings = records["readings"]
    assert (readings["id"], readings["keys"], readings["time"]) == (
        "reading_id",
        ["site", "device_id"],
        {"field": "read_at", "formats": ["epoch_millis"]},
    )
    assert [m["name"] for m in readings["measures"]] == ["avg_temperature", "min_temperature", "max_temperature",
                                                          "battery_readings"]  # fmt: skip
    assert readings["windows"]["tumbling"] == "1m" and readings["windows"]["sessions"] == {"gap": "5m"}
    assert "gold.readings_1m" in readings["tables"] and "gold.user_spend_5m" in records["purchases"]["tables"]
    assert invoke(env, "pipelines", "--schema").stdout == schema_text()


def test_tables_json_names_each_tables_pipeline_and_role(env: dict[str, str]) -> None:
    result = invoke(env, "tables", "--json")
    assert result.exit_code == 0, result.output
    tables = {t["name"]: t for t in json.loads(result.stdout)}
    assert (tables["gold.user_spend_5m"]["pipeline"], tables["gold.user_spend_5m"]["role"]) == ("purchases", "tumbling")
    assert (tables["bronze.events"]["pipeline"], tables["bronze.events"]["role"]) == ("purchases", "bronze")
    assert (tables["gold.readings_1m"]["pipeline"], tables["gold.readings_1m"]["role"]) == ("readings", "tumbling")
    assert tables["silver.readings_quarantine"]["role"] == "quarantine"
    assert tables["gold.readings_sessions"]["role"] == "sessions"
    assert tables["gold.fraud_alerts"]["role"] == "fraud_alerts"
    assert tables["bronze.readings_events"]["path"].endswith("pipelines/readings/tables/bronze/events")
    only = json.loads(invoke(env, "tables", "--json", "--pipeline", "readings").stdout)
    assert {t["pipeline"] for t in only} == {"readings"}


def test_ingest_acts_on_the_first_pipeline_unless_told_and_refuses_when_ambiguous(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Bare `ingest` lands in the first pipeline (the contract's command, unchanged); `--pipeline` in
    another; with the first not selected and several others, one line names the choices."""
    sample = tmp_path / "r.jsonl"
    sample.write_text('{"reading_id": "r1"}\n')
    bare = invoke(env, "ingest", str(sample))
    assert bare.exit_code == 0, bare.output
    assert len(list((tmp_path / "home" / "landing").glob("*r.jsonl"))) == 1
    specs = tmp_path / "specs"
    specs.mkdir()
    rides = (REPO_ROOT / "pipelines" / "readings.yaml").read_text().replace("name: readings", "name: rides")
    (specs / "rides.yaml").write_text(rides)
    others = {**env, "LAKEHOUSE_PIPELINES_DIR": str(specs), "LAKEHOUSE_PIPELINES": "readings,rides"}
    refused = invoke(others, "ingest", str(sample))
    assert refused.exit_code == 1
    assert refused.stderr.strip() == (
        "lakehouse: ingest lands files in one pipeline: pass --pipeline with one of readings, rides"
    )
    placed = invoke(env, "ingest", "--pipeline", "readings", str(sample))
    assert placed.exit_code == 0, placed.output
    assert len(list((tmp_path / "home" / "pipelines" / "readings" / "landing").glob("*r.jsonl"))) == 1
    unknown = invoke(env, "ingest", "--pipeline", "pageviews", str(sample))
    assert unknown.stderr.strip() == "lakehouse: --pipeline must be one of purchases, readings, got 'pageviews'"


def test_pipeline_new_drafts_a_spec_that_loads(env: dict[str, str], tmp_path: Path) -> None:
    sample = tmp_path / "sample.jsonl"
    lines = [
        {"ride_id": f"r{i}", "city": ["oslo", "rome"][i % 2], "started_at": f"2024-05-01T10:{i:02d}:00Z", "km": i + 0.5}
        for i in range(30)
    ]
    sample.write_text("".join(json.dumps(line) + "\n" for line in lines))
    specs = tmp_path / "specs"
    result = invoke({**env, "LAKEHOUSE_PIPELINES_DIR": str(specs)}, "pipeline", "new", "rides", "--sample", str(sample))
    assert result.exit_code == 0, result.output
    spec = load_spec(specs / "rides.yaml")
    assert (spec.id, spec.keys, spec.time.field) == ("ride_id", ["city"], "started_at")
    listed = invoke({**env, "LAKEHOUSE_PIPELINES_DIR": str(specs)}, "pipelines", "--json")
    assert "rides" in {record["name"] for record in json.loads(listed.stdout)}
    again = invoke({**env, "LAKEHOUSE_PIPELINES_DIR": str(specs)}, "pipeline", "new", "rides", "--sample", str(sample))
    assert again.exit_code == 1 and "declared already" in again.stderr
    assert yaml.safe_load((specs / "rides.yaml").read_text())["name"] == "rides"
