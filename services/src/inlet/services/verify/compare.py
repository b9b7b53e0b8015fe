"""Comparing a table's rows on two sides by primary key: row hashes, key-range chunks, checksums, diffs.

Each side is reduced to :class:`Hashed`: its key columns and one 64-bit hash per row over every
compared column (keys included). Both sides are hashed from Arrow columns of the same types (the
writer's, see :mod:`inlet.services.writer.rows`), so equal rows hash equally whatever their source.

:func:`compare` orders the keys of both sides together (Arrow's order of the key columns; ties: the
lake row first), cuts the source's keys into ranges of ``chunk_rows`` rows, each chunk covering the
keys after the previous chunk's last source key up to and including its own last one (the last
chunk also every key after it), and sums each side's row hashes and counts rows per chunk. Only chunks whose checksums or counts differ are compared row by row: adjacent equal keys
pair a lake row with a source row; a source key without a lake row is *missing*, a lake key without
a source row *extra*, a pair whose hashes differ *different*, and a key the lake holds twice
*duplicate*.

:func:`compare_multiset` compares tables without a key as multisets of row hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

SEED = 0x1A7E7  # any fixed seed: both sides are hashed in the same process
_SIDE = "__inlet_verify_side"
LAKE, SOURCE = 0, 1


def row_hashes(data: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """One uint64 per row of ``data`` over ``columns`` (in that order; nulls hash as nulls)."""
    if data.num_rows == 0:
        return np.empty(0, dtype=np.uint64)
    frame = pl.from_arrow(data.select(list(columns)), rechunk=False)
    assert isinstance(frame, pl.DataFrame)
    return frame.hash_rows(seed=SEED).to_numpy().astype(np.uint64, copy=False)


@dataclass
class Hashed:
    """Rows of one side: their key columns and a hash of each whole row."""

    keys: pa.Table
    hashes: np.ndarray  # uint64, one per row

    @classmethod
    def of(cls, data: pa.Table, key_columns: Sequence[str], columns: Sequence[str]) -> Hashed:
        return cls(data.select(list(key_columns)), row_hashes(data, columns))

    @classmethod
    def empty(cls, key_schema: pa.Schema) -> Hashed:
        return cls(key_schema.empty_table(), np.empty(0, dtype=np.uint64))

    @classmethod
    def concat(cls, parts: Sequence[Hashed], key_schema: pa.Schema) -> Hashed:
        if not parts:
            return cls.empty(key_schema)
        keys = pa.concat_tables([p.keys.cast(key_schema) for p in parts]).combine_chunks()
        return cls(keys, np.concatenate([p.hashes for p in parts]))

    @property
    def rows(self) -> int:
        return int(self.keys.num_rows)


@dataclass
class Diff:
    """The keys (tables of key columns) in which two sides differ, and how the chunks compared."""

    missing: pa.Table  # in the source, not in the lake
    extra: pa.Table  # in the lake, not in the source
    different: pa.Table  # on both sides with different values
    duplicate: pa.Table  # held more than once by the lake
    chunks: int = 0
    differing_chunks: int = 0
    # (chunk, source rows, lake rows, whether its checksums differ)
    chunk_ranges: list[tuple[int, int, int, bool]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(int(t.num_rows) for t in (self.missing, self.extra, self.different, self.duplicate))

    def __bool__(self) -> bool:
        return self.count > 0

    def keys(self) -> pa.Table:
        """Every differing key once."""
        parts = [self.missing, self.extra, self.different, self.duplicate]
        both = pa.concat_tables(parts).combine_chunks()
        if both.num_rows == 0:
            return both
        hashes = row_hashes(both, both.column_names)
        _, first = np.unique(hashes, return_index=True)
        return both.take(np.sort(first))

    def signature(self) -> tuple[frozenset[int], ...]:
        """The differing keys by kind, as key hashes (to tell whether a recheck changed anything)."""
        return tuple(
            frozenset(row_hashes(t, t.column_names).tolist())
            for t in (self.missing, self.extra, self.different, self.duplicate)
        )


def compare(source: Hashed, lake: Hashed, chunk_rows: int = 100_000) -> Diff:
    """The keys in which ``lake`` differs from ``source`` (see the module doc); keys must be unique
    in ``source``."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    key_names = source.keys.column_names
    schema = source.keys.schema
    empty = schema.empty_table()
    n_lake, n_source = lake.rows, source.rows
    if n_lake + n_source == 0:
        return Diff(empty, empty, empty, empty)
    keys = pa.concat_tables([lake.keys.cast(schema), source.keys]).combine_chunks()
    side = np.concatenate([np.full(n_lake, LAKE, np.int8), np.full(n_source, SOURCE, np.int8)])
    hashes = np.concatenate([lake.hashes, source.hashes]).astype(np.uint64, copy=False)
    sortable = keys.append_column(_SIDE, pa.array(side))
    order = pc.sort_indices(
        sortable, sort_keys=[*((k, "ascending") for k in key_names), (_SIDE, "ascending")]
    ).to_numpy()
    s_side = side[order]
    s_hash = hashes[order]
    source_before = np.cumsum(s_side, dtype=np.int64) - s_side  # source rows before each position
    chunk = source_before // chunk_rows
    starts = np.flatnonzero(np.r_[True, chunk[1:] != chunk[:-1]])
    is_source = s_side == SOURCE
    source_sum = np.add.reduceat(np.where(is_source, s_hash, np.uint64(0)), starts)
    lake_sum = np.add.reduceat(np.where(is_source, np.uint64(0), s_hash), starts)
    source_count = np.add.reduceat(is_source.astype(np.int64), starts)
    lengths = np.diff(np.r_[starts, len(order)])
    lake_count = lengths - source_count
    differing = (source_sum != lake_sum) | (source_count != lake_count)
    chunk_ids = chunk[starts]
    ranges = [
        (int(c), int(s), int(lc), bool(d))
        for c, s, lc, d in zip(chunk_ids, source_count, lake_count, differing, strict=True)
    ]
    diff = Diff(empty, empty, empty, empty, len(starts), int(differing.sum()), ranges)
    if not differing.any():
        return diff
    in_diff = np.repeat(differing, lengths)
    idx = np.flatnonzero(in_diff)
    sub_keys = keys.take(order[idx])
    sd = s_side[idx]
    sh = s_hash[idx]
    same_next = _equal_to_next(sub_keys)  # same_next[i]: key i equals key i + 1
    lake_here = sd[:-1] == LAKE
    pairs = lake_here & (sd[1:] == SOURCE) & same_next  # lake row i pairs with source row i + 1
    dups = lake_here & (sd[1:] == LAKE) & same_next  # lake row i holds the key of lake row i + 1
    paired_lake = np.r_[pairs, False]
    paired_source = np.r_[False, pairs]
    dup_lake = np.r_[dups, False]
    missing = np.flatnonzero((sd == SOURCE) & ~paired_source)
    extra = np.flatnonzero((sd == LAKE) & ~paired_lake & ~dup_lake)
    different = np.flatnonzero(pairs & (sh[:-1] != sh[1:]))
    duplicate = np.flatnonzero(dups & ~np.r_[False, dups[:-1]])  # once per run of copies
    diff.missing = sub_keys.take(missing)
    diff.extra = sub_keys.take(extra)
    diff.different = sub_keys.take(different)
    diff.duplicate = sub_keys.take(duplicate)
    return diff


