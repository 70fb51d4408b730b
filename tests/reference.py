"""An independent reference of the contract's rules in plain Python (json + Decimal), no Spark.

Used as the golden for end-to-end runs: it reads the landing files as a user would and computes, per
(user, 5-minute window), the exact sum and count of the deduplicated valid events.
"""

import json
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _reject_constant(name: str) -> None:
    raise ValueError(name)


def _no_repeated_keys(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("repeated key")
    return dict(pairs)


def parse(line: str) -> dict | None:
    """The event if the line is valid by the contract, else None."""
    try:
        doc = json.loads(
            line, parse_float=Decimal, parse_constant=_reject_constant, object_pairs_hook=_no_repeated_keys
        )
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    for key in ("event_id", "user_id"):
        if not isinstance(doc.get(key), str) or doc[key].strip() == "":
            return None
    when = doc.get("event_time")
    if isinstance(when, str) and ISO.match(when):
        try:
            moment = datetime.fromisoformat(when.upper())
        except ValueError:
            return None
        moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    elif isinstance(when, int) and not isinstance(when, bool):
        moment = EPOCH + timedelta(milliseconds=when)
    else:
        return None
    amount = doc.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | Decimal):
        return None
    amount = Decimal(amount)
    if not amount.is_finite() or abs(amount) >= Decimal(10) ** 16 or amount != round(amount, 2):
        return None
    if doc.get("event_type") is not None and not isinstance(doc["event_type"], str):
        return None
    return {"event_id": doc["event_id"], "user_id": doc["user_id"], "event_time": moment, "amount": amount}


def landing_lines(landing: Path) -> list[str]:
    """Every line of every landing file, in arrival order (landing names start with an arrival stamp)."""
    lines: list[str] = []
    for path in sorted(p for p in landing.iterdir() if p.is_file() and not p.name.startswith((".", "_"))):
        text = path.read_text(encoding="utf-8")
        parts = text.split("\n")
        if parts and parts[-1] == "":
            parts.pop()
        lines.extend(part.removesuffix("\r") for part in parts)
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
