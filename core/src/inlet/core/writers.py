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
log file of it (:func:`write_log_group`, blocks encoded by :mod:`inlet.core.log_writer`), and
inserts to new base files (simple index) or to the log files of their bucket's file group (bucket
index). The simple index looks keys up in the latest file slice: base file and log files.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import avro, faults, heartbeat, markers
from inlet.core import log_writer as logs
from inlet.core import merge as merging
from inlet.core.commit_metadata import SCHEMA_KEY, CommitMetadata, WriteStat
from inlet.core.config import (
    BulkInsertSortMode,
    IndexType,
    MergeMode,
    TableType,
    WriteConfig,
    WriteOperation,
)
from inlet.core.errors import InvalidInputError, SchemaError, UnsupportedError
from inlet.core.filegroups import (
    PARTITION_METADATA_FILE,
    BaseFile,
    FileSystemView,
    LogFile,
    base_file_name,
    list_data_files,
    log_file_name,
    new_file_id,
    write_token,
)
from inlet.core.index import bucket_file_id_prefix, bucket_ids, bucket_of_file_id, nbcc_bucket_file_id
from inlet.core.instant import Action, Instant
from inlet.core.keys import KeyGenerator
from inlet.core.log_blocks import DeleteRecord
from inlet.core.rollback import rollback, rollback_failed_writes
from inlet.core.schema import (
    IS_DELETED_COLUMN,
    META_COLUMNS,
    cast_to,
    evolve,
    meta_schema,
    normalize_schema,
    to_avro_schema,
)
from inlet.core.storage import FileInfo, Storage

if TYPE_CHECKING:
    from inlet.core.table import CommitResult, HudiTable

log = logging.getLogger("inlet.core.writers")

KEY = merging.KEY
PARTITION = merging.PARTITION
DELETED = "__inlet_deleted"
HEARTBEAT_INTERVAL_KEY = "hoodie.client.heartbeat.interval_in_ms"


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


