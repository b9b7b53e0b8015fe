"""``inlet.services.verify.compare`` on Arrow tables: row hashes, key-range chunks, diffs, multisets."""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pytest

from inlet.services.verify.compare import Hashed, compare, compare_multiset, row_hashes


def _table(ids: list[int], names: list[str | None], extra: list[int] | None = None) -> pa.Table:
    cols = {"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string())}
    if extra is not None:
        cols["k2"] = pa.array(extra, pa.int32())
    return pa.table(cols)


def _hashed(t: pa.Table, keys: tuple[str, ...] = ("id",)) -> Hashed:
    return Hashed.of(t, list(keys), t.column_names)


def _ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


def test_row_hashes_are_values_not_layouts() -> None:
    t = pa.table(
        {
            "a": pa.array([1, None, 3], pa.int32()),
            "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("0")], pa.decimal128(12, 2)),
            "l": pa.array([[1, None], [], None], pa.list_(pa.int64())),
            "s": pa.array(["x", "", None], pa.string()),
        }
    )
    h = row_hashes(t, t.column_names)
    assert len(set(h.tolist())) == 3
    # slices, chunked arrays and large strings hash as the same values
    chunked = pa.concat_tables([t.slice(0, 1), t.slice(1)])
    assert row_hashes(chunked, t.column_names).tolist() == h.tolist()
    assert row_hashes(t.slice(1), t.column_names).tolist() == h[1:].tolist()
    large = t.set_column(3, "s", t.column("s").cast(pa.large_string()))
    assert row_hashes(large, t.column_names).tolist() == h.tolist()
    # null is not empty, not zero; column order matters
    assert (
        row_hashes(pa.table({"s": ["", None]}), ["s"])[0] != row_hashes(pa.table({"s": ["", None]}), ["s"])[1]
    )
    swapped = pa.table({"x": [1], "y": [2]})
    assert row_hashes(swapped, ["x", "y"]) != row_hashes(swapped, ["y", "x"])


def test_equal_tables_compare_chunk_by_chunk_without_differences() -> None:
    n = 1000
    source = _table(list(range(n)), [f"n{i}" for i in range(n)])
    rng = np.random.default_rng(3)
    lake = source.take(rng.permutation(n))  # another order, another chunking
    diff = compare(_hashed(source), _hashed(lake), chunk_rows=64)
    assert not diff and diff.count == 0
    assert diff.chunks == 16 and diff.differing_chunks == 0
    assert sum(c[1] for c in diff.chunk_ranges) == n and sum(c[2] for c in diff.chunk_ranges) == n


def test_differences_are_named_by_kind_and_only_their_chunks_differ() -> None:
    n = 1000
    source = _table(list(range(0, 2 * n, 2)), [f"n{i}" for i in range(n)])  # even ids 0..1998
    lake_rows = {i: f"n{i // 2}" for i in range(0, 2 * n, 2)}
    del (
        lake_rows[0],
        lake_rows[126],
        lake_rows[128],
    )  # missing: first key, a chunk's last key (chunk 0 ends at 126)
    lake_rows[128 + 1] = "odd"  # extra between two source keys
    lake_rows[5000] = "beyond"  # extra after the last source key
    lake_rows[-4] = "before"  # extra before the first one
    lake_rows[500] = "changed"  # different
    lake_rows[1998] = None  # different: null
    ids = sorted(lake_rows)
    lake = _table(ids, [lake_rows[i] for i in ids])
    diff = compare(_hashed(source), _hashed(lake), chunk_rows=64)
    assert _ids(diff.missing) == [0, 126, 128]
    assert _ids(diff.extra) == [-4, 129, 5000]
    assert _ids(diff.different) == [500, 1998]
    assert diff.duplicate.num_rows == 0
    # 64 source keys a chunk (the last one: 40, and the keys past the last source key)
    assert diff.chunks == 16
    differing = sorted(c[0] for c in diff.chunk_ranges if c[3])
    assert differing == [0, 1, 3, 15]  # -4, 0 and 126 in chunk 0, 128/129 in 1, 500 in 3, 1998/5000 in 15
    assert diff.chunk_ranges[15] == (15, 40, 41, True)
    assert _ids(diff.keys()) == [-4, 0, 126, 128, 129, 500, 1998, 5000]


def test_a_key_the_lake_holds_twice_is_a_duplicate_and_composite_keys_work() -> None:
    source = _table([1, 1, 2, 2], ["a", "b", "c", "d"], extra=[1, 2, 1, 2])
    lake = _table([1, 1, 1, 2, 2], ["a", "b", "b", "c", "x"], extra=[1, 2, 2, 1, 2])
    diff = compare(_hashed(source, ("id", "k2")), _hashed(lake, ("id", "k2")), chunk_rows=2)
    assert diff.duplicate.to_pylist() == [{"id": 1, "k2": 2}]
    assert diff.different.to_pylist() == [{"id": 2, "k2": 2}]
    assert diff.missing.num_rows == 0 and diff.extra.num_rows == 0
    only_lake = _table([7, 7], ["z", "z"])
    diff = compare(_hashed(_table([], [])), _hashed(only_lake), chunk_rows=10)
    assert _ids(diff.extra) == [7] and _ids(diff.duplicate) == [7]


def test_empty_sides() -> None:
    empty = _hashed(_table([], []))
    assert not compare(empty, empty)
    diff = compare(_hashed(_table([1, 2], ["a", "b"])), empty, chunk_rows=1)
    assert _ids(diff.missing) == [1, 2] and diff.chunks == 2 and diff.differing_chunks == 2
    with pytest.raises(ValueError):
        compare(empty, empty, chunk_rows=0)


def test_multisets() -> None:
    source = np.array([5, 5, 5, 7, 9], dtype=np.uint64)
    lake = np.array([5, 7, 7, 11, 9], dtype=np.uint64)
    found = compare_multiset(source, lake)
    assert sorted(source[found.missing].tolist()) == [5, 5]
    assert sorted(lake[found.extra].tolist()) == [7, 11]
    assert compare_multiset(source, source.copy()).count == 0
    assert compare_multiset(source, np.empty(0, np.uint64)).count == 5
