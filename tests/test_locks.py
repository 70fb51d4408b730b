"""Named locks: exclusive across holders, and fair to a waiter while a stream re-takes them batch after batch."""

import threading
import time
from pathlib import Path

import pytest

from warehouse.locks import LockBusyError, hold
from warehouse.settings import Settings

#: Seconds each, no process of their own: part of `make test-fast`.
pytestmark = pytest.mark.quick


def test_a_waiter_gets_the_lock_between_back_to_back_batches(tmp_path: Path) -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    stop = threading.Event()
    batches: list[float] = []

    def stream() -> None:  # re-takes the lock the moment it lets go, like a stream with a backlog
        while not stop.is_set():
            with hold(settings, "gold", wait_seconds=30, purpose="stream batch"):
                batches.append(time.monotonic())
                time.sleep(0.2)

    runner = threading.Thread(target=stream)
    runner.start()
    try:
        while not batches:
            time.sleep(0.01)
        with hold(settings, "gold", wait_seconds=5, purpose="reconcile"):
            held_at = time.monotonic()
            during = len(batches)
            time.sleep(0.3)
            assert len(batches) == during  # exclusive: no batch ran while the waiter held it
        assert len([t for t in batches if t < held_at]) <= 3  # in after at most two more batches
    finally:
        stop.set()
        runner.join()


def test_a_holder_that_will_not_wait_is_told_who_holds_it(tmp_path: Path) -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path)})
    busy = pytest.raises(LockBusyError, match="gold lock is held by the gold_user_spend_5m batch")
    with hold(settings, "gold", purpose="the gold_user_spend_5m batch"), busy, hold(settings, "gold", wait_seconds=0.3):
        pass
