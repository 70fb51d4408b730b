"""The data-quality suites: what each table must satisfy, as Great Expectations over Spark frames.

Each suite validates one consistent snapshot of the tables it reads. Streams may be writing meanwhile,
so every suite pins what the stream it checks has *finished* (its checkpoint's last committed batch, or
the versions recorded in gold's commits) and counts what is still in flight apart: in-flight lines and
windows are figures, never failures.

- ``bronze.events``: every row has a source position and an ingest time; rows = lines received.
- ``silver.events``: the event rules hold on every stored event (unique ids, bounds, no future times).
- ``conservation`` (contract invariant 1): bronze = silver + quarantine + duplicates, overall and per
  ingest batch.
- ``completeness`` (contract invariant 2): gold equals a recomputation from silver, window by window.
- ``freshness``: gold keeps up with bronze; late and quarantined shares stay under their thresholds.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, DoubleType, LongType

from expectations.validation import CRITICAL, WARNING, SuiteResult, gx_expectations, timed, validate
from runtime.checkpoints import (
    KAFKA_STAGE,
    LANDING_STAGE,
    RECONCILE_STAGE,
    batch_timestamp,
    checkpoint_dir,
    committed_batches,
    consumed_source_version,
    files_read,
    silver_consumption,
    uncommitted_batch,
)
from transforms.bronze import read_landing_files, split_lines
from transforms.gold.measures import DOUBLE_TOLERANCE
from transforms.reconcile import ReconcileError, gold_silver_version, recompute_windows, window_key
from warehouse.catalog import (
    BRONZE_EVENTS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    Table,
    events_table,
    late_table,
    tumbling_table,
)
from warehouse.delta import as_of, read_table, table_version
from warehouse.locks import hold_gold
from warehouse.settings import Settings
from warehouse.shapes import Shape
from warehouse.storage import location_of

#: What silver makes of a bronze line: exactly one of these.
SILVER_OUTCOMES = ((SILVER_EVENTS, "events"), (SILVER_QUARANTINE, "quarantined"), (SILVER_DUPLICATES, "duplicates"))


@dataclass(frozen=True)
class Suite:
    """A named suite, the table it guards, and how to run it on the lakehouse as it stands."""

    name: str
    guards: Callable[[Settings], Table]
    description: str
    run: Callable[[SparkSession, Settings], SuiteResult]
    #: Warning suites block only when LAKEHOUSE_DQ_WARNINGS_BLOCK is set.
    warns: bool = False


def bronze_suite(spark: SparkSession, settings: Settings) -> SuiteResult:
    """Bronze keeps every received line with where it came from and when it arrived.

    Pinned to the landing stream's last finished batch: the files its source log lists up to that batch,
    re-read and split exactly as the stream splits them, against the bronze rows of those batches.
    """
    gxe = gx_expectations()
    result = SuiteResult("bronze.events", BRONZE_EVENTS.name)
    with timed(result):
        checkpoint = checkpoint_dir(settings, LANDING_STAGE)
        finished = committed_batches(checkpoint)
        last_batch = finished[-1] if finished else -1
        bronze = read_table(spark, settings, BRONZE_EVENTS).where(F.col("ingest_batch") <= last_batch)
        rows = bronze.select(
            "ingest_batch",
            "source_file",
            "source_line",
            _bronze_position().alias("source_position"),
            "ingest_time",
        )
        result.outcomes += validate(
            rows,
            result.suite,
            "rows",
            [
                gxe.ExpectColumnValuesToNotBeNull(
                    column="source_position", description="every row has its source position (file#line or offset)"
                ),
                gxe.ExpectColumnValuesToNotBeNull(column="ingest_time", description="every row has its ingest time"),
            ],
            keys=["ingest_batch", "source_file", "source_line"],
        )
        received = files_read(checkpoint, last_batch)
        present = [_file_key(path) for path in received if location_of(settings, unquote(_file_key(path))).is_file()]
        bronze_per_file = (
            bronze.where(F.col("source") == "file")
            .withColumn("source_file", _file_key_column("source_file"))
            .where(F.col("source_file").isin(present))
            .groupBy("source_file")
            .agg(F.count("*").alias("bronze_rows"))
        )
        per_file = _lines_per_file(spark, settings, present).join(bronze_per_file, "source_file", "full_outer")
        result.outcomes += validate(
            per_file,
            result.suite,
            "lines",
            [
                gxe.ExpectColumnPairValuesToBeEqual(
                    column_A="bronze_rows",
                    column_B="lines_received",
                    ignore_row_if="neither",
                    description="bronze has exactly one row per line of every landing file the stream took",
                )
            ],
            keys=["source_file"],
        )
        result.figures.update(
            {
                "bronze_rows": result.outcomes[0].element_count or 0,
                "files_received": len(received),
                "files_no_longer_in_landing": len(received) - len(present),
                "last_batch": last_batch,
            }
        )
    return result


def _bronze_position() -> F.Column:
    """The row's source position, null when any part of it is missing."""
    file_position = F.when(
        (F.col("source") == "file") & F.col("source_file").isNotNull() & F.col("source_line").isNotNull(),
        F.format_string("%s#%d", "source_file", "source_line"),
    )
    kafka_position = F.when(
        (F.col("source") == "kafka")
        & F.col("kafka_topic").isNotNull()
        & F.col("kafka_partition").isNotNull()
        & F.col("kafka_offset").isNotNull(),
        F.format_string("kafka:%s/%d@%d", "kafka_topic", "kafka_partition", "kafka_offset"),
    )
    return F.coalesce(file_position, kafka_position)


