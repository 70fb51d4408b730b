"""Differential fuzzing of the contract's event rules: Spark's ``parse_events`` against ``tests.reference.parse``.

Every generated line goes through both. They must give the same verdict (valid or invalid), and for a valid
line the same event_id, user_id, instant (whole microseconds since the epoch: ``unix_micros`` on the Spark
side, so year-1 edges never pass through a Python datetime there) and exact amount (Decimals compared with
``==``). An exception raised by the reference is a failure (a reference bug, reported with its line), and
so is one raised by Spark: a line that fails the whole batch, or kills the JVM, would stop the pipeline.

Each hypothesis example is a list of lines run through Spark as one batch. Lines already answered by Spark in
this process come from a cache (Spark's verdict on a line depends on that line only), so shrinking a
failing list costs Spark only the lines that are new. ``LAKEHOUSE_FUZZ_EXAMPLES`` sets the number of examples
(default 30, about 30-50 s on a warm session with nothing to shrink; a first failure costs up to hypothesis'
five minutes of shrinking); ``LAKEHOUSE_FUZZ_EXAMPLES=1000`` is a long run of about 30,000 lines. The
examples are fresh on every run (not derandomized), and hypothesis' example database (``.hypothesis/``)
replays a failure found before. The module prints how many lines it checked.

A disagreement found once goes into ``FIXED`` (or, when it killed the JVM, ``JVM_KILLERS``), so it is
checked on every run whatever hypothesis draws.
"""

import json
import os
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tests.reference import parse as reference_parse
from transforms.events import line_text, parse_events
from warehouse.settings import StreamSettings

EXAMPLES = int(os.environ.get("LAKEHOUSE_FUZZ_EXAMPLES", "30"))
#: Lines per example: at least MIN_LINES (so about 30 on average) for more lines per Spark batch; a failing
#: example shrinks to MIN_LINES lines, and the message shows only the lines that disagree.
MIN_LINES, MAX_LINES = 15, 60
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

#: Lines compared (each hypothesis example and FIXED count every line they compare).
CHECKED = {"lines": 0, "examples": 0, "spark_lines": 0}
#: line -> (reason, event_id, user_id, unix micros, amount) as Spark gave it.
_SPARK_ANSWERS: dict[str, tuple] = {}
#: The lines of the batch during which the JVM died, once it has.
_JVM_DIED_ON: list[list[str]] = []

# --------------------------------------------------------------------------------------------------------
# Fixed lines: every disagreement found once.

_BASE = '{"event_id": "e", "user_id": "u", "event_time": 0, "amount": 1}'


def _event(event_id: str = '"e"', user_id: str = '"u"', event_time: str = "0", amount: str = "1") -> str:
    return f'{{"event_id": {event_id}, "user_id": {user_id}, "event_time": {event_time}, "amount": {amount}}}'


def _deep(depth: int, container: str = "array") -> str:
    """A valid event whose nesting is ``depth`` levels deep (the object itself is level 1)."""
    levels = depth - 1
    if container == "array":
        nested = "[" * levels + "]" * levels
    else:
        nested = '{"a": ' * (levels - 1) + "{}" + "}" * (levels - 1)
    return _BASE[:-1] + ', "x": ' + nested + "}"


FIXED = [
    # Content after the JSON value (other than JSON white space) makes the line invalid.
    _BASE + " x",
    _BASE + "}}",
    _BASE + " {}",
    _BASE + " // c",
    _BASE + "\x00",
    _BASE + "\x0b",
    _BASE + "\xa0",
    # A lone surrogate escape is invalid.
    _event(event_id='"\\ud800"'),
    # Blank means JSON white space only (space, tab, LF, CR): these ids are not blank.
    _event(event_id='"\xa0"'),
    _event(event_id='"\u2003"'),
    # ... nor these: Java's regex '$' also matches before a final line terminator (U+0085, U+2028, U+2029).
    _event(user_id='"\x85"'),
    _event(event_id='"\u2028"'),
    _event(user_id='"\\u2029"'),
    _event(user_id='" \u2028"'),
    # The instant must be within years 1-9999 in UTC.
    _event(event_time='"0001-01-01T00:00:00+01:00"'),
    _event(event_time='"9999-12-31T23:59:59-01:00"'),
    # Year 0000 written, but the UTC instant is 0001-01-01T00:00Z.
    _event(event_time='"0000-12-31T23:00:00-01:00"'),
    # A line break (escaped) after the time: Java's '$' matched before it, and the cast ignored it.
    _event(event_time='"2024-01-01T10:00:00Z\\n"'),
    _event(event_time='"2024-01-01T10:00\\r"'),
    # Offsets past ±18:00 (Spark's limit; Python's is under 24 hours).
    _event(event_time='"2024-01-01T10:00:00+18:01"'),
    _event(event_time='"2024-01-01T10:00:00-23:59"'),
    # Offsets with 60 minutes or more.
    _event(event_time='"2024-01-01T10:00:00+05:99"'),
    _event(event_time='"2024-01-01T10:00:00+0560"'),
    # Exponents: 1e-99999999999999999999 is too precise, 0e99999999999999999999 is zero.
    _event(amount="1e-99999999999999999999"),
    _event(amount="0e99999999999999999999"),
    # Exponents at the ends of a 32-bit int: Spark's digit arithmetic overflowed (the whole batch failed).
    _event(amount="1e2147483647"),
    _event(amount="1e-2147483648"),
    # A number of over 1000 characters in an ignored field.
    _BASE[:-1] + ', "x": ' + "1" * 1001 + "}",
    # Nesting: 1000 levels is invalid, 999 is fine.
    _deep(1000),
    _deep(999),
]
#: Lines that once killed the JVM (a StackOverflowError in a task): checked last, in a test of their own.
JVM_KILLERS = [
    _deep(999, "object"),
    _deep(1000, "object"),
]

