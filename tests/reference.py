"""An independent reference of the contract's rules in plain Python (json + Decimal), no Spark.

Used as the golden for end-to-end runs: it reads the landing files as a user would and computes, per
(user, 5-minute window), the exact sum and count of the deduplicated valid events.
"""

import json
import re
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(?:[Zz]|([+-])(\d{2})(?::?(\d{2}))?)?\Z")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_INSTANT = datetime(1, 1, 1, tzinfo=UTC)
LAST_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
#: Arrays and objects nested deeper than this make a line invalid (the contract's reading, decision 36).
MAX_DEPTH = 999
#: A number may have at most this many digits (integer digits and fraction digits, a lone leading 0 not
#: counted): the JSON parser's limit, the contract's reading (decision 36).
MAX_NUMBER_DIGITS = 1000
#: Offsets from UTC up to ±18:00, with minutes under 60.
MAX_OFFSET = timedelta(hours=18)
#: The default of LAKEHOUSE_MAX_LINE_BYTES.
MAX_LINE_BYTES = 1_048_576
JSON_SPACE = " \t\n\r"

# json's C scanner recurses once per level; MAX_DEPTH levels must not hit Python's recursion limit.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * MAX_DEPTH))


class Number:
    """A JSON number exactly as written: sign, significant digits and a power of ten (Python ints, so no
    exponent is too large and no digit is rounded)."""

    def __init__(self, text: str) -> None:
        self.integer = not any(c in text for c in ".eE")
        mantissa, _, exponent = text.lower().partition("e")
        whole, _, fraction = mantissa.partition(".")
        integer_digits = whole.lstrip("-")
        if len(integer_digits if integer_digits != "0" else "") + len(fraction) > MAX_NUMBER_DIGITS:
            raise ValueError("number too long")
        self.negative = whole.startswith("-")
        digits = (whole.lstrip("-") + fraction).lstrip("0")
        self.exponent = int(exponent or "0") - len(fraction)
        stripped = digits.rstrip("0")
        self.exponent += len(digits) - len(stripped)
        self.digits = stripped  # "" for zero

    def as_int(self) -> int | None:
        """The value when it is an integer written without fraction or exponent, else None (one over 30
        digits long is returned as ±10^30: far out of any range here, and no 10^huge is computed)."""
        if not self.integer:
            return None
        sign = -1 if self.negative else 1
        if len(self.digits) + self.exponent > 30:
            return sign * 10**30
        return sign * int(self.digits or "0") * 10**self.exponent

    def money(self) -> Decimal | None:
        """The exact value when it fits decimal(18,2) (at most 16 integer and 2 fractional digits)."""
        if not self.digits:
            return Decimal(0)
        if self.exponent < -2 or len(self.digits) + self.exponent > 16:
            return None
        return Decimal((int(self.negative), tuple(int(d) for d in self.digits), self.exponent))


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def _no_repeated_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("repeated key")
    return dict(pairs)


