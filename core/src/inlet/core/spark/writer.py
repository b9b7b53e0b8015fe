"""The Spark write engine: the driver plans from metadata, executors write, the driver commits.

The same operations as :func:`inlet.core.write.run.write_table` (insert, upsert, delete,
bulk_insert and its sort modes, insert_overwrite, insert_overwrite_table, delete_partition), on
Copy-on-Write and Merge-on-Read tables with the simple or the bucket index:

1. **keys** (executors, ``mapInArrow``): each batch is cast to the write schema (decided on the
   driver from ``df.schema`` and the table's schema, :func:`inlet.core.write.prepare.write_schema`;
   unsupported Spark types are refused there by :func:`inlet.core.spark.types.check_writable`) and
   gets its record key, partition path, delete flag, arrival number and (bucket index) Apache
   Hudi's bucket id, by the core's :class:`~inlet.core.keys.KeyGenerator` and
   :func:`~inlet.core.index.bucket.bucket_ids` (numpy Java-hash, bit-for-bit Hudi's).
2. **dedupe** (a Spark aggregation): one record per (key, partition path), chosen by the table's
   merge mode: ``max_by`` over (ordering value not null, ordering value, arrival number), or the
   latest arrival under commit-time ordering.
3. **tag**: the bucket index joins (partition, bucket) with the file groups the driver knows; the
   simple index joins the incoming keys with the keys of the latest file slices of the touched
   partitions. Those keys are read on executors (the key column of each base file, the keys of
   the log files' data and delete blocks through the core's log-key reader); the slices of
   untouched partitions are dropped by a semi-join with the incoming partitions inside the same
   job, so no extra pass over the input is needed to find them.
4. **assign**: the driver plans, from per-partition and per-file-group counts only (one small
   collect), which small file groups take inserts and how many new ones are needed (the core's
   sizing rules, :func:`~inlet.core.write.plan.insert_slots`); inserts are spread over them by a hash
   of their key weighted by each slot's share, as Apache Hudi's upsert partitioner does.
5. **write** (executors): ``groupBy(partition, file id).applyInArrow`` runs the core's
   :func:`~inlet.core.write.files.write_file_group` / :func:`~inlet.core.write.files.write_log_group` per
   file group (reading the previous base file there) and returns one serialized write stat;
   bulk inserts and the new files of replace operations with the simple index are written by each
   task for the rows it holds (``mapInArrow``; ``GLOBAL_SORT`` range-partitions and sorts by
   (partition path, key) first, ``PARTITION_SORT`` sorts each task's rows), as Hudi's bulk insert.
**The bucket index in one pass** (every operation but the replace ones): steps 2 to 5 collapse into
one job, since the file group of a record follows from its bucket alone. The driver reads which file
group holds each (partition, bucket) off the view (:class:`BucketLayout`); the keyed records are
shuffled once by (partition, bucket), and each task dedupes what it holds by key (the core's
:func:`~inlet.core.merge.dedupe.dedupe`: the reduce side of the aggregation, the shuffle having brought
every record of a key to it), routes and writes its buckets (:func:`write_buckets`). No counting job
runs first, so the inflight instant carries the operation but no workload profile. This removes two
shuffles and three jobs from every upsert; replace operations and the simple index take the steps
as listed.

6. **commit** (driver): :func:`~inlet.core.write.run.run_write` — the same requested / inflight /
   heartbeat / markers / rollback-on-failure discipline as the local engine, through the table's
   commit protocol (or the one passed in). Write tokens are ``<task>-<stage>-<task attempt id>``,
   so attempts never share a file name; files named by markers but not by the collected stats
   (failed task attempts, speculative duplicates) are deleted before the instant completes.

Only counts, file-group plans and write stats travel between driver and executors; joins on data
are shuffle joins (never broadcast, which would collect a side on the driver).

Knobs (write options; Apache Hudi's names where Hudi has one):

- ``hoodie.upsert.shuffle.parallelism`` / ``hoodie.insert.shuffle.parallelism`` /
  ``hoodie.delete.shuffle.parallelism`` / ``hoodie.bulkinsert.shuffle.parallelism``: write tasks
  (file groups are spread over at most this many; ``GLOBAL_SORT`` range partitions). Default:
  twice ``spark.default.parallelism``.
- ``hoodie.write.tagged.record.storage.level`` (default ``MEMORY_AND_DISK``): how the keyed and
  tagged records are kept between the counting job and the write job.
- ``hoodie.parquet.max.file.size``, ``hoodie.parquet.small.file.limit``,
  ``hoodie.copyonwrite.record.size.estimate``, ``hoodie.bulkinsert.sort.mode``,
  ``hoodie.combine.before.insert``, ``hoodie.logfile.data.block.format``,
  ``hoodie.parquet.compression.codec``: as for the local engine.
- Spark's own: ``spark.sql.shuffle.partitions`` (dedupe, joins), ``spark.sql.execution.arrow
  .maxRecordsPerBatch`` (Arrow batches of the key stage and bulk writers), executor / Python
  worker memory: one file group's incoming rows and its previous base file are held by one Python
  worker (about twice ``hoodie.parquet.max.file.size`` decompressed).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel, TaskContext
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from inlet.core import errors, faults
from inlet.core.actions.rollback import rollback_failed_writes
from inlet.core.commit.protocol import CommitProtocol
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    BulkInsertSortMode,
    IndexType,
    MergeMode,
    TableType,
    WriteConfig,
    WriteOperation,
)
from inlet.core.errors import (
    InletError,
    InvalidConfigError,
    InvalidInputError,
    InvalidOptionError,
    SchemaError,
    TableExistsError,
)
from inlet.core.file_group.reader import BlockFilter
from inlet.core.file_group.view import BaseFile, CommittedInstants, FileSystemView, LogFile, new_file_id
from inlet.core.index.bucket import bucket_file_id_prefix, bucket_ids, bucket_of_file_id, nbcc_bucket_file_id
from inlet.core.index.simple import LOG_KEYS, stored_record_keys
from inlet.core.keys import KeyGenerator
from inlet.core.merge import dedupe as merging
from inlet.core.schema import META_COLUMNS, cast_to, normalize_schema, normalize_type, to_avro_schema
from inlet.core.spark import options as opt
from inlet.core.spark import types as spark_types
from inlet.core.storage import Storage
from inlet.core.table.facade import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant
from inlet.core.write import prepare
from inlet.core.write.files import WriteContext, ensure_partition_metadata, write_file_group, write_log_group
from inlet.core.write.plan import (
    FileGroupWrite,
    insert_slots,
    latest_base_file,
    records_per_file,
    without_deletes,
)
from inlet.core.write.prepare import (
    DELETED,
    KEY,
    PARTITION,
    check_input_columns,
    check_writable,
    combines,
    delete_key_fields,
    delete_key_schema,
    delete_records,
    keyed_records,
    refuse_null_ordering_deletes,
    write_schema,
)
from inlet.core.write.run import PlannedWrite, run_write, write_context

log = logging.getLogger(__name__)

SEQ = "__inlet_seq"  # arrival number: (Spark partition << 33) + row number, like monotonically_increasing_id
BUCKET = "__inlet_bucket"
TAGGED = "__inlet_tagged_file_id"  # the file group the simple index found the key in
FILE_ID = "__inlet_file_id"  # the file group a record is written to
FRACTION = "__inlet_fraction"  # a key's place in [0, 1), spreading inserts over file groups
_NAME = "__inlet_file_name"
_ROW = "__inlet_row"
_SEQ_SHIFT = 33
_HASH_BITS = 53
STATS_SCHEMA = "partition string, stat string"
DEFAULT_STORAGE_LEVEL = "MEMORY_AND_DISK"
SAVE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")

R = TypeVar("R")


# ------------------------------------------------------------------------------ errors


_ERROR_CLASSES: dict[str, type[InletError]] = {
    name: cls for name, cls in vars(errors).items() if isinstance(cls, type) and issubclass(cls, InletError)
}
_ERROR_LINE = re.compile(r"(?:inlet\.core\.errors\.)?\b(" + "|".join(_ERROR_CLASSES) + r"): (.*)")


def executor_error(e: BaseException) -> InletError | None:
    """The Inlet error an executor raised, recovered from a Spark job failure (Spark reports it as
    a ``PythonException`` carrying the worker's traceback text), or None."""
    if isinstance(e, InletError):
        return e
    found = _ERROR_LINE.findall(str(e))
    if not found:
        return None
    name, message = found[-1]
    return _ERROR_CLASSES[name](message.strip())


def run_job(what: str, action: Callable[[], R]) -> R:
    """Run a Spark action; an Inlet error raised on an executor is raised again as itself."""
    try:
        return action()
    except Exception as e:
        inlet = executor_error(e)
        if inlet is None or inlet is e:
            raise
        log.debug("%s failed on an executor: %s", what, e)
        raise inlet from None


# ------------------------------------------------------------------------------ small helpers


def col(name: str) -> Column:
    """A column by its exact name (dots and other characters quoted)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _stat_json(stat: WriteStat) -> str:
    return json.dumps(dataclasses.asdict(stat), separators=(",", ":"))


def _stat_of(text: str) -> WriteStat:
    return WriteStat(**json.loads(text))


def _task() -> tuple[int, int, int, int]:
    """(partition id, stage id, task attempt id, attempt number) of the running task."""
    tc = TaskContext.get()
    if tc is None:
        return 0, 0, 0, 0
    return tc.partitionId(), tc.stageId(), tc.taskAttemptId(), tc.attemptNumber()


def _maybe_crash(point: str | None, here: str, chosen: bool) -> None:
    """Fault injection (tests): die like a killed executor at ``point`` in the first attempt of a
    ``chosen`` task, through the core's :func:`inlet.core.faults.crash_point`."""
    if point != here or not chosen or _task()[3] != 0:
        return
    os.environ["INLET_CRASH_AT"] = point
    faults.crash_point(point)


def spark_path(storage: Storage, rel: str) -> str:
    """A URI Spark reads a table file by (``file://`` for local paths, whatever the default FS)."""
    uri = storage.base_uri
    if "://" not in uri:
        uri = "file://" + os.path.abspath(uri)
    return uri.rstrip("/") + "/" + rel


# ------------------------------------------------------------------------------ 1. keys (executors)


@dataclass(frozen=True)
class KeySpec:
    """What the key stage of one write needs on an executor."""

    mode: str  # "rows" | "delete" | "partitions"
    schema: pa.Schema  # rows: the write schema; delete: the key columns' types
    key_generator: KeyGenerator
    out_schema: pa.Schema  # the exact Arrow schema the output batches carry
    bucket_fields: tuple[str, ...] = ()
    num_buckets: int = 0


def key_batches(spec: KeySpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: cast, then add record keys, partition paths, delete flags, arrival
    numbers and bucket ids."""
    pid = _task()[0]
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
            seq = np.arange(offset, offset + n, dtype=np.int64) + (np.int64(pid) << _SEQ_SHIFT)
            offset += n
            records = records.append_column(SEQ, pa.array(seq))
            if spec.num_buckets:
                ids = bucket_ids(records.column(KEY), list(spec.bucket_fields), spec.num_buckets)
                records = records.append_column(BUCKET, ids)
        yield from spark_types.conform(records, spec.out_schema).to_batches()


# ------------------------------------------------------------------------------ 3. stored keys (executors)


@dataclass(frozen=True)
class SliceKeySpec:
    base_uri: str
    key_generator: KeyGenerator
    populate_meta_fields: bool
    committed: CommittedInstants


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
    storage = Storage(spec.base_uri)
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


# ------------------------------------------------------------------------------ 5. writing (executors)


@dataclass(frozen=True)
class GroupSpec:
    """One file group of a write, as planned on the driver."""

    index: int  # unique within the write: the task id of its write token and sequence numbers
    partition: str
    file_id: str
    base_file: BaseFile | None
    explicit: bool = False
    concat: bool = False
    log: bool = False
    tagged: bool = False
    rows: int = 0  # incoming records planned for it (the inflight workload profile)


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
    _, stage, attempt_id, _ = _task()
    storage = Storage(job.ctx.base_uri)
    write = write_log_group if spec.log else write_file_group
    stat = write(storage, job.ctx, fg, spec.index, attempt=attempt_id, stage_id=stage)
    _maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, spec.index == 0)
    return pa.table({"partition": [partition], "stat": [_stat_json(stat)]})


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
    pid, stage, attempt_id, _ = _task()
    storage = Storage(job.ctx.base_uri)
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
        _maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, pid == 0)
        return pa.RecordBatch.from_arrays(
            [pa.array([partition]), pa.array([_stat_json(stat)])], schema=out_schema
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
    crash_at: str | None = None


def _runs(*columns: pa.ChunkedArray) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal values of ``columns`` (rows sorted by them)."""
    n = len(columns[0])
    if n == 0:
        return []
    change = np.zeros(n - 1, dtype=bool)
    for c in columns:
        a = c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
        change |= np.asarray(pc.not_equal(a.slice(0, n - 1), a.slice(1)).to_numpy(zero_copy_only=False))
    starts = [0, *(np.flatnonzero(change) + 1).tolist()]
    return list(zip(starts, [*starts[1:], n], strict=True))


def write_buckets(job: BucketJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body of :class:`BucketJob`: for each (partition, bucket) the task holds, in
    arrival order, dedupe, then append a log file or write a new base file of the bucket's file
    group (one stat row each)."""
    pid, stage, attempt_id, _ = _task()
    ctx, layout = job.ctx, job.layout
    received = [b for b in batches if b.num_rows]
    if not received:
        return
    data = pa.Table.from_batches(received)
    data = data.take(
        pc.sort_indices(data, [(PARTITION, "ascending"), (BUCKET, "ascending"), (SEQ, "ascending")])
    )
    storage = Storage(ctx.base_uri)
    out_schema = pa.schema([("partition", pa.string()), ("stat", pa.string())])
    partitions: set[str] = set()
    written = 0
    for start, end in _runs(data.column(PARTITION), data.column(BUCKET)):
        rows = data.slice(start, end - start)
        partition = rows.column(PARTITION)[0].as_py()
        bucket = rows.column(BUCKET)[0].as_py()
        if job.combine is not None:
            rows = merging.dedupe(rows, job.combine, ctx.ordering_field)
        deleted = rows.column(DELETED)
        live = rows.num_rows - (pc.sum(deleted).as_py() or 0)
        spec = layout.target(partition, bucket, rows.num_rows, live)
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
        _maybe_crash(job.crash_at, faults.AFTER_DATA_FILES, True)
        yield pa.RecordBatch.from_arrays(
            [pa.array([partition]), pa.array([_stat_json(stat)])], schema=out_schema
        )


# ------------------------------------------------------------------------------ the plan (driver)


@dataclass
class SparkPlan:
    """What the driver decided from metadata and counts."""

    groups: dict[tuple[str, str], GroupSpec] = field(default_factory=dict)
    slots: list[tuple[str, float, float, str]] = field(default_factory=list)  # partition, lo, hi, file id
    buckets: list[tuple[str, int, str, bool]] = field(default_factory=list)  # partition, bucket, file id, new
    replaced: dict[str, list[str]] | None = None
    bulk_rows: dict[str, int] | None = None  # bulk path: live records per partition
    per_file: int = 0

    def add(
        self,
        partition: str,
        file_id: str,
        base: BaseFile | None,
        rows: int,
        *,
        explicit: bool = False,
        concat: bool = False,
        log: bool = False,
        tagged: bool = False,
    ) -> GroupSpec:
        key = (partition, file_id)
        previous = self.groups.get(key)
        spec = GroupSpec(
            0,
            partition,
            file_id,
            base,
            explicit,
            concat,
            log,
            tagged,
            rows + (previous.rows if previous else 0),
        )
        self.groups[key] = spec
        return spec

    def numbered(self) -> None:
        self.groups = {
            k: dataclasses.replace(g, index=i) for i, (k, g) in enumerate(sorted(self.groups.items()))
        }

    def planned_metadata(self, op: WriteOperation) -> CommitMetadata:
        md = CommitMetadata(operation_type=op.value)
        for g in self.groups.values():
            md.add(WriteStat(file_id=g.file_id, path="", partition_path=g.partition, num_inserts=g.rows))
        for p, n in sorted((self.bulk_rows or {}).items()):
            md.add(WriteStat(file_id="", path="", partition_path=p, num_inserts=n))
        return md

    def partitions(self) -> list[str]:
        return sorted({g.partition for g in self.groups.values()} | set(self.bulk_rows or {}))


@dataclass(frozen=True)
class Counts:
    """Per-key counts of incoming records (after dedupe): all, live (not deleted), and deletes
    without an ordering value."""

    rows: int
    live: int
    null_ordering_deletes: int = 0


def _replace_targets(
    op: WriteOperation, view: FileSystemView, incoming: Sequence[str], partitions: Sequence[str]
) -> list[str]:
    if op is WriteOperation.INSERT_OVERWRITE_TABLE:
        return view.partitions()
    if op is WriteOperation.DELETE_PARTITION:
        targets = sorted(set(partitions) | set(incoming))
        if not targets:
            raise InvalidInputError("delete_partition needs partition paths or rows naming partitions")
        return targets
    return sorted(incoming)


def _slots(plan: SparkPlan, partition: str, slots: Sequence[tuple[str, BaseFile | None, int]]) -> None:
    """Record insert slots of a partition as hash ranges weighted by their record counts."""
    total = sum(n for _, _, n in slots)
    done = 0
    for i, (file_id, _, n) in enumerate(slots):
        lo = done / total
        done += n
        hi = 2.0 if i == len(slots) - 1 else done / total
        plan.slots.append((partition, lo, hi, file_id))


def _check_log_deletes(table: HudiTable, plan: SparkPlan, counts: Mapping[tuple[str, str], Counts]) -> None:
    """The core's rule: soft deletes appended to logs need their ordering value (EVENT_TIME)."""
    ordering = table.ordering_field
    if table.merge_mode is not MergeMode.EVENT_TIME_ORDERING or not ordering:
        return
    for key, g in plan.groups.items():
        if g.log and not g.explicit and counts.get(key, Counts(0, 0)).null_ordering_deletes:
            raise InvalidInputError(
                f"_hoodie_is_deleted rows need a value in the ordering field {ordering!r} on a "
                "Merge-on-Read table (the delete block records it)"
            )


@dataclass(frozen=True)
class BucketLayout:
    """Where the records of each (partition path, bucket) of a bucket-index write go: the file
    groups that exist (from the driver's view of the table) and how a missing one is named and
    written. Plain values, so that executors can route records themselves."""

    existing: Mapping[tuple[str, int], tuple[str, BaseFile | None]]
    mor: bool
    nbcc: bool
    replace: bool
    explicit: bool  # the delete operation: its deletes win regardless of ordering
    concat: bool  # insert / bulk_insert: appended without merging stored records
    bulk: bool = False  # bulk_insert: a new file group gets a base file, also on Merge-on-Read

    @classmethod
    def of(cls, table: HudiTable, op: WriteOperation, view: FileSystemView) -> BucketLayout:
        mor = table.table_type is TableType.MERGE_ON_READ
        existing: dict[tuple[str, int], tuple[str, BaseFile | None]] = {}
        if not op.is_replace:
            for s in view.latest_file_slices():
                b = bucket_of_file_id(s.file_id)
                if b is not None:
                    base = s.base_file if mor else latest_base_file(view, s.partition, s.file_id)
                    existing[(s.partition, b)] = (s.file_id, base)
        return cls(
            existing,
            mor,
            table.meta.nbcc,
            op.is_replace,
            op is WriteOperation.DELETE,
            op in (WriteOperation.INSERT, WriteOperation.BULK_INSERT),
            op is WriteOperation.BULK_INSERT,
        )

    def target(self, partition: str, bucket: int, rows: int, live: int) -> GroupSpec | None:
        """The file group of a bucket's ``rows`` incoming records (``live`` of them not deletes),
        or None when there is nothing to write: deletes only, and no file group to delete from.
        A new file group takes only the live records."""
        found = self.existing.get((partition, bucket))
        if found is not None:
            file_id, base = found
            mor = self.mor
            return GroupSpec(
                0, partition, file_id, base, self.explicit, self.concat and not mor, mor, mor, rows
            )
        if self.explicit or live == 0:
            return None
        log_only = self.mor and not self.replace and not self.bulk
        if log_only and self.nbcc:
            file_id = nbcc_bucket_file_id(bucket)
        else:
            file_id = bucket_file_id_prefix(bucket) + "-0"
        return GroupSpec(
            0, partition, file_id, None, False, self.concat and not log_only, log_only, False, live
        )


def plan_buckets(
    table: HudiTable, op: WriteOperation, view: FileSystemView, counts: Mapping[tuple[str, int], Counts]
) -> SparkPlan:
    """Bucket index, from counts: every record goes to its bucket's file group (new ones for
    replace operations)."""
    layout = BucketLayout.of(table, op, view)
    plan = SparkPlan()
    per_group: dict[tuple[str, str], Counts] = {}
    for (p, b), c in sorted(counts.items()):
        spec = layout.target(p, b, c.rows, c.live)
        if spec is None:
            continue
        plan.groups[(p, spec.file_id)] = spec
        is_new = spec.base_file is None and (p, b) not in layout.existing
        plan.buckets.append((p, b, spec.file_id, is_new))
        if not is_new:
            per_group[(p, spec.file_id)] = c
    if layout.mor and not layout.explicit:
        _check_log_deletes(table, plan, per_group)
    return plan


def plan_simple(
    table: HudiTable,
    op: WriteOperation,
    view: FileSystemView,
    options: dict[str, str],
    inserts: Mapping[str, int],
    tagged: Mapping[tuple[str, str], Counts],
) -> SparkPlan:
    """Simple index, insert / upsert / delete: tagged records to the file groups holding their keys
    (log appends on Merge-on-Read), inserts to small file groups first, then to new ones."""
    mor = table.table_type is TableType.MERGE_ON_READ
    explicit = op is WriteOperation.DELETE
    concat = op is WriteOperation.INSERT
    plan = SparkPlan()
    for (p, file_id), c in sorted(tagged.items()):
        s = next((s for s in view.latest_file_slices(p) if s.file_id == file_id), None)
        base = (s.base_file if s else None) if mor else latest_base_file(view, p, file_id)
        plan.add(p, file_id, base, c.rows, explicit=explicit, log=mor, tagged=mor)
    for p, n in sorted(inserts.items()):
        if n <= 0 or explicit:
            continue
        not_small = {s.file_id for s in view.latest_file_slices(p) if s.has_logs} if mor else None
        slots = insert_slots(table, p, n, view, options, small_files=True, not_small=not_small)
        _slots(plan, p, slots)
        for file_id, base, take in slots:
            if (p, file_id) in plan.groups:  # a small file group that also takes updates
                g = plan.groups[(p, file_id)]
                plan.groups[(p, file_id)] = dataclasses.replace(
                    g, rows=g.rows + take, log=False, tagged=False
                )
            else:
                plan.add(p, file_id, base, take, concat=concat)
    if mor and not explicit:
        _check_log_deletes(table, plan, tagged)
    return plan


# ------------------------------------------------------------------------------ the pipeline (driver)


@dataclass
class _Session:
    """DataFrames persisted by one write, released at its end."""

    persisted: list[DataFrame] = field(default_factory=list)

    def persist(self, df: DataFrame, level: StorageLevel) -> DataFrame:
        df = df.persist(level)
        self.persisted.append(df)
        return df

    def release(self) -> None:
        for df in self.persisted:
            df.unpersist()
        self.persisted.clear()


def _storage_level(options: Mapping[str, str]) -> StorageLevel:
    name = options.get(opt.TAGGED_STORAGE_LEVEL, DEFAULT_STORAGE_LEVEL).strip().upper()
    level = getattr(StorageLevel, name, None)
    if not isinstance(level, StorageLevel):
        raise InvalidOptionError(
            f"invalid option {opt.TAGGED_STORAGE_LEVEL}={name!r}: not a Spark storage level"
        )
    return level


_PARALLELISM_KEYS = (
    opt.UPSERT_PARALLELISM,
    opt.INSERT_PARALLELISM,
    opt.BULK_INSERT_PARALLELISM,
    opt.DELETE_PARALLELISM,
)


def _parallelism_option(options: Mapping[str, str], key: str) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidOptionError(f"invalid option {key}={raw!r}: not an integer") from None


def check_write_options(options: dict[str, str]) -> None:
    """Every option a Spark write parses (the core's write options and the Spark knobs), checked
    before the table is created or an instant begins."""
    prepare.check_write_options(options)
    _storage_level(options)
    for key in _PARALLELISM_KEYS:
        _parallelism_option(options, key)


def _parallelism(spark: SparkSession, options: Mapping[str, str], op: WriteOperation, default: int) -> int:
    key = {
        WriteOperation.UPSERT: opt.UPSERT_PARALLELISM,
        WriteOperation.DELETE: opt.DELETE_PARALLELISM,
        WriteOperation.BULK_INSERT: opt.BULK_INSERT_PARALLELISM,
    }.get(op, opt.INSERT_PARALLELISM)
    value = _parallelism_option(options, key)
    if value is None:
        return max(1, default)
    return max(1, value) if value > 0 else max(1, default)


def _counts_by(df: DataFrame, keys: Sequence[str], ordering: str | None) -> dict[tuple[Any, ...], Counts]:
    """Counts of ``df`` grouped by ``keys``: one row per group (partitions, buckets, file groups)."""
    deleted = col(DELETED)
    aggs = [
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(~deleted, 1).otherwise(0)).alias("live"),
    ]
    if ordering is not None and ordering in df.columns:
        aggs.append(F.sum(F.when(deleted & col(ordering).isNull(), 1).otherwise(0)).alias("nulls"))
    else:
        aggs.append(F.lit(0).alias("nulls"))
    rows = run_job("counting the input", lambda: df.groupBy(*[col(k) for k in keys]).agg(*aggs).collect())
    return {
        tuple(r[k] for k in keys): Counts(int(r["rows"]), int(r["live"] or 0), int(r["nulls"] or 0))
        for r in rows
    }


def dedupe(df: DataFrame, mode: MergeMode, ordering: str | None) -> DataFrame:
    """One record per (key, partition path): the winner under ``mode`` (ties: the later arrival),
    as a Spark aggregation."""
    rest = [c for c in df.columns if c not in (KEY, PARTITION)]
    if mode is MergeMode.EVENT_TIME_ORDERING and ordering and ordering in df.columns:
        order = F.struct(col(ordering).isNotNull(), col(ordering), col(SEQ))
    else:
        order = col(SEQ)
    winner = F.max_by(F.struct(*[col(c) for c in rest]), order).alias(_ROW)
    grouped = df.groupBy(col(KEY), col(PARTITION)).agg(winner)
    return grouped.select(col(KEY), col(PARTITION), *[F.col(_ROW).getField(c).alias(c) for c in rest])


def stored_keys(
    spark: SparkSession, table: HudiTable, view: FileSystemView, touched: DataFrame
) -> DataFrame | None:
    """(key, partition, file id) of the records in the latest file slices of the partitions that
    ``touched`` (a DataFrame of ``PARTITION``) lists, read on executors: the key column of each
    base file and the keys of the log files' data and delete blocks. The slices of partitions no
    incoming record touches are dropped by a semi-join before anything is read, in the same job."""
    rows = []
    for s in view.latest_file_slices():
        logs = [lf for lf in s.log_files if not lf.is_cdc]
        base = s.base_file.path if s.base_file is not None else None
        if base or logs:
            rows.append((s.partition, s.file_id, base, [lf.path for lf in logs], [lf.size for lf in logs]))
    if not rows:
        return None
    spec = SliceKeySpec(
        table.base_path, table.key_generator, table.populate_meta_fields, CommittedInstants.of(view)
    )
    slices = spark.createDataFrame(rows, SLICE_SCHEMA)
    # the partitions list is as long as the table has partitions (not data): broadcast is fine
    wanted = slices.join(F.broadcast(touched), PARTITION, "left_semi")
    return wanted.mapInArrow(partial(slice_keys, spec), STORED_KEYS)


def _tag(spark: SparkSession, table: HudiTable, view: FileSystemView, keyed: DataFrame) -> DataFrame:
    """``keyed`` with ``TAGGED``: the file group whose latest slice holds the key (null: none); a
    key stored in several file groups (duplicates written by inserts) yields a row for each, as
    Hudi's simple index does. Shuffle joins: data never passes the driver."""
    stored = stored_keys(spark, table, view, keyed.select(col(PARTITION)).distinct())
    if stored is None:
        return keyed.withColumn(TAGGED, F.lit(None).cast("string"))
    wanted = keyed.select(col(KEY), col(PARTITION)).hint("shuffle_hash")
    # (key, file group) pairs are unique: each slice's keys are (slice_keys)
    located = stored.join(wanted, [KEY, PARTITION]).select(col(KEY), col(PARTITION), col(TAGGED))
    return keyed.join(located.hint("shuffle_hash"), [KEY, PARTITION], "left")


def _arrow_to_spark(schema: pa.Schema) -> tuple[T.StructType, pa.Schema]:
    """The Spark schema of Arrow ``schema`` and the exact Arrow form Spark exchanges for it."""
    spark_schema = spark_types.from_arrow_schema(schema)
    return spark_schema, spark_types.to_arrow_schema(spark_schema)


def _key_stage(
    df: DataFrame, table: HudiTable, op: WriteOperation, schema: pa.Schema, delete_fields: Sequence[str]
) -> DataFrame:
    kg = table.key_generator
    bucket = table.index_type is IndexType.BUCKET and op is not WriteOperation.DELETE_PARTITION
    if op is WriteOperation.DELETE_PARTITION:
        mode, target, fields = "partitions", pa.schema([]), [pa.field(PARTITION, pa.string())]
    elif op is WriteOperation.DELETE:
        mode, target = "delete", schema
        fields = [pa.field(KEY, pa.string()), pa.field(PARTITION, pa.string()), pa.field(DELETED, pa.bool_())]
    else:
        mode, target = "rows", schema
        fields = [
            *schema,
            pa.field(KEY, pa.string()),
            pa.field(PARTITION, pa.string()),
            pa.field(DELETED, pa.bool_()),
        ]
    if mode != "partitions":
        fields.append(pa.field(SEQ, pa.int64()))
        if bucket:
            fields.append(pa.field(BUCKET, pa.int32()))
    spark_schema, arrow_schema = _arrow_to_spark(pa.schema(fields))
    spec = KeySpec(
        mode=mode,
        schema=target,
        key_generator=kg,
        out_schema=arrow_schema,
        bucket_fields=tuple(table.bucket_hash_fields) if bucket else (),
        num_buckets=table.num_buckets if bucket else 0,
    )
    if mode == "delete":
        df = df.select(*[col(c) for c in delete_fields])
    elif mode == "partitions":
        df = df.select(*[col(c) for c in kg.partition_fields])
    return df.mapInArrow(partial(key_batches, spec), spark_schema)


@dataclass
class _Prepared:
    op: WriteOperation
    schema: pa.Schema
    avro_schema: str
    keyed: DataFrame | None  # after the key stage
    combine: MergeMode | None = None  # how ``keyed`` is deduplicated by key (None: it is not)

    def deduped(self, ordering: str | None) -> DataFrame | None:
        """``keyed``, deduplicated as the operation wants (a Spark aggregation)."""
        if self.keyed is None or self.combine is None:
            return self.keyed
        return dedupe(self.keyed, self.combine, ordering)


def with_input_units(derived: pa.Schema, input_schema: pa.Schema | None) -> pa.Schema:
    """``derived`` (the table types of a DataFrame's Spark schema) with the timestamp units of the
    Arrow ``input_schema`` the DataFrame was made from: Spark's ``TimestampType`` has microseconds
    only, while the local engine keeps second/millisecond input as ``timestamp-millis``; the
    executors cast to the write schema, so the files get the input's unit (nested ones too)."""
    if input_schema is None:
        return derived
    fields = []
    for f in derived:
        i = input_schema.get_field_index(f.name)
        given = normalize_type(input_schema.field(i).type) if i >= 0 else None
        if given is not None and not given.equals(f.type) and _as_micros(given).equals(f.type):
            f = f.with_type(given)  # the same type up to timestamp units (nested ones too)
        fields.append(f)
    return pa.schema(fields, metadata=derived.metadata)


def _as_micros(typ: pa.DataType) -> pa.DataType:
    """``typ`` with every timestamp as Spark holds it (microseconds, UTC)."""
    if pa.types.is_timestamp(typ):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(_as_micros(typ.value_type)))
    if pa.types.is_map(typ):
        return pa.map_(typ.key_field, typ.item_field.with_type(_as_micros(typ.item_type)))
    if pa.types.is_struct(typ):
        return pa.struct([f.with_type(_as_micros(f.type)) for f in typ])
    return typ


def _prepare(
    df: DataFrame | None,
    table: HudiTable,
    op: WriteOperation,
    options: dict[str, str],
    input_schema: pa.Schema | None = None,
) -> _Prepared:
    """Everything that can reject the input, decided on the driver from schemas (types, columns,
    schema evolution); the key stage, lazily."""
    current = table.schema()
    if df is None:
        if op is not WriteOperation.DELETE_PARTITION:
            raise InvalidInputError(f"{op.value.lower()} needs input data")
        schema = current or pa.schema([])
        return _Prepared(op, schema, to_avro_schema(schema, table.name) if len(schema) else "", None)
    df = df.drop(*[c for c in df.columns if c in META_COLUMNS])
    check_input_columns(df.columns)
    kg = table.key_generator
    if op is WriteOperation.DELETE_PARTITION:
        missing = [c for c in kg.partition_fields if c not in df.columns]
        if missing:
            raise SchemaError(f"delete_partition input lacks partition column(s) {', '.join(missing)}")
        spark_types.check_writable(T.StructType([df.schema[c] for c in kg.partition_fields]))
        schema = current or pa.schema([])
        keyed = _key_stage(df, table, op, schema, ())
        return _Prepared(op, schema, to_avro_schema(schema, table.name) if len(schema) else "", keyed)
    if op is WriteOperation.DELETE:
        needed = delete_key_fields(table, df.columns)
        key_input = with_input_units(
            spark_types.to_table_arrow_schema(T.StructType([df.schema[c] for c in needed])), input_schema
        )
        key_schema = delete_key_schema(current, key_input)
        schema = current if current is not None else normalize_schema(key_schema)
        keyed = _key_stage(df, table, op, key_schema, needed)
        return _Prepared(
            op,
            schema,
            to_avro_schema(schema, table.name),
            keyed,
            MergeMode.COMMIT_TIME_ORDERING,
        )
    schema = write_schema(
        table.meta, current, with_input_units(spark_types.to_table_arrow_schema(df.schema), input_schema)
    )
    keyed = _key_stage(df, table, op, schema, ())
    combine = table.merge_mode if combines(op, options) else None
    return _Prepared(op, schema, to_avro_schema(schema, table.name), keyed, combine)


def _route(
    spark: SparkSession, table: HudiTable, records: DataFrame, plan: SparkPlan, lookup: bool
) -> DataFrame:
    """``records`` with the file group each goes to (``FILE_ID``); records that go nowhere (deletes
    of keys the table does not hold) dropped."""
    if table.index_type is IndexType.BUCKET:
        buckets = spark.createDataFrame(
            plan.buckets or [("", -1, "", False)], "__bp string, __bb int, __bfid string, __bnew boolean"
        )
        joined = records.join(
            F.broadcast(buckets), (col(PARTITION) == F.col("__bp")) & (col(BUCKET) == F.col("__bb")), "left"
        )
        keep = F.col("__bfid").isNotNull() & ~(F.col("__bnew") & col(DELETED))
        routed = joined.filter(keep).withColumn(FILE_ID, F.col("__bfid"))
        return routed.drop("__bp", "__bb", "__bfid", "__bnew", BUCKET)
    fraction = (F.xxhash64(col(KEY)).bitwiseAND(F.lit((1 << _HASH_BITS) - 1))).cast("double") / float(
        1 << _HASH_BITS
    )
    slots = spark.createDataFrame(
        plan.slots or [("", 0.0, 0.0, "")], "__sp string, __lo double, __hi double, __sfid string"
    )
    is_insert = ~col(DELETED) if not lookup else (col(TAGGED).isNull() & ~col(DELETED))
    with_fraction = records.withColumn(FRACTION, fraction)
    cond = (
        (col(PARTITION) == F.col("__sp"))
        & is_insert
        & (col(FRACTION) >= F.col("__lo"))
        & (col(FRACTION) < F.col("__hi"))
    )
    joined = with_fraction.join(F.broadcast(slots), cond, "left")
    target = F.coalesce(col(TAGGED), F.col("__sfid")) if lookup else F.col("__sfid")
    routed = joined.withColumn(FILE_ID, target).filter(col(FILE_ID).isNotNull())
    return routed.drop("__sp", "__lo", "__hi", "__sfid", FRACTION, TAGGED)


def _bulk_input(records: DataFrame, mode: BulkInsertSortMode, parallelism: int) -> DataFrame:
    live = records.filter(~col(DELETED))
    if mode is BulkInsertSortMode.GLOBAL_SORT:
        return live.repartitionByRange(parallelism, col(PARTITION), col(KEY)).sortWithinPartitions(
            col(PARTITION), col(KEY)
        )
    if mode is BulkInsertSortMode.PARTITION_SORT:
        return live.sortWithinPartitions(col(PARTITION), col(KEY))
    return live


def _open_table(
    path: str, settings: opt.WriteSettings, commit_protocol: CommitProtocol | None, mode: str
) -> tuple[HudiTable | None, WriteOperation]:
    """The table (created on the first write), and the operation the save mode makes of the write."""
    op = settings.operation
    try:
        table = HudiTable.open(path, commit_protocol=commit_protocol)
    except errors.TableNotFoundError:
        opt.create_table(path, settings)
        return HudiTable.open(path, commit_protocol=commit_protocol), op
    if mode in ("error", "errorifexists"):
        raise TableExistsError(f"a Hudi table already exists at {path} (save mode {mode})")
    if mode == "ignore":
        return None, op
    opt.check_against_table(settings, table.props)
    if mode == "overwrite" and op is not WriteOperation.INSERT_OVERWRITE:
        op = WriteOperation.INSERT_OVERWRITE_TABLE
    return table, op


def write(
    df: DataFrame | None,
    path: str,
    options: Mapping[str, object] | None = None,
    *,
    commit_protocol: CommitProtocol | None = None,
    partitions: Sequence[str] | None = None,
    extra_metadata: Mapping[str, str] | None = None,
    mode: str = "append",
    input_schema: pa.Schema | None = None,
) -> CommitResult | None:
    """Write a Spark DataFrame to the Hudi table at ``path`` with Apache Hudi's option names; see
    :mod:`inlet.core.spark.writer`. Returns what was committed (None with save mode ``ignore`` on an
    existing table). ``input_schema``: the Arrow schema ``df`` was made from, whose timestamp units
    are kept (:func:`with_input_units`)."""
    save_mode = mode.strip().lower()
    if save_mode not in SAVE_MODES:
        raise InvalidConfigError(f"unknown save mode {mode!r} (one of {', '.join(SAVE_MODES)})")
    settings = opt.parse_write_options(options)
    write_options = settings.write_options
    check_write_options(write_options)  # bad values fail before any work (no table, no instant)
    table, op = _open_table(path, settings, commit_protocol, save_mode)
    if table is None:
        return None
    check_writable(table)
    if op in (WriteOperation.COMPACT, WriteOperation.CLUSTER):
        raise InvalidInputError(f"{op.value.lower()} is a table service, not a write operation")
    if table.table_type is TableType.MERGE_ON_READ and not table.populate_meta_fields:
        raise errors.UnsupportedError("Merge-on-Read writes need hoodie.populate.meta.fields=true")
    prepared = _prepare(df, table, op, write_options, input_schema)
    extra = {**settings.extra_metadata, **(extra_metadata or {})}
    wanted = [*settings.partitions, *(partitions or ())]
    spark = df.sparkSession if df is not None else SparkSession.getActiveSession()
    session = _Session()
    try:
        rollback_failed_writes(table)
        return _run(spark, table, prepared, write_options, wanted, extra, session)
    finally:
        session.release()


def _bucket_write(
    spark: SparkSession, table: HudiTable, prepared: _Prepared, options: dict[str, str], view: FileSystemView
) -> PlannedWrite:
    """Bucket index, all but the replace operations: one job. Records are shuffled by (partition,
    bucket) and every task dedupes, routes and writes the buckets it holds (:func:`write_buckets`);
    the file groups come from the layout the driver read from the view, so no counting job is
    needed first. The inflight instant therefore carries no workload profile."""
    op, keyed = prepared.op, prepared.keyed
    assert keyed is not None
    layout = BucketLayout.of(table, op, view)
    mor_event_time = (
        layout.mor and table.merge_mode is MergeMode.EVENT_TIME_ORDERING and bool(table.ordering_field)
    )
    parallelism = _parallelism(spark, options, op, spark.sparkContext.defaultParallelism * 2)

    def execute(instant: Instant) -> list[WriteStat]:
        ctx = write_context(table, instant.time, op, prepared.schema, prepared.avro_schema, options)
        job = BucketJob(ctx, layout, prepared.combine, mor_event_time, options.get(opt.CRASH_AT))
        shuffled = keyed.repartition(parallelism, col(PARTITION), col(BUCKET))
        out = shuffled.mapInArrow(partial(write_buckets, job), STATS_SCHEMA)
        rows: list[Row] = run_job("writing files", out.collect)
        return [_stat_of(r["stat"]) for r in rows]

    return PlannedWrite(CommitMetadata(operation_type=op.value), execute)


def _run(
    spark: SparkSession | None,
    table: HudiTable,
    prepared: _Prepared,
    options: dict[str, str],
    partitions: Sequence[str],
    extra: dict[str, str],
    session: _Session,
) -> CommitResult:
    op = prepared.op

    def plan_it() -> PlannedWrite:
        # planned after the instant began (see run_write): the file slices read here are
        # the ones optimistic concurrency control protects
        view = table.file_system_view()
        level = _storage_level(options)
        crash_at = options.get(opt.CRASH_AT)
        bucket = table.index_type is IndexType.BUCKET
        plan = SparkPlan()
        records: DataFrame | None = None
        lookup = False
        incoming: list[str] = []
        if bucket and prepared.keyed is not None and not op.is_replace and spark is not None:
            return _bucket_write(spark, table, prepared, options, view)
        if prepared.keyed is not None:
            assert spark is not None
            deduped = prepared.deduped(table.ordering_field)
            assert deduped is not None
            keyed = session.persist(deduped, level)
            if op is WriteOperation.DELETE_PARTITION:
                rows = run_job(
                    "listing partitions", lambda: keyed.select(col(PARTITION)).distinct().collect()
                )
                incoming = sorted(r[0] for r in rows)
            elif bucket:
                counts = _counts_by(keyed, [PARTITION, BUCKET], table.ordering_field)
                incoming = sorted({k[0] for k in counts})
                plan = plan_buckets(table, op, view, {(k[0], int(k[1])): c for k, c in counts.items()})
                records = keyed
            elif op is WriteOperation.UPSERT or op is WriteOperation.DELETE:
                lookup = True  # the simple index looks the keys up
                records = session.persist(_tag(spark, table, view, keyed), level)
                by_group = _counts_by(records, [PARTITION, TAGGED], table.ordering_field)
                tagged = {(k[0], k[1]): c for k, c in by_group.items() if k[1] is not None}
                inserts: dict[str, int] = {}
                for k, c in by_group.items():
                    if k[1] is None:
                        inserts[k[0]] = inserts.get(k[0], 0) + c.live
                incoming = sorted({k[0] for k in by_group})
                plan = plan_simple(table, op, view, options, inserts, tagged)
            else:
                counts = _counts_by(keyed, [PARTITION], table.ordering_field)
                incoming = sorted({k[0] for k in counts})
                live = {k[0]: c.live for k, c in counts.items()}
                if op is WriteOperation.INSERT:
                    plan = plan_simple(table, op, view, options, live, {})
                else:  # bulk_insert, insert_overwrite(_table): new files, written where the rows are
                    plan.bulk_rows = {p: n for p, n in live.items() if n}
                    plan.per_file = records_per_file(view, options)
                records = keyed
        if op.is_replace:
            targets = _replace_targets(op, view, incoming, partitions)
            plan.replaced = {p: [g.file_id for g in view.file_groups(p)] for p in targets}
        plan.numbered()
        parallelism = (
            _parallelism(
                spark, options, op, (spark.sparkContext.defaultParallelism * 2) if spark is not None else 1
            )
            if spark is not None
            else 1
        )

        def execute(instant: Instant) -> list[WriteStat]:
            ctx = write_context(table, instant.time, op, prepared.schema, prepared.avro_schema, options)
            for p in plan.partitions():
                ensure_partition_metadata(table.storage, p, instant.time)
            if records is None or spark is None:
                return []
            if plan.bulk_rows is not None:
                if not plan.bulk_rows:
                    return []
                sort = (
                    WriteConfig.BULK_INSERT_SORT_MODE.require(options)
                    if op is WriteOperation.BULK_INSERT
                    else BulkInsertSortMode.NONE
                )
                job = BulkJob(ctx, plan.per_file, crash_at)
                out = _bulk_input(records, sort, parallelism).mapInArrow(
                    partial(write_bulk, job), STATS_SCHEMA
                )
            else:
                if not plan.groups:
                    return []
                routed = _route(spark, table, records, plan, lookup)
                n = max(1, min(len(plan.groups), parallelism))
                grouped = routed.repartition(n, col(PARTITION), col(FILE_ID)).groupBy(
                    col(PARTITION), col(FILE_ID)
                )
                out = grouped.applyInArrow(group_writer(GroupJob(ctx, plan.groups, crash_at)), STATS_SCHEMA)
            rows: list[Row] = run_job("writing files", out.collect)
            return [_stat_of(r["stat"]) for r in rows]

        return PlannedWrite(plan.planned_metadata(op), execute, plan.replaced)

    return run_write(
        table, op, plan_it, options=options, avro_schema=prepared.avro_schema, extra_metadata=extra
    )
