"""A carried batch's bronze append runs beside silver's parse (``warehouse.delta.in_background``): the batch's
scope travels with it, silver waits for it, and neither failure is lost."""

import threading

import pytest

from warehouse.delta import _BATCH, batch_scope, in_background


def test_the_call_runs_in_another_thread_inside_the_batchs_scope_and_the_block_ends_after_it() -> None:
    seen: list[object] = []
    release = threading.Event()

    def land() -> str:
        release.wait(5)
        seen.append((threading.current_thread() is not threading.main_thread(), _BATCH.get()))
        return "landed"

    with batch_scope("lakehouse:bronze", 7, 0.0):
        with in_background(land) as landing:
            assert not landing.done()  # the block runs while the call does
            release.set()
        assert landing.done() and landing.result() == "landed"
    assert len(seen) == 1 and seen[0][0]
    assert (seen[0][1].app_id, seen[0][1].batch_id) == ("lakehouse:bronze", 7)


def test_the_calls_failure_is_raised_when_the_block_ends_or_when_it_is_waited_for() -> None:
    def fail() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"), in_background(fail):
        pass
    with pytest.raises(OSError, match="disk full"), in_background(fail) as landing:
        landing.result()  # silver waiting before its commit gets bronze's failure, and commits nothing


def test_the_blocks_own_failure_comes_first_and_still_waits_for_the_call() -> None:
    finished = threading.Event()

    def land() -> None:
        finished.wait(0.2)
        finished.set()

    with pytest.raises(ValueError, match="parse"), in_background(land):
        raise ValueError("parse failed")
    assert finished.is_set()
