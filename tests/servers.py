"""Servers the system tests start through the project's own commands (``lakehouse cluster|postgres up``),
once per module, and what the tests ask of any server: which addresses its process listens on."""

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.ui_harness import free_port

LAKEHOUSE = str(Path(sys.executable).parent / "lakehouse")
#: A secret the security tests plant in settings that may hold one, then look for in every output.
PLANTED_SECRET = "planted-secret-5be1d0c7a93f"


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


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (from /proc, at this moment)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def listening_tree(pid: int) -> list[tuple[str, int]]:
    """Every (address, port) that ``pid`` or a process descended from it listens on."""
    found = []
    for member in process_tree(pid):
        try:
            found.extend(listening(member))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes contain ``secret`` (logs, status files, reports, databases)."""
    needle = secret.encode()
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
        except OSError:  # a socket, or a file removed while sweeping
            continue
    return found
