"""Merge-on-Read compaction: merge file slices' log files into new base files, as Apache Hudi does.

Three steps (Apache Hudi's ``ScheduleCompactionActionExecutor``, ``RunCompactionActionExecutor``):

1. **schedule** (:func:`schedule`) — decide whether a compaction is due (the trigger strategy:
   ``NUM_COMMITS`` counts delta commits since the last completed compaction, ``TIME_ELAPSED``
   the seconds since it (or since the first delta commit), ``NUM_OR_TIME``, ``NUM_AND_TIME``),
   pick the latest file slices that have log files (not those of file groups under a pending
   compaction or clustering), order them by the strategy (total log size or log count, largest
   first), cap them by ``hoodie.compaction.target.io`` (MB read + written, Hudi's
   ``BoundedIOCompactionStrategy``), and write ``<t>.compaction.requested``: an Avro
   ``HoodieCompactionPlan`` naming per file group its base file and log files (file names, not
   paths) with Hudi's size metrics.

   The plan takes only log files whose deltacommit **completed before** ``t``. Under the local
   commit protocol the plan is made under the table lock and ``t`` is issued under it, after
   every completion time on the timeline: every completed log is in the plan, and every log
   completing later has a completion time after ``t``, so file slicing (by completion time)
   puts it in the new slice that the compacted base file starts. Writers keep appending while a
   compaction is pending or running; nothing they write is lost.

2. **run** (:func:`run`) — ``<t>.compaction.inflight`` (empty, as Hudi writes it), then per
   operation one new base file ``<fileId>_<token>_<t>.parquet`` holding the file slice merged
   with exactly the plan's log files, by the rules of every read
   (:func:`inlet.core.file_group.reader.read_file_slice`). Records keep the
   ``_hoodie_commit_time`` / ``_hoodie_commit_seqno`` of the write that produced them (Hudi's
   compaction preserves them); ``_hoodie_file_name`` names the new file. Markers and a heartbeat
   guard the run as they guard writes. The instant completes as ``<t>_<c>.commit``:
   ``HoodieCommitMetadata`` with ``compacted = true``, ``operationType = COMPACT``, the schema,
   and one write stat per new base file (``prevCommit`` = the old base instant, ``prevBaseFile``,
   ``totalLogFilesCompacted``, ``totalLogSizeCompacted``, ``totalLogRecords``, ...). Completion
   is not conflict-checked: a compaction's plan is fixed, and deltacommits appended meanwhile
   belong to the next slice.

3. **failure** — a run that fails is rolled back at once: its data files and markers are
   deleted and its inflight file removed, while the requested plan stays so the compaction can be
   run again (Hudi's ``rollbackInflightCompaction``). A crashed run leaves the inflight instant;
   the next :func:`run` rolls it back once its heartbeat has expired, then runs the plan again.

Readers ignore a pending compaction: its base files belong to no completed instant.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import avro, faults
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.locks import table_lock
from inlet.core.commit.protocol import check_still_pending, now_instant_time
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    CompactionConfig,
    CompactionStrategy,
    CompactionTrigger,
    TableConfig,
    TableType,
    WriteConfig,
    WriteOperation,
    check_options,
    config_keys,
)
from inlet.core.errors import (
    CommitConflictError,
    CorruptFileError,
    InletError,
    InstantNotFoundError,
    InvalidInputError,
    UnsupportedError,
)
from inlet.core.file_group.reader import BlockFilter, read_file_slice
from inlet.core.file_group.view import (
    BaseFile,
    CommittedInstants,
    FileSlice,
    FileSystemView,
    LogFile,
    base_file_name,
    list_data_files,
    write_token,
)
from inlet.core.merge.records import MergeConfig, SliceStats
from inlet.core.read.snapshot import merge_config
from inlet.core.schema import META_COLUMNS, MetaField, from_avro_schema, meta_schema
from inlet.core.storage import FileInfo, Storage
from inlet.core.table import properties as props_io
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time, parse_instant_time
from inlet.core.write.files import ensure_partition_metadata
from inlet.core.write.prepare import WRITE_OPTION_KEYS
from inlet.core.write.run import remove_stray_files

log = logging.getLogger(__name__)

PLAN_VERSION = 2  # HoodieCompactionPlan version Apache Hudi 1.x writes
COMPACTION_TABLE_VERSIONS = (8, 9)
BYTES_PER_MB = 1024 * 1024
METADATA_PARTITIONS_KEY = "hoodie.table.metadata.partitions"
METADATA_INFLIGHT_PARTITIONS_KEY = "hoodie.table.metadata.partitions.inflight"
METADATA_TABLE_DIR = ".hoodie/metadata"

# plan metrics (Hudi's CompactionStrategy / FileSliceMetricUtils names), in the order Hudi writes them
TOTAL_LOG_FILES = "TOTAL_LOG_FILES"
TOTAL_IO_MB = "TOTAL_IO_MB"
TOTAL_IO_READ_MB = "TOTAL_IO_READ_MB"
TOTAL_LOG_FILES_SIZE = "TOTAL_LOG_FILES_SIZE"
TOTAL_IO_WRITE_MB = "TOTAL_IO_WRITE_MB"

# fault-injection points (see inlet.core.faults)
AFTER_SCHEDULED = "compaction_after_scheduled"
AFTER_INFLIGHT = "compaction_after_inflight"
AFTER_FIRST_FILE = "compaction_after_first_file"
AFTER_DATA_FILES = "compaction_after_data_files"
BEFORE_COMPLETE = "compaction_before_complete"

_SCHEDULE_ATTEMPTS = 3
# rows per row group of a compacted base file (merged pieces are buffered up to it)
ROW_GROUP_ROWS = 256 * 1024


# ---------------------------------------------------------------------------------- the plan


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


# ---------------------------------------------------------------------------------- checks


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


def _has_metadata_table(table: TableHandle) -> bool:
    """Whether readers list the table's files through its metadata table (Hudi decides by this key)."""
    return bool(table.meta.props.get(METADATA_PARTITIONS_KEY, "").strip())


