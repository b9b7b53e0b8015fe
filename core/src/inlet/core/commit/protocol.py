"""The commit protocol: how an instant is begun, marked inflight and completed.

:class:`CommitProtocol` is the interface the writers use; :class:`LocalCommitProtocol` is the
in-process implementation (table lock + clock). The gRPC coordinator client in
``inlet.services`` is the other implementation.

Completion is atomic: the completed instant file appears in one rename, after a conflict check
(optimistic concurrency: a commit fails if an instant that completed after this one began
touched the same file groups) under the table lock. An instant that is no longer pending, or that
another writer is rolling back, cannot be completed either.

Every completion but a rollback's turns off an Apache Hudi metadata table the table has
(:mod:`inlet.core.table.metadata_table`): Inlet does not maintain it, and readers listing files
through it would miss the instant's files. A rollback deletes the files of an instant that never
completed, which no listing has: it turns the metadata table off itself only when the metadata
table recorded that instant (:func:`inlet.core.table.metadata_table.write_completed`), so a failed
write leaves the table as it was.
"""

from __future__ import annotations

import abc
import datetime as dt
import logging
import time

from inlet.core import avro
from inlet.core.commit.locks import table_lock
from inlet.core.errors import CommitConflictError, InletError
from inlet.core.storage import Storage
from inlet.core.table import metadata_table
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State, format_instant_time, parse_instant_time

log = logging.getLogger(__name__)


def now_instant_time() -> str:
    return format_instant_time(dt.datetime.now(dt.UTC).replace(tzinfo=None))


# how far the timeline may run ahead of the clock before a new time is set just after it rather
# than waited for (clock skew between writers, or a table whose timeline time zone is not UTC)
MAX_CLOCK_WAIT_MS = 1000


def next_instant_time(after: str | None) -> str:
    """A time strictly after ``after``: the wall clock, waiting for it if it is a little behind.

    If ``after`` is further ahead than :data:`MAX_CLOCK_WAIT_MS`, the time is ``after`` + 1 ms:
    times must increase, and waiting for the clock to catch up could take hours.
    """
    t = now_instant_time()
    if after is None or t > after:
        return t
    after_moment = parse_instant_time(after)
    ahead_ms = (after_moment - parse_instant_time(t)).total_seconds() * 1000
    if ahead_ms > MAX_CLOCK_WAIT_MS:
        log.warning("the timeline is %d ms ahead of this clock; issuing the time after %s", ahead_ms, after)
        return format_instant_time(after_moment + dt.timedelta(milliseconds=1))
    while t <= after:
        time.sleep(0.001)
        t = now_instant_time()
    return t


class CommitProtocol(abc.ABC):
    """How writers obtain instant times and complete instants on one table."""

    #: True when a service (the gRPC coordinator) serialises the table's commits: then, on an
    #: object store that cannot lock (no conditional writes), the table lock need only exclude
    #: this process's threads
    serialises_commits: bool = False

    @abc.abstractmethod
    def begin(self, action: str, requested_content: bytes = b"") -> Instant:
        """Issue a new instant time and write ``<t>.<action>.requested``."""

    @abc.abstractmethod
    def set_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        """Write the inflight file (with the planned write for early conflict detection)."""

    @abc.abstractmethod
    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        """Check conflicts, assign the completion time and write the completed instant."""

    @abc.abstractmethod
    def finish(self, instant: Instant, content: bytes) -> Instant:
        """Complete a table-service instant (rollback, clean...) without a conflict check."""

    @abc.abstractmethod
    def timeline(self) -> Timeline:
        """A fresh view of the table's timeline."""


def find_conflicts(
    timeline: Timeline, instant: Instant, metadata: CommitMetadata
) -> list[tuple[Instant, set[tuple[str, str]]]]:
    """Instants that completed after ``instant`` began and touched the same file groups."""
    mine = metadata.touched_file_groups()
    if not mine:
        return []
    out = []
    for other in timeline.completed(Action.WRITE_ACTIONS):
        if other.time == instant.time or (other.completion_time or other.time) <= instant.time:
            continue
        theirs = timeline.commit_metadata(other)
        if _compaction_and_log_append(instant, metadata, other, theirs):
            continue
        overlap = mine & theirs.touched_file_groups()
        if overlap:
            out.append((other, overlap))
    return out


