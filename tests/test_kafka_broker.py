"""`lakehouse kafka up | down | status`: a real Apache Kafka broker (KRaft) started from the cached jars,
reached by an independent client (kafka-python), and the one-line errors of the bad situations."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaProducer

from devtools.broker import broker_pid
from tests.servers import listening_tree
from tests.ui_harness import free_port
from warehouse.settings import Settings

pytestmark = pytest.mark.system

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def kafka(home: Path, port: int, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LAKEHOUSE, "kafka", *args],
        env={
            **os.environ,
            "LAKEHOUSE_HOME": str(home),
            "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_broker_up_is_idempotent_serves_the_topic_and_goes_down_cleanly(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    try:
        first = kafka(home, port, "up")
        assert first.returncode == 0, first.stderr
        assert "started" in first.stdout and first.stderr == ""
        again = kafka(home, port, "up")
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stdout

        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
        for n in range(30):
            producer.send("events", key=f"user-{n % 7}".encode(), value=f'{{"n": {n}}}'.encode())
        producer.flush()
        producer.close()

        status = kafka(home, port, "status", "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["broker"] == "local" and report["reachable"]
        (events,) = [t for t in report["topics"] if t["name"] == "events"]
        assert [p["partition"] for p in events["partitions"]] == [0, 1, 2]
        assert sum(p["end"] for p in events["partitions"]) == 30 == events["messages"]
        assert (home / "kafka" / "logs" / "server.log").stat().st_size > 0
        assert (home / "kafka" / "data" / "meta.properties").exists()
        # The broker and its controller listen on loopback only.
        settings = Settings.from_env(
            {"LAKEHOUSE_HOME": str(home), "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}
        )
        opened = listening_tree(broker_pid(settings))
        assert len(opened) >= 2 and {host for host, _ in opened} == {"127.0.0.1"}, opened
    finally:
        stopped = kafka(home, port, "down")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    assert kafka(home, port, "down").stdout.strip() == "no Kafka broker was running"
    down = kafka(home, port, "status", "--json")
    assert down.returncode == 0 and json.loads(down.stdout)["broker"] == "down"


def test_bad_situations_stop_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = kafka(tmp_path / "taken", squatter.getsockname()[1], "up")
    assert taken.returncode == 1
    assert taken.stderr.count("\n") == 1 and "already taken by another process" in taken.stderr

    no_java = kafka(tmp_path / "no-java", free_port(), "up", PATH="/nonexistent")
    assert no_java.returncode == 1
    assert no_java.stderr.strip() == "lakehouse: the Kafka broker needs Java 17 or newer, and 'java' is not on PATH"

    port = free_port()
    slow = kafka(tmp_path / "slow", port, "up", LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS="1")
    assert slow.returncode == 1
    assert slow.stderr.count("\n") == 1 and "did not answer on" in slow.stderr and "within 1 s" in slow.stderr
    # Not left half-started.
    assert kafka(tmp_path / "slow", port, "down").stdout.strip() == "no Kafka broker was running"

    bad = kafka(tmp_path / "bad", free_port(), "up", LAKEHOUSE_KAFKA_PARTITIONS="zero")
    assert bad.returncode == 1 and "LAKEHOUSE_KAFKA_PARTITIONS" in bad.stderr