def _file_key(path: str) -> str:
    """A landing file as both Spark's file source log (``file:///…``) and its rows (``file:/…``) name it:
    the path, still URL-encoded as Spark writes it."""
    return re.sub(r"^file:(//)?", "", path)


def _file_key_column(column: str) -> F.Column:
    return F.regexp_replace(F.col(column), r"^file:(//)?", "")


def _lines_per_file(spark: SparkSession, settings: Settings, keys: list[str]) -> DataFrame:
    """Lines per landing file (of those named by ``keys``), split exactly as the landing stream splits them.

    The folder is read whole and filtered, so names are never parsed as paths or globs.
    """
    if not keys:
        return spark.createDataFrame([], "source_file string, lines_received long")
    files = read_landing_files(spark, settings).withColumn("source_file", _file_key_column("source_file"))
    files = files.where(F.col("source_file").isin(keys))
    return split_lines(files).groupBy("source_file").agg(F.count("*").alias("lines_received"))


def silver_suite(spark: SparkSession, settings: Settings) -> SuiteResult:
    """The event rules, checked on what silver stored: ids unique, keys present, values in their ranges,
    decimals exact to their scale, allowed values, event times not in the future (beyond a tolerance)."""
    gxe = gx_expectations()
    quality = settings.quality
    spec = settings.spec
    result = SuiteResult("silver.events", SILVER_EVENTS.name)
    with timed(result):
        latest_allowed = datetime.now(UTC) + timedelta(seconds=quality.future_tolerance_seconds)
        checks = [
            gxe.ExpectColumnValuesToNotBeNull(column=spec.id, description=f"every event has an {spec.id}"),
            gxe.ExpectColumnValuesToBeUnique(column=spec.id, description=f"one row per {spec.id}"),
            *(
                gxe.ExpectColumnValuesToNotBeNull(column=key, description=f"every event has a {key}")
                for key in spec.keys
            ),
            *_range_checks(gxe, settings),
            *(
                gxe.ExpectColumnValuesToMatchRegex(
                    column=f"{name}_text",
                    regex=_decimal_text(*spec.fields[name].decimal_places),
                    description=f"{name} is exact: scale {spec.fields[name].decimal_places[1]}, "
                    f"{spec.fields[name].decimal_places[0]} digits",
                )
                for name in _decimals(settings)
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column=spec.time.field,
                max_value=latest_allowed,
                description=(
                    f"{spec.time.field} not after now + {quality.future_tolerance_seconds} s "
                    f"({'LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS' if spec.is_first else 'quality.future_tolerance'})"
                ),
            ),
            *(
                gxe.ExpectColumnValuesToBeInSet(
                    column=name, value_set=list(f.allowed), description=f"{name} in {', '.join(map(str, f.allowed))}"
                )
                for name, f in spec.fields.items()
                if f.allowed is not None and f.on_invalid == "quarantine"
            ),
        ]
        if quality.event_types and "event_type" in spec.fields:
            checks.append(
                gxe.ExpectColumnValuesToBeInSet(
                    column="event_type",
                    value_set=list(quality.event_types),
                    description=f"event_type in {', '.join(quality.event_types)} (LAKEHOUSE_DQ_EVENT_TYPES)",
                )
            )
        looked_at = dict.fromkeys(
            [
                spec.id,
                *spec.keys,
                *_ranges(settings),
                spec.time.field,
                *(n for n, f in spec.fields.items() if f.allowed),
            ]
        )
        looked_at.update(dict.fromkeys(["event_type"] if "event_type" in spec.fields else []))
        events = read_table(spark, settings, events_table(settings)).select(
            *looked_at, *(F.col(name).cast("string").alias(f"{name}_text") for name in _decimals(settings))
        )
        result.outcomes += validate(events, result.suite, "events", checks, keys=[spec.id])
        result.figures["events"] = result.outcomes[0].element_count or 0
    return result


