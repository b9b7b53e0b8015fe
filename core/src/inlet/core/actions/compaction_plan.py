"""Merge-on-Read compaction, step 1: the plan and its scheduling (Apache Hudi's ``ScheduleCompactionActionExecutor``).

:func:`schedule` decides whether a compaction is due (the trigger strategy: ``NUM_COMMITS``
counts delta commits since the last completed compaction, ``TIME_ELAPSED`` the seconds since it
(or since the first delta commit), ``NUM_OR_TIME``, ``NUM_AND_TIME``), picks the latest file
slices that have log files (not those of file groups under a pending compaction or clustering),
orders them by the strategy (total log size or log count, largest first), caps them by
``hoodie.compaction.target.io`` (MB read + written, Hudi's ``BoundedIOCompactionStrategy``), and
writes ``<t>.compaction.requested``: an Avro ``HoodieCompactionPlan`` naming per file group its
base file and log files (file names, not paths) with Hudi's size metrics.

The plan takes only log files whose deltacommit **completed before** ``t``. Under the local
commit protocol the plan is made under the table lock and ``t`` is issued under it, after every
completion time on the timeline: every completed log is in the plan, and every log completing
later has a completion time after ``t``, so file slicing (by completion time) puts it in the new
slice that the compacted base file starts. Writers keep appending while a compaction is pending
or running; nothing they write is lost. Running the plan is :mod:`inlet.core.actions.compaction_run`.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inlet.core import avro, faults
from inlet.core.commit.locks import table_lock
from inlet.core.commit.protocol import now_instant_time
from inlet.core.config import (
    CompactionConfig,
    CompactionStrategy,
    CompactionTrigger,
    TableConfig,
    TableType,
    WriteConfig,
    check_options,
    config_keys,
)
from inlet.core.errors import (
    CommitConflictError,
    InletError,
    UnsupportedError,
)
from inlet.core.file_group.view import (
    FileSlice,
    FileSystemView,
    LogFile,
)
from inlet.core.storage import FileInfo
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State, parse_instant_time
from inlet.core.write.prepare import check_write_options

log = logging.getLogger(__name__)

PLAN_VERSION = 2  # HoodieCompactionPlan version Apache Hudi 1.x writes
COMPACTION_TABLE_VERSIONS = (8, 9)
BYTES_PER_MB = 1024 * 1024

# plan metrics (Hudi's CompactionStrategy / FileSliceMetricUtils names), in the order Hudi writes them
TOTAL_LOG_FILES = "TOTAL_LOG_FILES"
TOTAL_IO_MB = "TOTAL_IO_MB"
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"

# fault-injection points (see inlet.core.faults)
AFTER_SCHEDULED = "compaction_after_scheduled"

_SCHEDULE_ATTEMPTS = 3


@dataclass(frozen=True)
class CompactionOperation:
    """One file group of a plan: its base file (None for a log-only file group) and log files."""

    partition: str
    file_id: str
    base_instant: str
    base_file: str | None  # file name within the partition
    log_files: tuple[str, ...]  # file names within the partition, in slice order
    metrics: Mapping[str, float] = field(default_factory=dict)
    bootstrap_file: str | None = None  # bootstrap tables only (not supported)

    @property
    def log_size(self) -> int:
        return int(self.metrics.get(TOTAL_LOG_FILES_SIZE, 0))

    @property
    def io_mb(self) -> int:
        return int(self.metrics.get(TOTAL_IO_MB, 0))

    def path(self, name: str) -> str:
        return posixpath.join(self.partition, name) if self.partition else name

    def to_avro(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.log_files),
            "dataFilePath": self.base_file,
            "fileId": self.file_id,
            "partitionPath": self.partition,
            "metrics": {k: float(v) for k, v in self.metrics.items()},
            "bootstrapFilePath": self.bootstrap_file,
        }

    @classmethod
    def from_avro(cls, rec: Mapping[str, Any]) -> CompactionOperation:
        # plans of older Hudi versions may hold partition-relative paths: keep the file names
        return cls(
            partition=rec.get("partitionPath") or "",
            file_id=rec.get("fileId") or "",
            base_instant=rec.get("baseInstantTime") or "",
            base_file=posixpath.basename(rec["dataFilePath"]) if rec.get("dataFilePath") else None,
            log_files=tuple(posixpath.basename(p) for p in rec.get("deltaFilePaths") or ()),
            metrics=dict(rec.get("metrics") or {}),
            bootstrap_file=rec.get("bootstrapFilePath"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "file_id": self.file_id,
            "base_instant": self.base_instant,
            "base_file": self.base_file,
            "log_files": list(self.log_files),
            "metrics": dict(self.metrics),
        }


@dataclass(frozen=True)
class CompactionPlan:
    """``HoodieCompactionPlan``."""

    operations: tuple[CompactionOperation, ...]
    extra_metadata: Mapping[str, str] = field(default_factory=dict)
    version: int = PLAN_VERSION

    def file_groups(self) -> set[tuple[str, str]]:
        return {(op.partition, op.file_id) for op in self.operations}

    def to_bytes(self) -> bytes:
        return avro.encode(
            "HoodieCompactionPlan",
            {
                "operations": [op.to_avro() for op in self.operations],
                "extraMetadata": dict(self.extra_metadata),
                "version": self.version,
                "strategy": None,
                "preserveHoodieMetadata": False,
                "missingSchedulePartitions": [],
            },
        )

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "compaction plan") -> CompactionPlan:
        if not data:
            return cls(())  # an empty requested file: a plan with nothing to do
        rec = avro.decode(data, what)
        return cls(
            operations=tuple(CompactionOperation.from_avro(op) for op in rec.get("operations") or ()),
            extra_metadata=dict(rec.get("extraMetadata") or {}),
            version=int(rec.get("version") or 1),
        )


def _requested(instant_time: str) -> Instant:
    return Instant(instant_time, Action.COMPACTION, State.REQUESTED)


def _inflight(instant_time: str) -> Instant:
    return Instant(instant_time, Action.COMPACTION, State.INFLIGHT)


def read_plan(timeline: Timeline, instant_time: str) -> CompactionPlan:
    """The plan of compaction ``instant_time`` (its ``.compaction.requested`` file)."""
    req = _requested(instant_time)
    return CompactionPlan.from_bytes(timeline.read_bytes(req), f"compaction plan {req.file_name()}")


def _check_table(table: TableHandle) -> None:
    if table.meta.table_type is not TableType.MERGE_ON_READ:
        raise UnsupportedError("compaction applies to Merge-on-Read tables only; this table is Copy-on-Write")
    if table.meta.version not in COMPACTION_TABLE_VERSIONS or table.meta.layout_version < 2:
        raise UnsupportedError(
            f"Inlet compacts tables of version 8 and 9 (timeline layout 2); this table is version "
            f"{table.meta.version}"
        )
    if not table.meta.populate_meta_fields:
        raise UnsupportedError("compaction needs hoodie.populate.meta.fields=true")
    base_format = (TableConfig.BASE_FILE_FORMAT.get(table.meta.props) or "PARQUET").upper()
    if base_format != "PARQUET":
        raise UnsupportedError(f"Inlet compacts into Parquet base files; this table's are {base_format}")


def _options(options: Mapping[str, str] | None) -> dict[str, str]:
    """The options as strings, every compaction and write option checked (the run writes base
    files and heartbeats with the write options): a bad value raises
    :class:`~inlet.core.errors.InvalidOptionError` before any work, no instant is left behind."""
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts, config_keys(CompactionConfig))
    check_write_options(opts)  # hoodie.metadata.enable=true refused: its completion turns it off
    return opts


@dataclass(frozen=True)
class Trigger:
    """Whether a compaction is due, and why."""

    due: bool
    delta_commits: int
    seconds_elapsed: int
    reason: str


def _seconds(instant_time: str) -> int:
    return int(parse_instant_time(instant_time).timestamp())


def compaction_trigger(timeline: Timeline, options: Mapping[str, str], now: str | None = None) -> Trigger:
    """Hudi's ``needCompact``: delta commits (any state) since the last completed compaction, and
    seconds since it (or, before the first compaction, since the first delta commit)."""
    strategy = CompactionConfig.TRIGGER_STRATEGY.require(options)
    max_commits = CompactionConfig.MAX_DELTA_COMMITS.require(options)
    max_seconds = CompactionConfig.MAX_DELTA_SECONDS.require(options)
    compactions = timeline.completed([Action.COMMIT])
    last = compactions[-1].time if compactions else None
    deltas = [
        i for i in timeline.instants if i.action == Action.DELTA_COMMIT and (last is None or i.time > last)
    ]
    if last is None and not deltas:
        return Trigger(False, 0, 0, "no delta commits yet")
    since = last if last is not None else deltas[0].time
    elapsed = _seconds(now or now_instant_time()) - _seconds(since)
    by_num = len(deltas) >= max_commits
    by_time = elapsed >= max_seconds
    due = {
        CompactionTrigger.NUM_COMMITS: by_num,
        CompactionTrigger.TIME_ELAPSED: by_time,
        CompactionTrigger.NUM_OR_TIME: by_num or by_time,
        CompactionTrigger.NUM_AND_TIME: by_num and by_time,
    }[strategy]
    reason = (
        f"{strategy.value}: {len(deltas)} delta commit(s) (threshold {max_commits}) and {elapsed}s "
        f"(threshold {max_seconds}s) since {'compaction ' + last if last else 'the first delta commit'}"
    )
    return Trigger(due, len(deltas), elapsed, reason)


def _metrics(fs: FileSlice, logs: Sequence[LogFile], default_base_size: int) -> dict[str, float]:
    """Hudi's ``FileSliceMetricUtils.addFileSliceCommonMetrics`` (sizes in whole MB)."""
    log_size = sum(max(0, lf.size) for lf in logs)
    base_size = fs.base_file.size if fs.base_file is not None else 0
    read_mb = (base_size + log_size) // BYTES_PER_MB
    write_mb = (base_size if base_size > 0 else default_base_size) // BYTES_PER_MB
    return {
        TOTAL_LOG_FILES: float(len(logs)),
        TOTAL_IO_MB: float(read_mb + write_mb),
        TOTAL_IO_READ_MB: float(read_mb),
        TOTAL_LOG_FILES_SIZE: float(log_size),
        TOTAL_IO_WRITE_MB: float(write_mb),
    }


