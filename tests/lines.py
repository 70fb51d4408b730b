"""Test input: JSON Lines events placed in a landing zone, and the seeds' running example."""

from runtime.sources.landing import place_in_landing
from warehouse.settings import Settings


def land(settings: Settings, name: str, lines: list[str]) -> None:
    """Place ``lines`` as one landing file, atomically, as `lakehouse ingest` does."""
    place_in_landing(settings, name, lambda handle: handle.writelines(line + "\n" for line in lines))


def event(event_id: str, user: str, when: str, amount: str) -> str:
    return f'{{"event_id": "{event_id}", "user_id": "{user}", "event_time": "{when}", "amount": {amount}}}'


#: A 10:00 → 5, B 10:02 → 3, A 10:04 → 2, B 10:06 → 1.
SEEDS_EXAMPLE = [
    event("a1", "A", "2024-01-01T10:00:00Z", "5"),
    event("b1", "B", "2024-01-01T10:02:00Z", "3"),
    event("a2", "A", "2024-01-01T10:04:00Z", "2"),
    event("b2", "B", "2024-01-01T10:06:00Z", "1"),
]
#: Hours later: moves the watermark far past 10:05 + lateness.
HOURS_LATER = event("c1", "C", "2024-01-01T13:00:00Z", "4")
#: A 10:01 → 1, arriving after its window closed.
TOO_LATE = event("a3", "A", "2024-01-01T10:01:00Z", "1")