# --------------------------------------------------------------------------------------------------------
# The comparison.


def _jvm_alive(spark) -> bool:
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:
        return False


def _run_spark(spark, lines: list[str]) -> None:
    if _JVM_DIED_ON:
        raise AssertionError(f"the JVM died earlier, running these lines: {_JVM_DIED_ON[0]!r}"[:20_000])
    try:
        frame = spark.createDataFrame(list(enumerate(lines)), "i int, raw string")
        rows = (
            parse_events(frame, StreamSettings.max_line_bytes, raw="raw")
            .select("i", "reason", "event_id", "user_id", F.unix_micros("event_time").alias("micros"), "amount")
            .collect()
        )
    except Exception:
        if not _jvm_alive(spark):
            _JVM_DIED_ON.append(lines)
            raise AssertionError(f"the JVM died running these lines: {lines!r}"[:20_000]) from None
        raise
    assert len(rows) == len(lines)
    for row in rows:
        _SPARK_ANSWERS[lines[row.i]] = (row.reason, row.event_id, row.user_id, row.micros, row.amount)
    CHECKED["spark_lines"] += len(lines)


def spark_answers(spark, lines: list[str], one_by_one_on_error: bool = False) -> list[tuple | BaseException]:
    """Spark's (reason, event_id, user_id, unix micros, amount) for each line, from one batch of the lines it
    has not answered yet. When that batch raises, the error fails the example (and hypothesis shrinks it to
    a line), or with ``one_by_one_on_error`` each line is run alone and the lines that raise get their error."""
    if len(_SPARK_ANSWERS) > 200_000:
        _SPARK_ANSWERS.clear()
    new = [line for line in dict.fromkeys(lines) if line not in _SPARK_ANSWERS]
    errors: dict[str, BaseException] = {}
    if new:
        try:
            _run_spark(spark, new)
        except AssertionError:
            raise
        except Exception as error:
            if not one_by_one_on_error:
                raise AssertionError(f"Spark raised on a batch: {_first_line(error)}\nlines: {new!r}") from None
            for line in new:
                try:
                    _run_spark(spark, [line])
                except AssertionError:
                    raise
                except Exception as line_error:
                    errors[line] = line_error
    return [errors[line] if line in errors else _SPARK_ANSWERS[line] for line in lines]


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"


def reference_answer(line: str) -> tuple | BaseException | None:
    """The reference's (event_id, user_id, unix micros, amount), None when invalid, or the exception it raised."""
    try:
        event = reference_parse(line)
        if event is None:
            return None
        micros = (event["event_time"] - EPOCH) // MICROSECOND
        return (event["event_id"], event["user_id"], micros, event["amount"])
    except Exception as error:  # a reference bug: reported as a disagreement, never swallowed
        return error


def _describe_spark(answer: tuple | BaseException) -> str:
    if isinstance(answer, BaseException):
        return f"RAISED {_first_line(answer)}"
    reason, event_id, user_id, micros, amount = answer
    if reason is not None:
        return f"invalid, reason={reason!r}"
    return f"valid, event_id={event_id!r} user_id={user_id!r} micros={micros!r} amount={amount!r}"


def _describe_reference(answer: tuple | BaseException | None) -> str:
    if answer is None:
        return "invalid"
    if isinstance(answer, BaseException):
        return f"RAISED {_first_line(answer)}"
    event_id, user_id, micros, amount = answer
    return f"valid, event_id={event_id!r} user_id={user_id!r} micros={micros!r} amount={amount!r}"


def _agree(spark_answer: tuple | BaseException, reference: tuple | BaseException | None) -> bool:
    if isinstance(reference, BaseException) or isinstance(spark_answer, BaseException):
        return False
    reason, event_id, user_id, micros, amount = spark_answer
    if reference is None:
        return reason is not None
    return (
        reason is None
        and (event_id, user_id, micros) == reference[:3]
        and amount is not None
        and amount == reference[3]
    )


def disagreements(spark, lines: list[str], one_by_one_on_error: bool = False) -> list[str]:
    """One message per line on which Spark and the reference disagree (or either raised)."""
    problems = []
    for line, answer in zip(lines, spark_answers(spark, lines, one_by_one_on_error), strict=True):
        reference = reference_answer(line)
        if not _agree(answer, reference):
            problems.append(
                f"{line!r}\n    spark:     {_describe_spark(answer)}\n    reference: {_describe_reference(reference)}"
            )
    CHECKED["lines"] += len(lines)
    return problems