def select_operations(
    operations: Sequence[CompactionOperation], options: Mapping[str, str]
) -> list[CompactionOperation]:
    """Order and filter candidate operations by the strategy, then cap them by the target I/O.

    ``LOG_SIZE``: operations whose total log size reaches ``hoodie.compaction.logfile.size.threshold``,
    largest first; ``LOG_COUNT``: those with at least ``hoodie.compaction.logfile.num.threshold``
    log files, most first. Then, as Hudi's ``BoundedIOCompactionStrategy``, operations are taken in
    that order until their ``TOTAL_IO_MB`` reaches ``hoodie.compaction.target.io`` (the one that
    reaches it is still taken).
    """
    strategy = CompactionConfig.STRATEGY.require(options)
    if strategy is CompactionStrategy.LOG_SIZE:
        size_threshold = CompactionConfig.LOG_FILE_SIZE_THRESHOLD.require(options)
        ordered = sorted((o for o in operations if o.log_size >= size_threshold), key=lambda o: -o.log_size)
    else:
        num_threshold = CompactionConfig.LOG_FILE_NUM_THRESHOLD.require(options)
        ordered = sorted(
            (o for o in operations if len(o.log_files) >= num_threshold), key=lambda o: -len(o.log_files)
        )
    remaining = CompactionConfig.TARGET_IO_MB.require(options)
    chosen = []
    for op in ordered:
        remaining -= op.io_mb
        chosen.append(op)
        if remaining <= 0:
            break
    return chosen


