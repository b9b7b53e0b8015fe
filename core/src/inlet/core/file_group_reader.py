"""Merge-on-Read: the records of one file slice, its base file merged with its log files.

Which blocks count (Apache Hudi's ``BaseHoodieLogRecordReader`` / hudi-rs ``LogFileScanner``):

- a data or delete block counts if its instant is committed (see
  :meth:`inlet.core.filegroups.FileSystemView.is_committed`), is at or before the read's as-of
  instant, and has not been rolled back;
- a rollback command block (instant at or before the as-of instant) rolls back every block of its
  target instant in the slice, wherever it lies;
- a log-compacted block (``COMPACTED_BLOCK_TIMES``) that counts supersedes the blocks of the
  instants it lists.

How records merge (Apache Hudi 1.x ``BufferedRecordMergerFactory``), log blocks in slice order
first, then each base record against the log's result for its key:

- ``COMMIT_TIME_ORDERING``: the later write wins, deletes included.
- ``EVENT_TIME_ORDERING``: the record with the larger ordering value wins; on a tie the later
  write (the log over the base, a later block over an earlier one) wins. A null ordering value
  loses to any value.
- Deletes: a delete whose ordering value is Hudi's default (absent, or integer 0 — what the
  ``delete`` operation and SQL ``DELETE`` write) wins over any earlier version, the base file's
  included, and the next write of that key wins over it. (Apache Hudi 1.x compares such a
  re-insert with the base record again, which can resurrect the deleted base record; hudi-rs
  drops the re-insert. Inlet keeps the write order: delete, then the re-insert.) A delete with a real ordering value removes the key unless the
  record it meets has a strictly larger ordering value of the same kind (values of different
  kinds: the delete wins). Records with ``_hoodie_is_deleted = true`` are deletes carrying their
  ordering value.
- Partial updates (Debezium's unchanged TOAST columns): a winning record's string or bytes column
  that holds the placeholder ``__debezium_unavailable_value`` takes the value of the record it
  replaces (Hudi's ``FILL_UNAVAILABLE`` partial-update mode). With nothing to replace (an insert)
  the placeholder stays.

Memory bound (one file slice at a time): the reader keeps one entry per distinct record key
written by the slice's counted log blocks (that key's current winning values, as Python objects,
restricted to the columns the read needs), plus the frames (headers) of the slice's blocks, plus
one log block's raw bytes and one chunk of its decoded records, plus one base-file batch
(``batch_rows`` rows). Base records whose keys the logs never touch stream through as Arrow
batches without entering the state. So memory grows with the number of keys updated in the
slice's logs, not with the base file or the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import MergeMode
from inlet.core.errors import SchemaError
from inlet.core.filegroups import FileSlice
from inlet.core.keys import KeyGenerator
from inlet.core.log_blocks import BlockType
from inlet.core.log_reader import (
    DEFAULT_CHUNK_ROWS,
    BlockFrame,
    LogFileScan,
    is_default_ordering_value,
    iter_block_rows,
    open_source,
    read_delete_records,
    same_ordering_kind,
    scan_frames,
)
from inlet.core.schema import IS_DELETED_COLUMN, cast_to
from inlet.core.storage import Storage

RECORD_KEY = "_hoodie_record_key"
DEBEZIUM_UNAVAILABLE_VALUE = "__debezium_unavailable_value"
DEFAULT_BATCH_ROWS = 65536


@dataclass(frozen=True)
class MergeConfig:
    """How a table merges records (from its properties)."""

    mode: MergeMode
    ordering_field: str | None = None
    unavailable_value: str | None = DEBEZIUM_UNAVAILABLE_VALUE
    key_generator: KeyGenerator | None = None  # recomputes keys when _hoodie_record_key is absent

    @property
    def event_time(self) -> bool:
        return self.mode is MergeMode.EVENT_TIME_ORDERING and self.ordering_field is not None


class _Entry:
    """The current version of one key: a record (``row``) or a delete (``row`` is None).

    ``shadows_base``: an always-winning delete came earlier in the logs, so the base file's
    record of this key is gone whatever the ordering values say.
    """

    __slots__ = ("ordering", "row", "shadows_base")

    def __init__(self, row: dict[str, Any] | None, ordering: Any, shadows_base: bool = False) -> None:
        self.row = row
        self.ordering = ordering
        self.shadows_base = shadows_base

    @property
    def is_delete(self) -> bool:
        return self.row is None

    @property
    def commit_time_delete(self) -> bool:
        """A delete with the default ordering value: it wins regardless of ordering values."""
        return self.row is None and is_default_ordering_value(self.ordering)


def _compare(a: Any, b: Any) -> int:
    """Order of two ordering values: -1, 0, 1 (null first; values of different kinds compare equal,
    so the later write wins)."""
    if a is None or b is None:
        return (a is not None) - (b is not None)
    if not same_ordering_kind(a, b):
        return 0
    try:
        return int(a > b) - int(a < b)
    except TypeError:  # e.g. naive vs aware datetimes
        return 0


def _is_marker(value: Any, marker: str, marker_bytes: bytes) -> bool:
    return (isinstance(value, str) and value == marker) or (
        isinstance(value, bytes) and value == marker_bytes
    )


class RecordMerger:
    """Per-key merge state of one file slice (the memory bound: one entry per key)."""

    def __init__(self, config: MergeConfig) -> None:
        self.config = config
        self.entries: dict[str, _Entry] = {}
        self._marker = config.unavailable_value
        self._marker_bytes = config.unavailable_value.encode() if config.unavailable_value else b""

    # ------------------------------------------------------------------ rules

    def _ordering(self, row: dict[str, Any]) -> Any:
        field = self.config.ordering_field
        return row.get(field) if field is not None else None

    def _newer_wins(self, older: _Entry, newer: _Entry) -> bool:
        """Hudi's ``shouldKeepNewerRecord`` (records and data-borne deletes)."""
        if not self.config.event_time:
            return True
        if older.commit_time_delete or newer.commit_time_delete:
            return True
        return _compare(newer.ordering, older.ordering) >= 0

    def _fill(self, winner: _Entry, loser: _Entry) -> _Entry:
        """Partial update: the winner's placeholder columns take the loser's values."""
        marker = self._marker
        if marker is None or winner.row is None or loser.row is None:
            return winner
        row = winner.row
        stale = [c for c, v in row.items() if _is_marker(v, marker, self._marker_bytes)]
        if not stale:
            return winner
        filled = dict(row)
        for c in stale:
            filled[c] = loser.row.get(c)
        return _Entry(filled, winner.ordering, winner.shadows_base)

    def _pick(self, older: _Entry, newer: _Entry) -> _Entry:
        winner = self._fill(newer, older) if self._newer_wins(older, newer) else self._fill(older, newer)
        if (older.shadows_base or older.commit_time_delete) and not winner.shadows_base:
            winner = _Entry(winner.row, winner.ordering, True)
        return winner

    # ------------------------------------------------------------------ log records

    def add_record(self, key: str, row: dict[str, Any], deleted: bool | None = None) -> None:
        """A log data record; ``_hoodie_is_deleted = true`` (or ``deleted``) makes it a delete
        carrying its ordering value."""
        ordering = self._ordering(row)
        if deleted is None:
            deleted = row.get(IS_DELETED_COLUMN) is True
        newer = _Entry(None if deleted else row, ordering)
        older = self.entries.get(key)
        self.entries[key] = newer if older is None else self._pick(older, newer)

    def add_delete(self, key: str, ordering: Any) -> None:
        """An entry of a delete block (Hudi's ``deltaMergeDeleteRecord``)."""
        older = self.entries.get(key)
        delete = _Entry(None, ordering)
        if older is None or not self.config.event_time:
            self.entries[key] = delete
            return
        if older.commit_time_delete:
            return  # already deleted regardless of ordering
        delete.shadows_base = older.shadows_base
        keep_older = (
            not is_default_ordering_value(ordering)
            and same_ordering_kind(older.ordering, ordering)
            and _compare(older.ordering, ordering) > 0
        )
        if not keep_older:
            self.entries[key] = delete

    # ------------------------------------------------------------------ base records

    def merge_base(self, key: str, row: dict[str, Any]) -> dict[str, Any] | None:
        """The result for a base record whose key the logs touched (None: deleted). The key's
        log entry is consumed, as Hudi's reader does (a duplicate base key gets no log merge)."""
        log_entry = self.entries.pop(key)
        if log_entry.shadows_base or log_entry.commit_time_delete:
            return log_entry.row
        base = _Entry(row, self._ordering(row))
        return self._pick(base, log_entry).row

    def remaining_rows(self) -> Iterator[dict[str, Any]]:
        """Records the logs hold for keys no base record had (inserts), in first-write order."""
        for entry in self.entries.values():
            if entry.row is not None:
                yield entry.row


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class BlockFilter:
    """Which log blocks a read counts (see the module docstring)."""

    is_committed: Callable[[str], bool]
    as_of: str | None = None

    def in_range(self, instant: str) -> bool:
        return self.as_of is None or instant <= self.as_of

    def counts(self, instant: str) -> bool:
        return self.in_range(instant) and self.is_committed(instant)