def prepare(table: HudiTable, data: pa.Table, op: WriteOperation, options: dict[str, str]) -> PreparedBatch:
    data = data.drop_columns([c for c in data.column_names if c in META_COLUMNS])
    dupes = {c for c in data.column_names if data.column_names.count(c) > 1}
    if dupes:
        raise SchemaError(f"duplicate column name(s) in the input: {', '.join(sorted(dupes))}")
    kg = table.key_generator
    current = table.schema()
    ordering = table.ordering_field
    if op is WriteOperation.DELETE:
        needed = list(dict.fromkeys([*kg.record_key_fields, *kg.partition_fields]))
        missing = [c for c in needed if c not in data.column_names]
        if missing:
            raise SchemaError(
                f"delete input lacks column(s) {', '.join(missing)} (record key and partition fields)"
            )
        key_input = data.select(needed)
        if current is not None:
            key_input = cast_to(
                key_input, pa.schema([current.field(c) for c in needed if c in current.names])
            )
        records = pa.table(
            {
                KEY: kg.record_keys(key_input),
                PARTITION: kg.partition_paths(key_input),
                DELETED: pa.array(np.ones(data.num_rows, dtype=bool)),
            }
        )
        schema = current if current is not None else normalize_schema(key_input.schema)
        return PreparedBatch(
            op,
            merging.dedupe(records, MergeMode.COMMIT_TIME_ORDERING, None),
            schema,
            to_avro_schema(schema, table.name),
        )

    if data.num_columns == 0:
        raise SchemaError("the input has no columns")
    incoming = normalize_schema(data.schema)
    for f in (*kg.record_key_fields, *kg.partition_fields, *([ordering] if ordering else [])):
        if f not in incoming.names:
            raise SchemaError(
                f"required column {f!r} (record key, partition or ordering field) is missing from the input"
            )
    schema = evolve(current, incoming) if current is not None else incoming
    if IS_DELETED_COLUMN in schema.names and not pa.types.is_boolean(schema.field(IS_DELETED_COLUMN).type):
        raise SchemaError(f"{IS_DELETED_COLUMN} must be a boolean column")
    rows = cast_to(data, schema)
    deleted = (
        pc.fill_null(rows.column(IS_DELETED_COLUMN), False)
        if IS_DELETED_COLUMN in rows.column_names
        else pa.array(np.zeros(rows.num_rows, dtype=bool))
    )
    records = rows.append_column(KEY, kg.record_keys(rows)).append_column(PARTITION, kg.partition_paths(rows))
    records = records.append_column(DELETED, deleted)
    combine = WriteConfig.COMBINE_BEFORE_INSERT.get(options)
    if op in (WriteOperation.UPSERT,) or combine:
        records = merging.dedupe(records, table.merge_mode, ordering)
    return PreparedBatch(op, records, schema, to_avro_schema(schema, table.name))


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
    table: HudiTable, batch: PreparedBatch, options: dict[str, str], partitions: Sequence[str] | None
) -> WritePlan:
    if table.table_type is TableType.MERGE_ON_READ:
        return plan_mor_write(table, batch, options, partitions)
    op = batch.operation
    view = table.file_system_view()
    plan = WritePlan()
    by_partition = _split_by_partition(batch.records) if batch.records.num_rows else {}

    if op.is_replace:
        if op is WriteOperation.INSERT_OVERWRITE_TABLE:
            targets = view.partitions()
        elif op is WriteOperation.DELETE_PARTITION:
            targets = sorted(set(partitions or []) | set(by_partition))
            if not targets:
                raise InvalidInputError("delete_partition needs partition paths or rows naming partitions")
        else:
            targets = sorted(by_partition)
        plan.replaced = {p: [g.file_id for g in view.file_groups(p)] for p in targets}
        if op is WriteOperation.DELETE_PARTITION:
            return plan
        for p, recs in by_partition.items():
            # the partition is replaced even if all its incoming records are deletes
            rows = recs.filter(pc.invert(recs.column(DELETED)))
            if rows.num_rows:
                plan.file_groups.extend(_new_file_groups(table, p, rows, view, options, replace=True))
        return plan

    explicit = op is WriteOperation.DELETE
    lookup = op in (WriteOperation.UPSERT, WriteOperation.DELETE)
    if op is WriteOperation.BULK_INSERT:
        by_partition = {p: _sort_bulk(r, options) for p, r in by_partition.items()}
    for p, recs in by_partition.items():
        if table.index_type is IndexType.BUCKET:
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
        inserts = recs.filter(pc.invert(recs.column(DELETED)))
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


def _locate(table: HudiTable, view: FileSystemView, partition: str, recs: pa.Table) -> dict[str, np.ndarray]:
    """Simple index: file id -> positions (ascending) of the incoming records stored in it.

    A key stored in several file groups (duplicates written by inserts) is routed to each of
    them, as Apache Hudi's simple index does (a join of incoming keys with stored locations).
    """
    stored = []
    for bf in view.latest_base_files(partition):
        keys = pc.unique(
            stored_record_keys(table.storage, bf.path, table.key_generator, table.populate_meta_fields)
        )
        stored.append(pa.table({KEY: keys, "__fid": pa.array([bf.file_id] * len(keys), pa.string())}))
    if not stored or recs.num_rows == 0:
        return {}
    locations = pa.concat_tables(stored)
    incoming = pa.table({KEY: recs.column(KEY), "__pos": pa.array(np.arange(recs.num_rows, dtype=np.int64))})
    joined = incoming.join(locations, keys=KEY, join_type="inner")
    fids = np.asarray(joined.column("__fid").to_numpy(zero_copy_only=False), dtype=object)
    pos = np.asarray(joined.column("__pos").to_numpy(), dtype=np.int64)
    return {str(fid): np.sort(pos[fids == fid]) for fid in sorted(set(fids.tolist()))}


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
    table: HudiTable, p: str, recs: pa.Table, view: FileSystemView, explicit: bool, replace: bool = False
) -> list[FileGroupWrite]:
    """Route records to their bucket's file group (a new one per bucket when ``replace``)."""
    existing: dict[int, str] = {}
    for g in [] if replace else view.file_groups(p):
        b = bucket_of_file_id(g.file_id)
        if b is not None:
            existing[b] = g.file_id
    hash_fields = list(table.bucket_hash_fields)
    buckets = bucket_ids(recs.column(KEY), hash_fields, table.num_buckets).to_numpy()
    out = []
    for b in sorted(set(buckets.tolist())):
        rows = recs.filter(pa.array(buckets == b))
        fid = existing.get(b)
        if fid is None:
            if explicit or not pc.any(pc.invert(rows.column(DELETED))).as_py():
                continue  # nothing to delete in a bucket that has no file group yet
            fid = bucket_file_id_prefix(b) + "-0"
        out.append(FileGroupWrite(p, fid, _latest(view, p, fid), rows, explicit))
    return out


