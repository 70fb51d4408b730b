"""A declared pipeline's event rules (transforms/events.py driven by pipelines/readings.yaml): every reason its
spec gives has a line that breaks that rule alone, and a valid line gets exactly its typed values."""

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from transforms.events import line_text, parse_events, reasons
from warehouse.pipelines import declared_pipelines
from warehouse.settings import StreamSettings

pytestmark = pytest.mark.quick
SPEC = declared_pipelines()["readings"]
VALID = '{"reading_id": "r1", "device_id": "dev-7", "site": "north", "read_at": 1704103200000, "temperature": 21.5'


def line(**changes: str) -> str:
    """A valid reading with fields replaced by JSON text (``None`` drops a field)."""
    fields = {
        "reading_id": '"r1"',
        "device_id": '"dev-7"',
        "site": '"north"',
        "read_at": "1704103200000",
        "temperature": "21.5",
        "battery": "80",
        "calibrated": "true",
    }
    fields.update(changes)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items() if v is not None) + "}"


BROKEN = {
    "not_utf8": b'{"reading_id": "\xff"}',
    "line_too_long": "{" + " " * 2_000_000 + "}",
    "empty_line": "  ",
    "temperature_not_finite": line(temperature="NaN"),
    "not_json": '{"reading_id": ',
    "not_object": "[1, 2]",
    "reading_id_missing": line(reading_id=None),
    "reading_id_not_string": line(reading_id="17"),
    "reading_id_empty": line(reading_id='" "'),
    "reading_id_too_long": line(reading_id='"' + "r" * 65 + '"'),
    "device_id_missing": line(device_id="null"),
    "device_id_not_string": line(device_id="7"),
    "device_id_empty": line(device_id='""'),
    "device_id_no_match": line(device_id='"dev-7x"'),
    "site_missing": line(site=None),
    "site_not_string": line(site="true"),
    "site_empty": line(site='"\\t"'),
    "site_not_allowed": line(site='"North"'),
    "read_at_missing": line(read_at=None),
    "read_at_wrong_type": line(read_at='"2024-01-01T10:00:00Z"'),
    "read_at_invalid": line(read_at="253402300800000"),
    "temperature_missing": line(temperature=None),
    "temperature_not_number": line(temperature='"21.5"'),
    "temperature_below_min": line(temperature="-80.5"),
    "temperature_above_max": line(temperature="150.01"),
    "battery_not_integer": line(battery="80.5"),
    "battery_below_min": line(battery="-1"),
    "battery_above_max": line(battery="101"),
    "calibrated_not_boolean": line(calibrated='"yes"'),
}


def _parse(spark, lines: list[str | bytes]) -> list:
    received = [(i, text if isinstance(text, bytes) else text.encode()) for i, text in enumerate(lines)]
    raw, raw_bytes = line_text(F.col("line"))
    frame = spark.createDataFrame(received, "n int, line binary").select(
        "n", raw.alias("raw"), raw_bytes.alias("raw_bytes")
    )
    return parse_events(frame, StreamSettings.max_line_bytes, spec=SPEC).orderBy("n").collect()


def test_every_reason_of_the_spec_has_a_line_breaking_only_that_rule() -> None:
    assert list(BROKEN) == list(reasons(SPEC))


def test_each_broken_rule_gets_its_own_reason(spark) -> None:
    rows = _parse(spark, list(BROKEN.values()))
    assert {r: row.reason for r, row in zip(BROKEN, rows, strict=True)} == {r: r for r in BROKEN}
    assert all(row.reading_id is None and row.temperature is None for row in rows)


def test_valid_lines_get_their_typed_values(spark) -> None:
    rows = _parse(
        spark,
        [
            line(),
            line(battery=None, calibrated="null", temperature="-80"),
            line(read_at="0", temperature="150", battery="0", site='"west"', device_id='"dev-123456"'),
        ],
    )
    assert [row.reason for row in rows] == [None, None, None]
    first, second, third = rows
    assert (first.reading_id, first.device_id, first.site) == ("r1", "dev-7", "north")
    assert first.read_at == datetime(2024, 1, 1, 10, 0, tzinfo=UTC).replace(tzinfo=None)
    assert (first.temperature, first.battery, first.calibrated) == (21.5, 80, True)
    assert (second.battery, second.calibrated, second.temperature) == (None, None, -80.0)
    assert (third.read_at, third.temperature, third.battery, third.site) == (datetime(1970, 1, 1), 150.0, 0, "west")
    assert len({row.payload_hash for row in rows}) == 3
