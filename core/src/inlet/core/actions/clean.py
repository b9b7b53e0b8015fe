"""Clean: delete the file slices no reader of the retained window needs, as a ``clean`` instant.

Apache Hudi's cleaner (``CleanPlanner`` / ``CleanPlanActionExecutor`` / ``CleanActionExecutor``,
table version 8), with its policies (``hoodie.clean.policy``):

- ``KEEP_LATEST_COMMITS`` (default; ``hoodie.clean.commits.retained`` = 10): the earliest commit to
  retain is the N-th newest completed write (commit, deltacommit, replacecommit), moved back to the
  earliest pending write if one is older. In every file group the latest slice stays, and so does
  the newest slice older than that commit (a reader of the retained window's first instant needs
  it); every older slice is deleted: its base file and its log files, CDC log files (``.cdc``)
  included (Hudi's planner cleans a slice's log files of a CDC-enabled table whatever its type).
- ``KEEP_LATEST_BY_HOURS`` (``hoodie.clean.hours.retained`` = 24): the same, the earliest commit to
  retain being the first one requested within the last N hours.
- ``KEEP_LATEST_FILE_VERSIONS`` (``hoodie.clean.fileversions.retained`` = 3): the N newest slices of
  each file group stay.

Never deleted: a slice a pending compaction reads (its base instant is the plan's), files a
savepoint's instant sees, files of writes still pending. File groups replaced by a replacecommit
that completed before the earliest commit to retain are deleted whole. Failed writes are rolled
back first (their heartbeat expired), as Hudi's lazy failed-writes policy does in a clean.

Steps: ``<t>.clean.requested`` (Avro ``HoodieCleanerPlan``, version 2: full file paths per
partition), ``<t>.clean.inflight``, the deletions, ``<t>_<c>.clean`` (``HoodieCleanMetadata``). A
clean interrupted at any step is finished by the next run from its plan (a file already gone counts
as deleted). A plan that would delete nothing writes no instant.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import logging
import posixpath
import time
from collections.abc import Mapping
from typing import Any

from inlet.core import avro, faults
from inlet.core.actions.compaction_plan import read_plan
from inlet.core.actions.rollback import rollback_failed_writes
from inlet.core.commit.locks import table_lock
from inlet.core.config import ConfigKey, check_options, config_keys
from inlet.core.file_group.view import FileGroup, FileSlice, FileSystemView
from inlet.core.progress import Progress
from inlet.core.table import metadata_table
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant, State, format_instant_time
from inlet.core.write.prepare import check_writable

log = logging.getLogger(__name__)

PLAN_VERSION = 2  # CleanPlanV2MigrationHandler: filePathsToBeDeletedPerPartition with full paths
METADATA_VERSION = 2


class CleanPolicy(enum.StrEnum):
    """Hudi's ``HoodieCleaningPolicy``."""

    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"

    @classmethod
    def parse(cls, value: str) -> CleanPolicy:
        return cls(value.strip().upper())


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError("must be at least 1")
    return n


class CleanConfig:
    """Clean options (Hudi's ``HoodieCleanConfig`` names, old ``hoodie.cleaner.*`` spellings too)."""

    POLICY = ConfigKey(
        "hoodie.clean.policy",
        CleanPolicy.parse,
        CleanPolicy.KEEP_LATEST_COMMITS,
        alternatives=("hoodie.cleaner.policy",),
    )
    COMMITS_RETAINED = ConfigKey(
        "hoodie.clean.commits.retained", _positive, 10, alternatives=("hoodie.cleaner.commits.retained",)
    )
    FILE_VERSIONS_RETAINED = ConfigKey(
        "hoodie.clean.fileversions.retained",
        _positive,
        3,
        alternatives=("hoodie.cleaner.fileversions.retained",),
    )
    HOURS_RETAINED = ConfigKey(
        "hoodie.clean.hours.retained", _positive, 24, alternatives=("hoodie.cleaner.hours.retained",)
    )


