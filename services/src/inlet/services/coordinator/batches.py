"""Group commit: the calls waiting for one table's row lock share one database transaction.

BeginInstant, MarkInflight and CompleteInstant each run under their table's row lock
(``SELECT ... FOR UPDATE``, see :mod:`.store`). Rather than each call opening a transaction of its
own and waiting for the lock on a database connection, the calls of one table queue here: the
first in line (when no batch of that table runs) takes everything queued at that moment, up to
``max_batch``, and runs it in one transaction, each call in a savepoint of its own, in the order
they queued; the others wait on a condition, holding no connection and no lock. When the batch
ends, the first call that queued meanwhile leads the next one.

Every call is still validated and checked by itself, on the state the calls before it in the
batch left (their rows, and their timeline files, which are written before the commit as they are
alone); a call that fails is rolled back to its savepoint and answered with its error, the others
go on. Their answers are given once the transaction has committed. If the shared transaction
fails (a database error, a lost connection), nothing of it was committed: each of its calls is
then run again alone, so a call's fault never fails the others. What a call wrote to the
timeline before a failed commit is found again as before (:meth:`.Coordinator._reconcile`, a
retried call), exactly as when a single call's commit fails.

Calls on different tables never share a transaction, so a transaction holds one table's lock and
never waits for another's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import psycopg

from inlet.services.coordinator.errors import Unavailable
from inlet.services.coordinator.store import Store, Tx

T = TypeVar("T")
DEFAULT_MAX_BATCH = 64


class _Call(Generic[T]):
    __slots__ = ("done", "error", "fn", "value")

    def __init__(self, fn: Callable[[Tx], T]) -> None:
        self.fn = fn
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None


class _Queue:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.calls: list[_Call[object]] = []
        self.running = False


class TableQueues:
    """Per-table queues of calls that need the table's row lock (see the module's docstring)."""

    def __init__(self, store: Store, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max(1, max_batch)
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}

    def _queue(self, table_id: str) -> _Queue:
        with self._lock:
            return self._queues.setdefault(table_id, _Queue())

    def waiting(self, table_id: str) -> int:
        """Calls of the table queued behind the batch that runs now (none runs: 0)."""
        q = self._queue(table_id)
        with q.cond:
            return len(q.calls)

    def run(self, table_id: str, fn: Callable[[Tx], T]) -> T:
        """``fn(tx)`` in a transaction (possibly shared with other calls of the table) that holds
        nothing else of other tables; its result once that transaction has committed."""
        q = self._queue(table_id)
        call: _Call[T] = _Call(fn)
        batch: list[_Call[object]] = []
        with q.cond:
            q.calls.append(call)  # type: ignore[arg-type]
            while not call.done:
                if not q.running and q.calls[0] is call:
                    batch = q.calls[: self.max_batch]
                    del q.calls[: len(batch)]
                    q.running = True
                    break
                q.cond.wait()
        if batch:
            try:
                self._run(batch)
            finally:
                with q.cond:
                    for c in batch:
                        if not c.done:  # interrupted (the leader's thread is ending)
                            c.error = Unavailable("the coordinator stopped while committing; retry the call")
                            c.done = True
                    q.running = False
                    q.cond.notify_all()
        if call.error is not None:
            raise call.error
        return call.value  # type: ignore[return-value]

    def _run(self, batch: list[_Call[object]]) -> None:
        if len(batch) == 1:
            self._run_alone(batch[0])
            return
        try:
            with self.store.transaction() as tx:
                for call in batch:
                    try:
                        with tx.savepoint():
                            call.value = call.fn(tx)
                    except psycopg.Error:
                        raise  # the transaction is lost: run each call again alone
                    except Exception as e:
                        call.error = e
        except Exception:
            for call in batch:
                call.value, call.error = None, None
                self._run_alone(call)
            return
        for call in batch:
            call.done = True

    def _run_alone(self, call: _Call[object]) -> None:
        try:
            with self.store.transaction() as tx:
                call.value = call.fn(tx)
        except Exception as e:
            call.error = e
        call.done = True
