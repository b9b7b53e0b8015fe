"""End-to-end replication: the whole pipeline as real processes, checked against PostgreSQL itself.

``stack`` / ``durable_stack`` (module scope) run :class:`inlet.services.stack.supervisor.Stack` -- the supervisor that
``inlet stack up`` runs in the background -- in a thread of the test process, so a test can kill a
component by pid (the supervisor restarts it, as it would in production) and change the
environment a :class:`CommandComponent` is restarted with (``INLET_CRASH_AT`` fault points). Every
process of the stack is stopped when the module ends; the fixture then checks none is left.

Helpers:

- :class:`Workload`: a random workload over three related tables (customers with a TOASTed
  ``bio``, orders with numeric and timestamp(tz) columns, order lines with a two-column key),
  counting the row changes it makes. Expected contents always come from PostgreSQL.
- :func:`compare_inlet` / :func:`compare_hudi_rs`: a Hudi table read by Inlet / by hudi-rs 0.5.0
  (file-group readers 1 and 2) against the PostgreSQL table, row for row, no duplicate key.
- :func:`check_offsets`: the offset ranges and checkpoints in the timeline's commits.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import random
import signal
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.errors import TableNotFoundError
from inlet.core.s3 import S3Options, is_s3_uri
from inlet.services.stack.components import CommandComponent, Component
from inlet.services.stack.supervisor import Stack, StackConfig
from inlet.services.writer import checkpoint as ckpt

PLACEHOLDER = "__debezium_unavailable_value"
READER_VERSIONS = ("1", "2")
DATABASE = "app"


# ---------------------------------------------------------------------------------------------- stack


class _Stop:
    """What :meth:`Stack.run` needs of a stop signal, settable from the test thread."""

    def __init__(self) -> None:
        self.event = threading.Event()

    @property
    def stopping(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self.event.wait(timeout_s)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def processes_mentioning(text: str) -> list[int]:
    """Live processes (not this one) whose command line contains ``text``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and _alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


class RunningStack:
    """A supervised stack running in a thread of this process."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.stack = Stack(config)
        self._stop = _Stop()
        self._result: list[int] = []
        self.thread = threading.Thread(target=self._run, name="inlet-stack", daemon=True)

    def _run(self) -> None:
        self._result.append(self.stack.run(self._stop))  # type: ignore[arg-type]

    def start(self, timeout_s: float = 300) -> None:
        self.thread.start()

        def up() -> bool:
            if self._result:
                raise AssertionError(f"the stack stopped while starting: {self.stack.error}")
            return self.stack.state == "running"

        wait_for(up, timeout_s, "the stack to be running")

    def stop(self) -> None:
        self._stop.event.set()
        self.thread.join(timeout=300)

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.stack.pg.url(self.config.database)

    @property
    def bootstrap(self) -> str:
        return self.stack.kafka.bootstrap

    @property
    def coordinator(self) -> str:
        return self.stack.coordinator_address

    @property
    def lake(self) -> str:
        """The lake root: a directory, or an s3:// URI (``lake="s3"``)."""
        return self.config.lake_root

    def table_path(self, table: str) -> Path:
        """The table's directory (a local lake only)."""
        assert self.config.lake == "local", "the lake is on S3: use table_uri"
        return Path(self.table_uri(table))

    def table_uri(self, table: str) -> str:
        """Where the table is: its directory, or its s3:// URI (read with the stack's S3 settings)."""
        return f"{self.lake}/{self.config.database}/public/{table}"

    def table_id(self, table: str) -> str:
        return f"{self.config.database}.public.{table}"

    # -- components --------------------------------------------------------------------------------

    def component(self, name: str) -> Component:
        return next(c for c in self.stack.components if c.name == name)

    def command(self, name: str) -> CommandComponent:
        c = self.component(name)
        assert isinstance(c, CommandComponent)
        return c

    def pid(self, name: str) -> int:
        pid = self.component(name).pid
        assert pid is not None, f"{name} is not running"
        return pid

    def restarts(self, name: str) -> int:
        return self.stack.restarts.get(name, 0)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> int:
        """Signal the component's process (the supervisor restarts it); returns the killed pid."""
        pid = self.pid(name)
        os.kill(pid, sig)
        return pid

    def wait_restarted(self, name: str, old_pid: int, timeout_s: float = 120) -> int:
        """Wait until the component runs again under a new pid and is healthy; returns the pid."""

        def again() -> int | None:
            c = self.component(name)
            pid = c.pid
            return pid if pid is not None and pid != old_pid and c.healthy() else None

        pid: int = wait_for(again, timeout_s, f"{name} to be restarted")
        return pid

    def health(self, name: str) -> dict[str, Any]:
        c = self.command(name)
        assert c.health_url is not None
        with urllib.request.urlopen(c.health_url, timeout=5) as resp:
            data: dict[str, Any] = json.loads(resp.read())
        return data


