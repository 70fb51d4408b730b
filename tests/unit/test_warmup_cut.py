"""A continuous run's rehearsal of its followers gives way to the first real line (no JVM: the followers' runs
are stood in for by functions that wait for their stop, as a query's run does; `tests/test_warmup.py` runs
the real ones)."""

import threading
import time
from pathlib import Path

import pytest

from runtime import warmup
from runtime.stages import Stage, stages
from runtime.warmup import Rehearsal
from warehouse.settings import Settings


class StandIns:
    """The followers' stand-in runs: each lasts ``seconds`` unless stopped; ``done`` lists (stage, whether
    it was stopped) in order."""

    def __init__(self) -> None:
        self.seconds = 0.05
        self.done: list[tuple[str, bool]] = []

    def drain(self, spark, view, stage, report, stop: threading.Event, settle: bool = True) -> None:
        self.done.append((stage.name, stop.wait(self.seconds)))


def _stages(settings: Settings) -> tuple[Stage, ...]:
    return stages(settings).followers


def _followers(settings: Settings) -> list[str]:
    return [stage.name for stage in _stages(settings)]


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> StandIns:
    stand_ins = StandIns()
    monkeypatch.setattr(warmup, "drain_stage", stand_ins.drain)
    monkeypatch.setattr(warmup, "LOOK_SECONDS", 0.05)
    return stand_ins


def test_with_nothing_arriving_every_follower_rehearses_in_the_cycles_order(runs: StandIns) -> None:
    settings = Settings.from_env({})
    assert warmup._rehearse_rest(None, settings, None, _stages(settings), lambda: False) == 4
    assert runs.done == [(name, False) for name in _followers(settings)]


def test_a_line_that_arrives_stops_the_running_follower_and_the_rest_never_start(runs: StandIns) -> None:
    settings = Settings.from_env({})
    runs.seconds = 1.5
    began = time.monotonic()
    arrived = lambda: time.monotonic() - began > 2.0  # noqa: E731 (during the second follower's run)
    assert warmup._rehearse_rest(None, settings, None, _stages(settings), arrived) == 1
    first, second = _followers(settings)[:2]
    assert runs.done == [(first, False), (second, True)]
    assert time.monotonic() - began < 2.0 + 1.0  # given way within a look, not at the end of the run


def test_lines_waiting_at_the_start_skip_the_followers_rehearsal(runs: StandIns) -> None:
    settings = Settings.from_env({})
    assert warmup._rehearse_rest(None, settings, lambda: ["{}"] * 4, _stages(settings), lambda: True) == 0
    assert runs.done == []


def test_the_volume_goes_through_the_critical_path_in_two_batches_before_the_followers(
    runs: StandIns, tmp_path: Path
) -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    volume = [f'{{"n": {n}}}' for n in range(5)]
    assert warmup._rehearse_rest(None, settings, lambda: volume, _stages(settings), lambda: False) == 4
    source = stages(settings).source.name
    assert runs.done == [(source, False), (source, False)] + [(name, False) for name in _followers(settings)]
    landed = sorted(Path(settings.landing_dir).glob("volume-*.jsonl"), key=lambda f: int(f.stem.split("-")[1]))
    assert [f.read_text().splitlines() for f in landed] == [volume[:3], volume[3:]]


def test_a_line_during_the_volume_stops_its_batch_and_no_follower_rehearses(runs: StandIns, tmp_path: Path) -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    runs.seconds = 1.5
    began = time.monotonic()
    arrived = lambda: time.monotonic() - began > 0.5  # noqa: E731 (during the volume's first batch)
    assert warmup._rehearse_rest(None, settings, lambda: ["{}"] * 4, _stages(settings), arrived) == 0
    assert runs.done == [(stages(settings).source.name, True)]
    assert time.monotonic() - began < 0.5 + 1.0


def test_the_runs_line_says_how_far_the_rehearsal_went() -> None:
    assert Rehearsal(27.14, 4, 4).line("purchases") == (
        "purchases: Spark warmed up in 27.1 s, its 4 followers too; taking lines now"
    )
    assert Rehearsal(16.0, 1, 4).line("purchases") == (
        "purchases: Spark warmed up in 16.0 s, 1 of its 4 followers (lines came); taking lines now"
    )
    assert Rehearsal(9.5, 0, 0).line("readings") == "readings: Spark warmed up in 9.5 s; taking lines now"


def test_a_broker_that_cannot_be_asked_counts_as_nothing_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env({})

    def unreachable(view, stage) -> bool:
        raise OSError("no broker")

    monkeypatch.setattr(warmup, "has_new_input", unreachable)
    assert not warmup.lines_waiting([(settings, "kafka")])
    monkeypatch.setattr(warmup, "has_new_input", lambda view, stage: stage.source == "landing")
    assert warmup.lines_waiting([(settings, "kafka"), (settings, "landing")])