def _check_metadata_table(table: TableHandle, options: Mapping[str, str]) -> None:
    """A table with a metadata table is compacted only after deleting it (``hoodie.metadata.enable
    = false``): Inlet cannot add the new base files to it, and readers that list files through
    it (hudi-rs and Apache Hudi do) would not see them while cleaners and writers relied on it.

    Deleting it is what Apache Hudi does when a writer disables the metadata table: the table
    config stops naming its partitions (readers list the file system from then on), then
    ``.hoodie/metadata`` goes. Apache Hudi builds it again when a writer enables it.
    """
    if not _has_metadata_table(table):
        return
    if CompactionConfig.METADATA_ENABLE.get(options) is not False:
        raise UnsupportedError(
            f"the table has a metadata table ({table.meta.props[METADATA_PARTITIONS_KEY]}), which Inlet "
            "cannot update; run the compaction with hoodie.metadata.enable=false to delete it first "
            "(Apache Hudi rebuilds it when a writer enables it again)"
        )
    with table_lock(table.storage):
        props = props_io.read_properties(table.storage)
        for key in (METADATA_PARTITIONS_KEY, METADATA_INFLIGHT_PARTITIONS_KEY):
            if key in props:
                props[key] = ""
        props_io.write_properties(table.storage, props)
        table.reload_meta()
    table.storage.delete_dir(METADATA_TABLE_DIR)
    log.warning("deleted the metadata table of %s (hoodie.metadata.enable=false)", table.base_path)


def _options(options: Mapping[str, str] | None) -> dict[str, str]:
    """The options as strings, every compaction and write option checked (the run writes base
    files and heartbeats with the write options): a bad value raises
    :class:`~inlet.core.errors.InvalidOptionError` before any work, no instant is left behind."""
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    check_options(opts, (*config_keys(CompactionConfig), *WRITE_OPTION_KEYS))
    return opts


