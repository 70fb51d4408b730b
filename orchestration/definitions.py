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
#: The domains built once per declared pipeline (from its settings' view); the others once for the home.
PER_PIPELINE: tuple[ModuleType, ...] = (pipeline, reconcile, quality, maintenance, kafka, live)


def build_defs(settings: Settings, domains: Iterable[ModuleType] = DOMAINS) -> dg.Definitions:
    """The domains' definitions built from ``settings``: those of :data:`PER_PIPELINE` once for each pipeline
    ``LAKEHOUSE_PIPELINES`` selects (the first keeps its names; another's carry its name and are its asset
    group), with resources on the same settings, and each pipeline's gold freshness policy on its gold assets."""
    views = settings.pipelines()
    built = [
        domain.build_defs(view) if domain in PER_PIPELINE else domain.build_defs(settings)
        for domain in domains
        for view in (views if domain in PER_PIPELINE else [settings])
    ]
    merged = dg.Definitions.merge(
        *built,
        dg.Definitions(
            resources=lakehouse_resources(settings),
            # One process per run: Spark's session (and its JVM) is built once and shared by every step.
            executor=dg.in_process_executor,
        ),
    )
    return live.with_gold_freshness(merged, views)


#: The one place the code location reads ``LAKEHOUSE_*``: assets, schedules, sensors and resources all
#: follow from these settings.
SETTINGS = Settings.from_env()
defs = build_defs(SETTINGS)
