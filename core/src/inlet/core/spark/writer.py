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
group holds each (partition, bucket) off the view (:class:`~inlet.core.write.buckets.BucketLayout`); the keyed records are
shuffled once by (partition, bucket), and each task dedupes what it holds by key (the core's
:func:`~inlet.core.merge.dedupe.dedupe`: the reduce side of the aggregation, the shuffle having brought
every record of a key to it), routes and writes its buckets (:func:`~inlet.core.spark.executors.write_buckets`). No counting job
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
  worker (about twice ``hoodie.parquet.max.file.size`` decompressed)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from inlet.core import errors
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
    InvalidConfigError,
    InvalidInputError,
    InvalidOptionError,
    SchemaError,
    TableExistsError,
)
from inlet.core.file_group.view import CommittedInstants, FileSystemView
from inlet.core.schema import META_COLUMNS, normalize_schema, normalize_type, to_avro_schema
from inlet.core.spark import options as opt
from inlet.core.spark import types as spark_types
from inlet.core.spark.executors import (
    SLICE_SCHEMA,
    STORED_KEYS,
    BucketJob,
    BulkJob,
    GroupJob,
    KeySpec,
    SliceKeySpec,
    group_writer,
    key_batches,
    slice_keys,
    source_key_batches,
    write_buckets,
    write_bulk,
)
from inlet.core.spark.plan import Counts, SparkPlan, concatenates, plan_buckets, plan_simple, replace_targets
from inlet.core.spark.tasks import (
    _ROW,
    BUCKET,
    FILE_ID,
    FRACTION,
    HASH_BITS,
    SEQ,
    STATS_SCHEMA,
    TAGGED,
    col,
    run_job,
    stat_of,
)
from inlet.core.table.facade import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant
from inlet.core.write import prepare
from inlet.core.write.buckets import BucketLayout
from inlet.core.write.files import ensure_partition_metadata
from inlet.core.write.plan import records_per_file
from inlet.core.write.prepare import (
    DELETED,
    KEY,
    PARTITION,
    check_input_columns,
    check_writable,
    combines,
    delete_key_fields,
    delete_key_schema,
    delete_ordering_field,
    write_schema,
)
from inlet.core.write.run import PlannedWrite, run_write, write_context

log = logging.getLogger(__name__)
DEFAULT_STORAGE_LEVEL = "MEMORY_AND_DISK"
SAVE_MODES = ("append", "overwrite", "error", "errorifexists", "ignore")


@dataclass(frozen=True)
class ArrowSource:
    """Rows made on the executors: ``fn`` (a picklable ``mapInArrow`` body) turns the Arrow batches
    of each partition of ``seed`` into rows of Spark schema ``schema``. Written by :func:`write`,
    the key stage runs in the same Python worker as ``fn`` (:func:`~inlet.core.spark.executors.source_key_batches`),
    so the rows reach the JVM once, keyed, instead of twice (``seed.mapInArrow(fn, schema)`` handed to
    :func:`write` is the same write, with one more Arrow exchange between Python and the JVM per
    row). Deletes and ``delete_partition`` use :meth:`frame`."""

    seed: DataFrame
    fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
    schema: T.StructType

    def frame(self) -> DataFrame:
        """The rows as a DataFrame."""
        return self.seed.mapInArrow(self.fn, self.schema)


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
        table.base_path,
        table.key_generator,
        table.populate_meta_fields,
        CommittedInstants.of(view),
        table.storage.s3,
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
    df: DataFrame | ArrowSource,
    table: HudiTable,
    op: WriteOperation,
    schema: pa.Schema,
    delete_fields: Sequence[str],
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
    if isinstance(df, ArrowSource):
        if mode == "rows":
            return df.seed.mapInArrow(partial(source_key_batches, df.fn, spec), spark_schema)
        df = df.frame()
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
    given: DataFrame | ArrowSource | None,
    table: HudiTable,
    op: WriteOperation,
    options: dict[str, str],
    input_schema: pa.Schema | None = None,
) -> _Prepared:
    """Everything that can reject the input, decided on the driver from schemas (types, columns,
    schema evolution); the key stage, lazily."""
    current = table.schema()
    if isinstance(given, ArrowSource) and (
        op in (WriteOperation.DELETE, WriteOperation.DELETE_PARTITION)
        or any(c in META_COLUMNS for c in given.schema.names)
    ):
        given = given.frame()
    if isinstance(given, ArrowSource):  # rows: keyed where they are made
        source = given
        check_input_columns(source.schema.names)
        schema = write_schema(
            table.meta,
            current,
            with_input_units(spark_types.to_table_arrow_schema(source.schema), input_schema),
        )
        keyed = _key_stage(source, table, op, schema, ())
        combine = table.merge_mode if combines(op, options) else None
        return _Prepared(op, schema, to_avro_schema(schema, table.name), keyed, combine)
    df = given
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
    fraction = (F.xxhash64(col(KEY)).bitwiseAND(F.lit((1 << HASH_BITS) - 1))).cast("double") / float(
        1 << HASH_BITS
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
    df: DataFrame | ArrowSource | None,
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
    are kept (:func:`with_input_units`). ``df`` may be an :class:`ArrowSource` (rows made on the
    executors, keyed where they are made)."""
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
    frame = df.seed if isinstance(df, ArrowSource) else df
    spark = frame.sparkSession if frame is not None else SparkSession.getActiveSession()
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
    bucket) and every task dedupes, routes and writes the buckets it holds (:func:`~inlet.core.spark.executors.write_buckets`);
    the file groups come from the layout the driver read from the view, so no counting job is
    needed first. The inflight instant therefore carries no workload profile."""
    op, keyed = prepared.op, prepared.keyed
    assert keyed is not None
    layout = BucketLayout.of(table.meta, op, view)
    mor_event_time = delete_ordering_field(table.meta) is not None
    parallelism = _parallelism(spark, options, op, spark.sparkContext.defaultParallelism * 2)

    def execute(instant: Instant) -> list[WriteStat]:
        ctx = write_context(table, instant.time, op, prepared.schema, prepared.avro_schema, options)
        job = BucketJob(
            ctx, layout, prepared.combine, mor_event_time, concatenates(op), options.get(opt.CRASH_AT)
        )
        shuffled = keyed.repartition(parallelism, col(PARTITION), col(BUCKET))
        out = shuffled.mapInArrow(partial(write_buckets, job), STATS_SCHEMA)
        rows: list[Row] = run_job("writing files", out.collect)
        return [stat_of(r["stat"]) for r in rows]

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
            targets = replace_targets(op, view, incoming, partitions)
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
            return [stat_of(r["stat"]) for r in rows]

        return PlannedWrite(plan.planned_metadata(op), execute, plan.replaced)

    return run_write(
        table, op, plan_it, options=options, avro_schema=prepared.avro_schema, extra_metadata=extra
    )
