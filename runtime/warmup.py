"""A continuous run's first micro-batch, rehearsed before the first real line arrives.

A fresh driver JVM spends its first micro-batch compiling: Catalyst's rules, the generated code of every
stage, Delta's log replay and MERGE, all run for the first time (about 12 s for five lines on two cores,
against 4 to 5 s once warm). A continuous run that starts with nothing waiting carries a few generated lines
through the same source stream, in a scratch home of its own, and throws the home away: its first real
batch then finds the JVM warm. With lines waiting it does not: they would wait for the rehearsal, and their
own batch warms the JVM as well. The followers start after it, in the same JVM: their first batches,
compiling beside the rehearsal, would slow it down. They do not rehearse (a whole pipeline and a reconcile
at their lower priority took 50 to 85 s on two cores, longer than it saves).

Time semantics: none; the rehearsal's lines are never read by the real home's streams.
"""

import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from runtime import carry
from runtime.progress import recorder_aside
from runtime.runner import has_new_input, prepare, run_stage_once
from runtime.stages import source_stage
from warehouse.catalog import tumbling_table
from warehouse.setting_groups import StorageSettings
from warehouse.settings import Settings


def worth_warming(settings: Settings, source: str) -> bool:
    """Whether a continuous run of ``settings`` from ``source`` should rehearse first: the setting is on and
    nothing is waiting for it (a broker that cannot be asked counts as nothing waiting)."""
    if not settings.streams.warmup:
        return False
    try:
        return not has_new_input(settings, source_stage(source))
    except Exception:  # an unreachable broker is the run's own check to report, not this one's
        return True


def _scratch(settings: Settings) -> Settings:
    """The same spec and settings in a new scratch home on local disk: nothing of the real home (or its object
    storage) is touched."""
    scratch = Path(tempfile.mkdtemp(prefix="lakehouse-warmup-"))
    return replace(settings, home=scratch, storage=StorageSettings(), links=(), root_settings=None)


def _land(view: Settings, name: str, lines: Sequence[str]) -> None:
    landing = Path(view.landing_dir)
    landing.mkdir(parents=True, exist_ok=True)
    (landing / name).write_text("".join(f"{line}\n" for line in lines))


def _forget(view: Settings) -> None:
    carry.forget(view.home, tumbling_table(view).path(view))
    shutil.rmtree(view.home, ignore_errors=True)


def warm_critical_path(spark: SparkSession, settings: Settings, lines: Sequence[str]) -> float:
    """Carry ``lines`` (valid and invalid lines of the pipeline's spec) from a landing folder through bronze,
    silver and the tumbling table of a scratch home with the same spec, then delete it; the seconds taken."""
    started = time.monotonic()
    view = _scratch(settings)
    try:
        with recorder_aside(spark, settings):
            prepare(spark, view)
            _land(view, "warmup.jsonl", lines)
            run_stage_once(spark, view, source_stage("landing"), record_progress=False)
    finally:
        _forget(view)
    return time.monotonic() - started
