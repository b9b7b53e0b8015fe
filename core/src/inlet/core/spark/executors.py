"""The executor side of a Spark write (functions shipped to tasks, with plain-value specs): keying input batches, reading the stored keys of file slices for the simple index, and writing file groups, bulk inserts and buckets with the core's file writers. See :mod:`inlet.core.spark.writer` for the pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from inlet.core import faults
from inlet.core.config import (
    MergeMode,
)
from inlet.core.file_group.reader import BlockFilter
from inlet.core.file_group.view import CommittedInstants, LogFile, new_file_id
from inlet.core.index.bucket import bucket_ids
from inlet.core.index.simple import LOG_KEYS, stored_record_keys
from inlet.core.keys import KeyGenerator
from inlet.core.merge import dedupe as merging
from inlet.core.s3 import S3Options
from inlet.core.schema import cast_to
from inlet.core.spark import types as spark_types
from inlet.core.spark.plan import GroupSpec, bucket_spec
from inlet.core.spark.tasks import BUCKET, FILE_ID, SEQ, SEQ_SHIFT, TAGGED, maybe_crash, stat_json, task_ids
from inlet.core.storage import Storage
from inlet.core.write.buckets import BucketLayout, runs
from inlet.core.write.file_groups import FileGroupWrite, without_deletes
from inlet.core.write.files import WriteContext, ensure_partition_metadata, write_file_group, write_log_group
from inlet.core.write.prepare import (
    DELETED,
    KEY,
    PARTITION,
    delete_records,
    keyed_records,
    refuse_null_ordering_deletes,
)


@dataclass(frozen=True)
class KeySpec:
    """What the key stage of one write needs on an executor."""

    mode: str  # "rows" | "delete" | "partitions"
    schema: pa.Schema  # rows: the write schema; delete: the key columns' types
    key_generator: KeyGenerator
    out_schema: pa.Schema  # the exact Arrow schema the output batches carry
    bucket_fields: tuple[str, ...] = ()
    num_buckets: int = 0


def source_key_batches(
    source: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    spec: KeySpec,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of an :class:`~inlet.core.spark.writer.ArrowSource`: the source's rows
    made from ``batches`` and keyed in the same Python worker (:func:`key_batches`)."""
    return key_batches(spec, source(batches))


