"""The Dagster code location: the settings read once, every domain's definitions built from them and merged,
one Spark session per run process."""

from collections.abc import Iterable
from types import ModuleType

import dagster as dg

from orchestration import kafka, launcher, live, maintenance, pipeline, quality, reconcile
from orchestration.resources import lakehouse_resources
from warehouse.settings import Settings

#: Every domain module; each builds its definitions with ``build_defs(settings) -> dg.Definitions``.
DOMAINS: tuple[ModuleType, ...] = (pipeline, reconcile, quality, maintenance, kafka, live, launcher)


def build_defs(settings: Settings, domains: Iterable[ModuleType] = DOMAINS) -> dg.Definitions:
    """The domains' definitions built from ``settings``, with resources on the same settings, and the gold
    freshness policy (``LAKEHOUSE_GOLD_FRESHNESS_SECONDS``) on every kept gold asset."""
    merged = dg.Definitions.merge(
        *(domain.build_defs(settings) for domain in domains),
        dg.Definitions(
            resources=lakehouse_resources(settings),
            # One process per run: Spark's session (and its JVM) is built once and shared by every step.
            executor=dg.in_process_executor,
        ),
    )
    return live.with_gold_freshness(merged, settings)


#: The one place the code location reads ``LAKEHOUSE_*``: assets, schedules, sensors and resources all
#: follow from these settings.
SETTINGS = Settings.from_env()
defs = build_defs(SETTINGS)
