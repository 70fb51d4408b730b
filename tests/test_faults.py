"""Faults met on real streams and Delta tables: each stops the run before a stream starts, with one line
that names the recovery, and the recovery ends with bronze holding every landed line once and gold equal
to the plain-Python reference."""

import os
import shutil
import subprocess
import time
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark.sql import functions as F

import runtime.carry
import runtime.replay_swap
import runtime.stages
from devtools.synthetic import StreamSpec, generate_lines
from expectations.suites import conservation_suite
from runtime.checkpoints import LANDING_STAGE, checkpoint_dir, uncommitted_batch
from runtime.faults import Fault
from runtime.replay import run_replay
from runtime.runner import run_once, run_reconcile, swap_marker
from tests.lines import HOURS_LATER, SEEDS_EXAMPLE, TOO_LATE, land
from tests.reference import broken_correction_chains, landing_lines, window_totals
from tests.servers import LAKEHOUSE
from warehouse.catalog import (
    BRONZE_EVENTS,
    GOLD_CORRECTIONS,
    SILVER_DUPLICATES,
    SILVER_EVENTS,
    SILVER_LATE_EVENTS,
    SILVER_QUARANTINE,
    firings_table,
    hopping_table,
    kept_tables,
    tumbling_table,
)
from warehouse.delta import read_table
from warehouse.settings import Settings
from warehouse.storage import open_delta


def _land_events(settings, name: str, seed: int, events: int = 200) -> None:
    spec = StreamSpec(
        events=events, users=6, rate=2.0, disorder_seconds=30, duplicate_fraction=0.05,
        late_fraction=0.04, invalid_fraction=0.03, seed=seed,
    )  # fmt: skip
    land(settings, name, list(generate_lines(spec)))


def _assert_exact(spark, settings) -> None:
    """Invariants 1 and 2 after a reconcile: bronze = the lines landed; gold = the reference."""
    run_reconcile(spark, settings)
    lines = landing_lines(settings.landing_dir)
    assert read_table(spark, settings, BRONZE_EVENTS).count() == len(lines)
    gold = {
        (r.user_id, r.window_start.replace(tzinfo=UTC)): (r.total_amount, r.event_count)
        for r in read_table(spark, settings, tumbling_table(settings)).collect()
    }
    expected: dict[tuple[str, datetime], tuple[Decimal, int]] = window_totals(lines)
    assert gold == expected


def _newest(folder) -> str:
    return str(max(int(name.name) for name in folder.iterdir() if name.name.isdigit()))


def test_a_lost_source_checkpoint_is_refused_in_one_line_and_a_replay_from_the_landing_zone_recovers(
    spark, settings
) -> None:
    """The landing stream's checkpoint deleted: a restart would read every landed file again (bronze and
    silver twice). It is refused, in one line from the command too, and `replay --source landing` rebuilds
    bronze's file rows and the stream's position from the landing zone."""
    _land_events(settings, "first.jsonl", seed=1)
    run_once(spark, settings)
    shutil.rmtree(checkpoint_dir(settings, LANDING_STAGE))
    _land_events(settings, "second.jsonl", seed=2)
    with pytest.raises(Fault, match=r"bronze_events stream is gone .* `lakehouse replay --source landing`"):
        run_once(spark, settings)
    env = {**os.environ, "LAKEHOUSE_HOME": str(settings.home)}
    command = subprocess.run([LAKEHOUSE, "run", "--once"], env=env, capture_output=True, text=True, timeout=120)
    assert command.returncode == 1
    assert command.stderr.count("\n") == 1 and "replay --source landing" in command.stderr, command.stderr

    run_replay(spark, settings, source="landing")
    run_once(spark, settings)  # the second file came in with the rebuild: nothing new
    _land_events(settings, "third.jsonl", seed=3)
    run_once(spark, settings)
    _assert_exact(spark, settings)


