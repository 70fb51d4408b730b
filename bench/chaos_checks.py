"""The checks after a chaos run (``bench.chaos``): the contract's invariants over the tables against the
plain-Python reference (``tests/reference.py``: every landing line and every message of the topic, read here
by a consumer of its own), and Dagster's state (runs ended, concurrency slots free, sensors' cursors)."""

import os
from datetime import UTC, datetime
from pathlib import Path

from dagster import DagsterInstance
from deltalake import DeltaTable

from bench.concurrency import query_table
from bench.dagster_api import ENDED, LANDING_SENSOR, LATE_DATA_SENSOR, DagsterApi
from tests.reference import (
    broken_correction_chains,
    distinct_valid_events,
    hopping_totals,
    landing_lines,
    session_totals,
    window_totals,
)
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_CORRECTIONS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    firings_table,
    global_table,
    hopping_table,
    sessions_table,
    tumbling_table,
)
from warehouse.locks import lock_holder
from warehouse.settings import Settings


def table_checks(settings: Settings) -> dict[str, object]:
    lines = landing_lines(settings.landing_dir) + topic_lines(settings)
    checks: dict[str, object] = {"lines_received": len(lines)}
    bronze = _count(BRONZE_EVENTS.path(settings))
    parts = sum(_count(t.path(settings)) for t in (SILVER_EVENTS, SILVER_QUARANTINE, SILVER_DUPLICATES))
    checks["bronze_rows"] = bronze
    checks["invariant_1_bronze_holds_every_line_once"] = bronze == len(lines)
    checks["invariant_1_silver_quarantine_duplicates_equal_bronze"] = parts == bronze
    silver = query_table(SILVER_EVENTS.path(settings), "SELECT count(*), count(DISTINCT event_id) FROM t")[0]
    checks["invariant_1_silver_holds_each_valid_event_once"] = tuple(silver) == (distinct_valid_events(lines),) * 2
    windows = window_totals(lines, settings.windows.minutes)
    gold = _keyed(tumbling_table(settings).path(settings), "window_start", "total_amount", "event_count")
    checks["gold_windows"] = len(gold)
    checks["invariant_2_gold_5m_equals_reference"] = _agree(gold, windows)
    broken = broken_correction_chains(
        DeltaTable(str(GOLD_CORRECTIONS.path(settings))).to_pyarrow_table().to_pylist(),
        DeltaTable(str(tumbling_table(settings).path(settings))).to_pyarrow_table().to_pylist(),
        tumbling_table(settings).name,
    )
    checks["gold_5m_corrections_chain_revision_by_revision"] = not broken
    if settings.keeps("hopping"):
        hours = _keyed(hopping_table(settings).path(settings), "window_start", "total_amount", "event_count")
        checks["gold_hopping_equals_reference"] = _agree(hours, hopping_totals(windows))
    if settings.keeps("sessions"):
        path = sessions_table(settings).path(settings)
        sessions = _keyed(path, "session_start", "session_end", "total_amount", "event_count")
        expected = session_totals(lines, settings.windows.session_gap_minutes)
        checks["gold_sessions_equal_reference"] = _agree(sessions, expected)
    if settings.keeps("global"):
        per_user: dict[str, list] = {}
        for (user, _start), (total, count) in windows.items():
            figures = per_user.setdefault(user, [0, 0])
            figures[0], figures[1] = figures[0] + count, figures[1] + total
        rows = query_table(global_table(settings).path(settings), "SELECT user_id, event_count, total_amount FROM t")
        checks["gold_global_equals_reference"] = _agree({u: [c, t] for u, c, t in rows}, per_user)
    if settings.keeps("firings"):
        newest = query_table(
            firings_table(settings).path(settings),
            "SELECT t.user_id, t.window_start, t.total_amount, t.event_count FROM t JOIN (SELECT user_id, "
            "window_start, max(revision) AS r FROM t GROUP BY user_id, window_start) n ON t.user_id = n.user_id "
            "AND t.window_start = n.window_start AND t.revision = n.r",
        )
        checks["gold_firings_newest_equal_gold"] = _agree(
            {(u, s.astimezone(UTC)): (t, c) for u, s, t, c in newest}, gold
        )
    return checks


