"""The sensors' cursors, ticked as the daemon ticks them, without Spark: a temporary home holding only files
(landing files, a Delta table written by delta-rs, a fake Kafka checkpoint), the ``lakehouse`` resource
saying where it is. And the definitions each ``Settings`` builds, which need no Spark either."""

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.utils import make_new_run_id
from dagster_pyspark import LazyPySparkResource
from deltalake import DeltaTable, write_deltalake

from orchestration import definitions, kafka
from orchestration.resources import KafkaSourceResource, lakehouse_resource
from runtime.checkpoints import KAFKA_STAGE
from runtime.runner import CONTINUOUS_RUN
from runtime.sources.kafka_client import PartitionOffsets, TopicState
from runtime.sources.landing import place_in_landing
from warehouse.catalog import SILVER_LATE_EVENTS
from warehouse.locks import hold, hold_all
from warehouse.settings import GOLD_OUTPUTS, Settings

Tick = Callable[..., dg.SensorResult | dg.SkipReason]

#: The assets every lakehouse has, whichever optional gold outputs it keeps.
CORE_KEYS = {
    "bronze/events",
    "silver/events",
    "silver/quarantine",
    "silver/duplicates",
    "silver/late_events",
    "gold/user_spend_5m",
    "gold/corrections",
    "maintenance/tables",
}
#: The assets each optional gold output adds (default window sizes).
OUTPUT_KEYS = {
    "hopping": {"gold/user_spend_1h_hopping"},
    "sessions": {"gold/user_sessions"},
    "global": {"gold/user_spend_global"},
    "firings": {"gold/user_spend_5m_firings"},
    "order_payments": {"gold/order_payments"},
    "fraud_alerts": {"gold/fraud_alerts"},
    "unique_urls": {"gold/unique_urls"},
}


def settings_for(home: Path, **env: str) -> Settings:
    """Settings from these variables only (not the process's environment)."""
    # The first pipeline's definitions (tests/test_declared_pipelines.py and test_pipeline_definitions.py
    # load every pipeline's).
    return Settings.from_env({"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PIPELINES": "purchases", **env})