def assert_agree(spark, lines: list[str], one_by_one_on_error: bool = False) -> None:
    problems = disagreements(spark, lines, one_by_one_on_error)
    shown = "\n".join(problems[:40])
    assert not problems, f"{len(problems)} of {len(lines)} lines disagree:\n{shown}"


# --------------------------------------------------------------------------------------------------------
# Strategies: pieces of JSON text.

#: JSON white space a line can hold (a line never holds '\n').
ws = st.sampled_from(["", "", "", " ", "  ", "\t", " \t", "\r", " \r "])

_ESCAPES = ["\\n", '\\"', "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "\\u0041", "\\u00e9", "\\u00E9", "\\u0000"]
_ESCAPES += ["\\u001f", "\\u007f", "\\u2028", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\udbff\\udfff", "\\uffff"]
_LONE_SURROGATES = ["\\ud800", "\\uDFFF", "\\udc00", "\\ud800\\u0041", "\\ud800\\ud800", "\\udc00\\ud800", "\\ud83d"]
_BAD_ESCAPES = ["\\x41", "\\u12", "\\u12g4", "\\U0041", "\\a", "\\'", "\\0", "\\ ", "\\u"]
_RAW_CONTROL = [chr(c) for c in range(0x20) if c != 0x0A] + ["\x7f", "\x85"]
#: Characters that look blank; JSON white space is only space, tab, LF and CR.
_BLANKISH = [" ", "\\t", "\\n", "\\r", "\\u0020", "\\u0009", "\\u000b", "\\u000c", "\\u000B", "\\u0085"]
_BLANKISH += ["\\u00a0", "\\u2003", "\\u001c", "\\u001f", "\\u3000", "\\u200b", "\\ufeff", "\\u180e"]
_BLANKISH += ["\xa0", "\u2003", "\u3000", "\u200b", "\ufeff", "\u2028", "\u2029", "\u1680", "\u0085", "\\u2029"]

_plain_chars = st.text(
    st.characters(codec="utf-8", min_codepoint=0x20, exclude_characters='"\\'), min_size=1, max_size=4
)


def _u_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04x}"


_string_piece = st.one_of(
    _plain_chars,
    _plain_chars,
    st.sampled_from(_ESCAPES),
    st.characters(codec="utf-8").map(_u_escape),
    st.sampled_from(_BLANKISH),
    st.sampled_from(_LONE_SURROGATES),
    st.sampled_from(_BAD_ESCAPES),
    st.sampled_from(_RAW_CONTROL),
)
#: The text of a JSON string literal (valid or not): escapes, control characters, non-ASCII, surrogates.
string_text = st.lists(_string_piece, max_size=6).map(lambda pieces: '"' + "".join(pieces) + '"')
#: The text of a string literal that is blank or only looks blank.
blankish_text = st.lists(st.sampled_from(_BLANKISH), max_size=3).map(lambda pieces: '"' + "".join(pieces) + '"')


def json_string(value: str, ascii_only: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


_digits = st.text(st.sampled_from("0123456789"), min_size=1, max_size=22)
_big_digits = st.integers(min_value=1, max_value=45).flatmap(
    lambda n: st.text(st.sampled_from("0123456789"), min_size=n, max_size=n)
)


@st.composite
def number_text(draw) -> str:
    """Numbers as text, valid JSON or not: signs, leading zeros, '.5', '1.', exponents of any size."""
    sign = draw(st.sampled_from(["", "", "-", "+"]))
    whole = draw(
        st.one_of(
            st.just("0"),
            _digits.map(lambda d: "1" + d),
            st.integers(min_value=1, max_value=9).map(str),
            _digits.map(lambda d: "0" + d),  # leading zero: not JSON
            st.just(""),  # .5: not JSON
            _big_digits,
        )
    )
    fraction = draw(
        st.one_of(
            st.just(""),
            st.sampled_from([".", ".0", ".00", ".000", ".10", ".100", ".105", ".005", ".5", ".99", ".995"]),
            _big_digits.map(lambda d: "." + d),
        )
    )
    exponent = draw(
        st.one_of(
            st.just(""),
            st.tuples(
                st.sampled_from(["e", "E"]),
                st.sampled_from(["", "+", "-"]),
                st.one_of(
                    st.integers(min_value=0, max_value=20).map(str),
                    st.sampled_from(["00", "02", "16", "17", "308", "309", "324", "400", "99999999999999999999"]),
                    st.sampled_from(["2147483647", "2147483648", "4294967296", "9223372036854775808", ""]),
                ),
            ).map("".join),
        )
    )
    return sign + whole + fraction + exponent


EDGE_NUMBERS = [
    "0", "-0", "-0.0", "0.0", "-0e0", "0e0", "0E-5", "1", "-1", "0.1", "0.10", "0.100", "0.105", "1.005", "1.1",
    "1.100", "1.15e0", "1.15E+0", "100e-2", "115e-2", "1150e-3", "1.150e+0", "0.0115e2", "1e2", "1E2", "1e+2",
    "1e-2", "1e-3", "1e308", "1e309", "-1e309", "1.7976931348623157e308", "5e-324", "1e-400", "0.1e-400",
    "1e99999999999999999999", "-1e99999999999999999999", "1e-99999999999999999999", "0e99999999999999999999",
    "0e-99999999999999999999", "0.00e99999999999999999999", "1e2147483648", "1e-2147483649",
    "9999999999999999.99", "-9999999999999999.99", "9999999999999999.995", "10000000000000000", "1e16", "1E15",
    "9999999999999999", "99999999999999999", "0.99999999999999999999", "9999999999999999.990000000000000000000",
    "12345678901234567.8e-1", "123456789012345678901234567890123456789e-37", "1" + "0" * 40, "1." + "0" * 40,
    "0." + "0" * 40 + "1e42", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "2147483647", "2147483648", "00", "01", "-01", ".5", "1.",
    "+1", "1.e2", "1e", "1e+", "-", "--1", "1.2.3", "0x10", "1_000", "NaN", "-NaN", "Infinity", "-Infinity",
    "+Infinity", "nan", "inf", "Inf", "\u0661", "\uff11", "1" * 1000, "1" * 1001, "1" * 4300, "1" * 4301,
    "0." + "1" * 2000,
]  # fmt: skip


@st.composite
def exact_amount_text(draw) -> str:
    """A valid amount: a whole number of cents, written with any number of trailing zeros and any exponent."""
    cents = draw(
        st.one_of(
            st.integers(min_value=-(10**5), max_value=10**5),
            st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1),
            st.sampled_from([0, 1, -1, 10, 99, 100, 10**18 - 1, -(10**18) + 1, 10**17, 5 * 10**17]),
        )
    )
    extra_zeros = draw(st.integers(min_value=0, max_value=3))
    digits = str(abs(cents) * 10**extra_zeros)
    scale = 2 + extra_zeros  # value = digits * 10^-scale
    exponent = draw(st.one_of(st.just(0), st.integers(min_value=-6, max_value=6)))
    point = len(digits) - (scale + exponent)  # where the point goes in the mantissa's digits
    if point <= 0:
        mantissa = "0." + "0" * -point + digits
    elif point >= len(digits):
        mantissa = digits + "0" * (point - len(digits))
    else:
        mantissa = digits[:point] + "." + digits[point:]
    if "." in mantissa:
        whole, fraction = mantissa.split(".")
        whole = whole.lstrip("0") or "0"
        mantissa = whole + ("." + fraction if fraction else "")
    else:
        mantissa = mantissa.lstrip("0") or "0"
    sign = "-" if cents < 0 or (cents == 0 and draw(st.booleans())) else ""
    written = draw(st.sampled_from(["e", "E", "e+"])) if exponent or draw(st.booleans()) else ""
    return sign + mantissa + (f"{written}{exponent}".replace("+-", "-") if written else "")


# Event times -------------------------------------------------------------------------------------------

_YEARS = ["0000", "0001", "0002", "0004", "0100", "0400", "1582", "1899", "1900", "1969", "1970", "2000"]
_YEARS += ["2023", "2024", "2100", "9998", "9999", "10000", "999", "+2024", "-0001"]
_MONTHS = ["01", "02", "02", "06", "12", "00", "13", "1"]
_DAYS = ["01", "15", "28", "29", "29", "30", "31", "00", "32", "1"]
_SEPARATORS = ["T", "T", "t", " ", "_", "", "TT", "  "]
_HOURS = ["00", "10", "23", "24", "25", "1"]
_MINUTES = ["00", "30", "59", "60", "5"]
_SECONDS = ["", "", ":00", ":59", ":60", ":61", ":5", ":"]
_ZONES = ["", "", "Z", "z", "+00", "+0000", "+00:00", "-00:00", "-00", "+01", "-01", "+0130", "-0130", "+01:30"]
_ZONES += ["-01:30", "+05:45", "+14:00", "-12:00", "+18:00", "-18:00", "+18:01", "+19:00", "+23:59", "-23:59"]
_ZONES += ["+24:00", "-24:00", "+99", "+1", "+123", "+01:3", "+01:30:00", "+05:99", "+0560", "ZZ", "UTC", " Z"]
_ZONES += ["Z ", "+01:00Z", "GMT", "+01:30:00.5", "-0000", "+\u0661\u0660", "Z\n", "\r", "\r\n", "\u2029"]


def _two_digits(low: int, high: int) -> st.SearchStrategy[str]:
    return st.integers(min_value=low, max_value=high).map("{:02d}".format)


#: Offsets nobody disputes: up to ±18:00 (Spark's range; Python's is under 24 hours), minutes under 60.
_offset = st.tuples(
    st.sampled_from(["+", "-"]), _two_digits(0, 17), st.sampled_from(["", ":", "-"]), _two_digits(0, 59)
).map(lambda p: p[0] + p[1] + ("" if p[2] == "-" else p[2] + p[3]))
_ISO_PARTS = ("year", "month", "day", "separator", "hour", "minute", "second", "fraction", "zone")


@st.composite
def iso_text(draw) -> str:
    """ISO-8601 date-times, each part valid or at one of its edges (at most two edgy parts per time): leap
    days, 24:00, :60, fraction widths 0-10, offsets, years 0, 1, 9999 and 10000."""
    edgy = draw(st.sets(st.sampled_from(_ISO_PARTS), max_size=2))

    def part(name: str, edges: list[str], valid: st.SearchStrategy[str]) -> str:
        return draw(st.sampled_from(edges) if name in edgy else valid)

    year = part("year", _YEARS, st.integers(min_value=1, max_value=9999).map("{:04d}".format))
    month = part("month", _MONTHS, _two_digits(1, 12))
    day = part("day", _DAYS, _two_digits(1, 28) | st.sampled_from(["29", "30", "31"]))
    separator = part("separator", _SEPARATORS, st.sampled_from(["T", "t", " "]))
    hour = part("hour", _HOURS, _two_digits(0, 23))
    minute = part("minute", _MINUTES, _two_digits(0, 59))
    second = part("second", _SECONDS, st.just("") | _two_digits(0, 59).map(":".__add__))
    if len(second) == 3:
        width = draw(st.integers(min_value=0, max_value=10 if "fraction" in edgy else 9))
        if width:
            second += "." + draw(st.text(st.sampled_from("0123456789"), min_size=width, max_size=width))
        elif "fraction" in edgy:
            second += "."  # a point without digits
    zone = part("zone", _ZONES, st.sampled_from(["", "Z", "z", "+00:00"]) | _offset)
    return f"{year}-{month}-{day}{separator}{hour}:{minute}{second}{zone}"


ISO_EDGES = [
    "0001-01-01T00:00:00+01:00", "0001-01-01T00:59:59.999999+01:00", "0001-01-01T01:00:00+01:00",
    "0001-01-01T00:00:00-01:00", "0001-01-01T00:00:00Z", "0001-01-01T00:00Z", "0001-01-01 00:00:00",
    "0000-12-31T23:59:59Z", "0000-12-31T23:00:00-01:00", "9999-12-31T23:59:59-01:00",
    "9999-12-31T22:59:59.999999999-01:00", "9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.9999999999Z",
    "9999-12-31T23:59Z", "9999-12-31T23:59:59+01:00", "9999-12-31T24:00:00Z", "2024-02-29T00:00:00Z",
    "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2024-01-01T24:00:00Z",
    "2024-01-01T24:00Z", "2024-01-01T23:59:60Z", "2016-12-31T23:59:60Z", "2024-01-01t10:00:00z",
    "2024-01-01 10:00:00.123456789+05:30", "2024-01-01T10:00:00.1234567+0530", "2024-01-01T10:00+05",
    "2024-01-01T10:00:00.+05", "2024-01-01T10:00:00,5Z", "2024-01-01", "2024-01-01T10", "10:00:00",
    "2024-01-01T10:00:00Z ", " 2024-01-01T10:00:00Z", "2024-W01-1T10:00:00Z", "2024-001T10:00:00Z",
    "20240101T100000Z", "\uff12\uff10\uff12\uff14-01-01T10:00:00Z", "\u0662\u0660\u0662\u0664-01-01T10:00:00Z",
    "yesterday", "", " ", "1704103200000", "2024-01-01T10:00:00Z\u0000",
    "2024-01-01T10:00:00Z\n", "2024-01-01T10:00\r", "2024-01-01T10:00:00\r\n", "2024-01-01T10:00:00Z\u2028",
    "2024-01-01T10:00:00+01:00\x85", "\n2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z\t",
]  # fmt: skip
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999
EPOCH_EDGES = [
    "0", "-0", "1", "-1", str(_MIN_MS), str(_MIN_MS - 1), str(_MIN_MS + 1), str(_MAX_MS), str(_MAX_MS + 1),
    str(_MAX_MS - 1), str(2**63), str(2**63 - 1), str(-(2**63)), str(-(2**63) - 1), str(2**64), "1" * 30,
    "1704103200000", "1704103200000.0", "1704103200000e0", "1.7041032e12", "17041032000000e-1", "-0.0",
    "8640000000000000", "-8640000000000000", "8640000000000001", "2147483648", "-2147483649",
]  # fmt: skip
iso_valid = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
        lambda d: d.isoformat()
    ),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).flatmap(
        lambda d: st.sampled_from(["Z", "+05:30", "-0800", "+01", "z", "-18:00"]).map(
            lambda zone: d.isoformat(sep=" ") + zone
        )
    ),
)
epoch_valid = st.integers(min_value=_MIN_MS, max_value=_MAX_MS).map(str)
#: A valid event_time as JSON text: an ISO string or epoch milliseconds in range.
event_time_valid = st.one_of(iso_valid.map(json_string), epoch_valid)
event_time_text = st.one_of(
    event_time_valid,
    iso_text().map(json_string),
    st.sampled_from(ISO_EDGES).map(json_string),
    st.sampled_from(EPOCH_EDGES),
)

