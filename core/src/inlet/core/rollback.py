"""Rolling back failed (pending) writes: a rollback instant plus deletion of the write's files.

Steps, as Apache Hudi takes them: ``<r>.rollback.requested`` (a ``HoodieRollbackPlan`` naming
the files), ``<r>.rollback.inflight``, delete the files, ``<r>_<c>.rollback``
(``HoodieRollbackMetadata``), then remove the failed instant's own timeline files and markers.
A rollback interrupted half-way is finished by the next one from its plan.
"""

from __future__ import annotations

import logging
import posixpath
import time
from typing import TYPE_CHECKING, Any

from inlet.core import avro, heartbeat, markers
from inlet.core.filegroups import BaseFile, LogFile, list_data_files
from inlet.core.instant import Action, Instant, State

if TYPE_CHECKING:
    from inlet.core.table import HudiTable

log = logging.getLogger("inlet.core.rollback")


def _files_of(table: HudiTable, instant_time: str) -> list[str]:
    files = set(markers.marked_files(table.storage, instant_time))
    for info in list_data_files(table.storage):
        parsed: BaseFile | LogFile | None = BaseFile.parse(info.path) or LogFile.parse(info.path)
        if parsed is not None and parsed.instant_time == instant_time:
            files.add(info.path)
    return sorted(files)


def _plan(instant: Instant, files: list[str]) -> dict[str, Any]:
    by_partition: dict[str, list[str]] = {}
    for f in files:
        by_partition.setdefault(posixpath.dirname(f), []).append(f)
    return {
        "instantToRollback": {"commitTime": instant.time, "action": instant.action},
        "RollbackRequests": [
            {
                "partitionPath": p,
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": fs,
                "logBlocksToBeDeleted": {},
            }
            for p, fs in sorted(by_partition.items())
        ],
        "version": 1,
    }


def _execute(table: HudiTable, rollback_instant: Instant, plan: dict[str, Any]) -> None:
    started = time.monotonic()
    storage = table.storage
    tl = table.timeline
    target = plan["instantToRollback"]
    deleted: dict[str, list[str]] = {}
    for req in plan.get("RollbackRequests") or []:
        for f in req.get("filesToBeDeleted") or []:
            storage.delete(f)
            deleted.setdefault(req["partitionPath"], []).append(f)
    metadata = {
        "startRollbackTime": rollback_instant.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": sum(len(v) for v in deleted.values()),
        "commitsRollback": [target["commitTime"]],
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
        "instantsRollback": [{"commitTime": target["commitTime"], "action": target["action"]}],
    }
    # remove the failed instant's timeline files, newest state first, then complete the rollback
    for inst in tl.instants:
        if inst.time == target["commitTime"] and not inst.is_completed:
            for state in (State.INFLIGHT, State.REQUESTED):
                storage.delete(tl.path_of(Instant(inst.time, inst.action, state)))
    markers.delete_markers(storage, target["commitTime"])
    heartbeat.delete(storage, target["commitTime"])
    table.commit_protocol.finish(rollback_instant, avro.encode("HoodieRollbackMetadata", metadata))


def rollback(table: HudiTable, instant: Instant) -> str:
    """Roll back one pending write instant; returns the rollback instant time."""
    files = _files_of(table, instant.time)
    plan = _plan(instant, files)
    rb = table.commit_protocol.begin(Action.ROLLBACK, avro.encode("HoodieRollbackPlan", plan))
    table.commit_protocol.set_inflight(rb)
    _execute(table, rb, plan)
    log.info("rolled back %s %s (%d files)", instant.action, instant.time, len(files))
    return rb.time


def rollback_failed_writes(table: HudiTable, force: bool = False) -> list[str]:
    """Finish interrupted rollbacks, then roll back pending writes whose writer is gone."""
    done = []
    tl = table.timeline
    for rb in tl.pending([Action.ROLLBACK]):
        requested = Instant(rb.time, rb.action, State.REQUESTED)
        plan = avro.decode(table.storage.read_bytes(tl.path_of(requested)), "rollback plan")
        _execute(table, rb, plan)
        done.append(plan["instantToRollback"]["commitTime"])
    tl = table.timeline
    rolled = set(done)
    for inst in tl.pending([Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT]):
        if inst.time in rolled:
            continue
        if force or heartbeat.is_expired(table.storage, inst.time):
            rollback(table, inst)
            done.append(inst.time)
    return done
