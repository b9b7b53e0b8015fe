"""Rolling back failed (pending) writes: a rollback instant plus deletion of the write's files.

Merge-on-Read (table version 8): a failed deltacommit is rolled back like a commit, by deleting its
base files and its log files. Apache Hudi 1.x does the same for table version 8 (its
``MarkerBasedRollbackStrategy`` plans the deltacommit's own log files, and the version-8
``RollbackHelper`` deletes files and refuses log-block requests); rollback command blocks are
appended only to table version 6 logs (``RollbackHelperV1``), whose log files are shared across
deltacommits. :func:`inlet.core.log_writer.rollback_block` encodes one for completeness.

Steps, as Apache Hudi takes them: ``<r>.rollback.requested`` (a ``HoodieRollbackPlan`` naming
the files), ``<r>.rollback.inflight``, delete the files, ``<r>_<c>.rollback``
(``HoodieRollbackMetadata``), then remove the failed instant's own timeline files and markers.
A rollback interrupted half-way is finished by the next one from its plan.

A pending write is rolled back by another writer only when its heartbeat has expired (see
:mod:`inlet.core.commit.heartbeat`). The plan is written under the table lock after checking that the
write is still pending, and :meth:`LocalCommitProtocol.complete` refuses an instant that has a
pending rollback, so a writer wrongly taken for dead fails its commit instead of losing files.
"""

from __future__ import annotations

import logging
import posixpath
import time
from typing import Any

from inlet.core import avro, faults
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.locks import table_lock
from inlet.core.errors import InletError
from inlet.core.file_group.view import BaseFile, LogFile, list_data_files
from inlet.core.table import metadata_table
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant, State

log = logging.getLogger(__name__)


def files_of(table: TableHandle, instant_time: str) -> list[str]:
    """The data files an instant wrote: its markers plus files named after it."""
    files = set(markers.marked_files(table.storage, instant_time))
    for info in list_data_files(table.storage):
        parsed: BaseFile | LogFile | None = BaseFile.parse(info.path) or LogFile.parse(info.path)
        if parsed is not None and parsed.instant_time == instant_time:
            files.add(info.path)
    return sorted(files)


def plan_rollback(instant: Instant, files: list[str]) -> dict[str, Any]:
    """A ``HoodieRollbackPlan``: one request per file, as Apache Hudi plans table version 8 rollbacks.

    Base files and log files alike are listed in ``filesToBeDeleted`` with their file id and the
    failed instant as ``latestBaseInstant``; ``logBlocksToBeDeleted`` stays empty (table version 8
    appends no rollback command blocks: a deltacommit's log files are its own, named after it, so
    deleting them removes everything it wrote).
    """
    requests = []
    for f in sorted(files):
        parsed: BaseFile | LogFile | None = BaseFile.parse(f) or LogFile.parse(f)
        requests.append(
            {
                "partitionPath": posixpath.dirname(f),
                "fileId": parsed.file_id if parsed is not None else "",
                "latestBaseInstant": instant.time,
                "filesToBeDeleted": [f],
                "logBlocksToBeDeleted": {},
            }
        )
    return {
        "instantToRollback": {"commitTime": instant.time, "action": instant.action},
        "RollbackRequests": requests,
        "version": 1,
    }


def rollback_metadata(
    rollback_time: str, started: float, deleted: dict[str, list[str]], target: Instant
) -> dict[str, Any]:
    """``HoodieRollbackMetadata`` of rolling back ``target``: the files deleted per partition."""
    return {
        "startRollbackTime": rollback_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(v) for v in deleted.values()),
        "commitsRollback": [target.time],
        "partitionMetadata": {
            p: {
                "partitionPath": p,
                "successDeleteFiles": fs,
                "failedDeleteFiles": [],
                "rollbackLogFiles": {},
                "logFilesFromFailedCommit": {},
            }
            for p, fs in deleted.items()
        },
        "version": 1,
        "instantsRollback": [{"commitTime": target.time, "action": target.action}],
    }


