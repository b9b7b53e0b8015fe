"""The simple index: find the file group of each record key by reading the keys stored in the latest file slices (base files' record-key column, log files' data and delete blocks; log keys are read once per process, see :class:`LogKeyCache`). Lookups are Arrow hash probes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.file_group.reader import BlockFilter, counted_blocks
from inlet.core.file_group.view import (
    FileSlice,
    FileSystemView,
    LogFile,
)
from inlet.core.keys import KeyGenerator
from inlet.core.log.blocks import BlockType
from inlet.core.log.reader import (
    BytesSource,
    LogFileScan,
    iter_block_batches,
    open_source,
    read_delete_records,
    scan_frames,
)
from inlet.core.merge.dedupe import KEY
from inlet.core.storage import Storage
from inlet.core.table.handle import TableHandle


def stored_record_keys(storage: Storage, path: str, kg: KeyGenerator, populate_meta_fields: bool) -> pa.Array:
    """Record keys of a base file: its ``_hoodie_record_key`` column, or (tables written with
    ``hoodie.populate.meta.fields=false``, where that column is null) recomputed from the data."""
    if populate_meta_fields:
        return storage.read_parquet(path, columns=[KEY]).column(KEY).combine_chunks()
    data = storage.read_parquet(path, columns=list(kg.record_key_fields))
    return kg.record_keys(data).combine_chunks()


def locate_in_base_files(
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
    encoded = pc.dictionary_encode(one_array(incoming).cast(pa.large_string()))
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


def one_array(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


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
        keys = {f.offset: one_array(k).cast(pa.string()) for f, k in zip(frames, block_keys, strict=True)}
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
                        parts.append(one_array(part.column(KEY)).cast(pa.string()))
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


def locate_in_slices(
    table: TableHandle, view: FileSystemView, slices: Sequence[FileSlice], recs: pa.Table
) -> dict[str, np.ndarray]:
    """Simple index of a MOR table: file id -> positions of incoming records whose keys the latest
    file slice holds (in its base file or in its log files)."""
    if recs.num_rows == 0:
        return {}
    stored = ((s.file_id, slice_record_keys(table, view, s)) for s in slices)
    return locate_keys(recs.column(KEY), stored)
