"""The continuous stream in Dagster, without Spark: ``stream_progress_sensor`` ticked over a real Delta table of
progress rows written by delta-rs (the catalog's schema), and the gold freshness policy the definitions carry."""

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from dagster_pyspark import LazyPySparkResource
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.pandas.types import to_arrow_schema

from orchestration import definitions, live
from orchestration.pipeline import asset_key
from orchestration.resources import lakehouse_resource
from runtime.progress import CONTINUOUS_PREFIX
from runtime.stages import stages, stream_outputs
from warehouse.catalog import BRONZE_EVENTS, OPS_STREAM_PROGRESS, Table, hopping_table, tumbling_table
from warehouse.settings import Settings

Tick = Callable[[str | None], dg.SensorResult]
SCHEMA = to_arrow_schema(OPS_STREAM_PROGRESS.schema)
RUN = f"{CONTINUOUS_PREFIX}20260101T000000-1"
START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick reads files only: asking the resource for Spark fails the test."""

    def refuse(self) -> None:
        raise AssertionError("the sensor asked for a Spark session")

    monkeypatch.setattr(LazyPySparkResource, "_init_session", refuse)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "LAKEHOUSE_HOME": str(tmp_path / "home"),
            "LAKEHOUSE_GOLD_OUTPUTS": "hopping",
            "LAKEHOUSE_PIPELINES": "purchases",
        }
    )


@pytest.fixture
def tick(settings: Settings) -> Tick:
    """``tick(cursor)`` evaluates the sensor once as the daemon does, with the ``lakehouse`` resource."""
    sensor = definitions.build_defs(settings).resolve_sensor_def(live.SENSOR_NAME)
    resources = {"lakehouse": lakehouse_resource(settings)}

    def evaluate(cursor: str | None = None) -> dg.SensorResult:
        with (
            dg.DagsterInstance.ephemeral() as instance,
            dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context,
        ):
            return sensor(context)

    return evaluate


def progress(stream: str, batch_id: int, run_id: str = RUN, **figures: Any) -> dict[str, Any]:
    """One progress row as the recorder writes it; ``figures`` override columns or go into the JSON."""
    columns = set(SCHEMA.names)
    at = START + timedelta(seconds=10 * batch_id)
    row: dict[str, Any] = {
        "stream": stream,
        "run_id": run_id,
        "batch_id": batch_id,
        "batch_time": at,
        "rows_in": 10,
        "rows_out": 4,
        "batch_seconds": 1.5,
        "watermark": at - timedelta(minutes=2),
        "late": 0,
        "quarantined": 0,
        "duplicates": 0,
        "state_rows": 0,
        "state_memory_bytes": 0,
        "recorded_at": at + timedelta(seconds=2),
    }
    row.update({k: v for k, v in figures.items() if k in columns})
    # The batch function's figures, as the recorder keeps them beside the columns.
    extra = {k: v for k, v in figures.items() if k not in columns or k in ("late", "quarantined", "duplicates")}
    row["figures"] = json.dumps({"rows_in": row["rows_in"], "rows_written": row["rows_out"], **extra})
    return row


def append(settings: Settings, *rows: dict[str, Any]) -> int:
    """Append ``rows`` in one commit (creating the table first, as ``ensure_tables`` does); the new version."""
    path = str(OPS_STREAM_PROGRESS.path(settings))
    if not (OPS_STREAM_PROGRESS.path(settings) / "_delta_log").is_dir():
        write_deltalake(path, pa.Table.from_pylist([], schema=SCHEMA))
    write_deltalake(path, pa.Table.from_pylist(list(rows), schema=SCHEMA), mode="append")
    return DeltaTable(path).version()


def names(settings: Settings) -> tuple[str, str, str]:
    """The landing, silver and windows streams (by role, not by a name written here)."""
    pipeline = stages(settings)
    return pipeline.source.name, pipeline.silver.name, pipeline.windows.name


def keys(table: Table) -> str:
    return asset_key(table).to_user_string()


def events_by_asset(result: dg.SensorResult) -> dict[str, list[dg.AssetMaterialization]]:
    found: dict[str, list[dg.AssetMaterialization]] = {}
    for event in result.asset_events:
        assert isinstance(event, dg.AssetMaterialization)
        found.setdefault(event.asset_key.to_user_string(), []).append(event)
    return found


def bronze(result: dg.SensorResult) -> list[dg.AssetMaterialization]:
    """The events of bronze/events (a landing batch materializes every table it carries through)."""
    return events_by_asset(result).get("bronze/events", [])


def values(event: dg.AssetMaterialization) -> dict[str, Any]:
    return {key: getattr(value, "value", value) for key, value in event.metadata.items()}


def test_skips_while_the_table_does_not_exist(tick: Tick) -> None:
    result = tick(None)
    assert result.skip_reason.skip_message == "ops.stream_progress does not exist yet"
    assert not result.asset_events and result.cursor is None
    assert tick("4@some-table").cursor == "4@some-table"


def test_each_batch_materializes_the_tables_its_stream_writes(settings: Settings, tick: Tick) -> None:
    # The landing stream carries its batch through silver to the tumbling table: one row, every table.
    landing, _, _ = names(settings)
    write_deltalake(str(BRONZE_EVENTS.path(settings)), pa.table({"line": ["a", "b", "c"]}))
    version = append(
        settings,
        progress(landing, 0, rows_in=3, rows_out=3, backlog_files=2, latency_p50_seconds=1.25,
                 latency_p99_seconds=2.5, latency_max_seconds=3.0, events=1, quarantined=1, duplicates=1,
                 windows_changed=1, late=1, windows_revised=2),
    )  # fmt: skip
    result = tick(None)
    table_id = DeltaTable(str(OPS_STREAM_PROGRESS.path(settings))).metadata().id
    assert result.cursor == f"{version}@{table_id}" and result.skip_reason is None

    found = events_by_asset(result)
    expected = {keys(t) for t in stream_outputs(settings)[landing]}
    assert {"bronze/events", "silver/events", "silver/quarantine", "gold/corrections"} <= expected
    assert set(found) == expected and all(len(events) == 1 for events in found.values())

    bronze = values(found["bronze/events"][0])
    assert bronze["stream"] == landing and bronze["run_id"] == RUN and bronze["batch_id"] == 0
    assert (bronze["rows_in"], bronze["rows_written"], bronze["batches"]) == (3, 3, 1)
    assert (bronze["batch_seconds"], bronze["rows_per_second"], bronze["backlog_files"]) == (1.5, 2.0, 2)
    assert (bronze["latency_p50_seconds"], bronze["latency_p99_seconds"], bronze["latency_max_seconds"]) == (
        1.25, 2.5, 3.0,
    )  # fmt: skip
    assert bronze["watermark"] == (START - timedelta(minutes=2)).timestamp()
    assert bronze["batch_time"] == START.timestamp()
    # The newest event of an asset carries its table's state, read from the Delta log.
    assert (bronze["dagster/row_count"], bronze["table_version"]) == (3, 0)
    assert bronze["path"] == str(BRONZE_EVENTS.path(settings))
    assert found["bronze/events"][0].description == f"{landing}: batch 0 of {RUN}"

    silver_events = values(found["silver/events"][0])
    assert (silver_events["quarantined"], silver_events["duplicates"], silver_events["rows_written"]) == (1, 1, 1)
    # Each side table's rows written is its own figure, as the runs record it.
    assert values(found["silver/quarantine"][0])["rows_written"] == 1
    gold = values(found[keys(tumbling_table(settings))][0])
    assert (gold["late"], gold["rows_written"]) == (1, 1)
    assert values(found["gold/corrections"][0])["rows_written"] == 2
    assert values(found["silver/late_events"][0])["rows_written"] == 1
    assert silver_events["latency_p50_seconds"] == 1.25  # the batch's: landing → its commit, gold included


def test_a_window_table_records_its_own_figure_whichever_stream_writes_it(settings: Settings, tick: Tick) -> None:
    hopping = hopping_table(settings)
    (writer,) = [name for name in stages(settings).names if hopping in stream_outputs(settings)[name]]
    append(settings, progress(writer, 0, rows_out=3, hopping_windows_changed=12))
    found = events_by_asset(tick(None))
    assert values(found[keys(hopping)][0])["rows_written"] == 12


def test_rows_of_dagster_runs_are_not_reported(settings: Settings, tick: Tick) -> None:
    landing, silver, _ = names(settings)
    append(settings, progress(landing, 0, run_id="20260101T000000-7"), progress(silver, 0, run_id="20260101T000000-7"))
    result = tick(None)
    assert not result.asset_events
    assert result.skip_reason.skip_message.startswith("no batch of a continuous run in ops.stream_progress")
    # One commit mixing both: only the continuous run's batch.
    append(settings, progress(landing, 1, run_id="20260101T000000-7"), progress(landing, 5))
    mixed = tick(result.cursor)
    assert [values(e)["batch_id"] for e in bronze(mixed)] == [5]


def test_the_cursor_advances_and_nothing_is_reported_twice(settings: Settings, tick: Tick) -> None:
    landing, _, _ = names(settings)
    append(settings, progress(landing, 0))
    first = tick(None)
    assert [values(e)["batch_id"] for e in bronze(first)] == [0]
    again = tick(first.cursor)
    assert not again.asset_events and again.cursor == first.cursor

    append(settings, progress(landing, 1))
    append(settings, progress(landing, 2))
    second = tick(first.cursor)
    assert [values(e)["batch_id"] for e in bronze(second)] == [1, 2]
    assert int(second.cursor.split("@")[0]) == int(first.cursor.split("@")[0]) + 2

    # A compaction rewrites the rows into a new file without changing data: not new batches.
    DeltaTable(str(OPS_STREAM_PROGRESS.path(settings))).optimize.compact()
    compacted = tick(second.cursor)
    assert not compacted.asset_events and compacted.cursor != second.cursor


def test_many_batches_between_ticks_become_one_summed_materialization(settings: Settings, tick: Tick) -> None:
    landing, _, _ = names(settings)
    count = live.MAX_EVENTS_PER_STREAM + 3
    rows = [progress(landing, i, latency_p99_seconds=float(i), backlog_files=count - i) for i in range(count)]
    append(settings, *rows)
    (event,) = bronze(tick(None))
    summed = values(event)
    assert (summed["batches"], summed["first_batch_id"], summed["batch_id"]) == (count, 0, count - 1)
    assert (summed["rows_in"], summed["rows_written"], summed["batch_seconds"]) == (10 * count, 4 * count, 1.5 * count)
    assert summed["slowest_batch_seconds"] == 1.5
    # The newest batch's backlog; the largest latency (an upper bound of the combined percentile).
    assert (summed["backlog_files"], summed["latency_p99_seconds"]) == (1, float(count - 1))
    assert f"{count} batches, 0-{count - 1}" in event.description


def test_commits_over_the_cap_wait_for_the_next_tick(settings: Settings) -> None:
    landing, _, _ = names(settings)
    for batch in range(5):
        append(settings, progress(landing, batch))  # versions 1..5 (0 is the creation)
    start = live.read_progress(settings, None, max_commits=2)
    # Without a cursor: the newest commits only, the older ones are never read.
    assert [r["batch_id"] for r in start.rows] == [3, 4] and start.commits_skipped == 4 and start.version == 5
    table_id = start.table_id
    capped = live.read_progress(settings, f"0@{table_id}", max_commits=2)
    assert [r["batch_id"] for r in capped.rows] == [0, 1] and capped.commits_left == 3
    rest = live.read_progress(settings, capped.cursor, max_commits=2)
    assert [r["batch_id"] for r in rest.rows] == [2, 3]
    assert [r["batch_id"] for r in live.read_progress(settings, rest.cursor, max_commits=2).rows] == [4]


def test_a_cursor_of_another_table_hides_nothing(settings: Settings, tick: Tick) -> None:
    """A reset lakehouse creates ops.stream_progress again under a new id: every batch in it is new."""
    landing, _, _ = names(settings)
    append(settings, progress(landing, 0))
    result = tick("99@an-old-table")
    assert [values(e)["batch_id"] for e in bronze(result)] == [0]


def test_a_tick_starts_no_jvm(settings: Settings, tick: Tick) -> None:
    from pyspark import SparkContext

    landing, _, _ = names(settings)
    append(settings, progress(landing, 0))
    before = SparkContext._active_spark_context  # another test of this worker may have started one
    assert tick(None).asset_events
    assert SparkContext._active_spark_context is before


def test_the_sensor_is_on_by_default_every_ten_seconds(settings: Settings) -> None:
    sensor = definitions.build_defs(settings).resolve_sensor_def(live.SENSOR_NAME)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.minimum_interval_seconds == 10


@pytest.mark.parametrize("outputs", ["none", "hopping,fraud_alerts", "all"])
def test_every_kept_gold_asset_has_the_freshness_policy(settings: Settings, outputs: str) -> None:
    configured = Settings.from_env(
        {
            "LAKEHOUSE_HOME": str(settings.home),
            "LAKEHOUSE_GOLD_OUTPUTS": outputs,
            "LAKEHOUSE_GOLD_FRESHNESS_SECONDS": "90",
            "LAKEHOUSE_PIPELINES": "purchases",
        }
    )
    graph = definitions.build_defs(configured).resolve_asset_graph()
    policies = {key.to_user_string(): graph.get(key).freshness_policy for key in graph.get_all_asset_keys()}
    gold = {key for key in policies if key.startswith("gold/")}
    assert gold == {key.to_user_string() for key in live.gold_asset_keys(configured)}
    assert {"gold/user_spend_5m", "gold/corrections"} <= gold
    for key, policy in policies.items():
        if key in gold:
            assert policy == dg.FreshnessPolicy.time_window(fail_window=timedelta(seconds=90)), key
        else:
            assert policy is None, key
