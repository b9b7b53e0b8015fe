"""Clustering: small file groups rewritten into fewer, sorted ones, as Apache Hudi 1.x does it for
table version 8 (``SparkSizeBasedClusteringPlanStrategy`` to plan, ``SparkSortAndSizeExecutionStrategy``
to run).

1. **schedule** (:func:`schedule_clustering`): when ``hoodie.clustering.inline.max.commits`` writes
   have completed since the last clustering, the latest file slices whose base file is smaller than
   ``hoodie.clustering.plan.strategy.small.file.limit`` (not under a pending compaction or
   clustering) are grouped per partition, smallest first, up to
   ``...max.bytes.per.group`` each and ``...max.num.groups`` in all; a group of one slice without
   log files is left alone (rewriting it gains nothing). Each group writes
   ``ceil(bytes / ...target.file.max.bytes)`` files. The plan is ``<t>.clustering.requested``:
   ``HoodieRequestedReplaceMetadata`` (``operationType`` ``CLUSTER``) holding a
   ``HoodieClusteringPlan`` (``HoodieClusteringGroup`` of ``HoodieSliceInfo``, the strategy and
   its parameters, ``preserveHoodieMetadata`` true).
2. **run** (:func:`run_clustering`): ``<t>.clustering.inflight``; each group's slices are read
   merged (a Merge-on-Read slice with its log files), sorted by
   ``hoodie.clustering.plan.strategy.sort.columns`` (the record key when none), split into the
   planned number of new file groups and written as base files; records keep their
   ``_hoodie_commit_time`` / ``_hoodie_commit_seqno`` (preserveHoodieMetadata). The instant
   completes as ``<t>_<c>.replacecommit`` (``HoodieReplaceCommitMetadata``, ``operationType``
   ``CLUSTER``, ``partitionToReplaceFileIds`` = the input groups), conflict-checked like a write:
   a write that completed meanwhile on one of the input groups wins and the clustering is rolled
   back with its plan (Hudi's conflict resolution with ``SparkAllowUpdateStrategy``: writes to
   file groups under clustering are allowed and the clustering fails). A failed run is rolled back
   (its files, markers and inflight file) and its plan run again by the next :func:`run_clustering`.

Tables with the bucket index are refused (a bucket's file group is fixed by its hash; Hudi clusters
them only with the consistent-hashing engine). Readers never see a pending clustering's files.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core import avro, faults
from inlet.core.actions.compaction_plan import file_groups_under_clustering, read_plan
from inlet.core.actions.compaction_run import CompactionContext, compaction_context, roll_back_attempt
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.lifecycle import PendingInstant
from inlet.core.commit.locks import table_lock
from inlet.core.commit.result import CommitResult
from inlet.core.config import ClusteringConfig, IndexType, TableConfig, WriteConfig, WriteOperation
from inlet.core.errors import CommitConflictError, InvalidInputError, UnsupportedError
from inlet.core.file_group.reader import read_file_slice
from inlet.core.file_group.view import BaseFile, FileSlice, LogFile, base_file_name, write_token
from inlet.core.progress import Progress
from inlet.core.schema import MetaField
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time
from inlet.core.write.files import ensure_partition_metadata, write_base_file

log = logging.getLogger(__name__)

PLAN_STRATEGY = "org.apache.hudi.client.clustering.plan.strategy.SparkSizeBasedClusteringPlanStrategy"
EXECUTION_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
EXECUTION_STRATEGY_KEY = "hoodie.clustering.execution.strategy.class"
# fault points (INLET_CRASH_AT=...)
AFTER_PLAN = "clustering_after_plan"
AFTER_FIRST_GROUP = "clustering_after_first_group"
BEFORE_COMPLETE = "clustering_before_complete"


@dataclass(frozen=True)
class ClusteringSlice:
    partition: str
    file_id: str
    base_file: str  # path relative to the table
    log_files: tuple[str, ...] = ()

    def to_avro(self) -> dict[str, Any]:
        return {
            "dataFilePath": self.base_file,
            "deltaFilePaths": list(self.log_files),
            "fileId": self.file_id,
            "partitionPath": self.partition,
            "bootstrapFilePath": "",
            "version": 1,
        }


@dataclass(frozen=True)
class ClusteringGroup:
    slices: tuple[ClusteringSlice, ...]
    num_output_groups: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusteringPlan:
    groups: tuple[ClusteringGroup, ...]
    sort_columns: tuple[str, ...]
    params: dict[str, str]

    def file_groups(self) -> set[tuple[str, str]]:
        return {(s.partition, s.file_id) for g in self.groups for s in g.slices}

    def to_bytes(self) -> bytes:
        plan = {
            "inputGroups": [
                {
                    "slices": [s.to_avro() for s in g.slices],
                    "metrics": dict(g.metrics),
                    "numOutputFileGroups": g.num_output_groups,
                    "extraMetadata": None,
                    "version": 1,
                }
                for g in self.groups
            ],
            "strategy": {
                "strategyClassName": EXECUTION_STRATEGY,
                "strategyParams": dict(self.params),
                "version": 1,
            },
            "extraMetadata": {},
            "version": 1,
            "preserveHoodieMetadata": True,
            "missingSchedulePartitions": None,
        }
        record = {
            "operationType": WriteOperation.CLUSTER.value,
            "clusteringPlan": plan,
            "extraMetadata": {},
            "version": 1,
        }
        return avro.encode("HoodieRequestedReplaceMetadata", record)

    @classmethod
    def from_bytes(cls, data: bytes) -> ClusteringPlan:
        rec = avro.decode(data, "clustering plan")
        plan = rec.get("clusteringPlan") or {}
        params = dict((plan.get("strategy") or {}).get("strategyParams") or {})
        groups = tuple(
            ClusteringGroup(
                tuple(
                    ClusteringSlice(
                        s.get("partitionPath") or "",
                        s.get("fileId") or "",
                        s.get("dataFilePath") or "",
                        tuple(s.get("deltaFilePaths") or ()),
                    )
                    for s in g.get("slices") or ()
                ),
                int(g.get("numOutputFileGroups") or 1),
                dict(g.get("metrics") or {}),
            )
            for g in plan.get("inputGroups") or ()
        )
        sort = tuple(c for c in params.get(ClusteringConfig.SORT_COLUMNS.key, "").split(",") if c)
        return cls(groups, sort, params)


def _requested(t: str) -> Instant:
    return Instant(t, Action.CLUSTERING, State.REQUESTED)


def _inflight(t: str) -> Instant:
    return Instant(t, Action.CLUSTERING, State.INFLIGHT)


def _check_table(table: TableHandle) -> None:
    if TableConfig.INDEX_TYPE.get(table.meta.props) is IndexType.BUCKET:
        raise UnsupportedError(
            "clustering a bucket-index table is not supported: a bucket's file group is fixed by its "
            "hash (Hudi clusters such tables only with the consistent-hashing bucket engine)"
        )


def _options(options: Mapping[str, str] | None) -> dict[str, str]:
    opts = dict(options or {})
    ClusteringConfig.validate(opts)
    return opts


def plan_clustering(table: TableHandle, timeline: Timeline, options: Mapping[str, str]) -> ClusteringPlan:
    """The size-based plan over the latest file slices (see the module docstring)."""
    small = ClusteringConfig.SMALL_FILE_LIMIT.require(options)
    target = ClusteringConfig.TARGET_FILE_MAX_BYTES.require(options)
    per_group = ClusteringConfig.MAX_BYTES_PER_GROUP.require(options)
    max_groups = ClusteringConfig.MAX_NUM_GROUPS.require(options)
    sort = tuple(ClusteringConfig.SORT_COLUMNS.require(options))
    busy = file_groups_under_clustering(timeline)
    for inst in timeline.pending([Action.COMPACTION]):
        busy |= {(op.partition, op.file_id) for op in read_plan(timeline, inst.time).operations}
    by_partition: dict[str, list[FileSlice]] = {}
    for fs in table.snapshot(timeline=timeline).view.latest_file_slices():
        if fs.base_file is None or (fs.partition, fs.file_id) in busy or fs.base_file.size >= small:
            continue
        by_partition.setdefault(fs.partition, []).append(fs)
    groups: list[ClusteringGroup] = []
    for partition in sorted(by_partition):
        current: list[FileSlice] = []
        size = 0
        for fs in sorted(by_partition[partition], key=lambda s: (_slice_bytes(s), s.file_id)):
            if current and size + _slice_bytes(fs) > per_group:
                groups.append(_group(current, size, target))
                current, size = [], 0
            current.append(fs)
            size += _slice_bytes(fs)
        if current:
            groups.append(_group(current, size, target))
    worth = [g for g in groups if len(g.slices) > 1 or g.slices[0].log_files]
    params = {
        ClusteringConfig.SORT_COLUMNS.key: ",".join(sort),
        ClusteringConfig.TARGET_FILE_MAX_BYTES.key: str(target),
    }
    return ClusteringPlan(tuple(worth[:max_groups]), sort, params)


def _slice_bytes(fs: FileSlice) -> int:
    return (fs.base_file.size if fs.base_file else 0) + sum(lf.size for lf in fs.log_files)


def _group(slices: Sequence[FileSlice], size: int, target: int) -> ClusteringGroup:
    return ClusteringGroup(
        tuple(
            ClusteringSlice(
                fs.partition,
                fs.file_id,
                fs.base_file.path if fs.base_file else "",
                tuple(lf.path for lf in fs.log_files),
            )
            for fs in slices
        ),
        max(1, math.ceil(size / target)),
        {"TOTAL_IO": float(size), "TOTAL_FILE_SLICES": float(len(slices))},
    )


def _since_last_clustering(timeline: Timeline) -> int:
    last = max(
        (
            i.time
            for i in timeline.completed([Action.REPLACE_COMMIT])
            if (timeline.commit_metadata(i).operation_type or "").upper() == WriteOperation.CLUSTER.value
        ),
        default="",
    )
    return sum(1 for i in timeline.completed_writes() if i.time > last and i.action != Action.REPLACE_COMMIT)


def schedule_clustering(
    table: TableHandle, options: Mapping[str, str] | None = None, force: bool = False
) -> str | None:
    """Write a clustering plan when one is due (``force``: whatever the trigger says); returns its
    instant time, or None (not due, or nothing worth clustering)."""
    _check_table(table)
    opts = _options(options)
    with table_lock(table.storage):
        tl = table.commit_protocol.timeline()
        due = ClusteringConfig.INLINE_MAX_COMMITS.require(opts)
        done = _since_last_clustering(tl)
        if not force and done < due:
            log.info("no clustering scheduled: %d of %d commits since the last one", done, due)
            return None
        plan = plan_clustering(table, tl, opts)
        if not plan.groups:
            log.info("no clustering scheduled: no small file groups to cluster")
            return None
        instant = table.commit_protocol.begin(Action.CLUSTERING, plan.to_bytes())
    faults.crash_point(AFTER_PLAN)
    log.info(
        "scheduled clustering %s: %d group(s), %d file group(s)",
        instant.time,
        len(plan.groups),
        len(plan.file_groups()),
    )
    return instant.time


def read_clustering_plan(timeline: Timeline, instant_time: str) -> ClusteringPlan:
    return ClusteringPlan.from_bytes(timeline.read_bytes(_requested(instant_time)))


def pending_clustering(table: TableHandle) -> list[str]:
    """Instant times of the clustering plans not completed yet, oldest first."""
    return [i.time for i in table.load_timeline().pending([Action.CLUSTERING])]


def _slice(table: TableHandle, s: ClusteringSlice) -> FileSlice:
    def size(path: str) -> int:
        return table.storage.fs.get_file_info(table.storage.full(path)).size or 0

    base = BaseFile.parse(s.base_file, size(s.base_file)) if s.base_file else None
    logs = [lf for lf in (LogFile.parse(p, size(p)) for p in s.log_files) if lf is not None]
    return FileSlice(s.partition, s.file_id, base.instant_time if base else "", base, logs)


def cluster_group(
    table: TableHandle, ctx: CompactionContext, group: ClusteringGroup, sort: Sequence[str], task_id: int
) -> list[WriteStat]:
    """Rewrite one group's slices into ``group.num_output_groups`` new sorted base files."""
    storage = table.storage
    pieces = [
        p
        for s in group.slices
        for p in read_file_slice(storage, _slice(table, s), ctx.schema, ctx.merge, ctx.blocks)
    ]
    rows = pa.concat_tables(pieces) if pieces else ctx.schema.empty_table()
    keys = list(sort) or [MetaField.RECORD_KEY.value]
    unknown = [c for c in keys if c not in rows.column_names]
    if unknown:
        raise InvalidInputError(f"clustering sort column(s) {', '.join(unknown)} are not in the table")
    rows = rows.take(pc.sort_indices(rows, [(c, "ascending") for c in keys]))
    partition = group.slices[0].partition
    n = min(group.num_output_groups, max(1, rows.num_rows))
    per_file = math.ceil(rows.num_rows / n) if rows.num_rows else 0
    schema = ctx.schema
    file_col = schema.get_field_index(MetaField.FILE_NAME.value)
    stats = []
    ensure_partition_metadata(storage, partition, ctx.instant_time)
    for k in range(n):
        chunk = rows.slice(k * per_file, per_file)
        if chunk.num_rows == 0:
            continue
        file_id = f"{uuid.uuid4()}-0"
        name = base_file_name(file_id, write_token(task_id, k, 0), ctx.instant_time)
        rel = f"{partition}/{name}" if partition else name
        markers.create_marker(storage, ctx.instant_time, partition, name, "CREATE")
        chunk = chunk.set_column(
            file_col, schema.field(file_col), pa.repeat(pa.scalar(name, pa.string()), chunk.num_rows)
        )
        written = write_base_file(storage, rel, chunk.cast(schema), ctx.avro_schema, ctx.compression)
        stats.append(
            WriteStat(
                file_id=file_id,
                path=rel,
                partition_path=partition,
                prev_commit="null",
                num_writes=chunk.num_rows,
                num_inserts=chunk.num_rows,
                total_write_bytes=written,
                file_size_in_bytes=written,
            )
        )
    return stats


