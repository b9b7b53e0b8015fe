"""The vectorised Merge-on-Read merge against a reference model of Hudi's merge rules.

Random file slices (a Parquet base file, Avro and Parquet data blocks, delete blocks) are read by
:func:`inlet.core.file_group.reader.read_file_slice` and compared with two oracles:

- a reference model written here: per key, the writes folded one at a time with dicts, from the
  rules in :mod:`inlet.core.file_group.reader`'s docstring;
- the record-by-record :class:`~inlet.core.merge.records.RecordMerger` (the pre-vectorised
  implementation, kept for the keys the vectorised path hands it), fed the same writes.

The generated histories cover upserts, ``_hoodie_is_deleted`` records, delete blocks with default
(absent / 0), real and foreign-kind ordering values, ties, null ordering values, NaN, partial
updates (the Debezium placeholder), both merge modes, and reductions in small steps (so merge
state is carried between reductions).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inlet.core.config import MergeMode
from inlet.core.file_group.reader import BlockFilter, merge_log_records, read_file_slice
from inlet.core.file_group.view import BaseFile, FileSlice, LogFile
from inlet.core.log.blocks import DeleteRecord
from inlet.core.log.writer import DataBlockFormat, data_block, delete_block, write_log_file
from inlet.core.merge import log_events
from inlet.core.merge.records import MergeConfig, RecordMerger, SliceStats
from inlet.core.storage import Storage

MARKER = "__debezium_unavailable_value"
FILE_ID = "f1-0"
META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path")
EVENT, COMMIT = MergeMode.EVENT_TIME_ORDERING, MergeMode.COMMIT_TIME_ORDERING
KEYS = [f"k{i}" for i in range(3)]


def arrow_schema(ordering: pa.DataType) -> pa.Schema:
    return pa.schema(
        [pa.field(c, pa.string()) for c in (*META, "_hoodie_file_name")]
        + [
            pa.field("id", pa.string()),
            pa.field("ts", ordering),
            pa.field("name", pa.string()),
            pa.field("payload", pa.binary()),
            pa.field("_hoodie_is_deleted", pa.bool_()),
        ]
    )


def avro_schema(ordering: pa.DataType) -> str:
    ts = "long" if pa.types.is_integer(ordering) else "double"
    fields: list[dict[str, Any]] = [
        {"name": c, "type": ["null", "string"], "default": None} for c in (*META, "_hoodie_file_name")
    ]
    fields += [
        {"name": "id", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": ["null", ts], "default": None},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "payload", "type": ["null", "bytes"], "default": None},
        {"name": "_hoodie_is_deleted", "type": ["null", "boolean"], "default": None},
    ]
    return json.dumps({"type": "record", "name": "t_record", "namespace": "hoodie.t", "fields": fields})


# ------------------------------------------------------------------------ histories


@dataclass(frozen=True)
class Write:
    """One log write: a record (``flagged``: ``_hoodie_is_deleted``) or a delete-block entry."""

    key: str
    ts: Any
    name: str | None = None
    payload: bytes | None = None
    flagged: bool = False
    entry: bool = False  # a delete-block entry


@dataclass(frozen=True)
class Block:
    writes: tuple[Write, ...]
    parquet: bool = False

    @property
    def deletes(self) -> bool:
        return self.writes[0].entry


def _ts(floats: bool) -> st.SearchStrategy[Any]:
    if floats:
        return st.one_of(st.none(), st.sampled_from([0.0, 1.0, 1.5, 2.0, 3.0, math.nan]))
    return st.one_of(st.none(), st.integers(0, 3))


def _entry_ts(floats: bool) -> st.SearchStrategy[Any]:
    # default (None, integer 0), real values, a value of another kind, a number the column cannot hold
    odd = [1.5, "zz"] if not floats else [2, "zz", math.nan]
    return st.one_of(st.none(), st.just(0), _ts(floats), st.sampled_from(odd))


def _record(floats: bool) -> st.SearchStrategy[Write]:
    return st.builds(
        Write,
        key=st.sampled_from(KEYS),
        ts=_ts(floats),
        name=st.sampled_from(["a", "b", "c", MARKER, None]),
        payload=st.sampled_from([b"x", b"y", MARKER.encode(), None]),
        flagged=st.sampled_from([False, False, False, True]),
    )


def _block(floats: bool, markers: bool) -> st.SearchStrategy[Block]:
    record = _record(floats)
    if not markers:
        record = record.map(
            lambda w: Write(w.key, w.ts, "n" if w.name == MARKER else w.name, b"p", w.flagged)
        )
    data = st.builds(Block, st.lists(record, min_size=1, max_size=6).map(tuple), st.booleans())
    entry = st.builds(Write, key=st.sampled_from(KEYS), ts=_entry_ts(floats), entry=st.just(True))
    deletes = st.builds(Block, st.lists(entry, min_size=1, max_size=4).map(tuple))
    return st.one_of(data, data, deletes)


@st.composite
def histories(draw: st.DrawFn) -> dict[str, Any]:
    floats = draw(st.booleans())
    markers = draw(st.booleans())
    base_keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=len(KEYS)))
    base = [
        Write(
            k, draw(_ts(floats)), draw(st.sampled_from(["base", MARKER])), draw(st.sampled_from([b"b", None]))
        )
        for k in base_keys
    ]
    return {
        "mode": draw(st.sampled_from([EVENT, COMMIT])),
        "floats": floats,
        "base": base,
        "blocks": draw(st.lists(_block(floats, markers), max_size=6)),
        "split": draw(st.integers(0, 6)),  # blocks before this index go to the first log file
        "reduce_rows": draw(st.sampled_from([1, 3, 1 << 18])),
        "as_of": draw(st.one_of(st.none(), st.integers(1, 6))),
    }


# ------------------------------------------------------------------------ the reference model


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    return "number" if isinstance(v, int | float) else type(v).__name__


def order(a: Any, b: Any) -> int:
    """-1/0/1: a null is smaller than any value; values of different kinds (and NaN) tie."""
    if a is None or b is None:
        return 0 if a is b else (-1 if a is None else 1)
    if _kind(a) != _kind(b):
        return 0
    return int(a > b) - int(a < b)


def default(v: Any) -> bool:
    return v is None or (type(v) is int and v == 0)


@dataclass
class Version:
    """A key's version: a record (``cols``) or a delete (``cols`` None)."""

    cols: dict[str, Any] | None
    ts: Any
    hides_base: bool = False  # an always-winning delete came before: the base record is gone

    @property
    def hard_delete(self) -> bool:
        return self.cols is None and default(self.ts)


