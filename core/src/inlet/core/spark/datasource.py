"""A PySpark Python Data Source for Inlet/Hudi tables, registered as formats ``hudi`` and ``inlet``.

>>> from inlet.core.spark.datasource import register
>>> register(spark)                       # explicit: once per SparkSession (``read`` does it too)
>>> df = (spark.read.format("hudi")
...       .option("hoodie.datasource.query.type", "snapshot")   # or read_optimized
...       .option("as.of.instant", "2024-05-01 09:30:00")       # time travel (optional)
...       .load("/lake/trips"))
>>> df.where("city = 'sf'").select("id", "fare")

Reading (the driver plans from metadata, executors read):

- one Spark input partition per file slice; each task runs the core's per-slice read
  (:func:`inlet.core.read.snapshot.read_slice`: a base file, or a Merge-on-Read slice merged with its
  log files) and yields Arrow record batches;
- the schema is the table's (Avro schema of the latest commit, or as of ``as.of.instant``) with
  the five ``_hoodie_*`` meta columns first, as Apache Hudi's Spark reader shows it
  (``inlet.read.meta.columns=false`` leaves them out);
- partition pruning: ``inlet.read.filters`` (a JSON list of ``[column, op, value]``, ANDed; ops
  ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``) leaves out the partitions whose
  path values fail them before planning (fewer input partitions), filters base files with their
  Parquet statistics and merged slices after merging. Spark's own ``where`` clauses are applied
  by Spark after the scan;
- ``inlet.read.filter.pushdown=true`` (opt-in) also takes ``=``, ``<>``, ``<``, ``<=``, ``>``,
  ``>=`` and ``IN`` filters of Spark's ``where`` (``DataSourceReader.pushFilters``; :func:`register`
  enables ``spark.sql.python.filterPushdown.enabled``). It is off by default because PySpark 4.3
  caches the planned read on the DataFrame returned by ``load()``: a later query on that same
  DataFrame whose filters cannot be pushed (none, or only ``OR``...) reuses the previous query's
  pushed filters and returns too few rows. With it on, ``load()`` once per query. Filters whose
  Arrow evaluation could differ from Spark's (floating-point NaN ordering, ``NOT IN`` with nulls,
  null literals) are never pushed;
- projection: Python data sources get no column pruning from Spark (PySpark 4.3's
  ``PythonScanBuilder`` only pushes filters), so give the columns to read either as a schema
  (``spark.read.format("hudi").schema("id long, fare double")``) or as the option
  ``inlet.read.columns=id,fare``; only those columns are read from the files;
- ``hoodie.datasource.query.type``: ``snapshot`` (default), ``read_optimized`` or ``incremental``;
  ``as.of.instant`` accepts ``yyyyMMddHHmmssSSS``, ``yyyyMMddHHmmss``, ``yyyy-MM-dd HH:mm:ss[.SSS]``
  and ``yyyy-MM-dd`` (UTC, the time zone of Inlet's timelines);
- incremental queries take Apache Hudi's options: ``hoodie.datasource.read.begin.instanttime``
  (required, exclusive; ``000`` reads from the start) and ``hoodie.datasource.read.end.instanttime``
  (inclusive), completion times as in Hudi 1.x, and ``hoodie.datasource.query.incremental.format``:
  ``latest_state`` (Hudi's default: one input partition per file slice the window touched, see
  :mod:`inlet.core.read.incremental`), ``cdc`` (Hudi's ``op``, ``ts_ms``, ``before``, ``after``
  rows, inferred per commit: :mod:`inlet.core.read.cdc`), or Inlet's ``min_delta`` /
  ``append_only`` (:mod:`inlet.core.read.net_changes`); all but ``latest_state`` are computed in
  one task and take no filters.

Tables on S3 (``s3://``): the store is taken from the Hadoop S3A options ``fs.s3a.endpoint``,
``fs.s3a.endpoint.region``, ``fs.s3a.access.key``, ``fs.s3a.secret.key``, ``fs.s3a.session.token``
and ``fs.s3a.path.style.access`` over the environment of the worker that plans the query, and the
result travels with the plan and the writer to the executors (which read no environment for it).
:func:`read` passes the calling process's own store options that way.

Writing (``df.write.format("hudi")``): a Python data source's writer gets each task's rows
separately and one ``commit()`` on the driver, with no shuffle in between, so only writes that
need no global view of the data are done here:

- ``insert`` and ``bulk_insert`` (sort mode ``NONE`` or ``PARTITION_SORT``) into an existing
  table with the simple index, with ``hoodie.combine.before.insert=false`` (no dedupe across
  tasks is possible): each task writes new file groups, the driver commits their stats through
  the table's commit protocol. Files of failed or speculative task attempts are deleted before
  the commit completes; a failed job rolls the instant back.
- Everything else (upsert, delete, the overwrite operations, inserts with dedupe, bucket-index
  tables, ``mode("overwrite")``, creating a table) needs a shuffle or an index lookup first and
  is refused with a message pointing to ``inlet.core.spark.write(df, path, options)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import DoubleType, FloatType, StructType

from inlet.core.actions.rollback import rollback, rollback_failed_writes
from inlet.core.commit.heartbeat import HEARTBEAT_DIR
from inlet.core.commit.lifecycle import PendingInstant
from inlet.core.config import BulkInsertSortMode, IndexType, TableType, WriteConfig, WriteOperation
from inlet.core.errors import (
    InletError,
    InvalidConfigError,
    InvalidInputError,
    TableNotFoundError,
    UnsupportedError,
)
from inlet.core.file_group.view import FileSlice, new_file_id
from inlet.core.read.incremental import IncrementalPlan, plan_incremental, read_incremental_slice
from inlet.core.read.net_changes import net_change_schema
from inlet.core.read.options import ChangeFormat, Filter, QueryType, ReadOptions
from inlet.core.read.snapshot import ReadPlan, filter_expression, plan_read, read_slice
from inlet.core.s3 import S3Options, is_s3_uri
from inlet.core.schema import evolve, to_avro_schema
from inlet.core.spark import types as spark_types
from inlet.core.table.facade import HudiTable
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, normalize_instant_time
from inlet.core.write.file_groups import FileGroupWrite
from inlet.core.write.files import WriteContext, ensure_partition_metadata, write_file_group
from inlet.core.write.prepare import DELETED, KEY, PARTITION, check_write_options, prepare

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

FORMAT_NAMES = ("hudi", "inlet")
QUERY_TYPE = "hoodie.datasource.query.type"
AS_OF = "as.of.instant"
BEGIN_INSTANT = "hoodie.datasource.read.begin.instanttime"
END_INSTANT = "hoodie.datasource.read.end.instanttime"
INCREMENTAL_FORMAT = "hoodie.datasource.query.incremental.format"
META_COLUMNS_OPTION = "inlet.read.meta.columns"
COLUMNS_OPTION = "inlet.read.columns"
FILTERS_OPTION = "inlet.read.filters"
PUSHDOWN_OPTION = "inlet.read.filter.pushdown"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
OPERATION = "hoodie.datasource.write.operation"
USE_WRITE = "use inlet.core.spark.write(df, path, options)"
# file groups one task may write: the task id of a file is partition id * this + its index
_FILES_PER_TASK = 100_000


def _flag(options: Mapping[str, str], key: str, default: bool) -> bool:
    value = options.get(key)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"option {key} must be true or false, got {value!r}")
    return text == "true"


def _path(options: Mapping[str, str]) -> str:
    path = options.get("path") or options.get("hoodie.base.path")
    if not path:
        raise InvalidInputError("no table path: use .load(path) / .save(path)")
    return str(path)


def _s3(path: str, options: Mapping[str, str]) -> S3Options | None:
    """The store of an ``s3://`` table: the Hadoop S3A options given (``fs.s3a.endpoint``, ...) over
    the environment of the process that plans the query. Resolved once on the driver side and
    shipped with the plan, so executors on other machines reach the same store."""
    if not is_s3_uri(path):
        return None
    return S3Options.from_env().with_hadoop_options(options)


def _open(path: str, s3: S3Options | None = None) -> HudiTable:
    try:
        return HudiTable.open(path, s3=s3)
    except TableNotFoundError:
        raise
    except FileNotFoundError as e:
        raise TableNotFoundError(f"no Hudi table at {path}") from e


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class SparkRead:
    """One ``spark.read.format("hudi")`` call's options, validated: the table, the core's
    :class:`~inlet.core.read.options.ReadOptions`, and whether filters are pushed down."""

    path: str
    read: ReadOptions
    pushdown: bool = False
    s3: S3Options | None = None  # the store of an s3:// table (see _s3)

    @staticmethod
    def parse(options: Mapping[str, str]) -> SparkRead:
        qt = QueryType.parse(str(options.get(QUERY_TYPE) or QueryType.SNAPSHOT.value))
        if qt is QueryType.INCREMENTAL and not options.get(BEGIN_INSTANT):
            raise InvalidInputError(f"an incremental query needs {BEGIN_INSTANT} (000 reads from the start)")
        as_of = options.get(AS_OF)
        cols = options.get(COLUMNS_OPTION)
        path = _path(options)
        return SparkRead(
            path,
            ReadOptions.of(
                qt,
                as_of=_as_of_instant(str(as_of)) if as_of else None,
                columns=[c.strip() for c in str(cols).split(",") if c.strip()] if cols else None,
                filters=_filters_option(options.get(FILTERS_OPTION)),
                meta_columns=_flag(options, META_COLUMNS_OPTION, True),
                begin=options.get(BEGIN_INSTANT),
                end=options.get(END_INSTANT),
                change_format=str(options.get(INCREMENTAL_FORMAT) or ChangeFormat.LATEST_STATE.value),
            ),
            _flag(options, PUSHDOWN_OPTION, False),
            _s3(path, options),
        )

    @property
    def net_changes(self) -> bool:
        """A CDC, min-delta or append-only query (computed whole, in one task)."""
        r = self.read
        return r.query_type is QueryType.INCREMENTAL and r.change_format is not ChangeFormat.LATEST_STATE


def _filters_option(text: str | None) -> tuple[Filter, ...]:
    """``inlet.read.filters``: a JSON list of ``[column, op, value]`` (ANDed), e.g.
    ``[["city", "=", "sf"], ["fare", ">=", 10]]``; timestamps, dates and decimals as strings."""
    if not text:
        return ()
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise InvalidInputError(f"{FILTERS_OPTION} is not JSON: {e}") from None
    if not isinstance(parsed, list) or not all(isinstance(f, list) and len(f) == 3 for f in parsed):
        raise InvalidInputError(f"{FILTERS_OPTION} must be a JSON list of [column, op, value], got {text!r}")
    return tuple((str(c), str(op), v) for c, op, v in parsed)


def _as_of_instant(text: str) -> str:
    """Hudi's ``as.of.instant`` formats (``HoodieSqlCommonUtils.formatQueryInstant``) as 17 digits."""
    t = text.strip()
    digits = t.isdigit() and len(t) in (14, 17)
    dated = len(t) in (10, 19, 23) and t[4:5] == "-" and t[7:8] == "-"
    if not (digits or dated):
        raise InvalidInputError(
            f"invalid {AS_OF} {text!r}: use yyyyMMddHHmmssSSS, yyyyMMddHHmmss, "
            "'yyyy-MM-dd HH:mm:ss[.SSS]' or yyyy-MM-dd"
        )
    return normalize_instant_time(t)