# Any JSON value as text ----------------------------------------------------------------------------------

_LITERALS = ["null", "true", "false", "null", "true", "NaN", "Infinity", "-Infinity", "nul", "True", "None"]
_small_keys = st.sampled_from(['"a"', '"b"', '"amount"', '"event_id"', '"\\u0061"', '""', '"a"', '"amou\\u006et"'])


def _object_text(pairs: list[tuple[str, str]], colon: str = ": ", comma: str = ", ") -> str:
    return "{" + comma.join(f"{key}{colon}{value}" for key, value in pairs) + "}"


leaf_text = st.one_of(
    st.sampled_from(_LITERALS),
    number_text(),
    st.sampled_from(EDGE_NUMBERS),
    string_text,
    st.text(max_size=8).map(json_string),
)
#: Any JSON value as text (and some that are not JSON): repeated keys, NaN, escapes, odd numbers.
json_text = st.recursive(
    leaf_text,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(st.one_of(_small_keys, string_text), inner), max_size=4).map(_object_text),
    ),
    max_leaves=10,
)
#: Any JSON value as Python data, serialised by json.dumps (so always JSON, unless it holds NaN or Infinity).
json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def dumped(draw, value_strategy=json_data) -> str:
    value = draw(value_strategy)
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : "), (",\t", ":\t")]))
    return json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans()))


