"""Leased table locks with fencing tokens (AcquireLock / RenewLock / ReleaseLock).

A lease is a row of the coordinator's store, keyed by (table, lock name): the empty name is the
table's write lock, named locks (e.g. ``services``) are held apart from it. Each grant carries a
new fencing token. Every change runs in a transaction holding the table's row lock, so replicas
sharing the database agree; an expired lease is free to the next acquirer (and the janitor
deletes it).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass

from inlet.services.coordinator import validation
from inlet.services.coordinator.errors import FailedPrecondition, LockHeld, NotFound
from inlet.services.coordinator.store import LeaseRow, Store, TableRow, Tx

log = logging.getLogger("inlet.coordinator")

MAX_LOCK_WAIT_MS = 60_000
MAX_LEASE_MS = 3_600_000


def registered(tx: Tx, table_id: str, lock: bool = False, instant: tuple[str, str] | None = None) -> TableRow:
    """The table's row (``lock``: held for the transaction), or NotFound. With ``lock`` and
    ``instant`` (a column of instants and its value) that instant and the table's pending
    instants are read in the same round trip (:meth:`Tx.lock_table`)."""
    row = tx.lock_table(table_id, *instant) if lock and instant else tx.table(table_id, lock=lock)
    if row is None:
        raise NotFound(f"table {table_id!r} is not registered with the coordinator")
    return row


def _held_message(table_id: str, held: LeaseRow) -> str:
    which = f"lock {held.lock_name!r}" if held.lock_name else "lock"
    return (
        f"the {which} of table {table_id} is held by {held.owner} (fencing token {held.fencing_token}, "
        f"lease ends in {held.remaining_ms} ms)"
    )


class Leases:
    """The lease operations of one coordinator process."""

    def __init__(self, store: Store, default_lease_ms: int, lock_wait_slots: int | None = None) -> None:
        self.store = store
        self.default_lease_ms = default_lease_ms
        # AcquireLock calls that may wait here at once (each holds its server thread while it
        # waits); None: any number. The others are answered at once and wait on the client's side.
        self._lock_wait_slots = (
            threading.BoundedSemaphore(lock_wait_slots) if lock_wait_slots is not None else None
        )
        self.lock_wait_slots = lock_wait_slots
        # notified when a lease of this coordinator is released, so waiters here retry at once
        self._lock_released = threading.Condition()
        self._releases = 0  # leases released here (a waiter that saw a change skips its wait)

    def acquire(
        self, table_id: str, owner: str, lease_ms: int, wait_ms: int, lock_name: str = ""
    ) -> LeaseRow:
        """Grant the table lock (a new fencing token) if it is free or its lease expired; wait up to
        ``wait_ms`` for it. A retried acquisition by the current holder gets its lease back, renewed.

        Waiting holds the calling server thread, so only :attr:`lock_wait_slots` calls wait here at
        once: a held lock with no free slot raises :class:`LockHeld` at once (the client retries
        with the rest of its wait, see :meth:`CoordinatorClient.acquire_lock`), and the other
        threads stay free for every other call, the holder's ReleaseLock first of all. A waiter is
        woken as soon as a lease of this coordinator is released (other replicas' releases and
        expiries are seen by polling every 50 ms)."""
        validation.table_id(table_id)
        validation.bounded(owner, "owner", required=True)
        validation.non_negative(lease_ms, "lease_ms", MAX_LEASE_MS)
        validation.non_negative(wait_ms, "wait_ms", MAX_LOCK_WAIT_MS)
        validation.lock_name(lock_name)
        lease_ms = lease_ms or self.default_lease_ms
        deadline = time.monotonic() + wait_ms / 1000
        slots = self._lock_wait_slots
        waiting = False  # whether this call holds a wait slot
        try:
            while True:
                with self._lock_released:
                    seen = self._releases
                granted, held = self._try_lock(table_id, owner, lease_ms, lock_name)
                if granted is not None:
                    return granted
                assert held is not None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LockHeld(_held_message(table_id, held))
                if not waiting:
                    if slots is not None and not slots.acquire(blocking=False):
                        raise LockHeld(
                            f"{_held_message(table_id, held)}; not waiting on the server (its "
                            f"{self.lock_wait_slots} lock-wait slot(s) are taken): retry"
                        )
                    waiting = True
                with self._lock_released:
                    if self._releases == seen:
                        self._lock_released.wait(min(0.05, remaining))
        finally:
            if waiting and slots is not None:
                slots.release()

    def _try_lock(
        self, table_id: str, owner: str, lease_ms: int, lock_name: str
    ) -> tuple[LeaseRow | None, LeaseRow | None]:
        """One attempt: (the granted or renewed lease, None), or (None, the other owner's lease)."""
        with self.store.transaction() as tx:
            registered(tx, table_id, lock=True)
            held = tx.lease(table_id, lock_name)
            if held is None or held.expired:
                tx.grant_lease(table_id, uuid.uuid4().hex, owner, lease_ms, lock_name)
                granted = tx.lease(table_id, lock_name)
                assert granted is not None
                log.info(
                    "lock %r of %s granted to %s (token %d)",
                    lock_name,
                    table_id,
                    owner,
                    granted.fencing_token,
                )
                return granted, None
            if held.owner == owner:
                tx.extend_lease(table_id, held.lock_id, lease_ms)
                renewed = tx.lease(table_id, lock_name)
                assert renewed is not None
                return renewed, None
            return None, held

    def _notify_released(self) -> None:
        with self._lock_released:
            self._releases += 1
            self._lock_released.notify_all()

    def renew(self, table_id: str, lock_id: str, lease_ms: int) -> LeaseRow:
        validation.table_id(table_id)
        validation.bounded(lock_id, "lock_id", required=True)
        validation.non_negative(lease_ms, "lease_ms", MAX_LEASE_MS)
        with self.store.transaction() as tx:
            registered(tx, table_id, lock=True)
            held = self._held(tx, table_id, lock_id)
            if held.expired:
                tx.delete_lease(table_id, lock_id)
                raise FailedPrecondition(
                    f"the lease of lock {lock_id} on {table_id} expired {-held.remaining_ms} ms ago; acquire it again"
                )
            tx.extend_lease(table_id, lock_id, lease_ms or self.default_lease_ms)
            renewed = tx.lease_by_id(table_id, lock_id)
            assert renewed is not None
            return renewed

    def release(self, table_id: str, lock_id: str) -> None:
        validation.table_id(table_id)
        validation.bounded(lock_id, "lock_id", required=True)
        with self.store.transaction() as tx:
            registered(tx, table_id, lock=True)
            self._held(tx, table_id, lock_id)
            tx.delete_lease(table_id, lock_id)
        self._notify_released()

    @staticmethod
    def _held(tx: Tx, table_id: str, lock_id: str) -> LeaseRow:
        held = tx.lease_by_id(table_id, lock_id)
        if held is None or held.lock_id != lock_id:
            raise FailedPrecondition(
                f"lock {lock_id} of table {table_id} is not held (released, or expired and granted to another owner)"
            )
        return held

    def release_expired(self) -> list[tuple[str, str]]:
        with self.store.transaction() as tx:
            released = tx.delete_expired_leases()
        if released:
            self._notify_released()
        return released


@dataclass(frozen=True)
class Fence:
    """A lease its holder completes under: the lock's name and the fencing token it was granted."""

    lock_name: str
    fencing_token: int


def check_fence(tx: Tx, table_id: str, fence: Fence) -> None:
    """Refuse a completion whose lease is no longer its lock's grant (expired, released, or taken
    over with a newer fencing token): its holder may have been replaced while it wrote."""
    lease = tx.lease(table_id, fence.lock_name)
    if lease is None or lease.expired or lease.fencing_token != fence.fencing_token:
        now = (
            "free"
            if lease is None or lease.expired
            else f"held by {lease.owner} (token {lease.fencing_token})"
        )
        raise FailedPrecondition(
            f"fenced: the lease of lock {fence.lock_name!r} of table {table_id} with fencing token "
            f"{fence.fencing_token} is no longer held (the lock is {now})"
        )
