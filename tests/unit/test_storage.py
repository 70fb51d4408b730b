"""Locations on local disk, and what the lakehouse asks of Spark and delta-rs for object storage (no server:
the S3 side is exercised against a real S3-compatible server in tests/test_cluster.py)."""

import os
from pathlib import Path

import pytest

from warehouse.settings import Settings
from warehouse.storage import (
    delta_options,
    entries,
    files_under,
    hadoop_conf,
    location_of,
    move_tree,
    names,
    remove_tree,
    write_atomically,
)

ON_S3 = {"LAKEHOUSE_STORAGE_URI": "s3://lake/prod", "LAKEHOUSE_S3_ENDPOINT": "http://127.0.0.1:9000"}


def test_a_missing_folder_lists_as_empty(tmp_path: Path) -> None:
    assert entries(tmp_path / "nothing") == [] and names(tmp_path / "nothing") == []
    (tmp_path / "a").write_text("x")
    (tmp_path / "sub").mkdir()
    assert [(name, size) for name, _, size in entries(tmp_path)] == [("a", 1)]  # files only, not folders


def test_a_file_removed_between_the_listing_and_its_stat_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that replaces a file by deleting it first (Delta's ``_last_checkpoint`` under ``maintain``) may
    remove it after the folder was listed and before its size is read: the listing goes on without it."""
    (tmp_path / "00000000000000000007.json").write_text("{}")
    (tmp_path / "_last_checkpoint").write_text("{}")
    listed = list(os.scandir(tmp_path))

    def listing_then_a_removal(folder: object) -> list[os.DirEntry]:
        (tmp_path / "_last_checkpoint").unlink()
        return listed

    monkeypatch.setattr(os, "scandir", listing_then_a_removal)
    assert names(tmp_path) == ["00000000000000000007.json"]


def test_write_atomically_replaces_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "entry"
    write_atomically(target, "one")
    write_atomically(target, "two")
    assert target.read_text() == "two" and sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_files_under_moves_and_removals(tmp_path: Path) -> None:
    source = tmp_path / "checkpoint"
    (source / "state" / "0").mkdir(parents=True)
    (source / "state" / "0" / "1.delta").write_text("s")
    (source / "metadata").write_text("m")
    assert sorted(files_under(source)) == ["metadata", "state/0/1.delta"]
    target = tmp_path / "retired" / "deep" / "checkpoint"
    move_tree(source, target)  # parents made
    assert not source.exists() and sorted(files_under(target)) == ["metadata", "state/0/1.delta"]
    remove_tree(target)
    remove_tree(target)  # fine when gone
    assert not target.exists()


def test_locations_written_as_text_come_back() -> None:
    local = Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h"})
    assert location_of(local, "/tmp/h/checkpoints/x") == Path("/tmp/h/checkpoints/x")
    remote = Settings.from_env(ON_S3)
    back = location_of(remote, str(remote.checkpoints_dir / "x"))
    assert str(back) == "s3://lake/prod/checkpoints/x"
    assert back.storage_options["endpoint_url"] == "http://127.0.0.1:9000"


def test_local_disk_asks_nothing_of_spark_or_delta_rs() -> None:
    local = Settings.from_env({})
    assert hadoop_conf(local) == {} and delta_options(local.tables_dir) is None


def test_object_storage_settings_for_spark_and_delta_rs_carry_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-in-configuration")
    settings = Settings.from_env(ON_S3)
    conf = hadoop_conf(settings)
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    options = delta_options(settings.tables_dir / "gold" / "user_spend_5m")
    assert options == {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    assert "never-in-configuration" not in repr(conf) + repr(options) + repr(settings)


def test_a_nested_lakehouse_nests_both_its_home_and_its_storage() -> None:
    staging = Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h", **ON_S3}).under("replay", "20260101")
    assert staging.home == Path("/tmp/h/replay/20260101")
    assert str(staging.tables_dir) == "s3://lake/prod/replay/20260101/tables"
    local = Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h"}).under("replay", "x")
    assert local.tables_dir == Path("/tmp/h/replay/x/tables")
