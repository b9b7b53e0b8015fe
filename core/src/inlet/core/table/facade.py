"""The public Python API: create or open a Hudi table, write Arrow data, read it back.

>>> t = HudiTable.create("/lake/trips", name="trips", record_key="id", partition_by="city",
...                      ordering_field="ts")
>>> t.write(arrow_table, operation="upsert")
>>> t.read(filters=[("city", "=", "sf")], columns=["id", "fare"])
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from inlet.core.commit.protocol import CommitProtocol, LocalCommitProtocol
from inlet.core.config import (
    IndexType,
    KeyGeneratorType,
    MergeMode,
    TableConfig,
    TableType,
    WriteOperation,
)
from inlet.core.errors import InvalidConfigError, TableExistsError, UnsupportedError
from inlet.core.file_group.view import FileSystemView
from inlet.core.keys import KeyGenerator, TimestampPartitioning
from inlet.core.schema import from_avro_schema
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant

if TYPE_CHECKING:
    from inlet.core.actions.clean import CleanPlan, CleanResult
    from inlet.core.actions.compaction import CompactionInfo
    from inlet.core.read.incremental import Changes

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    return tuple(value)


@dataclass(frozen=True)
class CommitResult:
    """What one write committed."""

    instant_time: str
    completion_time: str
    action: str
    operation: str
    metadata: CommitMetadata

    @property
    def num_inserts(self) -> int:
        return sum(s.num_inserts for s in self.metadata.write_stats())

    @property
    def num_updates(self) -> int:
        return sum(s.num_update_writes for s in self.metadata.write_stats())

    @property
    def num_deletes(self) -> int:
        return sum(s.num_deletes for s in self.metadata.write_stats())

    @property
    def files_written(self) -> list[str]:
        return [s.path for s in self.metadata.write_stats() if s.path]

    def summary(self) -> dict[str, Any]:
        return {
            "instant": self.instant_time,
            "completion_time": self.completion_time,
            "action": self.action,
            "operation": self.operation,
            "inserts": self.num_inserts,
            "updates": self.num_updates,
            "deletes": self.num_deletes,
            "files": len(self.files_written),
            "replaced_file_groups": sum(
                len(v) for v in (self.metadata.partition_to_replace_file_ids or {}).values()
            ),
        }


class HudiTable:
    """A Hudi table (table version 8 written; versions 6, 8 and 9 read)."""

    def __init__(
        self, storage: Storage, props: dict[str, str], commit_protocol: CommitProtocol | None = None
    ) -> None:
        self.storage = storage
        self.props = props
        self.version = TableConfig.VERSION.require(props)
        if self.version not in props_io.SUPPORTED_READ_VERSIONS:
            raise UnsupportedError(f"Hudi table version {self.version} is not supported (supported: 6, 8, 9)")
        self.layout_version = TableConfig.TIMELINE_LAYOUT_VERSION.require(props)
        self.timeline_path = TableConfig.TIMELINE_PATH.require(props)
        self.commit_protocol: CommitProtocol = commit_protocol or LocalCommitProtocol(
            storage, self.layout_version, self.timeline_path
        )

    # ------------------------------------------------------------------ create / open

    @classmethod
    def open(
        cls,
        path: str,
        filesystem: pafs.FileSystem | None = None,
        commit_protocol: CommitProtocol | None = None,
    ) -> HudiTable:
        storage = Storage(path, filesystem)
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

    # ------------------------------------------------------------------ configuration

    @property
    def name(self) -> str:
        return TableConfig.NAME.require(self.props)

    @property
    def base_path(self) -> str:
        return self.storage.base_uri

    @property
    def table_type(self) -> TableType:
        return TableConfig.TYPE.require(self.props)

    @property
    def record_key_fields(self) -> tuple[str, ...]:
        return tuple(TableConfig.RECORD_KEY_FIELDS.get(self.props) or ())

    @property
    def partition_fields(self) -> tuple[str, ...]:
        return tuple(TableConfig.PARTITION_FIELDS.get(self.props) or ())

    @property
    def ordering_field(self) -> str | None:
        fields = TableConfig.ORDERING_FIELDS.get(self.props)
        return fields[0] if fields else None

    @property
    def merge_mode(self) -> MergeMode:
        mode = TableConfig.MERGE_MODE.get(self.props)
        if mode is not None:
            return mode
        return MergeMode.EVENT_TIME_ORDERING if self.ordering_field else MergeMode.COMMIT_TIME_ORDERING

    @property
    def index_type(self) -> IndexType:
        return TableConfig.INDEX_TYPE.require(self.props)

    @property
    def populate_meta_fields(self) -> bool:
        return bool(TableConfig.POPULATE_META_FIELDS.get(self.props))

    @property
    def bucket_hash_fields(self) -> tuple[str, ...]:
        """Fields the bucket index hashes (``hoodie.bucket.index.hash.field``; default the record key)."""
        return tuple(TableConfig.BUCKET_HASH_FIELDS.get(self.props) or self.record_key_fields)

    @property
    def num_buckets(self) -> int:
        return TableConfig.BUCKET_NUM.require(self.props)

    @property
    def key_generator(self) -> KeyGenerator:
        kgen = TableConfig.KEY_GENERATOR_TYPE.get(self.props)
        parts = self.partition_fields
        if kgen is None:
            kgen = KeyGeneratorType.COMPLEX if len(self.record_key_fields) > 1 else KeyGeneratorType.SIMPLE
        ts = None
        if kgen is KeyGeneratorType.TIMESTAMP:
            ts = TimestampPartitioning(
                timestamp_type=TableConfig.TS_TYPE.get(self.props) or "EPOCHMILLISECONDS",
                output_format=TableConfig.TS_OUTPUT_FORMAT.get(self.props) or "yyyy-MM-dd",
                input_format=TableConfig.TS_INPUT_FORMAT.get(self.props),
                timezone=TableConfig.TS_TIMEZONE.require(self.props),
            )
        return KeyGenerator(
            record_key_fields=self.record_key_fields,
            partition_fields=parts,
            hive_style=bool(TableConfig.HIVE_STYLE_PARTITIONING.get(self.props)),
            url_encode=bool(TableConfig.URL_ENCODE_PARTITIONING.get(self.props)),
            key_type=kgen,
            timestamp=ts,
        )

    # ------------------------------------------------------------------ timeline and schema

    @property
    def timeline(self) -> Timeline:
        """A fresh snapshot of the active timeline."""
        return Timeline.load(self.storage, self.layout_version, self.timeline_path)

    def instants(self) -> list[Instant]:
        return self.timeline.instants

    def file_system_view(self, as_of: str | None = None) -> FileSystemView:
        return FileSystemView(self.timeline, as_of)

    def avro_schema(self, as_of: str | None = None) -> str | None:
        return self.timeline.latest_schema(as_of) or TableConfig.CREATE_SCHEMA.get(self.props)

    def schema(self, as_of: str | None = None) -> pa.Schema | None:
        """The table's data schema (without meta columns), or None before the first write."""
        avro_json = self.avro_schema(as_of)
        return from_avro_schema(avro_json) if avro_json else None

    def describe(self) -> dict[str, Any]:
        tl = self.timeline
        latest = tl.latest_completed_write()
        schema = self.schema()
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
        from inlet.core.write.writers import write_table

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
        query_type: str = "snapshot",
    ) -> pa.Table:
        """Snapshot read (latest completed instant, or ``as_of`` an instant time).

        ``query_type`` ``"snapshot"`` merges Merge-on-Read log files into their base files;
        ``"read_optimized"`` reads base files only (the same as a snapshot on Copy-on-Write).
        """
        from inlet.core.read.snapshot import read_table

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
        begin: str,
        end: str | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[tuple[str, str, Any]] | None = None,
        meta_columns: bool = True,
    ) -> Changes:
        """Incremental query (latest state): the records written by the commits completed in
        ``(begin, end]`` as of the window's end; ``.resume_from`` is the next ``begin``. See
        :mod:`inlet.core.read.incremental`."""
        from inlet.core.read.incremental import read_incremental

        return read_incremental(self, begin, end, columns, filters, meta_columns)

    def rollback_failed_writes(self, force: bool = False) -> list[str]:
        """Roll back pending writes whose writers are gone (all pending writes with ``force``)."""
        from inlet.core.actions.rollback import rollback_failed_writes

        return rollback_failed_writes(self, force=force)

    # ------------------------------------------------------------------ compaction (Merge-on-Read)

    def schedule_compaction(self, options: dict[str, str] | None = None) -> str | None:
        """Schedule a compaction if one is due (``hoodie.compact.inline.*``, ``hoodie.compaction.*``
        options); returns its instant time, or None. See :mod:`inlet.core.actions.compaction`."""
        from inlet.core.actions.compaction import schedule

        return schedule(self, options)

    def run_compaction(
        self, instant: str | None = None, options: dict[str, str] | None = None, force: bool = False
    ) -> CommitResult | None:
        """Run a pending compaction (``instant``, or the earliest); None if none is pending."""
        from inlet.core.actions.compaction import run

        return run(self, instant, options, force=force)

    def compact(self, options: dict[str, str] | None = None) -> CommitResult | None:
        """Schedule a compaction if one is due and run it; None if none was scheduled."""
        from inlet.core.actions.compaction import compact

        return compact(self, options)

    def compactions(self) -> list[CompactionInfo]:
        """Compactions on the active timeline (pending and completed) with their plans."""
        from inlet.core.actions.compaction import show

        return show(self)

    # ------------------------------------------------------------------ clean

    def clean(self, options: dict[str, str] | None = None) -> CleanResult:
        """Delete the file slices the retained window no longer needs (``hoodie.clean.*`` options);
        finishes interrupted cleans first. See :mod:`inlet.core.actions.clean`."""
        from inlet.core.actions.clean import clean

        return clean(self, options)

    def plan_clean(self, options: dict[str, str] | None = None) -> CleanPlan:
        """What :meth:`clean` would delete now, without deleting or writing anything."""
        from inlet.core.actions.clean import plan_clean

        return plan_clean(self, self.commit_protocol.timeline(), options or {})

    def cleans(self) -> list[dict[str, Any]]:
        """The clean instants on the active timeline (pending and completed)."""
        from inlet.core.actions.clean import cleans

        return cleans(self)