def test_a_replay_after_a_source_batch_was_cut_off_past_its_bronze_commit_counts_its_lines_once(
    spark, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The landing stream dies after a batch's bronze commit and before its silver write (the commit entry
    never written). A replay rebuilds silver from bronze, those lines included, and records the batch as done:
    its re-run would have found bronze written and carried the same lines into silver again, each a
    duplicate of itself (found by the chaos run). A batch cut off before its bronze commit is left to re-run."""
    _land_events(settings, "first.jsonl", seed=8)
    run_once(spark, settings)
    _land_events(settings, "second.jsonl", seed=9)

    def dies(*_: object, **__: object) -> None:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(runtime.carry, "refined", dies)
    with pytest.raises(Exception, match="the process died here"):
        run_once(spark, settings)
    monkeypatch.undo()
    checkpoint = checkpoint_dir(settings, LANDING_STAGE)
    cut_off = uncommitted_batch(checkpoint)
    assert cut_off is not None
    assert read_table(spark, settings, BRONZE_EVENTS).count() == len(landing_lines(settings.landing_dir))

    assert run_replay(spark, settings).settled == {LANDING_STAGE: cut_off}
    assert uncommitted_batch(checkpoint) is None
    run_once(spark, settings)
    _land_events(settings, "third.jsonl", seed=10)
    run_once(spark, settings)
    _assert_exact(spark, settings)
    outcomes = (SILVER_EVENTS, SILVER_QUARANTINE, SILVER_DUPLICATES)
    classified = sum(read_table(spark, settings, table).count() for table in outcomes)
    assert classified == len(landing_lines(settings.landing_dir))
    conservation = conservation_suite(spark, settings)
    assert conservation.outcomes and not conservation.failed, conservation.failed


@pytest.mark.gold_outputs("firings", "hopping")
def test_a_replay_that_died_between_logging_golds_changes_and_swapping_gold_in_is_finished_by_the_next(
    spark, settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay dies after logging a changed window's correction (and its firing) and before swapping the
    tumbling table in (found by the chaos run). The next replay finishes that swap from the dead one's staging
    under its transaction id before rebuilding: the change is logged once, the log chains revision by
    revision, and the dead replay's staging is gone."""
    land(settings, "first.jsonl", SEEDS_EXAMPLE)
    run_once(spark, settings)
    land(settings, "later.jsonl", [HOURS_LATER])
    run_once(spark, settings)
    land(settings, "too-late.jsonl", [TOO_LATE])  # only a reconcile or a replay folds it into A's 10:00
    run_once(spark, settings)
    gold = tumbling_table(settings)
    swap = runtime.replay_swap.overwrite

    def dies_at_gold(spark_, content, settings_, table, *args: object) -> tuple[int, int]:
        if table.name == gold.name:
            raise RuntimeError("the process died here")
        return swap(spark_, content, settings_, table, *args)

    monkeypatch.setattr(runtime.replay_swap, "overwrite", dies_at_gold)
    with pytest.raises(RuntimeError, match="the process died here"):
        run_replay(spark, settings)
    monkeypatch.undo()

    def logged() -> list[dict]:
        return [r.asDict() for r in read_table(spark, settings, GOLD_CORRECTIONS).collect()]

    def by_replay() -> list[tuple]:
        rows = [r for r in logged() if r["cause"] == "replay" and r["table_name"] == gold.name]
        return [(r["user_id"], r["old_total_amount"], r["new_total_amount"], r["revision"]) for r in rows]

    (dead,) = by_replay()  # the dead replay logged A's 10:00 window, 7 -> 8, and died
    assert dead[:3] == ("A", Decimal("7.00"), Decimal("8.00"))
    assert swap_marker(settings).exists()

    report = run_replay(spark, settings)
    assert report.finished == [gold.name]
    # The 12 hours covering A's 10:00 (09:05 ... 10:00), which the dead replay had not reached; the tumbling
    # table's rebuild agrees with the swap it finished.
    assert report.gold_keys_changed == 12
    assert by_replay() == [dead]
    rows = [r.asDict() for r in read_table(spark, settings, gold).collect()]
    assert broken_correction_chains(logged(), rows, gold.name) == []
    hours = [r.asDict() for r in read_table(spark, settings, hopping_table(settings)).collect()]
    assert broken_correction_chains(logged(), hours, hopping_table(settings).name) == []
    a_1000 = next(r for r in rows if (r["user_id"], r["window_start"].strftime("%H:%M")) == ("A", "10:00"))
    assert (a_1000["total_amount"], a_1000["revision"]) == (Decimal("8.00"), dead[3])
    firings = read_table(spark, settings, firings_table(settings)).where(F.col("user_id") == "A").collect()
    assert sorted(f.total_amount for f in firings if f.revision == dead[3]) == [Decimal("8.00")]
    assert not swap_marker(settings).exists()
    assert [p.name for p in (settings.home / "replay").iterdir()] == []
    _assert_exact(spark, settings)


@pytest.mark.parametrize("damage", ["truncated offset entry", "ledger without its writer"])
def test_a_damaged_checkpoint_file_is_named_and_the_replay_recovers(spark, settings, damage: str) -> None:
    """A truncated offset entry of the landing stream, or silver's ledger of carried batch numbers without
    the writer id its commits carry: named in the refusal, and the replay it names ends exact."""
    _land_events(settings, "first.jsonl", seed=4)
    run_once(spark, settings)
    if damage == "truncated offset entry":
        offsets = checkpoint_dir(settings, LANDING_STAGE) / "offsets"
        entry = offsets / _newest(offsets)
        entry.write_text(entry.read_text().splitlines()[0] + "\n")
        expected, recovery = rf"offsets/{entry.name} is truncated", ["--source", "landing"]
    else:
        (checkpoint_dir(settings, "silver_events") / "carried" / "writer").unlink()
        expected, recovery = r"carried/writer is missing", []
    _land_events(settings, "second.jsonl", seed=5)
    with pytest.raises(Fault, match=rf"damaged \({expected}\).*`lakehouse replay{' ' if recovery else ''}"):
        run_once(spark, settings)
    run_replay(spark, settings, source=recovery[1] if recovery else "bronze")
    run_once(spark, settings)
    _assert_exact(spark, settings)


