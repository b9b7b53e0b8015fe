"""Savepoints: a completed commit marked so that clean and archive keep what it sees.

Apache Hudi 1.x (table version 8, ``SavepointActionExecutor``): a savepoint takes the *requested
time of the commit it protects*; it has no requested file, only ``<t>.savepoint.inflight``
(empty) and then the completed ``<t>_<c>.savepoint`` holding a ``HoodieSavepointMetadata``
(``savepointedBy``, ``savepointedAt`` in epoch seconds, ``comments``, and per partition the file
names of the latest file slices as of the instant: base files and log files).

Only a completed commit, deltacommit or replacecommit on the active timeline can be savepointed,
and not one older than what the last clean kept (``getLastCommitRetained``: the earliest commit
the last clean retained, from its metadata or, while pending, its plan; with no clean, the first
completed commit). Deleting a savepoint removes its completed then its inflight file
(``SavepointHelpers.deleteSavepoint``). Clean (:mod:`inlet.core.actions.clean`) keeps every file a
savepoint sees and archive (:mod:`inlet.core.actions.archive`) stops at the first savepoint.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import time
from typing import Any

from inlet.core import avro
from inlet.core.actions.clean import read_clean_plan
from inlet.core.commit.locks import table_lock
from inlet.core.errors import InvalidInputError
from inlet.core.file_group.view import FileSystemView
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time
from inlet.core.write.prepare import check_writable

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SavepointInfo:
    instant: str  # the savepointed commit's requested time (also the savepoint's)
    completion_time: str | None
    savepointed_by: str
    savepointed_at: int  # epoch seconds
    comment: str
    partitions: dict[str, list[str]]  # partition -> file names the savepoint keeps

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["files"] = sum(len(v) for v in self.partitions.values())
        return d


def last_commit_retained(table: TableHandle, timeline: Timeline) -> str | None:
    """Hudi's ``SavepointActionExecutor.getLastCommitRetained``: instants before it may have been
    cleaned, so they cannot be savepointed."""
    cleans = [i for i in timeline.instants if i.action == Action.CLEAN]
    writes = timeline.completed_writes()
    if not cleans:
        return writes[0].time if writes else None
    last = cleans[-1]
    if last.is_completed:
        md = avro.decode(timeline.read_bytes(last), f"clean {last.file_name()}")
        earliest = md.get("earliestCommitToRetain") or None
    else:
        plan = read_clean_plan(table, last)
        earliest = plan.earliest_to_retain.time if plan.earliest_to_retain else None
    if earliest:
        return str(earliest)
    before = [w.time for w in writes if w.time <= last.time]
    return before[-1] if before else last.time


def savepointed_files(timeline: Timeline, instant_time: str) -> dict[str, list[str]]:
    """Partition -> names of the base and log files of the latest file slices as of the instant."""
    out: dict[str, list[str]] = {}
    for s in FileSystemView(timeline, as_of=instant_time).latest_file_slices():
        names = out.setdefault(s.partition, [])
        if s.base_file is not None:
            names.append(s.base_file.path.rsplit("/", 1)[-1])
        names.extend(lf.path.rsplit("/", 1)[-1] for lf in s.log_files)
    return {p: sorted(v) for p, v in sorted(out.items())}


def _completed_savepoint(timeline: Timeline, t: str) -> Instant | None:
    return next((i for i in timeline.completed([Action.SAVEPOINT]) if i.time == t), None)


def create_savepoint(
    table: TableHandle, instant_time: str, user: str | None = None, comment: str = ""
) -> SavepointInfo:
    """Savepoint the completed write requested at ``instant_time``."""
    check_writable(table)
    t = normalize_instant_time(instant_time)
    with table_lock(table.storage):
        tl = table.commit_protocol.timeline()
        target = next((i for i in tl.instants if i.time == t and i.action != Action.SAVEPOINT), None)
        if target is None:
            raise InvalidInputError(f"cannot savepoint {t}: no such instant on the active timeline")
        if target.action not in Action.WRITE_ACTIONS or not target.is_completed:
            state = "pending" if not target.is_completed else "not a commit"
            raise InvalidInputError(
                f"cannot savepoint {t}: it is a {state} {target.action}; only a completed "
                "commit, deltacommit or replacecommit can be savepointed"
            )
        if _completed_savepoint(tl, t) is not None:
            raise InvalidInputError(f"cannot savepoint {t}: it is already savepointed")
        retained = last_commit_retained(table, tl)
        if retained is not None and t < retained:
            raise InvalidInputError(
                f"cannot savepoint {t}: the last clean kept only commits from {retained} on, so files "
                f"{t} reads may be gone"
            )
        partitions = savepointed_files(tl, t)
        metadata = {
            "savepointedBy": user if user is not None else _user(),
            "savepointedAt": int(time.time()),
            "comments": comment,
            "partitionMetadata": {
                p: {"partitionPath": p, "savepointDataFile": names} for p, names in partitions.items()
            },
        }
        inflight = table.commit_protocol.set_inflight(Instant(t, Action.SAVEPOINT, State.REQUESTED))
        done = table.commit_protocol.finish(inflight, avro.encode("HoodieSavepointMetadata", metadata))
    log.info("savepoint %s created (%d files)", t, sum(len(v) for v in partitions.values()))
    return _info(done, metadata)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without passwd entry)
        return "inlet"


def _info(inst: Instant, md: dict[str, Any]) -> SavepointInfo:
    return SavepointInfo(
        inst.time,
        inst.completion_time,
        md.get("savepointedBy") or "",
        int(md.get("savepointedAt") or 0),
        md.get("comments") or "",
        {
            p: list(pm.get("savepointDataFile") or [])
            for p, pm in sorted((md.get("partitionMetadata") or {}).items())
        },
    )


def list_savepoints(table: TableHandle) -> list[SavepointInfo]:
    """The completed savepoints on the active timeline, oldest first."""
    tl = table.load_timeline()
    return [
        _info(sp, avro.decode(tl.read_bytes(sp), f"savepoint {sp.file_name()}"))
        for sp in tl.completed([Action.SAVEPOINT])
    ]


def delete_savepoint(table: TableHandle, instant_time: str) -> None:
    """Remove a savepoint's completed and inflight files; its commit may then be cleaned,
    archived or restored past."""
    t = normalize_instant_time(instant_time)
    with table_lock(table.storage):
        tl = table.commit_protocol.timeline()
        sp = _completed_savepoint(tl, t)
        if sp is None:
            raise InvalidInputError(f"no savepoint at {t}")
        table.storage.delete(tl.path_of(sp))
        table.storage.delete(tl.path_of(Instant(t, Action.SAVEPOINT, State.INFLIGHT)))
    log.info("savepoint %s deleted", t)
