"""The Dagster code location: every domain's definitions merged, one Spark session per run process."""

import dagster as dg

from orchestration import ingest
from orchestration.resources import LakehouseResource

all_assets_job = dg.define_asset_job(
    "lakehouse_once",
    selection=dg.AssetSelection.all(),
    description="Run every stream once (availableNow): landing → bronze → silver → gold.",
)

defs = dg.Definitions.merge(
    ingest.defs,
    dg.Definitions(
        jobs=[all_assets_job],
        resources={"lakehouse": LakehouseResource(home=dg.EnvVar("LAKEHOUSE_HOME").get_value())},
        # One process per run: Spark's session (and its JVM) is built once and shared by every step.
        executor=dg.in_process_executor,
    ),
)
