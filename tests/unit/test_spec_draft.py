"""Drafting a pipeline spec from sample JSON Lines (``warehouse/spec_draft.py``) without Spark.

Every expectation below follows from the inference rules in the module's docstrings, worked out by hand for
made-up samples: the draft must load with ``parse_spec`` (and ``load_spec`` from a file), and its id, time,
key, field types and measures must be the ones the rules pick.
"""

import json
from pathlib import Path

import pytest
import yaml

from warehouse.pipelines import load_spec, parse_spec
from warehouse.spec_draft import SCHEMA_LINE, draft_spec

STATUSES = ("scanned", "in_transit", "delivered")


def parcel_lines(count: int = 40) -> list[str]:
    """Parcel scans: unique parcel ids, 4 depots, epoch-millisecond times, 3-decimal weights, 2-decimal fees,
    3 statuses, a whole number of pieces and an optional free-text note in every other line. The numbers are
    written by hand so the JSON text keeps its decimals (``4.50`` stays two places)."""
    lines = []
    for i in range(count):
        note = f', "note": "handle with care #{i}"' if i % 2 == 0 else ""
        lines.append(
            f'{{"parcel_id": "P{i:05d}", "depot_id": "depot-{i % 4}", "scanned_at": {1_717_200_000_000 + i * 1500}, '
            f'"weight_kg": {1 + i * 0.125:.3f}, "fee_amount": {4 + i % 7}.{(i * 5) % 100:02d}, '
            f'"status": "{STATUSES[i % 3]}", "pieces": {1 + i % 3}{note}}}'
        )
    return lines


def test_parcels_draft_loads_and_proposes_what_the_rules_say() -> None:
    lines = [*parcel_lines(), "", "[1, 2, 3]", "not json at all"]
    text, notes = draft_spec("parcels", lines, origin="parcels.jsonl")

    assert text.splitlines()[0] == SCHEMA_LINE
    assert "parcels.jsonl" in text.splitlines()[1] and "review" in text.splitlines()[1]
    data = yaml.safe_load(text)
    order = ["name", "description", "source", "fields", "id", "time", "keys", "measures", "windows", "quality"]
    assert list(data) == order
    spec = parse_spec(data, "parcels.jsonl")

    assert spec.name == "parcels"
    assert spec.id == "parcel_id"
    assert spec.time.field == "scanned_at"
    assert spec.time.formats == ["epoch_millis"]
    assert spec.keys == ["depot_id"]
    fields = spec.fields
    assert list(fields) == [
        "parcel_id",
        "depot_id",
        "scanned_at",
        "weight_kg",
        "fee_amount",
        "status",
        "pieces",
        "note",
    ]
    assert fields["parcel_id"].type == "string" and fields["parcel_id"].required
    assert fields["scanned_at"].type == "timestamp" and fields["scanned_at"].required
    assert fields["weight_kg"].type == "double"  # three decimals: not money
    assert fields["fee_amount"].type == "decimal(18,2)"  # two decimals and a money name
    assert fields["pieces"].type == "integer"
    assert fields["status"].allowed == ["delivered", "in_transit", "scanned"]
    assert fields["depot_id"].allowed == ["depot-0", "depot-1", "depot-2", "depot-3"]
    assert fields["note"].type == "string" and not fields["note"].required
    assert fields["note"].allowed is None  # 20 distinct notes: no allowed list
    assert fields["parcel_id"].allowed is None
    assert [(m.name, m.fn, m.field) for m in spec.measures] == [
        ("avg_weight_kg", "avg", "weight_kg"),
        ("max_weight_kg", "max", "weight_kg"),
        ("total_fee_amount", "sum", "fee_amount"),
        ("total_pieces", "sum", "pieces"),
    ]
    assert spec.source.default == "landing"
    assert spec.windows.tumbling == "5m"
    assert (spec.windows.watermark.delay, spec.windows.watermark.policy) == ("2m", "fixed")
    assert spec.windows.allowed_lateness == "1m"

    marked = {line.split(":")[0] for line in text.splitlines() if "# review:" in line}
    assert marked == {"id", "time", "keys"}
    assert "id: parcel_id  # review: unique in 40 of 40 lines" in text.splitlines()
    assert "id field proposed: parcel_id (unique in 40 of 40 lines) — review" in notes
    assert "key proposed: depot_id (4 distinct values in 40 lines) — review" in notes
    assert "time field proposed: scanned_at (epoch_millis) — review" in notes
    assert "2 of 42 lines are not JSON objects and were left out (first: line 42)" in notes
    assert "field status: 3 distinct values, allowed: proposed — review" in notes


