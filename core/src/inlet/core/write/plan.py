"""Step 2 of a write, plan (Copy-on-Write, and the parts Merge-on-Read shares): tag records with their file group (simple or bucket index), pack inserts into small file groups first, then new ones; replace operations list the file groups they replace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import (
    BulkInsertSortMode,
    IndexType,
    WriteConfig,
    WriteOperation,
)
from inlet.core.errors import InvalidInputError
from inlet.core.file_group.view import (
    BaseFile,
    FileSystemView,
    new_file_id,
)
from inlet.core.index.bucket import bucket_file_id_prefix, bucket_ids, bucket_of_file_id
from inlet.core.index.simple import locate_in_base_files
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.instant import Action
from inlet.core.write.prepare import DELETED, KEY, PARTITION, PreparedBatch


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


def plan_cow_write(
    table: TableHandle, batch: PreparedBatch, options: dict[str, str], partitions: Sequence[str] | None
) -> WritePlan:
    """Plan a write into a Copy-on-Write table."""
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
            located = locate_in_base_files(table, view, p, recs)
            found = np.zeros(recs.num_rows, dtype=bool)
            for fid, rows in located.items():
                found[rows] = True
                plan.file_groups.append(
                    FileGroupWrite(
                        p, fid, latest_base_file(view, p, fid), recs.take(pa.array(rows)), explicit
                    )
                )
            recs = recs.filter(pa.array(~found))
            if explicit:
                continue  # deleting keys that do not exist is a no-op
        inserts = without_deletes(recs)
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
        rows = without_deletes(recs)
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


def latest_base_file(view: FileSystemView, partition: str, file_id: str) -> BaseFile | None:
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
        out.append(FileGroupWrite(p, fid, latest_base_file(view, p, fid), rows, explicit))
    return out


def without_deletes(recs: pa.Table) -> pa.Table:
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
