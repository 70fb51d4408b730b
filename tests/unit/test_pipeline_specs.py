"""Declared pipelines (warehouse/pipelines.py) without Spark: the shipped specs load, the first one declares
the contract's purchases stream exactly, the JSON Schema in docs/ is the model's, and every kind of mistake
stops with one line naming the file, the field and the rule."""

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from warehouse.pipelines import REPO_PIPELINES_DIR, SpecError, load_spec, load_specs, schema_text
from warehouse.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[2]
READINGS = yaml.safe_load((REPO_PIPELINES_DIR / "readings.yaml").read_text())


def test_the_shipped_specs_load_the_first_one_first() -> None:
    specs = load_specs([REPO_PIPELINES_DIR])
    assert next(iter(specs)) == "purchases"
    assert {"purchases", "readings"} <= set(specs)


def test_the_purchases_spec_declares_the_contracts_events() -> None:
    spec = load_spec(REPO_PIPELINES_DIR / "purchases.yaml")
    assert list(spec.fields)[:5] == ["event_id", "user_id", "event_time", "amount", "event_type"]
    assert [(n, spec.fields[n].type, spec.fields[n].required) for n in spec.fields][:5] == [
        ("event_id", "string", True),
        ("user_id", "string", True),
        ("event_time", "timestamp", True),
        ("amount", "decimal(18,2)", True),
        ("event_type", "string", False),
    ]
    assert (spec.id, spec.keys, spec.time.field, spec.time.formats) == (
        "event_id",
        ["user_id"],
        "event_time",
        ["iso8601", "epoch_millis"],
    )
    assert [(m.name, m.fn, m.field) for m in spec.measures] == [("total_amount", "sum", "amount")]


def test_the_first_pipelines_settings_are_what_the_contract_and_the_docs_name() -> None:
    """The purchases spec's windows, watermark and thresholds are the values the settings always had (and that the
    contract, docs/guides/gold-outputs.md and docs/guides/data-quality.md name)."""
    settings = Settings.from_env({})
    w, m, q = settings.windows, settings.watermarks, settings.quality
    assert (w.minutes, w.hopping_size_minutes, w.hopping_slide_minutes, w.session_gap_minutes) == (5, 60, 5, 30)
    assert (w.global_trigger_count, w.allowed_lateness_seconds, w.firing_trigger, w.accumulation) == (
        100,
        60,
        "early",
        "accumulating",
    )
    assert (m.delay_seconds, m.policy) == (120, "fixed")
    assert (q.amount_min, q.amount_max, q.freshness_seconds, q.future_tolerance_seconds) == (
        -1_000_000,
        1_000_000,
        900,
        300,
    )
    assert settings.gold_outputs == {
        "hopping",
        "sessions",
        "global",
        "firings",
        "order_payments",
        "fraud_alerts",
        "unique_urls",
    }


def test_a_variable_still_overrides_the_first_pipelines_spec() -> None:
    settings = Settings.from_env({"LAKEHOUSE_WINDOW_MINUTES": "10", "LAKEHOUSE_GOLD_OUTPUTS": "none"})
    assert (settings.windows.minutes, settings.windows.hopping_slide_minutes, settings.gold_outputs) == (
        10,
        10,
        frozenset(),
    )


def test_another_pipeline_lives_in_its_own_folder_with_its_own_parameters(tmp_path: Path) -> None:
    root = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    first, readings = root.pipelines(("purchases", "readings"))
    assert first is root
    assert readings.home == tmp_path / "pipelines" / "readings"
    assert readings.landing_dir == tmp_path / "pipelines" / "readings" / "landing"
    assert readings.checkpoints_dir == tmp_path / "pipelines" / "readings" / "checkpoints"
    assert readings.dagster_home == root.dagster_home  # one Dagster instance for every pipeline
    assert (readings.windows.minutes, readings.windows.session_gap_minutes) == (1, 5)
    assert (readings.windows.allowed_lateness_seconds, readings.watermarks.delay_seconds) == (30, 30)
    assert readings.gold_outputs == {"sessions"}
    assert readings.kafka.topic == "readings"
    assert readings.root() is root
    assert readings.spec.name == "readings"


def test_pipelines_picks_the_selected_ones_and_refuses_unknown_names(tmp_path: Path) -> None:
    root = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path), "LAKEHOUSE_PIPELINES": "readings"})
    assert [view.spec.name for view in root.pipelines()] == ["readings"]
    with pytest.raises(SettingsError, match=r"^--pipeline must be one of purchases, readings, got 'pageviews'$"):
        root.pipelines(("pageviews",))


def test_the_json_schema_in_docs_is_the_models() -> None:
    """Fails when docs/pipeline.schema.json is stale: `lakehouse pipelines --schema > docs/pipeline.schema.json`."""
    assert (ROOT / "docs" / "pipeline.schema.json").read_text() == schema_text()