def _plans_of(timeline: Timeline, actions: Iterable[str]) -> list[tuple[Instant, CompactionPlan]]:
    out = []
    for inst in timeline.pending(actions):
        out.append((inst, read_plan(timeline, inst.time)))
    return out


def file_groups_under_clustering(timeline: Timeline) -> set[tuple[str, str]]:
    """File groups named by pending clustering plans (Apache Hudi's or Inlet's)."""
    out: set[tuple[str, str]] = set()
    for inst in timeline.pending([Action.CLUSTERING, Action.REPLACE_COMMIT]):
        try:
            rec = avro.decode(timeline.read_bytes(Instant(inst.time, inst.action, State.REQUESTED)))
        except InletError:
            continue  # an empty requested file (insert_overwrite): no clustering plan
        plan = rec.get("clusteringPlan") or {}
        for group in plan.get("inputGroups") or ():
            for s in group.get("slices") or ():
                out.add((s.get("partitionPath") or "", s.get("fileId") or ""))
    return out


def plan_compaction(
    table: TableHandle,
    timeline: Timeline,
    options: Mapping[str, str],
    files: Sequence[FileInfo] | None = None,
) -> CompactionPlan:
    """The operations a compaction scheduled now would take (every committed log of each chosen
    file slice: under the table lock all of them completed before the next instant time)."""
    view = FileSystemView(timeline, None, list(files) if files is not None else None)
    busy = {fg for _, plan in _plans_of(timeline, [Action.COMPACTION]) for fg in plan.file_groups()}
    busy |= file_groups_under_clustering(timeline)
    default_base_size = WriteConfig.PARQUET_MAX_FILE_SIZE.require(options)
    candidates = []
    for fs in view.latest_file_slices():
        if (fs.partition, fs.file_id) in busy:
            continue
        logs = [lf for lf in fs.log_files if not lf.is_cdc]
        if not logs:
            continue
        candidates.append(
            CompactionOperation(
                partition=fs.partition,
                file_id=fs.file_id,
                base_instant=fs.base_instant,
                base_file=fs.base_file.name if fs.base_file is not None else None,
                log_files=tuple(lf.name for lf in logs),
                metrics=_metrics(fs, logs, default_base_size),
            )
        )
    return CompactionPlan(tuple(select_operations(candidates, options)))


