"""Bucket-index routing of a write, one rule for both engines: which file group each (partition
path, bucket) of a write goes to, and how a missing one is named and written.

Apache Hudi's simple bucket index (``HoodieSimpleBucketIndex``, ``BucketIdentifier``): a record's
file group follows from its bucket alone, without a key lookup. A bucket whose file group exists
takes all its records (on Merge-on-Read as an append to a log file of that group: Hudi's tagged
location, so its data records are updates). A bucket without one gets a new file group, which takes
only the live records (nothing to delete there), named ``<bucket, 8 digits><uuid tail>-0``; an
upsert into a Merge-on-Read table starts it log-only, and under non-blocking concurrency control it
takes the fixed id ``<bucket>-0000-0000-0000-000000000000-0`` so concurrent writers agree on it.
Bulk inserts (``BucketBulkInsertDataInternalWriterHelper``) and replace operations write a new
bucket's base file (a random id). Deletes of the delete operation never create a file group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import TableType, WriteOperation
from inlet.core.file_group.view import BaseFile, FileSystemView
from inlet.core.index.bucket import bucket_file_id_prefix, bucket_ids, bucket_of_file_id, nbcc_bucket_file_id
from inlet.core.table.meta import TableMeta
from inlet.core.write.file_groups import FileGroupWrite, latest_base_file, without_deletes
from inlet.core.write.prepare import KEY


@dataclass(frozen=True)
class BucketTarget:
    """Where one bucket's records of a write go."""

    file_id: str
    base_file: BaseFile | None
    log: bool  # appended to a log file (Merge-on-Read)
    tagged: bool  # an existing file group: its data records are updates of it
    new: bool  # a new file group: it takes only the live (non-delete) records


@dataclass(frozen=True)
class BucketLayout:
    """The file groups a bucket-index write finds (from one view of the table), as plain values
    so that Spark executors route their records themselves."""

    existing: Mapping[tuple[str, int], tuple[str, BaseFile | None]]
    mor: bool
    nbcc: bool
    replace: bool
    explicit: bool  # the delete operation: its deletes win regardless of ordering
    bulk: bool = False

    @classmethod
    def of(cls, meta: TableMeta, op: WriteOperation, view: FileSystemView) -> BucketLayout:
        mor = meta.table_type is TableType.MERGE_ON_READ
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
            meta.nbcc,
            op.is_replace,
            op is WriteOperation.DELETE,
            op is WriteOperation.BULK_INSERT,
        )

    def target(self, partition: str, bucket: int, live: int) -> BucketTarget | None:
        """The file group of a bucket's records (``live`` of them not deletes), or None when there
        is nothing to write: deletes only, and no file group to delete from."""
        found = self.existing.get((partition, bucket))
        if found is not None:
            file_id, base = found
            return BucketTarget(file_id, base, log=self.mor, tagged=self.mor, new=False)
        if self.explicit or live == 0:
            return None
        log_only = self.mor and not self.replace and not self.bulk
        file_id = (
            nbcc_bucket_file_id(bucket) if log_only and self.nbcc else bucket_file_id_prefix(bucket) + "-0"
        )
        return BucketTarget(file_id, None, log=log_only, tagged=False, new=True)


def runs(*columns: pa.ChunkedArray | pa.Array) -> list[tuple[int, int]]:
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


def by_bucket(meta: TableMeta, recs: pa.Table) -> list[tuple[int, pa.Table]]:
    """The records of each bucket (buckets ascending, records in their input order)."""
    buckets = np.asarray(
        bucket_ids(recs.column(KEY), list(meta.bucket_hash_fields), meta.num_buckets).to_numpy()
    )
    order = np.argsort(buckets, kind="stable")
    grouped = recs if bool(np.all(np.diff(order) > 0)) else recs.take(pa.array(order))
    ordered = buckets[order]
    return [(int(ordered[s]), grouped.slice(s, e - s)) for s, e in runs(pa.array(ordered))]


def bucket_groups(
    layout: BucketLayout, meta: TableMeta, partition: str, recs: pa.Table
) -> list[FileGroupWrite]:
    """The local engine's file-group writes of one partition's records under ``layout``."""
    out = []
    for bucket, rows in by_bucket(meta, recs):
        live = without_deletes(rows)
        t = layout.target(partition, bucket, live.num_rows)
        if t is not None:
            out.append(
                FileGroupWrite(
                    partition,
                    t.file_id,
                    t.base_file,
                    live if t.new else rows,
                    layout.explicit,
                    log=t.log,
                    tagged=t.tagged,
                )
            )
    return out
