"""The short chaos run (``make chaos``'s first cycle, without the cluster; the cluster's killed worker is
``tests/test_cluster.py``'s): over 12,000 events arriving from files and Kafka together, one SIGKILL of each
writer in turn (the continuous stream twice, reconcile, maintain, a run the landing sensor launched, the
Dagster daemon, replay), then the contract's invariants against the plain-Python reference, Dagster's runs,
slots and sensors' cursors, and the locks (``bench/chaos.py`` and ``bench/chaos_checks.py``)."""

import json

import pytest

from bench.chaos import main, result_file

pytestmark = [pytest.mark.system, pytest.mark.ui, pytest.mark.timeout(1800), pytest.mark.xdist_group("chaos")]


def test_a_kill_of_each_writer_in_turn_loses_and_doubles_nothing() -> None:
    code = main(["--short"])
    result = json.loads(result_file(short=True).read_text())
    assert result["kills_by_target"] == {
        "stream": 2, "reconcile": 1, "maintain": 1, "sensor run": 1, "daemon": 1, "replay": 1,
    }, result["kill_log"]  # fmt: skip
    assert all(kill["hit"] for kill in result["kill_log"])
    failed = {name: value for name, value in result["checks"].items() if value is False}
    assert not failed, (failed, result["commands_not_ok"])
    assert result["checks"]["lines_received"] == result["lines_landed"] + result["messages_produced"]
    assert code == 0
