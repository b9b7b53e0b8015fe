"""Merge-on-Read compaction, steps 2 and 3: run a plan, and recover from a failed run (Apache
Hudi's ``RunCompactionActionExecutor``; the plan is :mod:`inlet.core.actions.compaction_plan`).

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

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import faults
from inlet.core.actions.compaction_plan import (
    CompactionOperation,
    CompactionPlan,
    _check_table,
    _inflight,
    _options,
    _requested,
    read_plan,
    schedule,
)
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.lifecycle import PendingInstant
from inlet.core.commit.locks import table_lock
from inlet.core.commit.protocol import check_still_pending
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    WriteConfig,
    WriteOperation,
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
from inlet.core.progress import Progress
from inlet.core.read.snapshot import merge_config
from inlet.core.schema import META_COLUMNS, MetaField, from_avro_schema, meta_schema
from inlet.core.storage import Storage
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time
from inlet.core.write.files import avro_with_meta, ensure_partition_metadata

log = logging.getLogger(__name__)
AFTER_INFLIGHT = "compaction_after_inflight"
AFTER_FIRST_FILE = "compaction_after_first_file"
AFTER_DATA_FILES = "compaction_after_data_files"
BEFORE_COMPLETE = "compaction_before_complete"
# rows per row group of a compacted base file (merged pieces are buffered up to it)
ROW_GROUP_ROWS = 256 * 1024


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


def roll_back_attempt(table: TableHandle, inflight: Instant) -> list[str]:
    """Undo a failed or crashed run of a planned table service (compaction, clustering): delete
    its files and markers, then its inflight file (the requested plan stays, so it can run again).
    Files go first: until the inflight file is gone a crash here leaves a run that the next run
    rolls back again.

    Never touches an instant that has completed (another run, wrongly taken for dead, may have
    completed it with files of the same names)."""
    storage = table.storage
    instant_time = inflight.time
    with table_lock(storage):
        tl = table.commit_protocol.timeline()
        if any(i.time == instant_time and i.is_completed for i in tl.instants):
            log.warning("%s %s has completed meanwhile; nothing to roll back", inflight.action, instant_time)
            return []
        files = _attempt_files(storage, instant_time)
        for f in files:
            storage.delete(f)
        markers.delete_markers(storage, instant_time)
        storage.delete(tl.path_of(inflight))
    heartbeat.delete(storage, instant_time)
    return files


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


def _runner_gone(storage: Storage, timeline: Timeline, instant_time: str, interval_ms: int) -> bool:
    return heartbeat.is_expired(
        storage, instant_time, interval_ms, started_ms=timeline.last_written_ms(instant_time)
    )


def runner_gone(table: TableHandle, instant_time: str, options: Mapping[str, str] | None = None) -> bool:
    """Whether the process running inflight compaction ``instant_time`` is gone: its heartbeat
    expired (at once on this host when its process is dead), so :func:`run` rolls the attempt back
    and runs the plan again instead of refusing it."""
    interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(_options(options))
    return _runner_gone(table.storage, table.commit_protocol.timeline(), instant_time, interval)


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
        t = target.time
        if target.state is State.INFLIGHT:
            if not force and not _runner_gone(storage, tl, t, interval):
                raise CommitConflictError(
                    f"compaction {t} is running in another process (its heartbeat is alive); "
                    "retry later, or use force if that process is gone"
                )
            removed = roll_back_attempt(table, _inflight(t))
            log.warning("rolled back the failed run of compaction %s (%d file(s) deleted)", t, len(removed))
        plan = read_plan(tl, t)
        pending = PendingInstant.resume(storage, protocol, _requested(t), interval)
        with pending.guard(lambda _: None):  # the plan stays requested: nothing to roll back yet
            pending.set_inflight()
    return _execute(table, pending, plan, opts, runner or _run_locally)


def _run_locally(
    table: TableHandle, ctx: CompactionContext, operations: Sequence[CompactionOperation]
) -> list[WriteStat]:
    stats = []
    progress = Progress(
        f"compaction {ctx.instant_time}", "file groups", total=len(operations), table=table.base_path
    )
    for task_id, op in enumerate(operations):
        stats.append(compact_operation(table.storage, ctx, op, task_id))
        progress.advance(rows=stats[-1].num_writes)
        if task_id == 0:
            faults.crash_point(AFTER_FIRST_FILE)
    progress.finish()
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
        parquet_avro_schema=avro_with_meta(avro_schema),
        compression=WriteConfig.PARQUET_COMPRESSION.require(options),
        merge=merge_config(table),
        blocks=BlockFilter(CommittedInstants.of(view)),
        avro_schema=avro_schema,
    )


def _execute(
    table: TableHandle,
    pending: PendingInstant,
    plan: CompactionPlan,
    opts: dict[str, str],
    runner: OperationsRunner,
) -> CommitResult:
    storage = table.storage
    t = pending.time
    started = time.monotonic()
    with pending.guard(lambda _: roll_back_attempt(table, _inflight(t))):
        faults.crash_point(AFTER_INFLIGHT)
        ctx = compaction_context(table, t, opts)
        metadata = CommitMetadata(operation_type=WriteOperation.COMPACT.value, compacted=True)
        for stat in runner(table, ctx, plan.operations):
            metadata.add(stat)
        faults.crash_point(AFTER_DATA_FILES)
        metadata.extra_metadata = {SCHEMA_KEY: ctx.avro_schema}
        pending.remove_stray_files(f for s in metadata.write_stats() for f in s.files())
        faults.crash_point(BEFORE_COMPLETE)
        with table_lock(storage):
            check_still_pending(pending.protocol.timeline(), _inflight(t))
            done = pending.finish(metadata.to_bytes())
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
