"""What a write plan is made of: one :class:`FileGroupWrite` per file group a write touches, and
the :class:`WritePlan` that lists them (and, for replace operations, the file groups replaced)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.file_group.view import BaseFile, FileSystemView
from inlet.core.write.prepare import DELETED


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


def latest_base_file(view: FileSystemView, partition: str, file_id: str) -> BaseFile | None:
    g = view.groups.get((partition, file_id))
    return g.latest if g else None


def without_deletes(recs: pa.Table) -> pa.Table:
    """The records not flagged as deletes (the table itself, uncopied, when none is)."""
    flags = recs.column(DELETED)
    return recs.filter(pc.invert(flags)) if pc.any(flags).as_py() else recs
