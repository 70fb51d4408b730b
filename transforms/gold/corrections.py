"""How a change of a gold window table is recorded: ``gold.corrections`` rows and commit metadata.

Every change of a stored window row (a new revision: late data, reconciliation, replay, finality) gets
one ``gold.corrections`` row with the key, old and new values, revision and cause. A tumbling-table
commit also records which ``silver.events`` version it reflects, which reconciliation reads back.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from warehouse.catalog import Table
from warehouse.shapes import Shape

#: The key, in a gold commit's userMetadata, of the silver version the gold table reflects.
SILVER_VERSION_KEY = "silver_version"


def consumption_metadata(writer_id: str, batch_id: int, silver_version: int | None) -> dict[str, object]:
    """What a gold commit records about its input: every silver commit <= ``silver_version`` is in gold."""
    return {"writer": writer_id, "batch": batch_id, SILVER_VERSION_KEY: silver_version}


def correction_rows(changes: DataFrame, gold: Table, shape: Shape) -> DataFrame:
    """gold.corrections rows from changes that carry keys, old/new values (``old_<measure>``, ``new_<measure>``
    of every value a reader sees), revision, cause and gold_batch."""
    values = [column for name, _ in shape.visible for column in (f"old_{name}", f"new_{name}")]
    return changes.select(
        F.lit(gold.name).alias("table_name"),
        *shape.key_names,
        "window_start",
        "window_end",
        *values,
        "old_is_final",
        "new_is_final",
        "revision",
        "cause",
        F.col("updated_at").alias("corrected_at"),
        "gold_batch",
    )
