"""Holding a coordinator lock lease while work goes on: acquire, renew in the background, release.

The coordinator grants a table lock as a lease with a fencing token (AcquireLock); the holder must
renew it (RenewLock) before it expires or another owner may take it. :class:`HeldLease` renews at a
third of the lease, and sets :attr:`HeldLease.lost` when a renewal fails (the lease expired, was
taken over, or the coordinator stayed unreachable for the rest of the lease), so the work can stop
before it acts without the lock. ``with hold_lease(...) as lease:`` releases it on the way out.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from inlet.services.coordinator_client.client import CoordinatorClient

log = logging.getLogger("inlet.coordinator.client")


class HeldLease:
    """A granted lease of the table's lock ``lock_name``; renewed by a daemon thread until :meth:`release`."""

    def __init__(
        self,
        client: CoordinatorClient,
        table_id: str,
        lock_name: str,
        owner: str,
        lease_ms: int,
        wait_ms: int,
    ) -> None:
        self.client = client
        self.table_id = table_id
        self.lock_name = lock_name
        self.what = f"{table_id} (lock {lock_name!r})"
        granted = client.acquire_lock(
            table_id, owner, lease_ms=lease_ms, wait_ms=wait_ms, lock_name=lock_name
        )
        self.lock_id: str = granted.lock_id
        self.fencing_token: int = granted.fencing_token
        self.expires_at_ms: int = granted.expires_at_ms
        self._lease_ms = lease_ms or max(1, granted.expires_at_ms - int(time.time() * 1000))
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{table_id}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        interval = max(0.05, self._lease_ms / 3000)
        while not self._stop.wait(interval):
            try:
                lease = self.client.renew_lock(self.table_id, self.lock_id, lease_ms=self._lease_ms)
            except Exception as e:
                if time.time() * 1000 < self.expires_at_ms - interval * 1000:
                    log.warning("renewing the lease of %s failed, retrying: %s", self.what, e)
                    continue
                log.error("lost the lease of %s: %s", self.what, e)
                self.lost.set()
                return
            self.expires_at_ms = lease.expires_at_ms

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if not self.lost.is_set():
            with contextlib.suppress(Exception):  # an unreleased lease expires on its own
                self.client.release_lock(self.table_id, self.lock_id)


@contextlib.contextmanager
def hold_lease(
    client: CoordinatorClient, table_id: str, lock_name: str, owner: str, lease_ms: int = 0, wait_ms: int = 0
) -> Iterator[HeldLease]:
    """Hold the table's lock ``lock_name`` for the ``with`` block (raises the client's error if another
    owner holds it past ``wait_ms``)."""
    lease = HeldLease(client, table_id, lock_name, owner, lease_ms, wait_ms)
    try:
        yield lease
    finally:
        lease.release()