def crash_at(
    stack: RunningStack,
    name: str,
    *points: str,
    timeout_s: float = 90,
    died: Callable[[str], None] | None = None,
) -> None:
    """SIGKILL component ``name``; the supervisor restarts it with ``INLET_CRASH_AT`` = the first of
    ``points`` (:mod:`inlet.core.faults`), so it dies at that point of its next write (the writer)
    or compaction (the table services, ``inlet.core.actions.compaction_run``'s points); it is
    restarted with the next point, and so on; the restart after the last runs without one. Returns
    once that one is healthy. ``died(point)`` is called as soon as a process died at its point,
    before its successor (a few seconds to start) gets far."""
    component = stack.command(name)
    component.env["INLET_CRASH_AT"] = points[0]
    try:
        armed = stack.wait_restarted(name, stack.kill(name))
        for point, following in zip(points, (*points[1:], None), strict=True):
            if following is None:
                component.env.pop("INLET_CRASH_AT", None)
            else:
                component.env["INLET_CRASH_AT"] = following
            # the armed process reaches the point with the next batch (or compaction) and exits
            wait_for(
                lambda pid=armed: component.pid != pid,
                timeout_s,
                f"{name} to crash at {point}",
                every_s=0.1,
            )
            if died is not None:
                died(point)
            armed = stack.wait_restarted(name, armed)
    finally:
        component.env.pop("INLET_CRASH_AT", None)


def _supervised(lake: str = "local") -> Iterator[RunningStack]:
    yield from supervised(Path(tempfile.mkdtemp(prefix="inlet-e2e-")), lake=lake)


def supervised(root: Path, **config_values: Any) -> Iterator[RunningStack]:
    """A stack in ``root`` run by the supervisor in a thread; checks at the end that nothing is left."""
    # without catalog sync and its metastore: nothing here reads the catalog (test_stack_cli runs them)
    values: dict[str, Any] = {
        "database": DATABASE,
        "batch_interval_ms": 500,
        "catalog": False,
        # these tests decide when logs are compacted (the writer's inline compaction, compact_now)
        "table_services": False,
        **config_values,
    }
    config = StackConfig(dir=str(root), **values)
    config.save()
    running = RunningStack(config)
    env = dict(os.environ)  # a lake="s3" stack's supervisor (this process) sets the AWS_* settings
    try:
        running.start()
        yield running
    finally:
        pids = [c.pid for c in running.stack.components if c.pid is not None]
        running.stop()
        left = [p for p in pids if _alive(p)] + processes_mentioning(str(root))
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.environ.clear()
        os.environ.update(env)
        assert not left, f"processes of the stack left running: {left}"
    if not os.environ.get("INLET_E2E_KEEP"):  # INLET_E2E_KEEP=1 keeps the stack's data and logs
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def stack() -> Iterator[RunningStack]:
    """The stack with its lake on S3 (``--lake s3``: the stack's SeaweedFS), so the replication tests
    prove the whole pipeline on an object store."""
    yield from _supervised(lake="s3")


@pytest.fixture(scope="module")
def durable_stack() -> Iterator[RunningStack]:
    """The stack as ``inlet stack up`` runs it (local lake): Kafka keeps its data under ``DIR/kafka``,
    so it can be killed and restarted."""
    yield from _supervised()


