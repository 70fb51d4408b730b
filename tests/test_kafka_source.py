"""Kafka → bronze → silver → gold against a real broker: messages produced by an independent client
(kafka-python), gold checked against DuckDB over the same lines, hostile messages quarantined."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from devtools.synthetic import StreamSpec, generate_lines
from runtime.faults import Fault
from runtime.replay import run_replay
from runtime.runner import run_once
from tests.servers import PLANTED_SECRET, files_holding
from tests.test_pipeline import DUCKDB_GOLDEN
from warehouse.catalog import (
    BRONZE_EVENTS,
    OPS_STREAM_PROGRESS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_QUARANTINE,
    tumbling_table,
)
from warehouse.delta import read_table

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("kafka")]

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def produce(bootstrap: str, topic: str, lines: list[str | None], keyed: bool = True) -> None:
    """Send each line as one message, keyed by its user_id as a producer of this topic would."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=4 * 1024 * 1024)
    for line in lines:
        key = None
        if keyed and line:
            try:
                key = json.loads(line).get("user_id", "").encode() or None
            except (ValueError, AttributeError):
                key = None
        if line is None:  # a message without a value (a tombstone) still needs a key
            key = b"no-value"
        producer.send(topic, key=key, value=None if line is None else line.encode())
    producer.flush()
    producer.close()


def test_kafka_stream_equals_duckdb_over_the_same_lines(spark, kafka_settings, tmp_path: Path) -> None:
    settings = kafka_settings
    spec = StreamSpec(
        events=2000, users=20, rate=2.0, disorder_seconds=30, duplicate_fraction=0.08,
        late_fraction=0.0, invalid_fraction=0.04, seed=33,
    )  # fmt: skip
    lines = list(generate_lines(spec))
    half = len(lines) // 2
    for chunk in (lines[:half], lines[half:]):
        produce(settings.kafka.bootstrap_servers, settings.kafka.topic, chunk)
        reports = {r.name: r.figures for r in run_once(spark, settings, "kafka")}
        assert reports["bronze_events_kafka"]["rows_written"] == len(chunk)

    # DuckDB over the same lines in the order they were produced (a user's lines share a partition, so
    # produce order is arrival order for every duplicate) is the independent golden.
    produced = tmp_path / "produced.jsonl"
    produced.write_text("".join(line + "\n" for line in lines))
    golden = {
        (user, start.astimezone(UTC)): (total, n)
        for user, start, total, n in duckdb.execute(DUCKDB_GOLDEN, [str(produced)]).fetchall()
    }
    gold = {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }
    assert gold == golden

    bronze = read_table(spark, settings, BRONZE_EVENTS)
    assert bronze.count() == len(lines)
    positions = bronze.select("kafka_topic", "kafka_partition", "kafka_offset").distinct().count()
    assert positions == len(lines), "one bronze row per message"
    rows = bronze.select("source", "kafka_topic", "kafka_partition", "kafka_key", "kafka_timestamp", "raw").collect()
    assert {r.source for r in rows} == {"kafka"} and {r.kafka_topic for r in rows} == {settings.kafka.topic}
    assert {r.kafka_partition for r in rows} == {0, 1, 2}
    assert all(r.kafka_timestamp is not None for r in rows)
    for r in rows:
        try:
            user = json.loads(r.raw).get("user_id")
        except (ValueError, AttributeError):
            continue
        if isinstance(user, str) and user:
            assert r.kafka_key == user
    split = sum(read_table(spark, settings, t).count() for t in (SILVER_EVENTS, SILVER_QUARANTINE, SILVER_DUPLICATES))
    assert split == len(lines)

    # Consumer lag is recorded with every batch: all read, so none is left, partition by partition.
    progress = [
        r for r in read_table(spark, settings, OPS_STREAM_PROGRESS).collect() if r.stream == "bronze_events_kafka"
    ]
    assert len(progress) == 2
    last = max(progress, key=lambda r: r.batch_id)
    assert last.backlog_messages == 0
    assert {k: v for k, v in json.loads(last.figures).items() if k.startswith("kafka_lag_partition_")} == {
        "kafka_lag_partition_0": 0,
        "kafka_lag_partition_1": 0,
        "kafka_lag_partition_2": 0,
    }

    # Nothing new: a second run reads nothing and changes nothing.
    before = read_table(spark, settings, tumbling_table(settings)).collect()
    again = {r.name: r.batches for r in run_once(spark, settings, "kafka")}
    assert again["bronze_events_kafka"] == 0
    assert sorted(read_table(spark, settings, tumbling_table(settings)).collect()) == sorted(before)


