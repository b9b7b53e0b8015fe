"""Step 4 of a write, commit: the instant's lifecycle around the plan and the file writes —
requested, inflight (with the planned file groups), heartbeat, execute, remove stray files of
failed attempts, complete through the commit protocol (which checks conflicts); any failure before
completion rolls the instant back, and a crash leaves a pending instant the next writer rolls back.
:func:`write_table` is the local engine's whole write; the Spark engine drives :func:`run_write`
with its own plan and execution."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from inlet.core import avro, faults
from inlet.core.actions.rollback import rollback, rollback_failed_writes
from inlet.core.commit.lifecycle import PendingInstant
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    IndexType,
    MergeMode,
    TableType,
    WriteConfig,
    WriteOperation,
)
from inlet.core.errors import InvalidInputError, SchemaError
from inlet.core.log import writer as logs
from inlet.core.read.snapshot import merge_config
from inlet.core.schema import (
    to_avro_schema,
)
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant
from inlet.core.write.file_groups import WritePlan
from inlet.core.write.files import WriteContext, ensure_partition_metadata, write_file_group, write_log_group
from inlet.core.write.plan import plan_cow_write
from inlet.core.write.plan_mor import plan_mor_write
from inlet.core.write.prepare import (
    DELETED,
    KEY,
    PARTITION,
    PreparedBatch,
    _as_arrow,
    check_soft_delete_ordering,
    check_writable,
    check_write_options,
    parse_operation,
    prepare,
)

log = logging.getLogger(__name__)


def _planned_metadata(plan: WritePlan, op: WriteOperation) -> CommitMetadata:
    """The inflight instant's content: the file groups about to be written (workload profile)."""
    md = CommitMetadata(operation_type=op.value)
    for g in plan.file_groups:
        md.add(
            WriteStat(file_id=g.file_id, path="", partition_path=g.partition, num_inserts=g.records.num_rows)
        )
    return md


def commit_action(table: TableHandle, op: WriteOperation) -> str:
    """The timeline action of a write: replacecommit, deltacommit (Merge-on-Read) or commit."""
    if op.is_replace:
        return Action.REPLACE_COMMIT
    return Action.DELTA_COMMIT if table.meta.table_type is TableType.MERGE_ON_READ else Action.COMMIT


def write_context(
    table: TableHandle,
    instant_time: str,
    op: WriteOperation,
    schema: pa.Schema,
    avro_schema: str,
    options: dict[str, str],
) -> WriteContext:
    """What every file-group writer of one write needs (plain values: executors receive it)."""
    return WriteContext(
        base_uri=table.base_path,
        table_name=table.meta.name,
        instant_time=instant_time,
        schema=schema,
        avro_schema=avro_schema,
        merge_mode=table.meta.merge_mode
        if op is not WriteOperation.DELETE
        else MergeMode.COMMIT_TIME_ORDERING,
        ordering_field=table.meta.ordering_field,
        key_generator=table.meta.key_generator,
        populate_meta_fields=table.meta.populate_meta_fields,
        compression=WriteConfig.PARQUET_COMPRESSION.require(options),
        data_block_format=logs.DATA_BLOCK_FORMAT.require(options),
        table_merge_mode=table.meta.merge_mode,
        cache_log_keys=table.meta.index_type is not IndexType.BUCKET,
        # Merge-on-Read commits are inferred, never logged: see write.cdc_log
        cdc_mode=table.meta.cdc_mode if table.meta.table_type is TableType.COPY_ON_WRITE else None,
        # Copy-on-Write merges fill the placeholder as Merge-on-Read reads and compactions do
        unavailable_value=merge_config(table).unavailable_value,
        s3=table.storage.s3,
    )


@dataclass
class PlannedWrite:
    """What an engine planned: the workload profile for the inflight file, the files to write
    (``execute(instant)`` returns their write stats) and, for replace operations, the replaced file ids."""

    planned: CommitMetadata
    execute: Callable[[Instant], Iterable[WriteStat]]
    replaced: dict[str, list[str]] | None = None