def _execute(table: TableHandle, rollback_instant: Instant, plan: dict[str, Any]) -> None:
    started = time.monotonic()
    storage = table.storage
    target = plan["instantToRollback"]
    if metadata_table.knows_instant(storage, target["commitTime"]):
        # Apache Hudi recorded the pending instant's files in its metadata table before it failed:
        # Inlet cannot take them out again, so readers must stop listing through it
        with table_lock(storage):
            metadata_table.turn_off(storage)
    deleted: dict[str, list[str]] = {}
    for req in plan.get("RollbackRequests") or []:
        for f in req.get("filesToBeDeleted") or []:
            storage.delete(f)
            deleted.setdefault(req["partitionPath"], []).append(f)
    faults.crash_point(faults.ROLLBACK_AFTER_DELETE)
    metadata = rollback_metadata(
        rollback_instant.time,
        started,
        deleted,
        Instant(target["commitTime"], target["action"], State.COMPLETED),
    )
    # remove the failed instant's timeline files, newest state first, then complete the rollback
    tl = table.load_timeline()
    for inst in tl.instants:
        if inst.time == target["commitTime"] and not inst.is_completed:
            for state in (State.INFLIGHT, State.REQUESTED):
                storage.delete(tl.path_of(Instant(inst.time, inst.action, state)))
    markers.delete_markers(storage, target["commitTime"])
    heartbeat.delete(storage, target["commitTime"])
    table.commit_protocol.finish(rollback_instant, avro.encode("HoodieRollbackMetadata", metadata))


def read_plan(table: TableHandle, rollback_instant: Instant) -> dict[str, Any]:
    """The ``HoodieRollbackPlan`` of a rollback instant (its requested file)."""
    requested = Instant(rollback_instant.time, Action.ROLLBACK, State.REQUESTED)
    return avro.decode(table.load_timeline().read_bytes(requested), f"rollback plan {requested.file_name()}")


def finish_rollback(table: TableHandle, rollback_instant: Instant, plan: dict[str, Any]) -> None:
    """Carry out a planned rollback: inflight, delete the files, complete the rollback instant.

    The rollback keeps a heartbeat of its own while it runs, so that another writer finishes an
    interrupted rollback (:func:`rollback_failed_writes`) only once its owner is gone.
    """
    beat = heartbeat.Heartbeat(table.storage, rollback_instant.time).start()
    try:
        if rollback_instant.state is State.REQUESTED:
            table.commit_protocol.set_inflight(rollback_instant)
        faults.crash_point(faults.ROLLBACK_AFTER_PLAN)
        _execute(table, rollback_instant, plan)
    finally:
        beat.stop()


def rollback(table: TableHandle, instant: Instant) -> str:
    """Roll back one pending write instant; returns the rollback instant time.

    Raises :class:`InletError` (deleting nothing) if the instant has completed meanwhile. If a
    rollback of the instant is already pending, that one is finished instead of starting another.
    """
    files = files_of(table, instant.time)
    plan = plan_rollback(instant, files)
    with table_lock(table.storage):
        tl = table.load_timeline()
        if any(i.time == instant.time and i.is_completed for i in tl.instants):
            raise InletError(f"instant {instant.time} has completed; it cannot be rolled back as failed")
        for pending in tl.pending([Action.ROLLBACK]):
            existing = read_plan(table, pending)
            if existing["instantToRollback"]["commitTime"] == instant.time:
                rb, plan = pending, existing
                break
        else:
            rb = table.commit_protocol.begin(Action.ROLLBACK, avro.encode("HoodieRollbackPlan", plan))
    finish_rollback(table, rb, plan)
    log.info("rolled back %s %s (%d files)", instant.action, instant.time, len(files))
    return rb.time


def rollback_failed_writes(
    table: TableHandle, force: bool = False, timeline: Timeline | None = None
) -> list[str]:
    """Finish interrupted rollbacks whose owner is gone, then roll back pending writes whose
    writer is gone (all of them with ``force``); ``timeline``: a listing the caller just made."""
    done, busy = [], set()
    tl = timeline or table.load_timeline()
    for rb in tl.pending([Action.ROLLBACK]):
        plan = read_plan(table, rb)
        target = plan["instantToRollback"]["commitTime"]
        if any(i.time == target and i.is_completed and i.action != Action.SAVEPOINT for i in tl.instants):
            # a restore plans the rollback of a completed instant before it unpublishes it; only
            # that restore (run again) may finish it, or a committed write would lose its files
            log.info("rollback %s of completed %s belongs to a restore; leaving it", rb.time, target)
            busy.add(target)
            continue
        if not force and not heartbeat.is_expired(
            table.storage, rb.time, started_ms=table.load_timeline().last_written_ms(rb.time)
        ):
            log.info("rollback %s of %s is under way in another process; leaving it", rb.time, target)
            busy.add(target)  # not ours to roll back again either
            continue
        finish_rollback(table, rb, plan)
        done.append(target)
    rolled = set(done) | busy
    current = table.load_timeline() if done else tl  # listed again only if a rollback finished
    for inst in current.pending([Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT]):
        if inst.time in rolled:
            continue
        started = table.load_timeline().last_written_ms(inst.time)
        if force or heartbeat.is_expired(table.storage, inst.time, started_ms=started):
            try:
                rollback(table, inst)
            except InletError as e:  # completed meanwhile: its writer was alive after all
                log.warning("not rolling back %s: %s", inst.time, e)
                continue
            done.append(inst.time)
    return done
