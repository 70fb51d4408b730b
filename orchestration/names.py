"""How one declared pipeline's Dagster definitions are named: the first pipeline's keep the names they always
had (asset keys ``<layer>/<table>`` grouped by layer, ``lakehouse_once``, ``landing_sensor`` …); every other
pipeline's assets are one group named after it, with its tables' catalog names as keys
(``gold/readings_1m``), and its jobs, schedules, sensors and ops carry its name (``readings_lakehouse_once``)."""

import dagster as dg

from orchestration.resources import LakehouseResource
from warehouse.catalog import Table, catalog_name
from warehouse.settings import Settings


def named(settings: Settings, name: str) -> str:
    """A job's, schedule's, sensor's or op's name in the settings' pipeline."""
    return name if settings.pipeline is None else f"{settings.spec.name}_{name}"


def asset_key(table: Table, settings: Settings | None = None) -> dg.AssetKey:
    """A table's asset key: its layer, then its name in the catalog (the first pipeline's by default)."""
    if settings is None or settings.pipeline is None:
        return dg.AssetKey([table.layer, table.short_name])
    return dg.AssetKey(catalog_name(settings, table).split(".", 1))


def group_of(settings: Settings, table: Table) -> str:
    """The asset group: the first pipeline's by layer, any other pipeline's its own name."""
    return table.layer if settings.pipeline is None else settings.spec.name


def view(lakehouse: LakehouseResource, settings: Settings) -> Settings:
    """The resource's settings (the code location's) as the pipeline the definitions were built for sees them."""
    root = lakehouse.settings()
    return root if settings.pipeline is None else root.for_pipeline(settings.spec.name)
