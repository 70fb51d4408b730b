"""A continuous run as the demo drives it: warmed up before its first line, fed by `lakehouse ingest --wait`,
reconciled and validated beside it by `lakehouse reconcile` and `lakehouse validate`, which the running
stream's followers' process does.

Golden values by hand from the event rules (the seeds' running example): A 10:00 → 5 + 2, B 10:00 → 3,
B 10:05 → 1, C 13:00 → 4; C moves the watermark to 12:58, so A 10:01 → 1 is too late and reconcile folds it
into (A, 10:00) as its second revision, with one correction row. Then A 10:02 → 2, too late as well, is
folded by a run of Dagster's reconcile job (the late-data sensor's) beside the stream, which the stream's
followers' process does too: (A, 10:00) → 10.00, 4 events, third revision.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cli.common import rehearsal_lines, rehearsal_volume
from orchestration import definitions, pipeline, reconcile
from runtime import warmup
from runtime.progress import rehearsing_marker
from runtime.runner import prepare
from runtime.stages import stages
from tests.lines import SEEDS_EXAMPLE, event
from warehouse.settings import Settings

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("warmup")]  # both look at the scratch homes
LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def _gold(home: Path) -> dict[tuple[str, str], tuple[str, int, int]]:
    rows = DeltaTable(str(home / "tables" / "gold" / "user_spend_5m")).to_pyarrow_table().to_pylist()
    return {
        (r["user_id"], r["window_start"].strftime("%H:%M")): (str(r["total_amount"]), r["event_count"], r["revision"])
        for r in rows
    }


def test_a_warmed_stream_takes_handed_files_and_a_reconcile_beside_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_STREAM_WARMUP": "true"}
    first, too_late = tmp_path / "first.jsonl", tmp_path / "too-late.jsonl"
    first.write_text("\n".join([*SEEDS_EXAMPLE, event("c1", "C", "2024-01-01T13:00:00Z", "4")]) + "\n")
    too_late.write_text(event("a3", "A", "2024-01-01T10:01:00Z", "1") + "\n")
    home.mkdir()
    log = (home / "stream.log").open("w")
    stream = subprocess.Popen([LAKEHOUSE, "run", "--continuous"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def lakehouse(*args: str) -> subprocess.CompletedProcess:
            done = subprocess.run([LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout + done.stderr
            return done

        # `ingest --wait` lands the first file once the followers rehearse: it cuts that short (the run's line
        # below says how many had rehearsed) and is taken at once.
        for lines in (first, too_late):
            handed = lakehouse("ingest", "--wait", "300", str(lines)).stdout
            assert re.search(r": \S+ in gold \d+\.\d s after landing \(one micro-batch\)", handed)
        assert _gold(home) == {
            ("A", "10:00"): ("7.00", 2, 1),
            ("B", "10:00"): ("3.00", 1, 1),
            ("B", "10:05"): ("1.00", 1, 1),
            ("C", "13:00"): ("4.00", 1, 1),
        }
        reconciled = lakehouse("reconcile").stdout
        assert "done by the running `lakehouse run --continuous`, between its followers' turns" in reconciled
        assert "1 late events, 1 keys recomputed, 1 keys changed" in reconciled
        assert _gold(home)[("A", "10:00")] == ("8.00", 3, 2)
        corrections = DeltaTable(str(home / "tables" / "gold" / "corrections")).to_pyarrow_table().to_pylist()
        changes = [(c["table_name"], c["user_id"], str(c["old_total_amount"]), str(c["new_total_amount"]))
                   for c in corrections]  # fmt: skip
        assert [change for change in changes if change[0] == "gold.user_spend_5m"] == [
            ("gold.user_spend_5m", "A", "7.00", "8.00")
        ]
        # The hopping windows over it, when the followers had derived them before the reconcile, change alike.
        assert {change[1:] for change in changes} == {("A", "7.00", "8.00")}
        # The late-data sensor's job beside the stream: handed over too, its figures in Dagster as ever.
        even_later = tmp_path / "even-later.jsonl"
        even_later.write_text(event("a4", "A", "2024-01-01T10:02:00Z", "2") + "\n")
        lakehouse("ingest", "--wait", "300", str(even_later))
        jobs = definitions.build_defs(Settings.from_env(env), [pipeline, reconcile])
        with dg.instance_for_test() as instance:
            run = jobs.resolve_job_def("reconcile_job").execute_in_process(instance=instance)
            logged = [entry.user_message for entry in instance.all_logs(run.run_id)]
        assert run.success
        assert any("done by the running `lakehouse run --continuous`" in message for message in logged), logged
        materialized = [e for e in run.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
        metadata = materialized[0].event_specific_data.materialization.metadata
        assert (metadata["late_events_folded"].value, metadata["corrections_written"].value) == (1, 1)
        assert _gold(home)[("A", "10:00")] == ("10.00", 4, 3)
        validated = subprocess.run([LAKEHOUSE, "validate", "--json"], env=env, capture_output=True, text=True)
        assert validated.returncode == 0, validated.stdout + validated.stderr
        summary = json.loads(validated.stdout)
        assert summary["passed"] and {s["suite"] for s in summary["suites"]} >= {"bronze.events", "completeness"}
        assert Path(summary["report"]).is_file()
        # Done there, logged as a validation run here would be: every suite's outcomes under its run id.
        logged = DeltaTable(str(home / "tables" / "ops" / "dq_results")).to_pyarrow_table().to_pylist()
        assert {r["run_id"] for r in logged} == {summary["run_id"]}
        shown = lakehouse("validate", "--suite", "freshness").stdout
        assert "done by the running `lakehouse run --continuous`, between its followers' turns" in shown
        caught = json.loads(lakehouse("status", "--wait-caught-up", "120", "--json").stdout)
        assert {s["stream"] for s in caught if s["running"]} >= {"bronze_events", "gold_fraud_alerts"}
        assert [s["stream"] for s in caught if s["running"] and s["backlog"]] == []
    finally:
        stream.send_signal(signal.SIGTERM)
        stream.wait(timeout=180)
        log.close()
    output = (home / "stream.log").read_text()
    assert stream.returncode == 0, output
    assert re.search(
        r"purchases: Spark warmed up in \d+\.\d s, [0-3] of its 4 followers \(lines came\); taking lines now", output
    ), output
    assert "input left for the next run" not in output  # it had caught up before the stop
    # The rehearsal's lines went to a scratch home, thrown away: bronze holds the seven lines landed, nothing else.
    bronze = DeltaTable(str(home / "tables" / "bronze" / "events")).to_pyarrow_table()
    assert bronze.num_rows == 7
    assert not list(Path(tempfile.gettempdir()).glob("lakehouse-warmup-*"))  # only this test warms up
    assert not (home / "requests" / "serving").exists()


@pytest.mark.gold_outputs("all")
def test_a_quiet_start_rehearses_every_follower_in_a_scratch_home_it_then_deletes(
    spark: SparkSession, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing waiting: the critical path runs over the rehearsal's lines, then over the volume in two batches,
    then each follower over all of them, in a scratch home; the real home gets no line, no checkpoint, no
    progress row, and no scratch home is left."""
    prepare(spark, settings)
    drained, real_drain = [], warmup.drain_stage

    def drain(spark, view, stage, report, stop, settle=True) -> None:
        real_drain(spark, view, stage, report, stop, settle)
        bronze = DeltaTable(str(view.tables_dir / "bronze/events")).to_pyarrow_table().num_rows
        drained.append((stage.name, bronze))

    monkeypatch.setattr(warmup, "drain_stage", drain)
    lines, volume = rehearsal_lines(settings), rehearsal_volume(settings)
    done = warmup.warm_up(spark, settings, lines, waiting=lambda: False, volume=lambda: volume)
    assert len(volume) == 40_000
    half = len(volume) // 2
    assert drained[:2] == [("bronze_events", len(lines) + half), ("bronze_events", len(lines) + len(volume))]
    assert [name for name, _ in drained[2:]] == [stage.name for stage in stages(settings).followers]
    assert (done.followers_rehearsed, done.followers) == (4, 4)
    assert done.line("purchases").endswith(", its 4 followers too; taking lines now")
    assert not list(settings.checkpoints_dir.glob("*/offsets"))
    for table in ("bronze/events", "silver/events", "gold/user_spend_5m", "gold/fraud_alerts", "ops/stream_progress"):
        assert DeltaTable(str(settings.tables_dir / table)).to_pyarrow_table().num_rows == 0, table
    assert not rehearsing_marker(settings).exists()
    assert not list(Path(tempfile.gettempdir()).glob("lakehouse-warmup-*"))