def counted_blocks(scans: Sequence[LogFileScan], blocks: BlockFilter) -> list[tuple[int, BlockFrame]]:
    """(log index, frame) of every data and delete block that counts, in slice order."""
    rolled_back = {
        f.target_instant_time
        for s in scans
        for f in s.frames
        if f.is_rollback and f.target_instant_time and blocks.in_range(f.instant_time)
    }
    candidates = [
        (i, f)
        for i, s in enumerate(scans)
        for f in s.frames
        if f.block_type is not BlockType.COMMAND
        and f.instant_time not in rolled_back
        and blocks.counts(f.instant_time)
    ]
    superseded = {t for _, f in candidates for t in f.compacted_instants}
    return [(i, f) for i, f in candidates if f.instant_time not in superseded]


def _row_key(row: dict[str, Any], config: MergeConfig) -> str:
    key = row.get(RECORD_KEY)
    if key is not None:
        return str(key)
    kg = config.key_generator
    if kg is None:
        raise SchemaError("a log record has no _hoodie_record_key and the table's key fields are unknown")
    one = pa.Table.from_pylist([{f: row.get(f) for f in kg.record_key_fields}])
    return str(kg.record_keys(one)[0].as_py())


def _table_keys(table: pa.Table, config: MergeConfig) -> pa.Array:
    if RECORD_KEY in table.column_names and table.column(RECORD_KEY).null_count == 0:
        return table.column(RECORD_KEY).combine_chunks().cast(pa.string())
    if config.key_generator is None:
        raise SchemaError("base records have no _hoodie_record_key and the table's key fields are unknown")
    return config.key_generator.record_keys(table).combine_chunks()


