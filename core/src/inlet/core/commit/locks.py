"""Table locks for the in-process (single-writer / local multi-process) commit protocol.

A re-entrant thread lock per table in this process, plus a lock shared with other processes:

- local disk: an ``fcntl`` lock on ``.hoodie/.aux/inlet.lock`` (processes on one machine);
- an object store: the object ``.hoodie/.aux/inlet.lock``, created with ``If-None-Match: *`` and
  deleted with ``If-Match: <its etag>``, holding its owner and a lease (``INLET_S3_LOCK_LEASE_S``).
  While it holds the lock, the holder renews the lease every third of it (a PUT with ``If-Match``),
  so a long commit or compaction keeps its lock; a lock whose lease expired (its holder died, or
  could not reach the store for a whole lease) is taken over with ``If-Match``, so two writers on
  any machines never both hold it. A store that ignores conditional headers cannot lock: writers on it are refused, and
  must commit through the gRPC coordinator (``inlet coordinator``), which serialises commits itself
  (a table whose commit protocol is the coordinator's then takes only the thread lock);
- other non-local filesystems: a lock file in the machine's temp directory keyed by the table URI
  (one machine only).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from inlet.core.config import ConfigKey
from inlet.core.errors import InletError, InvalidConfigError, UnsupportedError
from inlet.core.s3 import ConditionalS3
from inlet.core.storage import Storage

_registry_guard = threading.Lock()
_thread_locks: dict[str, threading.RLock] = {}
_depth = threading.local()

_log = logging.getLogger(__name__)

LOCK_PATH = ".hoodie/.aux/inlet.lock"
#: how long an object-store lock stays valid without being renewed (its holder renews it every third)
LOCK_LEASE = ConfigKey[float](
    "INLET_S3_LOCK_LEASE_S",
    float,
    60.0,
    doc="seconds a table's lock on S3 stays valid unless its holder renews it (every third of it); "
    "a dead writer's lock is broken this long after its last renewal",
)
#: how long a writer waits for the object-store lock before giving up (seconds)
LOCK_WAIT = ConfigKey[float](
    "INLET_S3_LOCK_WAIT_S", float, 120.0, doc="seconds a writer waits for a table's lock on S3"
)


class LockTimeoutError(InletError):
    """The table lock stayed held by another writer longer than the wait allows."""

    retryable = True


def _lock_file_path(storage: Storage) -> str:
    if storage.is_local:
        aux = os.path.join(storage.root, ".hoodie", ".aux")
        os.makedirs(aux, exist_ok=True)
        return os.path.join(aux, "inlet.lock")
    digest = hashlib.sha256(storage.base_uri.encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"inlet-table-{digest}.lock")


def _lock_key(storage: Storage) -> str:
    if storage.is_object_store:
        return f"{storage.s3.endpoint if storage.s3 else ''}|{storage.full(LOCK_PATH)}"
    return _lock_file_path(storage)


@contextmanager
def table_lock(storage: Storage) -> Iterator[None]:
    """Hold the table's lock (re-entrant within a thread).

    Keyed by the lock file, not the URI: two spellings of one table (``/t``, ``file:///t``) must
    share the re-entrancy count, or a thread holding one would wait forever on the other's flock.
    """
    key = _lock_key(storage)
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
        holder = _object_lock if storage.is_object_store else _file_lock
        with holder(storage):
            depths[key] = 1
            try:
                yield
            finally:
                depths[key] = 0


@contextmanager
def _file_lock(storage: Storage) -> Iterator[None]:
    fd = os.open(_lock_file_path(storage), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_object_store_locking(storage: Storage) -> None:
    """Refuse a local-lock writer on a store without conditional writes (it could not lock)."""
    cond = storage.conditional()
    if not cond.supported(".hoodie/.aux"):
        raise UnsupportedError(
            f"the object store of {storage.base_uri} ignores conditional writes (If-None-Match), so "
            "writers on different machines cannot lock the table: write through the commit "
            "coordinator (inlet coordinator; --coordinator on the writer)"
        )


@contextmanager
def _object_lock(storage: Storage) -> Iterator[None]:
    try:
        check_object_store_locking(storage)
    except InletError as e:
        if storage.coordinated:  # the coordinator serialises the commits; this process's threads are
            yield  # excluded by the thread lock
            return
        if isinstance(e, UnsupportedError):
            raise
        raise UnsupportedError(f"cannot lock {storage.base_uri} without the coordinator: {e}") from e
    cond = storage.conditional()
    key = storage.object_key(LOCK_PATH)
    wait_s = LOCK_WAIT.get(os.environ) or 0.0
    lease_ms = int(1000 * (LOCK_LEASE.get(os.environ) or 60.0))
    if lease_ms <= 0:
        raise InvalidConfigError(f"{LOCK_LEASE.key} must be a positive number of seconds")
    owner = {
        "host": socket.gethostname(),
        "pid_ns": _pid_namespace(),
        "pid": os.getpid(),
        "id": uuid.uuid4().hex,
    }
    deadline = time.monotonic() + wait_s
    delay = 0.01
    etag: str | None = None
    while etag is None:
        body = _lock_body(owner, lease_ms)
        etag = cond.put_if_absent(key, body)
        if etag is not None:
            break
        current = cond.get(key)
        if current is None:
            continue  # released meanwhile
        if _holder_gone(current.body) and current.etag:
            etag = cond.put_if_match(key, body, current.etag)  # the holder is gone: take over
            if etag is not None:
                break
        if time.monotonic() > deadline:
            raise LockTimeoutError(
                f"table {storage.base_uri} stayed locked by {current.body[:200].decode('utf-8', 'replace')} "
                f"for {wait_s:.0f} s ({LOCK_PATH}); retry later"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    lease = _Lease(cond, key, owner, lease_ms, etag, storage.base_uri)
    try:
        yield
    finally:
        etag = lease.stop()
        if etag:
            cond.delete_if_match(key, etag)
        elif not lease.lost:  # a store that returns no ETag: the lock is ours, delete it plainly
            storage.delete(LOCK_PATH)


def _lock_body(owner: Mapping[str, object], lease_ms: int) -> bytes:
    return json.dumps({**owner, "expires_ms": int(time.time() * 1000) + lease_ms}).encode()


class _Lease:
    """Renews a held lock object's lease every third of it, in a daemon thread, until :meth:`stop`.

    Each renewal is one ``PUT`` with ``If-Match: <the ETag of our last write>``: it fails (and renewing
    stops, the lock is ``lost``) only if another writer took the lock over, which it does only once
    the lease expired, i.e. after this holder failed to renew for a whole lease. A failed request
    (the store unreachable) is retried at the next tick."""

    def __init__(
        self,
        cond: ConditionalS3,
        key: str,
        owner: Mapping[str, object],
        lease_ms: int,
        etag: str,
        table: str,
    ) -> None:
        self._cond = cond
        self._key = key
        self._owner = owner
        self._lease_ms = lease_ms
        self._table = table
        self.etag = etag
        self.lost = False
        self._guard = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if etag:  # without an ETag (a store that returns none) the lease cannot be renewed safely
            self._thread = threading.Thread(target=self._run, name="inlet-s3-lock-lease", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._lease_ms / 3000):
            with self._guard:
                if self._stopped.is_set():
                    return
                try:
                    etag = self._cond.put_if_match(
                        self._key, _lock_body(self._owner, self._lease_ms), self.etag
                    )
                except OSError as e:
                    _log.warning("could not renew the lock of %s (retrying): %s", self._table, e)
                    continue
                if etag is None:
                    self.lost = True
                    _log.error(
                        "the lock of %s was taken over by another writer: its lease expired before it "
                        "could be renewed",
                        self._table,
                    )
                    return
                self.etag = etag

    def stop(self) -> str | None:
        """Stop renewing; the ETag of the lock object as last written, or None if the lock was lost."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        return None if self.lost else self.etag


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _holder_gone(body: bytes) -> bool:
    """The lease expired, or the holder was a process of this host (pid namespace) that is gone."""
    try:
        held = json.loads(body)
        expires = int(held.get("expires_ms", 0))
    except (ValueError, AttributeError, TypeError):
        return True
    if expires < time.time() * 1000:
        return True
    pid = held.get("pid")
    if held.get("host") != socket.gethostname() or held.get("pid_ns") != _pid_namespace():
        return False
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