# ---------------------------------------------------------------------------------------------- workload


def schema_sql(prefix: str) -> str:
    return f"""
CREATE TABLE {prefix}customers (
    id          int PRIMARY KEY,
    name        text NOT NULL,
    bio         text,
    balance     numeric(12,2) NOT NULL,
    created_at  timestamptz NOT NULL,
    version     int NOT NULL DEFAULT 0
);
ALTER TABLE {prefix}customers ALTER COLUMN bio SET STORAGE EXTERNAL;
CREATE TABLE {prefix}orders (
    id          bigint PRIMARY KEY,
    customer_id int NOT NULL,
    amount      numeric(10,2) NOT NULL,
    status      text NOT NULL,
    placed_at   timestamp NOT NULL,
    paid_at     timestamptz
);
CREATE TABLE {prefix}order_lines (
    order_id    bigint NOT NULL,
    line        int NOT NULL,
    sku         text NOT NULL,
    qty         int NOT NULL,
    price       numeric(9,3),
    PRIMARY KEY (order_id, line)
);
"""


class Workload:
    """A random workload of row changes over ``<prefix>customers|orders|order_lines``.

    Every step is one PostgreSQL transaction; :attr:`changes` counts the rows it inserted, updated
    and deleted (an update of a key counts once). The steps cover inserts (customers, some with a
    TOASTed bio of several KB), multi-table transactions (an order with its lines; deleting an
    order with its lines), updates that leave a TOASTed bio unchanged, updates of the bio itself,
    updates of a primary key (orders.id; order_lines.line, part of a two-column key), rows
    inserted and deleted in the same transaction and in consecutive ones (one writer batch), and
    a mid-stream ``ALTER TABLE ADD COLUMN`` (:meth:`add_columns`).
    """

    def __init__(self, url: str, prefix: str, seed: int) -> None:
        self.url = url
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.changes = 0
        self.steps = 0
        self.next_customer = 1
        self.next_order = 1
        self.customers: list[int] = []
        self.orders: dict[int, int] = {}  # order id -> number of lines
        self.columns_added = False
        self.conn = psycopg.connect(url, autocommit=False)
        self.t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def close(self) -> None:
        self.conn.close()

    @property
    def tables(self) -> list[str]:
        return [f"{self.prefix}{t}" for t in ("customers", "orders", "order_lines")]

    def create(self) -> None:
        self.conn.execute(schema_sql(self.prefix))  # type: ignore[arg-type]
        self.conn.commit()

    def _x(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = self.conn.execute(sql.replace("T_", self.prefix), params)  # type: ignore[arg-type]
        n = cur.rowcount
        self.changes += max(n, 0)
        return n

    def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self.conn.cursor() as cur:
            cur.executemany(sql.replace("T_", self.prefix), rows)  # type: ignore[arg-type]
        self.changes += len(rows)

    def _bio(self) -> str:
        # random letters do not compress: a bio of 3-6 KB is stored out of line (TOAST, EXTERNAL)
        n = self.rng.randint(3000, 6000)
        return "".join(self.rng.choices("abcdefghijklmnopqrstuvwxyz ", k=n))

    def _customer_row(self, cid: int) -> tuple[Any, ...]:
        bio = self._bio() if self.rng.random() < 0.3 else None
        balance = Decimal(self.rng.randint(-10_000, 1_000_000)) / 100
        created = self.t0 + dt.timedelta(
            seconds=self.rng.randint(0, 10**8), microseconds=self.rng.randint(0, 999_999)
        )
        return (cid, f"customer {cid}", bio, balance, created)

    # -- steps -------------------------------------------------------------------------------------

    def insert_customers(self, n: int) -> None:
        rows = []
        for _ in range(n):
            rows.append(self._customer_row(self.next_customer))
            self.customers.append(self.next_customer)
            self.next_customer += 1
        self._many(
            "INSERT INTO T_customers (id, name, bio, balance, created_at) VALUES (%s, %s, %s, %s, %s)", rows
        )

    def insert_orders(self, n: int) -> None:
        """Orders with their lines: one transaction over two tables."""
        orders, lines = [], []
        for _ in range(n):
            oid = self.next_order
            self.next_order += 1
            placed = dt.datetime(2026, 1, 1) + dt.timedelta(
                minutes=oid, microseconds=self.rng.randint(0, 999_999)
            )
            cust = self.rng.choice(self.customers) if self.customers else 0
            orders.append((oid, cust, Decimal(self.rng.randint(1, 9_999_999)) / 100, "new", placed))
            k = self.rng.randint(1, 4)
            for line in range(1, k + 1):
                price = Decimal(self.rng.randint(0, 99_999_999)) / 1000 if self.rng.random() < 0.8 else None
                lines.append((oid, line, f"sku-{self.rng.randint(1, 500)}", self.rng.randint(1, 9), price))
            self.orders[oid] = k
        self._many(
            "INSERT INTO T_orders (id, customer_id, amount, status, placed_at) VALUES (%s, %s, %s, %s, %s)",
            orders,
        )
        self._many("INSERT INTO T_order_lines VALUES (%s, %s, %s, %s, %s)", lines)

    def update_orders(self, n: int) -> None:
        ids = self.rng.sample(sorted(self.orders), min(n, len(self.orders)))
        if not ids:
            return
        self._x(
            "UPDATE T_orders SET status = CASE WHEN status = 'new' THEN 'paid' ELSE 'shipped' END, "
            "amount = amount + 1.25, paid_at = %s WHERE id = ANY(%s)",
            (self.t0 + dt.timedelta(seconds=self.rng.randint(0, 10**7)), ids),
        )
        self._x("UPDATE T_order_lines SET qty = qty + 1 WHERE order_id = ANY(%s)", (ids[: len(ids) // 2],))

    def update_customers_keep_bio(self, n: int) -> None:
        """Updates that do not touch the TOASTed bio: Debezium sends its placeholder."""
        ids = self.rng.sample(self.customers, min(n, len(self.customers)))
        self._x(
            "UPDATE T_customers SET balance = balance + 10, version = version + 1, name = %s || id WHERE id = ANY(%s)",
            (f"renamed-{self.steps}-", ids),
        )

    def update_bios(self, n: int) -> None:
        for cid in self.rng.sample(self.customers, min(n, len(self.customers))):
            bio = self._bio() if self.rng.random() < 0.8 else None
            self._x("UPDATE T_customers SET bio = %s, version = version + 1 WHERE id = %s", (bio, cid))

    def delete_orders(self, n: int) -> None:
        """An order and its lines deleted in one transaction."""
        ids = self.rng.sample(sorted(self.orders), min(n, len(self.orders)))
        if not ids:
            return
        self._x("DELETE FROM T_order_lines WHERE order_id = ANY(%s)", (ids,))
        self._x("DELETE FROM T_orders WHERE id = ANY(%s)", (ids,))
        for i in ids:
            del self.orders[i]

    def delete_customers(self, n: int) -> None:
        ids = self.rng.sample(self.customers, min(n, len(self.customers)))
        self._x("DELETE FROM T_customers WHERE id = ANY(%s)", (ids,))
        gone = set(ids)
        self.customers = [c for c in self.customers if c not in gone]

    def short_lived(self, n: int) -> None:
        """Rows inserted and deleted in the same transaction, and updated in between."""
        first = self.next_customer
        self.insert_customers(n)
        ids = list(range(first, self.next_customer))
        self._x("UPDATE T_customers SET version = version + 1 WHERE id = ANY(%s)", (ids,))
        self._x("DELETE FROM T_customers WHERE id = ANY(%s)", (ids,))
        gone = set(ids)
        self.customers = [c for c in self.customers if c not in gone]

    def key_updates(self, n: int) -> None:
        """Primary-key updates: an order moves to a new id (its lines follow), and lines renumber."""
        ids = self.rng.sample(sorted(self.orders), min(n, len(self.orders)))
        for oid in ids:
            new = self.next_order
            self.next_order += 1
            # lines first (no foreign key); both rows' keys change
            self._x("UPDATE T_order_lines SET order_id = %s WHERE order_id = %s", (new, oid))
            self._x("UPDATE T_orders SET id = %s WHERE id = %s", (new, oid))
            self.orders[new] = self.orders.pop(oid)
            # a composite key changes in one of its two columns
            self._x("UPDATE T_order_lines SET line = line + 100 WHERE order_id = %s AND line = 1", (new,))

    def add_columns(self) -> None:
        """The mid-stream schema change: a new column in two tables, then values in it."""
        self.conn.execute(f"ALTER TABLE {self.prefix}customers ADD COLUMN tier text")  # type: ignore[arg-type]
        self.conn.execute(f"ALTER TABLE {self.prefix}orders ADD COLUMN note varchar(40)")  # type: ignore[arg-type]
        self.conn.commit()
        self.columns_added = True

    def fill_new_columns(self, n: int) -> None:
        ids = self.rng.sample(self.customers, min(n, len(self.customers)))
        self._x(
            "UPDATE T_customers SET tier = CASE WHEN id %% 2 = 0 THEN 'gold' ELSE 'silver' END WHERE id = ANY(%s)",
            (ids,),
        )
        oids = self.rng.sample(sorted(self.orders), min(n, len(self.orders)))
        self._x("UPDATE T_orders SET note = 'note ' || id WHERE id = ANY(%s)", (oids,))

    def step(self) -> None:
        """One random transaction."""
        self.steps += 1
        r = self.rng.random()
        if len(self.customers) < 50 or r < 0.18:
            self.insert_customers(self.rng.randint(10, 60))
        elif r < 0.45:
            self.insert_orders(self.rng.randint(10, 40))
        elif r < 0.58:
            self.update_orders(self.rng.randint(5, 40))
        elif r < 0.68:
            self.update_customers_keep_bio(self.rng.randint(5, 40))
        elif r < 0.72:
            self.update_bios(self.rng.randint(1, 5))
        elif r < 0.80:
            self.delete_orders(self.rng.randint(1, 10))
        elif r < 0.84:
            self.delete_customers(self.rng.randint(1, 5))
        elif r < 0.90:
            self.short_lived(self.rng.randint(1, 8))
        elif r < 0.95:
            self.key_updates(self.rng.randint(1, 4))
        elif self.columns_added:
            self.fill_new_columns(self.rng.randint(5, 30))
        else:
            self.insert_orders(self.rng.randint(5, 20))
        self.conn.commit()
        if self.rng.random() < 0.1:
            # a row inserted in one transaction and deleted in the next: one writer batch
            self.insert_customers(1)
            self.conn.commit()
            self._x("DELETE FROM T_customers WHERE id = %s", (self.next_customer - 1,))
            self.customers.pop()
            self.conn.commit()

    def run(
        self,
        changes: int,
        seconds: float = 0.0,
        alter_at: float = 0.5,
        stop: threading.Event | None = None,
        alter_after_s: float | None = None,
    ) -> None:
        """Steps until ``changes`` row changes were made (or ``stop`` is set), spread over about
        ``seconds``; the schema change happens once ``alter_at`` of them were made (or after
        ``alter_after_s`` seconds)."""
        start = time.monotonic()
        target = self.changes + changes
        alter = self.changes + int(changes * alter_at)
        while self.changes < target and not (stop is not None and stop.is_set()):
            if not self.columns_added and (
                self.changes >= alter if alter_after_s is None else time.monotonic() - start >= alter_after_s
            ):
                self.add_columns()
            self.step()
            if seconds:
                done = 1 - (target - self.changes) / changes
                ahead = start + done * seconds - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)


class BackgroundWorkload:
    """:meth:`Workload.run` in a thread; :meth:`join` re-raises its error."""

    def __init__(
        self,
        workload: Workload,
        changes: int,
        seconds: float,
        alter_at: float = 0.5,
        alter_after_s: float | None = None,
    ) -> None:
        self.workload = workload
        self.error: BaseException | None = None
        self.stop = threading.Event()

        def target() -> None:
            try:
                workload.run(changes, seconds, alter_at, self.stop, alter_after_s)
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=target, name="workload", daemon=True)
        self.thread.start()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def join(self, timeout_s: float = 600) -> None:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.stop.set()
            self.thread.join(30)
            raise AssertionError("the workload did not finish")
        if self.error is not None:
            raise self.error


# ---------------------------------------------------------------------------------------------- reading


def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        # timestamp without time zone lands as the UTC wall clock; both sides compare as UTC instants
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
    return value


def key_columns(url: str, table: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (table,),
        ).fetchall()
    return [r[0] for r in rows]


Rows = dict[tuple[Any, ...], dict[str, Any]]


def postgres_rows(url: str, table: str) -> tuple[list[str], list[str], Rows]:
    """(columns, key columns, rows by key) of the PostgreSQL table: what the lake must hold."""
    keys = key_columns(url, table)
    with psycopg.connect(url) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        cur = conn.execute(f"SELECT * FROM {table}")  # type: ignore[arg-type]
        cols = [d.name for d in cur.description or ()]
        out: Rows = {}
        for row in cur.fetchall():
            rec = {c: _norm(v) for c, v in zip(cols, row, strict=True)}
            out[tuple(rec[k] for k in keys)] = rec
    return cols, keys, out


def rows_by_key(data: pa.Table | None, columns: Sequence[str], keys: Sequence[str]) -> Rows:
    """Rows of a reader's result by key; a key seen twice fails (a duplicate record key)."""
    if data is None:
        return {}
    present = [c for c in columns if c in data.column_names]
    out: Rows = {}
    for rec in data.select(present).to_pylist():
        full = {c: _norm(rec.get(c)) for c in columns}
        key = tuple(full[k] for k in keys)
        assert key not in out, f"duplicate record key {key}"
        out[key] = full
    if "_hoodie_record_key" in data.column_names:
        record_keys = data.column("_hoodie_record_key").to_pylist()
        assert len(record_keys) == len(set(record_keys)), "duplicate _hoodie_record_key"
    return out


def diff(expected: Mapping[Any, Any], actual: Mapping[Any, Any]) -> str:
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    wrong = [k for k in expected if k in actual and expected[k] != actual[k]]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing (e.g. {missing[:3]})")
    if extra:
        parts.append(f"{len(extra)} extra (e.g. {extra[:3]})")
    if wrong:
        k = wrong[0]
        cols = [c for c in expected[k] if expected[k][c] != actual[k].get(c)]
        shown = {c: (repr(expected[k][c])[:60], repr(actual[k].get(c))[:60]) for c in cols}
        parts.append(f"{len(wrong)} differ (e.g. key {k}: {shown})")
    return "; ".join(parts) or "equal"


def inlet_read(path: Path | str) -> pa.Table | None:
    """The table read by Inlet (an s3:// URI with the AWS_* settings of this process); None: no table."""
    try:
        return HudiTable.open(str(path)).read()
    except TableNotFoundError:
        return None


def hudi_rs_read(path: Path | str, version: str) -> pa.Table | None:
    from hudi import HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(str(path)).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    if is_s3_uri(str(path)):  # hudi-rs reads no AWS_* settings of its own: storage options
        builder = builder.with_storage_options(S3Options.from_env().hudi_rs_options())
    table = builder.build()
    batches = table.read(HudiReadOptions())
    if not batches:
        return None
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


def lake_equals(stack: RunningStack, table: str) -> str:
    """ "equal" when Inlet's reader returns exactly the PostgreSQL table, else what differs."""
    cols, keys, expected = postgres_rows(stack.url, table)
    try:
        got = rows_by_key(inlet_read(stack.table_uri(table)), cols, keys)
    except AssertionError:
        raise
    except Exception as e:  # a table being created
        return f"unreadable: {e}"
    return diff(expected, got)


def wait_for_lake(stack: RunningStack, tables: Sequence[str], timeout_s: float) -> float:
    """Poll until every table equals PostgreSQL by Inlet's reader; returns the seconds it took."""
    start = time.monotonic()
    states: dict[str, str] = {}
    while True:
        for t in tables:
            if states.get(t) != "equal":
                states[t] = lake_equals(stack, t)
        if all(s == "equal" for s in states.values()):
            # once more for all of them together (nothing moved on meanwhile)
            states = {t: lake_equals(stack, t) for t in tables}
            if all(s == "equal" for s in states.values()):
                return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"the lake did not catch up in {timeout_s:.0f} s: {states}")
        time.sleep(3.0)


def compare_inlet(stack: RunningStack, table: str) -> int:
    """The Hudi table read by Inlet equals PostgreSQL exactly; returns the row count."""
    cols, keys, expected = postgres_rows(stack.url, table)
    got = rows_by_key(inlet_read(stack.table_uri(table)), cols, keys)
    assert got == expected, f"{table} (inlet): {diff(expected, got)}"
    return len(expected)


# hudi-rs 0.5.0's file-group reader 2 stops with this error on a file group without a base file
# where a row was inserted, then updated with its TOASTed value unchanged once before and once after
# a column was added (three log blocks, the last with one more column; reproduced with three local
# writes). Inlet's reader and, after a compaction, both hudi-rs readers read the same table exactly.
HUDI_RS_TOAST_REFUSAL = "FILL_UNAVAILABLE sentinel leaked into a log-only insert"


def compare_hudi_rs(
    stack: RunningStack,
    table: str,
    allow_placeholder: str | None = None,
    versions: Sequence[str] = READER_VERSIONS,
    known_refusal: str | None = None,
) -> int:
    """The table read by hudi-rs (both file-group readers) equals PostgreSQL exactly.

    hudi-rs does not apply Debezium's TOAST partial update (``hoodie.table.partial.update.mode``):
    a row whose newest change is still in a log file and left a TOASTed column unchanged comes
    back with Debezium's placeholder in that column. ``allow_placeholder`` names such a column:
    there, and only there, the placeholder is accepted in place of PostgreSQL's value (every other
    column of the row must still be equal); returns how many rows showed it.

    hudi-rs 0.5's file-group reader 1 takes a file group's schema from its base file: it cannot read
    a file group that has only logs (checked to fail with its known error, as in
    tests/interop/test_mor_interop.py) and drops columns added after the base file was written, so
    tests compare it once a compaction has rewritten every file group (``versions``).

    ``known_refusal``: part of an error message with which hudi-rs may refuse to read the table (a
    limit of hudi-rs, not a wrong answer); a read that fails with it is skipped, any other error
    fails the comparison, and a read that succeeds must still be exactly equal."""
    cols, keys, expected = postgres_rows(stack.url, table)
    shown = 0
    log_only = log_only_file_groups(stack.table_uri(table))
    if log_only:
        with pytest.raises(Exception, match='Unable to get field named "_event_lsn"'):
            hudi_rs_read(stack.table_uri(table), "1")
    for version in versions:
        if version == "1" and log_only:
            with pytest.raises(Exception, match='Unable to get field named "_event_lsn"'):
                hudi_rs_read(stack.table_uri(table), version)
            continue
        try:
            read = hudi_rs_read(stack.table_uri(table), version)
        except Exception as e:
            if known_refusal is None or known_refusal not in str(e):
                raise
            print(f"{table}: hudi-rs file group reader {version} refused the table: {known_refusal}")
            continue
        got = rows_by_key(read, cols, keys)
        if allow_placeholder is not None:
            n = 0
            for k, rec in got.items():
                if rec.get(allow_placeholder) == PLACEHOLDER and k in expected:
                    assert expected[k][allow_placeholder] not in (None, PLACEHOLDER), (
                        f"{table}: placeholder for a row whose {allow_placeholder} is {expected[k][allow_placeholder]!r}"
                    )
                    rec[allow_placeholder] = expected[k][allow_placeholder]
                    n += 1
            shown = max(shown, n)
        assert got == expected, f"{table} (hudi-rs, file group reader {version}): {diff(expected, got)}"
    return shown


def latest_slices(path: Path | str) -> list[Any]:
    return list(HudiTable.open(str(path)).file_system_view().latest_file_slices())


def log_only_file_groups(path: Path | str) -> list[str]:
    """File groups whose latest slice has logs but no base file."""
    return [fs.file_id for fs in latest_slices(path) if fs.base_file is None]


def slices_with_logs(path: Path | str) -> list[str]:
    """File groups whose latest slice still has log files (none right after a full compaction)."""
    return [fs.file_id for fs in latest_slices(path) if fs.log_files]


def compact_now(stack: RunningStack, table: str) -> str | None:
    """Schedule and run a compaction of every log through the coordinator (as the writer does)."""
    from inlet.core.storage import Storage
    from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

    path = stack.table_uri(table)
    client = CoordinatorClient(stack.coordinator, timeout_s=60)
    try:
        protocol = GrpcCommitProtocol(client, stack.table_id(table), Storage(path))
        t = HudiTable.open(path, commit_protocol=protocol)
        options = {"hoodie.compact.inline.max.delta.commits": "1"}
        instant = t.schedule_compaction(options)
        if instant is not None:
            t.run_compaction(instant, options)
        protocol.close()
        return instant
    finally:
        client.close()


def start_tables(stack: RunningStack, prefix: str, seed: int) -> Workload:
    """Create the three tables, put a few rows in each and wait until the lake has them (the
    pipeline finds new tables by topic pattern, which takes a few seconds)."""
    w = Workload(stack.url, prefix, seed)
    w.create()
    w.insert_customers(5)
    w.insert_orders(5)
    w.conn.commit()
    wait_for_lake(stack, w.tables, timeout_s=120)
    return w


# ---------------------------------------------------------------------------------------------- offsets


def commit_offsets(path: Path | str) -> list[tuple[str, dict[int, tuple[int, int]], dict[int, int], str]]:
    """(instant, ranges, checkpoint, topic) of each completed write commit with a Kafka checkpoint,
    in completion order."""
    t = HudiTable.open(str(path))
    tl = t.timeline
    out = []
    for i in sorted(
        tl.completed(("commit", "deltacommit")), key=lambda i: (i.completion_time or i.time, i.time)
    ):
        extra = tl.commit_metadata(i).extra_metadata
        if ckpt.CHECKPOINT_KEY not in extra:
            continue
        topic, ranges = ckpt.parse_ranges(extra[ckpt.RANGES_KEY])
        ck_topic, positions = ckpt.parse_checkpoint(extra[ckpt.CHECKPOINT_KEY])
        assert ck_topic == topic
        out.append((i.time, ranges, positions, topic))
    return out


def check_offsets(path: Path | str) -> dict[int, int]:
    """No two commits consumed the same offset; every commit's checkpoint is the end of its ranges
    and never moves a partition backwards. Returns {partition: offsets consumed by commits}."""
    commits = commit_offsets(path)
    assert commits, f"no commit with a Kafka checkpoint in {path}"
    spans: dict[int, list[tuple[int, int, str]]] = {}
    last: dict[int, int] = {}
    for instant, ranges, positions, _topic in commits:
        for p, (a, b) in ranges.items():
            assert a < b, f"{instant}: empty range {p}:{a}-{b}"
            assert positions.get(p) == b, f"{instant}: checkpoint {positions} does not end range {p}:{a}-{b}"
            spans.setdefault(p, []).append((a, b, instant))
        for p, off in positions.items():
            assert off >= last.get(p, 0), (
                f"{instant}: checkpoint of partition {p} moved back {last[p]} -> {off}"
            )
            last[p] = off
    consumed = {}
    for p, items in spans.items():
        items.sort()
        for (a1, b1, i1), (a2, b2, i2) in itertools.pairwise(items):
            assert b1 <= a2, f"partition {p}: commits {i1} [{a1},{b1}) and {i2} [{a2},{b2}) overlap"
        consumed[p] = sum(b - a for a, b, _ in items)
    return consumed


def final_checks(stack: RunningStack, tables: Sequence[str]) -> None:
    for t in tables:
        compare_inlet(stack, t)
        check_offsets(stack.table_uri(t))
