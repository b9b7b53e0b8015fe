"""Merge-on-Read: the records of one file slice, its base file merged with its log files.

Which blocks count (Apache Hudi's ``BaseHoodieLogRecordReader`` / hudi-rs ``LogFileScanner``):

- a data or delete block counts if its instant is committed (see
  :meth:`inlet.core.file_group.view.FileSystemView.is_committed`), is at or before the read's
  as-of instant, and has not been rolled back;
- a rollback command block (instant at or before the as-of instant) rolls back every block of its
  target instant in the slice, wherever it lies;
- a log-compacted block (``COMPACTED_BLOCK_TIMES``) that counts supersedes the blocks of the
  instants it lists.

How records merge is :mod:`inlet.core.merge.records` (the rules) and
:mod:`inlet.core.merge.log_events` (the same rules on whole columns): log blocks in slice order
first, then each base record against the log's result for its key.

Memory bound (one file slice at a time): the current version of every key the slice's counted
log blocks wrote (see :class:`~inlet.core.merge.log_events.MergedLogs`), plus the frames
(headers) of the slice's blocks, plus one log block's raw bytes and one chunk of its decoded
records, plus one base-file batch (``batch_rows`` rows). Base records whose keys the logs never
touch stream through as Arrow batches. So memory grows with the number of keys updated in the
slice's logs, not with the base file or the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core.errors import SchemaError
from inlet.core.file_group.view import FileSlice
from inlet.core.log.blocks import BlockType, HeaderKey
from inlet.core.log.reader import (
    DEFAULT_CHUNK_ROWS,
    BlockFrame,
    ByteSource,
    LogFileScan,
    avro_to_arrow_schema,
    iter_block_batches,
    open_source,
    read_delete_records,
    scan_frames,
)
from inlet.core.merge.log_events import MergedLogs, numpy_bool
from inlet.core.merge.records import RECORD_KEY, Mask, MergeConfig, SliceStats, row_key, rows_table
from inlet.core.schema import IS_DELETED_COLUMN, cast_to
from inlet.core.storage import Storage

DEFAULT_BATCH_ROWS = 65536


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


def _record_events(
    part: pa.Table | list[dict[str, Any]], schema: pa.Schema, config: MergeConfig
) -> tuple[pa.Table, pa.Array, Mask]:
    """One chunk of a data block: its records in the read's schema, their keys and their
    ``_hoodie_is_deleted`` flags (read even when the read does not ask for the column)."""
    if isinstance(part, list):
        table = rows_table(part, schema)
        if _typed(schema, RECORD_KEY, pa.types.is_string) and table.column(RECORD_KEY).null_count == 0:
            keys = table.column(RECORD_KEY).combine_chunks()
        else:
            keys = pa.array([row_key(r, config) for r in part], pa.string())
        if _typed(schema, IS_DELETED_COLUMN, pa.types.is_boolean):
            deleted = numpy_bool(table.column(IS_DELETED_COLUMN))
        else:
            deleted = np.fromiter(
                (r.get(IS_DELETED_COLUMN) is True for r in part), dtype=bool, count=len(part)
            )
        return table, keys, deleted
    table = cast_to(part, schema)
    keys = _log_keys(part, config)
    deleted = np.zeros(part.num_rows, dtype=bool)
    if IS_DELETED_COLUMN in part.column_names and pa.types.is_boolean(part.column(IS_DELETED_COLUMN).type):
        deleted = numpy_bool(part.column(IS_DELETED_COLUMN))
    return table, keys, deleted


def _typed(schema: pa.Schema, name: str, kind: Callable[[pa.DataType], bool]) -> bool:
    return name in schema.names and bool(kind(schema.field(name).type))


def _log_keys(part: pa.Table, config: MergeConfig) -> pa.Array:
    """Record keys of Arrow log records: ``_hoodie_record_key``, or the key fields where it is null."""
    n = part.num_rows
    if RECORD_KEY in part.column_names:
        keys = part.column(RECORD_KEY).combine_chunks()
        if not pa.types.is_string(keys.type):
            keys = keys.cast(pa.string())
        if keys.null_count == 0:
            return keys
        missing = pc.is_null(keys)
    else:
        keys = pa.nulls(n, pa.string())
        missing = pa.array(np.ones(n, dtype=bool))
    if config.key_generator is None:
        raise SchemaError("a log record has no _hoodie_record_key and the table's key fields are unknown")
    generated = config.key_generator.record_keys(part.filter(missing)).combine_chunks().cast(pa.string())
    return pc.replace_with_mask(keys, missing, generated)


def _scan(storage: Storage, log_paths: Sequence[str]) -> list[LogFileScan]:
    scans = []
    for path in log_paths:
        src = open_source(storage, path)
        try:
            scans.append(scan_frames(src, path))
        finally:
            src.close()
    return scans


def _read_logs(
    storage: Storage,
    log_paths: Sequence[str],
    scans: list[LogFileScan],
    config: MergeConfig,
    blocks: BlockFilter,
    schema: pa.Schema,
    chunk_rows: int,
    stats: SliceStats | None,
) -> MergedLogs:
    """Read the counted blocks of a slice (in slice order) into merged log records."""
    merged = MergedLogs(config, schema)
    by_file: dict[int, list[BlockFrame]] = {}
    for i, f in counted_blocks(scans, blocks):
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
                    merged.add_deletes([d.record_key for d in deletes], [d.ordering_value for d in deletes])
                    continue
                for part in iter_block_batches(src, frame, path, chunk_rows):
                    if stats is not None:
                        stats.log_records += part.num_rows if isinstance(part, pa.Table) else len(part)
                    merged.add_records(*_record_events(part, schema, config))
        finally:
            src.close()
    merged.finish()
    if stats is not None:
        stats.log_keys = len(merged)
    return merged


def _block_schema(src: ByteSource, frame: BlockFrame) -> pa.Schema | None:
    """The Arrow schema of a data block's records (its writer schema)."""
    if frame.block_type is BlockType.AVRO_DATA:
        text = frame.header.get(HeaderKey.SCHEMA)
        return avro_to_arrow_schema(text) if text else None
    if frame.block_type is BlockType.PARQUET_DATA:
        data = src.read(frame.content_offset, frame.content_length)
        return pq.read_schema(pa.BufferReader(data))
    return None