def _target(timeline: Timeline, instant: str | None) -> Instant | None:
    pending = timeline.pending([Action.CLUSTERING])
    if instant is None:
        return pending[0] if pending else None
    t = normalize_instant_time(instant)
    found = next((i for i in pending if i.time == t), None)
    if found is None:
        raise InvalidInputError(f"no pending clustering at {t}")
    return found


def run_clustering(
    table: TableHandle,
    instant: str | None = None,
    options: Mapping[str, str] | None = None,
    force: bool = False,
) -> CommitResult | None:
    """Run a pending clustering (``instant``, or the earliest); None when none is pending. A crashed
    run (inflight, heartbeat expired, or any with ``force``) is rolled back first."""
    _check_table(table)
    opts = _options(options)
    storage = table.storage
    interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(opts)
    with table_lock(storage):
        tl = table.commit_protocol.timeline()
        target = _target(tl, instant)
        if target is None:
            return None
        t = target.time
        if target.state is State.INFLIGHT:
            if not force and not heartbeat.is_expired(storage, t, interval, started_ms=tl.last_written_ms(t)):
                raise CommitConflictError(
                    f"clustering {t} is running in another process (its heartbeat is alive)"
                )
            roll_back_attempt(table, _inflight(t))
        plan = read_clustering_plan(tl, t)
        pending = PendingInstant.resume(storage, table.commit_protocol, _requested(t), interval)
        with pending.guard(lambda _: None):
            pending.set_inflight()
    ctx = compaction_context(table, t, opts)
    metadata = CommitMetadata(operation_type=WriteOperation.CLUSTER.value, partition_to_replace_file_ids={})
    try:
        with pending.guard(lambda _: roll_back_attempt(table, _inflight(t))):
            progress = Progress(f"clustering {t}", "groups", total=len(plan.groups), table=table.base_path)
            for task_id, group in enumerate(plan.groups):
                rows = 0
                for stat in cluster_group(table, ctx, group, plan.sort_columns, task_id):
                    metadata.add(stat)
                    rows += stat.num_writes
                progress.advance(rows=rows)
                if task_id == 0:
                    faults.crash_point(AFTER_FIRST_GROUP)
            progress.finish()
            for p, fid in sorted(plan.file_groups()):
                metadata.partition_to_replace_file_ids.setdefault(p, []).append(fid)  # type: ignore[union-attr]
            metadata.extra_metadata = {SCHEMA_KEY: ctx.avro_schema}
            pending.remove_stray_files(f for s in metadata.write_stats() for f in s.files())
            faults.crash_point(BEFORE_COMPLETE)
            done = pending.complete(metadata)
    except CommitConflictError:
        # a write on an input file group completed meanwhile: it wins; the plan is dropped
        storage.delete(table.load_timeline().path_of(_requested(t)))
        log.warning("clustering %s conflicted with a write and was rolled back with its plan", t)
        raise
    log.info(
        "clustering %s completed at %s: %d file group(s) into %d",
        t,
        done.completion_time,
        len(plan.file_groups()),
        len(metadata.write_stats()),
    )
    return CommitResult(t, done.completion_time or "", done.action, WriteOperation.CLUSTER.value, metadata)


def cluster(
    table: TableHandle, options: Mapping[str, str] | None = None, force: bool = False
) -> CommitResult | None:
    """Schedule a clustering if one is due (``force``: regardless of the trigger) and run it."""
    t = schedule_clustering(table, options, force=force)
    return run_clustering(table, t, options) if t is not None else None