@pytest.fixture(autouse=True)
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sensor takes the ``lakehouse`` resource to know where the lakehouse lives, never to start a JVM."""

    def refuse(self) -> None:
        raise AssertionError("a sensor asked for a Spark session")

    monkeypatch.setattr(LazyPySparkResource, "_init_session", refuse)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return settings_for(tmp_path / "home")


@pytest.fixture
def instance():
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def ticker(settings: Settings, instance: dg.DagsterInstance, sensor_name: str, **resources: object) -> Tick:
    """``tick(cursor)`` evaluates the named sensor of ``settings``' definitions once, with the ``lakehouse``
    resource on ``settings`` (and any other resource given)."""
    sensor = definitions.build_defs(settings).resolve_sensor_def(sensor_name)
    resources = {"lakehouse": lakehouse_resource(settings), **resources}

    def tick(cursor: str | None = None) -> dg.SensorResult | dg.SkipReason:
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            return sensor(context)

    return tick


def land(settings: Settings, name: str) -> Path:
    return place_in_landing(settings, name, lambda handle: handle.write('{"event_id": "e"}\n'))


def arrival_cursor(path: Path) -> str:
    return f"{path.stat().st_mtime_ns}/{path.name}"


# The landing sensor ------------------------------------------------------------------------------------


def test_landing_sensor_skips_until_files_arrive(settings: Settings, instance: dg.DagsterInstance) -> None:
    tick = ticker(settings, instance, "landing_sensor")
    # No landing folder at all yet, then an empty one.
    skipped = tick()
    assert isinstance(skipped, dg.SkipReason)
    assert skipped.skip_message == f"no new landing files in {settings.landing_dir} yet"
    settings.landing_dir.mkdir(parents=True)
    assert isinstance(tick(), dg.SkipReason)


def test_landing_sensor_requests_one_run_per_new_arrivals_and_advances(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    tick = ticker(settings, instance, "landing_sensor")
    land(settings, "one.jsonl")
    two = land(settings, "two.jsonl")

    first = tick()
    assert isinstance(first, dg.SensorResult)
    (request,) = first.run_requests
    assert first.cursor == arrival_cursor(two)
    assert request.run_key == f"landing:{first.cursor}"
    assert request.tags["lakehouse/new_files"] == "2"

    # Nothing new since the cursor: a skip naming the newest file seen, and no request.
    again = tick(first.cursor)
    assert isinstance(again, dg.SkipReason) and again.skip_message.endswith(f"since {two.name}")

    three = land(settings, "three.jsonl")
    second = tick(first.cursor)
    (request_two,) = second.run_requests
    assert second.cursor == arrival_cursor(three) and request_two.tags["lakehouse/new_files"] == "1"
    assert request_two.run_key != request.run_key
    assert isinstance(tick(second.cursor), dg.SkipReason)


def test_landing_sensor_skips_while_a_continuous_run_holds_the_landing_zone(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    """The service takes files as they land: no run is requested, the cursor stays, and the files are
    requested once the service lets go. A bounded run holding the locks does not stop the sensor."""
    tick = ticker(settings, instance, "landing_sensor")
    first = land(settings, "first.jsonl")
    with hold_all(settings, ["bronze_events", "silver_events"], purpose=CONTINUOUS_RUN):
        skipped = tick()
    assert isinstance(skipped, dg.SkipReason)
    assert skipped.skip_message == "a continuous run holds the landing zone (bronze_events): it takes new files itself"
    with hold(settings, "bronze_events", purpose="bronze_events batch"):
        requested = tick()
    assert isinstance(requested, dg.SensorResult) and requested.cursor == arrival_cursor(first)
    assert len(requested.run_requests) == 1


def waiting(instance: dg.DagsterInstance, job_name: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    """A run of ``job_name`` recorded in ``status``, as the daemon's queue holds one."""
    return instance.add_run(dg.DagsterRun(job_name=job_name, run_id=make_new_run_id(), status=status))


def test_landing_sensor_asks_for_no_second_run_while_one_has_not_started(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    """A queued run takes every file there when it starts: the cursor stays, and once that run started
    (or ended), the files after the cursor are asked for again."""
    tick = ticker(settings, instance, "landing_sensor")
    first = land(settings, "first.jsonl")
    queued = waiting(instance, "lakehouse_once", dg.DagsterRunStatus.STARTING)
    waiting(instance, "reconcile_job", dg.DagsterRunStatus.NOT_STARTED)  # another job's is not this one's
    skipped = tick()
    assert isinstance(skipped, dg.SkipReason)
    message = f"run {queued.run_id[:8]} of lakehouse_once has not started yet: it takes the new files"
    assert skipped.skip_message == message
    instance.handle_run_event(
        queued.run_id, dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name="lakehouse_once")
    )
    requested = tick()
    assert isinstance(requested, dg.SensorResult) and requested.cursor == arrival_cursor(first)