def test_hostile_messages_are_quarantined_with_reasons(spark, kafka_settings) -> None:
    settings = kafka_settings
    valid = '{"event_id": "ok-1", "user_id": "u", "event_time": "2024-01-01T10:00:00Z", "amount": 1.25}'
    produce(
        settings.kafka.bootstrap_servers,
        settings.kafka.topic,
        ["this is not json", "", None, "x" * (1024 * 1024), valid],
        keyed=False,
    )
    run_once(spark, settings, "kafka")
    reasons = Counter(r.reason for r in read_table(spark, settings, SILVER_QUARANTINE).collect())
    assert reasons == Counter({"not_json": 2, "empty_line": 2})
    assert read_table(spark, settings, BRONZE_EVENTS).count() == 5
    assert [r.event_id for r in read_table(spark, settings, SILVER_EVENTS).collect()] == ["ok-1"]


def _golden(tmp_path: Path, files: dict[str, list[str]]) -> dict:
    """DuckDB's windows over the given files' lines (files sort in arrival order by name)."""
    folder = tmp_path / "golden"
    folder.mkdir(exist_ok=True)
    for name, lines in files.items():
        (folder / name).write_text("".join(line + "\n" for line in lines))
    return {
        (user, start.astimezone(UTC)): (total, n)
        for user, start, total, n in duckdb.execute(DUCKDB_GOLDEN, [str(folder / "*.jsonl")]).fetchall()
    }


def _gold(spark, settings) -> dict:
    return {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }


def test_replay_from_kafka_rebuilds_bronze_from_the_topic_and_refuses_when_offsets_are_gone(
    spark, kafka_settings, tmp_path: Path
) -> None:
    settings = kafka_settings
    spec = dict(users=8, rate=2.0, disorder_seconds=20, duplicate_fraction=0.05, late_fraction=0.0,
                invalid_fraction=0.03)  # fmt: skip
    landed = list(generate_lines(StreamSpec(events=300, seed=41, **spec)))
    produced = list(generate_lines(StreamSpec(events=600, seed=42, **spec)))
    first, second = produced[:400], produced[400:]
    settings.ensure_home()
    (settings.landing_dir / "a.jsonl").write_text("".join(line + "\n" for line in landed))
    run_once(spark, settings, "landing")
    produce(settings.kafka.bootstrap_servers, settings.kafka.topic, first)
    run_once(spark, settings, "kafka")
    bronze_path = str(BRONZE_EVENTS.path(settings))

    def landing_rows() -> list[tuple]:
        rows = read_table(spark, settings, BRONZE_EVENTS).where("source = 'file'")
        return sorted(rows.select("source_file", "source_line", "raw").collect())

    before = landing_rows()
    assert len(before) == len(landed)

    # Bronze loses the rows of one partition (a bad manual delete): the topic still has them.
    spark.sql(f"DELETE FROM delta.`{bronze_path}` WHERE kafka_partition = 1")
    lost = len(first) - read_table(spark, settings, BRONZE_EVENTS).where("source = 'kafka'").count()
    assert lost > 0

    report = run_replay(spark, settings, source="kafka")
    assert report.rows_swapped[f"bronze.events (topic {settings.kafka.topic})"] == len(first)
    assert sum(b - a for a, b in report.kafka_offsets.values()) == len(first)
    assert landing_rows() == before, "landing rows are not touched"
    kafka_rows = read_table(spark, settings, BRONZE_EVENTS).where("source = 'kafka'")
    assert kafka_rows.count() == kafka_rows.select("kafka_partition", "kafka_offset").distinct().count() == len(first)
    assert _gold(spark, settings) == _golden(tmp_path, {"a.jsonl": landed, "b.jsonl": first})
    assert not (settings.home / "replay" / "SWAP_IN_PROGRESS").exists()

    # The Kafka stream goes on from where the replay stopped reading: new messages only, once each.
    produce(settings.kafka.bootstrap_servers, settings.kafka.topic, second)
    reports = {r.name: r.figures for r in run_once(spark, settings, "kafka")}
    assert reports["bronze_events_kafka"]["rows_written"] == len(second)
    assert read_table(spark, settings, BRONZE_EVENTS).count() == len(landed) + len(first) + len(second)
    assert _gold(spark, settings) == _golden(tmp_path, {"a.jsonl": landed, "b.jsonl": first, "c.jsonl": second})

    # Retention (here a delete-records by an independent admin client) drops partition 0's first offsets:
    # a replay from Kafka would lose them, so it refuses before changing anything.
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        admin.delete_records({TopicPartition(settings.kafka.topic, 0): 5})
    finally:
        admin.close()
    version = DeltaTable(bronze_path).version()
    with pytest.raises(RuntimeError, match=r"partition 0: offsets 0\.\.4 are gone \(earliest retained 5\)"):
        run_replay(spark, settings, source="kafka")
    assert DeltaTable(bronze_path).version() == version
    assert not (settings.home / "replay" / "SWAP_IN_PROGRESS").exists()


