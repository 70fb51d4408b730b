"""The plain-Python reference of the event rules (``tests/reference.py``) pinned by hand-written lines.

The reference is the golden of the Spark tests and the fuzzing; these lines pin it to the contract
(../shared/CONTRACT.md section 1, docs/guides/testing.md "Every line gets a verdict", docs/decisions.md 36)
without Spark: each valid line with its instant and exact amount worked out by hand, and lines breaking each
rule the reference can see (the quarantine reason each one would get is named beside it).
"""

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tests.reference import first_arrivals, landing_lines, parse, session_totals, window_totals

BASE = '"event_id": "e1", "user_id": "u1"'


def line(event_time: str = '"2024-01-01T10:00:00Z"', amount: str = "12.34", more: str = "") -> str:
    return f'{{{BASE}, "event_time": {event_time}, "amount": {amount}{more}}}'


TEN = datetime(2024, 1, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "instant", "amount"),
    [
        (line(), TEN, Decimal("12.34")),
        # Offsets: +hh:mm, +hhmm, +hh; no zone is UTC; lower-case t and z; a space for T; no seconds.
        (line('"2024-01-01T12:30:00+02:30"'), TEN, Decimal("12.34")),
        (line('"2024-01-01T05:00:00-0500"'), TEN, Decimal("12.34")),
        (line('"2024-01-01T11:00:00+01"'), TEN, Decimal("12.34")),
        (line('"2024-01-01T10:00:00"'), TEN, Decimal("12.34")),
        (line('"2024-01-01t10:00:00z"'), TEN, Decimal("12.34")),
        (line('"2024-01-01 10:00"'), TEN, Decimal("12.34")),
        (line('"2024-01-01T09:00:00-01:00"'), TEN, Decimal("12.34")),
        (line('"2024-01-01T10:00:00.123456Z"'), datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=UTC), Decimal("12.34")),
        (line('"2024-01-01T23:00:00+18:00"'), datetime(2024, 1, 1, 5, tzinfo=UTC), Decimal("12.34")),  # the widest
        # Epoch milliseconds: 1704067200 s is 2024-01-01T00:00:00Z, plus 10 h = 36000 s.
        (line("1704103200000"), TEN, Decimal("12.34")),
        (line("1704103200001"), datetime(2024, 1, 1, 10, 0, 0, 1000, tzinfo=UTC), Decimal("12.34")),
        (line("-1"), datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), Decimal("12.34")),
        # The last instant of year 9999, both ways.
        (line('"9999-12-31T23:59:59.999Z"'), datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), Decimal("12.34")),
        (line("253402300799999"), datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC), Decimal("12.34")),
        (line('"0001-01-01T00:00:00Z"'), datetime(1, 1, 1, tzinfo=UTC), Decimal("12.34")),
        # Amounts: integers, exponents with an exact 2-place value, 16 integer digits, negatives, zeros.
        (line(amount="5"), TEN, Decimal("5")),
        (line(amount="1.5e1"), TEN, Decimal("15")),
        (line(amount="1234E-2"), TEN, Decimal("12.34")),
        (line(amount="0.10"), TEN, Decimal("0.10")),
        (line(amount="1.230000"), TEN, Decimal("1.23")),  # trailing zeros are not precision
        (line(amount="9999999999999999.99"), TEN, Decimal("9999999999999999.99")),
        (line(amount="-7.5"), TEN, Decimal("-7.50")),
        (line(amount="-0.0"), TEN, Decimal("0")),
        (line(amount="0e999999999"), TEN, Decimal("0")),
        # Extra fields of any kind are ignored; event_type may be a string or null.
        (
            line(more=', "event_type": "purchase", "meta": {"a": [1, 2, {"b": null}]}, "x": 1e999'),
            TEN,
            Decimal("12.34"),
        ),
        (line(more=', "event_type": null'), TEN, Decimal("12.34")),
    ],
)
def test_valid_lines(text: str, instant: datetime, amount: Decimal) -> None:
    event = parse(text)
    assert event is not None
    assert event == {"event_id": "e1", "user_id": "u1", "event_time": instant, "amount": amount}


def test_ids_are_taken_as_written() -> None:
    # A no-break space is not JSON white space: a non-empty id (decision 36).
    event = parse('{"event_id": "\\u00a0", "user_id": " u ", "event_time": 0, "amount": 1}')
    assert event is not None and (event["event_id"], event["user_id"]) == ("\u00a0", " u ")


