"""Group commit (:mod:`inlet.services.coordinator.batches`): calls queued for one table's row lock
share one PostgreSQL transaction, yet each is checked on its own and fails alone.

The coordinator is driven directly (no gRPC) on a real PostgreSQL database and lake. A batch is
formed without timing: a first call holds the table's queue (it waits for a gate) while the others
queue behind it; opening the gate lets them run together."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from inlet.core import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator import validation
from inlet.services.coordinator.batches import TableQueues
from inlet.services.coordinator.commits import Coordinator
from inlet.services.coordinator.errors import Conflict
from inlet.services.coordinator.store import Store, Tx

TABLE = "app.orders"


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    store = Store(pg_url, pool_size=4).open()
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def transactions(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the store's transactions (each is still the real one)."""
    opened: list[int] = []
    real = store.transaction

    def counted() -> AbstractContextManager[Tx]:
        opened.append(1)
        return real()

    monkeypatch.setattr(store, "transaction", counted)
    return opened


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class _Batch:
    """Calls started in threads behind a gate call that holds the table's queue."""

    def __init__(self, queues: TableQueues, table_id: str) -> None:
        self.queues = queues
        self.table_id = table_id
        self.gate = threading.Event()
        self.results: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []
        leading = threading.Event()

        def gate(tx: Tx) -> bool:
            leading.set()
            return self.gate.wait(30)

        self._start("gate", lambda: queues.run(table_id, gate))
        assert leading.wait(30), "the gate call did not run"

    def _start(self, name: str, call: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self.results[name] = call()
            except Exception as e:
                self.results[name] = e

        thread = threading.Thread(target=run, name=name)
        thread.start()
        self.threads.append(thread)

    def add(self, name: str, call: Callable[[], Any]) -> None:
        """Start ``call`` and wait until it is queued behind the gate."""
        queued = self.queues.waiting(self.table_id)
        self._start(name, call)
        _wait_for(lambda: self.queues.waiting(self.table_id) == queued + 1, f"{name} to queue")

    def release(self) -> dict[str, Any]:
        self.gate.set()
        for thread in self.threads:
            thread.join(60)
        return self.results


def _metadata(instant: Instant, file_id: str) -> CommitMetadata:
    md = CommitMetadata(operation_type="UPSERT")
    md.add(WriteStat(file_id=file_id, path=f"p/{file_id}_0-0-0_{instant.time}.parquet", partition_path="p"))
    return md


def test_completes_queued_for_a_table_share_one_transaction_and_a_conflict_fails_alone(
    store: Store, lake: Path, transactions: list[int]
) -> None:
    path = lake / "orders"
    HudiTable.create(str(path), name="orders", record_key="id")
    coordinator = Coordinator(store, validation.lake_roots([str(lake)]), 60_000, 10_000)
    coordinator.register(TABLE, str(path), None, None)
    # b and c write the same file group: whichever completes first, the other conflicts with it
    groups = {"a": "fg-a", "b": "fg-x", "c": "fg-x", "d": "fg-d"}
    began = {}
    for name, group in groups.items():
        began[name] = coordinator.begin(TABLE, "commit", b"", name, f"begin-{name}")
        coordinator.mark_inflight(TABLE, began[name].time, b"", {("p", group)})
    transactions.clear()

    batch = _Batch(coordinator.queues, TABLE)
    for name, group in groups.items():
        instant = began[name]
        batch.add(
            name,
            lambda i=instant, g=group, n=name: coordinator.complete(
                TABLE, i.time, "commit", _metadata(i, g), None, f"complete-{n}"
            ),
        )
    results = batch.release()

    # four completes (and the gate) in two transactions: the gate's, and one for all four
    assert len(transactions) == 2
    losers = [n for n in ("b", "c") if isinstance(results[n], Conflict)]
    assert len(losers) == 1, results
    loser = losers[0]
    winner = "c" if loser == "b" else "b"
    assert f"conflicts with commit {began[winner].time}" in str(results[loser])
    done = {n: r.instant for n, r in results.items() if n in groups and n != loser}
    assert all(i.is_completed for i in done.values()), results

    # the lake and the database agree: three completed, the loser still pending, one outbox row
    # each with the sequences 1..3 (the loser's savepoint left no gap)
    timeline = HudiTable.open(str(path)).timeline
    completed = {i.time for i in timeline.completed()}
    assert completed == {began[n].time for n in done}
    with store.pool.connection() as conn:
        rows = conn.execute(
            "SELECT instant_time, state FROM instants WHERE table_id = %s", (TABLE,)
        ).fetchall()
        sequences = conn.execute(
            "SELECT event_id, sequence FROM outbox WHERE table_id = %s ORDER BY sequence", (TABLE,)
        ).fetchall()
    states = dict(rows)
    assert states[began[loser].time] == "INFLIGHT"
    assert {t for t, s in states.items() if s == "COMPLETED"} == completed
    assert [s for _, s in sequences] == [1, 2, 3]
    assert {e.split("/")[1] for e, _ in sequences} == completed


def test_a_database_error_in_a_batch_fails_its_call_alone(
    store: Store, pg_url: str, transactions: list[int]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE scratch (v INT)")
    queues = TableQueues(store)

    def insert(value: int, then: str | None = None) -> Callable[[Tx], int]:
        def call(tx: Tx) -> int:
            tx.cur.execute("INSERT INTO scratch VALUES (%s)", (value,))
            if then == "python":
                raise ValueError("refused")
            if then == "database":
                tx.cur.execute("SELECT 1 / 0")
                tx.cur.fetchone()
            return value

        return call

    # a call raising a Python error is rolled back to its savepoint: one shared transaction
    batch = _Batch(queues, "t")
    for name, then in (("1", None), ("2", "python"), ("3", None)):
        batch.add(name, lambda v=int(name), t=then: queues.run("t", insert(v, t)))
    results = batch.release()
    assert (results["1"], results["3"]) == (1, 3)
    assert isinstance(results["2"], ValueError)
    assert len(transactions) == 2  # the gate's and the batch's

    # a database error loses the shared transaction: each call runs again alone
    transactions.clear()
    batch = _Batch(queues, "t")
    for name, then in (("4", None), ("5", "database"), ("6", None)):
        batch.add(name, lambda v=int(name), t=then: queues.run("t", insert(v, t)))
    results = batch.release()
    assert (results["4"], results["6"]) == (4, 6)
    assert isinstance(results["5"], psycopg.errors.DivisionByZero)
    assert len(transactions) == 1 + 1 + 3  # the gate's, the failed batch's, and one per call

    with psycopg.connect(pg_url) as conn:
        assert [r[0] for r in conn.execute("SELECT v FROM scratch ORDER BY v")] == [1, 3, 4, 6]


def test_a_read_in_a_pipelined_transaction_gets_its_own_rows(store: Store) -> None:
    """Statements whose results nobody reads are sent ahead on the transaction's cursor; a read
    behind them must get its own rows, never an earlier statement's (CI caught ``migrate`` reading
    the advisory lock's row as the schema version on a coordinator's restart)."""
    for n in range(50):  # the mix-up depended on when the earlier results arrived
        with store.transaction() as tx:
            tx.cur.execute("SELECT pg_advisory_xact_lock(%s)", (n,))
            tx.cur.execute("SELECT 'not read' AS other")
            tx.cur.execute("CREATE TABLE IF NOT EXISTS schema_version (version INT PRIMARY KEY)")  # a notice
            assert tx._one("SELECT %s::int AS v", (n,)) == {"v": n}
            assert tx._all("SELECT g AS v FROM generate_series(1, 2) g") == [{"v": 1}, {"v": 2}]
            assert tx._count("UPDATE schema_version SET version = version WHERE false") == 0
