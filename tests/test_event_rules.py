"""Unit tests of the contract's event rules, window alignment, exact money and the watermark rule."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from transforms.events import line_text, parse_events, reasons
from transforms.gold.tumbling import Watermark, assign_windows
from warehouse.settings import StreamSettings

#: Seconds each, no process of their own: part of `make test-fast`.
pytestmark = pytest.mark.quick

GOOD = '"event_id": "e1", "user_id": "u1", "event_time": "2024-01-01T10:00:00Z", "amount": 1'

# One line per quarantine reason, each breaking exactly that rule.
BROKEN: dict[str, str | bytes] = {
    "not_utf8": b'{"event_id": "e1", "user_id": "u\xff", "event_time": 0, "amount": 1}',
    "line_too_long": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1, "note": "'
    + "x" * StreamSettings.max_line_bytes
    + '"}',
    "empty_line": "   ",
    "amount_not_finite": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": NaN}',
    "not_json": '{"event_id": "e1", "user_id": ',
    "not_object": '["e1", "u1"]',
    "event_id_missing": '{"user_id": "u1", "event_time": 0, "amount": 1}',
    "event_id_not_string": '{"event_id": 17, "user_id": "u1", "event_time": 0, "amount": 1}',
    "event_id_empty": '{"event_id": "", "user_id": "u1", "event_time": 0, "amount": 1}',
    "user_id_missing": '{"event_id": "e1", "user_id": null, "event_time": 0, "amount": 1}',
    "user_id_not_string": '{"event_id": "e1", "user_id": ["u1"], "event_time": 0, "amount": 1}',
    "user_id_empty": '{"event_id": "e1", "user_id": "  ", "event_time": 0, "amount": 1}',
    "event_time_missing": '{"event_id": "e1", "user_id": "u1", "amount": 1}',
    "event_time_wrong_type": '{"event_id": "e1", "user_id": "u1", "event_time": 1.5, "amount": 1}',
    "event_time_invalid": '{"event_id": "e1", "user_id": "u1", "event_time": "yesterday", "amount": 1}',
    "amount_missing": '{"event_id": "e1", "user_id": "u1", "event_time": 0}',
    "amount_not_number": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": "12.50"}',
    # Two numbers keyed "amount" that are the same double but not the same exact value.
    "amount_not_exact": '{"x": {"amount": 0.1}, "event_id": "e1", "user_id": "u1", "event_time": 0, '
    '"amount": 0.10000000000000000000000001e0}',
    "amount_out_of_range": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 12345678901234567}',
    "amount_too_precise": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1.005}',
    "event_type_not_string": '{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1, "event_type": 3}',
}

# More invalid lines, each with the reason it must get.
MORE_BROKEN = [
    ("", "empty_line"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": -Infinity}', "amount_not_finite"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1e999}', "amount_out_of_range"),
    ('{"event_id": "e1", "event_id": "e2", "user_id": "u1", "event_time": 0, "amount": 1}', "not_json"),
    ('"just a string"', "not_object"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": true}', "amount_not_number"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": null}', "amount_missing"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": {"v": 1}}', "amount_not_number"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": "2024-01-01", "amount": 1}', "event_time_invalid"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": "2024-13-01T00:00:00Z", "amount": 1}', "event_time_invalid"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": true, "amount": 1}', "event_time_wrong_type"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": "1704103200000", "amount": 1}', "event_time_invalid"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 999999999999999999, "amount": 1}', "event_time_invalid"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": "2024-01-01T24:00:00Z", "amount": 1}', "event_time_invalid"),
    ("\t \t", "empty_line"),
    ('{"event_id": "\\t", "user_id": "u1", "event_time": 0, "amount": 1}', "event_id_empty"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1.150000000000000000001e0}', "amount_too_precise"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1.' + "0" * 39 + "1}", "amount_too_precise"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 0.1e-400}', "amount_too_precise"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1e16}', "amount_out_of_range"),
    ('{"event_id": "e1", "user_id": "u1", "event_time": 0, "amount": 1' + "0" * 41 + "}", "amount_out_of_range"),
]

UTC_10 = datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
VALID = [
    # (line, event_time in UTC, amount, event_type)
    ("{" + GOOD + "}", UTC_10, Decimal("1.00"), None),
    (
        '{"event_id": "e", "user_id": "u", "event_time": "2024-01-01T12:00:00+02:00", "amount": 2.5}',
        UTC_10,
        "2.50",
        None,
    ),
    ('{"event_id": "e", "user_id": "u", "event_time": "2024-01-01T05:30:00-0430", "amount": 3}', UTC_10, "3.00", None),
    ('{"event_id": "e", "user_id": "u", "event_time": "2024-01-01T10:00:00", "amount": 0.1}', UTC_10, "0.10", None),
    (
        '{"event_id": "e", "user_id": "u", "event_time": "2024-01-01 10:00:00.000Z", "amount": -4.25}',
        UTC_10,
        "-4.25",
        None,
    ),
    ('{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 1.15e0}', UTC_10, "1.15", None),
    # A nested "amount" of another value, and the key spelt with escapes: the top-level number's text is found.
    (
        '{"x": {"amount": 5e0}, "event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 1.5e0}',
        UTC_10,
        "1.50",
        None,
    ),
    ('{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "\\u0061mount": 25e-1}', UTC_10, "2.50", None),
    ('{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 1.50, "x": [1]}', UTC_10, "1.50", None),
    (
        '{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 9999999999999999.99}',
        UTC_10,
        "9999999999999999.99",
        None,
    ),
    (
        '{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 5, "event_type": null}',
        UTC_10,
        "5.00",
        None,
    ),
    (
        '{"event_id": "e", "user_id": "u", "event_time": 1704103200000, "amount": 5, "event_type": "click"}',
        UTC_10,
        "5.00",
        "click",
    ),
]


def _parse(spark, lines: list[str | bytes]) -> list:
    """The rules' verdicts on lines received as these bytes (a str as its UTF-8), in order."""
    received = [(i, line if isinstance(line, bytes) else line.encode()) for i, line in enumerate(lines)]
    raw, raw_bytes = line_text(F.col("line"))
    frame = spark.createDataFrame(received, "n int, line binary").select(
        "n", raw.alias("raw"), raw_bytes.alias("raw_bytes")
    )
    return parse_events(frame, StreamSettings.max_line_bytes).orderBy("n").collect()