def test_landing_sensor_asks_for_the_same_files_under_the_same_run_key(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    """A tick whose cursor was not stored (the daemon stopped in between) asks again under the same run key,
    which Dagster launches once."""
    tick = ticker(settings, instance, "landing_sensor")
    land(settings, "one.jsonl")
    assert [r.run_key for r in tick().run_requests] == [r.run_key for r in tick().run_requests]


def test_landing_sensor_ignores_hidden_and_partial_files(settings: Settings, instance: dg.DagsterInstance) -> None:
    tick = ticker(settings, instance, "landing_sensor")
    one = land(settings, "one.jsonl")
    cursor = tick().cursor
    (settings.landing_dir / ".two.jsonl.partial").write_text("{}\n")  # a copy in progress
    (settings.landing_dir / "_SUCCESS").write_text("")
    assert isinstance(tick(cursor), dg.SkipReason)
    assert cursor == arrival_cursor(one)


def test_landing_sensor_sees_a_file_copied_in_by_hand_under_any_name(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    tick = ticker(settings, instance, "landing_sensor")
    land(settings, "stamped.jsonl")
    cursor = tick().cursor
    copied = settings.landing_dir / "0-copied-by-hand.jsonl"  # sorts before every stamped name
    copied.write_text('{"event_id": "e"}\n')
    result = tick(cursor)
    assert result.cursor == arrival_cursor(copied) and len(result.run_requests) == 1


def test_landing_sensor_reads_the_resource_home_not_the_environment(
    settings: Settings, instance: dg.DagsterInstance, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = settings_for(tmp_path / "elsewhere")
    land(elsewhere, "not-ours.jsonl")
    monkeypatch.setenv("LAKEHOUSE_HOME", str(elsewhere.home))
    skipped = ticker(settings, instance, "landing_sensor")()
    assert isinstance(skipped, dg.SkipReason) and str(settings.landing_dir) in skipped.skip_message


# The late-data sensor ----------------------------------------------------------------------------------

LATE_SCHEMA = pa.schema([("event_id", pa.string())])


def write_late_events(settings: Settings, *event_ids: str) -> None:
    """silver.late_events as delta-rs writes it: version 0 is the (empty) table's creation, each write after
    it one more version."""
    path = SILVER_LATE_EVENTS.path(settings)
    if not (path / "_delta_log").is_dir():
        write_deltalake(str(path), pa.Table.from_pylist([], schema=LATE_SCHEMA))
    if event_ids:
        rows = pa.Table.from_pylist([{"event_id": e} for e in event_ids], schema=LATE_SCHEMA)
        write_deltalake(str(path), rows, mode="append")


def table_id(settings: Settings) -> str:
    return DeltaTable(str(SILVER_LATE_EVENTS.path(settings))).metadata().id


def test_late_data_sensor_skips_while_the_table_does_not_exist(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    tick = ticker(settings, instance, "late_data_sensor")
    missing = tick()
    assert missing.skip_reason.skip_message == "silver.late_events does not exist yet"
    assert not missing.run_requests and missing.cursor is None
    # A cursor already held is kept as it is.
    assert tick("3@some-table").cursor == "3@some-table"


def test_late_data_sensor_requests_a_reconcile_once_per_new_version(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    tick = ticker(settings, instance, "late_data_sensor")
    write_late_events(settings)
    created = tick()
    table = table_id(settings)
    # Version 0 is the table's creation: nothing late yet, but the cursor now names the table.
    assert not created.run_requests and "nothing late" in created.skip_reason.skip_message
    assert created.cursor == f"0@{table}"

    write_late_events(settings, "late-1")
    fired = tick(created.cursor)
    (request,) = fired.run_requests
    assert fired.cursor == f"1@{table}"
    assert request.run_key == f"late_events:v1@{table}" and request.tags["lakehouse/late_events_version"] == "1"

    again = tick(fired.cursor)
    assert not again.run_requests and again.cursor == fired.cursor
    # Two commits between ticks: one request, for the newest version.
    write_late_events(settings, "late-2")
    write_late_events(settings, "late-3")
    (latest,) = tick(fired.cursor).run_requests
    assert latest.run_key == f"late_events:v3@{table}"


def test_late_data_sensor_asks_for_no_second_reconcile_while_one_has_not_started(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    tick = ticker(settings, instance, "late_data_sensor")
    write_late_events(settings)
    write_late_events(settings, "late-1")
    queued = waiting(instance, "reconcile_job", dg.DagsterRunStatus.NOT_STARTED)
    held = tick("0@" + table_id(settings))
    assert not held.run_requests and held.cursor == "0@" + table_id(settings)
    assert held.skip_reason.skip_message.startswith(f"run {queued.run_id[:8]} of reconcile_job has not started yet")
    instance.report_run_canceled(queued)
    (request,) = tick(held.cursor).run_requests
    assert request.run_key == f"late_events:v1@{table_id(settings)}"


def test_late_data_sensor_cursor_of_another_table_hides_nothing(
    settings: Settings, instance: dg.DagsterInstance
) -> None:
    """A reset lakehouse recreates silver.late_events under a new id, its versions from 0 again: a cursor
    from the old table, however high its version, does not hide the new table's late events."""
    tick = ticker(settings, instance, "late_data_sensor")
    write_late_events(settings, "late-1")
    table = table_id(settings)
    stale = tick("99@an-old-table")
    assert [r.run_key for r in stale.run_requests] == [f"late_events:v1@{table}"]
    assert stale.cursor == f"1@{table}"


# The Kafka sensor --------------------------------------------------------------------------------------


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> dict[str, TopicState]:
    """The topics the (fake) broker serves, by name; empty: the broker is not reachable."""
    served: dict[str, TopicState] = {}

    def topics(settings: Settings, timeout: float = 10.0) -> list[TopicState]:
        if not served:
            raise ConnectionError("no broker")
        return list(served.values())

    monkeypatch.setattr(kafka, "topics", topics)
    return served


def consumed(settings: Settings, batch_id: int, offsets: dict[int, int], committed: bool = True) -> None:
    """A fake checkpoint of the Kafka stream: batch ``batch_id`` planned up to ``offsets`` (and committed)."""
    checkpoint = settings.checkpoints_dir / KAFKA_STAGE
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    source = {settings.kafka.topic: {str(p): o for p, o in offsets.items()}}
    (checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{{}}\n{json.dumps(source)}\n")
    if committed:
        (checkpoint / "commits" / str(batch_id)).write_text("v1\n{}\n")


def test_kafka_sensor_skips_an_unreachable_broker_and_a_missing_topic(
    settings: Settings, instance: dg.DagsterInstance, broker: dict[str, TopicState]
) -> None:
    tick = ticker(settings, instance, "kafka_sensor", kafka=KafkaSourceResource())
    unreachable = tick()
    assert unreachable.skip_message == f"Kafka at {settings.kafka.bootstrap_servers} is not reachable (ConnectionError)"
    broker["other"] = TopicState("other", [PartitionOffsets(0, 0, 5)])
    missing = tick()
    assert missing.skip_message == f"topic events does not exist at {settings.kafka.bootstrap_servers}"


def test_kafka_sensor_requests_once_per_new_end_offsets(
    settings: Settings, instance: dg.DagsterInstance, broker: dict[str, TopicState]
) -> None:
    tick = ticker(settings, instance, "kafka_sensor", kafka=KafkaSourceResource())
    broker["events"] = TopicState("events", [PartitionOffsets(0, 0, 5), PartitionOffsets(1, 2, 4)])
    first = tick()
    (request,) = first.run_requests
    # Nothing consumed yet: behind by everything retained.
    assert first.cursor == "0:5,1:4" and request.tags["lakehouse/kafka_lag"] == "7"
    assert request.run_key == "kafka:events:0:5,1:4" and request.run_config == kafka.KAFKA_RUN_CONFIG

    # The run has not consumed them yet: the same end offsets are not asked for twice.
    again = tick(first.cursor)
    assert isinstance(again, dg.SkipReason) and again.skip_message == "no new messages in events (end offsets 0:5,1:4)"

    # New messages on partition 1; the stream has read partition 0 and part of 1.
    broker["events"] = TopicState("events", [PartitionOffsets(0, 0, 5), PartitionOffsets(1, 2, 6)])
    consumed(settings, 0, {0: 5, 1: 3})
    consumed(settings, 1, {0: 5, 1: 6}, committed=False)  # planned, not finished: not consumed yet
    second = tick(first.cursor)
    (later,) = second.run_requests
    assert second.cursor == "0:5,1:6" and later.tags["lakehouse/kafka_lag"] == "3"


def test_kafka_sensor_skips_when_the_stream_has_read_everything(
    settings: Settings, instance: dg.DagsterInstance, broker: dict[str, TopicState]
) -> None:
    tick = ticker(settings, instance, "kafka_sensor", kafka=KafkaSourceResource())
    broker["events"] = TopicState("events", [PartitionOffsets(0, 0, 5)])
    consumed(settings, 0, {0: 5})
    skipped = tick()  # even without a cursor (a new instance): the checkpoint says all is read
    assert isinstance(skipped, dg.SkipReason) and "no new messages" in skipped.skip_message


def test_kafka_sensor_reads_the_topic_of_its_kafka_resource(
    settings: Settings, instance: dg.DagsterInstance, broker: dict[str, TopicState]
) -> None:
    broker["events"] = TopicState("events", [PartitionOffsets(0, 0, 5)])
    broker["orders"] = TopicState("orders", [PartitionOffsets(0, 0, 2)])
    (request,) = ticker(settings, instance, "kafka_sensor", kafka=KafkaSourceResource(topic="orders"))().run_requests
    assert request.run_key == "kafka:orders:0:2" and request.tags["lakehouse/kafka_lag"] == "2"


# The definitions a Settings builds ---------------------------------------------------------------------


def asset_keys(defs: dg.Definitions) -> set[str]:
    return {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}


def test_no_optional_output_leaves_the_core_assets(settings: Settings) -> None:
    defs = definitions.build_defs(replace(settings, gold_outputs=frozenset()))
    assert asset_keys(defs) == CORE_KEYS
    job_keys = {k.to_user_string() for k in defs.resolve_job_def("lakehouse_once").asset_layer.selected_asset_keys}
    assert job_keys == CORE_KEYS - {"maintenance/tables"}


@pytest.mark.parametrize("output", GOLD_OUTPUTS)
def test_each_kept_output_adds_its_assets(settings: Settings, output: str) -> None:
    defs = definitions.build_defs(replace(settings, gold_outputs=frozenset({output})))
    assert asset_keys(defs) == CORE_KEYS | OUTPUT_KEYS[output]


def test_every_output_kept(settings: Settings) -> None:
    assert set(OUTPUT_KEYS) == set(GOLD_OUTPUTS)
    defs = definitions.build_defs(replace(settings, gold_outputs=frozenset(GOLD_OUTPUTS)))
    assert asset_keys(defs) == CORE_KEYS.union(*OUTPUT_KEYS.values())


def test_the_code_location_is_built_from_the_settings_it_read_once() -> None:
    assert asset_keys(definitions.defs) == asset_keys(definitions.build_defs(definitions.SETTINGS))
    assert definitions.defs.resources["lakehouse"].settings() is definitions.SETTINGS


def test_schedules_partitions_config_and_resources_follow_the_one_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything comes from the Settings the definitions are built from, nothing from the environment."""
    monkeypatch.setenv("LAKEHOUSE_RECONCILE_CRON", "1 1 * * *")
    monkeypatch.setenv("LAKEHOUSE_SOURCE", "landing")
    settings = settings_for(
        tmp_path / "home",
        LAKEHOUSE_RECONCILE_CRON="*/5 * * * *",
        LAKEHOUSE_MAINTENANCE_CRON="9 * * * *",
        LAKEHOUSE_DQ_CRON="30 * * * *",
        LAKEHOUSE_SWEEP_START_DATE="2025-02-03",
        LAKEHOUSE_SOURCE="kafka",
        LAKEHOUSE_WINDOW_MINUTES="10",
        LAKEHOUSE_GOLD_OUTPUTS="none",
    )
    defs = definitions.build_defs(settings)
    crons = {name: defs.resolve_schedule_def(name).cron_schedule for name in
             ("reconcile_schedule", "maintenance_schedule", "data_quality_schedule")}  # fmt: skip
    assert crons == {
        "reconcile_schedule": "*/5 * * * *",
        "maintenance_schedule": "9 * * * *",
        "data_quality_schedule": "30 * * * *",
    }
    sweep = defs.resolve_job_def("completeness_sweep")
    assert sweep.partitions_def.get_first_partition_key() == "2025-02-03"
    assert "gold/user_spend_10m" in asset_keys(defs) and "gold/user_spend_5m" not in asset_keys(defs)
    bronze = defs.resolve_assets_def(dg.AssetKey(["bronze", "events"]))
    assert bronze.op.config_schema.config_type.fields["source"].default_value == "kafka"
    assert defs.resources["lakehouse"].settings() is settings