def _recreate_topic(settings) -> None:
    """Delete the topic and create it again under its name, as an operator would (an independent admin client
    deletes; the new one gets a new topic id and offsets from 0)."""
    from runtime.sources.kafka_client import ensure_topic, topic_id

    before = topic_id(settings)
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        admin.delete_topics([settings.kafka.topic])
    finally:
        admin.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            ensure_topic(settings)
            now = topic_id(settings)
            if now is not None and now != before:
                return
        except Exception:
            pass  # still being deleted
        assert time.monotonic() < deadline, "the topic was not created again within a minute"
        time.sleep(0.5)


def test_a_topic_deleted_and_created_again_is_refused_in_one_line_and_a_replay_keeps_both_topics_messages(
    spark, kafka_settings, tmp_path: Path
) -> None:
    """Offsets start over in a recreated topic. With more messages than the stream had read, Spark's own
    data-loss check sees nothing and would skip the new topic's first ones: the topic's id tells. The run is
    refused in one line; `replay --source kafka` keeps the old topic's rows (each stamped with its topic's
    id), reads the new topic from its start, and gold equals DuckDB over both topics' messages."""
    settings = kafka_settings
    spec = dict(users=8, rate=2.0, disorder_seconds=20, duplicate_fraction=0.05, late_fraction=0.0,
                invalid_fraction=0.03)  # fmt: skip
    old = list(generate_lines(StreamSpec(events=150, seed=51, **spec)))
    new = list(generate_lines(StreamSpec(events=300, seed=52, **spec)))
    more = list(generate_lines(StreamSpec(events=60, seed=53, **spec)))
    produce(settings.kafka.bootstrap_servers, settings.kafka.topic, old)
    run_once(spark, settings, "kafka")
    _recreate_topic(settings)
    produce(settings.kafka.bootstrap_servers, settings.kafka.topic, new)

    version = DeltaTable(str(BRONZE_EVENTS.path(settings))).version()
    with pytest.raises(Fault, match=r"topic .* was deleted and created again .* `lakehouse replay --source kafka`"):
        run_once(spark, settings, "kafka")
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home), "LAKEHOUSE_KAFKA_TOPIC": settings.kafka.topic,
           "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers}  # fmt: skip
    command = subprocess.run(
        [LAKEHOUSE, "run", "--once", "--source", "kafka"], env=env, capture_output=True, text=True, timeout=300
    )
    assert command.returncode == 1 and command.stderr.count("\n") == 1, command.stderr
    assert "deleted and created again" in command.stderr and "replay --source kafka" in command.stderr
    assert DeltaTable(str(BRONZE_EVENTS.path(settings))).version() == version

    report = run_replay(spark, settings, source="kafka")
    assert sum(b - a for a, b in report.kafka_offsets.values()) == len(new)
    rows = read_table(spark, settings, BRONZE_EVENTS).where("source = 'kafka'")
    by_topic = Counter(r.kafka_topic_id for r in rows.select("kafka_topic_id").collect())
    assert sorted(by_topic.values()) == [len(old), len(new)] and None not in by_topic
    assert rows.select("kafka_topic_id", "kafka_partition", "kafka_offset").distinct().count() == len(old) + len(new)
    assert _gold(spark, settings) == _golden(tmp_path, {"b.jsonl": old, "c.jsonl": new})

    produce(settings.kafka.bootstrap_servers, settings.kafka.topic, more)
    reports = {r.name: r.figures for r in run_once(spark, settings, "kafka")}
    assert reports["bronze_events_kafka"]["rows_written"] == len(more)
    assert _gold(spark, settings) == _golden(tmp_path, {"b.jsonl": old, "c.jsonl": new, "d.jsonl": more})


