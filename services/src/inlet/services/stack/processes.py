"""Process and port helpers shared by the embedded servers: free ports, log tails, process-group stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


class StackError(RuntimeError):
    """An embedded server could not be started, reached or stopped."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the caller binds it soon after; races are retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def log_tail(path: Path | None, max_chars: int = 3000) -> str:
    """The end of a server log, for error messages ("" when there is none)."""
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace")
    return text[-max_chars:]


def log_since(path: Path, offset: int) -> str:
    """What a server wrote to its log after byte ``offset`` (its size before the server started)."""
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the process group ``pgid``.

    Reads ``/proc`` on Linux (zombies left to an init that does not reap must not count); elsewhere
    falls back to probing the group with signal 0.
    """
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..." - comm may hold spaces or parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def stop_process_group(
    proc: subprocess.Popen[bytes], first_signal: signal.Signals, grace_s: float = 10.0
) -> None:
    """Stop a server started with ``start_new_session=True`` and everything it forked.

    Sends ``first_signal`` to the leader, waits up to ``grace_s`` for it to exit, then SIGKILLs the
    whole process group and waits until no member is left.
    """
    pgid = proc.pid
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(first_signal)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    # Children (PostgreSQL backends, ...) follow the leader; anything left over is killed.
    deadline = time.monotonic() + 5.0
    while group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        if proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
        else:
            time.sleep(0.05)
        if time.monotonic() > deadline:
            raise StackError(f"processes of group {pgid} survived SIGKILL")
    proc.wait()