# ---------------------------------------------------------------------------------- trigger


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


# ---------------------------------------------------------------------------------- planning


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


def _file_groups_under_clustering(timeline: Timeline) -> set[tuple[str, str]]:
    """File groups named by pending clustering plans (Apache Hudi writes them; Inlet does not)."""
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
    busy |= _file_groups_under_clustering(timeline)
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


# ---------------------------------------------------------------------------------- running


def _schema_with_meta(avro_schema: str) -> str:
    rec = json.loads(avro_schema)
    meta = [{"name": c, "type": ["null", "string"], "doc": "", "default": None} for c in META_COLUMNS]
    rec["fields"] = meta + [f for f in rec["fields"] if f.get("name") not in META_COLUMNS]
    return json.dumps(rec, separators=(",", ":"))


@dataclass(frozen=True)
class CompactionContext:
    """What every operation of one compaction run needs (plain values: executors receive it)."""

    instant_time: str
    schema: pa.Schema  # meta columns + data columns
    parquet_avro_schema: str
    compression: str
    merge: MergeConfig
    blocks: BlockFilter
    avro_schema: str = ""  # the table schema the run writes (without meta fields)


def _log_file(storage: Storage, op: CompactionOperation, name: str) -> LogFile:
    path = op.path(name)
    lf = LogFile.parse(path)
    if lf is None:
        raise CorruptFileError(f"compaction plan names {path!r}, which is not a log file name")
    info = storage.fs.get_file_info(storage.full(path))
    if info.size is None:
        raise InletError(f"log file {path} of the compaction plan is missing")
    return LogFile.parse(path, info.size) or lf


def _base_file(storage: Storage, op: CompactionOperation) -> BaseFile | None:
    if op.base_file is None:
        return None
    path = op.path(op.base_file)
    bf = BaseFile.parse(path)
    if bf is None:
        raise CorruptFileError(f"compaction plan names {path!r}, which is not a base file name")
    info = storage.fs.get_file_info(storage.full(path))
    if info.size is None:
        raise InletError(f"base file {path} of the compaction plan is missing")
    return BaseFile.parse(path, info.size) or bf


