"""Synthetic event streams, deterministic for a seed, in *arrival* order.

- ``generate_lines`` (the default kind, ``events``): purchases, clicks, refunds and views (alike, or a
  ``purchase_fraction`` of purchases) of Zipf-skewed users (``skew``; 0 is uniform); event times run
  forward at ``rate`` events per second of event time from ``start``, each moved back by up to
  ``disorder_seconds`` (bounded disorder), a ``late_fraction`` of events far behind (beyond watermark +
  allowed lateness), duplicates and invalid lines mixed in.
- ``generate_order_lines`` (kind ``orders``): orders and their payments for gold.order_payments; see there.
"""

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from itertools import accumulate

from warehouse.catalog import ORDER_PAYMENT_BOUND_MINUTES


@dataclass(frozen=True)
class StreamSpec:
    events: int = 5000
    users: int = 50
    #: Users by Zipf's law: the user of rank k draws events in proportion to 1 / k**skew (0: uniform; 1.1,
    #: the default, gives the first of 10,000 users 15 % of the events, the top 1 % 65 %). Deterministic for the seed.
    skew: float = 1.1
    rate: float = 20.0
    disorder_seconds: float = 30.0
    duplicate_fraction: float = 0.05
    late_fraction: float = 0.02
    late_seconds: float = 900.0
    invalid_fraction: float = 0.02
    seed: int = 7
    start: datetime = datetime(2024, 1, 1, tzinfo=UTC)
    #: Kind ``orders``: orders that never get a payment.
    missing_payment_fraction: float = 0.1
    #: Kind ``orders``: orders whose only payment falls outside the bound (most after it, a fifth before the order).
    outside_bound_fraction: float = 0.05
    #: Kind ``events``: the share of purchases (the rest clicks, refunds and views alike); None: all four alike.
    purchase_fraction: float | None = None

    def validate(self) -> None:
        fractions = ("duplicate_fraction", "late_fraction", "invalid_fraction")
        for name in (*fractions, "missing_payment_fraction", "outside_bound_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.events < 0 or self.users < 1 or self.rate <= 0 or self.skew < 0 or self.disorder_seconds < 0:
            raise ValueError("events >= 0, users >= 1, rate > 0, skew >= 0 and disorder >= 0 are required")
        if self.purchase_fraction is not None and not 0 <= self.purchase_fraction <= 1:
            raise ValueError(f"purchase_fraction must be in [0, 1], got {self.purchase_fraction}")
        if self.missing_payment_fraction + self.outside_bound_fraction >= 1:
            raise ValueError("missing_payment_fraction + outside_bound_fraction must be below 1")


_INVALID_LINES = (
    "this is not json",
    "[1, 2, 3]",
    '{"event_id": "", "user_id": "u1", "event_time": "2024-01-01T00:00:00Z", "amount": 1}',
    '{"event_id": "bad-amount", "user_id": "u1", "event_time": "2024-01-01T00:00:00Z", "amount": "12.50"}',
    '{"event_id": "nan-amount", "user_id": "u1", "event_time": "2024-01-01T00:00:00Z", "amount": NaN}',
    '{"event_id": "no-user", "event_time": "2024-01-01T00:00:00Z", "amount": 3}',
    '{"event_id": "bad-time", "user_id": "u1", "event_time": "yesterday", "amount": 3}',
    '{"event_id": "bool-amount", "user_id": "u1", "event_time": 1704067200000, "amount": true}',
    "",
)


def _format_time(moment: datetime, style: int) -> str | int:
    if style == 0:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if style == 1:
        return int(moment.timestamp() * 1000)
    shifted = moment.astimezone(timezone(timedelta(hours=2)))
    return shifted.isoformat(timespec="milliseconds")


def _zipf_users(spec: StreamSpec) -> tuple[list[str], list[float]]:
    """The user names and their cumulative Zipf weights (rank k weighs 1 / k**skew).

    Cumulative once: ``rng.choices(users, weights)`` sums the weights on every call (O(users) an event),
    and given the sums it draws exactly the same users.
    """
    users = [f"user-{n:05d}" for n in range(1, spec.users + 1)]
    return users, list(accumulate(1.0 / (rank**spec.skew) for rank in range(1, spec.users + 1)))


def generate_lines(spec: StreamSpec) -> Iterator[str]:
    """Yield ``spec.events`` valid first arrivals plus duplicates and invalid lines, in arrival order."""
    spec.validate()
    rng = random.Random(spec.seed)
    users, cumulative = _zipf_users(spec)
    types = ("purchase", "click", "refund", "view")
    recent: list[dict] = []
    for index in range(spec.events):
        nominal = spec.start + timedelta(seconds=index / spec.rate)
        if rng.random() < spec.late_fraction:
            moment = nominal - timedelta(seconds=spec.late_seconds * (1 + rng.random()))
        else:
            moment = nominal - timedelta(seconds=rng.random() * spec.disorder_seconds)
        moment = moment.replace(microsecond=(moment.microsecond // 1000) * 1000)
        event = {
            "event_id": f"evt-{spec.seed}-{index:09d}",
            "user_id": rng.choices(users, cum_weights=cumulative)[0],
            "event_time": _format_time(moment, index % 3),
            "amount": Decimal(rng.randint(1, 50_000)) / 100,
            "event_type": _event_type(rng, spec.purchase_fraction, types),
        }
        yield _dump(event)
        recent.append(event)
        if len(recent) > 500:
            recent.pop(0)
        if rng.random() < spec.duplicate_fraction:
            again = dict(rng.choice(recent))
            if rng.random() < 0.2:  # a conflicting redelivery: same id, another amount
                again["amount"] = again["amount"] + Decimal("1.00")
            yield _dump(again)
        if rng.random() < spec.invalid_fraction:
            yield _INVALID_LINES[rng.randrange(len(_INVALID_LINES))]


def _event_type(rng: random.Random, purchase_fraction: float | None, types: tuple[str, ...]) -> str:
    if purchase_fraction is None:
        return types[rng.randrange(len(types))]
    if rng.random() < purchase_fraction:
        return types[0]
    return types[1 + rng.randrange(len(types) - 1)]


def _dump(event: dict) -> str:
    # Decimal written as its exact text: the JSON number the contract sums exactly.
    return json.dumps(event, default=str).replace(f'"amount": "{event["amount"]}"', f'"amount": {event["amount"]}')


#: A payment settles its order within this long after it (inclusive): gold.order_payments' bound.
PAYMENT_BOUND = timedelta(minutes=ORDER_PAYMENT_BOUND_MINUTES)
#: Paid orders that get a second payment inside the bound (a split payment: two matched pairs).
_SPLIT_PAYMENT_FRACTION = 0.05


def generate_order_lines(spec: StreamSpec) -> Iterator[str]:
    """Yield ``spec.events`` orders and their payments (all valid contract events), in arrival order.

    Orders come at ``rate`` per second of event time from ``start`` (event type ``order``, ``order_id``
    ``ord-<seed>-<n>``); each is paid once inside ``[order_time, order_time + 15 min]`` (a twentieth twice),
    or, for ``missing_payment_fraction`` of orders never, or, for ``outside_bound_fraction``, by one
    payment 15 min + 1 ms to 30 min after the order (a fifth of those up to 5 min before it). Payments
    (event type ``payment``, same user and order_id, the order's amount) are dated to the millisecond.
    Disorder: an event arrives up to ``disorder_seconds`` after its event time, so a payment soon after
    its order may arrive first. ``duplicate_fraction`` of lines are redelivered (a fifth with another
    amount: conflicting duplicates, where the first arrival counts). No late or invalid lines.
    """
    spec.validate()
    rng = random.Random(spec.seed)
    users, cumulative = _zipf_users(spec)
    bound_ms = int(PAYMENT_BOUND.total_seconds() * 1000)
    events: list[tuple[datetime, int, dict]] = []

    def add(moment: datetime, event: dict) -> None:
        arrival = moment + timedelta(seconds=rng.random() * spec.disorder_seconds)
        event["event_time"] = _format_time(moment, len(events) % 3)
        events.append((arrival, len(events), event))

    for index in range(spec.events):
        ordered_at = spec.start + timedelta(seconds=index / spec.rate)
        ordered_at = ordered_at.replace(microsecond=(ordered_at.microsecond // 1000) * 1000)
        order_id = f"ord-{spec.seed}-{index:07d}"
        user = rng.choices(users, cum_weights=cumulative)[0]
        amount = Decimal(rng.randint(1, 50_000)) / 100
        order = {"event_id": f"evt-{spec.seed}-o{index:07d}", "user_id": user, "amount": amount}
        add(ordered_at, {**order, "event_type": "order", "order_id": order_id})
        draw = rng.random()
        if draw < spec.missing_payment_fraction:
            delays = []
        elif draw < spec.missing_payment_fraction + spec.outside_bound_fraction:
            early = rng.random() < 0.2
            delays = [-rng.randint(1, 300_000) if early else rng.randint(bound_ms + 1, 2 * bound_ms)]
        else:
            delays = [rng.randint(0, bound_ms)]
            if rng.random() < _SPLIT_PAYMENT_FRACTION:
                delays.append(rng.randint(0, bound_ms))
        for number, delay in enumerate(delays):
            payment = {"event_id": f"evt-{spec.seed}-p{index:07d}-{number}", "user_id": user, "amount": amount}
            add(ordered_at + timedelta(milliseconds=delay), {**payment, "event_type": "payment", "order_id": order_id})

    recent: list[dict] = []
    for _, _, event in sorted(events, key=lambda item: (item[0], item[1])):
        yield _dump(event)
        recent.append(event)
        if len(recent) > 500:
            recent.pop(0)
        if rng.random() < spec.duplicate_fraction:
            again = dict(rng.choice(recent))
            if rng.random() < 0.2:  # a conflicting redelivery: same id, another amount
                again["amount"] = again["amount"] + Decimal("1.00")
            yield _dump(again)