def _new_file_groups(
    table: HudiTable,
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
    if table.index_type is IndexType.BUCKET:
        return _bucket_groups(table, p, recs, view, explicit=False, replace=replace)
    small_files = small_files and not replace
    max_size = WriteConfig.PARQUET_MAX_FILE_SIZE.require(options)
    small_limit = WriteConfig.PARQUET_SMALL_FILE_LIMIT.require(options)
    avg = _avg_record_size(view, WriteConfig.COPY_ON_WRITE_RECORD_SIZE_ESTIMATE.require(options))
    out = []
    offset = 0
    n = recs.num_rows
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
            out.append(FileGroupWrite(p, bf.file_id, bf, recs.slice(offset, take)))
            offset += take
    per_file = max(1, max_size // avg)
    while offset < n:
        take = min(per_file, n - offset)
        out.append(FileGroupWrite(p, new_file_id(), None, recs.slice(offset, take)))
        offset += take
    return out


# ---------------------------------------------------------------------------------- plan (MOR)


@dataclass
class MorFileGroup:
    """A Merge-on-Read file group as a writer sees it: its latest file slice."""

    partition: str
    file_id: str
    base_file: BaseFile | None  # None: a log-only file group (bucket index)
    log_files: list[LogFile] = field(default_factory=list)  # of the latest slice, in log order


def mor_file_groups(
    view: FileSystemView, files: Sequence[FileInfo], include_replaced: bool = False
) -> dict[tuple[str, str], MorFileGroup]:
    """The latest file slice of every file group, log-only file groups included.

    Table version 8 file slicing: a log file (named by its deltacommit's requested time) belongs to
    the slice of the largest base instant at or before the deltacommit's completion time. Only
    files of completed (or archived) instants count.
    """
    completion = {i.time: i.completion_time or i.time for i in view.timeline.completed_writes()}
    out: dict[tuple[str, str], MorFileGroup] = {}
    for fg in view.groups.values():
        out[(fg.partition, fg.file_id)] = MorFileGroup(fg.partition, fg.file_id, fg.latest)
    logs_by_group: dict[tuple[str, str], list[LogFile]] = {}
    for info in files:
        lf = LogFile.parse(info.path, info.size)
        if lf is None or lf.name.endswith(".cdc") or not _committed(view, lf.instant_time):
            continue
        logs_by_group.setdefault((lf.partition, lf.file_id), []).append(lf)
    for key, group_logs in logs_by_group.items():
        g = out.setdefault(key, MorFileGroup(key[0], key[1], None))
        base_instant = g.base_file.instant_time if g.base_file else ""
        g.log_files = sorted(
            (lf for lf in group_logs if completion.get(lf.instant_time, lf.instant_time) >= base_instant),
            key=lambda lf: (lf.instant_time, lf.version, lf.write_token),
        )
    if not include_replaced:
        out = {k: g for k, g in out.items() if k not in view.replaced}
    return out


def _committed(view: FileSystemView, instant_time: str) -> bool:
    if instant_time in view.visible_instants:
        return True
    return view.archive_boundary is not None and instant_time < view.archive_boundary


def _group_keys(table: HudiTable, g: MorFileGroup) -> pa.Array:
    """Record keys in a file slice: its base file's and those of its log files' data and delete blocks."""
    parts: list[pa.Array] = []
    if g.base_file is not None:
        parts.append(
            stored_record_keys(
                table.storage, g.base_file.path, table.key_generator, table.populate_meta_fields
            )
        )
    for lf in g.log_files:
        by_instant = logs.log_record_keys(table.storage.read_bytes(lf.path), f"log file {lf.path}")
        parts.append(pa.array([k for keys in by_instant.values() for k in keys], pa.string()))
    if not parts:
        return pa.array([], pa.string())
    return pc.unique(pa.concat_arrays([p.cast(pa.string()) for p in parts]))


def _locate_mor(
    table: HudiTable, groups: dict[tuple[str, str], MorFileGroup], partition: str, recs: pa.Table
) -> dict[str, np.ndarray]:
    """Simple index of a MOR table: file id -> positions of incoming records whose keys the latest
    file slice holds (in its base file or in its log files)."""
    stored = []
    for (p, fid), g in sorted(groups.items()):
        if p != partition:
            continue
        keys = _group_keys(table, g)
        stored.append(pa.table({KEY: keys, "__fid": pa.array([fid] * len(keys), pa.string())}))
    if not stored or recs.num_rows == 0:
        return {}
    locations = pa.concat_tables(stored)
    incoming = pa.table({KEY: recs.column(KEY), "__pos": pa.array(np.arange(recs.num_rows, dtype=np.int64))})
    joined = incoming.join(locations, keys=KEY, join_type="inner")
    fids = np.asarray(joined.column("__fid").to_numpy(zero_copy_only=False), dtype=object)
    pos = np.asarray(joined.column("__pos").to_numpy(), dtype=np.int64)
    return {str(fid): np.sort(pos[fids == fid]) for fid in sorted(set(fids.tolist()))}


NBCC_MODE = "NON_BLOCKING_CONCURRENCY_CONTROL"


def _mor_bucket_groups(
    table: HudiTable,
    p: str,
    recs: pa.Table,
    groups: dict[tuple[str, str], MorFileGroup],
    explicit: bool,
) -> list[FileGroupWrite]:
    """Bucket index on MOR: every record goes to a log file of its bucket's file group.

    A bucket without a file group gets a new, log-only one (no base file), as Apache Hudi's
    bucket index writes MOR tables; under non-blocking concurrency control its id is the fixed
    ``<bucket>-0000-0000-0000-000000000000-0`` so that concurrent writers agree on it.
    """
    existing: dict[int, MorFileGroup] = {}
    for (gp, _fid), g in groups.items():
        b = bucket_of_file_id(g.file_id) if gp == p else None
        if b is not None:
            existing[b] = g
    nbcc = table.props.get("hoodie.write.concurrency.mode", "").upper() == NBCC_MODE
    buckets = bucket_ids(recs.column(KEY), list(table.bucket_hash_fields), table.num_buckets).to_numpy()
    out = []
    for b in sorted(set(buckets.tolist())):
        rows = recs.filter(pa.array(buckets == b))
        current = existing.get(b)
        if current is not None:
            out.append(
                FileGroupWrite(p, current.file_id, current.base_file, rows, explicit, log=True, tagged=True)
            )
            continue
        rows = rows.filter(pc.invert(rows.column(DELETED)))  # nothing to delete in a new file group
        if explicit or rows.num_rows == 0:
            continue
        fid = nbcc_bucket_file_id(b) if nbcc else bucket_file_id_prefix(b) + "-0"
        out.append(FileGroupWrite(p, fid, None, rows, log=True))
    return out


def plan_mor_write(
    table: HudiTable, batch: PreparedBatch, options: dict[str, str], partitions: Sequence[str] | None
) -> WritePlan:
    """Plan a write into a Merge-on-Read table.

    - upsert / delete (simple index): keys found in a file group's latest slice (base file or log
      files) are appended to that file group as one new log file; inserts go to new base files,
      or to small file groups without log files (rewritten with a new base file);
    - insert / bulk_insert (simple index): new base files (small ones first for insert);
    - bucket index: every record is appended to its bucket's file group (log-only when new);
    - replace operations: new base files, replacing every file group (log-only ones included).
    """
    if not table.populate_meta_fields:
        raise UnsupportedError("Merge-on-Read writes need hoodie.populate.meta.fields=true")
    op = batch.operation
    files = list_data_files(table.storage)
    view = FileSystemView(table.timeline, None, files)
    groups = mor_file_groups(view, files)
    plan = WritePlan()
    by_partition = _split_by_partition(batch.records) if batch.records.num_rows else {}

    if op.is_replace:
        if op is WriteOperation.INSERT_OVERWRITE_TABLE:
            targets = sorted({p for p, _ in groups})
        elif op is WriteOperation.DELETE_PARTITION:
            targets = sorted(set(partitions or []) | set(by_partition))
            if not targets:
                raise InvalidInputError("delete_partition needs partition paths or rows naming partitions")
        else:
            targets = sorted(by_partition)
        plan.replaced = {p: sorted(fid for gp, fid in groups if gp == p) for p in targets}
        if op is WriteOperation.DELETE_PARTITION:
            return plan
        for p, recs in by_partition.items():
            rows = recs.filter(pc.invert(recs.column(DELETED)))
            if rows.num_rows:
                plan.file_groups.extend(_new_file_groups(table, p, rows, view, options, replace=True))
        return plan

    explicit = op is WriteOperation.DELETE
    lookup = op in (WriteOperation.UPSERT, WriteOperation.DELETE)
    with_logs = {fid for (_, fid), g in groups.items() if g.log_files}
    if op is WriteOperation.BULK_INSERT:
        by_partition = {p: _sort_bulk(r, options) for p, r in by_partition.items()}
    for p, recs in by_partition.items():
        if table.index_type is IndexType.BUCKET:
            plan.file_groups.extend(_mor_bucket_groups(table, p, recs, groups, explicit))
            continue
        if lookup:
            located = _locate_mor(table, groups, p, recs)
            found = np.zeros(recs.num_rows, dtype=bool)
            for fid, rows in located.items():
                found[rows] = True
                g = groups[(p, fid)]
                plan.file_groups.append(
                    FileGroupWrite(
                        p, fid, g.base_file, recs.take(pa.array(rows)), explicit, log=True, tagged=True
                    )
                )
            recs = recs.filter(pa.array(~found))
            if explicit:
                continue
        inserts = recs.filter(pc.invert(recs.column(DELETED)))
        if inserts.num_rows:
            plan.file_groups.extend(
                _new_file_groups(
                    table,
                    p,
                    inserts,
                    view,
                    options,
                    small_files=op is not WriteOperation.BULK_INSERT,
                    not_small=with_logs,
                )
            )
    if op in (WriteOperation.INSERT, WriteOperation.BULK_INSERT):
        for w in plan.file_groups:
            w.concat = not w.log
    plan = _merge_same_groups(plan)
    _check_log_deletes(table, plan)
    return plan


def _check_log_deletes(table: HudiTable, plan: WritePlan) -> None:
    """Soft deletes appended to logs need their ordering value under EVENT_TIME_ORDERING.

    A delete block carries each delete's ordering value, and readers compare it with the stored
    record's; Apache Hudi refuses records without an ordering value, and a null one cannot be
    compared, so such input is refused before anything is written.
    """
    ordering = table.ordering_field
    if table.merge_mode is not MergeMode.EVENT_TIME_ORDERING or not ordering:
        return
    for g in plan.file_groups:
        if not g.log or g.explicit_deletes or ordering not in g.records.column_names:
            continue
        deleted = g.records.filter(g.records.column(DELETED))
        if deleted.num_rows and deleted.column(ordering).null_count:
            raise InvalidInputError(
                f"{IS_DELETED_COLUMN} rows need a value in the ordering field {ordering!r} on a "
                "Merge-on-Read table (the delete block records it)"
            )


# ---------------------------------------------------------------------------------- execute


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


def _meta(n: int, value: str) -> pa.Array:
    return pa.array([value] * n, pa.string()) if n else pa.array([], pa.string())


def _meta_columns(ctx: WriteContext, fresh: pa.Table, seq: pa.Array, name: str) -> list[pa.Array]:
    """The five meta columns of newly written records (only the file name without meta fields)."""
    n = fresh.num_rows
    if not ctx.populate_meta_fields:
        return [pa.nulls(n, pa.string())] * 4 + [_meta(n, name)]
    return [_meta(n, ctx.instant_time), seq, fresh.column(KEY), fresh.column(PARTITION), _meta(n, name)]


def write_file_group(
    storage: Storage, ctx: WriteContext, fg: FileGroupWrite, task_id: int, attempt: int = 0
) -> WriteStat:
    """Write the new base file of one file group; returns its write stat.

    Upserts and deletes merge each stored record with the incoming record of its key (the
    merge mode decides; a key stored twice is merged twice, as Apache Hudi's merge handle does).
    Inserts (``fg.concat``) keep every stored record and append the incoming ones.
    """
    started = time.monotonic()
    token = write_token(task_id, 0, attempt)
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
            # unique here: upserts and deletes are deduplicated); a key stored twice is merged twice
            inc_pos = {k: i for i, k in enumerate(incoming.column(KEY).to_pylist())}
            ex_match = np.array(
                [inc_pos.get(k, -1) for k in existing.column(KEY).to_pylist()], dtype=np.int64
            )
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
    seq = pa.array([f"{ctx.instant_time}_{task_id}_{i}" for i in range(n)], pa.string())
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


def write_log_group(
    storage: Storage, ctx: WriteContext, fg: FileGroupWrite, task_id: int, attempt: int = 0
) -> WriteStat:
    """Append one file group's share of a Merge-on-Read write as a new log file; returns its write stat.

    The file (``.<fileId>_<instant>.log.1_<token>``) holds a data block with the upserted records
    (meta columns: this instant, a new sequence number, the key, the partition and the file id) and a
    delete block with the deleted keys, in that order, as Apache Hudi's append handle writes them.
    Deletes of the ``delete`` operation carry Hudi's default ordering value (they win regardless of
    ordering); ``_hoodie_is_deleted`` records under EVENT_TIME_ORDERING carry their ordering value.
    """
    started = time.monotonic()
    token = write_token(task_id, 0, attempt)
    name = log_file_name(fg.file_id, ctx.instant_time, 1, token)
    rel = posixpath.join(fg.partition, name) if fg.partition else name
    schema_json = _avro_with_meta(ctx.avro_schema)
    incoming = fg.records
    deleted = np.asarray(incoming.column(DELETED).to_numpy(zero_copy_only=False), dtype=bool)
    upserts = incoming.filter(pa.array(~deleted))
    removals = incoming.filter(pa.array(deleted))

    blocks: list[bytes] = []
    n = upserts.num_rows
    if n:
        full_schema = pa.schema(list(meta_schema()) + list(ctx.schema))
        seq = pa.array([f"{ctx.instant_time}_{task_id}_{i}" for i in range(n)], pa.string())
        meta = [_meta(n, ctx.instant_time), seq, upserts.column(KEY), upserts.column(PARTITION)]
        records = pa.Table.from_arrays(
            [*meta, _meta(n, fg.file_id)] + [upserts.column(f.name) for f in ctx.schema], schema=full_schema
        )
        blocks.append(
            logs.data_block(records, ctx.instant_time, schema_json, ctx.data_block_format, ctx.compression)
        )
    if removals.num_rows:
        ordering = ctx.ordering_field
        typed = (
            not fg.explicit_deletes
            and ctx.table_merge_mode is MergeMode.EVENT_TIME_ORDERING
            and ordering is not None
            and ordering in removals.column_names
        )
        values = removals.column(ordering).to_pylist() if typed and ordering else [None] * removals.num_rows
        deletes = [
            DeleteRecord(k, p, v)
            for k, p, v in zip(
                removals.column(KEY).to_pylist(), removals.column(PARTITION).to_pylist(), values, strict=True
            )
        ]
        ordering_type = removals.schema.field(ordering).type if typed and ordering else None
        blocks.append(logs.delete_block(deletes, ctx.instant_time, schema_json, ordering_type))

    markers.create_marker(storage, ctx.instant_time, fg.partition, name, "APPEND")
    size = logs.write_log_file(storage, rel, blocks)
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


def write_table(
    table: HudiTable,
    data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch],
    operation: WriteOperation | str,
    options: dict[str, str],
    partitions: Sequence[str] | None,
    extra_metadata: dict[str, str],
) -> CommitResult:
    from inlet.core.table import CommitResult

    op = WriteOperation.parse(operation) if isinstance(operation, str) else operation
    if op in (WriteOperation.COMPACT, WriteOperation.CLUSTER):
        raise InvalidInputError(f"{op.value.lower()} is a table service, not a write operation")
    mor = table.table_type is TableType.MERGE_ON_READ
    if table.version != 8:
        raise UnsupportedError(f"Inlet writes table version 8; this table is version {table.version}")
    if data is None:
        if op is not WriteOperation.DELETE_PARTITION:
            raise InvalidInputError(f"{op.value.lower()} needs input data")
        arrow = pa.table({})
        batch = PreparedBatch(
            op,
            pa.table(
                {
                    KEY: pa.array([], pa.string()),
                    PARTITION: pa.array([], pa.string()),
                    DELETED: pa.array([], pa.bool_()),
                }
            ),
            table.schema() or pa.schema([]),
            "",
        )
        batch.avro_schema = to_avro_schema(batch.schema, table.name) if len(batch.schema) else ""
    else:
        arrow = _as_arrow(data)
        if op is WriteOperation.DELETE_PARTITION:
            kg = table.key_generator
            missing = [c for c in kg.partition_fields if c not in arrow.column_names]
            if missing:
                raise SchemaError(f"delete_partition input lacks partition column(s) {', '.join(missing)}")
            paths = kg.partition_paths(arrow)
            n = arrow.num_rows
            schema = table.schema() or pa.schema([])
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
                to_avro_schema(schema, table.name) if len(schema) else "",
            )
        else:
            batch = prepare(table, arrow, op, options)

    rollback_failed_writes(table)
    plan = plan_write(table, batch, options, partitions)
    action = Action.REPLACE_COMMIT if op.is_replace else Action.DELTA_COMMIT if mor else Action.COMMIT
    requested = b""
    if action == Action.REPLACE_COMMIT:
        requested = avro.encode(
            "HoodieRequestedReplaceMetadata",
            {"operationType": op.value, "clusteringPlan": None, "extraMetadata": None, "version": 1},
        )
    protocol = table.commit_protocol
    instant = protocol.begin(action, requested)
    interval = int(options.get(HEARTBEAT_INTERVAL_KEY, heartbeat.DEFAULT_INTERVAL_MS))
    beat = heartbeat.Heartbeat(table.storage, instant.time, interval).start()
    try:
        faults.crash_point(faults.AFTER_REQUESTED)
        protocol.set_inflight(instant, _planned_metadata(plan, op).to_bytes())
        faults.crash_point(faults.AFTER_INFLIGHT)
        ctx = WriteContext(
            base_uri=table.base_path,
            table_name=table.name,
            instant_time=instant.time,
            schema=batch.schema,
            avro_schema=batch.avro_schema,
            merge_mode=table.merge_mode
            if op is not WriteOperation.DELETE
            else MergeMode.COMMIT_TIME_ORDERING,
            ordering_field=table.ordering_field,
            key_generator=table.key_generator,
            populate_meta_fields=table.populate_meta_fields,
            compression=WriteConfig.PARQUET_COMPRESSION.require(options),
            data_block_format=logs.DATA_BLOCK_FORMAT.require(options),
            table_merge_mode=table.merge_mode,
        )
        for p in sorted({g.partition for g in plan.file_groups}):
            ensure_partition_metadata(table.storage, p, instant.time)
        metadata = CommitMetadata(operation_type=op.value)
        for task_id, fg in enumerate(plan.file_groups):
            write = write_log_group if fg.log else write_file_group
            metadata.add(write(table.storage, ctx, fg, task_id))
        faults.crash_point(faults.AFTER_DATA_FILES)
        if plan.replaced is not None:
            metadata.partition_to_replace_file_ids = plan.replaced
            for p in plan.replaced:
                metadata.partition_to_write_stats.setdefault(p, [])
        metadata.extra_metadata = {**extra_metadata}
        if batch.avro_schema:
            metadata.extra_metadata[SCHEMA_KEY] = batch.avro_schema
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


def _counts(md: CommitMetadata) -> dict[str, int]:
    stats = md.write_stats()
    return {
        "files": len(stats),
        "inserts": sum(s.num_inserts for s in stats),
        "updates": sum(s.num_update_writes for s in stats),
        "deletes": sum(s.num_deletes for s in stats),
    }
