"""The short chaos run in the suite (issue 26; ``make chaos`` is the long one): one cycle of SIGKILLs of every
writer but a cluster worker, in turn, while 6,000 events arrive from the landing folder and Kafka together;
then the contract's invariants against the plain-Python reference, ``validate`` and Dagster's state."""

import json
import subprocess
import sys

import pytest

from bench.chaos import result_file
from warehouse.settings import REPO_ROOT

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("chaos")]

#: What one cycle without the cluster kills, and how often.
KILLED = {"stream": 2, "reconcile": 1, "maintain": 1, "sensor run": 1, "daemon": 1, "replay": 1}


@pytest.mark.timeout(2400)
def test_a_cycle_of_kills_of_every_writer_loses_and_doubles_nothing() -> None:
    result_file(short=True).unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench.chaos", "--short"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=2300,
        check=False,
    )
    assert result_file(short=True).is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(result_file(short=True).read_text())
    report = done.stdout[-4000:]

    assert result["kills_by_target"] == KILLED, report
    assert all(kill["hit"] for kill in result["kill_log"]), report
    # Every kill was followed by its recovery: a restart, a rerun to its end, or run monitoring's verdict.
    assert all(kill["then"] for kill in result["kill_log"] if kill["target"] != "maintain"), report
    checks = result["checks"]
    failed = [name for name, value in checks.items() if value is False]
    assert not failed, report
    assert checks["lines_received"] == result["lines_landed"] + result["messages_produced"]
    assert checks["bronze_rows"] == checks["lines_received"]
    assert checks["gold_windows"] > 0
    # What did not end well was only ever a one-line refusal (another writer's turn), never a failure.
    assert {c["kind"] for c in result["commands_not_ok"]} <= {"refused"}, result["commands_not_ok"]
    assert result["passed"] is True and done.returncode == 0, report
