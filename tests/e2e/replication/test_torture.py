"""The torture test (issue #21 item 4): a random workload while the pipeline's processes die.

On the stack as ``inlet stack up`` runs it (the broker keeps its topics in the S3 store, so it can
restart), a random workload runs -- inserts, updates, deletes, primary-key changes, TOASTed
columns left unchanged and changed, two-table transactions, TRUNCATE, ADD and DROP COLUMN and one
large transaction -- while, at random moments in a random order, the writer is SIGKILLed (and
restarted to die at each of its fault points), the CDC consumer, the broker, the coordinator and
Kafka Connect are SIGKILLed, and PostgreSQL crashes (immediate shutdown, WAL recovery on restart).
At the end ``inlet verify`` finds no difference, no record key is duplicated, no two commits
consumed one offset, and hudi-rs reads the same rows.

``make test`` runs a short round (every fault once, ~1 minute of workload). The long run is
``benchmarks/torture.py``, which sets ``INLET_TORTURE_SECONDS`` (fault rounds repeat until then),
``INLET_TORTURE_BIG_TX`` (rows of the large transaction, 100k there), ``INLET_TORTURE_SEED`` and
``INLET_TORTURE_REPORT`` (a JSON file the results are written to).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import psycopg
import pytest
from conftest import (
    BackgroundWorkload,
    RunningStack,
    Workload,
    check_offsets,
    compare_hudi_rs,
    compare_inlet,
    crash_at,
    wait_for,
    wait_for_lake,
)

from inlet.core import HudiTable
from inlet.core.faults import AFTER_DATA_FILES, BEFORE_COMPLETE
from inlet.services.verify.verifier import EQUAL, Verifier, VerifyOptions
from inlet.services.writer.service import AFTER_COMMIT

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("INLET_TORTURE_SECONDS", "0"))  # 0: one round of every fault
SEED = int(os.environ.get("INLET_TORTURE_SEED", "22"))
BIG_TX = int(os.environ.get("INLET_TORTURE_BIG_TX", "5000"))
REPORT = os.environ.get("INLET_TORTURE_REPORT")


class TortureWorkload(Workload):
    """:class:`Workload` plus TRUNCATE, DROP COLUMN, one large transaction, and a pause so that
    PostgreSQL can be restarted between two transactions of the workload (its bookkeeping needs
    to know whether each one committed)."""

    def __init__(self, url: str, prefix: str, seed: int) -> None:
        super().__init__(url, prefix, seed)
        self.truncates = 0
        self.column_dropped = False
        self.big_tx_done = False
        self.big_tx_changes = 0
        self.pause = threading.Event()
        self.idle = threading.Event()

    def truncate_lines(self) -> None:
        self.conn.execute(f"TRUNCATE {self.prefix}order_lines")  # type: ignore[arg-type]
        self.orders = dict.fromkeys(self.orders, 0)
        self.truncates += 1

    def drop_column(self) -> None:
        self.conn.execute(f"ALTER TABLE {self.prefix}orders DROP COLUMN note")  # type: ignore[arg-type]
        self.column_dropped = True

    def big_transaction(self, n: int) -> None:
        """``n`` customers inserted and then half of them updated, in one transaction (counted in
        :attr:`big_tx_changes`, not :attr:`changes`, which paces the workload)."""
        first, last = self.next_customer, self.next_customer + n - 1
        self.conn.execute(
            f"INSERT INTO {self.prefix}customers (id, name, bio, balance, created_at) "  # type: ignore[arg-type]
            "SELECT g, 'bulk ' || g, NULL, g / 100.0, '2026-01-01'::timestamptz + g * interval '1 s' "
            "FROM generate_series(%s::int, %s::int) g",
            (first, last),
        )
        updated = self.conn.execute(
            f"UPDATE {self.prefix}customers SET version = version + 1 "  # type: ignore[arg-type]
            "WHERE id BETWEEN %s AND %s AND id %% 2 = 0",
            (first, last),
        ).rowcount
        self.big_tx_changes = n + updated
        self.customers.extend(range(first, last + 1))
        self.next_customer += n
        self.big_tx_done = True

    def fill_new_columns(self, n: int) -> None:
        ids = self.rng.sample(self.customers, min(n, len(self.customers)))
        self._x("UPDATE T_customers SET tier = 't' || (id %% 3) WHERE id = ANY(%s)", (ids,))
        if not self.column_dropped:
            oids = self.rng.sample(sorted(self.orders), min(n, len(self.orders)))
            self._x("UPDATE T_orders SET note = 'note ' || id WHERE id = ANY(%s)", (oids,))

    def wait_unpaused(self) -> None:
        while self.pause.is_set():
            self.idle.set()
            time.sleep(0.05)
        self.idle.clear()

    def add_columns(self) -> None:
        self.wait_unpaused()
        super().add_columns()

    def step(self) -> None:
        self.wait_unpaused()
        r = self.rng.random()
        if not self.big_tx_done and self.steps > 20:
            self.big_transaction(BIG_TX)
        elif r < 0.03:
            self.truncate_lines()
        elif r < 0.08 and self.columns_added and not self.column_dropped:
            self.drop_column()
        else:
            super().step()
            return
        self.steps += 1
        self.conn.commit()

    def reconnect(self) -> None:
        self.conn.close()
        self.conn = psycopg.connect(self.url, autocommit=False)


def _crash_postgres(stack: RunningStack, w: TortureWorkload) -> None:
    """PostgreSQL's immediate shutdown (SIGQUIT: no checkpoint, recovery from WAL at the restart)
    between two transactions of the workload; Debezium, the coordinator and the CDC consumer lose
    their connections."""
    w.pause.set()
    try:
        wait_for(w.idle.is_set, 60, "the workload to pause")
        stack.wait_restarted("postgres", stack.kill("postgres", signal.SIGQUIT))
        w.reconnect()
    finally:
        w.pause.clear()


def test_torture(durable_stack: RunningStack) -> None:
    stack = durable_stack
    rng = random.Random(SEED)
    w = TortureWorkload(stack.url, "ft_", seed=SEED)
    w.create()
    w.insert_customers(5)
    w.insert_orders(5)
    w.conn.commit()
    wait_for_lake(stack, w.tables, timeout_s=120)
    names = ("writer", "cdc_consumer", "kafka", "coordinator", "debezium", "postgres")
    before = {n: stack.restarts(n) for n in names}
    faults: dict[str, int] = {}
    # about 25 changes/s until the last fault is over
    bg = BackgroundWorkload(w, changes=10**9, seconds=4 * 10**7, alter_after_s=20)
    started = time.monotonic()

    def fault(name: str) -> None:
        if name.startswith("writer@"):
            crash_at(stack, "writer", name.removeprefix("writer@"))
        elif name == "postgres":
            _crash_postgres(stack, w)
        else:
            timeout = 180 if name == "debezium" else 120
            stack.wait_restarted(name, stack.kill(name), timeout_s=timeout)
        faults[name] = faults.get(name, 0) + 1

    rounds = 0
    while rounds == 0 or time.monotonic() - started < SECONDS:
        plan = [f"writer@{p}" for p in (AFTER_DATA_FILES, BEFORE_COMPLETE, AFTER_COMMIT)]
        plan += ["cdc_consumer", "kafka", "coordinator", "debezium", "postgres"]
        rng.shuffle(plan)
        for name in plan:
            time.sleep(rng.uniform(0.5, 4.0))  # a random moment of the workload
            assert bg.running, f"the workload stopped: {bg.error!r}"
            fault(name)
        rounds += 1
    while not (w.big_tx_done and w.column_dropped and w.truncates):  # every kind of step happened
        assert bg.running, f"the workload stopped: {bg.error!r}"
        time.sleep(0.5)
    bg.stop.set()
    bg.join()
    w.close()
    workload_s = time.monotonic() - started
    caught_up = wait_for_lake(stack, w.tables, timeout_s=300)

    verify_started = time.monotonic()
    reports = Verifier(
        VerifyOptions(source_url=stack.url, lake_root=str(stack.lake), tables=("public.ft_*",))
    ).run()
    verify_s = time.monotonic() - verify_started
    assert sorted(r.table for r in reports) == sorted(f"public.{t}" for t in w.tables)
    assert all(r.status == EQUAL for r in reports), [r.as_json() for r in reports if r.status != EQUAL]

    after = {n: stack.restarts(n) for n in names}
    assert after["writer"] - before["writer"] >= 2 * 3 * rounds
    for n in names[1:]:
        assert after[n] - before[n] >= rounds, n
    # the crashes before a completed commit left instants that were (or wait to be) rolled back
    unfinished = 0
    for t in w.tables:
        for i in HudiTable.open(str(stack.table_path(t))).instants():
            done = str(i.state).endswith("COMPLETED")
            unfinished += (i.action == "rollback" and done) or (i.action == "deltacommit" and not done)
    assert unfinished >= 2, "the writer never died with a write in flight"
    rows = {t: compare_inlet(stack, t) for t in w.tables}  # also: no duplicate record key
    for t in w.tables:
        check_offsets(stack.table_path(t))
    for t in w.tables[1:]:
        compare_hudi_rs(stack, t, versions=["2"])
    result = {
        "seed": SEED,
        "rounds": rounds,
        "workload_s": round(workload_s, 1),
        "changes": w.changes + w.big_tx_changes,
        "transactions": w.steps,
        "big_tx_rows": BIG_TX,
        "truncates": w.truncates,
        "faults": faults,
        "lake_equal_after_s": round(caught_up, 1),
        "verify_s": round(verify_s, 2),
        "rows": rows,
    }
    print(json.dumps(result))
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump(result, f, indent=2)