def _rows_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise SchemaError(f"log records do not fit the table schema: {e}") from e


@dataclass
class SliceStats:
    """Counts of one merged file slice (compaction reports them in its write stats)."""

    log_blocks: int = 0  # counted data and delete blocks
    log_records: int = 0  # records in them: data records and delete entries
    log_keys: int = 0  # distinct keys those records wrote (Hudi's "merged records in log")
    base_records: int = 0  # records read from the base file
    updated: int = 0  # base records whose key the logs wrote, kept (in the base or the log version)
    deleted: int = 0  # base records removed by a log delete
    inserted: int = 0  # records only the logs hold


def merge_log_records(
    storage: Storage,
    log_paths: Sequence[str],
    config: MergeConfig,
    blocks: BlockFilter,
    columns: Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    stats: SliceStats | None = None,
) -> RecordMerger:
    """Scan the logs of a slice (in slice order) into per-key merge state (counted into ``stats``)."""
    scans = []
    for path in log_paths:
        src = open_source(storage, path)
        try:
            scans.append(scan_frames(src, path))
        finally:
            src.close()
    merger = RecordMerger(config)
    keep = None if columns is None else list(dict.fromkeys(columns))
    counted = counted_blocks(scans, blocks)
    by_file: dict[int, list[BlockFrame]] = {}
    for i, f in counted:
        by_file.setdefault(i, []).append(f)
    for i, path in enumerate(log_paths):
        frames = by_file.get(i)
        if not frames:
            continue
        src = open_source(storage, path)
        try:
            for frame in frames:
                if stats is not None:
                    stats.log_blocks += 1
                if frame.block_type is BlockType.DELETE:
                    deletes = read_delete_records(src, frame, path)
                    if stats is not None:
                        stats.log_records += len(deletes)
                    for d in deletes:
                        merger.add_delete(d.record_key, d.ordering_value)
                    continue
                for rows in iter_block_rows(src, frame, path, chunk_rows):
                    if stats is not None:
                        stats.log_records += len(rows)
                    for row in rows:
                        key = _row_key(row, config)
                        deleted = row.get(IS_DELETED_COLUMN) is True
                        if keep is not None:
                            row = {c: row.get(c) for c in keep}
                        merger.add_record(key, row, deleted)
        finally:
            src.close()
    if stats is not None:
        stats.log_keys = len(merger.entries)
    return merger