def _bronze_positions(home: Path) -> list[tuple[int, int]]:
    try:
        table = DeltaTable(str(home / "tables" / "bronze" / "events")).to_pyarrow_table(
            columns=["kafka_partition", "kafka_offset"]
        )
    except Exception:  # not created yet, or a commit in flight
        return []
    return list(zip(table.column("kafka_partition").to_pylist(), table.column("kafka_offset").to_pylist(), strict=True))


def _wait(condition, seconds: float, stream: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert stream.poll() is None, f"the stream stopped while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_continuous_kafka_run_survives_sigkill_and_a_broker_outage(kafka_settings, kafka_broker, tmp_path) -> None:
    """SIGKILL `run --continuous --source kafka` with a backlog in flight, restart it; then stop the broker
    under the running stream and start it again. The stream says so in one line each way, catches up, and
    every message is in bronze exactly once and in gold exactly as DuckDB computes it."""
    settings = kafka_settings
    home = tmp_path / "kafka-home"
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(home),
        "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.bootstrap,
        "LAKEHOUSE_KAFKA_TOPIC": settings.kafka.topic,
        "LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER": "300",
        "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS": "1",
        # The source is what this test is about: gold.user_spend_5m alone is checked.
        "LAKEHOUSE_GOLD_OUTPUTS": "none",
        # A client option holding a secret (unused on a PLAINTEXT broker): it must show up nowhere.
        "LAKEHOUSE_KAFKA_OPTION_SASL_PASSWORD": PLANTED_SECRET,
    }
    spec = StreamSpec(events=1200, users=12, rate=2.0, duplicate_fraction=0.05, late_fraction=0.0, seed=5)
    lines = list(generate_lines(spec))
    first, second = lines[: len(lines) * 2 // 3], lines[len(lines) * 2 // 3 :]
    command = [LAKEHOUSE, "run", "--continuous", "--source", "kafka"]
    produce(kafka_broker.bootstrap, settings.kafka.topic, first)

    killed = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _bronze_positions(home), 300, killed, "the first bronze batch")
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
    assert len(_bronze_positions(home)) < len(first), "the kill should leave a backlog in flight"

    log = (tmp_path / "stream.err").open("w+")
    stream = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        _wait(lambda: len(_bronze_positions(home)) >= len(first), 300, stream, "the backlog after the restart")
        assert kafka_broker.command("down").returncode == 0
        _wait(lambda: "is not reachable" in Path(log.name).read_text(), 120, stream, "the outage notice")
        assert kafka_broker.command("up").returncode == 0
        produce(kafka_broker.bootstrap, settings.kafka.topic, second)
        _wait(lambda: len(_bronze_positions(home)) >= len(lines), 300, stream, "the messages sent after the outage")
        _wait(lambda: "answers again" in Path(log.name).read_text(), 60, stream, "the recovery notice")
    finally:
        stream.send_signal(signal.SIGTERM)
        stream.wait(timeout=120)
    notices = [line for line in Path(log.name).read_text().splitlines() if line.strip()]
    assert len(notices) == 2, notices
    assert notices[0].startswith(f"lakehouse: Kafka at {kafka_broker.bootstrap} is not reachable")
    assert "answers again" in notices[1]

    finished = subprocess.run([*command[:2], "--once", "--source", "kafka"], env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    positions = _bronze_positions(home)
    assert len(positions) == len(set(positions)) == len(lines), "every message in bronze exactly once"

    produced = tmp_path / "produced.jsonl"
    produced.write_text("".join(line + "\n" for line in lines))
    golden = {
        (user, start.astimezone(UTC)): (total, n)
        for user, start, total, n in duckdb.execute(DUCKDB_GOLDEN, [str(produced)]).fetchall()
    }
    gold = DeltaTable(str(home / "tables" / "gold" / "user_spend_5m")).to_pyarrow_table().to_pylist()
    assert {(r["user_id"], r["window_start"]): (r["total_amount"], r["event_count"]) for r in gold} == golden

    # The planted secret is in no log, status file, checkpoint or table of the run, nor in the broker's logs,
    # nor in what the commands printed.
    status = subprocess.run([LAKEHOUSE, "kafka", "status", "--json"], env=env, capture_output=True, text=True)
    assert status.returncode == 0 and '"sasl.password": "***"' in status.stdout, status.stdout
    for output in (finished.stdout, finished.stderr, Path(log.name).read_text(), status.stdout):
        assert PLANTED_SECRET not in output
    assert files_holding(tmp_path, PLANTED_SECRET) == []
    assert files_holding(Path(kafka_broker.env["LAKEHOUSE_HOME"]), PLANTED_SECRET) == []


def test_kafka_sensor_runs_the_streams_from_kafka_with_lag_as_metadata(spark, kafka_settings) -> None:
    """The daemon's view: the sensor reads its `lakehouse` resource (the home, the broker) and its `kafka`
    resource (the topic), asks the broker, and requests `lakehouse_once` with bronze reading Kafka; the run
    records the lag per partition."""
    import dagster as dg

    from orchestration import kafka, pipeline, quality
    from orchestration.resources import KafkaSourceResource, lakehouse_resources

    settings = kafka_settings
    # The lakehouse's own settings keep the default topic: the `kafka` resource names this test's.
    lakehouse = replace(settings, kafka=replace(settings.kafka, topic="events"))
    resources = {**lakehouse_resources(lakehouse), "kafka": KafkaSourceResource(topic=settings.kafka.topic)}
    defs = dg.Definitions.merge(
        *(domain.build_defs(lakehouse) for domain in (pipeline, quality, kafka)),
        dg.Definitions(resources=resources, executor=dg.in_process_executor),
    )
    # Resolved inside the test instance: Dagster's definitions load context looks up the current instance.
    with dg.instance_for_test() as instance:
        kafka_sensor = defs.resolve_sensor_def("kafka_sensor")

        def tick(cursor: str | None = None):
            with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
                return kafka_sensor(context)

        empty = tick()
        assert isinstance(empty, dg.SkipReason) and "no new messages" in empty.skip_message

        lines = [
            f'{{"event_id": "k{n}", "user_id": "u{n % 4}", "event_time": "2024-01-01T10:0{n % 10}:00Z", "amount": {n}}}'
            for n in range(40)
        ]
        produce(settings.kafka.bootstrap_servers, settings.kafka.topic, lines)
        result = tick()
        assert isinstance(result, dg.SensorResult) and len(result.run_requests) == 1
        request = result.run_requests[0]
        assert request.run_config == kafka.KAFKA_RUN_CONFIG and request.tags["lakehouse/kafka_lag"] == "40"

        run = defs.resolve_job_def("lakehouse_once").execute_in_process(
            run_config=request.run_config, instance=instance
        )
        assert run.success
        bronze = next(
            e.materialization.metadata
            for e in run.get_asset_materialization_events()
            if e.asset_key.to_user_string() == "bronze/events"
        )
        assert bronze["rows_written"].value == 40
        assert {k: v.value for k, v in bronze.items() if k.startswith("kafka_lag")} == {
            "kafka_lag": 0.0,
            "kafka_lag_partition_0": 0.0,
            "kafka_lag_partition_1": 0.0,
            "kafka_lag_partition_2": 0.0,
        }
        gold = read_table(spark, settings, tumbling_table(settings)).collect()
        assert sum(r.event_count for r in gold) == 40

        again = tick(result.cursor)
        assert isinstance(again, dg.SkipReason) and "no new messages" in again.skip_message