@dataclasses.dataclass(frozen=True)
class CleanPlan:
    """What a clean deletes: table-relative file paths per partition."""

    policy: CleanPolicy
    earliest_to_retain: Instant | None
    files: Mapping[str, tuple[str, ...]]  # partition -> files (relative to the base path)
    last_completed_commit: str = ""

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files.values())

    def to_avro(self, base_uri: str) -> dict[str, Any]:
        e = self.earliest_to_retain
        return {
            "earliestInstantToRetain": (
                {"timestamp": e.time, "action": e.action, "state": State.COMPLETED.value}
                if e is not None
                else None
            ),
            "policy": self.policy.value,
            "filesToBeDeletedPerPartition": {},
            "version": PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                p: [{"filePath": _full(base_uri, f), "isBootstrapBaseFile": False} for f in fs]
                for p, fs in self.files.items()
            },
            "partitionsToBeDeleted": [],
            "extraMetadata": None,
        }

    @staticmethod
    def from_avro(rec: Mapping[str, Any], base_uri: str) -> CleanPlan:
        e = rec.get("earliestInstantToRetain")
        files: dict[str, tuple[str, ...]] = {}
        for p, infos in (rec.get("filePathsToBeDeletedPerPartition") or {}).items():
            files[p] = tuple(_relative(base_uri, i["filePath"]) for i in infos if i.get("filePath"))
        for p, names in (rec.get("filesToBeDeletedPerPartition") or {}).items():  # version 1 plans
            files[p] = files.get(p, ()) + tuple(posixpath.join(p, posixpath.basename(n)) for n in names)
        return CleanPlan(
            CleanPolicy.parse(rec.get("policy") or CleanPolicy.KEEP_LATEST_COMMITS.value),
            Instant(e["timestamp"], e["action"], State.COMPLETED) if e else None,
            files,
        )


def _full(base_uri: str, rel: str) -> str:
    return f"{base_uri.rstrip('/')}/{rel}"


def _relative(base_uri: str, path: str) -> str:
    """A plan's full path as a path under the table (Apache Hudi writes scheme-qualified ones)."""
    base = base_uri.rstrip("/")
    for prefix in (base, base.removeprefix("file:"), "file:" + base, "file://" + base):
        if path.startswith(prefix + "/"):
            return path[len(prefix) + 1 :]
    raise ValueError(f"clean plan path {path!r} is not under the table at {base_uri!r}")


# ------------------------------------------------------------------------------------ planning


def earliest_commit_to_retain(
    timeline: Timeline, policy: CleanPolicy, options: Mapping[str, str], now: dt.datetime | None = None
) -> Instant | None:
    """Hudi's ``CleanerUtils.getEarliestCommitToRetain``; None: nothing is old enough to clean."""
    writes = timeline.completed_writes()
    earliest: Instant | None = None
    if policy is CleanPolicy.KEEP_LATEST_COMMITS:
        retained = CleanConfig.COMMITS_RETAINED.require(options)
        if len(writes) > retained:
            earliest = writes[len(writes) - retained]
    elif policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        hours = CleanConfig.HOURS_RETAINED.require(options)
        moment = (now or dt.datetime.now(dt.UTC).replace(tzinfo=None)) - dt.timedelta(hours=hours)
        cutoff = format_instant_time(moment)
        earliest = next((i for i in writes if i.time >= cutoff), None)
    if earliest is None:
        return None
    pending = timeline.pending(Action.WRITE_ACTIONS)
    if pending and pending[0].time < earliest.time:
        return Instant(pending[0].time, pending[0].action, State.COMPLETED)
    return earliest


def _slice_files(s: FileSlice) -> list[str]:
    out = [s.base_file.path] if s.base_file is not None else []
    return out + [lf.path for lf in s.log_files] + [c.path for c in s.cdc_files]