def key_batches(spec: KeySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: cast, then add record keys, partition paths, delete flags, arrival
    numbers and bucket ids."""
    pid = task_ids()[0]
    offset = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        data = pa.Table.from_batches([batch])
        kg = spec.key_generator
        if spec.mode == "partitions":
            records = pa.table({PARTITION: kg.partition_paths(data)})
        else:
            if spec.mode == "delete":
                records = delete_records(kg, cast_to(data, spec.schema))
            else:
                records = keyed_records(kg, cast_to(data, spec.schema))
            n = records.num_rows
            seq = np.arange(offset, offset + n, dtype=np.int64) + (np.int64(pid) << SEQ_SHIFT)
            offset += n
            records = records.append_column(SEQ, pa.array(seq))
            if spec.num_buckets:
                ids = bucket_ids(records.column(KEY), list(spec.bucket_fields), spec.num_buckets)
                records = records.append_column(BUCKET, ids)
        yield from spark_types.conform(records, spec.out_schema).to_batches()


@dataclass(frozen=True)
class SliceKeySpec:
    base_uri: str
    key_generator: KeyGenerator
    populate_meta_fields: bool
    committed: CommittedInstants
    s3: S3Options | None = None  # the driver's store options (see WriteContext.s3)


SLICE_SCHEMA = T.StructType(
    [
        T.StructField(PARTITION, T.StringType()),
        T.StructField(TAGGED, T.StringType()),
        T.StructField("base", T.StringType()),
        T.StructField("logs", T.ArrayType(T.StringType())),
        T.StructField("sizes", T.ArrayType(T.LongType())),
    ]
)
STORED_KEYS = T.StructType(
    [
        T.StructField(KEY, T.StringType()),
        T.StructField(PARTITION, T.StringType()),
        T.StructField(TAGGED, T.StringType()),
    ]
)
_STORED_ARROW = pa.schema([(KEY, pa.string()), (PARTITION, pa.string()), (TAGGED, pa.string())])


def slice_keys(spec: SliceKeySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the record keys of file slices (one input row per slice: its base file
    when its keys cannot be read by Spark, and its log files), as (key, partition, file id)."""
    storage = Storage(spec.base_uri, s3=spec.s3)
    blocks = BlockFilter(spec.committed)
    for batch in batches:
        for row in batch.to_pylist():  # one row per file slice: metadata, not data
            parts: list[pa.Array] = []
            if row["base"]:
                parts.append(
                    stored_record_keys(
                        storage, row["base"], spec.key_generator, spec.populate_meta_fields
                    ).cast(pa.string())
                )
            if row["logs"]:
                files = [LogFile.parse(p, int(s)) for p, s in zip(row["logs"], row["sizes"], strict=True)]
                logs = [lf for lf in files if lf is not None]
                parts.append(LOG_KEYS.keys(storage, logs, blocks).cast(pa.string()))
            if not parts:
                continue
            keys = pc.unique(pa.concat_arrays(parts))
            n = len(keys)
            yield pa.RecordBatch.from_arrays(
                [keys, pa.repeat(pa.scalar(row[PARTITION]), n), pa.repeat(pa.scalar(row[TAGGED]), n)],
                schema=_STORED_ARROW,
            )


@dataclass(frozen=True)
class GroupJob:
    ctx: WriteContext
    groups: Mapping[tuple[str, str], GroupSpec]
    crash_at: str | None = None


def _records(table: pa.Table, ctx: WriteContext, arrival_order: bool = True) -> pa.Table:
    """Rows as the core writers take them: data columns of the write schema (when the rows carry
    data), then ``KEY``, ``PARTITION`` and the delete flag; in arrival order unless the rows come
    in an order of their own (sorted bulk inserts)."""
    if arrival_order and SEQ in table.column_names and table.num_rows > 1:
        table = table.take(pc.sort_indices(table.column(SEQ)))
    meta = [table.column(KEY), table.column(PARTITION), table.column(DELETED)]
    names = [KEY, PARTITION, DELETED]
    if all(f.name in table.column_names for f in ctx.schema if f.name not in names):
        data = cast_to(table.select([f.name for f in ctx.schema]), ctx.schema)
        return pa.Table.from_arrays([*data.columns, *meta], names=[*data.column_names, *names])
    return pa.Table.from_arrays(meta, names=names)  # delete-operation rows: keys only


def write_group(job: GroupJob, table: pa.Table) -> pa.Table:
    """``applyInArrow`` body: write one file group's new base file or log file; one stat row."""
    partition = table.column(PARTITION)[0].as_py()
    file_id = table.column(FILE_ID)[0].as_py()
    spec = job.groups[(partition, file_id)]
    fg = FileGroupWrite(
        partition,
        file_id,
        spec.base_file,
        _records(table, job.ctx),
        explicit_deletes=spec.explicit,
        concat=spec.concat,
        log=spec.log,
        tagged=spec.tagged,
    )
    _, stage, attempt_id, _ = task_ids()
    storage = job.ctx.storage()
    write = write_log_group if spec.log else write_file_group
    stat = write(storage, job.ctx, fg, spec.index, attempt=attempt_id, stage_id=stage)
    maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, spec.index == 0)
    return pa.table({"partition": [partition], "stat": [stat_json(stat)]})


def group_writer(job: GroupJob) -> Callable[[pa.Table], pa.Table]:
    """:func:`write_group` for ``applyInArrow`` (a plain function: pyspark reads its type hints)."""

    def write_one(table: pa.Table) -> pa.Table:
        return write_group(job, table)

    return write_one


@dataclass(frozen=True)
class BulkJob:
    ctx: WriteContext
    per_file: int  # records per new base file
    crash_at: str | None = None


