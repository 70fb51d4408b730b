"""Shared fixtures: one SparkSession for the whole test process, a fresh lakehouse home per test."""

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.ui_harness import DagsterUI
from warehouse.settings import Settings


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one session (JVM settings are fixed at its creation, so it is built once, with Delta)."""
    os.environ["LAKEHOUSE_HOME"] = str(tmp_path_factory.mktemp("lakehouse-session"))
    os.environ.setdefault("LAKEHOUSE_SHUFFLE_PARTITIONS", "2")
    os.environ.setdefault("LAKEHOUSE_DRIVER_MEMORY", "2g")
    from warehouse.session import spark_session

    session = spark_session(Settings.from_env())
    yield session
    session.stop()


@pytest.fixture
def settings(spark: SparkSession, tmp_path: Path) -> Settings:
    """Settings whose home (tables, checkpoints, landing) is this test's own folder."""
    configured = replace(Settings.from_env(), home=tmp_path / "home")
    configured.ensure_home()
    return configured


@pytest.fixture(scope="session")
def dagster_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterUI]:
    """The Dagster UI as `make ui` starts it (webserver + daemon, own homes, free port); stopped at the end."""
    with DagsterUI.start(tmp_path_factory.mktemp("dagster-ui")) as ui:
        yield ui
