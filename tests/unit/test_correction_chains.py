"""The corrections-log check shared by the CLI crash test and the chaos checks finds each kind of break."""

from datetime import UTC, datetime
from decimal import Decimal

from tests.reference import broken_correction_chains

WINDOW = datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
KEY = ("A", WINDOW)


def _change(revision: int, old: tuple, new: tuple) -> dict:
    return {
        "table_name": "gold.user_spend_5m", "user_id": "A", "window_start": WINDOW, "revision": revision,
        "old_total_amount": Decimal(old[0]), "old_event_count": old[1],
        "new_total_amount": Decimal(new[0]), "new_event_count": new[1],
    }  # fmt: skip


def _gold(revision: int, total: str, count: int) -> list[dict]:
    return [{"user_id": "A", "window_start": WINDOW, "revision": revision, "total_amount": Decimal(total),
             "event_count": count}]  # fmt: skip


CHAIN = [_change(2, ("5", 1), ("7", 2)), _change(3, ("7", 2), ("8", 3))]


def test_a_log_that_chains_to_the_row_is_whole() -> None:
    assert broken_correction_chains(CHAIN, _gold(3, "8", 3)) == []
    deleted = [*CHAIN, _change(4, ("8", 3), ("0", 0))]
    assert broken_correction_chains(deleted, []) == []  # a window gone ends at a count of 0
    other_table = [{**CHAIN[0], "table_name": "gold.user_sessions"}]
    assert broken_correction_chains(other_table, []) == []


def test_each_break_names_its_key() -> None:
    gap = [CHAIN[0], {**CHAIN[1], "revision": 4}]
    assert broken_correction_chains(gap, _gold(4, "8", 3)) == [KEY]
    repeat = [CHAIN[0], {**CHAIN[1], "revision": 2}]
    assert broken_correction_chains(repeat, _gold(2, "8", 3)) == [KEY]
    unchained = [CHAIN[0], _change(3, ("6", 2), ("8", 3))]
    assert broken_correction_chains(unchained, _gold(3, "8", 3)) == [KEY]
    assert broken_correction_chains(CHAIN, _gold(3, "9", 3)) == [KEY]  # the row holds other values
    assert broken_correction_chains(CHAIN, _gold(4, "8", 3)) == [KEY]  # a change the log lacks
    assert broken_correction_chains(CHAIN, []) == [KEY]  # gone, but its log ends at a count of 3