Planned = ReadPlan | IncrementalPlan | None  # None: a net change query, planned by its task


def table_schema(opts: SparkRead, filters: Sequence[Filter] = ()) -> tuple[Planned, StructType]:
    """The read plan (driver side) and the Spark schema of its rows."""
    table = _open(opts.path, opts.s3)
    r = opts.read
    columns = list(r.columns) if r.columns is not None else None
    if r.range is not None and opts.net_changes:
        return None, spark_types.from_arrow_schema(
            net_change_schema(table, r.change_format, columns, r.meta_columns)
        )
    if r.range is not None:
        planned = plan_incremental(
            table, r.range.begin, r.range.end, columns, [*r.filters, *filters], r.meta_columns
        )
        return planned, spark_types.from_arrow_schema(planned.out_schema)
    plan = plan_read(
        table,
        as_of=r.as_of,
        columns=columns,
        filters=[*r.filters, *filters],
        meta_columns=r.meta_columns,
        query_type=r.query_type,
    )
    return plan, spark_types.from_arrow_schema(plan.out_schema)


class SlicePartition(InputPartition):
    """One file slice to read, with the (small) plan it belongs to."""

    def __init__(
        self, plan: ReadPlan | IncrementalPlan, file_slice: FileSlice, path: str, s3: S3Options | None
    ) -> None:
        super().__init__(f"{file_slice.partition}/{file_slice.file_id}@{file_slice.base_instant}")
        self.plan = plan
        self.file_slice = file_slice
        self.path = path
        self.s3 = s3


