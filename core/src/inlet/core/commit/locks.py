"""Table locks for the in-process (single-writer / local multi-process) commit protocol.

A re-entrant thread lock per table in this process, plus an ``fcntl`` lock file so several
processes on one machine serialise on the same table. Tables on non-local storage get a lock
file in the machine's temp directory keyed by the table URI (one machine only; several
machines need the gRPC coordinator).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from inlet.core.storage import Storage

_registry_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}
_depth = threading.local()


def _lock_file_path(storage: Storage) -> str:
    if storage.is_local:
        aux = os.path.join(storage.root, ".hoodie", ".aux")
        os.makedirs(aux, exist_ok=True)
        return os.path.join(aux, "inlet.lock")
    digest = hashlib.sha256(storage.base_uri.encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"inlet-table-{digest}.lock")


@contextmanager
def table_lock(storage: Storage) -> Iterator[None]:
    """Hold the table's lock (re-entrant within a thread).

    Keyed by the lock file, not the URI: two spellings of one table (``/t``, ``file:///t``) must
    share the re-entrancy count, or a thread holding one would wait forever on the other's flock.
    """
    path = _lock_file_path(storage)
    key = path
    with _registry_guard:
        tlock = _thread_locks.setdefault(key, threading.RLock())
    with tlock:
        depths: dict[str, int] = getattr(_depth, "d", None) or {}
        _depth.d = depths
        if depths.get(key, 0):
            depths[key] += 1
            try:
                yield
            finally:
                depths[key] -= 1
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            depths[key] = 1
            try:
                yield
            finally:
                depths[key] = 0
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