def compact_operation(
    storage: Storage,
    ctx: CompactionContext,
    op: CompactionOperation,
    task_id: int,
    attempt: int = 0,
    stage_id: int = 0,
) -> WriteStat:
    """Write the new base file of one plan operation; returns its write stat. The unit of work of
    a compaction: an executor of a distributed engine calls it with its task's ids (the write token
    is ``<task_id>-<stage_id>-<attempt>``, so attempts of one task write distinct files)."""
    started = time.monotonic()
    if op.bootstrap_file:
        raise UnsupportedError(
            f"file group {op.file_id} has a bootstrap file; bootstrap tables are not supported"
        )
    logs = [_log_file(storage, op, name) for name in op.log_files]
    base = _base_file(storage, op)
    fs = FileSlice(op.partition, op.file_id, op.base_instant, base, logs)
    name = base_file_name(op.file_id, write_token(task_id, stage_id, attempt), ctx.instant_time)
    rel = op.path(name)
    ensure_partition_metadata(storage, op.partition, ctx.instant_time)
    markers.create_marker(storage, ctx.instant_time, op.partition, name, "MERGE" if base else "CREATE")
    metadata: dict[bytes | str, bytes | str] = {
        "parquet.avro.schema": ctx.parquet_avro_schema,
        "writer.model.name": "avro",
    }
    schema = ctx.schema.with_metadata(metadata)
    stats = SliceStats()
    written = 0
    min_key: str | None = None
    max_key: str | None = None
    scan_ms: int | None = None
    file_col = ctx.schema.get_field_index(MetaField.FILE_NAME)
    time_col = ctx.schema.get_field_index(MetaField.COMMIT_TIME)
    seq_col = ctx.schema.get_field_index(MetaField.COMMIT_SEQNO)
    key_col = ctx.schema.get_field_index(MetaField.RECORD_KEY)
    buffered: list[pa.Table] = []
    buffered_rows = 0
    with pq.ParquetWriter(
        storage.full(rel), schema, filesystem=storage.fs, compression=ctx.compression
    ) as writer:

        def flush() -> None:
            nonlocal buffered, buffered_rows
            if buffered:
                writer.write_table(pa.concat_tables(buffered), row_group_size=ROW_GROUP_ROWS)
            buffered, buffered_rows = [], 0

        for part in read_file_slice(storage, fs, ctx.schema, ctx.merge, ctx.blocks, stats=stats):
            if scan_ms is None:
                scan_ms = int((time.monotonic() - started) * 1000)
            n = part.num_rows
            if n == 0:
                continue
            part = part.set_column(
                file_col, schema.field(file_col), pa.repeat(pa.scalar(name, pa.string()), n)
            )
            part = _fill_commit_meta(part, time_col, seq_col, ctx.instant_time, task_id, written)
            bounds = pc.min_max(part.column(key_col)).as_py()
            if bounds["min"] is not None:
                min_key = bounds["min"] if min_key is None else min(min_key, bounds["min"])
                max_key = bounds["max"] if max_key is None else max(max_key, bounds["max"])
            buffered.append(part.replace_schema_metadata(metadata))
            buffered_rows += n
            written += n
            if buffered_rows >= ROW_GROUP_ROWS:
                flush()
        flush()
        if min_key is not None and max_key is not None:
            writer.add_key_value_metadata(
                {"hoodie_min_record_key": min_key, "hoodie_max_record_key": max_key}
            )
    size = storage.fs.get_file_info(storage.full(rel)).size or 0
    elapsed = int((time.monotonic() - started) * 1000)
    return WriteStat(
        file_id=op.file_id,
        path=rel,
        partition_path=op.partition,
        prev_commit=op.base_instant,
        num_writes=written,
        num_deletes=stats.deleted,
        num_update_writes=stats.updated,
        num_inserts=stats.inserted,
        total_write_bytes=size,
        file_size_in_bytes=size,
        prev_base_file=op.base_file,
        total_log_records=stats.log_records,
        total_log_blocks=stats.log_blocks,
        total_log_files_compacted=len(logs),
        total_log_size_compacted=sum(lf.size for lf in logs),
        total_updated_records_compacted=stats.log_keys,
        runtime_stats={
            "totalScanTime": scan_ms if scan_ms is not None else elapsed,
            "totalCreateTime": 0,
            "totalUpsertTime": elapsed,
        },
    )


def _fill_commit_meta(
    part: pa.Table, time_col: int, seq_col: int, instant_time: str, task_id: int, offset: int
) -> pa.Table:
    """Records without a commit time or sequence number (not written by Hudi or Inlet) get the
    compaction's, so every base record carries both."""
    times = part.column(time_col)
    seqs = part.column(seq_col)
    if times.null_count == 0 and seqs.null_count == 0:
        return part
    n = part.num_rows
    own_seq = pa.array([f"{instant_time}_{task_id}_{offset + i}" for i in range(n)], pa.string())
    part = part.set_column(time_col, part.schema.field(time_col), pc.fill_null(times, instant_time))
    filled = pc.if_else(pc.is_null(seqs), own_seq, seqs)
    return part.set_column(seq_col, part.schema.field(seq_col), filled)


def _attempt_files(storage: Storage, instant_time: str) -> list[str]:
    """Data files a run of compaction ``instant_time`` may have left: its markers' files and base
    files named by the instant."""
    files = set(markers.marked_files(storage, instant_time))
    for info in list_data_files(storage):
        bf = BaseFile.parse(info.path)
        if bf is not None and bf.instant_time == instant_time:
            files.add(info.path)
    return sorted(files)