def _protected(table: TableHandle, timeline: Timeline) -> tuple[set[tuple[str, str, str]], set[str]]:
    """(partition, file id, base instant) of slices pending compactions read, and the files every
    savepoint's instant sees."""
    slices: set[tuple[str, str, str]] = set()
    for inst in timeline.pending([Action.COMPACTION]):
        for op in read_plan(timeline, inst.time).operations:
            slices.add((op.partition, op.file_id, op.base_instant))
    files: set[str] = set()
    for sp in timeline.completed([Action.SAVEPOINT]):
        view = FileSystemView(timeline, as_of=sp.time)
        for s in view.latest_file_slices():
            files.update(_slice_files(s))
    return slices, files


def _replaced_before(timeline: Timeline, earliest: Instant | None) -> set[tuple[str, str]]:
    """File groups replaced by replacecommits that completed before ``earliest``."""
    if earliest is None:
        return set()
    out: set[tuple[str, str]] = set()
    for inst in timeline.completed([Action.REPLACE_COMMIT]):
        if inst.time < earliest.time:
            md = timeline.commit_metadata(inst)
            for p, ids in (md.partition_to_replace_file_ids or {}).items():
                out.update((p, i) for i in ids)
    return out


def _group_deletions(
    group: FileGroup,
    policy: CleanPolicy,
    earliest: Instant | None,
    versions: int,
    pending_slices: set[tuple[str, str, str]],
    saved: set[str],
) -> list[str]:
    slices = list(reversed(group.slices))  # newest first
    keep: set[str] = set()
    if policy is CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
        keep = {s.base_instant for s in slices[:versions]}
        candidates = slices[versions:]
    else:
        if earliest is None:
            return []
        keep.add(slices[0].base_instant)
        before = [s for s in slices if s.base_instant < earliest.time]
        if before:
            keep.add(before[0].base_instant)  # what a reader at the earliest retained instant sees
        candidates = [s for s in slices if s.base_instant < earliest.time]
    out: list[str] = []
    for s in candidates:
        if s.base_instant in keep or (s.partition, s.file_id, s.base_instant) in pending_slices:
            continue
        files = _slice_files(s)
        if saved.intersection(files):
            continue
        out.extend(files)
    return out


def plan_clean(
    table: TableHandle, timeline: Timeline, options: Mapping[str, str], now: dt.datetime | None = None
) -> CleanPlan:
    """The files a clean would delete now (nothing is written)."""
    opts = _options(options)
    policy = CleanConfig.POLICY.require(opts)
    versions = CleanConfig.FILE_VERSIONS_RETAINED.require(opts)
    earliest = earliest_commit_to_retain(timeline, policy, opts, now)
    view = FileSystemView(timeline)
    pending_slices, saved = _protected(table, timeline)
    replaced = _replaced_before(timeline, earliest)
    files: dict[str, list[str]] = {}
    for group in view.file_groups(include_replaced=True):
        if (group.partition, group.file_id) in view.replaced:
            if (group.partition, group.file_id) not in replaced:
                continue
            doomed = [f for s in group.slices for f in _slice_files(s) if f not in saved]
        else:
            doomed = _group_deletions(group, policy, earliest, versions, pending_slices, saved)
        if doomed:
            files.setdefault(group.partition, []).extend(doomed)
    writes = timeline.completed_writes()
    return CleanPlan(
        policy,
        earliest,
        {p: tuple(sorted(fs)) for p, fs in sorted(files.items())},
        writes[-1].time if writes else "",
    )


def _options(options: Mapping[str, str] | None) -> dict[str, str]:
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts, config_keys(CleanConfig))
    return opts


# ----------------------------------------------------------------------------------- execution


