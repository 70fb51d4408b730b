"""A continuous run's first micro-batches, rehearsed before the first real line arrives.

A fresh driver JVM spends its first micro-batch compiling: Catalyst's rules, the generated code of every
stage, Delta's log replay and MERGE, all run for the first time (about 12 s for five lines on two cores,
against 4 to 5 s once warm). A continuous run that starts with nothing waiting carries a few generated lines
through the same source stream, in a scratch home of its own, and throws the home away: its first real
batch then finds the JVM warm. With lines waiting it does not: they would wait for the rehearsal, and their
own batch warms the JVM as well. While nothing waits, the critical path then takes a larger volume of valid
lines in two batches: the first rehearsal's few lines leave the row loops (the parse, Parquet's writers, the
MERGE of windows that exist) to the interpreter, and a busy run's first full batches took half as long again
as the next ones (decision 81).

Then, in the same scratch home and for as long as nothing arrives, the followers (fraud alerts, the join,
the derived windows, distinct URLs) rehearse their first run over those lines, one after the other at the
run's own priority: a follower's first real run, cold, took two to three times its warm run beside the
critical path, and its outputs waited for that in the run's first minute (decision 80). A line that arrives
meanwhile (in any pipeline's source) cuts the rehearsal short within half a second and is taken at once:
the rehearsal only ever uses time in which nothing waits. ``lakehouse ingest --wait`` lands its files as soon
as the followers' rehearsal begins.

Time semantics: none; the rehearsal's lines are never read by the real home's streams.
"""

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pyspark.sql import SparkSession

from runtime import carry
from runtime.progress import StageReport, recorder_aside, rehearsing_marker
from runtime.runner import drain_stage, has_new_input, prepare, run_stage_once
from runtime.stages import Stage, source_stage, stages
from warehouse.catalog import tumbling_table
from warehouse.setting_groups import StorageSettings
from warehouse.settings import Settings

#: How often a rehearsal of the followers looks whether a line arrived.
LOOK_SECONDS = 0.5
#: The volume's batches: the second one's windows exist already, as in a run's second minute.
VOLUME_BATCHES = 2


def worth_warming(settings: Settings, source: str) -> bool:
    """Whether a continuous run of ``settings`` from ``source`` should rehearse first: the setting is on and
    nothing is waiting for it."""
    return settings.streams.warmup and not lines_waiting([(settings, source)])


def lines_waiting(sources: Sequence[tuple[Settings, str]]) -> bool:
    """Whether any of these pipelines' sources (settings view, source) holds lines its stream has not taken
    (a broker that cannot be asked counts as nothing waiting: the run's own check reports it)."""
    for view, source in sources:
        try:
            if has_new_input(view, source_stage(source)):
                return True
        except Exception:
            continue
    return False


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


@dataclass(frozen=True)
class Rehearsal:
    """What a warm-up did: its seconds, and how many of the pipeline's followers rehearsed out of how many."""

    seconds: float
    followers_rehearsed: int
    followers: int

    def line(self, pipeline: str) -> str:
        """The run's one line about it."""
        done = f"{pipeline}: Spark warmed up in {self.seconds:.1f} s"
        if self.followers and self.followers_rehearsed == self.followers:
            done += f", its {self.followers} followers too"
        elif self.followers:
            done += f", {self.followers_rehearsed} of its {self.followers} followers (lines came)"
        return f"{done}; taking lines now"


def warm_up(
    spark: SparkSession,
    settings: Settings,
    lines: Sequence[str],
    waiting: Callable[[], bool] = lambda: False,
    volume: Callable[[], Sequence[str]] | None = None,
) -> Rehearsal:
    """Carry ``lines`` (valid and invalid lines of the pipeline's spec) from a landing folder through bronze,
    silver and the tumbling table of a scratch home with the same spec; then, until ``waiting()`` says a real
    line arrived, the ``volume()`` of valid lines through them in :data:`VOLUME_BATCHES` batches and each
    follower over all of them; then delete the home."""
    started = time.monotonic()
    view = _scratch(settings)
    followers = stages(view).followers
    rehearsed = 0
    # `ingest --wait` lands files once this exists: the critical path is warm, and a line cuts the rest short.
    marker = rehearsing_marker(settings)
    marker.unlink(missing_ok=True)  # one a killed run left behind
    try:
        with recorder_aside(spark, settings):
            prepare(spark, view)
            _land(view, "warmup.jsonl", lines)
            run_stage_once(spark, view, source_stage("landing"), record_progress=False)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            rehearsed = _rehearse_rest(spark, view, volume, followers, waiting)
    finally:
        marker.unlink(missing_ok=True)
        _forget(view)
    return Rehearsal(time.monotonic() - started, rehearsed, len(followers))


def _rehearse_rest(
    spark: SparkSession,
    view: Settings,
    volume: Callable[[], Sequence[str]] | None,
    followers: Sequence[Stage],
    waiting: Callable[[], bool],
) -> int:
    """The volume's batches through the critical path, then each follower's run over the scratch home's
    silver, in the cycle's order, stopped as soon as ``waiting()``; how many followers ran to the end."""
    if waiting():
        return 0
    cut = threading.Event()

    def watch() -> None:
        while not cut.wait(LOOK_SECONDS):
            if waiting():
                cut.set()

    watcher = threading.Thread(target=watch, name="lakehouse-warmup-watch", daemon=True)
    watcher.start()
    rehearsed = 0
    try:
        if volume is not None:
            source = source_stage("landing")
            batch = volume()
            size = max(1, -(-len(batch) // VOLUME_BATCHES))
            for start in range(0, len(batch), size):
                if cut.is_set():
                    return 0
                _land(view, f"volume-{start}.jsonl", batch[start : start + size])
                drain_stage(spark, view, source, StageReport(source.name), cut, settle=False)
        for stage in followers:
            drain_stage(spark, view, stage, StageReport(stage.name), cut, settle=False)
            if cut.is_set():
                break
            rehearsed += 1
    finally:
        cut.set()
        watcher.join()
    return rehearsed