# Event objects ---------------------------------------------------------------------------------------------

_GOOD_IDS = ['"e1"', '"u"', '"x"', '"A"', '"\u00e9v\u00e9nement"', '"\\u00e9"', '" e "', '"0"', '"null"']
id_text = st.one_of(
    st.sampled_from(_GOOD_IDS),
    st.text(min_size=1, max_size=8).map(json_string),
    st.text(min_size=1, max_size=8).map(lambda s: json_string(s, ascii_only=True)),
    string_text,
    blankish_text,
)
other_value_text = st.one_of(json_text, st.sampled_from(["null", "1", "true", "[]", "{}", '""', "1.5", '["e"]']))
event_type_text = st.one_of(st.sampled_from(['"click"', "null", '""', "3", "true", "[]", '{"a": 1}']), string_text)
amount_text = st.one_of(
    exact_amount_text(),
    exact_amount_text(),
    number_text(),
    st.sampled_from(EDGE_NUMBERS),
    st.floats().map(lambda f: json.dumps(f)),
    st.sampled_from(['"1.00"', '"12.50"', "true", "[1]", '{"v": 1}']),
)

FIELDS = {
    # name: (good, edgy)
    "event_id": (st.sampled_from(_GOOD_IDS), id_text),
    "user_id": (st.sampled_from(_GOOD_IDS), id_text),
    "event_time": (event_time_valid, event_time_text),
    "amount": (exact_amount_text(), amount_text),
    "event_type": (st.sampled_from(['"click"', "null", '"view"']), event_type_text),
}