def read_file_slice(
    storage: Storage,
    file_slice: FileSlice,
    schema: pa.Schema,
    config: MergeConfig,
    blocks: BlockFilter,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    stats: SliceStats | None = None,
) -> Iterator[pa.Table]:
    """The merged records of ``file_slice`` as tables of ``schema`` (batch by batch).

    ``schema`` lists the columns to produce; it must include whatever the merge needs
    (``_hoodie_record_key`` or the record key fields, the ordering field, ``_hoodie_is_deleted``
    if the table has it) — :func:`merge_columns` adds them. ``stats``, if given, is filled in as
    the slice is read.
    """
    names = schema.names
    merger = merge_log_records(
        storage, [lf.path for lf in file_slice.log_files], config, blocks, names, stats=stats
    )
    if file_slice.base_file is not None:
        pf = storage.parquet_file(file_slice.base_file.path)
        present = [c for c in names if c in pf.schema_arrow.names]
        # keys the logs wrote (a key stays in this set after its entry is consumed: a duplicate
        # base record of it then passes through unmerged, as in Hudi's reader)
        log_keys = pa.array(list(merger.entries), pa.string())
        for batch in pf.iter_batches(batch_size=batch_rows, columns=present):
            table = cast_to(pa.Table.from_batches([batch]), schema)
            if stats is not None:
                stats.base_records += table.num_rows
            if not merger.entries:
                yield table
                continue
            keys = _table_keys(table, config)
            touched = pc.fill_null(pc.is_in(keys, value_set=log_keys), False)
            untouched = table.filter(pc.invert(touched))
            if untouched.num_rows:
                yield untouched
            hit = table.filter(touched)
            if hit.num_rows == 0:
                continue
            hit_keys = keys.filter(touched).to_pylist()
            merged = []
            for key, row in zip(hit_keys, hit.to_pylist(), strict=True):
                if key not in merger.entries:  # a duplicate key in the base file: already merged
                    merged.append(row)
                    continue
                out = merger.merge_base(key, row)
                if out is not None:
                    merged.append(out)
                if stats is not None:
                    stats.updated += out is not None
                    stats.deleted += out is None
            if merged:
                yield _rows_table(merged, schema)
    pending: list[dict[str, Any]] = []
    for row in merger.remaining_rows():
        if stats is not None:
            stats.inserted += 1
        pending.append(row)
        if len(pending) >= batch_rows:
            yield _rows_table(pending, schema)
            pending = []
    if pending:
        yield _rows_table(pending, schema)


def merge_columns(columns: Sequence[str], table_schema: pa.Schema, config: MergeConfig) -> list[str]:
    """``columns`` plus the columns the merge itself reads (deduplicated, in order)."""
    extra = [RECORD_KEY]
    if config.ordering_field:
        extra.append(config.ordering_field)
    if IS_DELETED_COLUMN in table_schema.names:
        extra.append(IS_DELETED_COLUMN)
    if config.key_generator is not None:
        extra.extend(config.key_generator.record_key_fields)
    return [c for c in dict.fromkeys([*columns, *extra]) if c in table_schema.names]


def read_merged(
    storage: Storage,
    file_slice: FileSlice,
    schema: pa.Schema,
    config: MergeConfig,
    blocks: BlockFilter,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> pa.Table:
    """All merged records of ``file_slice`` in one table of ``schema``."""
    parts = list(read_file_slice(storage, file_slice, schema, config, blocks, batch_rows))
    return pa.concat_tables(parts) if parts else schema.empty_table()


__all__ = [
    "DEBEZIUM_UNAVAILABLE_VALUE",
    "BlockFilter",
    "MergeConfig",
    "RecordMerger",
    "SliceStats",
    "counted_blocks",
    "merge_columns",
    "merge_log_records",
    "read_file_slice",
    "read_merged",
]
