"""A local single-node Apache Kafka broker (KRaft: broker and controller in one JVM, no ZooKeeper).

``lakehouse kafka up | down | status``. The broker runs from Apache Kafka's own jars, fetched once by the
set-up into ``.cache/kafka-broker`` (never on Spark's class path: the two need different kafka-clients).
Its config, data and logs live under ``LAKEHOUSE_HOME/kafka``, so deleting the home resets it too; it
listens on the first of ``LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS`` (127.0.0.1:9092 by default) and a controller
port chosen once when its storage is formatted. It runs detached from the command that started it and
outlives it; ``down`` stops it with SIGTERM (a clean, controlled shutdown).
"""

import base64
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from devtools.daemons import answers, free_port, live_pid, stop_process
from runtime.sources.kafka_client import BrokerError, client_config, ensure_topic
from warehouse.settings import Settings, SettingsError

#: Seconds ``down`` waits for a clean shutdown before it kills the broker.
_STOP_SECONDS = 30


def _paths(settings: Settings) -> dict[str, Path]:
    root = settings.kafka_dir
    return {
        "config": root / "config" / "server.properties",
        "log4j": root / "config" / "log4j2.properties",
        "data": root / "data",
        "logs": root / "logs",
        "pid": root / "broker.pid",
        "out": root / "logs" / "broker.out",
    }


def broker_pid(settings: Settings) -> int | None:
    """The pid of this home's broker when it runs (its pid file names a live ``kafka.Kafka`` with our config)."""
    paths = _paths(settings)
    return live_pid(paths["pid"], "kafka.Kafka", str(paths["config"]))


def _cluster_id() -> str:
    # Kafka's own ids are URL-safe base64 of 16 random bytes; one starting with '-' reads as a flag.
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not candidate.startswith("-"):
            return candidate


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise BrokerError("the Kafka broker needs Java 17 or newer, and 'java' is not on PATH")
    return java


def _classpath(settings: Settings) -> str:
    jars = settings.kafka.broker_jars_dir
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise SettingsError(
            f"LAKEHOUSE_KAFKA_BROKER_JARS_DIR={jars} holds no Kafka broker jars: run `make setup` to fetch them"
        )
    return str(jars / "*")


def _write_config(settings: Settings) -> None:
    """server.properties and the log config, once: the controller port is part of the formatted storage."""
    paths = _paths(settings)
    host, port = settings.kafka.broker_address
    if paths["config"].exists():
        return
    controller = free_port(host)
    paths["config"].parent.mkdir(parents=True, exist_ok=True)
    paths["config"].write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers={host}:{controller}",
                f"listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller}",
                f"advertised.listeners=PLAINTEXT://{host}:{port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={paths['data']}",
                f"num.partitions={settings.kafka.partitions}",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # Lines of several MB are received (and quarantined by the event rules), not refused here.
                "message.max.bytes=16777216",
                # Topics are created on purpose (`up`); a typo in a topic name is an error, not a new topic.
                "auto.create.topics.enable=false",
                "",
            ]
        )
    )
    paths["log4j"].write_text(
        "\n".join(
            [
                "status = warn",
                "appender.file.type = RollingFile",
                "appender.file.name = file",
                f"appender.file.fileName = {paths['logs'] / 'server.log'}",
                f"appender.file.filePattern = {paths['logs'] / 'server.log.%i'}",
                "appender.file.layout.type = PatternLayout",
                "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                "appender.file.policies.type = Policies",
                "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
                "appender.file.policies.size.size = 20MB",
                "appender.file.strategy.type = DefaultRolloverStrategy",
                "appender.file.strategy.max = 3",
                "rootLogger.level = INFO",
                "rootLogger.appenderRef.file.ref = file",
                "",
            ]
        )
    )


def _format_storage(settings: Settings, java: str) -> None:
    paths = _paths(settings)
    if (paths["data"] / "meta.properties").exists():
        return
    paths["data"].mkdir(parents=True, exist_ok=True)
    command = [java, "-cp", _classpath(settings), "kafka.tools.StorageTool", "format", "--standalone"]
    done = subprocess.run(
        [*command, f"--cluster-id={_cluster_id()}", "-c", str(paths["config"])],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BrokerError(f"formatting the broker's storage failed: {last[0]}")


def up(settings: Settings) -> bool:
    """Start the broker unless it runs, wait until it answers, create the topic if missing.

    Returns whether it was started now (False: it was already up). Idempotent.
    """
    host, port = settings.kafka.broker_address
    if broker_pid(settings) is None:
        if answers(host, port):
            raise BrokerError(
                f"{host}:{port} is already taken by another process (not this home's broker); "
                "stop it or set LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS to a free port"
            )
        java = _java()
        classpath = _classpath(settings)
        _write_config(settings)
        _format_storage(settings, java)
        _start(settings, java, classpath)
        try:
            _await_broker(settings)
        except BrokerError:
            down(settings)  # a broker that did not come up in time is not left half-started
            raise
        started = True
    else:
        _await_broker(settings)
        started = False
    ensure_topic(settings)
    return started


def _start(settings: Settings, java: str, classpath: str) -> None:
    paths = _paths(settings)
    paths["logs"].mkdir(parents=True, exist_ok=True)
    command = [java, "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
    command += [f"-Dlog4j2.configurationFile={paths['log4j']}", f"-Dkafka.logs.dir={paths['logs']}"]
    command += ["-cp", classpath, "kafka.Kafka", str(paths["config"])]
    with paths["out"].open("ab") as out:
        # Its own session: the broker outlives this command and ignores the terminal's Ctrl-C.
        process = subprocess.Popen(command, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    paths["pid"].write_text(f"{process.pid}\n")


def _await_broker(settings: Settings) -> None:
    from confluent_kafka.admin import AdminClient

    paths = _paths(settings)
    host, port = settings.kafka.broker_address
    deadline = time.monotonic() + settings.kafka.broker_timeout_seconds
    admin = AdminClient({**client_config(settings), "socket.timeout.ms": "2000"})
    while True:
        if broker_pid(settings) is None:
            raise BrokerError(f"the Kafka broker exited while starting; see {paths['logs'] / 'server.log'}")
        if answers(host, port):
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:  # listening but not serving metadata yet
                pass
        if time.monotonic() > deadline:
            raise BrokerError(
                f"the Kafka broker did not answer on {host}:{port} within "
                f"{settings.kafka.broker_timeout_seconds} s (LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS); "
                f"see {paths['logs'] / 'server.log'}"
            )
        time.sleep(0.25)


def down(settings: Settings) -> bool:
    """Stop this home's broker cleanly (SIGTERM, then SIGKILL after 30 s); False when none was running."""
    pid = broker_pid(settings)
    if pid is None:
        _paths(settings)["pid"].unlink(missing_ok=True)
        return False
    stop_process(pid, _STOP_SECONDS)
    _paths(settings)["pid"].unlink(missing_ok=True)
    return True