def patched(
    winner: dict[str, Any] | None, loser: dict[str, Any] | None, marker: bool
) -> dict[str, Any] | None:
    """Partial update: the winner's placeholders take the loser's values."""
    if winner is None or loser is None or not marker:
        return winner
    placeholder = {"name": MARKER, "payload": MARKER.encode()}
    return {c: (loser[c] if c in placeholder and placeholder[c] == v else v) for c, v in winner.items()}


def model(h: dict[str, Any], blocks: list[Block], marker: bool = True) -> dict[str, dict[str, Any]]:
    """Key -> merged record, folding each key's writes in order, then meeting the base record."""
    event = h["mode"] is EVENT
    log: dict[str, Version] = {}
    for block in blocks:
        for w in block.writes:
            cols = None if (w.flagged or w.entry) else {"ts": w.ts, "name": w.name, "payload": w.payload}
            now, before = Version(cols, w.ts), log.get(w.key)
            if before is None:
                log[w.key] = now
            elif w.entry:
                if not event:
                    log[w.key] = now
                elif not before.hard_delete and (default(w.ts) or order(before.ts, w.ts) <= 0):
                    log[w.key] = Version(None, w.ts, before.hides_base)
            else:
                newer = not event or before.hard_delete or now.hard_delete or order(now.ts, before.ts) >= 0
                win, lose = (now, before) if newer else (before, now)
                log[w.key] = Version(
                    patched(win.cols, lose.cols, marker), win.ts, before.hides_base or before.hard_delete
                )
    out: dict[str, dict[str, Any]] = {}
    for b in h["base"]:
        cols = {"ts": b.ts, "name": b.name, "payload": b.payload}
        v = log.pop(b.key, None)
        if v is None:
            out[b.key] = cols
            continue
        if v.hides_base or v.hard_delete:
            result = v.cols
        elif not event or order(v.ts, b.ts) >= 0:
            result = patched(v.cols, cols, marker)
        else:
            result = patched(cols, v.cols, marker)
        if result is not None:
            out[b.key] = result
    out.update({k: v.cols for k, v in log.items() if v.cols is not None})
    return out