def _depth(line: str) -> int:
    """How deep arrays and objects nest in ``line``, counted outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for char in line:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _all_text_is_unicode(doc: object) -> bool:
    """Whether every string (keys too) is Unicode text: no unpaired surrogate from a \\uD800-style escape."""
    stack = [doc]
    while stack:
        item = stack.pop()
        strings: list = []
        if isinstance(item, str):
            strings = [item]
        elif isinstance(item, dict):
            strings = list(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        for text in strings:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return False
    return True


def _instant(when: object) -> datetime | None:
    if isinstance(when, str):
        match = ISO.match(when)
        if match is None:
            return None
        sign, hours, minutes = match.group(3, 4, 5)
        if sign and (int(minutes or 0) >= 60 or timedelta(hours=int(hours), minutes=int(minutes or 0)) > MAX_OFFSET):
            return None
        try:
            moment = datetime.fromisoformat(when.upper())
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        except (ValueError, OverflowError):
            return None
    elif isinstance(when, Number) and when.as_int() is not None:
        try:
            moment = EPOCH + timedelta(milliseconds=when.as_int())
        except OverflowError:
            return None
    else:
        return None
    return moment if FIRST_INSTANT <= moment <= LAST_INSTANT else None


def parse(line: str, max_line_bytes: int = MAX_LINE_BYTES) -> dict | None:
    """The event if the line is valid by the contract, else None. A line that was not UTF-8 reaches here
    with its bad bytes as lone surrogates (``surrogateescape``) and is invalid."""
    try:
        size = len(line.encode("utf-8"))
    except UnicodeEncodeError:
        return None
    if size > max_line_bytes or _depth(line) > MAX_DEPTH:
        return None
    try:
        doc = json.loads(
            line,
            parse_float=Number,
            parse_int=Number,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_repeated_keys,
        )
    except ValueError:
        return None
    if not isinstance(doc, dict) or not _all_text_is_unicode(doc):
        return None
    for key in ("event_id", "user_id"):
        if not isinstance(doc.get(key), str) or doc[key].strip(JSON_SPACE) == "":
            return None
    moment = _instant(doc.get("event_time"))
    if moment is None:
        return None
    amount = doc.get("amount")
    if not isinstance(amount, Number) or amount.money() is None:
        return None
    if doc.get("event_type") is not None and not isinstance(doc["event_type"], str):
        return None
    return {"event_id": doc["event_id"], "user_id": doc["user_id"], "event_time": moment, "amount": amount.money()}


def landing_lines(landing: Path) -> list[str]:
    """Every line of every landing file, in arrival order (landing names start with an arrival stamp).

    Lines are split at LF bytes; a CR before the LF and a UTF-8 byte order mark at a file's start are not
    part of a line; bytes that are not UTF-8 stay as lone surrogates (``surrogateescape``)."""
    lines: list[str] = []
    for path in sorted(p for p in landing.iterdir() if p.is_file() and not p.name.startswith((".", "_"))):
        data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
        parts = data.split(b"\n")
        if parts and parts[-1] == b"":
            parts.pop()
        lines.extend(part.removesuffix(b"\r").decode("utf-8", "surrogateescape") for part in parts)
    return lines


def window_totals(lines: list[str], window_minutes: int = 5) -> dict[tuple[str, datetime], tuple[Decimal, int]]:
    """(user, window_start) → (exact sum, count) over first arrivals of valid events."""
    seen: set[str] = set()
    totals: dict[tuple[str, datetime], list] = defaultdict(lambda: [Decimal("0.00"), 0])
    width = window_minutes * 60
    for line in lines:
        event = parse(line)
        if event is None or event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        seconds = (event["event_time"] - EPOCH) // timedelta(microseconds=1) / 1_000_000
        start = EPOCH + timedelta(seconds=(seconds // width) * width)
        totals[(event["user_id"], start)][0] += event["amount"]
        totals[(event["user_id"], start)][1] += 1
    return {key: (value[0], value[1]) for key, value in totals.items()}


def hopping_totals(
    windows: dict[tuple[str, datetime], tuple[Decimal, int]], size_minutes: int = 60, slide_minutes: int = 5
) -> dict[tuple[str, datetime], tuple[Decimal, int]]:
    """(user, hopping window start) → (sum, count): each tumbling window's figures added to every hopping
    window that covers it (``windows`` from ``window_totals``; the slide is the tumbling length)."""
    hours: dict[tuple[str, datetime], list] = defaultdict(lambda: [Decimal("0.00"), 0])
    for (user, start), (total, count) in windows.items():
        for back in range(size_minutes // slide_minutes):
            hour = hours[(user, start - timedelta(minutes=slide_minutes * back))]
            hour[0] += total
            hour[1] += count
    return {key: (value[0], value[1]) for key, value in hours.items()}


def distinct_valid_events(lines: list[str]) -> int:
    return len({event["event_id"] for event in map(parse, lines) if event is not None})


def first_arrivals(lines: list[str]) -> list[dict]:
    """The valid events that count: the first arrival of each event_id, in arrival order."""
    seen: set[str] = set()
    events = []
    for event in map(parse, lines):
        if event is not None and event["event_id"] not in seen:
            seen.add(event["event_id"])
            events.append(event)
    return events


def session_totals(
    lines: list[str], gap_minutes: int = 30
) -> dict[tuple[str, datetime], tuple[datetime, Decimal, int]]:
    """(user, session start) → (session end, sum, count): a user's events in event-time order, a new
    session whenever the next event is more than the gap after the previous one; end = last + gap."""
    gap = timedelta(minutes=gap_minutes)
    by_user: dict[str, list[dict]] = defaultdict(list)
    for event in first_arrivals(lines):
        by_user[event["user_id"]].append(event)
    sessions: dict[tuple[str, datetime], tuple[datetime, Decimal, int]] = {}
    for user, events in by_user.items():
        events.sort(key=lambda e: e["event_time"])
        start, last, total, count = None, None, Decimal("0.00"), 0
        for event in events:
            if last is not None and event["event_time"] - last > gap:
                sessions[(user, start)] = (last + gap, total, count)
                start, total, count = None, Decimal("0.00"), 0
            start = start or event["event_time"]
            last = event["event_time"]
            total += event["amount"]
            count += 1
        sessions[(user, start)] = (last + gap, total, count)
    return sessions


def order_payments(lines: list[str], delay_seconds: int, bound_minutes: int = 15) -> Counter:
    """gold.order_payments by its rules, for a stream none of whose events reached the join behind its
    watermark: rows ``(order_id, user_id, order_event_id, order_time, order_amount, payment_event_id,
    payment_time, payment_amount, status)`` with their multiplicity.

    Over first arrivals of valid events with a string ``order_id``: a ``paid`` row per (order, payment) of
    one order_id with ``order_time <= payment_time <= order_time + bound``; an ``unpaid`` row per order
    with none, once ``order_time + bound`` is before the watermark, min(max order time, max payment time)
    minus the delay."""
    seen: set[str] = set()
    orders: list[dict] = []
    payments: dict[str, list[dict]] = defaultdict(list)
    for line in lines:
        event = parse(line)
        if event is None or event["event_id"] in seen:
            continue
        seen.add(event["event_id"])
        doc = json.loads(line, parse_float=Decimal)
        if not isinstance(doc.get("order_id"), str):
            continue
        if doc.get("event_type") == "order":
            orders.append({**event, "order_id": doc["order_id"]})
        elif doc.get("event_type") == "payment":
            payments[doc["order_id"]].append(event)
    rows: Counter = Counter()
    if not orders:
        return rows
    newest = [max(o["event_time"] for o in orders)]
    if payments:
        newest.append(max(p["event_time"] for ps in payments.values() for p in ps))
    watermark = min(newest) - timedelta(seconds=delay_seconds)
    bound = timedelta(minutes=bound_minutes)
    for order in orders:
        start = order["event_time"]
        head = (order["order_id"], order["user_id"], order["event_id"], start, order["amount"])
        matched = [p for p in payments[order["order_id"]] if start <= p["event_time"] <= start + bound]
        for payment in matched:
            rows[(*head, payment["event_id"], payment["event_time"], payment["amount"], "paid")] += 1
        if not matched and start + bound < watermark:
            rows[(*head, None, None, None, "unpaid")] += 1
    return rows


def broken_correction_chains(
    corrections: list[dict], gold: list[dict], table_name: str = "gold.user_spend_5m"
) -> list[tuple]:
    """The keys of ``table_name`` whose log of changes does not chain (``corrections`` and ``gold`` as rows).

    Every change after a row's first write is logged once, in revision order: a key's revisions follow one
    another without a gap or a repeat, each change's old values are the previous change's new values, and
    the last change's new values and revision are the row's (a row no longer there ends at a count of 0).
    """
    logged: dict[tuple, list[dict]] = defaultdict(list)
    for row in corrections:
        if row["table_name"] == table_name:
            logged[(row["user_id"], row["window_start"])].append(row)
    current = {(row["user_id"], row["window_start"]): row for row in gold}
    broken = []
    for key, rows in logged.items():
        rows.sort(key=lambda r: r["revision"])
        revisions = [r["revision"] for r in rows]
        chained = revisions == list(range(revisions[0], revisions[0] + len(rows))) and all(
            (after["old_total_amount"], after["old_event_count"])
            == (before["new_total_amount"], before["new_event_count"])
            for before, after in pairwise(rows)
        )
        last, row = rows[-1], current.get(key)
        if row is None:
            ends = last["new_event_count"] == 0
        else:
            ends = revisions[-1] == row["revision"] and (last["new_total_amount"], last["new_event_count"]) == (
                row["total_amount"],
                row["event_count"],
            )
        if not (chained and ends):
            broken.append(key)
    return broken
