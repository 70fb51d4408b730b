"""What the local servers' commands share: is a port answering, is a pid file's process ours, stop it."""

import os
import signal
import socket
import time
from pathlib import Path

#: Seconds a daemon gets to shut down cleanly after SIGTERM before it is killed.
STOP_SECONDS = 30


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def live_pid(pid_file: Path, *markers: str) -> int | None:
    """The pid in ``pid_file`` when that process runs and its command line holds every marker (so a reused
    pid, or another home's daemon, is never taken for ours)."""
    try:
        pid = int(pid_file.read_text().strip())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid if all(marker.encode() in command for marker in markers) else None


def running(pid: int) -> bool:
    """Whether the process exists and has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def stop_process(pid: int, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM, then SIGKILL when it has not ended within ``seconds``; returns once it has ended."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if running(pid):
        os.kill(pid, signal.SIGKILL)
        while running(pid):
            time.sleep(0.1)
