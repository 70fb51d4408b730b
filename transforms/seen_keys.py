"""Which event keys silver already holds, kept by a long-lived process: dedup's pre-filter.

Dedup is exact over all of history (``transforms.silver.history_of``), but most batches hold no repeat at
all, and asking Spark "is any of these ids stored?" costs a scan of every file's ``event_key`` and a
few jobs per batch. A process that runs batch after batch keeps the answer instead: every ``event_key``
of ``silver.events`` with the ``event_date`` it is stored under (12 bytes an event), as of one Delta
version. A batch looks its keys up on the driver; only the keys found go on to the exact lookup in
Spark, and only in their dates. A batch without repeats runs no Spark job for its history.

The index is a superset of the keys stored as of ``version``: it is loaded from the table (with Spark),
and the writer adds its own batch's keys after its commit. Any commit by someone else (a replay's swap,
an older stream draining, maintenance) moves the version on, and the index is loaded again before it is
used. Time semantics: none; this is about arrival history, not event time.
"""

from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from warehouse.catalog import SILVER_EVENTS
from warehouse.delta import as_of, latest_version
from warehouse.settings import Settings
from warehouse.storage import open_delta

#: Beyond this many stored events the index is not kept (12 bytes each: 600 MB of driver memory) and
#: dedup asks Spark for every batch, as a process that starts cold does.
MAX_INDEXED_EVENTS = 50_000_000
#: Keys added since the last merge are kept in small sorted runs; past this many runs they are merged.
_MAX_RUNS = 16


@dataclass
class SeenKeys:
    """The ``(event_key, event_date)`` pairs of ``silver.events`` as of Delta ``version`` (None: not loaded,
    or not usable: rows without a key, or more than :data:`MAX_INDEXED_EVENTS`)."""

    version: int | None = None
    usable: bool = False
    _keys: list[np.ndarray] = field(default_factory=list)
    _days: list[np.ndarray] = field(default_factory=list)

    def current(self, spark: SparkSession, settings: Settings) -> bool:
        """Bring the index to the table's newest version (a reload when anyone else committed since);
        whether it can be used for the next batch."""
        version = latest_version(SILVER_EVENTS.path(settings) / "_delta_log")
        if version != self.version:
            self._load(spark, settings, version)
        return self.usable

    def _load(self, spark: SparkSession, settings: Settings, version: int) -> None:
        self.version, self.usable, self._keys, self._days = version, False, [], []
        if version < 0:
            self.usable = True
            return
        # The size from the log's file statistics (no Spark job); files without them are not counted on.
        records = (
            open_delta(SILVER_EVENTS.path(settings), version=version)
            .get_add_actions(flatten=True)
            .column("num_records")
            .to_pylist()
        )
        if any(n is None for n in records) or sum(records) > MAX_INDEXED_EVENTS:
            return
        stored = as_of(spark, settings, SILVER_EVENTS, version)
        pairs = stored.select("event_key", F.unix_date("event_date").alias("day")).toArrow()
        if pairs.num_rows and pc.any(pc.is_null(pairs.column("event_key"))).as_py():
            return  # rows written before the key column existed (an upgraded home): Spark hashes them
        self._add(pairs.column("event_key").to_numpy(), pairs.column("day").to_numpy())
        self.usable = True

    def found(self, keys: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Which of ``keys`` the index holds, and the days (``unix_date``) they are stored under."""
        hit = np.zeros(len(keys), dtype=bool)
        days: set[int] = set()
        for run_keys, run_days in zip(self._keys, self._days, strict=True):
            at = np.searchsorted(run_keys, keys)
            inside = at < len(run_keys)
            match = np.zeros(len(keys), dtype=bool)
            match[inside] = run_keys[at[inside]] == keys[inside]
            if match.any():
                hit |= match
                # Equal keys sit side by side; a key stored under several days shows each of them.
                for key in np.unique(keys[match]):
                    lo, hi = np.searchsorted(run_keys, key), np.searchsorted(run_keys, key, side="right")
                    days.update(int(day) for day in run_days[lo:hi])
        return keys[hit], sorted(days)

    def add(self, keys: np.ndarray, days: np.ndarray, version: int) -> None:
        """The keys a commit at ``version`` added (the index's own writer's batch)."""
        if self.usable:
            self._add(keys, days)
            self.version = version

    def _add(self, keys: np.ndarray, days: np.ndarray) -> None:
        if not len(keys):
            return
        order = np.argsort(keys, kind="stable")
        self._keys.append(keys.astype(np.int64)[order])
        self._days.append(days.astype(np.int32)[order])
        if len(self._keys) > _MAX_RUNS:
            merged_keys, merged_days = np.concatenate(self._keys), np.concatenate(self._days)
            order = np.argsort(merged_keys, kind="stable")
            self._keys, self._days = [merged_keys[order]], [merged_days[order]]


def batch_keys(valid: DataFrame, event_key: F.Column) -> tuple[np.ndarray, np.ndarray]:
    """The ``(event_key, unix_date(event_time))`` of a batch's valid lines, on the driver (one job)."""
    pairs = valid.select(event_key.alias("key"), F.unix_date(F.to_date("event_time")).alias("day")).toArrow()
    return pairs.column("key").to_numpy().astype(np.int64), pairs.column("day").to_numpy().astype(np.int32)
