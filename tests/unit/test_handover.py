"""Work handed to a running continuous run (runtime.handover): the asker's side against a server played by a
thread of this process, and a server that dies before answering (the asker then does the work itself)."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runtime.handover import answer, as_result, hand_over, pending, reports_of, requests_dir, server, serving
from runtime.progress import StageReport
from warehouse.settings import Settings

pytestmark = pytest.mark.unit


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})


def _serve_once(settings: Settings, respond, stop: threading.Event) -> None:
    while not stop.is_set():
        for path, request in pending(settings):
            respond(path, request)
            return
        time.sleep(0.02)


def test_a_request_is_done_by_the_server_and_its_reports_come_back(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    seen: list[dict] = []

    def respond(path: Path, request: dict) -> None:
        seen.append(request)
        done = StageReport("reconcile_late_events")
        done.add({"rows_in": 3.0, "rows_written": 2.0}, 1.5)
        answer(path, as_result([done]))

    stop = threading.Event()
    with serving(settings, ["purchases", "readings"]):
        assert server(settings, ["readings"]) is not None
        assert server(settings, ["readings"])[0] == os.getpid()
        worker = threading.Thread(target=_serve_once, args=(settings, respond, stop))
        worker.start()
        result = hand_over(settings, "reconcile", {"dates": ["2024-01-01"], "wait": 0}, ["purchases"])
        stop.set()
        worker.join()
    reports = reports_of(result) if result is not None else None
    assert seen == [{"kind": "reconcile", "pipelines": ["purchases"], "dates": ["2024-01-01"], "wait": 0}]
    assert reports is not None and len(reports) == 1
    assert (reports[0].name, reports[0].batches, reports[0].seconds) == ("reconcile_late_events", 1, 1.5)
    assert reports[0].figures == {"rows_in": 3.0, "rows_written": 2.0}
    # Nothing is left behind: no request, no answer, and the announcement went with the server.
    assert sorted(p.name for p in requests_dir(settings).iterdir()) == []


def test_a_failure_there_is_raised_here_in_its_line(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    stop = threading.Event()
    with serving(settings, ["purchases"]):
        worker = threading.Thread(
            target=_serve_once, args=(settings, lambda path, _: answer(path, error="gold is held by a replay"), stop)
        )
        worker.start()
        with pytest.raises(RuntimeError, match=r"^gold is held by a replay$"):
            hand_over(settings, "reconcile", {}, ["purchases"])
        stop.set()
        worker.join()


def test_no_server_or_one_not_running_the_pipeline_leaves_the_work_to_the_asker(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert hand_over(settings, "reconcile", {}, ["purchases"]) is None
    with serving(settings, ["purchases"]):
        assert server(settings, ["purchases", "readings"]) is None
        assert hand_over(settings, "reconcile", {}, ["purchases", "readings"]) is None
    assert pending(settings) == []


def test_an_announcement_of_a_process_long_gone_is_not_taken_for_a_later_one_with_its_pid(tmp_path: Path) -> None:
    """A pid is reused: the announcement names the process by its start too."""
    settings = _settings(tmp_path)
    folder = requests_dir(settings)
    folder.mkdir(parents=True)
    (folder / "serving").write_text(f'{{"pid": {os.getpid()}, "started": "1", "pipelines": ["purchases"]}}')
    assert server(settings, ["purchases"]) is None
    assert hand_over(settings, "reconcile", {}, ["purchases"]) is None


def test_a_server_that_dies_before_answering_leaves_the_work_to_the_asker(tmp_path: Path) -> None:
    """A served announcement whose process has gone (killed between two turns): the asker's request is taken
    back and it is told to do the work itself."""
    settings = _settings(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    folder = requests_dir(settings)
    folder.mkdir(parents=True)
    (folder / "serving").write_text(f'{{"pid": {child.pid}, "pipelines": ["purchases"]}}')
    threading.Timer(0.5, child.kill).start()
    started = time.monotonic()
    assert hand_over(settings, "reconcile", {}, ["purchases"]) is None
    child.wait()
    assert time.monotonic() - started < 10
    assert pending(settings) == []


def test_each_kind_is_done_by_its_handler_and_a_kind_not_served_is_refused_in_one_line(tmp_path: Path) -> None:
    """The followers' serve(): a validation goes to the handler the run was given for it, with the settings of
    the pipelines it names; a kind nobody serves is answered with one line, and the run goes on."""
    from runtime.followers import Tended, serve

    settings = _settings(tmp_path)
    settings.ensure_home()
    given: list[tuple[object, list[str], dict]] = []

    def validate_here(spark: object, views: list[Settings], request: dict) -> dict:
        given.append((spark, [view.spec.name for view in views], request))
        return {"summary": {"passed": True}}

    tended = [Tended.of(settings, "landing", own=True)]
    spark = object()  # the handlers here never touch Spark
    outcomes: dict[str, object] = {}

    def ask(kind: str) -> None:
        try:
            outcomes[kind] = hand_over(settings, kind, {"suites": ["freshness"]}, ["purchases"])
        except RuntimeError as error:
            outcomes[kind] = str(error)

    with serving(settings, ["purchases"]):
        for kind in ("validate", "replay"):
            asker = threading.Thread(target=ask, args=(kind,))
            asker.start()
            while not pending(settings):
                time.sleep(0.02)
            assert serve(spark, tended, {"validate": validate_here}) is True  # type: ignore[arg-type]
            asker.join()
    assert outcomes == {"validate": {"summary": {"passed": True}}, "replay": "this run does not take 'replay' requests"}
    assert given == [(spark, ["purchases"], {"kind": "validate", "pipelines": ["purchases"], "suites": ["freshness"]})]
    assert serve(spark, tended, {}) is False  # type: ignore[arg-type]