def _execute(table: TableHandle, instant: Instant, plan: CleanPlan) -> Instant:
    started = time.monotonic()
    if instant.state is State.REQUESTED:
        instant = table.commit_protocol.set_inflight(instant)
    with table_lock(table.storage):  # a metadata table would go on listing the deleted files
        metadata_table.turn_off(table.storage)
    faults.crash_point(faults.CLEAN_AFTER_PLAN)
    partition_md: dict[str, dict[str, Any]] = {}
    total = 0
    progress = Progress(
        f"clean {instant.time}", "files deleted", total=plan.file_count, table=table.base_path
    )
    for partition, files in plan.files.items():
        names = [posixpath.basename(f) for f in files]
        for f in files:
            table.storage.delete(f)  # a file already gone (an earlier, interrupted run) is fine
            progress.advance()
        total += len(files)
        partition_md[partition] = {
            "partitionPath": partition,
            "policy": plan.policy.value,
            "deletePathPatterns": names,
            "successDeleteFiles": names,
            "failedDeleteFiles": [],
            "isPartitionDeleted": False,
        }
    faults.crash_point(faults.CLEAN_AFTER_DELETE)
    e = plan.earliest_to_retain
    metadata = {
        "policy": plan.policy.value,
        "startCleanTime": instant.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": total,
        "earliestCommitToRetain": e.time if e is not None else "",
        "lastCompletedCommitTimestamp": plan.last_completed_commit,
        "partitionMetadata": partition_md,
        "version": METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
        "extraMetadata": None,
    }
    progress.finish()
    done = table.commit_protocol.finish(instant, avro.encode("HoodieCleanMetadata", metadata))
    log.info(
        "clean %s deleted %d file(s) (%s, retaining from %s)", done.time, total, plan.policy, e and e.time
    )
    return done


def read_clean_plan(table: TableHandle, instant: Instant) -> CleanPlan:
    requested = Instant(instant.time, Action.CLEAN, State.REQUESTED)
    rec = avro.decode(table.load_timeline().read_bytes(requested), f"clean plan {requested.file_name()}")
    plan = CleanPlan.from_avro(rec, table.storage.base_uri)
    if plan.last_completed_commit:
        return plan
    return dataclasses.replace(plan, last_completed_commit=rec.get("lastCompletedCommitTimestamp") or "")


@dataclasses.dataclass(frozen=True)
class CleanResult:
    instant: str | None  # the clean instant completed by this run (None: nothing to clean)
    files_deleted: int
    resumed: tuple[str, ...] = ()  # interrupted cleans finished first
    earliest_to_retain: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def clean(table: TableHandle, options: Mapping[str, str] | None = None) -> CleanResult:
    """Finish interrupted cleans, roll back failed writes, then plan and run a clean if there is
    anything to delete."""
    check_writable(table)
    opts = _options(options)
    resumed = []
    deleted = 0
    for pending in table.load_timeline().pending([Action.CLEAN]):
        plan = read_clean_plan(table, pending)
        _execute(table, pending, plan)
        resumed.append(pending.time)
        deleted += plan.file_count
    rollback_failed_writes(table)
    with table_lock(table.storage):
        tl = table.commit_protocol.timeline()
        plan = plan_clean(table, tl, opts)
        if not plan.file_count:
            log.info("nothing to clean (%s)", plan.policy)
            return CleanResult(None, deleted, tuple(resumed))
        instant = table.commit_protocol.begin(
            Action.CLEAN, avro.encode("HoodieCleanerPlan", plan.to_avro(table.storage.base_uri))
        )
    done = _execute(table, instant, plan)
    e = plan.earliest_to_retain
    return CleanResult(done.time, deleted + plan.file_count, tuple(resumed), e.time if e else None)


def cleans(table: TableHandle) -> list[dict[str, Any]]:
    """The clean instants on the active timeline: state, policy, what they deleted or will."""
    out = []
    for inst in table.load_timeline().instants:
        if inst.action != Action.CLEAN:
            continue
        doc: dict[str, Any] = {
            "instant": inst.time,
            "state": inst.state.value,
            "completion_time": inst.completion_time,
        }
        if inst.is_completed:
            md = avro.decode(table.load_timeline().read_bytes(inst), f"clean {inst.file_name()}")
            doc.update(
                policy=md.get("policy") or None,
                earliest_commit_to_retain=md.get("earliestCommitToRetain") or None,
                files_deleted=md.get("totalFilesDeleted"),
                partitions=sorted(md.get("partitionMetadata") or {}),
            )
        else:
            plan = read_clean_plan(table, inst)
            doc.update(
                policy=plan.policy.value, files_to_delete=plan.file_count, partitions=sorted(plan.files)
            )
        out.append(doc)
    return out
