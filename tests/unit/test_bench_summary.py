"""The benchmark summary reads the freshness run's own figures apart from the bare twin's in the same file.

``bench.freshness`` writes both sides' runs to ``freshness.json`` (``side`` says which); the summary's
freshness rows, judged against the lakehouse's own targets, are the lakehouse's alone, and the twin's
figures appear only in the twin/ours rows.
"""

import json
from pathlib import Path

import pytest

from bench import report


def _run(side: str, rate: int, p50: float, p99: float) -> dict:
    return {
        "side": side,
        "rate": rate,
        "p50": p50,
        "p99": p99,
        "kept_up": True,
        "outputs": {"fraud_alerts": {"p50": p50 + 1, "p99": p99 + 1, "max": p99 + 2, "missing": 0}},
    }


def test_the_freshness_rows_are_the_lakehouses_own_and_the_twins_are_left_to_the_ratios(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    freshness = {
        "minutes": 2,
        "target_p99_seconds": 5.0,
        "highest_rate_kept_up": 1000,
        "rates": [_run("twin", 1000, 37.46, 65.44), _run("lakehouse", 1000, 4.58, 7.59)],
    }
    (tmp_path / "freshness.json").write_text(json.dumps(freshness))
    monkeypatch.setattr(report, "RESULTS", tmp_path)

    rows = report.rows()
    measured = [value for figure, value, _, _ in rows if "events/s" in figure and "twin" not in figure]

    assert "4.58 / 7.59 s (kept up)" in measured
    assert "5.58 / 8.59 s" in measured  # the lakehouse's fraud alerts
    assert not any("37.46" in value or "38.46" in value for value in measured)


def test_the_twin_rows_say_how_long_each_side_took_to_take_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lakehouse rehearses before it takes lines, and no probe waits for that: the summary says how long."""
    memory = {"rate": 1000, "peak_ratio": 1.1, "steady_ratio": 1.0, "ours_peak_mb": 5360.0, "twin_peak_mb": 4873.0,
              "ours_steady_mb": 4424.0, "twin_steady_mb": 4424.0, "ours_ready_seconds": 31.4,
              "twin_ready_seconds": 9.8}  # fmt: skip
    twin = {"minutes": 2, "load_average": [3.9, 2.8, 2.8], "twin_over_ours": [], "memory_ours_over_twin": [memory]}
    (tmp_path / "freshness-twin.json").write_text(json.dumps(twin))
    monkeypatch.setattr(report, "RESULTS", tmp_path)

    shown = {figure: value for figure, value, _, _ in report._twin_rows()}
    assert shown["  start → taking lines at 1,000 events/s (freshness-twin.json): ours / twin"].startswith(
        "31.4 / 9.8 s"
    )