def test_every_reason_has_a_line_that_breaks_only_that_rule() -> None:
    assert list(BROKEN) == list(reasons())


def test_each_broken_rule_gets_its_own_reason(spark) -> None:
    reasons = list(BROKEN)
    rows = _parse(spark, [BROKEN[r] for r in reasons])
    assert {r: row.reason for r, row in zip(reasons, rows, strict=True)} == {r: r for r in reasons}
    assert all(row.event_id is None and row.amount is None for row in rows)


@pytest.mark.parametrize(("line", "reason"), MORE_BROKEN)
def test_more_invalid_lines(spark, line: str, reason: str) -> None:
    assert _parse(spark, [line])[0].reason == reason


def test_valid_lines_are_typed_exactly(spark) -> None:
    rows = _parse(spark, [line for line, *_ in VALID])
    for row, (line, moment, amount, event_type) in zip(rows, VALID, strict=True):
        assert row.reason is None, line
        assert row.event_time.replace(tzinfo=UTC) == moment, line
        assert row.amount == Decimal(amount), line
        assert row.event_type == event_type, line
        assert row.payload_hash is not None


def test_payload_hash_ignores_key_order_and_spacing(spark) -> None:
    a, b, c = _parse(
        spark,
        [
            '{"event_id": "e", "user_id": "u", "event_time": 0, "amount": 1.50}',
            '{"amount":1.5,"event_time":0,"user_id":"u","event_id":"e"}',
            '{"event_id": "e", "user_id": "u", "event_time": 0, "amount": 1.51}',
        ],
    )
    assert a.payload_hash == b.payload_hash != c.payload_hash


def test_money_sums_exactly(spark) -> None:
    rows = _parse(
        spark,
        [
            '{"event_id": "a", "user_id": "u", "event_time": 0, "amount": 0.1}',
            '{"event_id": "b", "user_id": "u", "event_time": 0, "amount": 0.2}',
        ],
    )
    assert sum((r.amount for r in rows), Decimal(0)) == Decimal("0.30")
    frame = spark.createDataFrame([(r.amount,) for r in rows], "amount decimal(18,2)")
    total = frame.agg(F.sum("amount").alias("total")).first().total
    assert total == Decimal("0.30") and str(total) == "0.30"


def test_windows_align_to_the_utc_epoch_at_boundaries(spark, settings) -> None:
    moments = [
        datetime(2024, 1, 1, 10, 0, 0, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 4, 59, 999000, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 5, 0, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 9, 59, 999999, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 7, 30, tzinfo=UTC),
        datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    frame = spark.createDataFrame([(i, m) for i, m in enumerate(moments)], "n int, event_time timestamp")
    rows = assign_windows(frame, settings).orderBy("n").collect()
    starts = [r.window_start.replace(tzinfo=UTC) for r in rows]
    assert starts == [
        datetime(2024, 1, 1, 10, 0, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 0, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 5, tzinfo=UTC),
        datetime(2024, 1, 1, 10, 5, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 5, tzinfo=UTC),
        datetime(2023, 12, 31, 23, 55, tzinfo=UTC),
    ]
    assert all(r.window_end - r.window_start == timedelta(minutes=5) for r in rows)


def test_watermark_is_max_minus_delay_and_never_moves_back() -> None:
    delay = timedelta(minutes=2)
    mark = Watermark().advance(None, delay)
    assert mark.watermark is None
    mark = mark.advance(UTC_10, delay)
    assert mark.watermark == UTC_10 - delay
    older = mark.advance(UTC_10 - timedelta(hours=1), delay)
    assert older == mark
    newer = mark.advance(UTC_10 + timedelta(minutes=7), delay)
    assert newer.watermark == UTC_10 + timedelta(minutes=5) and newer.max_event_time == UTC_10 + timedelta(minutes=7)
