"""Named locks shared by every process that writes the lakehouse.

On local disk a lock is an ``flock`` on a file under ``LAKEHOUSE_HOME/locks``: the kernel releases it when
its holder dies (even by SIGKILL), so a crashed run never leaves a stale lock. Flock locks belong to an open
file, so two holders in one process exclude each other too (a Dagster run and a CLI thread behave like two
processes). With the data on object storage (``LAKEHOUSE_STORAGE_URI``), writers may be on several hosts,
and a lock is a lease object next to the data instead (``warehouse.leases``): taken by a conditional PUT,
kept alive by a heartbeat, expired after ``LAKEHOUSE_LOCK_LEASE_SECONDS`` when its holder died.

Names in use: one per stream (its checkpoint must have one writer), ``gold`` (every read-modify-write
of a gold table: the window stream's batches, reconciliation, the replay's swap), ``replay``.
"""

import fcntl
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import IO

from warehouse import leases
from warehouse.settings import Settings

#: Every read-modify-write of the tumbling table (and its firings and corrections) holds this lock.
GOLD_LOCK = "gold"
#: Every read-modify-write of the derived window tables (hopping, sessions, global) holds this one; a
#: writer of both takes the gold lock first.
DERIVED_LOCK = "gold_derived"


class LockBusyError(RuntimeError):
    """Another run holds the lock; the message names it and what holds it."""


#: How long a writer of gold waits for the gold lock (held by a reconcile or a stream's batch) before failing.
GOLD_LOCK_WAIT_SECONDS = 600.0


def hold_gold(settings: Settings, purpose: str, *, derived: bool = True) -> AbstractContextManager[None]:
    """Hold the gold lock for one read-modify-write of gold, waiting for it as every gold writer does; with
    ``derived``, the derived windows' lock too (a reconcile or replay changes both)."""
    names = [GOLD_LOCK, DERIVED_LOCK] if derived else [GOLD_LOCK]
    return hold_all(settings, names, wait_seconds=GOLD_LOCK_WAIT_SECONDS, purpose=purpose)


def lock_path(settings: Settings, name: str) -> Path:
    return settings.home / "locks" / f"{name}.lock"


def _where(settings: Settings, name: str) -> str:
    """Where the lock ``name`` lives, as a refusal names it."""
    if settings.storage.on_object_storage:
        return str(leases.lease_location(settings, name))
    return str(lock_path(settings, name))


@contextmanager
def hold(settings: Settings, name: str, *, wait_seconds: float = 0.0, purpose: str = "") -> Iterator[None]:
    """Hold the lock ``name`` for the block; wait up to ``wait_seconds`` for it, then raise LockBusyError.

    Waiters queue at a turnstile (a second lock, ``<name>.turnstile``) before taking the lock itself, so
    a holder that re-takes the lock back to back (a stream's batches) lets a waiter in between instead of
    starving it. The holder writes what it is doing into the lock file, so the error can say who is in the way.
    """
    deadline = time.monotonic() + wait_seconds
    if wait_seconds > 0:
        with _flock(settings, f"{name}.turnstile", deadline, purpose):
            handle = _acquire(settings, name, deadline, purpose)
    else:
        handle = _acquire(settings, name, deadline, purpose)
    try:
        yield
    finally:
        _release(handle)


@contextmanager
def _flock(settings: Settings, name: str, deadline: float, purpose: str) -> Iterator[None]:
    handle = _acquire(settings, name, deadline, purpose)
    try:
        yield
    finally:
        _release(handle)


def _acquire(settings: Settings, name: str, deadline: float, purpose: str) -> IO[str] | leases.Lease:
    if settings.storage.on_object_storage:
        leases.check_held()
        lease = leases.acquire(settings, name, deadline, purpose)
        if lease is None:
            lock = name.removesuffix(".turnstile")
            holder = leases.holder(settings, lock) or "another run"
            raise LockBusyError(f"the {lock} lock is held by {holder} ({_where(settings, lock)})")
        return lease
    path = lock_path(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    delay = 0.02
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "another run"
                handle.close()
                lock = name.removesuffix(".turnstile")
                raise LockBusyError(f"the {lock} lock is held by {holder} ({lock_path(settings, lock)})") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
    handle.seek(0)
    handle.truncate()
    handle.write(purpose or name)
    handle.flush()
    return handle


def lock_holder(settings: Settings, name: str) -> str | None:
    """What holds the lock ``name`` right now (its purpose line), or None when it is free."""
    if settings.storage.on_object_storage:
        return leases.holder(settings, name)
    path = lock_path(settings, name)
    if not path.exists():
        return None
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            return handle.read().strip() or "another run"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def ensure_free(settings: Settings, names: list[str]) -> None:
    """Fail fast, before any expensive start-up, when one of the locks is held (the same error ``hold`` gives).

    Only a pre-check: the run still takes the locks itself when it starts."""
    for name in names:
        holder = lock_holder(settings, name)
        if holder is not None:
            raise LockBusyError(f"the {name} lock is held by {holder} ({_where(settings, name)})")


def _release(handle: IO[str] | leases.Lease) -> None:
    if isinstance(handle, leases.Lease):
        handle.release()
        return
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


@contextmanager
def hold_all(settings: Settings, names: list[str], *, wait_seconds: float = 0.0, purpose: str = "") -> Iterator[None]:
    """Hold several locks at once, always taken in the order given (callers pass one fixed order)."""
    with ExitStack() as held:
        for name in names:
            held.enter_context(hold(settings, name, wait_seconds=wait_seconds, purpose=purpose))
        yield
