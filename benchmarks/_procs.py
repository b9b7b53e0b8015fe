"""CPU time and peak memory of process trees, from Linux ``/proc``: what the benchmarks report for
every server they start (PostgreSQL and its backends, JVMs and their Python workers, ...).

A benchmark script imports it as ``import _procs`` (the script's directory is first on
``sys.path``). CPU seconds are user + system time of each process plus that of the children it has
reaped, so a PostgreSQL backend that exited during a run still counts in its postmaster's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

_TICK = os.sysconf("SC_CLK_TCK")


def proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, CPU seconds incl. reaped children)} of every process now running."""
    out: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        out[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / _TICK)
    return out


def descendants(pid: int, table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in (table if table is not None else proc_table()).items():
        children.setdefault(ppid, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu(pids: Iterable[int | None], table: dict[int, tuple[int, float]] | None = None) -> float:
    """CPU seconds used so far by the process trees rooted at ``pids`` (``None`` entries and pids
    no longer running count 0)."""
    table = table if table is not None else proc_table()
    total = 0.0
    for pid in pids:
        if pid is None or pid not in table:
            continue
        total += table[pid][1] + sum(table[p][1] for p in descendants(pid, table))
    return total


def vm_hwm(pid: int | str) -> int:
    """Peak resident set (``VmHWM``) of one process in bytes; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
