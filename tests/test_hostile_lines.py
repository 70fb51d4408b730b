"""Hostile input through the real landing stream: every line ends as one silver event or one quarantined
line with the right reason, bronze keeps every byte, and the streams go on.

Goldens: the reasons are named by hand from the event rules; the valid events are the plain-Python
reference's (`tests/reference.py`) reading of the same landing files.
"""

import os
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from runtime.runner import run_once
from runtime.sources.landing import place_in_landing
from tests.lines import event, land
from tests.reference import EPOCH, landing_lines, parse
from warehouse.catalog import BRONZE_EVENTS, SILVER_DUPLICATES, SILVER_EVENTS, SILVER_QUARANTINE
from warehouse.delta import read_table
from warehouse.settings import Settings

#: A file of this many empty lines (`make fuzz` runs the issue's million; `make test` a fifth of it).
EMPTY_LINES = int(os.environ.get("LAKEHOUSE_FUZZ_EMPTY_LINES", "200000"))
GOOD = [event(f"g{n}", "A", f"2024-01-01T10:0{n}:00Z", f"{n}.25") for n in range(4)]


def _place_bytes(settings: Settings, name: str, data: bytes) -> Path:
    """A landing file holding exactly ``data`` (placed atomically, like `lakehouse ingest`)."""

    def write(handle) -> None:
        handle.flush()
        handle.buffer.write(data)

    return place_in_landing(settings, name, write)


def _reasons(spark: SparkSession, settings: Settings, name: str) -> dict[int, str]:
    rows = read_table(spark, settings, SILVER_QUARANTINE).where(F.col("source_position").contains(name)).collect()
    return {int(r.source_position.rsplit("#", 1)[1]): r.reason for r in rows}


@pytest.mark.system
def test_hostile_files_each_line_gets_its_verdict_and_the_stream_goes_on(
    spark: SparkSession, settings: Settings
) -> None:
    settings = replace(settings, streams=replace(settings.streams, max_line_bytes=1_048_576))
    huge = '{"event_id": "h1", "user_id": "A", "event_time": 0, "amount": 1, "pad": "' + "x" * 10_000_000 + '"}'
    deep = '{"event_id": "d1", "user_id": "A", "event_time": 0, "amount": 1, "deep": ' + "[" * 10_000 + "]" * 10_000
    land(settings, "huge.jsonl", [GOOD[0], huge, GOOD[1]])
    land(settings, "deep.jsonl", [deep + "}", GOOD[2]])
    _place_bytes(settings, "empty.jsonl", b"\n" * EMPTY_LINES)
    _place_bytes(settings, "no-final-newline.jsonl", GOOD[3].encode())
    # A new optional field is just kept; a known field of another type is quarantined.
    evolved = '{"event_id": "n1", "user_id": "B", "event_time": 0, "amount": 2, "device": {"os": "x", "v": [1]}}'
    retyped = '{"event_id": "n2", "user_id": "B", "event_time": 0, "amount": {"value": 2, "currency": "EUR"}}'
    land(settings, "evolved.jsonl", [evolved, retyped])
    run_once(spark, settings)

    assert _reasons(spark, settings, "huge.jsonl") == {2: "line_too_long"}
    assert _reasons(spark, settings, "deep.jsonl") == {1: "not_json"}
    empty = read_table(spark, settings, SILVER_QUARANTINE).where(F.col("source_position").contains("empty.jsonl"))
    assert {r.reason: r[1] for r in empty.groupBy("reason").count().collect()} == {"empty_line": EMPTY_LINES}
    assert _reasons(spark, settings, "no-final-newline.jsonl") == {}
    assert _reasons(spark, settings, "evolved.jsonl") == {2: "amount_not_number"}
    bronze = read_table(spark, settings, BRONZE_EVENTS)
    # The 10 MB line is in bronze whole, and the new field stays in the raw line.
    assert bronze.where(F.length("raw") == len(huge)).count() == 1
    assert bronze.where(F.col("raw") == evolved).count() == 1

    # The streams go on: a file after the hostile ones is read like any other.
    land(settings, "after.jsonl", [event("z1", "C", "2024-01-01T11:00:00Z", "7")])
    run_once(spark, settings)
    _assert_silver_is_the_reference(spark, settings)


