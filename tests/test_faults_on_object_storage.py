"""The faults ``runtime.faults`` recognises, on object storage: the same damaged checkpoint files and Delta logs
as on disk (``tests/unit/test_faults.py``), laid out on the S3 server the tests start (moto's, on 127.0.0.1),
read through the same locations the streams use. On S3 there is no rename and no Hadoop checksum beside a
checkpoint file, so each fault must be seen from the objects alone. No Spark: the checks read objects only
(the recovery, a replay on S3, is ``tests/test_cluster.py``'s). Also from the objects alone: which files of a
table ``maintain`` may vacuum."""

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from devtools.objectstore import TEST_CREDENTIALS, ObjectStore
from runtime.checkpoints import LANDING_STAGE, record_finished, uncommitted_batch
from runtime.faults import Fault, check_home, damaged_checkpoint, damaged_log
from tests.unit.test_faults import DAMAGES, _checkpoint
from warehouse.maintenance import deletable_files
from warehouse.settings import Settings
from warehouse.storage import Location, delta_options, is_remote

pytestmark = [pytest.mark.system, pytest.mark.xdist_group("faults-s3")]


@pytest.fixture
def settings(object_store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A home whose checkpoints and tables are on the server, under a prefix of this test's own."""
    for name, value in TEST_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    uri = f"{object_store.env['LAKEHOUSE_STORAGE_URI']}/{tmp_path.name}"
    configured = Settings.from_env({**object_store.env, "LAKEHOUSE_STORAGE_URI": uri, "LAKEHOUSE_HOME": str(tmp_path)})
    assert is_remote(configured.checkpoints_dir)
    return configured


@pytest.mark.parametrize(("damage", "named"), DAMAGES)
def test_each_damaged_checkpoint_object_is_named(settings: Settings, damage, named: str) -> None:
    checkpoint = _checkpoint(settings.checkpoints_dir / LANDING_STAGE)
    assert damaged_checkpoint(checkpoint) is None
    damage(checkpoint)
    assert damaged_checkpoint(checkpoint) == named
    with pytest.raises(Fault) as refused:
        check_home(settings, [LANDING_STAGE], [])
    assert "\n" not in str(refused.value) and named in str(refused.value)
    assert str(refused.value).endswith("Recover with `lakehouse replay --source landing`")


def test_a_crash_cut_batch_is_no_fault_and_a_replay_can_settle_it(settings: Settings) -> None:
    """The newest commit entry missing is what a crash leaves; the replay's settling writes it as one PUT."""
    checkpoint = _checkpoint(settings.checkpoints_dir / LANDING_STAGE)
    written = (checkpoint / "commits" / "3").read_text()
    (checkpoint / "commits" / "3").unlink()
    assert damaged_checkpoint(checkpoint) is None and uncommitted_batch(checkpoint) == 3
    record_finished(checkpoint, 3)
    assert uncommitted_batch(checkpoint) is None and (checkpoint / "commits" / "3").read_text() == written


def _table(location: Location, commits: int = 3) -> Location:
    for version in range(commits):
        rows = pa.table({"n": [version]})
        write_deltalake(str(location), rows, mode="append", storage_options=delta_options(location))
    return location / "_delta_log"


def test_a_missing_commit_a_lost_newest_one_and_a_cut_one_are_named_on_object_storage(settings: Settings) -> None:
    tables = settings.tables_dir
    assert damaged_log(_table(tables / "sound").parent) is None
    log = _table(tables / "gap")
    (log / f"{1:020d}.json").unlink()
    assert damaged_log(tables / "gap") == f"{1:020d}.json is missing"
    log = _table(tables / "newest")
    (log / f"{3:020d}.crc").write_text("{}")  # Spark's Delta writes a checksum object after each commit
    assert damaged_log(tables / "newest") == f"{3:020d}.json is missing ({3:020d}.crc is there)"
    log = _table(tables / "cut")
    newest = log / f"{2:020d}.json"
    newest.write_bytes(newest.read_bytes()[:50])
    assert damaged_log(tables / "cut") == f"{2:020d}.json is truncated or corrupt"


def test_what_vacuum_may_delete_is_read_from_the_objects_times(settings: Settings) -> None:
    """A file an overwrite replaced is VACUUM's once older than the retention: the objects' own times say so."""
    table = settings.tables_dir / "replaced"
    options = delta_options(table)
    write_deltalake(str(table), pa.table({"n": [1]}), storage_options=options)
    write_deltalake(str(table), pa.table({"n": [2]}), mode="overwrite", storage_options=options)
    assert deletable_files(table, 1) == 0
    assert deletable_files(table, 0) == 1
