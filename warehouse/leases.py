"""Locks that span hosts: a lease object per lock on the object storage the lakehouse's data is on.

With ``LAKEHOUSE_STORAGE_URI`` set, writers on different hosts share the tables, so the lakehouse's locks
(``warehouse.locks``) must be seen by all of them; a file lock in one host's home is not. A lease is the
object ``<storage>/locks/<name>.lease``:

- **taken** by a conditional PUT that succeeds only if the object does not exist (``If-None-Match: *``):
  of two hosts that try at once, S3 lets exactly one create it;
- **kept** by its holder's heartbeat, which rewrites it every third of ``LAKEHOUSE_LOCK_LEASE_SECONDS`` with
  a PUT conditional on the ETag it last wrote (``If-Match``), so a holder whose lease was taken over learns
  it at its next beat, stops renewing and fails its next lock check (:meth:`Lease.check`);
- **expired** when it has not been rewritten for the lease time by the server's clock (its
  ``LastModified`` against the ``Date`` the server answers with; no host's clock takes part): a crashed
  holder's lease is taken over by the next writer with a PUT conditional on the stale ETag, so of two
  takers again only one wins. A holder on the same host whose process is gone is known dead at once, so a
  restart after a crash does not wait for the lease time;
- **released** by a DELETE conditional on its ETag (a lease already taken over is left to its new holder).

The object holds what the holder is doing (its purpose), its host and pid, so a refusal says who is in the way.
"""

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

from warehouse.settings import Settings


class LeaseLostError(RuntimeError):
    """The lease was taken over by another host (its holder stalled past the lease time)."""


def _refused(error: BaseException) -> bool:
    """Whether S3 refused a conditional request (412 Precondition Failed, or 409 when two raced)."""
    if isinstance(error, FileExistsError):
        return True
    cause = error.__cause__ or error
    response = getattr(cause, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in {"PreconditionFailed", "ConditionalRequestConflict"} or status in {409, 412}


def _missing(error: BaseException) -> bool:
    return isinstance(error, FileNotFoundError)


def lease_location(settings: Settings, name: str) -> Any:
    return settings.data_root() / "locks" / f"{name}.lease"


#: The leases this process holds now (their heartbeats run in threads of this process).
_HELD: "set[Lease]" = set()


def check_held() -> None:
    """Raise when a lease this process holds was taken over: called before each batch writes, so a holder
    that stalled past the lease time writes nothing more."""
    for lease in list(_HELD):
        lease.check()


@dataclass(eq=False)
class Lease:
    """One held lease and its heartbeat."""

    settings: Settings
    name: str
    purpose: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    etag: str = ""
    lost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _beat: threading.Thread | None = None

    @property
    def location(self) -> Any:
        return lease_location(self.settings, self.name)

    def _body(self) -> bytes:
        return json.dumps(
            {
                "purpose": self.purpose or self.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "token": self.token,
                "renewed": datetime.now().astimezone().isoformat(timespec="seconds"),
            }
        ).encode()

    def _put(self, **condition: str) -> None:
        location = self.location
        answer = location.fs.call_s3(
            "put_object", Bucket=_bucket(location), Key=_key(location), Body=self._body(), **condition
        )
        self.etag = answer["ETag"]

    def try_take(self) -> bool:
        """Create the lease, or take it over when it expired; False while someone else's lease is live."""
        try:
            self._put(IfNoneMatch="*")
            return True
        except OSError as error:
            if not _refused(error):
                raise
        current = _head(self.location)
        if current is None:
            return False  # released meanwhile: the next attempt creates it
        if current["age"] < self.settings.storage.lease_seconds and not _holder_died_here(self.location):
            return False
        try:
            self._put(IfMatch=current["etag"])  # only one of the hosts taking over the stale lease wins
            return True
        except OSError as error:
            if _refused(error) or _missing(error):
                return False
            raise

    def start_heartbeat(self) -> None:
        interval = max(0.5, self.settings.storage.lease_seconds / 3)

        def beat() -> None:
            while not self._stop.wait(interval):
                try:
                    self._put(IfMatch=self.etag)
                except OSError as error:
                    if _refused(error) or _missing(error):
                        self.lost = True
                        return
                    # A passing network error: the next beat tries again, well within the lease time.

        self._beat = threading.Thread(target=beat, name=f"lease-{self.name}", daemon=True)
        self._beat.start()

    def check(self) -> None:
        """Raise when the lease was lost (taken over after this holder stalled): stop writing."""
        if self.lost:
            raise LeaseLostError(
                f"the {self.name} lock's lease ({self.location}) was taken over by another host; "
                "this run stops without writing further"
            )

    def release(self) -> None:
        """Stop the heartbeat and delete the lease (unless it was taken over: then raise, since the block it
        guarded may have overlapped another host's)."""
        _HELD.discard(self)
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
        self.check()
        location = self.location
        try:
            location.fs.call_s3("delete_object", Bucket=_bucket(location), Key=_key(location), IfMatch=self.etag)
        except OSError as error:
            if not (_refused(error) or _missing(error)):
                raise


def _holder_died_here(location: Any) -> bool:
    """Whether the lease's holder ran on this host and its process is gone (killed, crashed): then its lease
    is taken over at once, as a file lock would be free, instead of after the lease time."""
    try:
        shown = json.loads(location.read_bytes())
    except (OSError, ValueError):
        return False
    if shown.get("host") != socket.gethostname() or not isinstance(shown.get("pid"), int):
        return False
    try:
        state = Path(f"/proc/{shown['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def _bucket(location: Any) -> str:
    return location.path.split("/", 1)[0]


def _key(location: Any) -> str:
    return location.path.split("/", 1)[1]


def _head(location: Any) -> dict[str, Any] | None:
    """The lease's ETag, its content and its age by the server's clock (seconds since it was last written);
    None when there is none."""
    try:
        answer = location.fs.call_s3("head_object", Bucket=_bucket(location), Key=_key(location))
    except OSError as error:
        if _missing(error):
            return None
        raise
    server_now = parsedate_to_datetime(answer["ResponseMetadata"]["HTTPHeaders"]["date"])
    return {"etag": answer["ETag"], "age": (server_now - answer["LastModified"]).total_seconds()}


def acquire(settings: Settings, name: str, deadline: float, purpose: str) -> Lease | None:
    """Take the lease ``name`` before ``deadline`` (``time.monotonic``), keeping it alive from then on; None
    when it stayed held by another host until the deadline."""
    lease = Lease(settings, name, purpose)
    delay = 0.05
    while not lease.try_take():
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    lease.start_heartbeat()
    _HELD.add(lease)
    return lease


def holder(settings: Settings, name: str) -> str | None:
    """What holds the lease ``name`` (its purpose and host) while it is live, else None."""
    location = lease_location(settings, name)
    current = _head(location)
    if current is None or current["age"] >= settings.storage.lease_seconds or _holder_died_here(location):
        return None  # free, expired, or its holder's process on this host is gone (the next taker takes it over)
    try:
        shown = json.loads(location.read_bytes())
    except (OSError, ValueError):
        return "another run"
    return f"{shown.get('purpose', 'another run')} on {shown.get('host', 'another host')} (pid {shown.get('pid')})"