def _decimals(settings: Settings) -> list[str]:
    """The decimal fields whose exactness the silver suite checks: every required one."""
    return [name for name, f in settings.spec.fields.items() if f.kind == "decimal" and f.required]


def _decimal_text(precision: int, scale: int) -> str:
    """A decimal(p,s) value as text: at most p-s integer digits and exactly s fractional ones."""
    whole = f"-?[0-9]{{1,{precision - scale}}}"
    return f"^{whole}\\.[0-9]{{{scale}}}$" if scale else f"^{whole}$"


def _ranges(settings: Settings) -> dict[str, tuple[object, object, str]]:
    """Field → (min, max, where it is set) of the quality ranges; the first pipeline's ``amount`` from its
    settings (LAKEHOUSE_DQ_AMOUNT_*), which its spec's range is the default of."""
    spec = settings.spec
    found: dict[str, tuple[object, object, str]] = {
        name: (r.min, r.max, f"quality.ranges.{name}") for name, r in spec.quality.ranges.items()
    }
    if spec.is_first and "amount" in found:
        found["amount"] = (settings.quality.amount_min, settings.quality.amount_max, "LAKEHOUSE_DQ_AMOUNT_*")
    return found


def _range_checks(gxe: object, settings: Settings) -> list:
    checks = []
    for name, (low, high, where) in _ranges(settings).items():
        bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        checks.append(
            gxe.ExpectColumnValuesToBeBetween(
                column=name,
                min_value=None if low is None else float(low),
                max_value=None if high is None else float(high),
                description=f"{name} within {bounds} ({where})",
            )
        )
    return checks


def _in_flight(settings: Settings) -> set[tuple[int, int]]:
    """(batch, planned time in epoch ms) of each source stream's batch a crash left planned and not committed.
    Its bronze rows may be written (bronze commits first) while its silver rows wait for its re-run, which
    stamps the same ``ingest_time``; meanwhile the other source's batches go on being carried past it."""
    found = set()
    for stream in (LANDING_STAGE, KAFKA_STAGE):
        checkpoint = checkpoint_dir(settings, stream)
        batch = uncommitted_batch(checkpoint)
        if batch is not None:
            found.add((batch, round(batch_timestamp(checkpoint, batch).timestamp() * 1000)))
    return found