@st.composite
def key_text(draw, name: str) -> str:
    """The key ``name`` as text: usually plain, sometimes with an escaped character (the same key) or altered."""
    how = draw(st.sampled_from(["plain"] * 6 + ["escaped", "escaped all", "case", "space", "prefix"]))
    if how == "escaped":
        at = draw(st.integers(min_value=0, max_value=len(name) - 1))
        return '"' + name[:at] + _u_escape(name[at]) + name[at + 1 :] + '"'
    if how == "escaped all":
        return '"' + "".join(_u_escape(c) for c in name) + '"'
    if how == "case":
        return '"' + name.capitalize() + '"'
    if how == "space":
        return '"' + name + ' "'
    if how == "prefix":
        return '"_' + name + '"'
    return '"' + name + '"'


def _decoded(key: str) -> str | None:
    try:
        name = json.loads(key)
    except ValueError:
        return None
    return name if isinstance(name, str) and name.isprintable() and "\\ud" not in key.lower() else None


_FREE_CHOICES = ["good"] * 5 + ["edge", "edge", "missing", "null", "other"]
_extra_field = st.tuples(st.one_of(_small_keys, st.text(max_size=6).map(json_string), string_text), other_value_text)


@st.composite
def event_line(draw) -> str:
    """An event object built from (key, value) texts: fields missing, null, repeated, wrong-typed, or extra.

    Either one thing is at an edge (a field's value, the keys' spelling, the extra fields) and the rest is
    valid, or every field is drawn freely."""
    focus = draw(st.sampled_from([*FIELDS, "keys", "extras", "free"]))
    pairs: list[tuple[str, str]] = []
    for name, (good, edgy) in FIELDS.items():
        if focus == "free":
            choices = ["missing", "missing", "good", "edge", "null"] if name == "event_type" else _FREE_CHOICES
            choice = draw(st.sampled_from(choices))
        else:
            choice = "edge" if name == focus else "missing" if name == "event_type" else "good"
        if choice == "missing":
            continue
        value = {"good": good, "edge": edgy, "null": st.just("null"), "other": other_value_text}[choice]
        key = draw(key_text(name)) if focus in ("free", "keys") else f'"{name}"'
        pairs.append((key, draw(value)))
    if focus in ("free", "extras"):
        pairs.extend(draw(st.lists(_extra_field, min_size=focus == "extras", max_size=3)))
    if pairs and focus in ("free", "keys") and draw(st.integers(min_value=0, max_value=4)) == 0:
        key, value = draw(st.sampled_from(pairs))  # a repeated key, maybe spelt differently
        name = _decoded(key)
        if isinstance(name, str) and name and draw(st.booleans()):
            key = draw(key_text(name))
        pairs.append((key, draw(st.one_of(st.just(value), other_value_text))))
    pairs = draw(st.permutations(pairs))
    colon = draw(ws) + ":" + draw(ws)
    comma = draw(ws) + "," + draw(ws)
    return draw(ws) + _object_text(pairs, colon, comma) + draw(ws)