def _roll_back_attempt(table: TableHandle, instant_time: str) -> list[str]:
    """Undo a failed or crashed run: delete its files and markers, then its inflight file (the
    requested plan stays, so the compaction can run again). Files go first: until the inflight
    file is gone a crash here leaves a run that the next :func:`run` rolls back again.

    Never touches a compaction that has completed (another run, wrongly taken for dead, may have
    completed it with files of the same names)."""
    storage = table.storage
    with table_lock(storage):
        tl = table.commit_protocol.timeline()
        if any(i.time == instant_time and i.is_completed for i in tl.instants):
            log.warning("compaction %s has completed meanwhile; nothing to roll back", instant_time)
            return []
        files = _attempt_files(storage, instant_time)
        for f in files:
            storage.delete(f)
        markers.delete_markers(storage, instant_time)
        storage.delete(tl.path_of(_inflight(instant_time)))
    heartbeat.delete(storage, instant_time)
    return files


def _last_written_ms(storage: Storage, timeline: Timeline, instant_time: str) -> float | None:
    times = [
        float(f.mtime_ms)
        for f in storage.list_files(timeline.dir)
        if f.mtime_ms is not None and posixpath.basename(f.path).startswith(instant_time)
    ]
    return max(times) if times else None


def _has_plan(timeline: Timeline, instant_time: str) -> bool:
    return timeline.storage.exists(timeline.path_of(_requested(instant_time)))


def _target(timeline: Timeline, instant: str | None) -> Instant | None:
    pending = timeline.pending([Action.COMPACTION])
    if instant is None:
        return pending[0] if pending else None
    t = normalize_instant_time(instant)
    for inst in timeline.instants:
        if inst.time != t:
            continue
        if inst.action == Action.COMPACTION and not inst.is_completed:
            return inst
        if inst.is_completed and inst.action == Action.COMMIT and _has_plan(timeline, t):
            raise InvalidInputError(f"compaction {t} has already completed")
        raise InvalidInputError(f"instant {t} is a {inst.action}, not a compaction")
    raise InstantNotFoundError(f"instant {instant} is not on the timeline")


OperationsRunner = Callable[
    ["TableHandle", CompactionContext, Sequence[CompactionOperation]], list[WriteStat]
]
"""Runs a plan's operations and returns their write stats (locally, or as a distributed job)."""


def run(
    table: TableHandle,
    instant: str | None = None,
    options: Mapping[str, str] | None = None,
    force: bool = False,
    runner: OperationsRunner | None = None,
) -> CommitResult | None:
    """Run a pending compaction: ``instant``, or the earliest pending one; None if there is none.

    An inflight compaction (a run that crashed) is rolled back first, once its heartbeat has
    expired (at once with ``force``); one whose heartbeat is alive is running elsewhere and is
    refused with :class:`CommitConflictError`.

    ``runner`` executes the plan's operations (default: one after another in this process; the
    Spark engine runs one task per operation); scheduling the run, the commit and the rollback of a
    failed run stay here.
    """
    _check_table(table)
    opts = _options(options)
    storage = table.storage
    protocol = table.commit_protocol
    interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(opts)
    with table_lock(storage):
        tl = protocol.timeline()
        target = _target(tl, instant)
        if target is None:
            log.info("no pending compaction to run")
            return None
        _check_metadata_table(table, opts)
        t = target.time
        if target.state is State.INFLIGHT:
            started = _last_written_ms(storage, tl, t)
            if not force and not heartbeat.is_expired(storage, t, interval, started_ms=started):
                raise CommitConflictError(
                    f"compaction {t} is running in another process (its heartbeat is alive); "
                    "retry later, or use force if that process is gone"
                )
            removed = _roll_back_attempt(table, t)
            log.warning("rolled back the failed run of compaction %s (%d file(s) deleted)", t, len(removed))
        plan = read_plan(tl, t)
        beat = heartbeat.Heartbeat(storage, t, interval).start()
        try:
            protocol.set_inflight(_requested(t))
        except BaseException:
            beat.stop()
            raise
    return _execute(table, t, plan, opts, beat, runner or _run_locally)


