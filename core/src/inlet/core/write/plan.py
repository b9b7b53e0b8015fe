"""Step 2 of a write, plan (Copy-on-Write, and the parts Merge-on-Read shares): tag records with their file group (simple or bucket index), pack inserts into small file groups first, then new ones; replace operations list the file groups they replace."""

from __future__ import annotations

from collections.abc import Sequence

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
from inlet.core.index.simple import locate_in_base_files
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.instant import Action
from inlet.core.write.buckets import BucketLayout, bucket_groups
from inlet.core.write.file_groups import FileGroupWrite, WritePlan, latest_base_file, without_deletes
from inlet.core.write.prepare import KEY, PARTITION, PreparedBatch


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
    plan = WritePlan()
    by_partition = _split_by_partition(batch.records) if batch.records.num_rows else {}
    if op.is_replace:
        return _plan_replace(table, table.snapshot().view, op, by_partition, options, partitions)
    # only the partitions the batch touches are listed: listing them all grew with the table
    view = table.snapshot().view_of(by_partition)

    explicit = op is WriteOperation.DELETE
    lookup = op in (WriteOperation.UPSERT, WriteOperation.DELETE)
    if op is WriteOperation.BULK_INSERT:
        by_partition = {p: _sort_bulk(r, options) for p, r in by_partition.items()}
    layout = BucketLayout.of(table.meta, op, view) if table.meta.index_type is IndexType.BUCKET else None
    for p, recs in by_partition.items():
        if layout is not None:
            plan.file_groups.extend(bucket_groups(layout, table.meta, p, recs))
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


def _sort_bulk(records: pa.Table, options: dict[str, str]) -> pa.Table:
    mode = WriteConfig.BULK_INSERT_SORT_MODE.get(options)
    if mode in (BulkInsertSortMode.GLOBAL_SORT, BulkInsertSortMode.PARTITION_SORT):
        # within one partition both modes sort by record key; GLOBAL_SORT also orders partitions
        return records.take(
            pc.sort_indices(records, sort_keys=[(PARTITION, "ascending"), (KEY, "ascending")])
        )
    return records


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
        assert replace, "bucket-index writes route by BucketLayout; only replace ones get here"
        layout = BucketLayout.of(table.meta, WriteOperation.INSERT_OVERWRITE, view)
        return bucket_groups(layout, table.meta, p, recs)
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