@pytest.mark.parametrize("damage", ["cut short", "deleted with its checksum"])
def test_a_corrupt_delta_commit_is_named_and_moving_the_table_aside_then_replaying_recovers(
    spark, settings, damage: str
) -> None:
    """Silver's newest commit cut short (a disk that lost the file's end): every reader would fail on it. Or
    silver.late_events' newest commit deleted, checksum and all, as a commit of delta-rs's (which writes
    none) would be: the table just looks older, and only the position of the stream that read it (the
    late-event folding) tells. The run names the table and what is wrong; with the table's folder moved
    aside, `replay` rebuilds it from bronze into a new table, and everything after it, exact."""
    _land_events(settings, "first.jsonl", seed=6)
    run_once(spark, settings)
    if damage == "cut short":
        table = SILVER_EVENTS
        newest = max((table.path(settings) / "_delta_log").glob("*.json"))
        newest.write_bytes(newest.read_bytes()[:100])
        expected = rf"{newest.name} is truncated"
    else:
        table = SILVER_LATE_EVENTS
        run_reconcile(spark, settings)  # the folding stream reads every late event, to the log's end
        newest = max((table.path(settings) / "_delta_log").glob("*.json"))
        for file in newest.parent.glob(f"{newest.name[:20]}.*"):
            file.unlink()
        expected = rf"the reconcile_late_events stream has read version {int(newest.name[:20])}, but the log"
    with pytest.raises(Fault, match=rf"Delta log of {table.name} is damaged \({expected}"):
        run_once(spark, settings)
    table.path(settings).rename(settings.home / "damaged-table")
    run_replay(spark, settings)
    _land_events(settings, "second.jsonl", seed=7)
    run_once(spark, settings)
    _assert_exact(spark, settings)


def test_a_landing_file_removed_after_it_was_listed_is_told_and_a_copy_ingested_again_is_received(
    spark, settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three files, one per batch, all listed when the run starts; the second is removed while the first
    batch runs. Spark's file source drops it without a word: the batch tells of it (one stderr line and
    ``files_missing``), the stream goes on, and a copy ingested again arrives as a new file, exact."""
    settings = replace(settings, streams=replace(settings.streams, max_files_per_trigger=1))
    for index in range(3):
        _land_events(settings, f"part{index}.jsonl", seed=20 + index)
    removed = sorted(p for p in settings.landing_dir.iterdir() if not p.name.startswith("."))[1]
    content = removed.read_bytes()
    carry = runtime.stages.carry_to_gold

    def remove_the_second_file_during_the_first_batch(*args, **kwargs):
        if removed.exists():
            removed.unlink()
        return carry(*args, **kwargs)

    monkeypatch.setattr(runtime.stages, "carry_to_gold", remove_the_second_file_during_the_first_batch)
    reports = {report.name: report for report in run_once(spark, settings)}
    told = [line for line in capsys.readouterr().err.splitlines() if removed.name in line]
    assert len(told) == 1 and "was removed after the landing stream listed it" in told[0], told
    assert reports[LANDING_STAGE].figures.get("files_missing") == 1
    assert read_table(spark, settings, BRONZE_EVENTS).count() == len(landing_lines(settings.landing_dir))

    monkeypatch.setattr(runtime.stages, "carry_to_gold", carry)
    land(settings, removed.name.split("-", 1)[1], content.decode().splitlines())
    run_once(spark, settings)
    _assert_exact(spark, settings)


#: Root without its override of file modes: it meets a folder's mode as any other user does.
_OVERRIDES = "-dac_override,-dac_read_search"
AS_A_PLAIN_USER = ("setpriv", f"--bounding-set={_OVERRIDES}", f"--inh-caps={_OVERRIDES}")


def _cli(home: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAKEHOUSE_HOME": str(home)}
    return subprocess.run([*prefix, LAKEHOUSE, *args], env=env, capture_output=True, text=True, timeout=600)


def _holders(mount: Path) -> list[str]:
    """Processes other than this one that belong to a run on ``mount`` (its home in their environment: the
    command and the JVM it started) or hold a file, a mapping or their working folder under it."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            links = [os.readlink(link) for link in (proc / "fd").iterdir()] + [os.readlink(proc / "cwd")]
            maps = (proc / "maps").read_text()
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        if any(v.startswith(b"LAKEHOUSE_HOME=" + str(mount).encode()) for v in environ) or str(mount) in maps:
            found.append(f"{proc.name} (a run on the disk)")
        found += [f"{proc.name} holds {link}" for link in links if link.startswith(str(mount))]
    return found