def conservation_suite(spark: SparkSession, settings: Settings) -> SuiteResult:
    """Contract invariant 1: every bronze line is exactly one silver event, quarantined line or duplicate.

    Pinned to the silver stream's last finished batch that read whole bronze commits: the bronze ingest
    batches that batch had read against the silver rows of batches up to it. Lines bronze received after
    that are in flight (``pending_lines``), and so are those of a source stream's batch a crash cut off
    (``_in_flight``). Counted per ingest batch (one ``ingest_time`` each) and overall.
    """
    gxe = gx_expectations()
    result = SuiteResult("conservation", SILVER_EVENTS.name)
    with timed(result):
        consumed = silver_consumption(settings)
        silver_batch, bronze_version = consumed if consumed else (-1, None)
        # The ingest batches silver has read (bronze commits up to that version), as bronze holds them now:
        # a line removed from bronze after silver read it shows as a difference, not as in flight.
        last_ingest = None
        if bronze_version is not None:
            last_ingest = as_of(spark, settings, BRONZE_EVENTS, bronze_version).agg(F.max("ingest_batch")).first()[0]
        limit = -1 if last_ingest is None else last_ingest
        silver = None
        for table, kind in SILVER_OUTCOMES:
            rows = (
                read_table(spark, settings, table)
                .where(F.col("silver_batch") <= silver_batch)
                .select("ingest_time", F.lit(kind).alias("kind"))
            )
            silver = rows if silver is None else silver.unionByName(rows)
        outcomes = silver.groupBy("ingest_time").agg(
            *(F.count_if(F.col("kind") == kind).alias(kind) for _, kind in SILVER_OUTCOMES)
        )
        # One row per ingest batch: small enough to count on the driver and validate as a local frame.
        per_batch = (
            read_table(spark, settings, BRONZE_EVENTS)
            .groupBy("ingest_batch", "ingest_time")
            .agg(F.count("*").alias("bronze_rows"))
            .join(outcomes, "ingest_time", "full_outer")
            .na.fill(0, ["bronze_rows", "events", "quarantined", "duplicates"])
            .orderBy("ingest_batch")
            .collect()
        )
        flying = _in_flight(settings)

        def waits(r: object) -> bool:
            # A collected timestamp is naive local time, which .timestamp() reads as such.
            at = round(r.ingest_time.timestamp() * 1000) if r.ingest_time else None
            return r.ingest_batch is not None and (r.ingest_batch > limit or (r.ingest_batch, at) in flying)

        pending = sum(r.bronze_rows for r in per_batch if waits(r))
        per_batch = [r for r in per_batch if not waits(r)]
        rows = [
            (
                f"ingest batch {r.ingest_batch}" if r.ingest_batch is not None else f"ingest_time {r.ingest_time}",
                r.bronze_rows,
                r.events,
                r.quarantined,
                r.duplicates,
                r.events + r.quarantined + r.duplicates,
            )
            for r in per_batch
        ]
        overall = ("all batches", *(sum(r[i] for r in rows) for i in range(1, 6)))
        frame = spark.createDataFrame(
            [overall, *rows],
            "scope string, bronze_rows long, events long, quarantined long, duplicates long, accounted long",
        )
        result.outcomes += validate(
            frame,
            result.suite,
            "counts",
            [
                gxe.ExpectColumnPairValuesToBeEqual(
                    column_A="bronze_rows",
                    column_B="accounted",
                    description="bronze = silver + quarantine + duplicates (overall and per ingest batch)",
                )
            ],
            keys=["scope", "events", "quarantined", "duplicates"],
        )
        result.figures.update(
            {
                "bronze_rows": overall[1],
                "accounted": overall[5],
                "pending_lines": pending,
                "silver_batch": silver_batch,
                "last_ingest_batch": limit,
            }
        )
    return result


