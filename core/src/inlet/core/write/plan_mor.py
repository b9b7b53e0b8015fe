"""Step 2 of a write into a Merge-on-Read table: updates and deletes of a file group go to one new log file of it; inserts go to new base files (simple index) or to the log files of their bucket's file group (bucket index). Soft deletes are checked against the stored ordering values."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from inlet.core.config import (
    IndexType,
    WriteOperation,
)
from inlet.core.errors import UnsupportedError
from inlet.core.index.simple import locate_in_slices
from inlet.core.table.handle import TableHandle
from inlet.core.write.buckets import BucketLayout, bucket_groups
from inlet.core.write.file_groups import FileGroupWrite, WritePlan, without_deletes
from inlet.core.write.plan import (
    _merge_same_groups,
    _new_file_groups,
    _plan_replace,
    _sort_bulk,
    _split_by_partition,
)
from inlet.core.write.prepare import PreparedBatch, check_soft_delete_ordering


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
        slices = view.latest_file_slices(p)
        if layout is not None:
            plan.file_groups.extend(bucket_groups(layout, table.meta, p, recs))
            continue
        if lookup:
            by_id = {s.file_id: s for s in slices}
            found = np.zeros(recs.num_rows, dtype=bool)
            for fid, rows in locate_in_slices(table, view, slices, recs).items():
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
        inserts = without_deletes(recs)
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