def _settled(mount: Path) -> None:
    """Wait until the last run's processes are gone and nothing holds a file under ``mount``: the JVM outlives
    its command for a moment (its shutdown still writes state-store files and deletes scratch), a deleted
    file's space comes back only once it is closed, and a file open for writing keeps a remount busy."""
    quiet = 0
    for _ in range(240):
        held = _holders(mount)
        quiet = 0 if held else quiet + 1
        if quiet == 3:
            return
        time.sleep(0.5)
    raise AssertionError(f"processes stay on {mount}: {held[:3]}")


def _remount(mount: Path, mode: str) -> None:
    _settled(mount)
    for _ in range(20):
        done = subprocess.run(["mount", "-o", f"remount,{mode}", str(mount)], capture_output=True, text=True)
        if done.returncode == 0:
            return
        time.sleep(1)
    raise AssertionError(f"remount {mode} failed: {done.stderr.strip()}; holders: {_holders(mount)[:3]}")


def test_a_full_disk_and_a_read_only_home_stop_in_one_line_and_a_run_after_the_fix_ends_exact(tmp_path: Path) -> None:
    """The home on a small file system of its own (tmpfs). Filled to its last 64 KB while 3,000 events wait,
    the run stops with one line; with the space back, the same command goes on and nothing is lost or
    doubled. Remounted read-only, a run stops with one line and changes nothing; so does every writer when
    the home's modes deny the user who runs it; writable again, it runs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system of the test's own needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", str(disk)], check=True)
    try:
        home = disk / "home"
        home.mkdir()
        # Spark's scratch (its copies of the jars, shuffle files) on a disk of its own, as it often is: the
        # full disk is the one that holds the tables, checkpoints and landing zone.
        (tmp_path / "scratch").mkdir()
        (home / "spark").symlink_to(tmp_path / "scratch", target_is_directory=True)
        settings = Settings.from_env({"LAKEHOUSE_HOME": str(home)})
        settings.ensure_home()
        _land_events(settings, "first.jsonl", seed=31)
        assert _cli(home, "run", "--once").returncode == 0
        _land_events(settings, "second.jsonl", seed=32, events=3000)  # its batch needs more than is left
        _settled(disk)
        free = shutil.disk_usage(disk).free
        with (disk / "filler").open("wb") as filler:
            filler.truncate(0)
            os.posix_fallocate(filler.fileno(), 0, free - 64 * 1024)

        full = _cli(home, "run", "--once")
        assert full.returncode == 1
        assert full.stderr.count("\n") == 1 and full.stderr.startswith("lakehouse: the disk is full"), full.stderr
        (disk / "filler").unlink()
        for command in (["run", "--once"], ["reconcile"]):
            done = _cli(home, *command)
            assert done.returncode == 0, done.stderr
        lines = landing_lines(settings.landing_dir)
        assert open_delta(BRONZE_EVENTS.path(settings)).to_pyarrow_table(columns=["raw"]).num_rows == len(lines)
        assert _delta_gold(settings) == window_totals(lines)

        versions = {t.name: open_delta(t.path(settings)).version() for t in kept_tables(settings)}
        _remount(disk, "ro")
        refused = _cli(home, "run", "--once")
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "read-only file system" in refused.stderr, refused.stderr
        _remount(disk, "rw")
        subprocess.run(["chmod", "-R", "a-w", str(home)], check=True)
        for command in (["run", "--once"], ["reconcile"], ["replay"], ["maintain"], ["validate"]):
            denied = _cli(home, *command, prefix=AS_A_PLAIN_USER)
            assert denied.returncode == 1, denied.stderr
            assert denied.stderr.count("\n") == 1 and "lakehouse: permission denied" in denied.stderr, denied.stderr
        subprocess.run(["chmod", "-R", "u+w", str(home)], check=True)
        assert _cli(home, "run", "--once").returncode == 0
        assert {t.name: open_delta(t.path(settings)).version() for t in kept_tables(settings)} == versions
    finally:
        _settled(disk)
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(disk)], check=True)  # not to leave a mount behind


def _delta_gold(settings: Settings) -> dict[tuple[str, datetime], tuple[Decimal, int]]:
    table = open_delta(tumbling_table(settings).path(settings)).to_pyarrow_table(
        columns=["user_id", "window_start", "total_amount", "event_count"]
    )
    return {(r["user_id"], r["window_start"]): (r["total_amount"], r["event_count"]) for r in table.to_pylist()}
