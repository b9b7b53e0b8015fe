"""Restore a table to a savepoint: roll back, newest first, every write after it.

Apache Hudi 1.x (table version 8) steps, which Inlet takes:

1. ``<r>.restore.requested`` holds a ``HoodieRestorePlan`` (version 2: ``instantsToRollback`` as
   ``HoodieInstantInfo`` newest first, ``savepointToRestoreTimestamp``). Planned as
   ``RestorePlanActionExecutor``: pending clustering after the savepoint first, then every
   write-timeline instant (commits, deltacommits, replacecommits, compactions, clustering, in any
   state) after the savepointed commit in ``RestoreInstantComparator`` order: completion time,
   except that on Merge-on-Read a compaction compares by requested time. Pending instants have no
   completion time and so come after every completed one.
2. ``<r>.restore.inflight``, then each planned instant is rolled back as
   ``CopyOnWriteRestoreActionExecutor`` / ``MergeOnReadRestoreActionExecutor`` do: a
   ``<x>.rollback.requested`` (``HoodieRollbackPlan``) and ``.inflight`` that are never completed
   (``skipTimelinePublish``); the instant's files and its timeline files are deleted. An instant
   no longer on the timeline was rolled back by an earlier, interrupted run and is skipped
   (``BaseRestoreActionExecutor.getInstantsToRollback``).
3. ``<r>_<c>.restore`` holds ``HoodieRestoreMetadata`` (each instant's ``HoodieRollbackMetadata``
   in ``hoodieRestoreMetadata``), then every rollback instant after the savepoint is deleted.

Hudi restores only to a savepoint (``SavepointHelpers.validateSavepointPresence``) and refuses
to roll back a savepointed commit (``validateSavepointRollbacks``), so a later savepoint must be
deleted first.

Readers during a restore: Hudi deletes an instant's data files before its timeline files, so a
query running meanwhile may miss files ("queries accessing the files will mostly fail"). Inlet
deletes the completed instant file *first*: the newest write disappears from the timeline in one
file deletion, so a reader (Inlet's or hudi-rs) sees the table as of an earlier completed instant,
never a write with files missing. A restore killed at any step is finished by the next
``restore`` to the same savepoint from its plan.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import time
from typing import Any

from inlet.core import avro, faults
from inlet.core.actions.rollback import files_of, plan_rollback, rollback_metadata
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.locks import table_lock
from inlet.core.config import TableType
from inlet.core.errors import InvalidInputError
from inlet.core.table import metadata_table
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time
from inlet.core.write.prepare import check_writable

log = logging.getLogger(__name__)

PLAN_VERSION = 2  # RestorePlanActionExecutor.LATEST_RESTORE_PLAN_VERSION
METADATA_VERSION = 1
# write-timeline actions in any state (pending compaction and clustering keep their own names)
WRITE_TIMELINE = frozenset(
    {
        Action.COMMIT,
        Action.DELTA_COMMIT,
        Action.REPLACE_COMMIT,
        Action.COMPACTION,
        Action.LOG_COMPACTION,
        Action.CLUSTERING,
    }
)
_LAST = "~"  # sorts after every instant time: a pending instant's missing completion time


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    instant: str  # the restore instant
    savepoint: str
    rolled_back: tuple[str, ...]  # instants this run rolled back, newest first
    resumed: bool = False  # finished a restore an earlier run left pending

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _order_key(inst: Instant, mor: bool) -> str:
    if mor and inst.action in (Action.COMPACTION, Action.COMMIT):
        return inst.time
    return inst.completion_time or _LAST if inst.is_completed else _LAST


def plan_restore(table: TableHandle, timeline: Timeline, savepoint_time: str) -> list[Instant]:
    """The instants a restore to ``savepoint_time`` rolls back, in rollback order (newest first)."""
    target = next(
        (i for i in timeline.completed_writes() if i.time == savepoint_time),
        None,
    )
    if target is None:
        raise InvalidInputError(f"cannot restore to {savepoint_time}: its commit is not on the timeline")
    mor = table.meta.table_type is TableType.MERGE_ON_READ
    bound = target.time if mor and target.action == Action.COMMIT else target.completion_time or target.time
    clustering = sorted(
        (i for i in timeline.pending([Action.CLUSTERING]) if i.time > savepoint_time),
        key=lambda i: i.time,
        reverse=True,
    )
    later = []
    for inst in timeline.instants:
        if inst.action not in WRITE_TIMELINE or inst in clustering or inst.time == target.time:
            continue
        key = _order_key(inst, mor)
        bound_for = target.time if mor and inst.action in (Action.COMPACTION, Action.COMMIT) else bound
        if key > bound_for:
            later.append((key, inst.time, inst))
    later.sort(reverse=True)
    return clustering + [i for _, _, i in later]


def _write_instant(timeline: Timeline, t: str) -> Instant | None:
    return next((i for i in timeline.instants if i.time == t and i.action in WRITE_TIMELINE), None)


def _timeline_files(timeline: Timeline, t: str) -> list[str]:
    """The timeline files of the write at ``t``: completed first, then inflight, then requested."""
    order = {State.COMPLETED: 0, State.INFLIGHT: 1, State.REQUESTED: 2}
    found = []
    for info in timeline.storage.list_files(timeline.dir):
        inst = Instant.parse_file_name(posixpath.basename(info.path))
        if inst is not None and inst.time == t and inst.action in WRITE_TIMELINE:
            found.append((order[inst.state], info.path))
    return [p for _, p in sorted(found)]


def _rollback_one(table: TableHandle, inst: Instant) -> dict[str, Any]:
    """Roll back one write (completed or pending) as a restore does; its rollback metadata."""
    started = time.monotonic()
    storage = table.storage
    tl = table.load_timeline()
    files = set(files_of(table, inst.time))
    if inst.is_completed and inst.action in Action.WRITE_ACTIONS:
        for stat in tl.commit_metadata(inst).write_stats():
            if stat.path:
                files.add(stat.path)
    plan = plan_rollback(inst, sorted(files))
    with table_lock(storage):
        rb = table.commit_protocol.begin(Action.ROLLBACK, avro.encode("HoodieRollbackPlan", plan))
    beat = heartbeat.Heartbeat(storage, rb.time).start()
    try:
        table.commit_protocol.set_inflight(rb)
        timeline_files = _timeline_files(tl, inst.time)
        # unpublish first: the completed file goes in one deletion, readers then see an earlier state
        if timeline_files and inst.is_completed:
            storage.delete(timeline_files.pop(0))
        deleted: dict[str, list[str]] = {}
        for f in sorted(files):
            storage.delete(f)
            deleted.setdefault(posixpath.dirname(f), []).append(f)
        for path in timeline_files:
            storage.delete(path)
        markers.delete_markers(storage, inst.time)
        heartbeat.delete(storage, inst.time)
    finally:
        beat.stop()
    return rollback_metadata(rb.time, started, deleted, inst)


def read_restore_plan(timeline: Timeline, restore_instant: Instant) -> dict[str, Any]:
    requested = Instant(restore_instant.time, Action.RESTORE, State.REQUESTED)
    return avro.decode(timeline.read_bytes(requested), f"restore plan {requested.file_name()}")


def _execute(table: TableHandle, instant: Instant, plan: dict[str, Any]) -> tuple[Instant, list[str]]:
    started = time.monotonic()
    savepoint = plan.get("savepointToRestoreTimestamp") or ""
    if instant.state is State.REQUESTED:
        instant = table.commit_protocol.set_inflight(instant)
    with table_lock(table.storage):  # a metadata table would go on listing the deleted files
        metadata_table.turn_off(table.storage)
    faults.crash_point(faults.RESTORE_AFTER_PLAN)
    per_instant: dict[str, list[dict[str, Any] | None]] = {}
    rolled: list[Instant] = []
    for info in plan.get("instantsToRollback") or []:
        inst = _write_instant(table.load_timeline(), info["commitTime"])
        if inst is None:
            log.info("restore %s: %s was rolled back by an earlier run", instant.time, info["commitTime"])
            continue
        per_instant[inst.time] = [_rollback_one(table, inst)]
        rolled.append(inst)
        faults.crash_point(faults.RESTORE_MID_ROLLBACK)
    faults.crash_point(faults.RESTORE_BEFORE_COMPLETE)
    metadata = {
        "startRestoreTime": instant.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "instantsToRollback": [i.time for i in rolled],
        "hoodieRestoreMetadata": per_instant,
        "version": METADATA_VERSION,
        "restoreInstantInfo": [{"commitTime": i.time, "action": i.action} for i in rolled],
    }
    done = table.commit_protocol.finish(instant, avro.encode("HoodieRestoreMetadata", metadata))
    # the rollbacks after the savepoint (the restore's own, never completed, and older ones) go
    tl = table.load_timeline()
    for rb in reversed(tl.instants):
        if rb.action == Action.ROLLBACK and rb.time > savepoint:
            for state in (State.COMPLETED, State.INFLIGHT, State.REQUESTED):
                table.storage.delete(tl.path_of(Instant(rb.time, rb.action, state, rb.completion_time)))
    return done, [i.time for i in rolled]


def restore(table: TableHandle, savepoint_time: str) -> RestoreResult:
    """Restore the table to the savepoint at ``savepoint_time`` (or finish a pending restore to it)."""
    check_writable(table)
    t = normalize_instant_time(savepoint_time)
    with table_lock(table.storage):
        tl = table.commit_protocol.timeline()
        pending = tl.pending([Action.RESTORE])
        if pending:
            plan = read_restore_plan(tl, pending[0])
            other = plan.get("savepointToRestoreTimestamp")
            if other != t:
                raise InvalidInputError(
                    f"restore {pending[0].time} to savepoint {other} is pending; finish it first "
                    f"(restore to {other})"
                )
            instant, resumed = pending[0], True
        else:
            if not any(sp.time == t for sp in tl.completed([Action.SAVEPOINT])):
                raise InvalidInputError(
                    f"cannot restore to {t}: it is not a savepoint (create one with savepoint first)"
                )
            later = [sp.time for sp in tl.completed([Action.SAVEPOINT]) if sp.time > t]
            if later:
                raise InvalidInputError(
                    f"cannot restore to {t}: later savepoint(s) {', '.join(later)} would be rolled "
                    "back; delete them first"
                )
            todo = plan_restore(table, tl, t)
            plan = {
                "instantsToRollback": [{"commitTime": i.time, "action": i.action} for i in todo],
                "version": PLAN_VERSION,
                "savepointToRestoreTimestamp": t,
            }
            instant = table.commit_protocol.begin(Action.RESTORE, avro.encode("HoodieRestorePlan", plan))
            resumed = False
    done, rolled = _execute(table, instant, plan)
    log.info("restored to savepoint %s (restore %s, %d instant(s) rolled back)", t, done.time, len(rolled))
    return RestoreResult(done.time, t, tuple(rolled), resumed)