def test_not_utf8_bytes_reach_bronze_and_quarantine_byte_for_byte(spark: SparkSession, settings: Settings) -> None:
    bad = [
        b'{"event_id": "u1", "user_id": "caf\xe9", "event_time": 0, "amount": 1}',  # Latin-1, not UTF-8
        b"\xff\xfe{}",
        b'{"event_id": "u2", "user_id": "\xed\xa0\x80", "event_time": 0, "amount": 1}',  # an encoded surrogate
        b'{"event_id": "u3", "user_id": "\xc3", "event_time": 0, "amount": 1}',  # a sequence cut short
    ]
    good = '{"event_id": "u4", "user_id": "café ☕", "event_time": 0, "amount": 1}'.encode()
    _place_bytes(settings, "bytes.jsonl", b"\n".join([*bad, good]) + b"\n")
    run_once(spark, settings)

    bronze = {r.source_line: r for r in read_table(spark, settings, BRONZE_EVENTS).collect()}
    assert [bronze[n].raw_bytes for n in range(1, 6)] == [*bad, None]
    assert bronze[5].raw == good.decode()
    assert bronze[1].raw == bad[0].decode("utf-8", "replace")  # readable, and marked as replaced
    quarantine = {
        int(r.source_position.rsplit("#", 1)[1]): r for r in read_table(spark, settings, SILVER_QUARANTINE).collect()
    }
    assert {n: r.reason for n, r in quarantine.items()} == {n: "not_utf8" for n in range(1, 5)}
    assert [quarantine[n].raw_bytes for n in range(1, 5)] == bad
    assert [r.user_id for r in read_table(spark, settings, SILVER_EVENTS).collect()] == ["café ☕"]
    _assert_silver_is_the_reference(spark, settings)


def test_bom_and_crlf_files_give_the_same_events_as_lf(spark: SparkSession, settings: Settings) -> None:
    lines = [*GOOD, '{"event_id": "q1", "user_id": "", "event_time": 0, "amount": 1}']
    _place_bytes(settings, "plain.jsonl", "".join(line + "\n" for line in lines).encode())
    _place_bytes(settings, "bom-crlf.jsonl", b"\xef\xbb\xbf" + "".join(line + "\r\n" for line in lines).encode())
    _place_bytes(settings, "crlf-no-final.jsonl", "\r\n".join(lines).encode())
    run_once(spark, settings)

    bronze = read_table(spark, settings, BRONZE_EVENTS).collect()
    by_file: dict[str, list[str]] = {}
    for row in sorted(bronze, key=lambda r: r.source_line):
        by_file.setdefault(Path(row.source_file).name.split("-", 1)[1], []).append(row.raw)
    assert by_file == {"plain.jsonl": lines, "bom-crlf.jsonl": lines, "crlf-no-final.jsonl": lines}
    # The first file's events count; the other two files' are duplicates with the same payload.
    assert sorted(r.event_id for r in read_table(spark, settings, SILVER_EVENTS).collect()) == ["g0", "g1", "g2", "g3"]
    duplicates = read_table(spark, settings, SILVER_DUPLICATES).collect()
    assert len(duplicates) == 8 and not any(r.conflicting for r in duplicates)
    assert Counter(r.reason for r in read_table(spark, settings, SILVER_QUARANTINE).collect()) == {"user_id_empty": 3}
    _assert_silver_is_the_reference(spark, settings)


def _assert_silver_is_the_reference(spark: SparkSession, settings: Settings) -> None:
    """silver.events holds the first arrival of each event the reference finds valid, with its exact values;
    every other line is a duplicate or quarantined."""
    lines = landing_lines(settings.landing_dir)
    expected: dict[str, tuple] = {}
    for line in lines:
        found = parse(line, settings.streams.max_line_bytes)
        if found is not None and found["event_id"] not in expected:
            micros = (found["event_time"] - EPOCH) // timedelta(microseconds=1)
            expected[found["event_id"]] = (found["user_id"], micros, found["amount"])
    silver = {
        r.event_id: (r.user_id, r.micros, r.amount)
        for r in read_table(spark, settings, SILVER_EVENTS)
        .select("*", F.unix_micros("event_time").alias("micros"))
        .collect()
    }
    assert silver == expected
    counts = [read_table(spark, settings, t).count() for t in (SILVER_EVENTS, SILVER_DUPLICATES, SILVER_QUARANTINE)]
    assert sum(counts) == read_table(spark, settings, BRONZE_EVENTS).count() == len(lines)
