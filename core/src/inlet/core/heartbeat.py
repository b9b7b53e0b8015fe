"""Writer heartbeats: ``.hoodie/.heartbeat/<instant>`` refreshed while a write is in flight.

A pending instant may be rolled back only when its heartbeat has expired (not refreshed for
``tolerable_misses + 1`` intervals) or, on the same host, its writer process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

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
        body = {"host": socket.gethostname(), "pid": os.getpid(), "ts_ms": int(time.time() * 1000)}
        self.storage.write_atomic(_path(self.instant_time), json.dumps(body).encode())

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.instant_time}", daemon=True)
        self._thread.start()
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_expired(
    storage: Storage,
    instant_time: str,
    interval_ms: int = DEFAULT_INTERVAL_MS,
    tolerable_misses: int = DEFAULT_TOLERABLE_MISSES,
) -> bool:
    """True if the writer of ``instant_time`` is certainly gone."""
    path = _path(instant_time)
    if not storage.exists(path):
        return True
    try:
        body = json.loads(storage.read_bytes(path))
    except (ValueError, OSError):
        return True
    same_host = body.get("host") == socket.gethostname() and isinstance(body.get("pid"), int)
    if same_host and (
        not _pid_alive(body["pid"]) or (body["pid"] == os.getpid() and not _has_live_thread(instant_time))
    ):
        return True
    age_ms = time.time() * 1000 - float(body.get("ts_ms", 0))
    return age_ms > interval_ms * (tolerable_misses + 1)


def _has_live_thread(instant_time: str) -> bool:
    name = f"heartbeat-{instant_time}"
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def delete(storage: Storage, instant_time: str) -> None:
    storage.delete(_path(instant_time))