def record_merger(h: dict[str, Any], blocks: list[Block], config: MergeConfig) -> dict[str, dict[str, Any]]:
    """The same writes through the record-by-record merger."""
    m = RecordMerger(config)
    for block in blocks:
        for w in block.writes:
            if w.entry:
                m.add_delete(w.key, w.ts)
            else:
                m.add_record(w.key, {"ts": w.ts, "name": w.name, "payload": w.payload}, w.flagged)
    out: dict[str, dict[str, Any]] = {}
    for b in h["base"]:
        row = {"ts": b.ts, "name": b.name, "payload": b.payload}
        merged = m.merge_base(b.key, row) if b.key in m.entries else row
        if merged is not None:
            out[b.key] = merged
    out.update({k: dict(r) for k, r in ((k, e.row) for k, e in m.entries.items()) if r is not None})
    return out


# ------------------------------------------------------------------------ files


def instant(i: int) -> str:
    return f"2024010100000{i:04d}"


def _row(w: Write, t: str, seq: int) -> dict[str, Any]:
    return {
        "_hoodie_commit_time": t,
        "_hoodie_commit_seqno": f"{t}_0_{seq}",
        "_hoodie_record_key": w.key,
        "_hoodie_partition_path": "",
        "_hoodie_file_name": FILE_ID,
        "id": w.key,
        "ts": w.ts,
        "name": w.name,
        "payload": w.payload,
        "_hoodie_is_deleted": True if w.flagged else None,
    }


def write_slice(root: str, h: dict[str, Any]) -> tuple[Storage, FileSlice, pa.Schema]:
    storage = Storage(root)
    typ = pa.float64() if h["floats"] else pa.int64()
    schema = arrow_schema(typ)
    avro = avro_schema(typ)
    base = None
    if h["base"]:
        name = f"{FILE_ID}_0-0-0_{instant(0)}.parquet"
        rows = [_row(w, instant(0), i) for i, w in enumerate(h["base"])]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), storage.full(name))
        base = BaseFile.parse(name)
    encoded = []
    for i, block in enumerate(h["blocks"], start=1):
        t = instant(i)
        if block.deletes:
            encoded.append(delete_block([DeleteRecord(w.key, "", w.ts) for w in block.writes], t))
        else:
            records = pa.Table.from_pylist([_row(w, t, j) for j, w in enumerate(block.writes)], schema=schema)
            fmt = DataBlockFormat.PARQUET if block.parquet else DataBlockFormat.AVRO
            encoded.append(data_block(records, t, avro, fmt))
    logs = []
    cut = min(h["split"], len(encoded))
    for version, part in enumerate((encoded[:cut], encoded[cut:]), start=1):
        if part:
            name = f".{FILE_ID}_{instant(0)}.log.{version}_0-0-0"
            write_log_file(storage, name, part)
            lf = LogFile.parse(name)
            assert lf is not None
            logs.append(lf)
    return storage, FileSlice("", FILE_ID, instant(0), base, logs), schema


@pytest.fixture
def reduce_rows() -> Iterator[None]:
    saved = log_events.REDUCE_ROWS
    yield
    log_events.REDUCE_ROWS = saved


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _assert_same(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]], what: str) -> None:
    assert sorted(got) == sorted(want), what
    for k, row in want.items():
        assert all(_same(got[k][c], v) for c, v in row.items()), (what, k, got[k], row)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=histories())
def test_merge_matches_the_reference_model(h: dict[str, Any], reduce_rows: None) -> None:
    log_events.REDUCE_ROWS = h["reduce_rows"]
    with tempfile.TemporaryDirectory() as root:
        storage, file_slice, schema = write_slice(root, h)
        config = MergeConfig(h["mode"], "ts", MARKER)
        as_of = None if h["as_of"] is None else instant(h["as_of"])
        stats = SliceStats()
        got = pa.concat_tables(
            [
                schema.empty_table(),
                *read_file_slice(
                    storage, file_slice, schema, config, BlockFilter(lambda t: True, as_of), stats=stats
                ),
            ]
        ).to_pylist()
    counted = h["blocks"][: h["as_of"]] if h["as_of"] is not None else h["blocks"]
    merged = {r["id"]: {"ts": r["ts"], "name": r["name"], "payload": r["payload"]} for r in got}
    assert len(merged) == len(got), "one record per key"
    want = model(h, counted)
    _assert_same(merged, want, "reference model")
    _assert_same(merged, record_merger(h, counted, config), "RecordMerger")
    # the counts compaction reports
    base_keys = {b.key for b in h["base"]}
    log_keys = {w.key for b in counted for w in b.writes}
    assert stats.base_records == len(h["base"])
    assert stats.log_blocks == len(counted)
    assert stats.log_records == sum(len(b.writes) for b in counted)
    assert stats.log_keys == len(log_keys)
    assert stats.updated == len(base_keys & log_keys & set(want))
    assert stats.deleted == len((base_keys & log_keys) - set(want))
    assert stats.inserted == len(set(want) - base_keys)


