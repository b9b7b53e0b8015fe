"""Copy-on-Write writes: prepare the batch, plan file groups, write base files, commit.

The pipeline (the Spark engine runs the same steps distributed):

1. prepare — validate and evolve the schema, compute record keys and partition paths, merge
   duplicate keys by the table's merge mode. Everything that can reject the input happens here,
   before an instant exists.
2. plan — tag records with their file group (simple or bucket index), pack inserts into small
   file groups first, then new ones; replace operations list the file groups they replace.
3. execute — one :func:`write_file_group` per file group: marker, then the new base file
   (stored records merged with incoming ones; inserts are appended), returning a write stat.
4. commit — the commit protocol checks conflicts and writes the completed instant atomically.
   Any failure before that rolls the instant back; a crash leaves a pending instant that the
   next writer rolls back.

Merge-on-Read tables run the same steps as ``deltacommit`` instants (replace operations stay
``replacecommit``): :func:`plan_mor_write` sends updates and deletes of a file group to one new
log file of it (:func:`write_log_group`, blocks encoded by :mod:`inlet.core.log.writer`), and
inserts to new base files (simple index) or to the log files of their bucket's file group (bucket
index). The simple index looks keys up in the latest file slice (base file and log files, the
slices of :class:`~inlet.core.filegroups.FileSystemView` that readers merge; log keys are read once
per process, see :class:`LogKeyCache`); the bucket index routes by bucket id without any lookup.

Hot paths are columnar: key lookups are Arrow hash probes (:func:`locate_keys`), merging stored
with incoming records matches keys with ``index_in``, log blocks are encoded a column at a time.
"""

from __future__ import annotations

import json
import logging
import posixpath
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import avro, faults
from inlet.core.actions.rollback import rollback, rollback_failed_writes
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.result import CommitResult
from inlet.core.config import (
    BulkInsertSortMode,
    ConfigKey,
    IndexType,
    MergeMode,
    TableType,
    WriteConfig,
    WriteOperation,
    check_options,
    config_keys,
)
from inlet.core.errors import InvalidInputError, SchemaError, UnsupportedError
from inlet.core.file_group.reader import BlockFilter, counted_blocks
from inlet.core.file_group.view import (
    PARTITION_METADATA_FILE,
    BaseFile,
    FileSlice,
    FileSystemView,
    LogFile,
    base_file_name,
    log_file_name,
    new_file_id,
    write_token,
)
from inlet.core.index.bucket import bucket_file_id_prefix, bucket_ids, bucket_of_file_id, nbcc_bucket_file_id
from inlet.core.keys import KeyGenerator
from inlet.core.log import writer as logs
from inlet.core.log.blocks import BlockType
from inlet.core.log.reader import (
    BytesSource,
    LogFileScan,
    iter_block_batches,
    open_source,
    read_delete_records,
    scan_frames,
)
from inlet.core.merge import dedupe as merging
from inlet.core.schema import (
    IS_DELETED_COLUMN,
    META_COLUMNS,
    cast_to,
    evolve,
    meta_schema,
    normalize_schema,
    to_avro_schema,
)
from inlet.core.storage import Storage
from inlet.core.table.handle import TableHandle
from inlet.core.table.meta import TableMeta
from inlet.core.timeline.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant

log = logging.getLogger(__name__)

KEY = merging.KEY
PARTITION = merging.PARTITION
DELETED = "__inlet_deleted"
# every option a write parses (both engines); checked before the instant begins
WRITE_OPTION_KEYS: tuple[ConfigKey[Any], ...] = (*config_keys(WriteConfig), logs.DATA_BLOCK_FORMAT)


def check_write_options(options: dict[str, str]) -> None:
    """Parse every write option (:data:`WRITE_OPTION_KEYS`): a malformed value raises
    :class:`~inlet.core.errors.InvalidOptionError` naming key and value, before anything is written."""
    check_options(options, WRITE_OPTION_KEYS)


# ---------------------------------------------------------------------------------- prepare


@dataclass
class PreparedBatch:
    """Incoming records with ``_hoodie_record_key``, ``_hoodie_partition_path`` and a delete flag."""

    operation: WriteOperation
    records: pa.Table
    schema: pa.Schema  # the table's data schema after this write
    avro_schema: str


