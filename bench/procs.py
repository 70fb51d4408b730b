"""A process tree's resident memory, from /proc: a CLI and the driver JVM it starts (not a waited-for child,
so ``rusage`` would miss it)."""

from pathlib import Path


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and every descendant, in MB (0 when it has gone).

    A child that still shares its parent's memory is counted once, with the parent: between ``vfork`` and
    ``exec`` (how a JVM starts a command: without Hadoop's native library, a ``readlink`` or a ``chmod`` for
    many local file operations, a dozen a second) the child reports the parent's whole resident set as its
    own, and a sample taken then read a 4 GB JVM as 9 GB (decision 79)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [(root, -1)]
    while todo:
        pid, parent = todo.pop()
        memory = _memory_kb(pid)
        if memory is None:
            continue
        size, resident = memory
        todo.extend((child, size) for child in children.get(pid, []))
        # Two address spaces of exactly the same size: the same one (read a moment apart, its resident
        # pages may differ by a few).
        if size != parent:
            total += resident
    return round(total / 1024, 1)


def _memory_kb(pid: int) -> tuple[int, int] | None:
    """(VmSize, VmRSS) of ``pid`` in kB; None when it has gone (or is a zombie, with no memory)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        status = dict(line.split(":", 1) for line in lines if ":" in line)
        return int(status["VmSize"].split()[0]), int(status["VmRSS"].split()[0])
    except (OSError, KeyError, ValueError):
        return None
