"""The tumbling table's open windows, kept by the process that writes them: a batch's old values without a
read of gold.

A stream batch needs the stored row of every window it touches, closes or passes, and all of them are open:
they start at or after ``open_since`` (the watermark before the batch, minus the allowed lateness and one
window). Reading them back from gold cost a Delta snapshot and a scan per batch (0.4 to 0.6 s of a 2 to 4 s
batch on two cores). The process whose source stream carries the batches to gold (``run --continuous``, or
``run --once`` across its batches) keeps them instead, as of one Delta version of gold: loaded with Spark,
then brought forward with the rows its own MERGE wrote. Any commit by someone else (a reconcile, a replay's
swap, maintenance) moves the version on, and the rows are loaded again before they are used; a re-run of a
batch after a crash reads gold as of its own version, as before. Spark still computes every change: the
rows go back to it as a local relation.

Time semantics: event time only bounds what is kept (``since``, which moves forward with the watermark);
nothing here decides a window.
"""

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from transforms.gold.measures import value_names
from warehouse.catalog import tumbling_table
from warehouse.delta import as_of, latest_version
from warehouse.settings import Settings
from warehouse.shapes import Shape

#: Beyond this many open windows the rows are not kept (about 100 bytes each) and a batch reads gold.
MAX_OPEN_WINDOWS = 1_000_000

_TIME = pa.timestamp("us", tz="UTC")


@dataclass
class OpenWindows:
    """The rows of the tumbling table starting at or after ``since`` (None: every row) as of Delta
    ``version``; ``rows`` None when not loaded, or (``version`` set) too many to keep."""

    version: int | None = None
    since: datetime | None = None
    rows: pa.Table | None = None

    def rows_since(self, spark: SparkSession, settings: Settings, since: datetime | None) -> DataFrame | None:
        """Gold's rows starting at or after ``since``, as of its newest version, as a Spark local relation;
        None when they are too many to keep (the caller reads gold). Call under the gold lock."""
        gold = tumbling_table(settings)
        version = latest_version(gold.path(settings) / "_delta_log")
        if version < 0:
            return None
        covered = self.since is None or (since is not None and since >= self.since)
        if version != self.version or not covered:
            self._load(spark, settings, version, since)
        if self.rows is None:
            return None
        if since is not None and since != self.since:
            self.rows = self.rows.filter(pc.field("window_start") >= pa.scalar(since, _TIME))
            self.since = since
        # In the catalog's column order, every column nullable: a table that gained a column (a spec's new
        # measure) stores it last, null in the rows written before.
        schema = StructType([StructField(f.name, f.dataType, True) for f in gold.schema])
        return spark.createDataFrame(self.rows.select(gold.column_names), schema=schema)

    @property
    def count(self) -> int | None:
        """How many rows are kept (None: none are)."""
        return None if self.rows is None else self.rows.num_rows

    def advance(self, settings: Settings, merged: DataFrame | pa.Table | None, version_before: int | None) -> None:
        """After a batch that read the rows at ``version_before`` and MERGEd ``merged`` (window changes, as
        a frame or collected; None: the batch changed nothing) into gold: take its new values, when gold's
        only commit since was that MERGE; otherwise forget the rows."""
        if version_before is None:
            self.forget()
            return
        latest = latest_version(tumbling_table(settings).path(settings) / "_delta_log")
        expected = version_before + (0 if merged is None else 1)
        if self.version != version_before or latest != expected:
            self.forget()
            return
        if merged is not None and self.rows is not None:
            shape = Shape.of(settings.spec)
            columns = {
                **{k: k for k in [*shape.key_names, "window_start", "window_end"]},
                **{name: f"new_{name}" for name in value_names(shape)},
                "revision": "revision",
                "is_final": "new_is_final",
                "updated_at": "updated_at",
            }
            if isinstance(merged, DataFrame):
                merged = merged.select(*columns.values()).toArrow()
            schema = pa.schema([column.with_nullable(True) for column in self.rows.schema])
            new = merged.select(list(columns.values())).rename_columns(list(columns)).select(schema.names).cast(schema)
            keys = [*shape.key_names, "window_start"]
            kept = self.rows.join(new.select(keys), keys, join_type="left anti")
            self.rows = pa.concat_tables([kept.select(schema.names).cast(schema), new])
        self.version = expected

    def forget(self) -> None:
        """Load the rows again before they are used next."""
        self.version, self.rows = None, None

    def _load(self, spark: SparkSession, settings: Settings, version: int, since: datetime | None) -> None:
        stored = as_of(spark, settings, tumbling_table(settings), version)
        if since is not None:
            stored = stored.where(F.col("window_start") >= F.lit(since))
        rows = stored.limit(MAX_OPEN_WINDOWS + 1).toArrow()
        self.version, self.since = version, since
        self.rows = rows if rows.num_rows <= MAX_OPEN_WINDOWS else None
