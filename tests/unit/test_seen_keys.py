"""The stored-key index that answers dedup's first step on the driver (no JVM)."""

import numpy as np

from transforms.seen_keys import _MAX_RUNS, SeenKeys


def _index(pairs: list[tuple[int, int]]) -> SeenKeys:
    seen = SeenKeys(version=0, usable=True)
    seen.add(np.array([k for k, _ in pairs], dtype=np.int64), np.array([d for _, d in pairs], dtype=np.int32), 1)
    return seen


def test_found_gives_the_stored_keys_and_every_day_they_are_stored_under():
    seen = _index([(5, 100), (-3, 101), (5, 102), (9, 100)])
    hits, days = seen.found(np.array([5, 7, -3], dtype=np.int64))
    assert sorted(hits.tolist()) == [-3, 5]
    assert days == [100, 101, 102]
    assert seen.version == 1


def test_a_batch_without_repeats_finds_nothing():
    hits, days = _index([(1, 10), (2, 10)]).found(np.array([3, 4, np.iinfo(np.int64).max], dtype=np.int64))
    assert hits.tolist() == [] and days == []


def test_keys_added_batch_after_batch_are_found_across_merged_runs():
    seen = SeenKeys(version=0, usable=True)
    rng = np.random.default_rng(7)
    added: dict[int, set[int]] = {}
    for version in range(1, 3 * _MAX_RUNS):
        keys = rng.integers(-(2**62), 2**62, size=50)
        keys[:5] = keys[0]  # equal keys within one batch
        days = rng.integers(0, 3, size=50)
        seen.add(keys, days, version)
        for key, day in zip(keys.tolist(), days.tolist(), strict=True):
            added.setdefault(key, set()).add(day)
    assert len(seen._keys) <= _MAX_RUNS + 1
    probe = np.array([*list(added)[:40], 12345, -12345], dtype=np.int64)
    hits, days = seen.found(probe)
    assert set(hits.tolist()) == set(list(added)[:40])
    assert set(days) == set().union(*(added[k] for k in list(added)[:40]))


def test_an_unusable_index_learns_nothing():
    seen = SeenKeys(version=3, usable=False)
    seen.add(np.array([1], dtype=np.int64), np.array([1], dtype=np.int32), 4)
    assert seen.version == 3 and seen.found(np.array([1], dtype=np.int64))[0].tolist() == []