def completeness_suite(spark: SparkSession, settings: Settings) -> SuiteResult:
    """Contract invariant 2, checked: every (user_id, window_start) with deduplicated valid events has a
    gold row whose total and count equal a recomputation from silver, and gold has no row without events.

    The recomputation is reconcile's own (``recompute_windows``), over silver as of the version gold has
    consumed, so events the window stream has not reached yet are not failures. Late events the
    reconcile stream has not folded yet are in flight too: their windows are counted apart
    (``pending_windows``). The versions are pinned under the gold lock, then read by time travel.
    """
    gxe = gx_expectations()
    gold = tumbling_table(settings)
    result = SuiteResult("completeness", gold.name)
    with timed(result):
        with hold_gold(settings, "a completeness check"):
            gold_version = table_version(spark, settings, gold)
            try:
                silver_version = gold_silver_version(spark, settings)
            except ReconcileError as error:
                result.skipped = str(error)
                return result
            late_version = table_version(spark, settings, late_table(settings))
            folded = consumed_source_version(settings.checkpoints_dir / RECONCILE_STAGE)
        late = as_of(spark, settings, late_table(settings), late_version)
        if folded is not None:
            spec_id = settings.spec.id
            late = late.join(
                as_of(spark, settings, late_table(settings), folded[1]).select(spec_id), spec_id, "left_anti"
            )
        shape = Shape.of(settings.spec)
        key = window_key(settings)
        pending = late.select(*key).distinct()
        expected = recompute_windows(spark, settings, silver_version, None, late_version=late_version).select(
            *key, *(F.col(name).alias(f"expected_{name}") for name, _ in shape.visible)
        )
        stored = as_of(spark, settings, gold, gold_version).select(
            *key, *(F.col(name).alias(f"gold_{name}") for name, _ in shape.visible)
        )
        frame = expected.join(stored, key, "full_outer").join(pending, key, "left_anti")
        result.outcomes += validate(
            frame.select("*", *_differences(shape)),
            result.suite,
            "windows",
            [
                gxe.ExpectColumnValuesToNotBeNull(
                    column="gold_event_count", description="every window with events has a gold row (no missing window)"
                ),
                gxe.ExpectColumnValuesToNotBeNull(
                    column="expected_event_count", description="gold has no row without events (no extra window)"
                ),
                *(_equal_values(gxe, m.name, m.type, m.fn) for m in shape.measures),
                _equal_values(gxe, "event_count", LongType(), "count"),
            ],
            keys=key,
        )
        result.figures.update(
            {
                "windows_checked": result.outcomes[0].element_count or 0,
                "pending_windows": pending.count(),
                "gold_version": -1 if gold_version is None else gold_version,
                "silver_version": -1 if silver_version is None else silver_version,
            }
        )
    return result


def _differences(shape: Shape) -> list[F.Column]:
    """``<name>_off``: how far a double measure of gold is from its recomputation, relative to its size (a sum of
    doubles depends on the order it was added in); exact types are compared as they are."""
    found = []
    for name, kind in shape.visible:
        if isinstance(kind, DoubleType):
            gold, expected = F.col(f"gold_{name}"), F.col(f"expected_{name}")
            size = F.greatest(F.abs(gold), F.abs(expected), F.lit(1.0))
            found.append((F.abs(gold - expected) / size).alias(f"{name}_off"))
    return found


def _equal_values(gxe: object, name: str, kind: object, fn: str) -> object:
    if isinstance(kind, DoubleType):
        return gxe.ExpectColumnValuesToBeBetween(
            column=f"{name}_off",
            max_value=DOUBLE_TOLERANCE,
            description=f"each window's {name} equals the recomputed {fn} (within {DOUBLE_TOLERANCE:g} of it)",
        )
    cents = ", to the cent" if isinstance(kind, DecimalType) and kind.scale == 2 else ""
    return gxe.ExpectColumnPairValuesToBeEqual(
        column_A=f"gold_{name}",
        column_B=f"expected_{name}",
        ignore_row_if="either_value_is_missing",
        description=f"each window's {name} equals the recomputed {fn}{cents}",
    )


