"""Gold changed → the outputs derived from the tumbling table, in one place.

Every path that changes ``gold.user_spend_<n>m`` (a stream batch, an idle watermark advance, a reconcile of
late events or of dates, a replay) describes its change as a :class:`GoldChange` and hands it here:

- :func:`firings` are the change's firings log rows (``gold.user_spend_<n>m_firings``), written with the
  change's own log under its transaction id. A stream batch writes them *before* its MERGE (they are
  computed from the rows as they stood, which a re-run after the MERGE could no longer read);
  reconciliation reads its change back from its own commit and writes them after.
- :func:`propagate` brings the derived window tables in line once the tumbling table holds the change:
  hopping windows (a roll-up of the tumbling panes), sessions (every event of a stream batch, and the
  sessions the watermark closes) and global windows (every event of a stream batch). Each writes its own
  table exactly once under ``<app_id>:<output>`` and the change's version. A replay rebuilds those
  tables itself, so it takes only the firings.

Outputs the home leaves out (``LAKEHOUSE_GOLD_OUTPUTS``) are skipped here, and nowhere else.
"""

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from transforms.gold.firings import firing_rows, passed_windows
from transforms.gold.global_windows import update_global_windows
from transforms.gold.hopping import closing_windows, roll_up
from transforms.gold.sessions import closing_sessions, update_sessions
from transforms.silver import canonical
from warehouse.catalog import Table, firings_table, late_table
from warehouse.delta import sub_scope
from warehouse.settings import Settings
from warehouse.shapes import Shape


@dataclass(frozen=True)
class GoldChange:
    """One change of the tumbling table, as the outputs derived from it need to know it.

    Time semantics: ``before`` and ``after`` are the event-time watermark before and after the change
    (equal when it did not move: a reconcile); windows whose end it passed in between fire on time.
    """

    before: datetime | None
    after: datetime | None
    #: Processing time of the change (``updated_at``, ``fired_at``).
    now: datetime
    #: The change's transaction id: derived writes use ``<app_id>:<output>`` and ``version``.
    app_id: str
    version: int
    #: The cause a hopping window changed by it records (``stream_update``, ``window_closed``, ``reconciliation``).
    cause: str
    #: gold.corrections-shaped rows of the tumbling keys the change wrote (first writes: revision 1); the
    #: firings are made of them.
    changed: DataFrame | None = None
    #: The windows stream's batch that made it (None for idle advances, reconciliation, replay).
    gold_batch: int | None = None
    #: Tumbling keys (user_id, window_start) whose hopping windows to recompute; None: no roll-up.
    panes: DataFrame | None = None
    #: Every derived window the watermark ``closes_from`` closed is final already (None: search them all).
    closes_from: datetime | None = None
    #: The stream batch's events (sessions and global windows take each event once, late ones included).
    events: DataFrame | None = None
    #: How many ``events`` there are, when known: few, and a derived table's changes are collected once.
    event_count: int | None = None
    #: Windows whose end the watermark passed since ``fired_since`` (default ``before``) fire on time even
    #: when they did not change; without ``include_passed`` only the changed windows fire.
    include_passed: bool = False
    fired_since: datetime | None = None
    #: The tumbling table's version the change's old values were read from (None: the newest).
    gold_version: int | None = None
    #: The tumbling table's open windows as of that version, when the process keeps them (a stream batch):
    #: read instead of gold for the windows the watermark passed.
    gold_rows: DataFrame | None = None


@dataclass(frozen=True)
class Derived:
    """How many rows of each derived window table a change moved."""

    hopping: int = 0
    sessions: int = 0
    global_firings: int = 0


def passed(spark: SparkSession, settings: Settings, change: GoldChange) -> DataFrame:
    """Stored windows the change did not write whose end the watermark passed: their on-time firings."""
    since = change.fired_since if change.fired_since is not None else change.before
    return passed_windows(
        spark, settings, change.changed, since, change.after, change.now, change.gold_batch, change.gold_version,
        change.gold_rows,
    )  # fmt: skip


def firings(spark: SparkSession, settings: Settings, change: GoldChange) -> list[tuple[DataFrame, Table]]:
    """The change's firings (when the home keeps them), to append with its corrections."""
    if not settings.keeps("firings"):
        return []
    fired = change.changed.withColumn("changed", F.lit(True))
    if change.include_passed:
        fired = fired.unionByName(passed(spark, settings, change))
    since = change.fired_since if change.fired_since is not None else change.before
    return [(firing_rows(fired, settings, since, change.after), firings_table(settings))]


def closures_pending(
    spark: SparkSession, settings: Settings, watermark: datetime, open_after: datetime | None
) -> tuple[int, int]:
    """(hopping windows, sessions) not final yet that ``watermark`` would close (kept outputs only)."""
    hops = closing_windows(spark, settings, watermark, open_after).count() if settings.keeps("hopping") else 0
    sessions = closing_sessions(spark, settings, watermark, open_after).count() if settings.keeps("sessions") else 0
    return hops, sessions


def propagate(spark: SparkSession, settings: Settings, change: GoldChange) -> Derived:
    """Bring the derived window tables in line with a change the tumbling table now holds.

    One after the other: run side by side, their joins' broadcasts could together exhaust a small driver. The
    global windows first, the cheapest (about 0.4 s a warm batch against the hopping roll-up's 1.2 and the
    sessions' 1.5): the plain twin's global windows are its freshest derived output (decision 80).
    """
    hops = sessions = global_fired = 0
    if settings.keeps("global") and change.events is not None:
        with sub_scope(f"{change.app_id}:global", change.version):
            global_fired = update_global_windows(
                spark, settings, change.events, change.now, f"{change.app_id}:global", change.version,
                change.event_count,
            )  # fmt: skip
    if settings.keeps("hopping") and change.panes is not None:
        with sub_scope(f"{change.app_id}:hops", change.version):
            hops = roll_up(
                spark, settings, change.panes, change.after, change.now, change.cause, f"{change.app_id}:hops",
                change.version, change.gold_batch, change.closes_from,
            )  # fmt: skip
    if settings.keeps("sessions") and (change.events is not None or change.after != change.before):
        events = change.events if change.events is not None else no_events(spark, settings)
        with sub_scope(f"{change.app_id}:sessions", change.version):
            sessions = update_sessions(
                spark, settings, events, change.before, change.after, change.now, f"{change.app_id}:sessions",
                change.version, change.gold_batch,
            )  # fmt: skip
    return Derived(hops, sessions, global_fired)


def event_columns(shape: Shape) -> list[str]:
    """What the windows read of an event: its id, keys, time and measured fields (each once)."""
    return list(dict.fromkeys(["event_id", *shape.key_names, "event_time", *shape.source_fields]))


def no_events(spark: SparkSession, settings: Settings) -> DataFrame:
    """An empty batch of windowed events (the columns :func:`event_columns` reads, and the window)."""
    table = late_table(settings)
    shape = Shape.of(settings.spec)
    columns = ["event_id", *shape.key_names, "event_time", *shape.source_fields, "window_start", "window_end"]
    frame = spark.createDataFrame([], table.schema)
    return canonical(frame, settings.spec).select(*dict.fromkeys(columns))