def _run_locally(
    table: TableHandle, ctx: CompactionContext, operations: Sequence[CompactionOperation]
) -> list[WriteStat]:
    stats = []
    for task_id, op in enumerate(operations):
        stats.append(compact_operation(table.storage, ctx, op, task_id))
        if task_id == 0:
            faults.crash_point(AFTER_FIRST_FILE)
    return stats


def compaction_context(
    table: TableHandle, instant_time: str, options: Mapping[str, str]
) -> CompactionContext:
    """The context of a run of compaction ``instant_time`` (the table's latest schema, merge rules,
    and which log blocks count: those of instants completed now)."""
    avro_schema = table.snapshot().avro_schema
    if not avro_schema:
        raise InletError("the table has no schema yet (no completed write); nothing to compact")
    data_schema = from_avro_schema(avro_schema)
    schema = pa.schema(list(meta_schema()) + [f for f in data_schema if f.name not in META_COLUMNS])
    view = FileSystemView(table.commit_protocol.timeline(), None, [])
    return CompactionContext(
        instant_time=instant_time,
        schema=schema,
        parquet_avro_schema=_schema_with_meta(avro_schema),
        compression=WriteConfig.PARQUET_COMPRESSION.require(options),
        merge=merge_config(table),
        blocks=BlockFilter(CommittedInstants.of(view)),
        avro_schema=avro_schema,
    )


def _execute(
    table: TableHandle,
    t: str,
    plan: CompactionPlan,
    opts: dict[str, str],
    beat: heartbeat.Heartbeat,
    runner: OperationsRunner,
) -> CommitResult:

    storage = table.storage
    protocol = table.commit_protocol
    started = time.monotonic()
    try:
        faults.crash_point(AFTER_INFLIGHT)
        ctx = compaction_context(table, t, opts)
        metadata = CommitMetadata(operation_type=WriteOperation.COMPACT.value, compacted=True)
        for stat in runner(table, ctx, plan.operations):
            metadata.add(stat)
        faults.crash_point(AFTER_DATA_FILES)
        metadata.extra_metadata = {SCHEMA_KEY: ctx.avro_schema}
        remove_stray_files(storage, t, (s.path for s in metadata.write_stats()))
        faults.crash_point(BEFORE_COMPLETE)
        with table_lock(storage):
            check_still_pending(protocol.timeline(), _inflight(t))
            done = protocol.finish(_inflight(t), metadata.to_bytes())
    except BaseException:
        beat.stop(delete=False)
        try:
            _roll_back_attempt(table, t)
        except Exception:  # the inflight instant stays; the next run rolls it back
            log.exception("rollback of the failed run of compaction %s failed", t)
        heartbeat.delete(storage, t)
        raise
    beat.stop()
    markers.delete_markers(storage, t)
    stats = metadata.write_stats()
    log.info(
        "compaction %s completed at %s: %d file group(s), %d log file(s), %d record(s) in %.3fs",
        t,
        done.completion_time,
        len(stats),
        sum(s.total_log_files_compacted for s in stats),
        sum(s.num_writes for s in stats),
        time.monotonic() - started,
    )
    return CommitResult(t, done.completion_time or "", done.action, WriteOperation.COMPACT.value, metadata)


def compact(table: TableHandle, options: Mapping[str, str] | None = None) -> CommitResult | None:
    """Schedule a compaction (if one is due) and run it; None if none was scheduled."""
    instant = schedule(table, options)
    return run(table, instant, options) if instant is not None else None


# ---------------------------------------------------------------------------------- show


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


__all__ = [
    "CompactionContext",
    "CompactionInfo",
    "CompactionOperation",
    "CompactionPlan",
    "Trigger",
    "compact",
    "compact_operation",
    "compaction_context",
    "compaction_trigger",
    "pending_compactions",
    "plan_compaction",
    "read_plan",
    "run",
    "schedule",
    "select_operations",
    "show",
]
