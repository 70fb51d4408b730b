"""What a pipeline's stored state was built under: the spec it last ran with, and the changes it refuses.

Each pipeline's home keeps the spec it last ran with (``pipeline-spec.json``). A change that breaks what its
stored state means (the id, the keys, the event-time field, the tumbling size, or what an existing measure
computes) is refused while the pipeline has data, in one line that says what to do; every other change (a new
field, measure, window kind or rule) is taken, and the tables gain its columns (nullable: forward-only until a
replay fills them in).
"""

import json
from typing import Any

from warehouse.delta import latest_version
from warehouse.pipelines import PipelineSpec
from warehouse.settings import Settings
from warehouse.storage import write_atomically
from warehouse.table import Table

APPLIED = "pipeline-spec.json"


class SpecChangeError(RuntimeError):
    """The spec changed in a way the pipeline's stored state cannot take; the message says what to do."""


def breaking_change(applied: dict[str, Any], spec: PipelineSpec) -> str | None:
    """The first change from the ``applied`` spec (as declared) that the stored state cannot take, in words."""
    now = spec.declared()
    for what, then, later in (
        ("the id", applied.get("id"), now["id"]),
        ("the keys", applied.get("keys"), now["keys"]),
        ("the event-time field", applied.get("time", {}).get("field"), now["time"]["field"]),
        ("the tumbling window", applied.get("windows", {}).get("tumbling"), now["windows"]["tumbling"]),
    ):
        if then != later:
            return f"{what} changed from {then!r} to {later!r}"
    before = {m["name"]: m for m in applied.get("measures", [])}
    for measure in now.get("measures", []):
        old = before.get(measure["name"])
        if old is not None and (old["fn"], old["field"]) != (measure["fn"], measure["field"]):
            return f"measure {measure['name']!r} changed from {old['fn']}({old['field']}) to " + (
                f"{measure['fn']}({measure['field']})"
            )
    return None


def has_data(settings: Settings, bronze: Table) -> bool:
    """Whether the pipeline has received anything (its bronze has a commit after its creation)."""
    return latest_version(bronze.path(settings) / "_delta_log") > 0


def check_spec(settings: Settings, bronze: Table, accept_rebuild: bool = False) -> None:
    """Refuse a breaking change while the pipeline has data (unless it is being rebuilt); then record the spec
    as the one the pipeline runs with."""
    spec = settings.spec
    path = settings.home / APPLIED
    if path.exists() and not accept_rebuild:
        change = breaking_change(json.loads(path.read_text()), spec)
        if change is not None and has_data(settings, bronze):
            raise SpecChangeError(
                f"pipeline {spec.name}: {change} while it has data; declare it as a new pipeline (a new name "
                f"starts empty) or rebuild it from its bronze: lakehouse replay --pipeline {spec.name} --accept-rebuild"
            )
    write_atomically(path, json.dumps(spec.declared(), indent=2, sort_keys=True))
