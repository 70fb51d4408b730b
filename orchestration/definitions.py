"""The Dagster code location: every domain's definitions merged, one Spark session per run process."""

import dagster as dg

from orchestration import kafka, maintenance, pipeline, quality, reconcile
from orchestration.resources import lakehouse_resources

defs = dg.Definitions.merge(
    pipeline.defs,
    reconcile.defs,
    quality.defs,
    maintenance.defs,
    kafka.defs,
    dg.Definitions(
        resources=lakehouse_resources(dg.EnvVar("LAKEHOUSE_HOME").get_value()),
        # One process per run: Spark's session (and its JVM) is built once and shared by every step.
        executor=dg.in_process_executor,
    ),
)
