"""The coordinator's state in PostgreSQL (psycopg 3 + psycopg_pool).

Tables (created or migrated at startup, versions recorded in ``schema_version``):

- ``coordinator_tables``: registered tables with their settings, the last instant time issued,
  the last outbox sequence and the last fencing token. Its row is the per-table lock: every
  operation that issues a time, completes an instant or grants a lease holds
  ``SELECT ... FOR UPDATE`` on it for its transaction, so coordinator replicas serialise there.
- ``instants``: every instant issued, its state, owner, request ids (idempotency), completion
  time, planned file groups, rollback links and last heartbeat.
- ``table_locks``: leased table locks with fencing tokens, one per (table, lock name).
- ``outbox``: one row per completed instant (the serialized ``CommitEvent``), inserted in the
  transaction that records the completion; a publisher delivers and marks them.

Times that expire (heartbeats, leases) use the database clock (``clock_timestamp()``) so that
replicas on different machines agree.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from inlet.services.coordinator.errors import Unavailable
from inlet.services.coordinator.events import TableInfo

log = logging.getLogger("inlet.coordinator.store")

PENDING_STATES = ("REQUESTED", "INFLIGHT")
ROLLED_BACK = "ROLLED_BACK"
COMPLETED = "COMPLETED"
_MIGRATION_LOCK_KEY = 0x1A1E7C00  # pg_advisory_xact_lock key that serialises migrations

OUTBOX_DDL = """
CREATE TABLE IF NOT EXISTS outbox (
  id BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL UNIQUE,        -- "<table_id>/<instant_time>"
  table_id TEXT NOT NULL,
  sequence BIGINT NOT NULL,             -- per-table, +1 per completed instant
  payload BYTEA NOT NULL,               -- serialized inlet.proto.events.v1.CommitEvent
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at TIMESTAMPTZ,
  attempts INT NOT NULL DEFAULT 0,
  last_error TEXT
)
"""

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """
            CREATE TABLE IF NOT EXISTS coordinator_tables (
              table_id TEXT PRIMARY KEY,
              base_path TEXT NOT NULL UNIQUE,
              table_name TEXT NOT NULL,
              table_type TEXT NOT NULL,
              concurrency_mode TEXT NOT NULL,
              heartbeat_timeout_ms BIGINT NOT NULL,
              layout_version INT NOT NULL,
              timeline_path TEXT NOT NULL,
              last_instant_time TEXT,
              last_sequence BIGINT NOT NULL DEFAULT 0,
              last_fencing_token BIGINT NOT NULL DEFAULT 0,
              registered_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """,
            """
            CREATE TABLE IF NOT EXISTS instants (
              table_id TEXT NOT NULL REFERENCES coordinator_tables (table_id) ON DELETE CASCADE,
              instant_time TEXT NOT NULL,
              action TEXT NOT NULL,
              state TEXT NOT NULL,
              writer_id TEXT NOT NULL DEFAULT '',
              begin_request_id TEXT,
              complete_request_id TEXT,
              completion_time TEXT,
              completed_action TEXT,
              planned_file_groups JSONB NOT NULL DEFAULT '[]',
              operation_type TEXT,
              rollback_target TEXT,
              rolled_back_by TEXT,
              heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
              created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
              updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
              PRIMARY KEY (table_id, instant_time)
            )
            """,
            """
            CREATE UNIQUE INDEX IF NOT EXISTS instants_begin_request
              ON instants (table_id, begin_request_id) WHERE begin_request_id IS NOT NULL
            """,
            """
            CREATE INDEX IF NOT EXISTS instants_pending
              ON instants (table_id) WHERE state IN ('REQUESTED', 'INFLIGHT')
            """,
            """
            CREATE TABLE IF NOT EXISTS table_locks (
              table_id TEXT PRIMARY KEY REFERENCES coordinator_tables (table_id) ON DELETE CASCADE,
              lock_id TEXT NOT NULL,
              owner TEXT NOT NULL,
              fencing_token BIGINT NOT NULL,
              acquired_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
              expires_at TIMESTAMPTZ NOT NULL
            )
            """,
            OUTBOX_DDL,
        ),
    ),
    (
        2,
        (
            # named locks: one lease per (table, lock name); "" is the table's write lock
            "ALTER TABLE table_locks ADD COLUMN IF NOT EXISTS lock_name TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE table_locks DROP CONSTRAINT IF EXISTS table_locks_pkey",
            "ALTER TABLE table_locks ADD PRIMARY KEY (table_id, lock_name)",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

# written out (not a parameter) so that the partial index instants_pending serves it
_PENDING = "state IN ('REQUESTED', 'INFLIGHT')"
_AGE_MS = "(EXTRACT(EPOCH FROM clock_timestamp() - {col}) * 1000)::bigint"
_INSTANT_COLUMNS = (
    "table_id, instant_time, action, state, writer_id, begin_request_id, complete_request_id, "
    "completion_time, completed_action, planned_file_groups, operation_type, rollback_target, "
    f"rolled_back_by, {_AGE_MS.format(col='heartbeat_at')} AS heartbeat_age_ms, "
    f"{_AGE_MS.format(col='created_at')} AS age_ms"
)


@dataclass(frozen=True)
class TableRow:
    table_id: str
    base_path: str
    table_name: str
    table_type: str
    concurrency_mode: str  # SINGLE_WRITER | OPTIMISTIC | NON_BLOCKING
    heartbeat_timeout_ms: int
    layout_version: int
    timeline_path: str
    last_instant_time: str | None
    last_sequence: int
    last_fencing_token: int

    @property
    def info(self) -> TableInfo:
        return TableInfo(self.table_id, self.table_name, self.base_path, self.table_type)


@dataclass(frozen=True)
class InstantRow:
    table_id: str
    instant_time: str
    action: str
    state: str  # REQUESTED | INFLIGHT | COMPLETED | ROLLED_BACK
    writer_id: str
    begin_request_id: str | None
    complete_request_id: str | None
    completion_time: str | None
    completed_action: str | None
    planned_file_groups: frozenset[tuple[str, str]]
    operation_type: str | None
    rollback_target: str | None
    rolled_back_by: str | None
    heartbeat_age_ms: int
    age_ms: int  # since the coordinator issued it (BeginInstant)

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES


@dataclass(frozen=True)
class LeaseRow:
    table_id: str
    lock_id: str
    owner: str
    fencing_token: int
    expires_at_ms: int
    remaining_ms: int
    lock_name: str = ""

    @property
    def expired(self) -> bool:
        return self.remaining_ms <= 0


def _table(row: dict[str, Any]) -> TableRow:
    return TableRow(**{k: row[k] for k in TableRow.__dataclass_fields__})


def _instant(row: dict[str, Any]) -> InstantRow:
    groups = frozenset((str(p), str(f)) for p, f in (row["planned_file_groups"] or []))
    values = {k: row[k] for k in InstantRow.__dataclass_fields__ if k != "planned_file_groups"}
    return InstantRow(planned_file_groups=groups, **values)


class Tx:
    """One database transaction (see :meth:`Store.transaction`), in psycopg's pipeline mode:
    a statement whose result is not read is sent with the next one that is (or with COMMIT), so
    it costs no round trip of its own."""

    def __init__(self, cur: psycopg.Cursor[dict[str, Any]], pipeline: psycopg.Pipeline | None = None) -> None:
        self.cur = cur
        self.pipeline = pipeline
        # pending instants read in this transaction, by table; dropped by every write to instants
        self._pending: dict[str, list[InstantRow]] = {}
        # the outbox sequence of each table whose row this transaction locked
        self._sequences: dict[str, int] = {}
        # rows of an instants query sent behind a table's lock (:meth:`lock_table`), not read yet
        self._prefetched: dict[tuple[str, str, str], list[dict[str, Any]]] = {}

    def _changed(self) -> None:
        """Forget what was read of instants (a write to them follows)."""
        self._pending.clear()
        self._prefetched.clear()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A block rolled back on its own if it raises (the transaction goes on), with what this
        transaction remembers of its reads. A database error is not caught here: in pipeline
        mode it aborts what follows until the transaction ends, so the transaction is lost."""
        sequences = dict(self._sequences)
        self.cur.execute("SAVEPOINT call")
        try:
            yield
        except psycopg.Error:
            raise
        except BaseException:
            self.cur.execute("ROLLBACK TO SAVEPOINT call")
            self.cur.execute("RELEASE SAVEPOINT call")
            self._sequences = sequences
            self._changed()
            raise
        self.cur.execute("RELEASE SAVEPOINT call")

    def _reader(self) -> psycopg.Cursor[dict[str, Any]]:
        """A cursor of its own for a statement whose result is read. In pipeline mode the results of
        statements sent on one cursor queue up on it, so a fetch from :attr:`cur` could return the
        rows of an earlier statement whose result nobody read (seen: the advisory lock's row where
        the schema version was expected)."""
        return self.cur.connection.cursor(row_factory=dict_row)

    def _one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> dict[str, Any] | None:
        with self._reader() as cur:
            cur.execute(sql, params)
            return cur.fetchone()

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._reader() as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def _count(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run a write and return the number of rows it changed (waits for its result)."""
        with self._reader() as cur:
            cur.execute(sql, params)
            if self.pipeline is not None:
                self.pipeline.sync()
            return cur.rowcount

    def now_ms(self) -> int:
        row = self._one("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint AS ms")
        assert row is not None
        return int(row["ms"])

    # ------------------------------------------------------------------ tables

    def table(self, table_id: str, lock: bool = False) -> TableRow | None:
        sql = "SELECT * FROM coordinator_tables WHERE table_id = %s" + (" FOR UPDATE" if lock else "")
        row = self._one(sql, (table_id,))
        if row is None:
            return None
        table = _table(row)
        if lock:  # only this transaction changes it now (see set_completed)
            self._sequences[table_id] = table.last_sequence
        return table

    def lock_table(self, table_id: str, column: str, value: str) -> TableRow | None:
        """:meth:`table` with ``lock``, and, in the same round trip, the instant whose ``column``
        is ``value`` with the table's pending instants (kept for :meth:`instant_by_begin_request`
        or :meth:`instant_and_pending`). The read is sent right behind the lock, so it runs once
        the lock is granted, on a snapshot of its own (read committed: one per statement)."""
        with self._reader() as lock, self._reader() as instants:
            lock.execute("SELECT * FROM coordinator_tables WHERE table_id = %s FOR UPDATE", (table_id,))
            instants.execute(self._WITH_PENDING.format(column=column, pending=_PENDING), (table_id, value))
            row = lock.fetchone()
            rows = instants.fetchall()
        if row is None:
            return None
        table = _table(row)
        self._sequences[table_id] = table.last_sequence
        self._changed()
        self._prefetched[(table_id, column, value)] = rows
        return table

    def table_by_path(self, base_path: str) -> TableRow | None:
        row = self._one("SELECT * FROM coordinator_tables WHERE base_path = %s", (base_path,))
        return _table(row) if row else None

    def tables(self) -> list[TableRow]:
        return [_table(r) for r in self._all("SELECT * FROM coordinator_tables ORDER BY table_id")]

    def insert_table(self, row: TableRow) -> bool:
        """Insert a table; False if its id or base path is taken (by a concurrent registration)."""
        return (
            self._count(
                """
            INSERT INTO coordinator_tables (table_id, base_path, table_name, table_type, concurrency_mode,
              heartbeat_timeout_ms, layout_version, timeline_path)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING
            """,
                (
                    row.table_id,
                    row.base_path,
                    row.table_name,
                    row.table_type,
                    row.concurrency_mode,
                    row.heartbeat_timeout_ms,
                    row.layout_version,
                    row.timeline_path,
                ),
            )
            == 1
        )

    # ------------------------------------------------------------------ instants

    def instant(self, table_id: str, time: str, lock: bool = False) -> InstantRow | None:
        sql = f"SELECT {_INSTANT_COLUMNS} FROM instants WHERE table_id = %s AND instant_time = %s"
        row = self._one(sql + (" FOR UPDATE" if lock else ""), (table_id, time))
        return _instant(row) if row else None

    def instant_by_begin_request(self, table_id: str, request_id: str) -> InstantRow | None:
        """The instant issued for ``request_id``; the table's pending instants come with it (one
        query), kept for this transaction."""
        return self._with_pending(table_id, "begin_request_id", request_id)

    def pending_instants(self, table_id: str) -> list[InstantRow]:
        if table_id not in self._pending:
            rows = self._all(
                f"SELECT {_INSTANT_COLUMNS} FROM instants WHERE table_id = %s AND {_PENDING} "
                "ORDER BY instant_time",
                (table_id,),
            )
            self._pending[table_id] = [_instant(r) for r in rows]
        return list(self._pending[table_id])

    def instant_and_pending(self, table_id: str, time: str) -> InstantRow | None:
        """:meth:`instant` and :meth:`pending_instants` (kept for this transaction) in one query.
        Takes no row lock on the instant: its state only changes under the table's row lock."""
        return self._with_pending(table_id, "instant_time", time)

    _WITH_PENDING = (
        f"SELECT {_INSTANT_COLUMNS} FROM instants WHERE table_id = %s "
        "AND ({column} = %s OR {pending}) ORDER BY instant_time"
    )

    def _with_pending(self, table_id: str, column: str, value: str) -> InstantRow | None:
        """The instant whose ``column`` is ``value``, and the table's pending instants (kept for
        this transaction), in one query (or read with the table's lock, :meth:`lock_table`)."""
        found = self._prefetched.pop((table_id, column, value), None)
        if found is None:
            found = self._all(self._WITH_PENDING.format(column=column, pending=_PENDING), (table_id, value))
        rows = [_instant(r) for r in found]
        self._pending[table_id] = [r for r in rows if r.pending]
        return next((r for r in rows if getattr(r, column) == value), None)

    def instants(self, table_id: str) -> list[InstantRow]:
        rows = self._all(
            f"SELECT {_INSTANT_COLUMNS} FROM instants WHERE table_id = %s ORDER BY instant_time", (table_id,)
        )
        return [_instant(r) for r in rows]

    def insert_instant(
        self,
        table_id: str,
        time: str,
        action: str,
        state: str,
        writer_id: str = "",
        begin_request_id: str | None = None,
        rollback_target: str | None = None,
    ) -> None:
        self._changed()
        self.cur.execute(
            """
            INSERT INTO instants (table_id, instant_time, action, state, writer_id, begin_request_id,
              rollback_target)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            """,
            (table_id, time, action, state, writer_id, begin_request_id, rollback_target),
        )

    def issue_instant(
        self,
        table_id: str,
        time: str,
        action: str,
        writer_id: str,
        begin_request_id: str | None,
        rollback_target: str | None,
    ) -> None:
        """Insert a new requested instant and make its time the table's last issued one (one
        statement: one round trip while the table's row is locked)."""
        self._changed()
        self.cur.execute(
            """
            WITH issued AS (
              INSERT INTO instants (table_id, instant_time, action, state, writer_id, begin_request_id,
                rollback_target)
              VALUES (%(table)s, %(time)s, %(action)s, 'REQUESTED', %(writer)s, %(request)s, %(target)s)
            )
            UPDATE coordinator_tables SET last_instant_time = %(time)s
            WHERE table_id = %(table)s AND (last_instant_time IS NULL OR last_instant_time < %(time)s)
            """,
            {
                "table": table_id,
                "time": time,
                "action": action,
                "writer": writer_id,
                "request": begin_request_id,
                "target": rollback_target,
            },
        )

    def set_inflight(
        self, table_id: str, time: str, planned: set[tuple[str, str]] | None, operation_type: str | None
    ) -> None:
        self._changed()
        self.cur.execute(
            """
            UPDATE instants SET state = 'INFLIGHT', heartbeat_at = clock_timestamp(), updated_at = clock_timestamp(),
              planned_file_groups = COALESCE(%s::jsonb, planned_file_groups),
              operation_type = COALESCE(%s, operation_type)
            WHERE table_id = %s AND instant_time = %s
            """,
            (
                json.dumps(sorted([p, f] for p, f in planned)) if planned is not None else None,
                operation_type,
                table_id,
                time,
            ),
        )

    def set_completed(
        self,
        table_id: str,
        time: str,
        completion_time: str,
        completed_action: str,
        request_id: str | None,
        operation_type: str | None,
        event_id: str,
        event: Callable[[int], bytes],
    ) -> int | None:
        """Record a completion, make its completion time the table's last issued time and, unless
        the completion's outbox row ``event_id`` exists, take the table's next outbox sequence and
        insert the row, ``event(sequence)``. Returns that sequence (None if the row existed).

        One statement, one round trip under the row lock: the table's row must be locked in this
        transaction (:meth:`table` with ``lock``), so its next sequence is known beforehand; the
        statement checks it took that one (else nothing is queued and this raises)."""
        expected = self._sequences.get(table_id)
        if expected is None:
            raise RuntimeError(f"completing an instant of {table_id} without holding its row lock")
        self._changed()
        row = self._one(
            """
            WITH done AS (
              UPDATE instants SET state = 'COMPLETED', completion_time = %(completion)s,
                completed_action = %(action)s, complete_request_id = COALESCE(%(request)s, complete_request_id),
                operation_type = COALESCE(%(operation)s, operation_type), updated_at = clock_timestamp()
              WHERE table_id = %(table)s AND instant_time = %(time)s
            ), announced AS (
              SELECT EXISTS (SELECT 1 FROM outbox WHERE event_id = %(event)s) AS present
            ), taken AS (
              UPDATE coordinator_tables SET
                last_instant_time = CASE WHEN last_instant_time IS NULL OR last_instant_time < %(completion)s
                  THEN %(completion)s ELSE last_instant_time END,
                last_sequence = last_sequence + CASE WHEN announced.present THEN 0 ELSE 1 END
              FROM announced WHERE table_id = %(table)s
              RETURNING last_sequence, announced.present
            ), queued AS (
              INSERT INTO outbox (event_id, table_id, sequence, payload)
              SELECT %(event)s, %(table)s, last_sequence, %(payload)s FROM taken
              WHERE NOT present AND last_sequence = %(sequence)s
              RETURNING sequence
            )
            SELECT taken.last_sequence, taken.present, EXISTS (SELECT 1 FROM queued) AS queued FROM taken
            """,
            {
                "completion": completion_time,
                "action": completed_action,
                "request": request_id,
                "operation": operation_type,
                "table": table_id,
                "time": time,
                "event": event_id,
                "sequence": expected + 1,
                "payload": event(expected + 1),
            },
        )
        if row is None:
            raise RuntimeError(f"table {table_id} vanished while completing {time}")
        self._sequences[table_id] = int(row["last_sequence"])
        if row["present"]:
            return None
        if not row["queued"]:
            raise RuntimeError(
                f"outbox sequence of {table_id} moved under its row lock (expected {expected + 1}, "
                f"got {row['last_sequence']})"
            )
        return expected + 1

    def set_rolled_back(self, table_id: str, time: str, by: str | None) -> None:
        self._changed()
        self.cur.execute(
            """
            UPDATE instants SET state = 'ROLLED_BACK', rolled_back_by = COALESCE(%s, rolled_back_by),
              updated_at = clock_timestamp()
            WHERE table_id = %s AND instant_time = %s AND state <> 'COMPLETED'
            """,
            (by, table_id, time),
        )

    def set_rolling_back(self, table_id: str, time: str, by: str) -> None:
        self._changed()
        self.cur.execute(
            "UPDATE instants SET rolled_back_by = %s, updated_at = clock_timestamp() "
            "WHERE table_id = %s AND instant_time = %s",
            (by, table_id, time),
        )

    def claim(self, table_id: str, time: str, writer_id: str) -> None:
        """Make ``writer_id`` the owner of an instant and refresh its heartbeat (a takeover)."""
        self._changed()
        self.cur.execute(
            "UPDATE instants SET writer_id = %s, heartbeat_at = clock_timestamp() "
            "WHERE table_id = %s AND instant_time = %s",
            (writer_id, table_id, time),
        )

    def heartbeat(self, table_id: str, time: str) -> bool:
        """Refresh the heartbeat of a pending instant that is not being rolled back."""
        self._changed()
        return (
            self._count(
                """
            UPDATE instants SET heartbeat_at = clock_timestamp()
            WHERE table_id = %s AND instant_time = %s AND state IN ('REQUESTED', 'INFLIGHT')
              AND rolled_back_by IS NULL
            """,
                (table_id, time),
            )
            == 1
        )

    def expired_instants(self, write_actions: Sequence[str], rollback_action: str) -> list[tuple[str, str]]:
        """(table id, instant time) of pending writes not being rolled back, and pending rollbacks,
        whose heartbeat timeout has passed."""
        rows = self._all(
            """
            SELECT i.table_id, i.instant_time FROM instants i JOIN coordinator_tables t USING (table_id)
            WHERE i.state IN ('REQUESTED', 'INFLIGHT')
              AND (i.action = %s OR (i.action = ANY(%s) AND i.rolled_back_by IS NULL))
              AND i.heartbeat_at + t.heartbeat_timeout_ms * interval '1 millisecond' < clock_timestamp()
            ORDER BY i.table_id, i.instant_time
            """,
            (rollback_action, list(write_actions)),
        )
        return [(r["table_id"], r["instant_time"]) for r in rows]

    def prune_instants(self, older_than_ms: int) -> int:
        """Forget completed and rolled-back instants last changed more than ``older_than_ms`` ago
        (their idempotency records; the timeline keeps the instants themselves)."""
        self._changed()
        return self._count(
            """
            DELETE FROM instants WHERE state IN ('COMPLETED', 'ROLLED_BACK')
              AND updated_at < clock_timestamp() - %s * interval '1 millisecond'
            """,
            (older_than_ms,),
        )

    # ------------------------------------------------------------------ outbox

    # ------------------------------------------------------------------ leases

    def lease(self, table_id: str, lock_name: str = "") -> LeaseRow | None:
        return self._lease("table_id = %s AND lock_name = %s", (table_id, lock_name))

    def lease_by_id(self, table_id: str, lock_id: str) -> LeaseRow | None:
        return self._lease("table_id = %s AND lock_id = %s", (table_id, lock_id))

    def _lease(self, where: str, params: tuple[str, str]) -> LeaseRow | None:
        row = self._one(
            f"""
            SELECT table_id, lock_id, owner, fencing_token, lock_name,
              (EXTRACT(EPOCH FROM expires_at) * 1000)::bigint AS expires_at_ms,
              -{_AGE_MS.format(col="expires_at")} AS remaining_ms
            FROM table_locks WHERE {where}
            """,
            params,
        )
        return LeaseRow(**row) if row else None

    def grant_lease(
        self, table_id: str, lock_id: str, owner: str, lease_ms: int, lock_name: str = ""
    ) -> None:
        token_row = self._one(
            "UPDATE coordinator_tables SET last_fencing_token = last_fencing_token + 1 WHERE table_id = %s "
            "RETURNING last_fencing_token",
            (table_id,),
        )
        assert token_row is not None
        self.cur.execute(
            """
            INSERT INTO table_locks (table_id, lock_name, lock_id, owner, fencing_token, expires_at)
            VALUES (%s, %s, %s, %s, %s, clock_timestamp() + %s * interval '1 millisecond')
            ON CONFLICT (table_id, lock_name) DO UPDATE SET lock_id = EXCLUDED.lock_id,
              owner = EXCLUDED.owner, fencing_token = EXCLUDED.fencing_token,
              acquired_at = clock_timestamp(), expires_at = EXCLUDED.expires_at
            """,
            (table_id, lock_name, lock_id, owner, token_row["last_fencing_token"], lease_ms),
        )

    def extend_lease(self, table_id: str, lock_id: str, lease_ms: int) -> None:
        self.cur.execute(
            "UPDATE table_locks SET expires_at = clock_timestamp() + %s * interval '1 millisecond' "
            "WHERE table_id = %s AND lock_id = %s",
            (lease_ms, table_id, lock_id),
        )

    def delete_lease(self, table_id: str, lock_id: str) -> bool:
        return (
            self._count("DELETE FROM table_locks WHERE table_id = %s AND lock_id = %s", (table_id, lock_id))
            == 1
        )

    def delete_expired_leases(self) -> list[tuple[str, str]]:
        rows = self._all(
            "DELETE FROM table_locks WHERE expires_at < clock_timestamp() RETURNING table_id, owner"
        )
        return [(r["table_id"], r["owner"]) for r in rows]


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed transaction (out of pipeline mode); a connection that cannot roll back is
    closed, so the pool replaces it."""
    if conn.closed or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


class Store:
    """A connection pool and the schema; work happens in :meth:`transaction` blocks."""

    def __init__(self, dsn: str, pool_size: int = 16, timeout_s: float = 30.0) -> None:
        self.dsn = dsn
        self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            timeout=timeout_s,
            kwargs={"autocommit": True, "application_name": "inlet-coordinator"},
            open=False,
            name="inlet-coordinator",
        )

    def open(self, wait_s: float = 30.0) -> Store:
        try:
            self.pool.open(wait=True, timeout=wait_s)
        except PoolTimeout as e:
            self.pool.close()
            raise Unavailable(f"cannot connect to the coordinator database: {e}") from e
        return self

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """A transaction: committed when the block ends, rolled back if it raises.

        A database that cannot be reached raises :class:`Unavailable` (clients retry).
        """
        try:
            with self.pool.connection() as conn:
                try:
                    with conn.pipeline() as pipeline, conn.cursor(row_factory=dict_row) as cur:
                        # BEGIN and COMMIT by hand: psycopg's transaction() syncs the pipeline on
                        # entry and exit, a round trip each; here BEGIN travels with the first
                        # statement whose result is read, COMMIT with the writes queued behind the
                        # last one, in the pipeline's closing sync (which raises the first error of
                        # what was queued: then nothing is committed)
                        cur.execute("BEGIN")
                        yield Tx(cur, pipeline)
                        cur.execute("COMMIT")
                except BaseException:
                    _roll_back(conn)
                    raise
        except PoolTimeout as e:
            raise Unavailable(f"the coordinator database is unavailable (no connection): {e}") from e
        except psycopg.OperationalError as e:
            raise Unavailable(f"the coordinator database is unavailable: {e}") from e

    @contextmanager
    def _quick(self, timeout_s: float) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor for a read that must answer within ``timeout_s`` (a scrape, a probe)."""
        with self.pool.connection(timeout=timeout_s) as conn, conn.transaction(), conn.cursor() as cur:
            cur.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
            yield cur

    def ping(self, timeout_s: float = 2.0) -> None:
        """Raise unless the database answers within ``timeout_s``."""
        with self._quick(timeout_s) as cur:
            cur.execute("SELECT 1")

    def outbox_backlog(self, timeout_s: float = 5.0) -> list[tuple[str, int, float]]:
        """Per registered table: commit events not yet published, and the age in seconds of the
        oldest of them (0 when none waits)."""
        with self._quick(timeout_s) as cur:
            cur.execute(
                """
                SELECT t.table_id, count(o.id),
                  COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - min(o.created_at)), 0)::float8
                FROM coordinator_tables t
                LEFT JOIN outbox o ON o.table_id = t.table_id AND o.published_at IS NULL
                GROUP BY t.table_id ORDER BY t.table_id
                """
            )
            return [(str(t), int(n), max(0.0, float(age))) for t, n, age in cur.fetchall()]

    def migrate(self) -> int:
        """Create or upgrade the schema; returns the schema version. Safe to run on every replica."""
        with self.transaction() as tx:
            tx.cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_KEY,))
            tx.cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INT PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            row = tx._one("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
            current = int(row["v"]) if row else 0
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the coordinator database has schema version {current}, newer than this coordinator's "
                    f"{SCHEMA_VERSION}; upgrade the coordinator"
                )
            for version, statements in MIGRATIONS:
                if version <= current:
                    continue
                for sql in statements:
                    tx.cur.execute(sql)
                tx.cur.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
                log.info("coordinator database migrated to schema version %d", version)
        return SCHEMA_VERSION