def test_white_space_around_the_object_is_allowed() -> None:
    assert parse(" \t" + line() + "\r\n ") is not None


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ("empty_line", ""),
        ("empty_line", " \t\r"),
        ("amount_not_finite", line(amount="NaN")),
        ("amount_not_finite", line(amount="-Infinity")),
        ("not_json", "{"),
        ("not_json", "not json"),
        ("not_json", line() + " x"),  # content after the value
        ("not_json", line() + "}"),
        ("not_json", line() + " {}"),
        ("not_json", line(more=', "amount": 1')),  # a repeated key
        ("not_json", line(more=', "note": "\\ud800"')),  # an unpaired surrogate escape
        ("not_json", line(more=', "deep": ' + "[" * 999 + "]" * 999)),  # 1000 levels with the object
        ("not_json", line(more=', "long": 1' + "0" * 1000)),  # a number of 1001 digits
        ("not_object", "[1]"),
        ("not_object", '"text"'),
        ("not_object", "5"),
        ("not_object", "null"),
        ("event_id_missing", '{"user_id": "u1", "event_time": 0, "amount": 1}'),
        ("event_id_missing", '{"event_id": null, "user_id": "u1", "event_time": 0, "amount": 1}'),
        ("event_id_not_string", '{"event_id": 5, "user_id": "u1", "event_time": 0, "amount": 1}'),
        ("event_id_empty", '{"event_id": "", "user_id": "u1", "event_time": 0, "amount": 1}'),
        ("event_id_empty", '{"event_id": " \\t\\n\\r", "user_id": "u1", "event_time": 0, "amount": 1}'),
        ("user_id_missing", '{"event_id": "e1", "event_time": 0, "amount": 1}'),
        ("user_id_not_string", '{"event_id": "e1", "user_id": ["u1"], "event_time": 0, "amount": 1}'),
        ("user_id_empty", '{"event_id": "e1", "user_id": " ", "event_time": 0, "amount": 1}'),
        ("event_time_missing", f'{{{BASE}, "amount": 1}}'),
        ("event_time_missing", line("null")),
        ("event_time_wrong_type", line("true")),
        ("event_time_wrong_type", line("1704103200000.5")),  # not an integer
        ("event_time_wrong_type", line("1.7e12")),
        ("event_time_invalid", line('"yesterday"')),
        ("event_time_invalid", line('"2024-13-01T00:00:00Z"')),
        ("event_time_invalid", line('"2024-02-30T00:00:00Z"')),
        ("event_time_invalid", line('"2024-01-01"')),  # a date alone is not a date-time
        ("event_time_invalid", line('"2024-01-01T10:00:00+05:99"')),  # minutes of an offset under 60
        ("event_time_invalid", line('"2024-01-01T10:00:00+18:01"')),  # offsets up to ±18:00
        ("event_time_invalid", line('"2024-01-01T10:00:00Z\\n"')),  # nothing after the zone
        ("event_time_invalid", line('"0001-01-01T00:00:00+01:00"')),  # year 0 in UTC
        ("event_time_invalid", line('"9999-12-31T23:59:59-01:00"')),  # year 10000 in UTC
        ("event_time_invalid", line("253402300800000")),  # 10000-01-01T00:00:00Z in ms
        ("amount_missing", f'{{{BASE}, "event_time": 0}}'),
        ("amount_missing", line(amount="null")),
        ("amount_not_number", line(amount='"12.34"')),
        ("amount_not_number", line(amount="true")),
        ("amount_not_number", line(amount="[1]")),
        ("amount_out_of_range", line(amount="12345678901234567")),  # 17 integer digits
        ("amount_out_of_range", line(amount="1e16")),
        ("amount_out_of_range", line(amount="1e999")),
        ("amount_too_precise", line(amount="1.234")),
        ("amount_too_precise", line(amount="1e-3")),
        ("event_type_not_string", line(more=', "event_type": 5')),
        ("event_type_not_string", line(more=', "event_type": {"kind": "click"}')),
    ],
)
def test_invalid_lines(reason: str, text: str) -> None:
    assert parse(text) is None, reason


def test_bad_bytes_and_long_lines_are_invalid() -> None:
    # not_utf8: a line read with surrogateescape keeps a bad byte as a lone surrogate.
    bad = line(more=', "note": "X"').encode().replace(b"X", b"\xff")
    assert parse(bad.decode("utf-8", "surrogateescape")) is None
    # line_too_long: over the limit in UTF-8 bytes (é is two).
    text = line(more=', "note": "é"')
    size = len(text.encode())
    assert parse(text, max_line_bytes=size) is not None
    assert parse(text, max_line_bytes=size - 1) is None


def test_nesting_up_to_999_levels_is_valid() -> None:
    # The object itself is level 1: 998 more levels inside it make 999.
    assert parse(line(more=', "deep": ' + "[" * 998 + "]" * 998)) is not None


def test_landing_lines_split_at_lf_without_bom_or_cr(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "02-second.jsonl").write_bytes(b"c\n")
    (landing / "01-first.jsonl").write_bytes(b"\xef\xbb\xbfa\r\n\n b\xff\nlast-without-newline")
    (landing / ".01-hidden.jsonl").write_bytes(b"hidden\n")
    (landing / "_temporary").write_bytes(b"temp\n")
    assert landing_lines(landing) == ["a", "", " b\udcff", "last-without-newline", "c"]


def test_first_arrivals_count_and_windows_are_utc_aligned() -> None:
    def event(event_id: str, user: str, when: str, amount: str) -> str:
        return f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "{when}", "amount": {amount}}}'

    lines = [
        event("a1", "A", "2024-01-01T10:00:00Z", "5"),
        event("a2", "A", "2024-01-01T10:04:59.999999Z", "0.01"),  # the last instant of [10:00, 10:05)
        event("a3", "A", "2024-01-01T10:05:00Z", "1"),  # the next window
        event("a1", "A", "2024-01-01T10:01:00Z", "99"),  # a conflicting redelivery: adds nothing
        "not json",
        event("b1", "B", "2024-01-01T10:07:00+01:00", "2.50"),  # 09:07 UTC
    ]
    assert [e["event_id"] for e in first_arrivals(lines)] == ["a1", "a2", "a3", "b1"]
    at = lambda clock: datetime.fromisoformat(f"2024-01-01T{clock}+00:00")  # noqa: E731
    assert window_totals(lines) == {
        ("A", at("10:00")): (Decimal("5.01"), 2),
        ("A", at("10:05")): (Decimal("1.00"), 1),
        ("B", at("09:05")): (Decimal("2.50"), 1),
    }
    # 15-minute windows: A's three in [10:00, 10:15).
    assert window_totals(lines, 15)[("A", at("10:00"))] == (Decimal("6.01"), 3)
    # Sessions with a 30-minute gap: B's 09:07 is 53 min before A's, but they are different users.
    assert session_totals(lines) == {
        ("A", at("10:00")): (at("10:35"), Decimal("6.01"), 3),
        ("B", at("09:07")): (at("09:37"), Decimal("2.50"), 1),
    }