_cents = st.integers(min_value=-(10**18), max_value=10**18)


@st.composite
def dumped_event_line(draw) -> str:
    """A valid event plus random extra fields as Python data, serialised by json.dumps."""
    extras = draw(st.dictionaries(st.text(max_size=6), json_data, max_size=3))
    event = {
        **extras,
        "event_id": draw(st.text(min_size=1, max_size=6)),
        "user_id": draw(st.text(min_size=1, max_size=6)),
        "event_time": draw(st.one_of(iso_valid, st.integers(min_value=_MIN_MS, max_value=_MAX_MS), st.integers())),
        "amount": draw(st.one_of(st.integers(), st.floats(), _cents.map(lambda c: c / 100))),
    }
    if draw(st.booleans()):
        event["event_type"] = draw(st.none() | st.text(max_size=5) | json_data)
    return draw(dumped(st.permutations(list(event.items())).map(dict)))


@st.composite
def valid_event_line(draw) -> str:
    pairs = [
        ('"event_id"', draw(st.sampled_from(_GOOD_IDS))),
        ('"user_id"', draw(st.sampled_from(_GOOD_IDS))),
        ('"event_time"', draw(FIELDS["event_time"][0])),
        ('"amount"', draw(exact_amount_text())),
    ]
    return _object_text(draw(st.permutations(pairs)))


# Whole-line mutations ------------------------------------------------------------------------------------

_SUFFIXES = [" x", "x", "}", "}}", "]", " {}", "{}", ", 1", ",", " // c", "//c", " /* c */", "\x00", "\x0b"]
_SUFFIXES += ["\x0c", "\xa0", "\u2003", "\ufeff", "\x85", "\u2028", "\u3000", " \r", "\r", "\t", " ", "\r\r"]
_SUFFIXES += ["null", "0", '"', "\\", " #", "\x1a", " \x00 "]
_PREFIXES = ["\ufeff", " ", "\t", "\r", "\x0b", "\x0c", "\xa0", "\x00", "/* c */ ", "\u2003", "\x85", "\u3000"]
_PREFIXES += ["[", "{", ",", "\ufeff\ufeff", "\ufeff "]
_CORRUPTION_CHARS = [*'{}[]",:\\ 0-+.eEtfnu/', "\x00", "\t", "\xa0", "\u00e9", "'", "\U0001f600"]


_MUTATIONS = ["suffix", "prefix", "both", "corrupt", "corrupt", "corrupt", "nul", "quotes", "unquoted", "comma"]
_MUTATIONS += ["comment", "twice"]


@st.composite
def mutated_line(draw) -> str:
    line = draw(st.one_of(valid_event_line(), event_line(), dumped_event_line()))
    how = draw(st.sampled_from(_MUTATIONS))
    if how == "suffix":
        return line + draw(st.sampled_from(_SUFFIXES))
    if how == "prefix":
        return draw(st.sampled_from(_PREFIXES)) + line
    if how == "both":
        return draw(st.sampled_from(_PREFIXES)) + line + draw(st.sampled_from(_SUFFIXES))
    if how == "nul":
        at = draw(st.integers(min_value=0, max_value=len(line)))
        return line[:at] + "\x00" + line[at:]
    if how == "quotes":
        return line.replace('"', "'")
    if how == "unquoted":
        return line.replace('"event_id"', "event_id").replace('"amount"', "amount")
    if how == "comma":
        return line.rstrip()[:-1] + ", }" if line.rstrip().endswith("}") else line + ","
    if how == "comment":
        return line.replace(",", ", /* c */", 1)
    if how == "twice":
        return line + draw(ws) + line
    # Character-level corruption: delete, insert, replace or swap a character or a slice.
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=max(len(line) - 1, 0)))
        end = draw(st.integers(min_value=at, max_value=min(len(line), at + 8)))
        new = draw(st.one_of(st.sampled_from(_CORRUPTION_CHARS), st.characters(codec="utf-8")))
        operation = draw(st.sampled_from(["delete", "delete slice", "insert", "replace", "swap", "duplicate"]))
        if operation == "delete":
            line = line[:at] + line[at + 1 :]
        elif operation == "delete slice":
            line = line[:at] + line[end:]
        elif operation == "insert":
            line = line[:at] + new + line[at:]
        elif operation == "replace":
            line = line[:at] + new + line[at + 1 :]
        elif operation == "swap" and at + 1 < len(line):
            line = line[:at] + line[at + 1] + line[at] + line[at + 2 :]
        elif operation == "duplicate":
            line = line[:end] + line[at:end] + line[end:]
    return line