@settings(max_examples=60, deadline=None)
@given(h=histories())
def test_without_a_placeholder_marker_the_value_is_data(h: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as root:
        storage, file_slice, schema = write_slice(root, h)
        config = MergeConfig(h["mode"], "ts", None)
        got = pa.concat_tables(
            [
                schema.empty_table(),
                *read_file_slice(storage, file_slice, schema, config, BlockFilter(lambda t: True)),
            ]
        ).to_pylist()
    merged = {r["id"]: {"ts": r["ts"], "name": r["name"], "payload": r["payload"]} for r in got}
    _assert_same(merged, model(h, h["blocks"], marker=False), "reference model without markers")


def test_common_histories_never_take_the_row_by_row_path(tmp_path: Any) -> None:
    """Upserts, deletes and ``_hoodie_is_deleted`` records with comparable ordering values are
    merged without :class:`RecordMerger`; a placeholder sends only its own key there."""
    h = {
        "mode": EVENT,
        "floats": False,
        "base": [Write(f"k{i}", 1, "base", b"b") for i in range(6)],
        "blocks": [
            Block(
                (
                    Write("k0", 2, "u"),
                    Write("k1", 0, "old"),
                    Write("k6", 1, "new"),
                    Write("k2", 5, flagged=True),
                )
            ),
            Block(
                (Write("k3", 0, entry=True), Write("k4", 9, entry=True), Write("k5", None, entry=True)), False
            ),
            Block((Write("k3", 1, "back"), Write("k0", 3, "u2")), parquet=True),
            Block((Write("k1", 4, MARKER),)),
        ],
        "split": 2,
    }
    storage, file_slice, _ = write_slice(str(tmp_path), h)
    merged = merge_log_records(
        storage,
        [lf.path for lf in file_slice.log_files],
        MergeConfig(EVENT, "ts", MARKER),
        BlockFilter(lambda t: True),
    )
    assert sorted(merged.entries) == ["k0", "k1", "k2", "k3", "k4", "k5", "k6"]
    assert list(merged.slow.entries) == ["k1"]  # only the key with the placeholder
    entries = merged.entries
    assert entries["k0"].row is not None and entries["k0"].row["name"] == "u2"
    assert entries["k3"].row is not None and entries["k3"].shadows_base  # re-insert after a default delete
    assert entries["k4"].is_delete and not entries["k4"].shadows_base
    assert entries["k5"].commit_time_delete


def test_default_deletes_on_a_non_integer_ordering_column_stay_vectorised(tmp_path: Any) -> None:
    """The ``delete`` operation's default ordering value (the integer 0) against a double ordering
    column is not a value to compare: those keys stay on the vectorised path and are deleted."""
    h = {
        "mode": EVENT,
        "floats": True,
        "base": [Write(f"k{i}", 5.0, "base", b"b") for i in range(4)],
        "blocks": [
            Block((Write("k0", 0, entry=True), Write("k1", None, entry=True), Write("k2", 9.5, entry=True))),
            Block((Write("k0", 1.0, "back"), Write("k4", 2.0, "new"))),
        ],
        "split": 1,
    }
    storage, file_slice, schema = write_slice(str(tmp_path), h)
    config = MergeConfig(EVENT, "ts", MARKER)
    merged = merge_log_records(
        storage, [lf.path for lf in file_slice.log_files], config, BlockFilter(lambda t: True)
    )
    assert list(merged.slow.entries) == []
    got = pa.concat_tables(
        list(read_file_slice(storage, file_slice, schema, config, BlockFilter(lambda t: True)))
    )
    assert sorted((r["id"], r["name"], r["ts"]) for r in got.to_pylist()) == [
        ("k0", "back", 1.0),  # re-inserted after a default delete: the base record stays gone
        ("k3", "base", 5.0),
        ("k4", "new", 2.0),
    ]
