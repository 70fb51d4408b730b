"""`lakehouse status --wait-caught-up` (runtime.pipelines.await_caught_up): from files and locks alone, it
waits for the streams a process runs and names those still behind; with nothing running it says so at once."""

import time
from pathlib import Path

import pytest

from runtime.pipelines import await_caught_up
from runtime.sources.landing import place_in_landing
from warehouse.locks import hold_all
from warehouse.settings import Settings

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path) -> Settings:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})
    settings.ensure_home()
    return settings


def test_with_no_stream_running_it_says_so_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="no running `lakehouse run --continuous`"):
        await_caught_up([_settings(tmp_path)], 30)
    assert time.monotonic() - started < 5


def test_a_running_stream_with_a_file_it_has_not_read_is_named_when_the_wait_ends(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    place_in_landing(settings, "one.jsonl", lambda out: out.write('{"event_id": "e1"}\n'))
    behind = r"^not caught up within 1 s: bronze_events \(1 files\)$"
    with hold_all(settings, ["bronze_events"], purpose="a continuous run"), pytest.raises(TimeoutError, match=behind):
        await_caught_up([settings], 1)


def test_running_streams_with_nothing_unread_are_caught_up(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with hold_all(settings, ["bronze_events", "gold_fraud_alerts"], purpose="a continuous run"):
        statuses = await_caught_up([settings], 1)
    running = {s.stream for s in statuses if s.running}
    assert running == {"bronze_events", "gold_fraud_alerts"}
    assert all(s.backlog == 0 for s in statuses if s.running)


def test_at_the_stop_a_stream_whose_input_waits_is_marked_so_its_report_does_not_say_nothing_new(
    tmp_path: Path,
) -> None:
    """The followers' process, stopping: another pipeline's source stream with a landed file it never took is
    marked (runtime.progress.INPUT_LEFT); a stream with nothing unread is not."""
    from runtime.followers import Tended
    from runtime.progress import INPUT_LEFT

    settings = _settings(tmp_path)
    tended = Tended.of(settings, "landing", own=False)
    tended.tell_what_is_left()
    assert not any(INPUT_LEFT in report.figures for report in tended.reports.values())
    place_in_landing(settings, "one.jsonl", lambda out: out.write('{"event_id": "e1"}\n'))
    tended.tell_what_is_left()
    marked = {name for name, report in tended.reports.items() if report.figures.get(INPUT_LEFT)}
    assert marked == {"bronze_events"}