def freshness_suite(spark: SparkSession, settings: Settings) -> SuiteResult:
    """Gold keeps up with bronze (processing time), and late and quarantined shares stay low.

    Warnings: they block only when LAKEHOUSE_DQ_WARNINGS_BLOCK is set.
    """
    gxe = gx_expectations()
    quality = settings.quality
    gold = tumbling_table(settings)
    severity = CRITICAL if quality.warnings_block else WARNING
    result = SuiteResult("freshness", gold.name)
    with timed(result):
        bronze = read_table(spark, settings, BRONZE_EVENTS).agg(
            F.count("*").alias("bronze_rows"), F.max("ingest_time").alias("newest_ingest")
        )
        gold_rows = read_table(spark, settings, gold).agg(F.max("updated_at").alias("newest_update"))
        figures = bronze.crossJoin(gold_rows)
        counted = ((SILVER_EVENTS, "events"), (SILVER_LATE_EVENTS, "late_events"), (SILVER_QUARANTINE, "quarantined"))
        for table, name in counted:
            figures = figures.crossJoin(read_table(spark, settings, table).agg(F.count("*").alias(name)))
        # No gold at all while bronze has lines counts from the epoch: it shows as far behind.
        newest_update = F.coalesce(F.col("newest_update"), F.lit(0).cast("timestamp"))
        lag = F.col("newest_ingest").cast("double") - newest_update.cast("double")
        row = figures.select(
            F.lit("now").alias("snapshot"),
            F.when(F.col("bronze_rows") > 0, F.round(lag, 3)).alias("gold_lag_seconds"),
            F.when(F.col("events") > 0, F.col("late_events") / F.col("events")).alias("late_rate"),
            F.when(F.col("bronze_rows") > 0, F.col("quarantined") / F.col("bronze_rows")).alias("quarantine_rate"),
        ).first()
        frame = spark.createDataFrame(
            [tuple(row)], "snapshot string, gold_lag_seconds double, late_rate double, quarantine_rate double"
        )
        result.outcomes += validate(
            frame,
            result.suite,
            "figures",
            [
                gxe.ExpectColumnValuesToBeBetween(
                    column="gold_lag_seconds",
                    max_value=quality.freshness_seconds,
                    severity=severity,
                    description=(
                        f"newest gold update within {quality.freshness_seconds} s of the newest bronze ingest "
                        "(LAKEHOUSE_DQ_FRESHNESS_SECONDS)"
                    ),
                ),
                gxe.ExpectColumnValuesToBeBetween(
                    column="late_rate",
                    max_value=quality.max_late_rate,
                    severity=severity,
                    description=(
                        f"late events at most {quality.max_late_rate:.1%} of events (LAKEHOUSE_DQ_MAX_LATE_RATE)"
                    ),
                ),
                gxe.ExpectColumnValuesToBeBetween(
                    column="quarantine_rate",
                    max_value=quality.max_quarantine_rate,
                    severity=severity,
                    description=(
                        f"quarantined lines at most {quality.max_quarantine_rate:.1%} of bronze "
                        "(LAKEHOUSE_DQ_MAX_QUARANTINE_RATE)"
                    ),
                ),
            ],
            keys=["snapshot"],
        )
        result.figures.update({k: row[k] for k in ("gold_lag_seconds", "late_rate", "quarantine_rate")})
    return result


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite("bronze.events", lambda s: BRONZE_EVENTS, "source position, ingest time, rows = lines", bronze_suite),
        Suite("silver.events", lambda s: SILVER_EVENTS, "the event rules on every stored event", silver_suite),
        Suite("conservation", lambda s: SILVER_EVENTS, "bronze = silver + quarantine + duplicates", conservation_suite),
        Suite("completeness", tumbling_table, "gold equals a recomputation from silver", completeness_suite),
        Suite("freshness", tumbling_table, "gold keeps up; late and quarantine rates", freshness_suite, warns=True),
    )
}