def run_write(
    table: TableHandle,
    op: WriteOperation,
    plan: Callable[[], PlannedWrite],
    *,
    options: dict[str, str],
    avro_schema: str,
    extra_metadata: dict[str, str],
) -> CommitResult:
    """Begin an instant, plan and run the write, and commit it or roll it back: the discipline
    every engine shares.

    ``<t>.requested`` and a heartbeat come first, and only then ``plan()`` reads the file slices it
    rewrites or appends to: optimistic concurrency checks the commits that complete after the
    instant began, so a commit completing between planning and beginning would otherwise be
    overwritten unseen (a lost update). Then ``<t>.inflight`` holds the planned workload profile,
    and ``execute(instant)`` writes the files and returns their write stats (locally, or as stats
    collected from executors). Files named by markers but not by the stats (failed or duplicate
    task attempts) are deleted, then the commit protocol completes the instant (conflict check,
    atomic rename). Any failure rolls the instant back (its marked files are deleted); a crash
    leaves a pending instant that the next writer rolls back once the heartbeat has expired.
    """

    action = commit_action(table, op)
    requested = b""
    if action == Action.REPLACE_COMMIT:
        requested = avro.encode(
            "HoodieRequestedReplaceMetadata",
            {"operationType": op.value, "clusteringPlan": None, "extraMetadata": None, "version": 1},
        )
    check_write_options(options)  # engines check earlier too; nothing may fail between begin and guard
    interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(options)
    pending = PendingInstant.begin(table.storage, table.commit_protocol, action, interval, requested)
    with pending.guard(lambda instant: rollback(table, instant)):
        faults.crash_point(faults.AFTER_REQUESTED)
        planned = plan()
        instant = pending.set_inflight(planned.planned.to_bytes())
        faults.crash_point(faults.AFTER_INFLIGHT)
        metadata = CommitMetadata(operation_type=op.value)
        for stat in planned.execute(instant):
            metadata.add(stat)
        faults.crash_point(faults.AFTER_DATA_FILES)
        replaced = planned.replaced
        if replaced is not None:
            metadata.partition_to_replace_file_ids = replaced
            for p in replaced:
                metadata.partition_to_write_stats.setdefault(p, [])
        metadata.extra_metadata = {**extra_metadata}
        if avro_schema:
            metadata.extra_metadata[SCHEMA_KEY] = avro_schema
        pending.remove_stray_files(f for s in metadata.write_stats() for f in s.files())
        faults.crash_point(faults.BEFORE_COMPLETE)
        done = pending.complete(metadata)
    log.info("committed %s %s: %s", done.action, done.time, json.dumps(_counts(metadata)))
    return CommitResult(done.time, done.completion_time or "", done.action, op.value, metadata)


def write_table(
    table: TableHandle,
    data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch],
    operation: WriteOperation | str,
    options: dict[str, str],
    partitions: Sequence[str] | None,
    extra_metadata: dict[str, str],
) -> CommitResult:
    op = parse_operation(operation)
    check_writable(table)
    check_write_options(options)
    snapshot = table.snapshot()
    current = snapshot.schema
    if data is None:
        if op is not WriteOperation.DELETE_PARTITION:
            raise InvalidInputError(f"{op.value.lower()} needs input data")
        batch = PreparedBatch(
            op,
            pa.table(
                {
                    KEY: pa.array([], pa.string()),
                    PARTITION: pa.array([], pa.string()),
                    DELETED: pa.array([], pa.bool_()),
                }
            ),
            current or pa.schema([]),
            "",
        )
        batch.avro_schema = to_avro_schema(batch.schema, table.meta.name) if len(batch.schema) else ""
    else:
        arrow = _as_arrow(data)
        if op is WriteOperation.DELETE_PARTITION:
            kg = table.meta.key_generator
            missing = [c for c in kg.partition_fields if c not in arrow.column_names]
            if missing:
                raise SchemaError(f"delete_partition input lacks partition column(s) {', '.join(missing)}")
            paths = kg.partition_paths(arrow)
            n = arrow.num_rows
            schema = current or pa.schema([])
            batch = PreparedBatch(
                op,
                pa.table(
                    {
                        KEY: pa.array([""] * n, pa.string()),
                        PARTITION: paths,
                        DELETED: pa.array(np.ones(n, dtype=bool)),
                    }
                ),
                schema,
                to_avro_schema(schema, table.meta.name) if len(schema) else "",
            )
        else:
            batch = prepare(table, current, arrow, op, options)

    if op is not WriteOperation.DELETE:
        check_soft_delete_ordering(table, batch.records)  # refused before the instant begins
    rollback_failed_writes(table, timeline=snapshot.timeline)  # one listing of the timeline for both

    def plan() -> PlannedWrite:
        plan_write = plan_mor_write if table.meta.table_type is TableType.MERGE_ON_READ else plan_cow_write
        file_plan = plan_write(table, batch, options, partitions)

        def execute(instant: Instant) -> list[WriteStat]:
            ctx = write_context(table, instant.time, op, batch.schema, batch.avro_schema, options)
            for p in sorted({g.partition for g in file_plan.file_groups}):
                ensure_partition_metadata(table.storage, p, instant.time)
            stats = []
            for task_id, fg in enumerate(file_plan.file_groups):
                write = write_log_group if fg.log else write_file_group
                stats.append(write(table.storage, ctx, fg, task_id))
            return stats

        return PlannedWrite(_planned_metadata(file_plan, op), execute, file_plan.replaced)

    return run_write(
        table, op, plan, options=options, avro_schema=batch.avro_schema, extra_metadata=extra_metadata
    )


def _counts(md: CommitMetadata) -> dict[str, int]:
    stats = md.write_stats()
    return {
        "files": len(stats),
        "inserts": sum(s.num_inserts for s in stats),
        "updates": sum(s.num_update_writes for s in stats),
        "deletes": sum(s.num_deletes for s in stats),
    }