class ChangesPartition(InputPartition):
    """A whole net change query (min-delta or append-only)."""

    def __init__(self, opts: SparkRead) -> None:
        super().__init__(f"{opts.read.change_format.value}@{opts.path}")
        self.opts = opts


def _spark_filter_to_inlet(f: Any, schema: StructType) -> Filter | None:
    """An Inlet filter meaning exactly what Spark's ``f`` means, or None (Spark evaluates it)."""
    from pyspark.sql import datasource as sds

    negated = isinstance(f, sds.Not)
    inner = f.child if negated else f
    attribute = getattr(inner, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None  # nested fields: not pushed
    column = attribute[0]
    if column not in schema.fieldNames() or isinstance(schema[column].dataType, FloatType | DoubleType):
        return None  # NaN sorts above every number in Spark, compares false in Arrow
    value = getattr(inner, "value", None)
    if negated:
        if isinstance(inner, sds.EqualTo) and value is not None:
            return (column, "!=", value)
        return None  # NOT IN keeps null rows in Arrow, not in Spark
    ops = {
        sds.EqualTo: "=",
        sds.GreaterThan: ">",
        sds.GreaterThanOrEqual: ">=",
        sds.LessThan: "<",
        sds.LessThanOrEqual: "<=",
    }
    op = ops.get(type(inner))
    if op is not None and value is not None:
        return (column, op, value)
    if isinstance(inner, sds.In) and value is not None and all(v is not None for v in value):
        return (column, "in", list(value))
    return None


class HudiReader(DataSourceReader):
    """Plans one input partition per file slice; reads a slice per task."""

    def __init__(self, opts: SparkRead, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.filters: list[Filter] = []

    def partitions(self) -> list[InputPartition]:
        if self.opts.net_changes:
            return [ChangesPartition(self.opts)]
        opts = dataclasses.replace(
            self.opts, read=dataclasses.replace(self.opts.read, columns=tuple(self.schema.fieldNames()))
        )
        planned, _ = table_schema(opts, self.filters)
        if isinstance(planned, IncrementalPlan):
            shared_increment = dataclasses.replace(planned, plan=dataclasses.replace(planned.plan, slices=[]))
            return [
                SlicePartition(shared_increment, fs, self.opts.path, self.opts.s3)
                for fs in planned.plan.slices
            ]
        assert planned is not None
        shared = dataclasses.replace(planned, slices=[])
        return [SlicePartition(shared, fs, self.opts.path, self.opts.s3) for fs in planned.slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        target = spark_types.to_arrow_schema(self.schema)
        for piece in _read_partition(partition):
            if piece.num_rows:
                yield from spark_types.conform(piece, target).to_batches()


def _read_partition(partition: InputPartition) -> Iterator[pa.Table]:
    if isinstance(partition, ChangesPartition):
        r = partition.opts.read
        assert r.range is not None
        changes = _open(partition.opts.path, partition.opts.s3).read_changes(
            r.range.begin, r.range.end, r.columns, meta_columns=r.meta_columns, format=r.change_format
        )
        yield changes.table
    elif isinstance(partition, SlicePartition):
        table = _open(partition.path, partition.s3)
        if isinstance(partition.plan, IncrementalPlan):
            yield from read_incremental_slice(table, partition.plan, partition.file_slice)
        else:
            yield from read_slice(table, partition.plan, partition.file_slice)
    # else: no file slices, Spark asks for one empty partition


class HudiPushdownReader(HudiReader):
    """:class:`HudiReader` with filter pushdown (needs ``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        if self.opts.net_changes:  # their rows are images, not the table's columns
            yield from filters
            return
        queryable: pa.Schema | None = None
        for f in filters:
            mine = _spark_filter_to_inlet(f, self.schema)
            if mine is not None:
                if queryable is None:
                    queryable = spark_types.to_arrow_schema(self.schema)
                try:  # the value must convert exactly to the column's type
                    filter_expression([mine], queryable)
                except InletError:
                    mine = None
            if mine is None:
                yield f
            else:
                self.filters.append(mine)


class HudiDataSource(DataSource):
    """``spark.read.format("hudi")`` / ``df.write.format("hudi")``."""

    @classmethod
    def name(cls) -> str:
        return "hudi"

    def schema(self) -> StructType:
        _, schema = table_schema(SparkRead.parse(self.options))
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SparkRead.parse(self.options)
        if opts.pushdown:
            return HudiPushdownReader(opts, schema)
        return HudiReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> HudiWriter:
        return HudiWriter.begin(dict(self.options), schema, overwrite)


class InletDataSource(HudiDataSource):
    """The same data source under the format name ``inlet``."""

    @classmethod
    def name(cls) -> str:
        return "inlet"


def register(spark: SparkSession) -> None:
    """Register formats ``hudi`` and ``inlet`` in ``spark`` and enable Python filter pushdown."""
    spark.dataSource.register(HudiDataSource)
    spark.dataSource.register(InletDataSource)
    spark.conf.set(PUSHDOWN_CONF, "true")


def read(spark: SparkSession, path: str, options: Mapping[str, str] | None = None) -> DataFrame:
    """``spark.read.format("hudi").options(**options).load(path)`` (registering the format first)."""
    register(spark)
    opts = dict(options or {})
    if is_s3_uri(path):  # this process's store options travel with the query (see _s3)
        opts = S3Options.from_env().with_hadoop_options(opts).hadoop_options() | opts
    return spark.read.format("hudi").options(**opts).load(path)


# ---------------------------------------------------------------------------------- writing


@dataclass
class FilesWritten(WriterCommitMessage):
    """What one task wrote: the write stat of each new base file."""

    stats: list[WriteStat] = field(default_factory=list)


def _refuse(what: str) -> UnsupportedError:
    return UnsupportedError(
        f"df.write.format('hudi') cannot do {what}: a Python data source writer sees each task's "
        f"rows separately, with no shuffle or index lookup before the files are written; {USE_WRITE}"
    )


class _Lease:
    """Keeps the instant's heartbeat file fresh while this task writes (Apache Hudi's empty
    heartbeat: its modification time is the last beat, whichever process wrote it)."""

    def __init__(self, table: HudiTable, instant_time: str, interval_ms: int) -> None:
        self.table = table
        self.path = f"{HEARTBEAT_DIR}/{instant_time}"
        self.interval_s = interval_ms / 1000 / 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{instant_time}", daemon=True)

    def beat(self) -> None:
        self.table.storage.write_atomic(self.path, b"")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError):
                self.beat()

    def __enter__(self) -> _Lease:
        self.beat()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class HudiWriter(DataSourceArrowWriter):
    """insert / bulk_insert into new file groups: tasks write, the driver commits (see module doc)."""

    def __init__(
        self,
        path: str,
        options: dict[str, str],
        operation: WriteOperation,
        instant: Instant,
        schema: pa.Schema,
        avro_schema: str,
    ) -> None:
        self.path = path
        self.options = options
        self.operation = operation
        self.instant = instant
        self.schema = schema
        self.avro_schema = avro_schema
        self.s3 = _s3(path, options)

    @staticmethod
    def check(table: HudiTable, options: Mapping[str, str], overwrite: bool) -> WriteOperation:
        """The operation, if this data source can do it on ``table`` (else UnsupportedError)."""
        check_write_options(dict(options))  # before the instant begins: nothing is left behind
        op_text = str(options.get(OPERATION) or "upsert")
        op = WriteOperation.parse(op_text)
        if overwrite:
            raise _refuse("mode('overwrite') (Apache Hudi recreates the table)")
        if op not in (WriteOperation.INSERT, WriteOperation.BULK_INSERT):
            raise _refuse(f"{OPERATION}={op_text}")
        if WriteConfig.COMBINE_BEFORE_INSERT.get(dict(options)):
            raise _refuse(
                f"{op_text} with hoodie.combine.before.insert=true (dedupe across tasks); set it to "
                "false to keep every row"
            )
        if op is WriteOperation.BULK_INSERT and (
            WriteConfig.BULK_INSERT_SORT_MODE.require(dict(options)) is BulkInsertSortMode.GLOBAL_SORT
        ):
            raise _refuse("bulk_insert with hoodie.bulkinsert.sort.mode=GLOBAL_SORT")
        if table.index_type is not IndexType.SIMPLE:
            raise _refuse(f"writes into a table with the {table.index_type.value} index")
        if table.version != 8:
            raise UnsupportedError(f"Inlet writes table version 8; this table is version {table.version}")
        return op

    @classmethod
    def begin(cls, options: dict[str, str], spark_schema: StructType, overwrite: bool) -> HudiWriter:
        """Driver side: check, decide the schema, start the instant (requested, inflight, lease)."""
        path = _path(options)
        try:
            table = _open(path, _s3(path, options))
        except TableNotFoundError as e:
            raise TableNotFoundError(
                f"no Hudi table at {path}: df.write.format('hudi') writes into existing tables; "
                f"create it with HudiTable.create(...) or {USE_WRITE}"
            ) from e
        op = cls.check(table, options, overwrite)
        incoming = spark_types.to_table_arrow_schema(spark_schema)
        current = table.schema()
        schema = evolve(current, incoming) if current is not None else incoming
        rollback_failed_writes(table)
        action = Action.DELTA_COMMIT if table.table_type is TableType.MERGE_ON_READ else Action.COMMIT
        pending = PendingInstant(table.storage, table.commit_protocol, table.commit_protocol.begin(action))
        with pending.guard(lambda instant: rollback(table, instant)):
            inflight = pending.set_inflight(CommitMetadata(operation_type=op.value).to_bytes())
            writer = cls(path, options, op, inflight, schema, to_avro_schema(schema, table.name))
            writer._lease(table).beat()
        return writer

    def _lease(self, table: HudiTable) -> _Lease:
        interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(self.options)
        return _Lease(table, self.instant.time, interval)

    # ------------------------------------------------------------------ executors

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition_id = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        batches = list(iterator)
        if not batches or sum(b.num_rows for b in batches) == 0:
            return FilesWritten()
        table = _open(self.path, self.s3)
        with self._lease(table):
            data = pa.Table.from_batches(batches)
            prepared = prepare(table, table.snapshot().schema, data, self.operation, self.options)
            if not prepared.schema.equals(self.schema):
                raise InletError(
                    f"the table's schema changed while instant {self.instant.time} was being written; "
                    "retry the write"
                )
            records = prepared.records.filter(pc.invert(prepared.records.column(DELETED)))
            if self.operation is WriteOperation.BULK_INSERT and (
                WriteConfig.BULK_INSERT_SORT_MODE.require(self.options) is BulkInsertSortMode.PARTITION_SORT
            ):
                records = records.sort_by([(PARTITION, "ascending"), (KEY, "ascending")])
            wctx = WriteContext(
                base_uri=table.base_path,
                table_name=table.name,
                instant_time=self.instant.time,
                schema=self.schema,
                avro_schema=self.avro_schema,
                merge_mode=table.merge_mode,
                ordering_field=table.ordering_field,
                key_generator=table.key_generator,
                populate_meta_fields=table.populate_meta_fields,
                compression=WriteConfig.PARQUET_COMPRESSION.require(self.options),
                table_merge_mode=table.merge_mode,
                s3=table.storage.s3,
            )
            per_file = max(
                1,
                WriteConfig.PARQUET_MAX_FILE_SIZE.require(self.options)
                // WriteConfig.COPY_ON_WRITE_RECORD_SIZE_ESTIMATE.require(self.options),
            )
            out = FilesWritten()
            index = 0
            for p in sorted(pc.unique(records.column(PARTITION)).to_pylist()):
                recs = records.filter(pc.equal(records.column(PARTITION), p))
                ensure_partition_metadata(table.storage, p, self.instant.time)
                for offset in range(0, recs.num_rows, per_file):
                    group = FileGroupWrite(p, new_file_id(), None, recs.slice(offset, per_file), concat=True)
                    task_id = partition_id * _FILES_PER_TASK + index
                    out.stats.append(write_file_group(table.storage, wctx, group, task_id, attempt))
                    index += 1
            return out

    # ------------------------------------------------------------------ driver

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        table = _open(self.path, self.s3)
        pending = self._pending(table)
        with pending.guard(lambda instant: rollback(table, instant)):
            metadata = CommitMetadata(operation_type=self.operation.value)
            for m in messages:
                if isinstance(m, FilesWritten):
                    for s in m.stats:
                        metadata.add(s)
            metadata.extra_metadata = {SCHEMA_KEY: self.avro_schema}
            pending.remove_stray_files(f for s in metadata.write_stats() for f in s.files())
            self._lease(table).beat()
            pending.complete(metadata)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        table = _open(self.path, self.s3)
        self._pending(table).abort(lambda instant: rollback(table, instant))

    def _pending(self, table: HudiTable) -> PendingInstant:
        """The instant ``begin`` started (executors kept its heartbeat through their leases)."""
        return PendingInstant(table.storage, table.commit_protocol, self.instant)


__all__ = [
    "FORMAT_NAMES",
    "HudiDataSource",
    "HudiReader",
    "HudiWriter",
    "InletDataSource",
    "SparkRead",
    "read",
    "register",
]
