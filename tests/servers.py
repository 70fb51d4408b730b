"""Servers the system tests start through the project's own commands (``lakehouse cluster|postgres up``),
once per module, and what the tests ask of any server: which addresses its process listens on."""

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.ui_harness import free_port

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")


def cluster_settings(workers: int = 2, cores: int = 1, memory: str = "1g") -> dict[str, str]:
    """A standalone cluster's settings on free loopback ports: ``workers`` workers of ``cores`` cores."""
    return {
        "LAKEHOUSE_CLUSTER_PORT": str(free_port()),
        "LAKEHOUSE_CLUSTER_UI_PORT": str(free_port()),
        "LAKEHOUSE_CLUSTER_WORKERS": str(workers),
        "LAKEHOUSE_CLUSTER_WORKER_CORES": str(cores),
        "LAKEHOUSE_CLUSTER_WORKER_MEMORY": memory,
    }


class Commands:
    """The ``lakehouse`` command under fixed settings ``env`` (on top of this process's environment)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.env['LAKEHOUSE_CLUSTER_PORT']}"

    def command(self, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [LAKEHOUSE, *args], env={**os.environ, **self.env, **env}, capture_output=True, text=True, timeout=timeout
        )


def listening(pid: int) -> list[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on, from /proc (IPv4, and IPv4-mapped IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address[-8:])[::-1]  # the last 32 bits, little-endian: the IPv4 address
            mapped = len(address) == 8 or address[:24] == "0000000000000000FFFF0000"
            found.append((socket.inet_ntoa(raw) if mapped else address, int(port, 16)))
    return found
