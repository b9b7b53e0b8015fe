"""Writer heartbeats: ``.hoodie/.heartbeat/<instant>`` refreshed while a write is in flight.

A pending instant may be rolled back only when its heartbeat has expired (not refreshed for
``tolerable_misses + 1`` intervals) or, on the same host, its writer process is gone.

Inlet's heartbeat file holds ``{"host", "pid_ns", "pid", "ts_ms", "interval_ms"}``; Apache Hudi's is
empty and its modification time is the last beat, so a file that is not Inlet's JSON counts by
its modification time (a live Java writer is never taken for a dead one).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

from inlet.core.errors import InletError
from inlet.core.storage import Storage

HEARTBEAT_DIR = ".hoodie/.heartbeat"
DEFAULT_INTERVAL_MS = 60_000
DEFAULT_TOLERABLE_MISSES = 2


def _path(instant_time: str) -> str:
    return f"{HEARTBEAT_DIR}/{instant_time}"


class Heartbeat:
    def __init__(self, storage: Storage, instant_time: str, interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        self.storage = storage
        self.instant_time = instant_time
        self.interval_ms = interval_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        body = {
            "host": socket.gethostname(),
            "pid_ns": _PID_NAMESPACE,
            "pid": os.getpid(),
            "ts_ms": int(time.time() * 1000),
            "interval_ms": self.interval_ms,
        }
        self.storage.write_atomic(_path(self.instant_time), json.dumps(body).encode())

    def start(self) -> Heartbeat:
        # the thread first: a heartbeat file naming this process without a live thread reads as dead
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.instant_time}", daemon=True)
        self._thread.start()
        self.beat()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            with contextlib.suppress(OSError):  # a missed beat only shortens the writer's lease
                self.beat()

    def stop(self, delete: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if delete:
            self.storage.delete(_path(self.instant_time))


def _pid_namespace() -> str | None:
    """This process's pid namespace (Linux): pids are comparable only within one namespace."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


_PID_NAMESPACE = _pid_namespace()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mtime_ms(storage: Storage, path: str) -> float | None:
    try:
        info = storage.fs.get_file_info(storage.full(path))
    except OSError:
        return None
    return info.mtime_ns / 1e6 if info.mtime_ns is not None else None


def is_expired(
    storage: Storage,
    instant_time: str,
    interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
    started_ms: float | None = None,
) -> bool:
    """True if the writer of ``instant_time`` is certainly gone.

    ``started_ms`` (when the instant's timeline files were last written) stands in for the last
    beat of a writer that has no heartbeat file yet: a writer creates its instant before its
    first beat, and must not be rolled back in between. Without it a missing file means expired.
    """
    path = _path(instant_time)
    if not storage.exists(path):
        if started_ms is None:
            return True
        return time.time() * 1000 - started_ms > interval_ms * (tolerable_misses + 1)
    body: dict[str, object] = {}
    try:
        parsed = json.loads(storage.read_bytes(path))
        if isinstance(parsed, dict):
            body = parsed
    except (ValueError, OSError, InletError):
        body = {}  # Apache Hudi's empty heartbeat file (or one being replaced)
    pid = body.get("pid")
    if (
        isinstance(pid, int)
        and body.get("host") == socket.gethostname()
        and body.get("pid_ns") == _PID_NAMESPACE  # containers may share a host name, not pids
        and (not _pid_alive(pid) or (pid == os.getpid() and not _has_live_thread(instant_time)))
    ):
        return True  # same host: the writer process (or, in this process, its heartbeat) is gone
    own_interval = body.get("interval_ms")
    if isinstance(own_interval, int) and own_interval > interval_ms:
        interval_ms = own_interval  # the writer's own lease, if longer than ours
    beats = [float(ts) for ts in (body.get("ts_ms"), _mtime_ms(storage, path)) if isinstance(ts, int | float)]
    if not beats:
        return True
    return time.time() * 1000 - max(beats) > interval_ms * (tolerable_misses + 1)


def _has_live_thread(instant_time: str) -> bool:
    name = f"heartbeat-{instant_time}"
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def delete(storage: Storage, instant_time: str) -> None:
    storage.delete(_path(instant_time))