def _as_arrow(data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        raise InvalidInputError("no input record batches")
    return pa.Table.from_batches(batches)


def check_input_columns(names: Sequence[str]) -> None:
    """Refuse input with duplicate column names (meta columns already dropped)."""
    dupes = {c for c in names if list(names).count(c) > 1}
    if dupes:
        raise SchemaError(f"duplicate column name(s) in the input: {', '.join(sorted(dupes))}")


def delete_key_fields(table: TableHandle, names: Sequence[str]) -> list[str]:
    """The columns the delete operation reads (record key and partition fields); all must be given."""
    kg = table.meta.key_generator
    needed = list(dict.fromkeys([*kg.record_key_fields, *kg.partition_fields]))
    missing = [c for c in needed if c not in names]
    if missing:
        raise SchemaError(
            f"delete input lacks column(s) {', '.join(missing)} (record key and partition fields)"
        )
    return needed


def delete_key_schema(current: pa.Schema | None, key_input: pa.Schema) -> pa.Schema:
    """The types delete keys are read as: the table's (``current``), for the columns it has (keys
    print the same)."""
    if current is None:
        return key_input
    return pa.schema([current.field(f.name) if f.name in current.names else f for f in key_input])


def write_schema(meta: TableMeta, current: pa.Schema | None, input_schema: pa.Schema) -> pa.Schema:
    """The table's data schema after writing records of ``input_schema`` (meta columns dropped):
    the ``current`` schema evolved by the input, or the input's own on the first write.

    Raises :class:`SchemaError` for input lacking a record key, partition or ordering field, for
    an incompatible type change and for a non-boolean ``_hoodie_is_deleted``. Decided from the
    schemas alone, so a distributed engine decides it on its driver.
    """
    if len(input_schema) == 0:
        raise SchemaError("the input has no columns")
    kg = meta.key_generator
    ordering = meta.ordering_field
    incoming = normalize_schema(input_schema)
    for f in (*kg.record_key_fields, *kg.partition_fields, *([ordering] if ordering else [])):
        if f not in incoming.names:
            raise SchemaError(
                f"required column {f!r} (record key, partition or ordering field) is missing from the input"
            )
    schema = evolve(current, incoming) if current is not None else incoming
    if IS_DELETED_COLUMN in schema.names and not pa.types.is_boolean(schema.field(IS_DELETED_COLUMN).type):
        raise SchemaError(f"{IS_DELETED_COLUMN} must be a boolean column")
    return schema


def delete_records(kg: KeyGenerator, key_input: pa.Table) -> pa.Table:
    """Delete-operation records: ``KEY``, ``PARTITION`` and a set delete flag per input row."""
    return pa.table(
        {
            KEY: kg.record_keys(key_input),
            PARTITION: kg.partition_paths(key_input),
            DELETED: pa.array(np.ones(key_input.num_rows, dtype=bool)),
        }
    )


def keyed_records(kg: KeyGenerator, rows: pa.Table) -> pa.Table:
    """``rows`` (already cast to the write schema) with ``KEY``, ``PARTITION`` and the delete flag
    (``_hoodie_is_deleted``, null meaning false) appended."""
    deleted = (
        pc.fill_null(rows.column(IS_DELETED_COLUMN), False)
        if IS_DELETED_COLUMN in rows.column_names
        else pa.array(np.zeros(rows.num_rows, dtype=bool))
    )
    records = rows.append_column(KEY, kg.record_keys(rows)).append_column(PARTITION, kg.partition_paths(rows))
    return records.append_column(DELETED, deleted)


def combines(op: WriteOperation, options: dict[str, str]) -> bool:
    """Whether incoming records are deduplicated by key before writing (upserts and deletes always;
    the other operations unless ``hoodie.combine.before.insert=false``)."""
    return op in (WriteOperation.UPSERT, WriteOperation.DELETE) or bool(
        WriteConfig.COMBINE_BEFORE_INSERT.get(options)
    )


def prepare(
    table: TableHandle, current: pa.Schema | None, data: pa.Table, op: WriteOperation, options: dict[str, str]
) -> PreparedBatch:
    """Key, type and dedupe ``data`` for a write onto a table whose schema is ``current``."""
    data = data.drop_columns([c for c in data.column_names if c in META_COLUMNS])
    check_input_columns(data.column_names)
    kg = table.meta.key_generator
    if op is WriteOperation.DELETE:
        key_input = data.select(delete_key_fields(table, data.column_names))
        key_input = cast_to(key_input, delete_key_schema(current, key_input.schema))
        schema = current if current is not None else normalize_schema(key_input.schema)
        return PreparedBatch(
            op,
            merging.dedupe(delete_records(kg, key_input), MergeMode.COMMIT_TIME_ORDERING, None),
            schema,
            to_avro_schema(schema, table.meta.name),
        )

    schema = write_schema(table.meta, current, data.schema)
    records = keyed_records(kg, cast_to(data, schema))
    if combines(op, options):
        records = merging.dedupe(records, table.meta.merge_mode, table.meta.ordering_field)
    return PreparedBatch(op, records, schema, to_avro_schema(schema, table.meta.name))


# ---------------------------------------------------------------------------------- plan


@dataclass
class FileGroupWrite:
    """One file group's share of a write."""

    partition: str
    file_id: str
    base_file: BaseFile | None
    records: pa.Table  # incoming records routed here (data columns + KEY/PARTITION/DELETED)
    explicit_deletes: bool = False  # deletes from the delete operation win regardless of ordering
    # insert / bulk_insert: append to the base file without merging stored records of the same key
    # (Apache Hudi's concat handle; hoodie.merge.allow.duplicate.on.inserts defaults to true)
    concat: bool = False
    # Merge-on-Read: append one new log file (data block + delete block) instead of a base file
    log: bool = False
    # log appends: the index found the file group for these records (Hudi's tagged location), so
    # its data records count as updates; records for a new (log-only) file group are inserts
    tagged: bool = False


@dataclass
class WritePlan:
    file_groups: list[FileGroupWrite] = field(default_factory=list)
    replaced: dict[str, list[str]] | None = None


def _avg_record_size(view: FileSystemView, default: int) -> int:
    tl = view.timeline
    for inst in reversed(tl.completed([Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT])):
        # base files only: log files hold Avro/Parquet blocks of a different density
        stats = [s for s in tl.commit_metadata(inst).write_stats() if BaseFile.parse(s.path) is not None]
        written = sum(s.num_writes for s in stats)
        size = sum(s.total_write_bytes for s in stats)
        if written > 0 and size > 0:
            return max(1, size // written)
    return default


def _split_by_partition(records: pa.Table) -> dict[str, pa.Table]:
    parts = records.column(PARTITION)
    uniq = pc.unique(parts).to_pylist()
    if len(uniq) == 1:
        return {uniq[0]: records}
    return {p: records.filter(pc.equal(parts, p)) for p in sorted(uniq)}


def plan_write(
    table: TableHandle, batch: PreparedBatch, options: dict[str, str], partitions: Sequence[str] | None
) -> WritePlan:
    if table.meta.table_type is TableType.MERGE_ON_READ:
        return plan_mor_write(table, batch, options, partitions)
    op = batch.operation
    view = table.snapshot().view
    plan = WritePlan()
    by_partition = _split_by_partition(batch.records) if batch.records.num_rows else {}
    if op.is_replace:
        return _plan_replace(table, view, op, by_partition, options, partitions)

    explicit = op is WriteOperation.DELETE
    lookup = op in (WriteOperation.UPSERT, WriteOperation.DELETE)
    if op is WriteOperation.BULK_INSERT:
        by_partition = {p: _sort_bulk(r, options) for p, r in by_partition.items()}
    for p, recs in by_partition.items():
        if table.meta.index_type is IndexType.BUCKET:
            plan.file_groups.extend(_bucket_groups(table, p, recs, view, explicit))
            continue
        if lookup:
            located = _locate(table, view, p, recs)
            found = np.zeros(recs.num_rows, dtype=bool)
            for fid, rows in located.items():
                found[rows] = True
                plan.file_groups.append(
                    FileGroupWrite(p, fid, _latest(view, p, fid), recs.take(pa.array(rows)), explicit)
                )
            recs = recs.filter(pa.array(~found))
            if explicit:
                continue  # deleting keys that do not exist is a no-op
        inserts = _without_deletes(recs)
        if inserts.num_rows:
            # inserts may land in a small file group that also takes updates in this write;
            # _merge_same_groups folds both into one rewrite of that file group
            plan.file_groups.extend(
                _new_file_groups(
                    table, p, inserts, view, options, small_files=op is not WriteOperation.BULK_INSERT
                )
            )
    if op in (WriteOperation.INSERT, WriteOperation.BULK_INSERT):
        for g in plan.file_groups:
            g.concat = True
    return _merge_same_groups(plan)


def stored_record_keys(storage: Storage, path: str, kg: KeyGenerator, populate_meta_fields: bool) -> pa.Array:
    """Record keys of a base file: its ``_hoodie_record_key`` column, or (tables written with
    ``hoodie.populate.meta.fields=false``, where that column is null) recomputed from the data."""
    if populate_meta_fields:
        return storage.read_parquet(path, columns=[KEY]).column(KEY).combine_chunks()
    data = storage.read_parquet(path, columns=list(kg.record_key_fields))
    return kg.record_keys(data).combine_chunks()


def _locate(
    table: TableHandle, view: FileSystemView, partition: str, recs: pa.Table
) -> dict[str, np.ndarray]:
    """Simple index (Copy-on-Write): file id -> positions (ascending) of the incoming records stored
    in its latest base file."""
    if recs.num_rows == 0:
        return {}
    stored = (
        (
            bf.file_id,
            stored_record_keys(
                table.storage, bf.path, table.meta.key_generator, table.meta.populate_meta_fields
            ),
        )
        for bf in view.latest_base_files(partition)
    )
    return locate_keys(recs.column(KEY), stored)


def locate_keys(
    incoming: pa.ChunkedArray | pa.Array, stored: Iterable[tuple[str, pa.Array]]
) -> dict[str, np.ndarray]:
    """The simple index's join: file id -> positions (ascending) of the ``incoming`` keys that the
    file group's ``stored`` keys hold, file ids in order.

    A key stored in several file groups (duplicates written by inserts) is routed to each of them,
    as Apache Hudi's simple index does (a join of incoming keys with stored locations); an incoming
    key given twice is located twice. Vectorised: the incoming keys are dictionary-encoded once,
    and every stored key is looked up in that dictionary in one ``index_in`` (one hash probe each).
    """
    encoded = pc.dictionary_encode(_one_array(incoming).cast(pa.large_string()))
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False))
    distinct = encoded.dictionary
    fids, parts = [], []
    for fid, keys in stored:
        fids.append(fid)
        parts.append(keys.cast(pa.large_string()))  # large: the keys of all file groups may pass 2 GiB
    if not parts:
        return {}
    owner = np.repeat(np.arange(len(parts)), [len(k) for k in parts])
    found = pc.index_in(pa.concat_arrays(parts), value_set=distinct)  # one hash table, one probe per key
    hit = np.asarray(found.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    owners, held_codes = owner[hit], np.asarray(found.drop_null().to_numpy())
    out: dict[str, np.ndarray] = {}
    for i in np.unique(owners).tolist():
        held = np.zeros(len(distinct), dtype=bool)
        held[held_codes[owners == i]] = True
        rows = np.flatnonzero(held[codes])
        previous = out.get(fids[i])  # a file id given twice: its positions are merged
        out[fids[i]] = rows if previous is None else np.union1d(previous, rows)
    return {fid: out[fid] for fid in sorted(out)}


def _one_array(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _plan_replace(
    table: TableHandle,
    view: FileSystemView,
    op: WriteOperation,
    by_partition: dict[str, pa.Table],
    options: dict[str, str],
    partitions: Sequence[str] | None,
) -> WritePlan:
    """Replace operations (both table types): every file group of the target partitions is
    replaced; the incoming rows go to new base files."""
    if op is WriteOperation.INSERT_OVERWRITE_TABLE:
        targets = view.partitions()
    elif op is WriteOperation.DELETE_PARTITION:
        targets = sorted(set(partitions or []) | set(by_partition))
        if not targets:
            raise InvalidInputError("delete_partition needs partition paths or rows naming partitions")
    else:
        targets = sorted(by_partition)
    plan = WritePlan(replaced={p: [g.file_id for g in view.file_groups(p)] for p in targets})
    if op is WriteOperation.DELETE_PARTITION:
        return plan
    for p, recs in by_partition.items():
        # the partition is replaced even if all its incoming records are deletes
        rows = _without_deletes(recs)
        if rows.num_rows:
            plan.file_groups.extend(_new_file_groups(table, p, rows, view, options, replace=True))
    return plan


def _merge_same_groups(plan: WritePlan) -> WritePlan:
    merged: dict[tuple[str, str], FileGroupWrite] = {}
    for g in plan.file_groups:
        key = (g.partition, g.file_id)
        if key in merged:
            prev = merged[key]
            if prev.concat != g.concat or prev.explicit_deletes != g.explicit_deletes:
                raise AssertionError(f"conflicting writes planned for file group {g.file_id}")
            if prev.log != g.log:
                # MOR: a small file group (no log files) that takes inserts is rewritten as a new
                # base file together with its updates, as Hudi's delta-commit executor does for
                # small file ids when the index cannot index log files
                prev.log = prev.tagged = False
            prev.records = pa.concat_tables([prev.records, g.records])
        else:
            merged[key] = g
    plan.file_groups = list(merged.values())
    return plan


def _latest(view: FileSystemView, partition: str, file_id: str) -> BaseFile | None:
    g = view.groups.get((partition, file_id))
    return g.latest if g else None


def _sort_bulk(records: pa.Table, options: dict[str, str]) -> pa.Table:
    mode = WriteConfig.BULK_INSERT_SORT_MODE.get(options)
    if mode in (BulkInsertSortMode.GLOBAL_SORT, BulkInsertSortMode.PARTITION_SORT):
        # within one partition both modes sort by record key; GLOBAL_SORT also orders partitions
        return records.take(
            pc.sort_indices(records, sort_keys=[(PARTITION, "ascending"), (KEY, "ascending")])
        )
    return records


def _bucket_groups(
    table: TableHandle, p: str, recs: pa.Table, view: FileSystemView, explicit: bool, replace: bool = False
) -> list[FileGroupWrite]:
    """Route records to their bucket's file group (a new one per bucket when ``replace``)."""
    existing: dict[int, str] = {}
    for g in [] if replace else view.file_groups(p):
        b = bucket_of_file_id(g.file_id)
        if b is not None:
            existing[b] = g.file_id
    out = []
    for b, rows in _by_bucket(table, recs):
        fid = existing.get(b)
        if fid is None:
            if explicit or not pc.any(pc.invert(rows.column(DELETED))).as_py():
                continue  # nothing to delete in a bucket that has no file group yet
            fid = bucket_file_id_prefix(b) + "-0"
        out.append(FileGroupWrite(p, fid, _latest(view, p, fid), rows, explicit))
    return out


def _without_deletes(recs: pa.Table) -> pa.Table:
    """The records not flagged as deletes (the table itself, uncopied, when none is)."""
    flags = recs.column(DELETED)
    return recs.filter(pc.invert(flags)) if pc.any(flags).as_py() else recs


def _by_bucket(table: TableHandle, recs: pa.Table) -> list[tuple[int, pa.Table]]:
    """The records of each bucket (buckets ascending, records in their input order)."""
    buckets = np.asarray(
        bucket_ids(recs.column(KEY), list(table.meta.bucket_hash_fields), table.meta.num_buckets).to_numpy()
    )
    order = np.argsort(buckets, kind="stable")
    grouped = recs if bool(np.all(np.diff(order) > 0)) else recs.take(pa.array(order))
    ordered = buckets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else ordered
    ends = [*starts[1:].tolist(), len(ordered)]
    return [
        (int(ordered[s]), grouped.slice(int(s), e - int(s)))
        for s, e in zip(starts.tolist(), ends, strict=True)
    ]


def _new_file_groups(
    table: TableHandle,
    p: str,
    recs: pa.Table,
    view: FileSystemView,
    options: dict[str, str],
    small_files: bool = False,
    replace: bool = False,
    not_small: set[str] | None = None,
) -> list[FileGroupWrite]:
    """File groups for inserts: small existing ones first (if ``small_files``), then new ones.

    ``replace`` (insert_overwrite*): the partition's file groups are being replaced, so every
    record goes to a new file group (for the bucket index: a new file group per bucket).
    ``not_small``: file ids never taken as small files (MOR file groups with log files).
    """
    if table.meta.index_type is IndexType.BUCKET:
        return _bucket_groups(table, p, recs, view, explicit=False, replace=replace)
    out = []
    offset = 0
    slots = insert_slots(table, p, recs.num_rows, view, options, small_files and not replace, not_small)
    for file_id, base, take in slots:
        out.append(FileGroupWrite(p, file_id, base, recs.slice(offset, take)))
        offset += take
    return out


def insert_slots(
    table: TableHandle,
    p: str,
    n: int,
    view: FileSystemView,
    options: dict[str, str],
    small_files: bool = False,
    not_small: set[str] | None = None,
) -> list[tuple[str, BaseFile | None, int]]:
    """How ``n`` inserts into partition ``p`` are spread (simple index): ``(file id, base file,
    record count)``, small file groups first (if ``small_files``), then new ones.

    Sizing follows Hudi's rules: a base file below ``hoodie.parquet.small.file.limit`` takes
    records until it would reach ``hoodie.parquet.max.file.size`` at the average record size of the
    latest commit (``hoodie.copyonwrite.record.size.estimate`` before the first); new file groups
    take ``max size / average size`` records each. File groups in ``not_small`` are never taken.
    Only counts and file sizes are needed, so a distributed engine plans this on its driver.
    """
    max_size = WriteConfig.PARQUET_MAX_FILE_SIZE.require(options)
    small_limit = WriteConfig.PARQUET_SMALL_FILE_LIMIT.require(options)
    avg = _avg_record_size(view, WriteConfig.COPY_ON_WRITE_RECORD_SIZE_ESTIMATE.require(options))
    out: list[tuple[str, BaseFile | None, int]] = []
    offset = 0
    if small_files and small_limit > 0:
        for bf in sorted(view.latest_base_files(p), key=lambda b: b.size):
            if offset >= n:
                break
            if bf.size >= small_limit or (not_small and bf.file_id in not_small):
                continue
            room = max(0, (max_size - bf.size) // avg)
            if room <= 0:
                continue
            take = min(room, n - offset)
            out.append((bf.file_id, bf, take))
            offset += take
    per_file = max(1, max_size // avg)
    while offset < n:
        take = min(per_file, n - offset)
        out.append((new_file_id(), None, take))
        offset += take
    return out


def records_per_file(view: FileSystemView, options: dict[str, str]) -> int:
    """Records a new base file takes: ``hoodie.parquet.max.file.size`` / the average record size."""
    max_size = WriteConfig.PARQUET_MAX_FILE_SIZE.require(options)
    avg = _avg_record_size(view, WriteConfig.COPY_ON_WRITE_RECORD_SIZE_ESTIMATE.require(options))
    return max(1, max_size // avg)


# ---------------------------------------------------------------------------------- plan (MOR)


class LogKeyCache:
    """Record keys of log files, by file: what the simple index of a Merge-on-Read table reads.

    Log files of table version 8 are immutable (every deltacommit writes new ones), so a log file's
    keys are read once per process (through :mod:`inlet.core.log.reader`) and kept, keyed by the
    file's full path and size; the writer also stores the keys of every log file it writes, so an
    upsert never decodes the logs of earlier upserts of the same process. The least recently used
    files are dropped beyond ``max_bytes`` of keys.
    """

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._files: OrderedDict[tuple[str, int], tuple[LogFileScan, dict[int, pa.Array]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def keys(self, storage: Storage, log_files: Sequence[LogFile], blocks: BlockFilter) -> pa.Array:
        """Keys of the data and delete blocks of a slice's logs that count (as the reader counts
        them: committed, not rolled back, not superseded by a log-compacted block)."""
        entries = [self._entry(storage, lf.path, lf.size) for lf in log_files]
        parts = [
            entries[i][1][frame.offset]
            for i, frame in counted_blocks([scan for scan, _ in entries], blocks)
            if frame.offset in entries[i][1]
        ]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.string())

    def put(self, storage: Storage, path: str, data: bytes, block_keys: Sequence[pa.Array]) -> None:
        """Remember the keys of a log file just written: ``block_keys`` per data/delete block, in order."""
        scan = scan_frames(BytesSource(data), path)
        frames = [f for f in scan.frames if f.block_type in _KEYED_BLOCKS]
        if len(frames) != len(block_keys):
            raise AssertionError(f"log file {path}: {len(frames)} blocks but {len(block_keys)} key lists")
        keys = {f.offset: _one_array(k).cast(pa.string()) for f, k in zip(frames, block_keys, strict=True)}
        self._store((storage.full(path), len(data)), scan, keys)

    def _entry(self, storage: Storage, path: str, size: int) -> tuple[LogFileScan, dict[int, pa.Array]]:
        cache_key = (storage.full(path), size)
        with self._lock:
            found = self._files.get(cache_key)
            if found is not None:
                self._files.move_to_end(cache_key)
                return found
        scan, keys = _read_log_keys(storage, path)
        self._store(cache_key, scan, keys)
        return scan, keys

    def _store(self, cache_key: tuple[str, int], scan: LogFileScan, keys: dict[int, pa.Array]) -> None:
        size = sum(k.nbytes for k in keys.values())
        with self._lock:
            old = self._files.pop(cache_key, None)
            if old is not None:
                self._bytes -= sum(k.nbytes for k in old[1].values())
            self._files[cache_key] = (scan, keys)
            self._bytes += size
            while self._bytes > self.max_bytes and len(self._files) > 1:
                _, (_, dropped) = self._files.popitem(last=False)
                self._bytes -= sum(k.nbytes for k in dropped.values())


_KEYED_BLOCKS = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE)
LOG_KEYS = LogKeyCache()


def _read_log_keys(storage: Storage, path: str) -> tuple[LogFileScan, dict[int, pa.Array]]:
    """A log file's frames, and the record keys of each data and delete block (by block offset)."""
    src = open_source(storage, path)
    try:
        scan = scan_frames(src, path)
        keys: dict[int, pa.Array] = {}
        for frame in scan.frames:
            if frame.block_type is BlockType.DELETE:
                deletes = read_delete_records(src, frame, path)
                keys[frame.offset] = pa.array([d.record_key for d in deletes], pa.string())
            elif frame.block_type in _KEYED_BLOCKS:
                parts = []
                for part in iter_block_batches(src, frame, path):
                    if isinstance(part, pa.Table):
                        parts.append(_one_array(part.column(KEY)).cast(pa.string()))
                    else:
                        parts.append(pa.array([row.get(KEY) for row in part], pa.string()))
                keys[frame.offset] = (
                    pc.drop_null(pa.concat_arrays(parts)) if parts else pa.array([], pa.string())
                )
        return scan, keys
    finally:
        src.close()


def slice_record_keys(table: TableHandle, view: FileSystemView, file_slice: FileSlice) -> pa.Array:
    """Record keys in a file slice: its base file's, and those of its log files' data and delete
    blocks (duplicates possible)."""
    parts: list[pa.Array] = []
    if file_slice.base_file is not None:
        base = file_slice.base_file
        parts.append(
            stored_record_keys(
                table.storage, base.path, table.meta.key_generator, table.meta.populate_meta_fields
            )
        )
    if file_slice.log_files:
        parts.append(LOG_KEYS.keys(table.storage, file_slice.log_files, BlockFilter(view.is_committed)))
    return pa.concat_arrays([p.cast(pa.string()) for p in parts]) if parts else pa.array([], pa.string())


def _locate_mor(
    table: TableHandle, view: FileSystemView, slices: Sequence[FileSlice], recs: pa.Table
) -> dict[str, np.ndarray]:
    """Simple index of a MOR table: file id -> positions of incoming records whose keys the latest
    file slice holds (in its base file or in its log files)."""
    if recs.num_rows == 0:
        return {}
    stored = ((s.file_id, slice_record_keys(table, view, s)) for s in slices)
    return locate_keys(recs.column(KEY), stored)


NBCC_MODE = "NON_BLOCKING_CONCURRENCY_CONTROL"


def _mor_bucket_groups(
    table: TableHandle, p: str, recs: pa.Table, slices: Sequence[FileSlice], explicit: bool, bulk: bool
) -> list[FileGroupWrite]:
    """Bucket index on MOR: every record goes to a log file of its bucket's file group.

    No lookup: a record of a bucket whose file group exists is an update of that file group (Hudi's
    tagged location), whether or not the key is stored there. A bucket without a file group gets a
    new, log-only one (no base file), as Apache Hudi's bucket index writes MOR tables, except under
    ``bulk``: bulk inserts write a new bucket's base file (Hudi's bucket bulk-insert writer). Under
    non-blocking concurrency control its id is the fixed ``<bucket>-0000-0000-0000-000000000000-0``
    so that concurrent writers agree on it.
    """
    existing: dict[int, FileSlice] = {}
    for s in slices:
        b = bucket_of_file_id(s.file_id)
        if b is not None:
            existing[b] = s
    nbcc = table.meta.props.get("hoodie.write.concurrency.mode", "").upper() == NBCC_MODE
    out = []
    for b, rows in _by_bucket(table, recs):
        current = existing.get(b)
        if current is not None:
            out.append(
                FileGroupWrite(p, current.file_id, current.base_file, rows, explicit, log=True, tagged=True)
            )
            continue
        if explicit:
            continue
        rows = _without_deletes(rows)  # nothing to delete in a new file group
        if rows.num_rows == 0:
            continue
        fid = nbcc_bucket_file_id(b) if nbcc else bucket_file_id_prefix(b) + "-0"
        out.append(FileGroupWrite(p, fid, None, rows, log=not bulk))
    return out


def plan_mor_write(
    table: TableHandle, batch: PreparedBatch, options: dict[str, str], partitions: Sequence[str] | None
) -> WritePlan:
    """Plan a write into a Merge-on-Read table.

    - upsert / delete (simple index): keys found in a file group's latest slice (base file or log
      files) are appended to that file group as one new log file; inserts go to new base files,
      or to small file groups without log files (rewritten with a new base file);
    - insert / bulk_insert (simple index): new base files (small ones first for insert);
    - bucket index: every record is appended to its bucket's file group (log-only when new, but
      bulk_insert writes a new bucket's base file);
    - replace operations: new base files, replacing every file group (log-only ones included).

    File groups are the latest file slices of :class:`FileSystemView` (base file and log files),
    the same slices the readers merge.
    """
    if not table.meta.populate_meta_fields:
        raise UnsupportedError("Merge-on-Read writes need hoodie.populate.meta.fields=true")
    op = batch.operation
    view = table.snapshot().view
    plan = WritePlan()
    by_partition = _split_by_partition(batch.records) if batch.records.num_rows else {}
    if op.is_replace:
        return _plan_replace(table, view, op, by_partition, options, partitions)

    explicit = op is WriteOperation.DELETE
    lookup = op in (WriteOperation.UPSERT, WriteOperation.DELETE)
    if op is WriteOperation.BULK_INSERT:
        by_partition = {p: _sort_bulk(r, options) for p, r in by_partition.items()}
    for p, recs in by_partition.items():
        slices = view.latest_file_slices(p)
        if table.meta.index_type is IndexType.BUCKET:
            bulk = op is WriteOperation.BULK_INSERT
            plan.file_groups.extend(_mor_bucket_groups(table, p, recs, slices, explicit, bulk))
            continue
        if lookup:
            by_id = {s.file_id: s for s in slices}
            found = np.zeros(recs.num_rows, dtype=bool)
            for fid, rows in _locate_mor(table, view, slices, recs).items():
                found[rows] = True
                plan.file_groups.append(
                    FileGroupWrite(
                        p,
                        fid,
                        by_id[fid].base_file,
                        recs.take(pa.array(rows)),
                        explicit,
                        log=True,
                        tagged=True,
                    )
                )
            recs = recs.filter(pa.array(~found))
            if explicit:
                continue
        inserts = _without_deletes(recs)
        if inserts.num_rows:
            plan.file_groups.extend(
                _new_file_groups(
                    table,
                    p,
                    inserts,
                    view,
                    options,
                    small_files=op is not WriteOperation.BULK_INSERT,
                    not_small={s.file_id for s in slices if s.has_logs},
                )
            )
    if op in (WriteOperation.INSERT, WriteOperation.BULK_INSERT):
        for w in plan.file_groups:
            w.concat = not w.log
    plan = _merge_same_groups(plan)
    _check_log_deletes(table, plan)
    return plan


def _check_log_deletes(table: TableHandle, plan: WritePlan) -> None:
    """Soft deletes appended to logs need their ordering value under EVENT_TIME_ORDERING.

    A delete block carries each delete's ordering value, and readers compare it with the stored
    record's; Apache Hudi refuses records without an ordering value, and a null one cannot be
    compared, so such input is refused before anything is written.
    """
    for g in plan.file_groups:
        if g.log and not g.explicit_deletes:
            check_soft_delete_ordering(table, g.records)


def check_soft_delete_ordering(table: TableHandle, records: pa.Table) -> None:
    """Refuse ``_hoodie_is_deleted`` rows without an ordering value where a delete block would
    have to carry it (Merge-on-Read, event-time ordering). The local engine checks a whole batch
    before its instant begins; planning checks the rows bound for log files."""
    ordering = table.meta.ordering_field
    if (
        table.meta.table_type is not TableType.MERGE_ON_READ
        or table.meta.merge_mode is not MergeMode.EVENT_TIME_ORDERING
        or not ordering
    ):
        return
    refuse_null_ordering_deletes(records, ordering)


def refuse_null_ordering_deletes(records: pa.Table, ordering: str | None) -> None:
    """:func:`check_soft_delete_ordering` for records known to go to a log file of such a table."""
    if not ordering or ordering not in records.column_names:
        return
    deleted = records.filter(records.column(DELETED))
    if deleted.num_rows and deleted.column(ordering).null_count:
        raise InvalidInputError(
            f"{IS_DELETED_COLUMN} rows need a value in the ordering field {ordering!r} on a "
            "Merge-on-Read table (the delete block records it)"
        )


# ---------------------------------------------------------------------------------- execute


@dataclass(frozen=True)
class CommittedInstants:
    """:meth:`FileSystemView.is_committed` as plain data, so that executors can receive it (a
    :class:`~inlet.core.file_group_reader.BlockFilter` predicate)."""

    completed: frozenset[str]
    archive_boundary: str | None = None

    @classmethod
    def of(cls, view: FileSystemView) -> CommittedInstants:
        return cls(frozenset(view.completion_times), view.archive_boundary)

    def __call__(self, instant_time: str) -> bool:
        if instant_time in self.completed:
            return True
        return self.archive_boundary is not None and instant_time < self.archive_boundary


@dataclass(frozen=True)
class WriteContext:
    """What a file-group writer needs; plain values so an executor process can receive it."""

    base_uri: str
    table_name: str
    instant_time: str
    schema: pa.Schema
    avro_schema: str
    merge_mode: MergeMode
    ordering_field: str | None
    key_generator: KeyGenerator
    populate_meta_fields: bool = True
    compression: str = "snappy"
    data_block_format: logs.DataBlockFormat = logs.DataBlockFormat.AVRO
    table_merge_mode: MergeMode | None = None  # the table's mode (merge_mode is per operation)
    # keep the keys of written log files for the next simple-index lookup (see LogKeyCache)
    cache_log_keys: bool = True


def _meta(n: int, value: str) -> pa.Array:
    return pa.repeat(pa.scalar(value, pa.string()), n)


def _seqnos(instant_time: str, task_id: int, n: int, start: int = 0) -> pa.Array:
    """``_hoodie_commit_seqno`` of ``n`` new records: ``<instant>_<task>_<start + i>``."""
    numbers = pa.array(np.arange(start, start + n, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(f"{instant_time}_{task_id}_", numbers, "")


def _meta_columns(ctx: WriteContext, fresh: pa.Table, seq: pa.Array, name: str) -> list[pa.Array]:
    """The five meta columns of newly written records (only the file name without meta fields)."""
    n = fresh.num_rows
    if not ctx.populate_meta_fields:
        return [pa.nulls(n, pa.string())] * 4 + [_meta(n, name)]
    return [_meta(n, ctx.instant_time), seq, fresh.column(KEY), fresh.column(PARTITION), _meta(n, name)]


def write_file_group(
    storage: Storage,
    ctx: WriteContext,
    fg: FileGroupWrite,
    task_id: int,
    attempt: int = 0,
    stage_id: int = 0,
    seq_start: int = 0,
) -> WriteStat:
    """Write the new base file of one file group; returns its write stat.

    Upserts and deletes merge each stored record with the incoming record of its key (the
    merge mode decides; a key stored twice is merged twice, as Apache Hudi's merge handle does).
    Inserts (``fg.concat``) keep every stored record and append the incoming ones.

    The file is named with the write token ``<task_id>-<stage_id>-<attempt>`` (distinct attempts
    of one task write distinct files); new records get sequence numbers
    ``<instant>_<task_id>_<seq_start + i>``.
    """
    started = time.monotonic()
    token = write_token(task_id, stage_id, attempt)
    name = base_file_name(fg.file_id, token, ctx.instant_time)
    rel = posixpath.join(fg.partition, name) if fg.partition else name
    full_schema = pa.schema(list(meta_schema()) + list(ctx.schema))
    incoming = fg.records
    deleted_flags = np.asarray(incoming.column(DELETED).to_numpy(zero_copy_only=False), dtype=bool)

    kept = None
    num_updates = num_deletes = 0
    write_new = ~deleted_flags  # incoming records written as new records
    updates = np.zeros(0, dtype=np.int64)  # incoming positions written over stored records
    if fg.base_file is not None:
        existing = storage.read_parquet(fg.base_file.path)
        existing = cast_to(existing, full_schema)
        if not ctx.populate_meta_fields:
            existing = existing.set_column(2, full_schema.field(2), ctx.key_generator.record_keys(existing))
        replaced_rows = np.zeros(existing.num_rows, dtype=bool)
        if not fg.concat:
            # merge every stored record with the incoming record of its key (incoming keys are
            # unique here: upserts and deletes are deduplicated; were one given twice, its last
            # record would count); a key stored twice is merged twice
            ex_match = _last_position(existing.column(KEY), incoming.column(KEY))
            ex_idx = np.nonzero(ex_match >= 0)[0]
            win = np.ones(len(ex_idx), dtype=bool)
            if len(ex_idx) and not fg.explicit_deletes and ctx.ordering_field:
                stored = existing.column(ctx.ordering_field).take(pa.array(ex_idx))
                inc = incoming.column(ctx.ordering_field).take(pa.array(ex_match[ex_idx]))
                win = merging.incoming_wins(ctx.merge_mode, stored, inc)
            replaced_rows[ex_idx[win]] = True
            winners = ex_match[ex_idx[win]]
            updates = winners[~deleted_flags[winners]]
            num_updates = len(updates)
            num_deletes = int(deleted_flags[winners].sum())
            write_new[ex_match[ex_idx]] = False  # matched a stored record: never a new record
        kept = existing.filter(pa.array(~replaced_rows))
        if not ctx.populate_meta_fields:  # keys were only recomputed to merge; stored as null
            kept = kept.set_column(2, full_schema.field(2), pa.nulls(kept.num_rows, pa.string()))
    num_inserts = int(write_new.sum())
    fresh = pa.concat_tables([incoming.take(pa.array(updates)), incoming.filter(pa.array(write_new))])

    n = fresh.num_rows
    seq = _seqnos(ctx.instant_time, task_id, n, seq_start)
    if n:
        fresh_meta = pa.Table.from_arrays(
            _meta_columns(ctx, fresh, seq, name) + [fresh.column(f.name) for f in ctx.schema],
            schema=full_schema,
        )
    else:
        fresh_meta = full_schema.empty_table()
    parts = [fresh_meta]
    if kept is not None and kept.num_rows:
        kept = kept.set_column(4, full_schema.field(4), _meta(kept.num_rows, name))
        parts.insert(0, kept)
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    markers.create_marker(
        storage, ctx.instant_time, fg.partition, name, "MERGE" if fg.base_file else "CREATE"
    )
    keys = out.column(KEY)
    avro_with_meta = _avro_with_meta(ctx.avro_schema)
    md: dict[bytes | str, bytes | str] = {"parquet.avro.schema": avro_with_meta, "writer.model.name": "avro"}
    if out.num_rows and ctx.populate_meta_fields:
        md["hoodie_min_record_key"] = pc.min(keys).as_py()
        md["hoodie_max_record_key"] = pc.max(keys).as_py()
    out = out.replace_schema_metadata(md)
    pq.write_table(out, storage.full(rel), filesystem=storage.fs, compression=ctx.compression)
    size = storage.fs.get_file_info(storage.full(rel)).size or 0
    elapsed = int((time.monotonic() - started) * 1000)
    return WriteStat(
        file_id=fg.file_id,
        path=rel,
        partition_path=fg.partition,
        prev_commit=fg.base_file.instant_time if fg.base_file else "null",
        num_writes=out.num_rows,
        num_deletes=num_deletes,
        num_update_writes=num_updates,
        num_inserts=num_inserts,
        total_write_bytes=size,
        file_size_in_bytes=size,
        prev_base_file=fg.base_file.name if fg.base_file else None,
        runtime_stats={
            "totalScanTime": 0,
            "totalCreateTime": 0 if fg.base_file else elapsed,
            "totalUpsertTime": elapsed if fg.base_file else 0,
        },
    )


def _last_position(stored: pa.ChunkedArray, incoming: pa.ChunkedArray) -> np.ndarray:
    """For each stored key, the position of its last occurrence among the incoming keys (-1: none)."""
    n = len(incoming)
    if n == 0:
        return np.full(len(stored), -1, dtype=np.int64)
    backwards = _one_array(incoming).take(pa.array(np.arange(n - 1, -1, -1, dtype=np.int64)))
    found = pc.index_in(stored, value_set=backwards)  # first match from the end = last occurrence
    return np.asarray(pc.subtract(n - 1, found).fill_null(-1).to_numpy(), dtype=np.int64)


def write_log_group(
    storage: Storage,
    ctx: WriteContext,
    fg: FileGroupWrite,
    task_id: int,
    attempt: int = 0,
    stage_id: int = 0,
    seq_start: int = 0,
) -> WriteStat:
    """Append one file group's share of a Merge-on-Read write as a new log file; returns its write stat.

    The file (``.<fileId>_<instant>.log.1_<token>``) holds a data block with the upserted records
    (meta columns: this instant, a new sequence number, the key, the partition and the file id) and a
    delete block with the deleted keys, in that order, as Apache Hudi's append handle writes them.
    Deletes of the ``delete`` operation carry Hudi's default ordering value (they win regardless of
    ordering); ``_hoodie_is_deleted`` records under EVENT_TIME_ORDERING carry their ordering value.
    """
    started = time.monotonic()
    token = write_token(task_id, stage_id, attempt)
    name = log_file_name(fg.file_id, ctx.instant_time, 1, token)
    rel = posixpath.join(fg.partition, name) if fg.partition else name
    schema_json = _avro_with_meta(ctx.avro_schema)
    incoming = fg.records
    upserts = _without_deletes(incoming)
    removals = incoming.filter(incoming.column(DELETED)) if upserts is not incoming else incoming.slice(0, 0)

    blocks: list[bytes] = []
    block_keys: list[pa.ChunkedArray] = []
    n = upserts.num_rows
    if n:
        full_schema = pa.schema(list(meta_schema()) + list(ctx.schema))
        seq = _seqnos(ctx.instant_time, task_id, n, seq_start)
        meta = [_meta(n, ctx.instant_time), seq, upserts.column(KEY), upserts.column(PARTITION)]
        records = pa.Table.from_arrays(
            [*meta, _meta(n, fg.file_id)] + [upserts.column(f.name) for f in ctx.schema], schema=full_schema
        )
        blocks.append(
            logs.data_block(records, ctx.instant_time, schema_json, ctx.data_block_format, ctx.compression)
        )
        block_keys.append(upserts.column(KEY))
    if removals.num_rows:
        ordering = ctx.ordering_field
        typed = (
            not fg.explicit_deletes
            and ctx.table_merge_mode is MergeMode.EVENT_TIME_ORDERING
            and ordering is not None
            and ordering in removals.column_names
        )
        values = removals.column(ordering) if typed and ordering else None
        blocks.append(
            logs.delete_block_columns(
                removals.column(KEY), removals.column(PARTITION), values, ctx.instant_time, schema_json
            )
        )
        block_keys.append(removals.column(KEY))

    markers.create_marker(storage, ctx.instant_time, fg.partition, name, "APPEND")
    size = logs.write_log_file(storage, rel, blocks)
    if ctx.cache_log_keys:
        LOG_KEYS.put(storage, rel, b"".join(blocks), block_keys)
    elapsed = int((time.monotonic() - started) * 1000)
    return WriteStat(
        file_id=fg.file_id,
        path=rel,
        partition_path=fg.partition,
        # table version 8: the append handle no longer looks up the file slice (log files are named
        # by the deltacommit), so prevCommit is the deltacommit itself and baseFile is empty
        prev_commit=ctx.instant_time,
        num_writes=n,
        num_deletes=removals.num_rows,
        num_update_writes=n if fg.tagged else 0,
        num_inserts=0 if fg.tagged else n,
        total_write_bytes=size,
        file_size_in_bytes=size,
        base_file="",
        log_files=[name],
        log_version=1,
        log_offset=0,
        runtime_stats={"totalScanTime": 0, "totalCreateTime": 0, "totalUpsertTime": elapsed},
    )


def _avro_with_meta(avro_schema: str) -> str:
    rec = json.loads(avro_schema)
    meta = [{"name": c, "type": ["null", "string"], "doc": "", "default": None} for c in META_COLUMNS]
    rec["fields"] = meta + rec["fields"]
    return json.dumps(rec, separators=(",", ":"))


def ensure_partition_metadata(storage: Storage, partition: str, instant_time: str) -> None:
    rel = posixpath.join(partition, PARTITION_METADATA_FILE) if partition else PARTITION_METADATA_FILE
    if storage.exists(rel):
        return
    depth = len(partition.split("/")) if partition else 0
    body = f"#partition metadata\ncommitTime={instant_time}\npartitionDepth={depth}\n"
    storage.write_atomic(rel, body.encode())


def _planned_metadata(plan: WritePlan, op: WriteOperation) -> CommitMetadata:
    """The inflight instant's content: the file groups about to be written (workload profile)."""
    md = CommitMetadata(operation_type=op.value)
    for g in plan.file_groups:
        md.add(
            WriteStat(file_id=g.file_id, path="", partition_path=g.partition, num_inserts=g.records.num_rows)
        )
    return md


# ---------------------------------------------------------------------------------- commit


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
    )


def remove_stray_files(storage: Storage, instant_time: str, written: Iterable[str]) -> list[str]:
    """Delete the data files an instant's markers name but its write stats do not (``written``):
    files of failed or duplicate (speculative) task attempts. Run before the instant completes, so
    only the files of the committed stats are ever visible."""
    keep = set(written)
    stray = [f for f in markers.marked_files(storage, instant_time) if f not in keep]
    for f in stray:
        storage.delete(f)
    if stray:
        log.info("instant %s: deleted %d file(s) of failed or duplicate attempts", instant_time, len(stray))
    return stray


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
    check_write_options(options)  # engines check earlier too; nothing may fail between begin and try
    interval = WriteConfig.HEARTBEAT_INTERVAL_MS.require(options)
    protocol = table.commit_protocol
    instant = protocol.begin(action, requested)
    beat = heartbeat.Heartbeat(table.storage, instant.time, interval).start()
    try:
        faults.crash_point(faults.AFTER_REQUESTED)
        planned = plan()
        protocol.set_inflight(instant, planned.planned.to_bytes())
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
        remove_stray_files(table.storage, instant.time, (s.path for s in metadata.write_stats()))
        faults.crash_point(faults.BEFORE_COMPLETE)
        done = protocol.complete(instant, metadata)
    except BaseException:
        beat.stop(delete=False)
        try:
            rollback(table, Instant(instant.time, action, instant.state))
        except Exception:  # the pending instant stays; the next writer rolls it back
            log.exception("rollback of failed instant %s failed", instant.time)
        heartbeat.delete(table.storage, instant.time)
        raise
    beat.stop()
    markers.delete_markers(table.storage, instant.time)
    log.info("committed %s %s: %s", done.action, done.time, json.dumps(_counts(metadata)))
    return CommitResult(done.time, done.completion_time or "", done.action, op.value, metadata)


def parse_operation(operation: WriteOperation | str) -> WriteOperation:
    """A write operation (table services are refused)."""
    op = WriteOperation.parse(operation) if isinstance(operation, str) else operation
    if op in (WriteOperation.COMPACT, WriteOperation.CLUSTER):
        raise InvalidInputError(f"{op.value.lower()} is a table service, not a write operation")
    return op


def check_writable(table: TableHandle) -> None:
    if table.meta.version != 8:
        raise UnsupportedError(f"Inlet writes table version 8; this table is version {table.meta.version}")


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
    current = table.snapshot().schema
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
    rollback_failed_writes(table)

    def plan() -> PlannedWrite:
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
