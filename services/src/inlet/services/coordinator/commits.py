"""What the coordinator does to tables: register, issue instants, complete them, roll them back (leases: :mod:`.leases`).

Every operation that issues a time or changes an instant runs in one database transaction that
holds the table's row lock (:meth:`Store.transaction` + ``SELECT ... FOR UPDATE``), and writes
the timeline file (through :class:`inlet.core.storage.Storage`) before that transaction commits.
BeginInstant, MarkInflight and CompleteInstant calls waiting for the same table share that
transaction, each in a savepoint of its own (group commit, :mod:`.batches`).
PostgreSQL is the only lock: core's ``fcntl`` table lock is never taken here (a client on this
host may hold it while calling us).

Crash safety: a completed instant file written without its transaction committing is found again
(:meth:`Coordinator._reconcile`, a retried ``CompleteInstant``, the janitor) and recorded with its
outbox row, so no completion is lost or announced twice. Instant times are the wall clock, strictly
after both the database's last issued time and the timeline's largest time
(:func:`inlet.core.commit.next_instant_time`, which waits out small clock skew).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from inlet.core import HudiTable, avro
from inlet.core.actions import rollback
from inlet.core.commit import heartbeat
from inlet.core.commit.protocol import CommitProtocol, check_still_pending, find_conflicts, next_instant_time
from inlet.core.config import NBCC_MODE, IndexType, TableConfig, TableType, WriteOperation
from inlet.core.errors import CommitConflictError, InletError, TableNotFoundError
from inlet.core.storage import Storage
from inlet.core.table import metadata_table
from inlet.core.table import properties as props_io
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State
from inlet.services.coordinator import validation
from inlet.services.coordinator.batches import TableQueues
from inlet.services.coordinator.errors import (
    AlreadyExists,
    Conflict,
    ConflictInfo,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from inlet.services.coordinator.events import commit_event, event_id
from inlet.services.coordinator.leases import Fence, Leases, check_fence, registered
from inlet.services.coordinator.metrics import (
    AGAINST_COMPLETED,
    AGAINST_PENDING_CLUSTERING,
    CoordinatorMetrics,
)
from inlet.services.coordinator.store import COMPLETED, ROLLED_BACK, InstantRow, Store, TableRow, Tx
from inlet.services.coordinator.timelines import Timelines
from inlet.services.writer import checkpoint as kafka_checkpoint

log = logging.getLogger("inlet.coordinator")

SINGLE_WRITER = "SINGLE_WRITER"
OPTIMISTIC = "OPTIMISTIC"
NON_BLOCKING = "NON_BLOCKING"
MODES = (SINGLE_WRITER, OPTIMISTIC, NON_BLOCKING)
BUCKET_ENGINE_PROPERTY = "hoodie.index.bucket.engine"
# under NBCC these operations are still conflict-checked (they replace or create file groups)
NBCC_CHECKED_OPERATIONS = frozenset(
    {
        WriteOperation.BULK_INSERT.value,
        WriteOperation.INSERT_OVERWRITE.value,
        WriteOperation.INSERT_OVERWRITE_TABLE.value,
        WriteOperation.DELETE_PARTITION.value,
        WriteOperation.CLUSTER.value,
    }
)
# the pending instants the janitor rolls back once their heartbeat expired
ROLLED_BACK_ACTIONS = frozenset(Action.WRITE_ACTIONS)
HEARTBEAT_MISSES = 3  # heartbeats a writer may miss before its instant expires


@dataclass(frozen=True)
class Completion:
    instant: Instant
    event_id: str


@dataclass(frozen=True)
class Abort:
    rollback_instant_time: str
    deleted_files: tuple[str, ...]


def heartbeat_interval_ms(timeout_ms: int) -> int:
    return max(1, timeout_ms // (HEARTBEAT_MISSES + 1))


def _shown(groups: set[tuple[str, str]] | frozenset[tuple[str, str]]) -> str:
    items = sorted(groups)
    text = ", ".join(f"{p or '<root>'}/{f}" for p, f in items[:5])
    return text + (f" and {len(items) - 5} more" if len(items) > 5 else "")


def _planned_metadata(groups: set[tuple[str, str]], operation: str | None, compacted: bool) -> CommitMetadata:
    md = CommitMetadata(operation_type=operation, compacted=compacted)
    for p, f in sorted(groups):
        md.add(WriteStat(file_id=f, path="", partition_path=p))
    return md


def _same_files(a: CommitMetadata, b: CommitMetadata) -> bool:
    return {s.path for s in a.write_stats()} == {s.path for s in b.write_stats()}


def _decode_metadata(data: bytes, what: str) -> CommitMetadata | None:
    try:
        return CommitMetadata.from_bytes(data, what)
    except InletError:
        return None


class Coordinator:
    """The coordinator's operations on registered tables (the gRPC servicer is a thin layer on it)."""

    def __init__(
        self,
        store: Store,
        lake_roots: Sequence[validation.LakeRoot],
        heartbeat_timeout_ms: int,
        lock_lease_ms: int,
        coordinator_id: str | None = None,
        lock_wait_slots: int | None = None,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics or CoordinatorMetrics(outbox=store.outbox_backlog)
        self.lake_roots = list(lake_roots)
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.lock_lease_ms = lock_lease_ms
        self.id = coordinator_id or f"coordinator-{uuid.uuid4().hex[:12]}"
        self._started = time.monotonic()
        self.leases = Leases(store, lock_lease_ms, lock_wait_slots)
        self.queues = TableQueues(store)  # group commit of the calls waiting for a table's lock
        self.timelines = Timelines()

    def _just_started(self, timeout_ms: int) -> bool:
        """While this coordinator has run for less than a heartbeat timeout, silence proves nothing:
        writers could not reach it (or any replica) to beat while it was down."""
        return (time.monotonic() - self._started) * 1000 <= timeout_ms

    # ------------------------------------------------------------------ helpers

    def storage(self, table: TableRow) -> Storage:
        """The table's files; its base path is checked against the lake roots on every use (the
        roots may have changed since it was registered, or a symbolic link been replaced)."""
        return Storage(validation.confine(table.base_path, self.lake_roots))

    def timeline(self, table: TableRow) -> Timeline:
        """The table's timeline as it is now (listed again; see :mod:`.timelines`)."""
        return self.timelines.load(self.storage(table), table.layout_version, table.timeline_path)

    def table(self, table_id: str) -> TableRow:
        validation.table_id(table_id)
        with self.store.transaction() as tx:
            return registered(tx, table_id)

    def hudi_table(self, table: TableRow, writer_id: str) -> HudiTable:
        """The table as core sees it, committing straight through this coordinator."""
        storage = self.storage(table)
        protocol = DirectCommitProtocol(self, table, storage, writer_id)
        return HudiTable(storage, props_io.read_properties(storage), protocol)

    @staticmethod
    def _next_time(table: TableRow, tl: Timeline) -> str:
        after = max((t for t in (table.last_instant_time, tl.max_instant_time()) if t), default=None)
        return next_instant_time(after)

    @staticmethod
    def _on_timeline(tl: Timeline, time: str) -> Instant | None:
        return next((i for i in tl.instants if i.time == time), None)

    # ------------------------------------------------------------------ tables

    def register(
        self, table_id: str, base_path: str, mode: str | None, heartbeat_timeout_ms: int | None
    ) -> TableRow:
        """Register a table (idempotent); unspecified settings match whatever is registered."""
        validation.table_id(table_id)
        if mode is not None and mode not in MODES:
            raise InvalidArgument(f"unknown concurrency mode {mode!r}")
        if heartbeat_timeout_ms is not None:
            validation.non_negative(heartbeat_timeout_ms, "heartbeat_timeout_ms", 24 * 3_600_000)
        path = validation.confine(base_path, self.lake_roots)
        storage = Storage(path)
        try:
            props = props_io.read_properties(storage)
        except TableNotFoundError:
            raise NotFound(f"no Hudi table at {base_path} (missing .hoodie/hoodie.properties)") from None
        except InletError as e:
            raise FailedPrecondition(f"cannot read the table at {base_path}: {e}") from e
        table_type = TableConfig.TYPE.require(props)
        resolved_mode = mode or OPTIMISTIC
        if resolved_mode == NON_BLOCKING:
            self._check_nbcc(props, base_path)
        row = TableRow(
            table_id=table_id,
            base_path=path,
            table_name=TableConfig.NAME.require(props),
            table_type=table_type.value,
            concurrency_mode=resolved_mode,
            heartbeat_timeout_ms=heartbeat_timeout_ms or self.heartbeat_timeout_ms,
            layout_version=TableConfig.TIMELINE_LAYOUT_VERSION.require(props),
            timeline_path=TableConfig.TIMELINE_PATH.require(props),
            last_instant_time=None,
            last_sequence=0,
            last_fencing_token=0,
        )
        for _attempt in range(2):
            with self.store.transaction() as tx:
                existing = tx.table(table_id)
                if existing is not None:
                    self._same_registration(existing, path, mode, heartbeat_timeout_ms)
                    return existing
                other = tx.table_by_path(path)
                if other is not None:
                    raise AlreadyExists(f"the table at {path} is already registered as {other.table_id!r}")
                if tx.insert_table(row):
                    log.info(
                        "registered table %s at %s (%s, %s)", table_id, path, row.table_type, resolved_mode
                    )
                    return registered(tx, table_id)
        raise AlreadyExists(f"table {table_id!r} was registered concurrently with other settings")

    @staticmethod
    def _check_nbcc(props: dict[str, str], base_path: str) -> None:
        problems = []
        if TableConfig.TYPE.require(props) is not TableType.MERGE_ON_READ:
            problems.append("it is not a Merge-on-Read table")
        if TableConfig.INDEX_TYPE.require(props) is not IndexType.BUCKET:
            problems.append("it does not use the bucket index (hoodie.index.type=BUCKET)")
        elif props.get(BUCKET_ENGINE_PROPERTY, "SIMPLE").upper() != "SIMPLE":
            problems.append(f"its bucket index is not the simple one ({BUCKET_ENGINE_PROPERTY})")
        if (TableConfig.CONCURRENCY_MODE.get(props) or "").upper() != NBCC_MODE:
            problems.append(
                f"{TableConfig.CONCURRENCY_MODE.key}={NBCC_MODE} is not set in its hoodie.properties (writers need it to "
                "agree on bucket file ids)"
            )
        if problems:
            raise FailedPrecondition(
                f"non-blocking concurrency control needs a Merge-on-Read table with the simple bucket "
                f"index; the table at {base_path}: {'; '.join(problems)}"
            )

    @staticmethod
    def _same_registration(existing: TableRow, path: str, mode: str | None, timeout: int | None) -> None:
        diffs = []
        if existing.base_path != path:
            diffs.append(f"base path {existing.base_path}")
        if mode is not None and existing.concurrency_mode != mode:
            diffs.append(f"concurrency mode {existing.concurrency_mode}")
        if timeout and existing.heartbeat_timeout_ms != timeout:
            diffs.append(f"heartbeat timeout {existing.heartbeat_timeout_ms} ms")
        if diffs:
            raise AlreadyExists(f"table {existing.table_id!r} is already registered with {', '.join(diffs)}")

    def describe(self, table_id: str) -> tuple[TableRow, list[Instant], Instant | None]:
        """The table, its pending instants and its latest completed write."""
        table = self.table(table_id)
        tl = self.timeline(table)
        return table, tl.pending(), tl.latest_completed_write()

    def instants(self, table_id: str, include_pending: bool) -> list[Instant]:
        tl = self.timeline(self.table(table_id))
        return list(tl.instants) if include_pending else tl.completed()

    # ------------------------------------------------------------------ instants

    def begin(
        self,
        table_id: str,
        action: str,
        requested_content: bytes,
        writer_id: str,
        request_id: str,
        force: bool = False,
    ) -> Instant:
        """Issue a new instant time and write ``<t>.<action>.requested``; a retried request id
        returns the instant it issued. A rollback names its target in its plan: the target must be
        pending, and its writer gone (heartbeat expired) unless the caller owns it or ``force``."""
        return self.begin_instant(table_id, action, requested_content, writer_id, request_id, force)[0]

    def begin_instant(
        self,
        table_id: str,
        action: str,
        requested_content: bytes,
        writer_id: str,
        request_id: str,
        force: bool = False,
    ) -> tuple[Instant, int]:
        """:meth:`begin`, also returning the table's heartbeat timeout (ms) read in its transaction."""
        validation.table_id(table_id)
        validation.action(action)
        validation.bounded(writer_id, "writer_id")
        validation.bounded(request_id, "request_id")
        target = self._rollback_target(requested_content) if action == Action.ROLLBACK else None

        def issue(tx: Tx) -> tuple[TableRow, Instant, Timeline | None]:
            table = registered(tx, table_id, lock=True, instant=("begin_request_id", request_id))
            if request_id:
                done = tx.instant_by_begin_request(table_id, request_id)
                if done is not None:
                    if done.action != action:
                        raise InvalidArgument(
                            f"request id {request_id!r} was used for {done.action} {done.instant_time}"
                        )
                    instant = Instant(done.instant_time, done.action, State.REQUESTED)
                    tx.heartbeat(table_id, done.instant_time)  # its writer is alive: it is asking
                    if done.state == State.REQUESTED.value:
                        # the first call may have died between its commit and writing the file
                        self._write_requested(table, instant, requested_content)
                    return table, instant, None  # already issued
            tl = self.timeline(table)
            self._reconcile(tx, table, tl)
            if target is not None:
                self._check_rollback(tx, table, tl, target, writer_id, force)
            if table.concurrency_mode == SINGLE_WRITER and action in Action.WRITE_ACTIONS:
                self._check_single_writer(tx, table, writer_id)
            t = self._next_time(table, tl)
            tx.issue_instant(table_id, t, action, writer_id, request_id or None, target)
            if target is not None:
                if tx.instant(table_id, target) is None:  # not issued by us: adopt it, so it is tracked
                    current = self._on_timeline(tl, target)
                    state = current.state.value if current else State.REQUESTED.value
                    tx.insert_instant(table_id, target, current.action if current else "commit", state)
                tx.set_rolling_back(table_id, target, t)
            return table, Instant(t, action, State.REQUESTED), tl

        table, instant, tl = self.queues.run(table_id, issue)
        if tl is None:
            return instant, table.heartbeat_timeout_ms
        # written once the issue is recorded: a crash in between leaves a database row without a
        # timeline file, which a retry of the same request writes and the janitor otherwise expires
        # (a file without a row would be an instant the coordinator never tracks); the time is new,
        # so no file of it can exist yet
        tl.storage.write_atomic(tl.path_of(instant), requested_content)
        log.info("began %s %s on %s for %s", action, instant.time, table_id, writer_id or "?")
        return instant, table.heartbeat_timeout_ms

    def _write_requested(self, table: TableRow, instant: Instant, content: bytes) -> None:
        tl = self.timeline(table)
        if self._on_timeline(tl, instant.time) is None:
            self.storage(table).write_atomic(tl.path_of(instant), content)

    @staticmethod
    def _rollback_target(content: bytes) -> str:
        try:
            plan = avro.decode(content, "rollback plan")
            target = str((plan.get("instantToRollback") or {}).get("commitTime") or "")
        except (InletError, AttributeError, TypeError) as e:
            raise InvalidArgument(f"a rollback needs its HoodieRollbackPlan as requested content: {e}") from e
        return validation.instant_time(target, "instant to roll back")

    def _check_rollback(
        self, tx: Tx, table: TableRow, tl: Timeline, target: str, writer_id: str, force: bool
    ) -> None:
        current = self._on_timeline(tl, target)
        row = tx.instant(table.table_id, target, lock=True)
        if current is None:
            state = (
                "was rolled back"
                if row is not None and row.state == ROLLED_BACK
                else "is not on the timeline"
            )
            raise FailedPrecondition(f"instant {target} {state}; nothing to roll back")
        if current.is_completed:
            raise FailedPrecondition(f"instant {target} has completed; it cannot be rolled back as failed")
        if row is not None and row.rolled_back_by:
            raise FailedPrecondition(
                f"instant {target} is already being rolled back by rollback {row.rolled_back_by}"
            )
        if force:
            return
        if row is not None and row.writer_id:
            if row.writer_id != writer_id and row.heartbeat_age_ms <= table.heartbeat_timeout_ms:
                raise FailedPrecondition(
                    f"instant {target} is alive: its writer {row.writer_id} sent a heartbeat "
                    f"{row.heartbeat_age_ms} ms ago (timeout {table.heartbeat_timeout_ms} ms); not rolling it back"
                )
            return
        # not issued through the coordinator: core's heartbeat file (or the timeline files' age) decides
        storage = self.storage(table)
        started = tl.last_written_ms(target)
        interval = heartbeat_interval_ms(table.heartbeat_timeout_ms)
        if not heartbeat.is_expired(storage, target, interval, HEARTBEAT_MISSES, started_ms=started):
            raise FailedPrecondition(f"instant {target} may still be written (its heartbeat is alive)")

    @staticmethod
    def _check_single_writer(tx: Tx, table: TableRow, writer_id: str) -> None:
        for row in tx.pending_instants(table.table_id):
            if (
                row.action in Action.WRITE_ACTIONS
                and row.writer_id != writer_id
                and not row.rolled_back_by
                and row.heartbeat_age_ms <= table.heartbeat_timeout_ms
            ):
                raise FailedPrecondition(
                    f"table {table.table_id} is single-writer and {row.action} {row.instant_time} of writer "
                    f"{row.writer_id or '?'} is in progress"
                )

    def _tracked(self, tx: Tx, table: TableRow, tl: Timeline, t: str) -> tuple[InstantRow, Instant | None]:
        """The instant's row, adopting one that is on the timeline but was not issued by us (the
        table's pending instants come with it, for the conflict checks)."""
        row = tx.instant_and_pending(table.table_id, t)
        current = self._on_timeline(tl, t)
        if row is None:
            if current is None:
                raise NotFound(f"instant {t} is not on the timeline of table {table.table_id}")
            state = State.REQUESTED if current.is_completed else current.state
            tx.insert_instant(table.table_id, t, self._pending_action(tl, current), state.value)
            row = tx.instant(table.table_id, t, lock=True)
            assert row is not None
        return row, current

    @staticmethod
    def _pending_action(tl: Timeline, current: Instant) -> str:
        """The action an instant had while pending (a completed compaction is a ``commit``)."""
        if not current.is_completed:
            return current.action
        for pending, done in Action.COMPLETES_AS.items():
            if done == current.action and tl.storage.exists(
                tl.path_of(Instant(current.time, pending, State.REQUESTED))
            ):
                return pending
        return current.action

    @staticmethod
    def _check_action(row: InstantRow, action: str) -> None:
        if action and action not in (row.action, Action.COMPLETES_AS.get(row.action, row.action)):
            raise InvalidArgument(f"instant {row.instant_time} is a {row.action}, not a {action}")

    @staticmethod
    def _check_pending(row: InstantRow, tl: Timeline, current: Instant | None) -> Instant:
        if row.state == ROLLED_BACK:
            raise FailedPrecondition(
                f"instant {row.instant_time} was rolled back (rollback {row.rolled_back_by or '?'}); retry the write"
            )
        if row.rolled_back_by:
            raise FailedPrecondition(
                f"instant {row.instant_time} is being rolled back by rollback {row.rolled_back_by} (its writer "
                "was taken for dead: heartbeat expired); retry the write"
            )
        if current is None:
            raise FailedPrecondition(
                f"instant {row.instant_time} is no longer on the timeline; retry the write"
            )
        try:
            check_still_pending(tl, current)
        except CommitConflictError as e:
            raise FailedPrecondition(str(e)) from e
        return current

    def mark_inflight(
        self, table_id: str, t: str, content: bytes, planned: set[tuple[str, str]] | None
    ) -> Instant:
        """Write ``<t>.<action>.inflight``; with planned file groups (given, or read from the
        content's planned commit metadata) check them against instants completed since ``t``."""
        validation.table_id(table_id)
        validation.instant_time(t)
        for p, f in planned or ():
            validation.relative_path(p, "planned partition path")
            validation.bounded(f, "planned file id")

        def mark(tx: Tx) -> Instant:
            groups = planned
            table = registered(tx, table_id, lock=True, instant=("instant_time", t))
            tl = self.timeline(table)
            row, current = self._tracked(tx, table, tl, t)
            if row.state == COMPLETED or (current is not None and current.is_completed):
                if row.action not in Action.WRITE_ACTIONS and current is not None:
                    # a table service finished meanwhile by another process (core finishes pending
                    # rollbacks it finds, possibly while their own writer finishes them too)
                    return current
                raise FailedPrecondition(f"instant {t} has already completed")
            current = self._check_pending(row, tl, current)
            operation = None
            if row.action in validation.METADATA_ACTIONS and content:
                md = _decode_metadata(content, f"planned metadata of {t}")
                if md is not None:
                    operation = md.operation_type
                    if not groups:
                        groups = md.touched_file_groups()
            if groups:
                compacted = row.action in (Action.COMPACTION, Action.LOG_COMPACTION)
                pending = Instant(t, row.action, current.state)
                self._check_conflicts(tx, table, tl, pending, _planned_metadata(groups, operation, compacted))
            tx.set_inflight(table_id, t, groups if groups else None, operation)
            inflight = Instant(t, row.action, State.INFLIGHT)
            tl.storage.write_atomic(tl.path_of(inflight), content)
            return inflight

        return self.queues.run(table_id, mark)

    def heartbeat(self, table_id: str, t: str) -> int:
        """Refresh the heartbeat of a pending instant; returns when it expires (epoch ms)."""
        validation.table_id(table_id)
        validation.instant_time(t)
        with self.store.transaction() as tx:
            table = registered(tx, table_id)
            if not tx.heartbeat(table_id, t):
                row = tx.instant(table_id, t)
                if row is None:
                    raise NotFound(f"instant {t} of table {table_id} was not issued by the coordinator")
                if row.rolled_back_by or row.state == ROLLED_BACK:
                    raise FailedPrecondition(
                        f"instant {t} is rolled back by rollback {row.rolled_back_by or '?'}; stop writing it"
                    )
                raise FailedPrecondition(f"instant {t} is {row.state.lower()}, not pending")
            return tx.now_ms() + table.heartbeat_timeout_ms

    def complete(
        self,
        table_id: str,
        t: str,
        action: str,
        metadata: CommitMetadata | None,
        content: bytes | None,
        request_id: str,
        fence: Fence | None = None,
    ) -> Completion:
        """Complete a pending instant: with ``metadata`` (a write) after the conflict check of the
        table's concurrency mode; with ``content`` (table services) as given, except that a write
        action's content must be commit metadata and is checked the same. With ``fence``, only while
        that lease is still its lock's current grant. Assigns the completion time, writes
        ``<t>_<completion>.<action>`` and records the outbox row, all in one transaction."""
        validation.table_id(table_id)
        validation.instant_time(t)
        if action:
            validation.action(action)
        validation.bounded(request_id, "request_id")
        if metadata is not None:
            if action and action not in validation.METADATA_ACTIONS:
                raise InvalidArgument(f"a {action} completes with Avro content, not commit metadata")
            self._check_metadata_paths(metadata)

        def finish(tx: Tx) -> tuple[Completion, float | None]:
            """The completion, and its commit latency if this call completed it."""
            md = metadata
            table = registered(tx, table_id, lock=True, instant=("instant_time", t))
            tl = self.timeline(table)
            row, current = self._tracked(tx, table, tl, t)
            read_at = time.monotonic()  # row.age_ms: the instant's age then
            self._check_action(row, action)
            eid = event_id(table_id, t)
            if row.state == COMPLETED:
                done = Instant(t, row.completed_action or row.action, State.COMPLETED, row.completion_time)
                if md is None or (request_id and request_id == row.complete_request_id):
                    return Completion(done, eid), None  # a retried call (or a table service finished already)
                if row.complete_request_id is None and _same_files(tl.commit_metadata(done), md):
                    # recorded from the timeline by another call after the completing call crashed:
                    # this is that call's retry
                    return Completion(done, eid), None
                raise FailedPrecondition(f"instant {t} has already completed at {row.completion_time}")
            if current is not None and current.is_completed:
                # completed on the timeline but not recorded (the transaction that wrote it failed)
                self._record(tx, table, tl, current, None, request_id or None)
                log.warning("recorded completion of %s %s found on the timeline", table_id, t)
                return Completion(current, eid), None
            current = self._check_pending(row, tl, current)
            if fence is not None:
                validation.lock_name(fence.lock_name)
                check_fence(tx, table_id, fence)
            if md is None and row.action in Action.WRITE_ACTIONS:
                # a write completed with raw Avro is conflict-checked all the same
                md = _decode_metadata(content or b"", f"commit metadata of {t}")
                if md is None:
                    raise InvalidArgument(
                        f"the content completing {row.action} {t} is not HoodieCommitMetadata"
                    )
                self._check_metadata_paths(md)
                self._check_conflicts(tx, table, tl, current, md)
                data = content or b""
            elif md is not None:
                self._check_conflicts(tx, table, tl, current, md)
                data = md.to_bytes()
            else:
                data = content or b""
            if md is not None:
                self._check_source_offsets(table, tl, md)
            done = current.with_state(State.COMPLETED, self._next_time(table, tl))
            self._record(tx, table, tl, done, data, request_id or None, md)
            metadata_table.write_completed(tl.storage, tl.path_of(done), data, done.action)
            if md is not None:  # the next commit's conflict check and fence need not read it
                tl.remember_metadata(done, md)
            return Completion(done, eid), row.age_ms / 1000 + (time.monotonic() - read_at)

        completion, latency = self.queues.run(table_id, finish)
        if latency is not None:
            done = completion.instant
            self.metrics.commit_latency.labels(table_id, done.action).observe(latency)
            log.info("completed %s %s at %s on %s", done.action, t, done.completion_time, table_id)
        return completion

    def _check_source_offsets(self, table: TableRow, tl: Timeline, metadata: CommitMetadata) -> None:
        """A write carrying a Kafka checkpoint may not move it back: its writer lost the partitions
        (rebalance, long pause) to another that committed further. Fences every concurrency mode,
        non-blocking included, with no lease (:func:`.checkpoint.stale_offsets`)."""
        storage = tl.storage  # confined when the call listed the timeline

        def committed(topic: str, partitions: set[int]) -> dict[int, int]:
            return kafka_checkpoint.table_checkpoint(storage, topic, tl, partitions)

        reason = kafka_checkpoint.stale_offsets(metadata.extra_metadata, committed)
        if reason is not None:
            raise FailedPrecondition(f"{reason}; not committed")

    @staticmethod
    def _check_metadata_paths(md: CommitMetadata) -> None:
        for partition, stats in md.partition_to_write_stats.items():
            validation.relative_path(partition, "partition path")
            for s in stats:
                validation.relative_path(s.partition_path, "partition path")
                validation.relative_path(s.path, "write stat path")
                for f in s.log_files or ():
                    validation.relative_path(f, "log file")
        for partition in md.partition_to_replace_file_ids or {}:
            validation.relative_path(partition, "partition path")

    def _check_conflicts(
        self, tx: Tx, table: TableRow, tl: Timeline, instant: Instant, metadata: CommitMetadata
    ) -> None:
        """OCC (and NBCC for the operations it still checks): no instant completed after
        ``instant`` began may have touched its file groups, and no pending clustering may plan them."""
        mode = table.concurrency_mode
        if mode == SINGLE_WRITER:
            return
        if (
            mode == NON_BLOCKING
            and instant.action not in (Action.REPLACE_COMMIT, Action.CLUSTERING)
            and (metadata.operation_type or "").upper() not in NBCC_CHECKED_OPERATIONS
        ):
            return
        conflicts = find_conflicts(tl, instant, metadata)
        if conflicts:
            other, groups = conflicts[0]
            self.metrics.conflicts.labels(table.table_id, mode, AGAINST_COMPLETED).inc()
            raise Conflict(
                f"instant {instant.time} conflicts with {other.action} {other.time} (completed "
                f"{other.completion_time}) on file group(s) {_shown(groups)}; retry the write",
                ConflictInfo(other.time, other.action, other.completion_time, tuple(sorted(groups))),
            )
        if instant.action == Action.CLUSTERING or (metadata.operation_type or "").upper() == "CLUSTER":
            return
        mine = metadata.touched_file_groups()
        for row in tx.pending_instants(table.table_id):
            if row.action != Action.CLUSTERING or row.instant_time == instant.time or row.rolled_back_by:
                continue
            overlap = mine & row.planned_file_groups
            if overlap:
                self.metrics.conflicts.labels(table.table_id, mode, AGAINST_PENDING_CLUSTERING).inc()
                raise Conflict(
                    f"instant {instant.time} updates file group(s) {_shown(overlap)} that pending clustering "
                    f"{row.instant_time} replaces; retry the write after the clustering",
                    ConflictInfo(row.instant_time, row.action, None, tuple(sorted(overlap))),
                )

    def _record(
        self,
        tx: Tx,
        table: TableRow,
        tl: Timeline,
        done: Instant,
        data: bytes | None,
        request_id: str | None,
        metadata: CommitMetadata | None = None,
    ) -> None:
        """Record a completion and its outbox row (in the caller's transaction); ``metadata`` is
        ``data`` decoded, if the caller has it."""
        assert done.completion_time is not None
        if metadata is None and done.action in Action.WRITE_ACTIONS:
            if data is None:
                data = tl.read_bytes(done)
            metadata = _decode_metadata(data, f"instant {done.file_name()}")
        operation = metadata.operation_type if metadata is not None else None
        tx.set_completed(
            table.table_id,
            done.time,
            done.completion_time,
            done.action,
            request_id,
            operation,
            event_id(table.table_id, done.time),
            lambda sequence: commit_event(table.info, done, metadata, sequence).SerializeToString(),
        )
        if done.action == Action.ROLLBACK:
            row = tx.instant(table.table_id, done.time)
            if row is not None and row.rollback_target:
                tx.set_rolled_back(table.table_id, row.rollback_target, done.time)

    def _reconcile(self, tx: Tx, table: TableRow, tl: Timeline) -> None:
        """Record instants the timeline shows completed while the database still has them pending."""
        on_timeline = {i.time: i for i in tl.instants}
        for row in tx.pending_instants(table.table_id):
            current = on_timeline.get(row.instant_time)
            if current is not None and current.is_completed:
                self._record(tx, table, tl, current, None, None)
                log.warning(
                    "recorded completion of %s %s found on the timeline", table.table_id, current.time
                )

    # ------------------------------------------------------------------ rollback

    def abort(self, table_id: str, t: str, reason: str) -> Abort:
        """Roll back a pending write at once (the caller owns it, or an operator decided)."""
        validation.table_id(table_id)
        validation.instant_time(t)
        validation.bounded(reason[:200], "reason")
        table = self.table(table_id)
        with self.store.transaction() as tx:
            row = tx.instant(table_id, t)
        if row is not None and row.state == ROLLED_BACK:
            return Abort(row.rolled_back_by or "", ())
        hudi = self.hudi_table(table, f"abort@{self.id}")
        current = self._on_timeline(hudi.timeline, t)
        if current is None:
            raise NotFound(f"instant {t} is not on the timeline of table {table_id}")
        if current.is_completed:
            raise FailedPrecondition(f"instant {t} has completed; it cannot be aborted")
        if current.action not in ROLLED_BACK_ACTIONS:
            raise FailedPrecondition(f"instant {t} is a {current.action}; only pending writes can be aborted")
        rb_time, files = self._roll_back(hudi, table, current, force=True)
        log.info(
            "aborted %s %s on %s (%s): %d file(s) deleted", current.action, t, table_id, reason, len(files)
        )
        return Abort(rb_time, tuple(files))

    def _roll_back(
        self, hudi: HudiTable, table: TableRow, instant: Instant, force: bool
    ) -> tuple[str, list[str]]:
        """Core's rollback (plan, delete files, rollback instant) committed through this coordinator;
        without ``force`` the target's heartbeat must have expired (checked under the table lock)."""
        files = rollback.files_of(hudi, instant.time)
        plan = rollback.plan_rollback(instant, files)
        protocol = hudi.commit_protocol
        assert isinstance(protocol, DirectCommitProtocol)
        rb = protocol.begin_rollback(avro.encode("HoodieRollbackPlan", plan), force=force)
        rollback.finish_rollback(hudi, rb, plan)
        return rb.time, files

    def expire(self, table_id: str, t: str) -> str | None:
        """Roll back (or finish the rollback of) a pending instant whose heartbeat expired.

        Returns the rollback instant time, or None if nothing was to be done. Never touches an
        instant whose heartbeat is alive: the check is repeated under the table lock.
        """
        validation.table_id(table_id)
        with self.store.transaction() as tx:
            table = registered(tx, table_id, lock=True)
            tl = self.timeline(table)
            self._reconcile(tx, table, tl)
            row = tx.instant(table_id, t, lock=True)
            if (
                row is None
                or not row.pending
                or row.heartbeat_age_ms <= table.heartbeat_timeout_ms
                or self._just_started(table.heartbeat_timeout_ms)
            ):
                return None
            current = self._on_timeline(tl, t)
            if current is None and row.action != Action.ROLLBACK:
                if not row.rolled_back_by:
                    tx.set_rolled_back(table_id, t, None)
                    log.warning("instant %s %s vanished from the timeline; marked rolled back", table_id, t)
                return None
            if row.action == Action.ROLLBACK:
                tx.claim(table_id, t, f"janitor@{self.id}")  # take the dead writer's rollback over
        hudi = self.hudi_table(table, f"janitor@{self.id}")
        if row.action == Action.ROLLBACK:
            rb = current or Instant(t, Action.ROLLBACK, State.REQUESTED)
            rollback.finish_rollback(hudi, rb, rollback.read_plan(hudi, rb))
            log.warning("finished rollback %s of %s left by a dead writer", t, table_id)
            return t
        if row.action not in ROLLED_BACK_ACTIONS or row.rolled_back_by or current is None:
            return None
        rb_time, files = self._roll_back(hudi, table, current, force=False)
        log.warning(
            "rolled back %s %s of %s: writer %s silent for %d ms; %d file(s) deleted",
            row.action,
            t,
            table_id,
            row.writer_id or "?",
            row.heartbeat_age_ms,
            len(files),
        )
        return rb_time

    def expired_instants(self) -> list[tuple[str, str]]:
        with self.store.transaction() as tx:
            return tx.expired_instants(sorted(ROLLED_BACK_ACTIONS), Action.ROLLBACK)

    def prune(self, retention_ms: int) -> int:
        with self.store.transaction() as tx:
            return tx.prune_instants(retention_ms)


class DirectCommitProtocol(CommitProtocol):
    """Core's commit protocol going straight to a :class:`Coordinator` (the janitor and AbortInstant
    run core's rollback through it, inside the server)."""

    def __init__(self, coordinator: Coordinator, table: TableRow, storage: Storage, writer_id: str) -> None:
        self.coordinator = coordinator
        self.table = table
        self.storage = storage
        self.writer_id = writer_id

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage, self.table.layout_version, self.table.timeline_path)

    def begin(self, action: str, requested_content: bytes = b"") -> Instant:
        return self.coordinator.begin(
            self.table.table_id, action, requested_content, self.writer_id, uuid.uuid4().hex
        )

    def begin_rollback(self, plan: bytes, force: bool) -> Instant:
        return self.coordinator.begin(
            self.table.table_id, Action.ROLLBACK, plan, self.writer_id, uuid.uuid4().hex, force=force
        )

    def set_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        return self.coordinator.mark_inflight(self.table.table_id, instant.time, content, None)

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        done = self.coordinator.complete(
            self.table.table_id, instant.time, instant.action, metadata, None, uuid.uuid4().hex
        )
        return done.instant

    def finish(self, instant: Instant, content: bytes) -> Instant:
        done = self.coordinator.complete(
            self.table.table_id, instant.time, instant.action, None, content, uuid.uuid4().hex
        )
        return done.instant
