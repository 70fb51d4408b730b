"""Work handed to a running continuous run: a reconcile or a validation asked for beside it runs in its
followers' thread, between two of their turns.

That process's driver JVM is warm (its plans compiled, its classes loaded) and already has its share of the
cores: a reconcile started on its own beside a continuous run is a third JVM on the same cores, most of its
time spent starting and compiling (about 35 s for one late event on two cores, against a few seconds warm).

A request is a JSON file in ``<home>/requests/``, written whole (a rename); the serving process says it
serves in ``requests/serving`` (its pid and the pipelines it runs) for as long as it runs, takes each request
between two follower turns, does it with the ``Handler`` of its kind and writes the answer beside it (the
result as JSON, or the error's one line). The runtime serves reconciles; the process that starts the run
may add kinds (the CLI adds validations, which the runtime's floor does not import). The asker
waits for the answer while the server lives; if the server goes before answering, the asker does the work
itself: a reconcile is exactly once under its own locks, so one cut off and done again writes nothing twice.
"""

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from runtime.progress import StageReport
from warehouse.settings import Settings

SERVING = "serving"
#: Does one kind of request: (the serving process's Spark, the named pipelines' settings, the request) → the
#: answer's result, JSON-able. A module-level function, so a run's job can carry it to its process by name.
Handler = Callable[[SparkSession, list[Settings], dict[str, Any]], dict[str, Any]]


def requests_dir(settings: Settings) -> Path:
    return settings.lakehouse_home / "requests"


def _write_whole(path: Path, content: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(content), encoding="utf-8")
    partial.replace(path)


def _started(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, from /proc; empty where there is none): with the pid, it
    names one process, never a later one given the same pid."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return ""


def _alive(pid: int, started: str = "") -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not), and is the process
    that started at ``started`` when that is known."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] != "Z" and (not started or fields[19] == started)
    return True


@contextlib.contextmanager
def serving(settings: Settings, pipelines: Sequence[str]) -> Iterator[None]:
    """Announce that this process takes requests for ``pipelines`` while the block runs."""
    folder = requests_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    announced = {"pid": os.getpid(), "started": _started(os.getpid()), "pipelines": list(pipelines)}
    _write_whole(folder / SERVING, announced)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if json.loads((folder / SERVING).read_text(encoding="utf-8"))["pid"] == os.getpid():
                (folder / SERVING).unlink()


def server(settings: Settings, pipelines: Sequence[str]) -> tuple[int, str] | None:
    """The pid and start of a live process serving every one of ``pipelines``, else None."""
    try:
        announced = json.loads((requests_dir(settings) / SERVING).read_text(encoding="utf-8"))
        pid, started = int(announced["pid"]), str(announced.get("started", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not set(pipelines) <= set(announced.get("pipelines", ())) or not _alive(pid, started):
        return None
    return pid, started


def hand_over(settings: Settings, kind: str, args: dict[str, Any], pipelines: Sequence[str]) -> dict[str, Any] | None:
    """Have the running continuous run do ``kind`` for ``pipelines``: its result, or None when no live run
    serves them (or it went before answering): then the caller does it itself. A failure there is raised
    here, in its one line."""
    serving_process = server(settings, pipelines)
    if serving_process is None:
        return None
    folder = requests_dir(settings)
    request = folder / f"{time.time_ns()}-{uuid.uuid4().hex[:8]}.json"
    answer = request.with_suffix(".answer")
    _write_whole(request, {"kind": kind, "pipelines": list(pipelines), **args})
    while not answer.exists():
        if not _alive(*serving_process):
            request.unlink(missing_ok=True)
            return None
        time.sleep(0.1)
    done = json.loads(answer.read_text(encoding="utf-8"))
    answer.unlink()
    if "error" in done:
        raise RuntimeError(done["error"])
    return done["result"]


def as_result(reports: Sequence[StageReport]) -> dict[str, Any]:
    """Reports as an answer's result."""
    return {"reports": [report.to_json() for report in reports]}


def reports_of(result: dict[str, Any]) -> list[StageReport]:
    """The reports an answer's result holds."""
    return [StageReport(**report) for report in result["reports"]]


def pending(settings: Settings) -> list[tuple[Path, dict[str, Any]]]:
    """The requests not answered yet, oldest first."""
    folder = requests_dir(settings)
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("[0-9]*.json")):
        with contextlib.suppress(OSError, ValueError):
            found.append((path, json.loads(path.read_text(encoding="utf-8"))))
    return found


def answer(request: Path, result: dict[str, Any] | None = None, error: str | None = None) -> None:
    """Answer ``request`` with the result of the work done, or with the one line of its failure."""
    done = {"error": error} if error is not None else {"result": result or {}}
    _write_whole(request.with_suffix(".answer"), done)
    request.unlink(missing_ok=True)