def _logs_schema(
    storage: Storage, log_paths: Sequence[str], scans: list[LogFileScan], blocks: BlockFilter
) -> pa.Schema:
    """The columns the counted data blocks of a slice hold (first block's type wins)."""
    fields: dict[str, pa.Field] = {}
    for i, frame in counted_blocks(scans, blocks):
        if not frame.is_data:
            continue
        src = open_source(storage, log_paths[i])
        try:
            found = _block_schema(src, frame)
        finally:
            src.close()
        for f in found or []:
            fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def merge_log_records(
    storage: Storage,
    log_paths: Sequence[str],
    config: MergeConfig,
    blocks: BlockFilter,
    columns: Sequence[str] | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    stats: SliceStats | None = None,
) -> MergedLogs:
    """Scan the logs of a slice (in slice order) into merged log records, one version per key
    (counted into ``stats``); ``columns`` (default: every column the blocks hold) restricts
    the records. Column types come from the blocks' writer schemas."""
    scans = _scan(storage, log_paths)
    found = _logs_schema(storage, log_paths, scans, blocks)
    names = found.names if columns is None else list(dict.fromkeys(columns))
    schema = pa.schema([found.field(c) if c in found.names else pa.field(c, pa.null()) for c in names])
    return _read_logs(storage, log_paths, scans, config, blocks, schema, chunk_rows, stats)


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
    paths = [lf.path for lf in file_slice.log_files]
    merged = _read_logs(
        storage, paths, _scan(storage, paths), config, blocks, schema, DEFAULT_CHUNK_ROWS, stats
    )
    if file_slice.base_file is not None:
        pf = storage.parquet_file(file_slice.base_file.path)
        present = [c for c in schema.names if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=batch_rows, columns=present):
            table = cast_to(pa.Table.from_batches([batch]), schema)
            if stats is not None:
                stats.base_records += table.num_rows
            yield from merged.merge_base(table, stats)
    inserts = merged.remaining()
    if stats is not None:
        stats.inserted += inserts.num_rows
    for start in range(0, inserts.num_rows, batch_rows):
        yield inserts.slice(start, batch_rows)


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