def _equal_to_next(keys: pa.Table) -> np.ndarray:
    """For each row but the last: whether its key equals the next row's."""
    n = keys.num_rows
    if n < 2:
        return np.zeros(0, dtype=bool)
    same = np.ones(n - 1, dtype=bool)
    for column in keys.columns:
        col = column.combine_chunks()
        eq = pc.fill_null(pc.equal(col.slice(0, n - 1), col.slice(1)), False)
        same &= eq.to_numpy(zero_copy_only=False)
    return same


@dataclass
class MultisetDiff:
    """Rows (indices into each side's rows) one side holds more often than the other."""

    missing: np.ndarray  # source row indices the lake lacks
    extra: np.ndarray  # lake row indices the source lacks

    @property
    def count(self) -> int:
        return len(self.missing) + len(self.extra)


def compare_multiset(source: np.ndarray, lake: np.ndarray) -> MultisetDiff:
    """Compare two sides' row hashes as multisets (tables without a primary key)."""
    return MultisetDiff(_surplus(source, lake), _surplus(lake, source))


def _surplus(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Indices of rows of ``mine`` beyond the copies ``theirs`` has of the same hash."""
    if len(mine) == 0:
        return np.empty(0, dtype=np.int64)
    order = np.argsort(mine, kind="stable")
    ordered = mine[order]
    values, first, counts = np.unique(ordered, return_index=True, return_counts=True)
    t_values, t_counts = np.unique(theirs, return_counts=True)
    pos = np.searchsorted(t_values, values)
    pos_ok = pos < len(t_values)
    found = np.zeros(len(values), dtype=bool)
    found[pos_ok] = t_values[pos[pos_ok]] == values[pos_ok]
    other = np.where(found, t_counts[np.minimum(pos, len(t_values) - 1)] if len(t_values) else 0, 0)
    surplus = np.maximum(counts - other, 0)
    picked = [order[first[i] + other[i] : first[i] + counts[i]] for i in np.flatnonzero(surplus)]
    return np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)