@pytest.mark.parametrize("name", ["purchases", "readings"])
def test_the_shipped_specs_keep_the_json_schema(name: str) -> None:
    schema = json.loads(schema_text())
    jsonschema.validate(yaml.safe_load((REPO_PIPELINES_DIR / f"{name}.yaml").read_text()), schema)


def test_the_json_schema_refuses_what_the_loader_refuses() -> None:
    schema = json.loads(schema_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**READINGS, "fields": {**READINGS["fields"], "site": {"type": "text"}}}, schema)


def changed(path: str, value: Any) -> dict[str, Any]:
    """The readings spec with one value changed (``path`` dotted; None deletes it)."""
    spec = json.loads(json.dumps(READINGS))
    *parents, last = path.split(".")
    where = spec
    for part in parents:
        where = where[int(part)] if isinstance(where, list) else where[part]
    if value is None:
        del where[last]
    else:
        where[last] = value
    return spec


MISTAKES = [
    (changed("fields.site.type", "text"), "fields.site.type: string should match pattern"),
    (changed("id", "serial"), "id: 'serial' is not a declared field"),
    (changed("measures.0.field", "site"), "measures.0: avg needs a number, 'site' is a string"),
    (changed("windows.hopping", {"size": "10m", "slide": "3m"}), "windows.hopping.slide: must divide the hopping"),
    (changed("windows.tumbling", "7m"), "windows.tumbling: must divide a day"),
    (changed("windows.tumbling", "30s"), "windows.tumbling: windows are whole minutes"),
    (changed("keys", ["device"]), "keys.0: 'device' is not a declared field"),
    (changed("time.field", "temperature"), "time.field: the event-time field must be a timestamp field"),
    (changed("fields.site.min", 3), "fields.site: min and max apply to numbers, not to a string"),
    (changed("windows.colour", "blue"), "windows.colour: is not a setting of a pipeline spec"),
    (changed("outputs", ["fraud_alerts"]), "outputs: fraud_alerts needs a string field 'user_id'"),
    (changed("fields.device_id.pattern", "dev-[0-9"), "fields.device_id.pattern: not a regular expression"),
    (changed("keys", ["battery"]), "keys.0: a key field 'battery' must be required: true"),
    (changed("measures.1.name", "avg_temperature"), "measures.1.name: 'avg_temperature' is taken"),
]


@pytest.mark.parametrize(("spec", "message"), MISTAKES, ids=[m for _, m in MISTAKES])
def test_a_mistake_is_one_line_naming_the_file_the_field_and_the_rule(
    tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    path = tmp_path / "readings.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: {message}"), text
    assert "\n" not in text


def test_not_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "readings.yaml"
    path.write_text("name: readings\nfields: {a: [\n")
    with pytest.raises(SpecError, match=r"readings\.yaml: line \d+: not valid YAML"):
        load_spec(path)


def test_the_file_name_is_the_pipelines_name(tmp_path: Path) -> None:
    path = tmp_path / "sensors.yaml"
    path.write_text(yaml.safe_dump(READINGS))
    with pytest.raises(SpecError, match=r"sensors\.yaml: name: must match the file's name \('sensors'\)"):
        load_spec(path)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"landing": "pipelines/readings/landing"}, "source.landing: 'pipelines/readings/landing' is the landing"),
        ({"topic": "events"}, "source.topic: 'events' is the topic of 'purchases' too"),
    ],
)
def test_two_pipelines_never_share_a_landing_folder_or_a_topic(
    tmp_path: Path, source: dict[str, str], message: str
) -> None:
    (tmp_path / "sensors.yaml").write_text(yaml.safe_dump({**READINGS, "name": "sensors", "source": source}))
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"LAKEHOUSE_PIPELINES_DIR": str(tmp_path)})
    assert str(caught.value).startswith(f"{tmp_path / 'sensors.yaml'}: {message}"), str(caught.value)


def test_a_spec_of_the_same_name_in_the_users_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "readings.yaml").write_text(yaml.safe_dump(READINGS))
    with pytest.raises(SettingsError, match=r"name: 'readings' is declared in .*pipelines/readings\.yaml too"):
        Settings.from_env({"LAKEHOUSE_PIPELINES_DIR": str(tmp_path)})


def test_a_users_folder_adds_its_pipelines(tmp_path: Path) -> None:
    (tmp_path / "sensors.yaml").write_text(yaml.safe_dump({**READINGS, "name": "sensors"}))
    settings = Settings.from_env({"LAKEHOUSE_PIPELINES_DIR": str(tmp_path), "LAKEHOUSE_HOME": str(tmp_path / "h")})
    assert list(settings.declared()) == ["purchases", "readings", "sensors"]
    assert settings.for_pipeline("sensors").landing_dir == tmp_path / "h" / "pipelines" / "sensors" / "landing"
