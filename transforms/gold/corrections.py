"""How a change of a gold window table is recorded: ``gold.corrections`` rows and commit metadata.

Every change of a stored window row (a new revision: late data, reconciliation, replay, finality) gets
one ``gold.corrections`` row with the key, old and new values, revision and cause. A tumbling-table
commit also records which ``silver.events`` version it reflects, which reconciliation reads back.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from warehouse.catalog import Table

#: The key, in a gold commit's userMetadata, of the silver version the gold table reflects.
SILVER_VERSION_KEY = "silver_version"


def consumption_metadata(writer_id: str, batch_id: int, silver_version: int | None) -> dict[str, object]:
    """What a gold commit records about its input: every silver commit <= ``silver_version`` is in gold."""
    return {"writer": writer_id, "batch": batch_id, SILVER_VERSION_KEY: silver_version}


def correction_rows(changes: DataFrame, gold: Table) -> DataFrame:
    """gold.corrections rows from changes that carry keys, old/new values, revision, cause and gold_batch."""
    return changes.select(
        F.lit(gold.name).alias("table_name"),
        "user_id",
        "window_start",
        "window_end",
        "old_total_amount",
        "new_total_amount",
        "old_event_count",
        "new_event_count",
        "old_is_final",
        "new_is_final",
        "revision",
        "cause",
        F.col("updated_at").alias("corrected_at"),
        "gold_batch",
    )
