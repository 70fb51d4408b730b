"""A process tree's resident memory, from /proc: a CLI and the driver JVM it starts (not a waited-for child,
so ``rusage`` would miss it)."""

from pathlib import Path


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and every descendant, in MB (0 when it has gone)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            total += int(next(line for line in status if line.startswith("VmRSS")).split()[1])
        except (OSError, StopIteration):
            continue
    return round(total / 1024, 1)