def dagster_checks(settings: Settings, dagster: DagsterApi, dagster_home: str) -> dict[str, object]:
    runs = dagster.runs()
    checks: dict[str, object] = {
        "dagster_runs": len(runs),
        "dagster_runs_by_status": tally(r["status"] for r in runs),
        "no_dagster_run_left_started": all(r["status"] in ENDED for r in runs),
    }
    instance = DagsterInstance.from_config(dagster_home)
    try:
        storage = instance.event_log_storage
        infos = [storage.get_concurrency_info(key) for key in storage.get_concurrency_keys()]
        claimed = {info.concurrency_key: len(info.claimed_slots) + len(info.pending_steps) for info in infos}
    finally:
        instance.dispose()
    checks["concurrency_slots_claimed_or_pending"] = {key: n for key, n in claimed.items() if n}
    checks["no_concurrency_slot_claimed_or_pending"] = not any(claimed.values())
    cursor = dagster.cursor(LANDING_SENSOR)
    stamp, _, name = cursor.partition("/")
    named = settings.landing_dir / name
    checks["landing_sensor_cursor_names_a_landed_file"] = (
        bool(name) and stamp.isdigit() and named.is_file() and int(stamp) == named.stat().st_mtime_ns
    )
    cursor = dagster.cursor(LATE_DATA_SENSOR)
    version, _, table_id = cursor.partition("@")
    table = DeltaTable(str(SILVER_LATE_EVENTS.path(settings)))
    checks["late_data_sensor_cursor_within_its_table"] = version.isdigit() and (
        table_id != table.metadata().id or int(version) <= table.version()
    )
    locks = sorted(p.stem for p in (settings.home / "locks").glob("*.lock"))
    checks["locks_held_after_the_run"] = [n for n in locks if lock_holder(settings, n) is not None]
    checks["no_lock_left_held"] = not checks["locks_held_after_the_run"]
    return checks


def topic_lines(settings: Settings) -> list[str]:
    """Every message of the topic, partition by partition in offset order, read by a consumer of its own."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from runtime.sources.kafka_client import client_config

    topic = settings.kafka.topic
    consumer = Consumer({**client_config(settings), "group.id": f"chaos-check-{os.getpid()}",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        by_partition: dict[int, list[tuple[int, str]]] = {p: [] for p in partitions}
        remaining = sum(high - low for low, high in ends.values())
        while remaining > 0:
            for message in consumer.consume(1000, timeout=10):
                if message.error() is None and message.offset() < ends[message.partition()][1]:
                    by_partition[message.partition()].append(
                        (message.offset(), message.value().decode("utf-8", "surrogateescape"))
                    )
                    remaining -= 1
    finally:
        consumer.close()
    return [line for p in partitions for _, line in sorted(by_partition[p])]


def _count(path: Path) -> int:
    return int(query_table(path, "SELECT count(*) FROM t")[0][0])


def _keyed(path: Path, *columns: str) -> dict:
    """``(user_id, first column) → the other columns``, timestamps in UTC."""
    rows = query_table(path, f"SELECT user_id, {', '.join(columns)} FROM t")
    utc = [tuple(v.astimezone(UTC) if isinstance(v, datetime) else v for v in row) for row in rows]
    return {(row[0], row[1]): tuple(row[2:]) for row in utc}


def _agree(found: dict, expected: dict) -> bool:
    """Whether the two agree on every key (and print a few keys where they do not)."""
    wrong = [key for key in found.keys() | expected.keys() if _plain(found.get(key)) != _plain(expected.get(key))]
    for key in sorted(wrong, key=repr)[:5]:
        print(f"    differs at {key}: table {found.get(key)} reference {expected.get(key)}")
    return not wrong


def _plain(value: object) -> object:
    return tuple(value) if isinstance(value, list | tuple) else value


def tally(values) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
