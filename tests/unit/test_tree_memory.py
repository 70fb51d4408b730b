"""The benches' process-tree memory (``bench.procs.tree_rss_mb``) on real processes: a child that shares its
parent's address space is counted once, a child with one of its own is added."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.procs import tree_rss_mb

#: A parent that holds 300 MB, then forks a child that only sleeps (its address space the parent's, page for
#: page, as a vforked child's is until it execs), then starts ``sleep`` (an address space of its own).
PARENT = """
import os, subprocess, sys, time
held = bytearray(300 * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
if os.fork() == 0:
    time.sleep(60)
    os._exit(0)
subprocess.Popen(["sleep", "60"])
print("ready", flush=True)
time.sleep(60)
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_child_sharing_its_parents_memory_is_counted_once_and_others_are_added() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        children = [int(pid) for pid in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()]
        assert len(children) == 2
        own = _rss_mb(parent.pid)
        others = [_rss_mb(pid) for pid in children]
        assert own > 300
        counted = tree_rss_mb(parent.pid)
        # The forked child alone reads 300 MB too: a plain sum would be above 600 MB.
        assert max(others) > 250 and sum([own, *others]) > 600
        small = min(others)  # sleep's own address space
        assert abs(counted - (own + small)) < 20, (counted, own, others)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
