"""A synthetic event stream: skewed users, bounded disorder, duplicates, late and invalid lines.

Deterministic for a seed. Lines are produced in *arrival* order; event times run forward at ``rate``
events per second of event time from ``start``, each moved back by up to ``disorder_seconds`` (bounded
disorder), and a ``late_fraction`` of events far behind (beyond watermark + allowed lateness).
"""

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal


@dataclass(frozen=True)
class StreamSpec:
    events: int = 5000
    users: int = 50
    skew: float = 1.1
    rate: float = 20.0
    disorder_seconds: float = 30.0
    duplicate_fraction: float = 0.05
    late_fraction: float = 0.02
    late_seconds: float = 900.0
    invalid_fraction: float = 0.02
    seed: int = 7
    start: datetime = datetime(2024, 1, 1, tzinfo=UTC)

    def validate(self) -> None:
        for name in ("duplicate_fraction", "late_fraction", "invalid_fraction"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} must be in [0, 1), got {value}")
        if self.events < 0 or self.users < 1 or self.rate <= 0 or self.skew < 0 or self.disorder_seconds < 0:
            raise ValueError("events >= 0, users >= 1, rate > 0, skew >= 0 and disorder >= 0 are required")


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


def generate_lines(spec: StreamSpec) -> Iterator[str]:
    """Yield ``spec.events`` valid first arrivals plus duplicates and invalid lines, in arrival order."""
    spec.validate()
    rng = random.Random(spec.seed)
    weights = [1.0 / (rank**spec.skew) for rank in range(1, spec.users + 1)]
    users = [f"user-{n:05d}" for n in range(1, spec.users + 1)]
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
            "user_id": rng.choices(users, weights)[0],
            "event_time": _format_time(moment, index % 3),
            "amount": Decimal(rng.randint(1, 50_000)) / 100,
            "event_type": types[rng.randrange(len(types))],
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


def _dump(event: dict) -> str:
    # Decimal written as its exact text: the JSON number the contract sums exactly.
    return json.dumps(event, default=str).replace(f'"amount": "{event["amount"]}"', f'"amount": {event["amount"]}')