def write_bulk(job: BulkJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of bulk inserts (and the new files of replace operations): the task
    writes new base files for the rows it holds, per partition path in arrival order, a new file
    every ``per_file`` records (Hudi's bulk-insert handles); one stat row per file."""
    pid, stage, attempt_id, _ = task_ids()
    storage = job.ctx.storage()
    buffers: dict[str, list[pa.Table]] = {}
    counts: dict[str, int] = {}
    written = 0
    out_schema = pa.schema([("partition", pa.string()), ("stat", pa.string())])

    def flush(partition: str, rows: pa.Table) -> pa.RecordBatch:
        nonlocal written
        fg = FileGroupWrite(partition, new_file_id(), None, _records(rows, job.ctx, False), concat=True)
        stat = write_file_group(
            storage, job.ctx, fg, pid, attempt=attempt_id, stage_id=stage, seq_start=written
        )
        written += rows.num_rows
        maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, pid == 0)
        return pa.RecordBatch.from_arrays(
            [pa.array([partition]), pa.array([stat_json(stat)])], schema=out_schema
        )

    for batch in batches:
        if batch.num_rows == 0:
            continue
        data = pa.Table.from_batches([batch])
        parts = data.column(PARTITION)
        present = pc.unique(parts).to_pylist()
        for p in present:
            rows = data if len(present) == 1 else data.filter(pc.equal(parts, p))
            buffers.setdefault(p, []).append(rows)
            counts[p] = counts.get(p, 0) + rows.num_rows
            while counts[p] >= job.per_file:
                full = pa.concat_tables(buffers[p])
                yield flush(p, full.slice(0, job.per_file))
                rest = full.slice(job.per_file)
                buffers[p], counts[p] = [rest], rest.num_rows
    for p in sorted(buffers):
        if counts[p]:
            yield flush(p, pa.concat_tables(buffers[p]))


@dataclass(frozen=True)
class BucketJob:
    """A bucket-index write done in one pass: records arrive shuffled by (partition, bucket), and
    each task dedupes, routes and writes the buckets it holds (no counting job first)."""

    ctx: WriteContext
    layout: BucketLayout
    combine: MergeMode | None  # how records are deduplicated by key first (None: they are not)
    check_log_deletes: bool  # soft deletes bound for log files need their ordering value
    concat: bool  # insert / bulk_insert: appended to base files without merging stored records
    crash_at: str | None = None


def write_buckets(job: BucketJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of :class:`BucketJob`: for each (partition, bucket) the task holds, in
    arrival order, dedupe, then append a log file or write a new base file of the bucket's file
    group (one stat row each)."""
    pid, stage, attempt_id, _ = task_ids()
    ctx, layout = job.ctx, job.layout
    received = [b for b in batches if b.num_rows]
    if not received:
        return
    data = pa.Table.from_batches(received)
    data = data.take(
        pc.sort_indices(data, [(PARTITION, "ascending"), (BUCKET, "ascending"), (SEQ, "ascending")])
    )
    storage = ctx.storage()
    out_schema = pa.schema([("partition", pa.string()), ("stat", pa.string())])
    partitions: set[str] = set()
    written = 0
    for start, end in runs(data.column(PARTITION), data.column(BUCKET)):
        rows = data.slice(start, end - start)
        partition = rows.column(PARTITION)[0].as_py()
        bucket = rows.column(BUCKET)[0].as_py()
        if job.combine is not None:
            rows = merging.dedupe(rows, job.combine, ctx.ordering_field)
        deleted = rows.column(DELETED)
        live = rows.num_rows - (pc.sum(deleted).as_py() or 0)
        spec = bucket_spec(layout, job.concat, partition, bucket, rows.num_rows, live)
        if spec is None:
            continue
        if (partition, bucket) not in layout.existing:
            rows = without_deletes(rows)  # nothing stored to delete
        elif spec.log and job.check_log_deletes and not spec.explicit:
            refuse_null_ordering_deletes(rows, ctx.ordering_field)
        if partition not in partitions:
            ensure_partition_metadata(storage, partition, ctx.instant_time)
            partitions.add(partition)
        fg = FileGroupWrite(
            partition,
            spec.file_id,
            spec.base_file,
            _records(rows, ctx, arrival_order=False),
            explicit_deletes=spec.explicit,
            concat=spec.concat,
            log=spec.log,
            tagged=spec.tagged,
        )
        write = write_log_group if spec.log else write_file_group
        stat = write(storage, ctx, fg, pid, attempt=attempt_id, stage_id=stage, seq_start=written)
        written += rows.num_rows
        # which tasks hold buckets is the shuffle's choice: each one's first attempt may die
        maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, True)
        yield pa.RecordBatch.from_arrays(
            [pa.array([partition]), pa.array([stat_json(stat)])], schema=out_schema
        )