def _late_completions(
    table: TableHandle, instant_time: str, known: set[str], plan: CompactionPlan
) -> list[Instant]:
    """Writes that completed before ``instant_time`` without being seen by the plan and that touched
    its file groups (possible only with a commit protocol that does not share the table lock)."""
    tl = table.commit_protocol.timeline()
    groups = plan.file_groups()
    late = []
    for inst in tl.completed_writes():
        if inst.time in known or (inst.completion_time or inst.time) >= instant_time:
            continue
        if tl.commit_metadata(inst).touched_file_groups() & groups:
            late.append(inst)
    return late


def schedule(table: TableHandle, options: Mapping[str, str] | None = None) -> str | None:
    """Schedule a compaction if one is due and there is something to compact.

    Returns the instant time of the new ``<t>.compaction.requested``, or None (not due, or no
    file slice with log files outside pending compactions).
    """
    _check_table(table)
    opts = _options(options)
    storage = table.storage
    protocol = table.commit_protocol
    for _attempt in range(_SCHEDULE_ATTEMPTS):
        with table_lock(storage):
            tl = protocol.timeline()
            trigger = compaction_trigger(tl, opts)
            if not trigger.due:
                log.info("no compaction scheduled: %s", trigger.reason)
                return None
            plan = plan_compaction(table, tl, opts)
            if not plan.operations:
                log.info("no compaction scheduled: no file slice with log files to compact")
                return None
            known = {i.time for i in tl.completed_writes()}
            instant = protocol.begin(Action.COMPACTION, plan.to_bytes())
        late = _late_completions(table, instant.time, known, plan)
        if not late:
            faults.crash_point(AFTER_SCHEDULED)
            log.info(
                "scheduled compaction %s: %d file group(s), %d log file(s) (%s)",
                instant.time,
                len(plan.operations),
                sum(len(op.log_files) for op in plan.operations),
                trigger.reason,
            )
            return instant.time
        # a write completed between the plan and its instant time: its logs would be left in the
        # old slice, so this plan must not run; take it back and plan again
        log.warning(
            "compaction %s missed write(s) %s that completed meanwhile; planning again",
            instant.time,
            ", ".join(i.time for i in late),
        )
        storage.delete(tl.path_of(_requested(instant.time)))
    raise CommitConflictError("could not schedule a compaction: writes kept completing meanwhile; retry")


@dataclass(frozen=True)
class CompactionInfo:
    """A compaction on the timeline: its plan and, once completed, what it wrote."""

    instant_time: str
    state: State
    completion_time: str | None
    plan: CompactionPlan
    metadata: CommitMetadata | None = None

    def to_dict(self) -> dict[str, Any]:
        ops = self.plan.operations
        doc: dict[str, Any] = {
            "instant": self.instant_time,
            "state": self.state.value,
            "completion_time": self.completion_time,
            "file_groups": len(ops),
            "log_files": sum(len(op.log_files) for op in ops),
            "log_size": sum(op.log_size for op in ops),
            "operations": [op.to_dict() for op in ops],
        }
        if self.metadata is not None:
            stats = self.metadata.write_stats()
            doc["result"] = {
                "files": [s.path for s in stats],
                "records_written": sum(s.num_writes for s in stats),
                "updates": sum(s.num_update_writes for s in stats),
                "deletes": sum(s.num_deletes for s in stats),
                "inserts": sum(s.num_inserts for s in stats),
                "log_records": sum(s.total_log_records for s in stats),
            }
        return doc


def show(table: TableHandle) -> list[CompactionInfo]:
    """Every compaction on the active timeline, pending and completed, oldest first."""
    tl = table.load_timeline()
    names = {posixpath.basename(f.path) for f in table.storage.list_files(tl.dir)}
    out = []
    for inst in tl.instants:
        pending = inst.action == Action.COMPACTION and not inst.is_completed
        completed = inst.is_completed and inst.action == Action.COMMIT
        if not (pending or completed) or _requested(inst.time).file_name() not in names:
            continue
        out.append(
            CompactionInfo(
                instant_time=inst.time,
                state=inst.state,
                completion_time=inst.completion_time,
                plan=read_plan(tl, inst.time),
                metadata=tl.commit_metadata(inst) if completed else None,
            )
        )
    return out


def pending_compactions(table: TableHandle) -> list[str]:
    """Instant times of the pending (requested or inflight) compactions, oldest first."""
    return [i.time for i in table.load_timeline().pending([Action.COMPACTION])]