@st.composite
def deep_line(draw) -> str:
    """Nesting around the 999-level limit, in an extra field of a valid event or as the whole line."""
    depth = draw(st.one_of(st.integers(min_value=990, max_value=1010), st.sampled_from([998, 999, 1000, 1001, 2, 500])))
    kind = draw(st.sampled_from(["array", "object", "mixed"]))
    inner_levels = depth - 1  # the event object is level 1
    if kind == "array":
        nested = "[" * inner_levels + draw(st.sampled_from(["", "1", "null"])) + "]" * inner_levels
    elif kind == "object":
        nested = '{"a":' * (inner_levels - 1) + "{}" + "}" * (inner_levels - 1)
    else:
        nested = '[{"a":' * (inner_levels // 2) + "[]" * (inner_levels % 2) + "0" * (1 - inner_levels % 2)
        nested += "}]" * (inner_levels // 2)
    if draw(st.integers(min_value=0, max_value=4)) == 0:  # the whole line: not an object
        return "[" * depth + "]" * depth
    event = draw(valid_event_line())
    field = f'"x": {nested}'
    return "{" + field + ", " + event[1:] if draw(st.booleans()) else event[:-1] + ", " + field + "}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _one_line(line: str) -> str:
    """No '\\n' (it would end the line) and no lone surrogate character (Spark cannot take it; lone
    surrogates are generated as escapes in the JSON text instead)."""
    return _SURROGATE.sub("\ufffd", line.replace("\n", " "))


#: One line, any of the above; never holds '\n' (a line is what lies between line breaks).
line_strategy = st.one_of(
    event_line(),
    event_line(),
    event_line(),
    valid_event_line(),
    dumped_event_line(),
    mutated_line(),
    mutated_line(),
    dumped(),
    json_text,
    deep_line(),
).map(_one_line)


# --------------------------------------------------------------------------------------------------------
# Tests.


@pytest.fixture(scope="module", autouse=True)
def _report_lines_checked(request: pytest.FixtureRequest):
    yield
    message = (
        f"test_fuzz_events: {CHECKED['lines']} lines checked in {CHECKED['examples']} examples "
        f"({CHECKED['spark_lines']} distinct lines through Spark)"
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # straight to the terminal, not into captured output
            reporter.ensure_newline()
            reporter.write_line(message)


@pytest.mark.quick
def test_fixed_lines_agree(spark) -> None:
    assert_agree(spark, FIXED, one_by_one_on_error=True)


@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    # No "explain" phase: each of its runs is a Spark batch, and the message already names the lines.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
@given(lines=st.lists(line_strategy, min_size=MIN_LINES, max_size=MAX_LINES))
def test_spark_and_reference_agree_on_generated_lines(spark, lines: list[str]) -> None:
    CHECKED["examples"] += 1
    assert_agree(spark, lines)


@st.composite
def corrupted_bytes(draw) -> bytes:
    """A valid event's UTF-8 bytes with bytes inserted, replaced or cut (any byte but LF, which ends a line):
    often not UTF-8 any more (a stray continuation byte, a sequence cut short, an encoded surrogate)."""
    data = bytearray(draw(valid_event_line()).encode())
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(data)))
        piece = draw(
            st.one_of(
                st.binary(min_size=1, max_size=3),
                st.sampled_from(
                    [b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xc0\xaf"]
                ),
            )
        )
        if draw(st.booleans()):
            data[at:at] = piece
        else:
            data[at : at + len(piece)] = piece
    return bytes(data).replace(b"\n", b" ")


@pytest.mark.quick
@hypothesis_settings(
    max_examples=max(3, EXAMPLES // 5),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
@given(received=st.lists(corrupted_bytes(), min_size=MIN_LINES, max_size=MAX_LINES))
def test_spark_and_reference_agree_on_corrupted_bytes(spark, received: list[bytes]) -> None:
    """Bytes as the landing stream receives them: Spark's rules see ``line_text`` of the bytes (``not_utf8``
    when they are not UTF-8); the reference sees them decoded with ``surrogateescape``. Same verdicts, and
    the same values for the lines that are still valid events."""
    CHECKED["examples"] += 1
    CHECKED["lines"] += len(received)
    CHECKED["spark_lines"] += len(set(received))
    raw, raw_bytes = line_text(F.col("line"))
    frame = spark.createDataFrame(list(enumerate(received)), "n int, line binary").select(
        "n", raw.alias("raw"), raw_bytes.alias("raw_bytes")
    )
    rows = parse_events(frame, StreamSettings.max_line_bytes).select(
        "n", "reason", "event_id", "user_id", F.unix_micros("event_time").alias("micros"), "amount"
    )
    spark_side = {r.n: r for r in rows.collect()}
    for n, line in enumerate(received):
        expected = reference_parse(line.decode("utf-8", "surrogateescape"))
        got = spark_side[n]
        if expected is None:
            assert got.reason is not None, f"Spark accepted {line!r}, the reference did not"
            continue
        micros = (expected["event_time"] - EPOCH) // MICROSECOND
        assert got.reason is None, f"Spark quarantined {line!r} ({got.reason}), the reference accepted it"
        assert (got.event_id, got.user_id, got.micros, got.amount) == (
            expected["event_id"],
            expected["user_id"],
            micros,
            expected["amount"],
        ), line


@pytest.mark.quick
def test_lines_that_once_killed_the_jvm(spark) -> None:
    """Objects nested 999 deep overflowed a 1 MB thread stack in Spark's recursive walk of the parsed document
    and killed the JVM (the driver now runs with ``-Xss8m``). Last in the module: a regression would end the
    test session's JVM, and every later Spark test would fail with it."""
    assert_agree(spark, JVM_KILLERS, one_by_one_on_error=True)
