"""Shared fixtures: one SparkSession for the whole test process, a fresh lakehouse home per test."""

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devtools.objectstore import ObjectStore
from tests.ui_harness import DagsterUI
from warehouse.settings import GOLD_OUTPUTS, Settings

UNIT = Path(__file__).parent / "unit"

#: Every JVM of the test tier lives for seconds to minutes: this process's session, and the CLI commands,
#: Dagster runs and cluster executors its tests start (they inherit this environment). For such lives the
#: optimizing compiler costs more CPU than it saves: C1 alone took a third off a 3,000-event `run --once`
#: and off the quick tier. C1 alone also shrinks the code cache to 48 MB, which Spark's generated classes
#: fill, hence 256 MB (decision 59). A user's JVMs keep the JVM's default unless they set the same.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"
#: The processes the tests start (CLI commands, Dagster runs, streams, the chaos run) evaluate Spark's
#: expressions interpreted instead of compiling Java for each plan (Janino), which is most of a cold JVM's
#: warm-up and none of what those tests are about (kills, restarts, locks, handovers): 17 % less CPU for
#: tests/test_faults.py. This process's own session, where the golden comparisons of the event rules,
#: windows, state and joins run, keeps generated code as a user's JVMs do (decision 73).
INTERPRETED = "-Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN"
os.environ.setdefault("LAKEHOUSE_JVM_OPTIONS", f"{TEST_JVM_OPTIONS} {INTERPRETED}")
#: The tests of one pipeline's semantics run the first pipeline alone (each pipeline has its own home, streams,
#: checkpoints and locks, so another one beside it changes none of them); tests/test_declared_pipelines.py runs
#: every declared pipeline at once, as a user's home does by default.
os.environ.setdefault("LAKEHOUSE_PIPELINES", "purchases")
os.environ.setdefault("LAKEHOUSE_EXECUTOR_JVM_OPTIONS", TEST_JVM_OPTIONS)
#: A continuous run's warm-up (runtime.warmup) trades start-up seconds for a faster first batch: what a user
#: waiting for the first line wants, not what a test of the tables' contents needs (it changes no table).
#: tests/test_warmup.py runs it, and the tests where the first batch's latency is the point turn it on.
os.environ.setdefault("LAKEHOUSE_STREAM_WARMUP", "false")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/unit/ is the ``unit`` tier (no JVM, no process, seconds in all)."""
    for item in items:
        if UNIT in Path(item.path).parents:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(autouse=True)
def no_dagster_instance_left_current() -> Iterator[None]:
    """Each test starts with no Dagster instance current. Dagster keeps the last entered instance's state
    storage in a context variable that loading definitions reads; one left there by an earlier test (its
    instance already disposed) fails the next test's `resolve_*_def` ("instance ... no longer exists")."""
    if "dagster" not in sys.modules:  # a test that never imported Dagster cannot have left one
        yield
        return
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    with set_defs_state_storage(None):
        yield


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The one session (JVM settings are fixed at its creation, so it is built once, with Delta)."""
    os.environ["LAKEHOUSE_HOME"] = str(tmp_path_factory.mktemp("lakehouse-session"))
    os.environ.setdefault("LAKEHOUSE_SHUFFLE_PARTITIONS", "2")
    os.environ.setdefault("LAKEHOUSE_DRIVER_MEMORY", "2g")
    from warehouse.session import spark_session

    configured = Settings.from_env()
    own = configured.spark.jvm_options.replace(INTERPRETED, "").strip()
    session = spark_session(replace(configured, spark=replace(configured.spark, jvm_options=own)))
    yield session
    session.stop()


@pytest.fixture
def settings(spark: SparkSession, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """Settings whose home (tables, checkpoints, landing) is this test's own folder.

    The optional gold outputs (``LAKEHOUSE_GOLD_OUTPUTS``) are kept only where a test names them with
    ``@pytest.mark.gold_outputs(...)`` (``"all"`` for every one): each costs every run of the streams a
    stateful step or a query, and most tests are about the events, silver and user_spend_5m. Tests that
    run the CLI or Dagster in processes of their own keep the product's default, all of them.
    """
    marker = request.node.get_closest_marker("gold_outputs")
    names = set(marker.args) if marker else set()
    outputs = frozenset(GOLD_OUTPUTS) if "all" in names else frozenset(names)
    configured = replace(Settings.from_env(), home=tmp_path / "home", gold_outputs=outputs)
    configured.ensure_home()
    return configured


# One module uses it: its servers stop with the module instead of ticking on beside later tests.
@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DagsterUI]:
    """The Dagster UI as `make ui` starts it (webserver + daemon, own homes, free port); stopped at the end.

    Its sensor-launched runs keep the hourly windows (the sensors test checks their reconciliation) and
    leave the other optional gold outputs out: every asset of them is checked by test_orchestration."""
    with DagsterUI.start(tmp_path_factory.mktemp("dagster-ui"), env={"LAKEHOUSE_GOLD_OUTPUTS": "hopping"}) as ui:
        yield ui


@pytest.fixture(scope="module")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """The S3 test server (moto's, on 127.0.0.1) for one module, its bucket made; stopped after the module.
    Each test keeps to a prefix of its own."""
    started = ObjectStore.start("lakehouse-test", tmp_path_factory.mktemp("s3") / "s3.log")
    try:
        yield started
    finally:
        started.stop()


@dataclass(frozen=True)
class KafkaBroker:
    """The test session's broker, run by `lakehouse kafka up` in a home of its own."""

    bootstrap: str
    env: dict[str, str]

    def command(self, *args: str) -> subprocess.CompletedProcess:
        lakehouse = str(Path(sys.executable).parent / "lakehouse")
        return subprocess.run([lakehouse, "kafka", *args], env=self.env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Kafka broker started by `lakehouse kafka up` (free port, own home) for the test session;
    `lakehouse kafka down` at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bootstrap = f"127.0.0.1:{port}"
    env = {
        **os.environ,
        "LAKEHOUSE_HOME": str(tmp_path_factory.mktemp("kafka-broker")),
        "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
    }
    broker = KafkaBroker(bootstrap, env)
    started = broker.command("up")
    assert started.returncode == 0, started.stderr
    try:
        yield broker
    finally:
        broker.command("down")


@pytest.fixture
def kafka_settings(settings: Settings, kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Settings:
    """``settings`` reading a topic of this test's own on the session's broker (created here)."""
    from runtime.sources.kafka_client import ensure_topic

    topic = "events-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[:120]
    kafka = replace(settings.kafka, bootstrap_servers=kafka_broker.bootstrap, topic=topic)
    configured = replace(settings, kafka=kafka)
    ensure_topic(configured)
    return configured
