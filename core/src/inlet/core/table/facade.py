"""The public Python API: create or open a Hudi table, write Arrow data, read it back.

>>> t = HudiTable.create("/lake/trips", name="trips", record_key="id", partition_by="city",
...                      ordering_field="ts")
>>> t.write(arrow_table, operation="upsert")
>>> t.read(filters=[("city", "=", "sf")], columns=["id", "fare"])
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from inlet.core.actions import clustering
from inlet.core.actions.archive import ArchiveResult, archive
from inlet.core.actions.clean import CleanPlan, CleanResult, clean, cleans, plan_clean
from inlet.core.actions.compaction_plan import CompactionInfo, schedule, show
from inlet.core.actions.compaction_run import compact, run
from inlet.core.actions.restore import RestoreResult, restore
from inlet.core.actions.rollback import rollback_failed_writes
from inlet.core.actions.savepoint import SavepointInfo, create_savepoint, delete_savepoint, list_savepoints
from inlet.core.commit.protocol import CommitProtocol
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    CdcLoggingMode,
    IndexType,
    KeyGeneratorType,
    MergeMode,
    TableConfig,
    TableType,
    WriteOperation,
)
from inlet.core.errors import InvalidConfigError, InvalidInputError, TableExistsError, UnsupportedError
from inlet.core.file_group.view import FileSystemView
from inlet.core.keys import KeyGenerator, TimestampPartitioning
from inlet.core.read.cdc import read_cdc
from inlet.core.read.incremental import Changes, instant_window, read_incremental
from inlet.core.read.net_changes import read_append_only, read_min_delta
from inlet.core.read.options import ChangeFormat, QueryType
from inlet.core.read.snapshot import read_table
from inlet.core.s3 import S3Options
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.table.handle import TableHandle
from inlet.core.table.meta import TableMeta
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.archived import ArchivedTimeline
from inlet.core.timeline.instant import Instant
from inlet.core.write.run import write_table

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return tuple(value)


class HudiTable(TableHandle):
    """A Hudi table (table version 8 written; versions 6, 8 and 9 read): the table operations
    composed on its :class:`~inlet.core.table.handle.TableHandle`."""

    def __init__(
        self, storage: Storage, props: Mapping[str, str], commit_protocol: CommitProtocol | None = None
    ) -> None:
        super().__init__(storage, TableMeta.from_properties(props), commit_protocol)

    # ------------------------------------------------------------------ create / open

    @classmethod
    def open(
        cls,
        path: str,
        filesystem: pafs.FileSystem | None = None,
        commit_protocol: CommitProtocol | None = None,
        s3: S3Options | None = None,
    ) -> HudiTable:
        """The table at ``path``; ``s3``: the store of an ``s3://`` path (default: the AWS environment)."""
        storage = Storage(path, filesystem, s3=s3)
        return cls(storage, props_io.read_properties(storage), commit_protocol)

    @classmethod
    def create(
        cls,
        path: str,
        name: str,
        record_key: str | Sequence[str],
        partition_by: str | Sequence[str] | None = None,
        table_type: TableType | str = TableType.COPY_ON_WRITE,
        ordering_field: str | None = None,
        merge_mode: MergeMode | str | None = None,
        hive_style: bool = False,
        url_encode: bool = False,
        key_generator: KeyGeneratorType | str | None = None,
        index: IndexType | str = IndexType.SIMPLE,
        buckets: int = 4,
        database: str | None = None,
        timestamp: TimestampPartitioning | None = None,
        extra_properties: dict[str, str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        cdc: bool = False,
        cdc_logging_mode: CdcLoggingMode | str | None = None,
    ) -> HudiTable:
        if not _NAME_RE.match(name):
            raise InvalidConfigError(f"invalid table name {name!r}: use letters, digits and underscores")
        keys = _as_tuple(record_key)
        if not keys:
            raise InvalidConfigError("a record key field is required")
        parts = _as_tuple(partition_by)
        ttype = TableType.parse(table_type) if isinstance(table_type, str) else table_type
        mode = MergeMode(str(merge_mode).upper()) if merge_mode else None
        if mode is None:
            mode = MergeMode.EVENT_TIME_ORDERING if ordering_field else MergeMode.COMMIT_TIME_ORDERING
        if mode is MergeMode.EVENT_TIME_ORDERING and not ordering_field:
            raise InvalidConfigError("EVENT_TIME_ORDERING needs an ordering field (--ordering-field)")
        if key_generator is None:
            if timestamp is not None:
                kgen = KeyGeneratorType.TIMESTAMP
            elif not parts:
                kgen = KeyGeneratorType.NON_PARTITION if len(keys) == 1 else KeyGeneratorType.COMPLEX
            elif len(keys) > 1 or len(parts) > 1:
                kgen = KeyGeneratorType.COMPLEX
            else:
                kgen = KeyGeneratorType.SIMPLE
        else:
            kgen = KeyGeneratorType.parse(key_generator) if isinstance(key_generator, str) else key_generator
        if kgen is KeyGeneratorType.NON_PARTITION and parts:
            raise InvalidConfigError("the non_partition key generator cannot have partition fields")
        if kgen is KeyGeneratorType.SIMPLE and (len(keys) > 1 or len(parts) > 1):
            raise InvalidConfigError("the simple key generator takes one record key and one partition field")
        if kgen is KeyGeneratorType.TIMESTAMP and (timestamp is None or len(parts) != 1):
            raise InvalidConfigError(
                "the timestamp key generator needs one partition field and a timestamp format"
            )
        if kgen is KeyGeneratorType.CUSTOM:
            raise UnsupportedError("the custom key generator is not supported yet")
        idx = IndexType.parse(index) if isinstance(index, str) else index
        cdc_mode = None
        if cdc_logging_mode is not None:
            if not cdc:
                raise InvalidConfigError(
                    f"{TableConfig.CDC_LOGGING_MODE.key} needs {TableConfig.CDC_ENABLED.key}=true"
                )
            cdc_mode = TableConfig.CDC_LOGGING_MODE.require(
                {TableConfig.CDC_LOGGING_MODE.key: cdc_logging_mode}
            )
        if buckets < 1:
            raise InvalidConfigError("the bucket index needs at least one bucket")
        storage = Storage(path, filesystem)
        if storage.exists(props_io.PROPERTIES_PATH):
            raise TableExistsError(f"a Hudi table already exists at {path}")
        props: dict[str, str] = {
            TableConfig.NAME.key: name,
            TableConfig.TYPE.key: ttype.value,
            TableConfig.VERSION.key: str(props_io.CURRENT_TABLE_VERSION),
            TableConfig.INITIAL_VERSION.key: str(props_io.CURRENT_TABLE_VERSION),
            TableConfig.TIMELINE_LAYOUT_VERSION.key: "2",
            TableConfig.TIMELINE_PATH.key: "timeline",
            TableConfig.TIMELINE_HISTORY_PATH.key: "history",
            TableConfig.ARCHIVELOG_FOLDER.key: "archived",
            TableConfig.RECORD_KEY_FIELDS.key: ",".join(keys),
            TableConfig.MERGE_MODE.key: mode.value,
            TableConfig.MERGE_STRATEGY_ID.key: mode.strategy_id,
            TableConfig.PAYLOAD_CLASS.key: mode.payload_class,
            TableConfig.KEY_GENERATOR_TYPE.key: kgen.value,
            "hoodie.table.keygenerator.class": kgen.class_name,
            TableConfig.BASE_FILE_FORMAT.key: "PARQUET",
            TableConfig.POPULATE_META_FIELDS.key: "true",
            TableConfig.HIVE_STYLE_PARTITIONING.key: str(hive_style).lower(),
            TableConfig.URL_ENCODE_PARTITIONING.key: str(url_encode).lower(),
            TableConfig.DROP_PARTITION_COLUMNS.key: "false",
            TableConfig.TIMELINE_TIMEZONE.key: "UTC",
            TableConfig.INDEX_TYPE.key: idx.value,
        }
        if parts:
            props[TableConfig.PARTITION_FIELDS.key] = ",".join(parts)
        if ordering_field:
            props[TableConfig.ORDERING_FIELDS.key] = ordering_field
        if database:
            props[TableConfig.DATABASE_NAME.key] = database
        if idx is IndexType.BUCKET:
            props[TableConfig.BUCKET_NUM.key] = str(buckets)
            props[TableConfig.BUCKET_HASH_FIELDS.key] = ",".join(keys)
        if cdc:  # as Apache Hudi: both keys only on a CDC-enabled table, the mode by its enum name
            props[TableConfig.CDC_ENABLED.key] = "true"
            props[TableConfig.CDC_LOGGING_MODE.key] = (cdc_mode or CdcLoggingMode.DATA_BEFORE_AFTER).value
        if timestamp is not None:
            props[TableConfig.TS_TYPE.key] = timestamp.timestamp_type
            props[TableConfig.TS_OUTPUT_FORMAT.key] = timestamp.output_format
            props[TableConfig.TS_TIMEZONE.key] = timestamp.timezone
            if timestamp.input_format:
                props[TableConfig.TS_INPUT_FORMAT.key] = timestamp.input_format
        props.update(extra_properties or {})
        storage.mkdirs(".hoodie/timeline/history")
        props_io.write_properties(storage, props)
        return cls(storage, props)

    # ------------------------------------------------------------------ configuration (see TableMeta)

    @property
    def props(self) -> Mapping[str, str]:
        return self.meta.props

    @property
    def version(self) -> int:
        return self.meta.version

    @property
    def layout_version(self) -> int:
        return self.meta.layout_version

    @property
    def timeline_path(self) -> str:
        return self.meta.timeline_path

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def table_type(self) -> TableType:
        return self.meta.table_type

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        return self.meta.record_key_fields

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return self.meta.partition_fields

    @property
    def ordering_field(self) -> str | None:
        return self.meta.ordering_field

    @property
    def merge_mode(self) -> MergeMode:
        return self.meta.merge_mode

    @property
    def index_type(self) -> IndexType:
        return self.meta.index_type

    @property
    def populate_meta_fields(self) -> bool:
        return self.meta.populate_meta_fields

    @property
    def bucket_hash_fields(self) -> tuple[str, ...]:
        return self.meta.bucket_hash_fields

    @property
    def num_buckets(self) -> int:
        return self.meta.num_buckets

    @property
    def key_generator(self) -> KeyGenerator:
        return self.meta.key_generator

    # ------------------------------------------------------------------ timeline and schema

    @property
    def timeline(self) -> Timeline:
        """A fresh listing of the active timeline."""
        return self.load_timeline()

    def instants(self) -> list[Instant]:
        return self.load_timeline().instants

    def file_system_view(self, as_of: str | None = None) -> FileSystemView:
        return self.snapshot(as_of).view

    def avro_schema(self, as_of: str | None = None) -> str | None:
        return self.snapshot(as_of).avro_schema

    def schema(self, as_of: str | None = None) -> pa.Schema | None:
        """The table's data schema (without meta columns), or None before the first write."""
        return self.snapshot(as_of).schema

    def describe(self) -> dict[str, Any]:
        snap = self.snapshot()
        tl = snap.timeline
        latest = tl.latest_completed_write()
        schema = snap.schema
        return {
            "name": self.name,
            "base_path": self.base_path,
            "table_type": self.table_type.value,
            "table_version": self.version,
            "record_key_fields": list(self.record_key_fields),
            "partition_fields": list(self.partition_fields),
            "ordering_field": self.ordering_field,
            "merge_mode": self.merge_mode.value,
            "key_generator": self.key_generator.key_type.value,
            "hive_style_partitioning": self.key_generator.hive_style,
            "index": self.index_type.value,
            "buckets": self.num_buckets if self.index_type is IndexType.BUCKET else None,
            "latest_commit": latest.time if latest else None,
            "completed_instants": len(tl.completed()),
            "pending_instants": len(tl.pending()),
            "schema": [f"{f.name}: {f.type}" for f in schema] if schema is not None else [],
            "properties": dict(sorted(self.props.items())),
        }

    # ------------------------------------------------------------------ write / read

    def write(
        self,
        data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch] | None,
        operation: WriteOperation | str = WriteOperation.UPSERT,
        options: dict[str, str] | None = None,
        partitions: Sequence[str] | None = None,
        extra_metadata: dict[str, str] | None = None,
    ) -> CommitResult:
        """Write ``data`` with a Hudi write operation and commit it; returns what was committed.

        ``partitions`` (partition paths) is for ``delete_partition`` without data.
        ``extra_metadata`` is recorded in the commit (e.g. a stream checkpoint).
        """
        return write_table(self, data, operation, options or {}, partitions, extra_metadata or {})

    def delete(self, keys: pa.Table, options: dict[str, str] | None = None) -> CommitResult:
        """Delete records by key (``keys`` holds the record key and partition columns)."""
        return self.write(keys, WriteOperation.DELETE, options)

    def read(
        self,
        as_of: str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[tuple[str, str, Any]] | None = None,
        meta_columns: bool = True,
        query_type: QueryType | str = QueryType.SNAPSHOT,
    ) -> pa.Table:
        """Snapshot read (latest completed instant, or ``as_of`` an instant time).

        ``query_type`` ``"snapshot"`` merges Merge-on-Read log files into their base files;
        ``"read_optimized"`` reads base files only (the same as a snapshot on Copy-on-Write).
        """
        return read_table(
            self,
            as_of=as_of,
            columns=columns,
            filters=filters,
            meta_columns=meta_columns,
            query_type=query_type,
        )

    def read_changes(
        self,
        begin: str | None = None,
        end: str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[tuple[str, str, Any]] | None = None,
        meta_columns: bool = True,
        format: ChangeFormat | str = ChangeFormat.LATEST_STATE,
        instant: str | None = None,
    ) -> Changes:
        """What the commits completed in ``(begin, end]`` changed; ``.resume_from`` is the next
        ``begin``. ``instant`` instead of ``begin``/``end``: what that one completed instant changed
        (the instant of a commit event). ``format``: ``latest_state`` (Hudi's incremental query: the
        records they wrote, as of the window's end, see :mod:`inlet.core.read.incremental`), ``cdc``
        (Hudi's CDC rows: every change of every commit, see :mod:`inlet.core.read.cdc`), ``min_delta`` (per key the net change, with before and after images) or ``append_only`` (every
        record they inserted, as inserted, even if updated or deleted later in the window), see :mod:`inlet.core.read.net_changes`; all but ``latest_state`` take
        no ``filters``."""
        if (instant is None) == (begin is None) or (instant is not None and end is not None):
            raise InvalidInputError("a change query takes begin (and end), or one instant")
        if instant is not None:
            begin, end = instant_window(self.load_timeline(), instant)
        assert begin is not None
        kind = ChangeFormat.parse(format)
        if kind is ChangeFormat.LATEST_STATE:
            return read_incremental(self, begin, end, columns, filters, meta_columns)
        if filters:
            raise InvalidInputError(f"{kind.value} change queries take no filters")
        if kind is ChangeFormat.MIN_DELTA:
            window, rows = read_min_delta(self, begin, end, columns)
        elif kind is ChangeFormat.CDC:
            window, rows = read_cdc(self, begin, end, columns)
        else:
            window, rows = read_append_only(self, begin, end, columns, meta_columns)
        return Changes(rows, window)

    def rollback_failed_writes(self, force: bool = False) -> list[str]:
        """Roll back pending writes whose writers are gone (all pending writes with ``force``)."""
        return rollback_failed_writes(self, force=force)

    # ------------------------------------------------------------------ compaction (Merge-on-Read)

    def schedule_compaction(self, options: dict[str, str] | None = None) -> str | None:
        """Schedule a compaction if one is due (``hoodie.compact.inline.*``, ``hoodie.compaction.*``
        options); returns its instant time, or None. See :mod:`inlet.core.actions.compaction_plan`."""
        return schedule(self, options)

    def run_compaction(
        self, instant: str | None = None, options: dict[str, str] | None = None, force: bool = False
    ) -> CommitResult | None:
        """Run a pending compaction (``instant``, or the earliest); None if none is pending."""
        return run(self, instant, options, force=force)

    def compact(self, options: dict[str, str] | None = None) -> CommitResult | None:
        """Schedule a compaction if one is due and run it; None if none was scheduled."""
        return compact(self, options)

    def compactions(self) -> list[CompactionInfo]:
        """Compactions on the active timeline (pending and completed) with their plans."""
        return show(self)

    # ------------------------------------------------------------------ clustering

    def schedule_clustering(self, options: dict[str, str] | None = None, force: bool = False) -> str | None:
        """Plan a clustering if one is due (``hoodie.clustering.*`` options; ``force``: whatever
        the trigger says); returns its instant time, or None. See :mod:`inlet.core.actions.clustering`."""
        return clustering.schedule_clustering(self, options, force=force)

    def run_clustering(
        self, instant: str | None = None, options: dict[str, str] | None = None, force: bool = False
    ) -> CommitResult | None:
        """Run a pending clustering (``instant``, or the earliest); None if none is pending."""
        return clustering.run_clustering(self, instant, options, force=force)

    def cluster(self, options: dict[str, str] | None = None, force: bool = False) -> CommitResult | None:
        """Schedule a clustering (if due, or ``force``) and run it."""
        return clustering.cluster(self, options, force=force)

    def pending_clustering(self) -> list[str]:
        """Instant times of the pending clustering plans, oldest first."""
        return clustering.pending_clustering(self)

    # ------------------------------------------------------------------ clean

    def clean(self, options: dict[str, str] | None = None) -> CleanResult:
        """Delete the file slices the retained window no longer needs (``hoodie.clean.*`` options);
        finishes interrupted cleans first. See :mod:`inlet.core.actions.clean`."""
        return clean(self, options)

    def plan_clean(self, options: dict[str, str] | None = None) -> CleanPlan:
        """What :meth:`clean` would delete now, without deleting or writing anything."""
        return plan_clean(self, self.commit_protocol.timeline(), options or {})

    def cleans(self) -> list[dict[str, Any]]:
        """The clean instants on the active timeline (pending and completed)."""
        return cleans(self)

    # ------------------------------------------------------------------ archive

    def archive(self, options: Mapping[str, str] | None = None) -> ArchiveResult:
        """Move old completed instants into the LSM archived timeline (``hoodie.keep.min.commits``
        / ``hoodie.keep.max.commits``, never past a pending instant, a savepoint or what the
        cleaner and compaction still need). See :mod:`inlet.core.actions.archive`."""
        return archive(self.storage, self.meta.layout_version, self.meta.timeline_path, options)

    def archived_timeline(self) -> ArchivedTimeline:
        """The instants archived so far (``.hoodie/timeline/history/``), read-only."""
        return ArchivedTimeline.load(
            self.storage,
            self.meta.layout_version,
            self.meta.timeline_path,
            TableConfig.TIMELINE_HISTORY_PATH.require(self.meta.props),
        )

    # ------------------------------------------------------------------ savepoint and restore

    def savepoint(self, instant_time: str, user: str | None = None, comment: str = "") -> SavepointInfo:
        """Savepoint a completed commit: clean and archive keep what it reads, and
        :meth:`restore` can return to it. See :mod:`inlet.core.actions.savepoint`."""
        return create_savepoint(self, instant_time, user, comment)

    def savepoints(self) -> list[SavepointInfo]:
        """The completed savepoints, oldest first."""
        return list_savepoints(self)

    def delete_savepoint(self, instant_time: str) -> None:
        """Remove the savepoint at ``instant_time``."""
        delete_savepoint(self, instant_time)

    def restore(self, to: str) -> RestoreResult:
        """Roll back every write after the savepoint ``to`` (or finish a pending restore to it).
        See :mod:`inlet.core.actions.restore`."""
        return restore(self, to)
