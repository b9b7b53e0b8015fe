"""What every table operation works on: the table's meta, its storage and its commit protocol.

Operations (writes, reads, compaction, rollback, clean, change queries) take a
:class:`TableHandle`; :class:`~inlet.core.table.facade.HudiTable` is one, with the operations
composed on it. The handle loads timeline snapshots explicitly (:meth:`TableHandle.snapshot`):
nothing is listed behind a property access, and a writer loads its snapshot after ``begin`` as
optimistic concurrency needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from inlet.core.commit.protocol import CommitProtocol, LocalCommitProtocol
from inlet.core.config import TableConfig
from inlet.core.file_group.view import FileSystemView, list_partition_files
from inlet.core.schema import from_avro_schema
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.table.meta import TableMeta
from inlet.core.timeline.active import Timeline


@dataclass(frozen=True)
class TableSnapshot:
    """One listing of the timeline, and what follows from it as of ``as_of`` (None: the latest)."""

    meta: TableMeta
    timeline: Timeline
    as_of: str | None = None

    @cached_property
    def view(self) -> FileSystemView:
        return FileSystemView(self.timeline, self.as_of)

    def view_of(self, partitions: Iterable[str]) -> FileSystemView:
        """A view listing only ``partitions`` (a write's own): its file groups elsewhere are absent."""
        return FileSystemView(
            self.timeline, self.as_of, list_partition_files(self.timeline.storage, partitions)
        )

    @cached_property
    def avro_schema(self) -> str | None:
        return self.timeline.latest_schema(self.as_of) or TableConfig.CREATE_SCHEMA.get(self.meta.props)

    @cached_property
    def schema(self) -> pa.Schema | None:
        """The data schema (without meta columns), or None before the first write."""
        return from_avro_schema(self.avro_schema) if self.avro_schema else None


class TableHandle:
    """A table's meta, storage and commit protocol (local files unless one is given)."""

    def __init__(
        self, storage: Storage, meta: TableMeta, commit_protocol: CommitProtocol | None = None
    ) -> None:
        self.storage = storage
        self.meta = meta
        self.commit_protocol: CommitProtocol = commit_protocol or LocalCommitProtocol(
            storage, meta.layout_version, meta.timeline_path
        )
        if self.commit_protocol.serialises_commits:
            storage.coordinated = True

    @property
    def base_path(self) -> str:
        return self.storage.base_uri

    def reload_meta(self) -> None:
        """Read ``hoodie.properties`` again (after an action changed it)."""
        self.meta = TableMeta.from_properties(props_io.read_properties(self.storage))

    def load_timeline(self) -> Timeline:
        """A fresh listing of the active timeline."""
        return Timeline.load(self.storage, self.meta.layout_version, self.meta.timeline_path)

    def snapshot(self, as_of: str | None = None, timeline: Timeline | None = None) -> TableSnapshot:
        """The table as of ``as_of`` (None: the latest) on ``timeline`` (default: a fresh listing)."""
        return TableSnapshot(self.meta, timeline or self.load_timeline(), as_of)