def test_iso_strings_are_iso8601_timestamps_and_epoch_seconds_need_a_time_name() -> None:
    stamps = [
        "2024-05-01T10:00:00Z",
        "2024-05-01 10:00:01+02:00",
        "2024-05-01T10:00:02.123",
        "2024-05-01T10:00:03-0500",
    ]
    lines = [
        json.dumps(
            {
                "visit_id": f"v{i}",
                "page": f"/p{i % 3}",
                "happened_at": stamps[i % 4],
                "logged_ts": 1_714_557_600 + i,
                "quantity": 1_714_557_600 + i,
                "day": "2024-05-01",
            }
        )
        for i in range(12)
    ]
    text, notes = draft_spec("visits", lines)
    spec = parse_spec(yaml.safe_load(text), "sample")

    assert spec.time.field == "happened_at"  # *_at is preferred over a ts name
    assert spec.time.formats == ["iso8601"]
    assert spec.fields["logged_ts"].type == "timestamp"  # epoch seconds and a time-like name
    assert spec.fields["quantity"].type == "integer"  # the same numbers, no time-like name
    assert spec.fields["day"].type == "string"  # a date without a time is not a date-time
    assert spec.id == "visit_id"
    assert spec.keys == ["page"]
    assert "time field proposed: happened_at (iso8601, other timestamps: logged_ts (epoch_seconds)) — review" in notes
    assert [m.name for m in spec.measures] == ["total_quantity"]


def test_money_needs_two_decimals_and_a_money_name_and_mixed_types_are_strings() -> None:
    lines = [
        json.dumps(
            {"id": i, "shop": f"s{i % 2}", "sold_at": 1_717_200_000_000 + i, "code": "x" if i % 2 else 7}
        ).removesuffix("}")
        + f', "unit_price": 2.{i % 10}05, "total": {i}.5, "ratio": 0.{i + 1}}}'
        for i in range(6)
    ]
    text, notes = draft_spec("sales", lines)
    spec = parse_spec(yaml.safe_load(text), "sample")

    assert spec.fields["unit_price"].type == "double"  # a money name, but three decimals
    assert spec.fields["total"].type == "decimal(18,2)"
    assert spec.fields["ratio"].type == "double"  # two decimals at most, but not a money name
    assert spec.fields["code"].type == "string"
    assert "field code has mixed types (integer, string): declared a string — review" in notes
    assert spec.id == "id" and spec.fields["id"].type == "integer"
    assert spec.keys == ["shop"]  # code repeats too, but mixed types are never proposed


def test_no_json_object_in_the_sample_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^no line of the sample is a JSON object \(3 non-blank lines read\)$"):
        draft_spec("parcels", ["[1, 2]", "", "not json", "42"])


def test_no_unique_field_means_no_id() -> None:
    lines = [json.dumps({"depot_id": f"d{i % 2}", "scanned_at": 1_717_200_000_000 + i % 3}) for i in range(6)]
    with pytest.raises(ValueError, match=r"found no id \(a required string or integer field unique") as caught:
        draft_spec("parcels", lines)
    assert "\n" not in str(caught.value)
    assert "time field" not in str(caught.value) and "key" not in str(caught.value)


@pytest.mark.parametrize("name", ["Parcels", "1parcels", "parcel-scans", "p" * 32, ""])
def test_a_bad_pipeline_name_is_an_error(name: str) -> None:
    with pytest.raises(ValueError, match=r"pipeline name .* got"):
        draft_spec(name, parcel_lines())


def test_nested_values_and_undeclarable_names_are_skipped_with_a_note() -> None:
    lines = [
        line.removesuffix("}")
        + f', "dims": {{"l": {i}}}, "tags": ["a"], "Depot Name": "x", "extra": {"[1]" if i else 1}}}'
        for i, line in enumerate(parcel_lines(20))
    ]
    text, notes = draft_spec("parcels", lines)
    spec = parse_spec(yaml.safe_load(text), "sample")

    assert not {"dims", "tags", "Depot Name", "extra"} & set(spec.fields)
    assert "field dims skipped: nested object or array, kept in bronze, not declared" in notes
    assert "field tags skipped: nested object or array, kept in bronze, not declared" in notes
    assert "field extra skipped: nested object or array, kept in bronze, not declared" in notes  # nested in some
    assert any(note.startswith("field 'Depot Name' skipped: not a declarable name") for note in notes)
    assert spec.id == "parcel_id"


def test_the_draft_written_as_name_yaml_loads_with_load_spec(tmp_path: Path) -> None:
    text, _ = draft_spec("parcels", parcel_lines(), origin="parcels.jsonl")
    path = tmp_path / "parcels.yaml"
    path.write_text(text, encoding="utf-8")

    spec = load_spec(path)
    assert spec.name == "parcels"
    assert (spec.id, spec.time.field, spec.keys) == ("parcel_id", "scanned_at", ["depot_id"])
    assert spec.fields["fee_amount"].decimal_places == (18, 2)


def test_the_id_prefers_an_id_name_then_the_pipelines_noun_then_the_shortest_name() -> None:
    lines = [
        json.dumps(
            {
                "seq": i,
                "trace_id": f"t{i}",
                "parcel_id": f"p{i}",
                "depot_id": f"d{i % 2}",
                "at_ts": 1_717_200_000_000 + i,
            }
        )
        for i in range(6)
    ]
    text, _ = draft_spec("parcels", lines)
    assert parse_spec(yaml.safe_load(text), "sample").id == "parcel_id"  # trace_id is shorter, seq has no _id
    text, _ = draft_spec("shipments", lines)
    assert parse_spec(yaml.safe_load(text), "sample").id == "trace_id"  # no noun match: the shortest _id name