def _compaction_and_log_append(
    instant: Instant, metadata: CommitMetadata, other: Instant, theirs: CommitMetadata
) -> bool:
    """A compaction and a deltacommit never conflict: logs completed after the compaction instant
    belong to the next file slice (completion-time slicing), as in Apache Hudi."""
    return (metadata.compacted and other.action == Action.DELTA_COMMIT) or (
        theirs.compacted and instant.action == Action.DELTA_COMMIT
    )


def check_still_pending(timeline: Timeline, instant: Instant) -> None:
    """Raise :class:`CommitConflictError` unless ``instant`` is pending with no rollback pending.

    Another writer that took this one for dead (expired heartbeat) may have rolled the instant
    back, or be rolling it back: completing it then would publish deleted files.
    """
    current = next((i for i in timeline.instants if i.time == instant.time), None)
    if current is None or current.is_completed:
        state = "was rolled back" if current is None else "has already completed"
        raise CommitConflictError(f"instant {instant.time} {state}; it cannot be completed, retry the write")
    for rb in timeline.pending([Action.ROLLBACK]):
        requested = Instant(rb.time, Action.ROLLBACK, State.REQUESTED)
        try:
            plan = avro.decode(timeline.read_bytes(requested), f"rollback plan {requested.file_name()}")
        except InletError:
            continue  # a rollback plan being written is not yet a decision
        target = (plan.get("instantToRollback") or {}).get("commitTime")
        if target == instant.time:
            raise CommitConflictError(
                f"instant {instant.time} is being rolled back by rollback {rb.time} (its writer was "
                "taken for dead: heartbeat expired); retry the write"
            )


class LocalCommitProtocol(CommitProtocol):
    """Commits serialised by a lock on this machine (threads and processes)."""

    def __init__(self, storage: Storage, layout_version: int = 2, timeline_path: str = "timeline") -> None:
        self.storage = storage
        self.layout_version = layout_version
        self.timeline_path = timeline_path

    def timeline(self) -> Timeline:
        return Timeline.load(self.storage, self.layout_version, self.timeline_path)

    def _write(self, tl: Timeline, instant: Instant, content: bytes) -> None:
        if instant.is_completed:
            metadata_table.write_completed(self.storage, tl.path_of(instant), content, instant.action)
        else:
            self.storage.write_atomic(tl.path_of(instant), content)

    def begin(self, action: str, requested_content: bytes = b"") -> Instant:
        with table_lock(self.storage):
            tl = self.timeline()
            instant = Instant(next_instant_time(tl.max_instant_time()), action, State.REQUESTED)
            self._write(tl, instant, requested_content)
            return instant

    def set_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
        inflight = Instant(instant.time, instant.action, State.INFLIGHT)
        self._write(self.timeline(), inflight, content)
        return inflight

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        with table_lock(self.storage):
            tl = self.timeline()
            check_still_pending(tl, instant)
            conflicts = find_conflicts(tl, instant, metadata)
            if conflicts:
                other, groups = conflicts[0]
                shown = ", ".join(f"{p or '<root>'}/{f}" for p, f in sorted(groups)[:5])
                raise CommitConflictError(
                    f"instant {instant.time} conflicts with {other.action} {other.time} "
                    f"(completed {other.completion_time}) on file group(s) {shown}; retry the write"
                )
            completion = next_instant_time(tl.max_instant_time())
            done = instant.with_state(State.COMPLETED, completion)
            self._write(tl, done, metadata.to_bytes())
            return done

    def finish(self, instant: Instant, content: bytes) -> Instant:
        with table_lock(self.storage):
            tl = self.timeline()
            action = instant.with_state(State.COMPLETED).action
            for existing in tl.instants:
                if existing.time == instant.time and existing.is_completed and existing.action == action:
                    return existing  # finished by another process meanwhile (e.g. a resumed rollback)
            done = instant.with_state(State.COMPLETED, next_instant_time(tl.max_instant_time()))
            self._write(tl, done, content)
            return done
