"""Min-delta and append-only change queries equal what a model derives from the table's states
(random writes, deletes, compactions, failed writes rolled back and clusterings; COW and MOR;
simple and bucket): min-delta from the states at the window's two ends, append-only from the state
after each commit of the window (every insertion, with the values it was inserted with)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.interruptions import interrupt

from inlet.core import HudiTable
from inlet.core.errors import InvalidInputError

SHAPES = [
    ("COPY_ON_WRITE", "simple"),
    ("MERGE_ON_READ", "simple"),
    ("MERGE_ON_READ", "bucket"),
]


def _story(
    path: str, table_type: str, index: str, seed: int
) -> tuple[HudiTable, list[tuple[str, dict[int, dict[str, Any]]]]]:
    """Random commits; after each write, (its completion time, the model's state)."""
    rng = random.Random(seed)
    t = HudiTable.create(
        path,
        "t",
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        index=index,
        buckets=2,
    )
    state: dict[int, dict[str, Any]] = {}
    states: list[tuple[str, dict[int, dict[str, Any]]]] = []
    for step in range(1, 13):
        if rng.random() < 0.25 and state:
            gone = rng.sample(sorted(state), k=min(len(state), rng.randint(1, 3)))
            r = t.delete(
                pa.table({"id": pa.array(gone, pa.int64()), "part": [state[i]["part"] for i in gone]})
            )
            for i in gone:
                del state[i]
        else:
            ids = rng.sample(range(20), k=rng.randint(1, 5))
            # some updates write the value the key already has: no net change for min-delta
            vals = [state[i]["v"] if i in state and rng.random() < 0.3 else rng.randint(0, 3) for i in ids]
            rows = [
                {"id": i, "part": f"p{i % 3}", "ts": step, "v": v} for i, v in zip(ids, vals, strict=True)
            ]
            r = t.write(pa.Table.from_pylist(rows, schema=_SCHEMA), "upsert")
            for row in rows:
                state[row["id"]] = {"part": row["part"], "v": row["v"], "ts": row["ts"]}
        states.append((r.completion_time, {k: dict(v) for k, v in state.items()}))
        if table_type == "MERGE_ON_READ" and rng.random() < 0.3:
            t.compact({"hoodie.compact.inline.max.delta.commits": "1"})
        junk = [{"id": i, "part": f"p{i % 3}", "ts": 99, "v": 9} for i in rng.sample(range(20), 3)]
        interrupt(t, rng, pa.Table.from_pylist(junk, schema=_SCHEMA), clustering=index == "simple")
    return t, states


_SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])


def _expected(
    before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]
) -> dict[str, tuple[str, Any, Any]]:
    out = {}
    for k in before.keys() | after.keys():
        b, a = before.get(k), after.get(k)
        b_img = {"id": k, **b} if b is not None else None
        a_img = {"id": k, **a} if a is not None else None
        if b is None:
            out[str(k)] = ("i", None, a_img)
        elif a is None:
            out[str(k)] = ("d", b_img, None)
        elif b_img != a_img:
            out[str(k)] = ("u", b_img, a_img)
    return out


def _inserted(ends: list[tuple[str, dict[int, dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Append-only over the commits from ``ends[0]`` to ``ends[-1]``: per commit (in order), by key,
    every key absent before it and present after it, as it was then."""
    out = []
    for (_, before), (_, after) in itertools.pairwise(ends):
        out += [{"id": k, **after[k]} for k in sorted(after, key=str) if k not in before]
    return out


# one random story per shape, each with a seed of its own (two seeds per shape doubled a minute of
# work without reaching a case one seed missed)
@pytest.mark.parametrize(("table_type", "index", "seed"), [(*shape, i + 1) for i, shape in enumerate(SHAPES)])
def test_min_delta_and_append_only_equal_the_model_on_every_window(
    tmp_path: Path, table_type: str, index: str, seed: int
) -> None:
    t, states = _story(str(tmp_path / "t"), table_type, index, seed)
    ends = [("00000000000000000", {}), *states]
    cols = ["id", "part", "ts", "v"]
    for i in range(len(ends)):
        for j in range(i + 1, len(ends)):
            (begin, before), (end, after) = ends[i], ends[j]
            got = t.read_changes(begin, end, columns=cols, format="min_delta").table.to_pylist()
            assert {r["record_key"]: (r["op"], r["before"], r["after"]) for r in got} == _expected(
                before, after
            ), (
                i,
                j,
            )
            for r in got:
                assert (r["commit_time"] is None) == (r["op"] == "d")
            appended = t.read_changes(begin, end, format="append_only", meta_columns=False).table
            assert appended.select(cols).to_pylist() == _inserted(ends[i : j + 1]), (i, j)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_append_only_returns_every_insert_of_the_window_as_inserted(tmp_path: Path, table_type: str) -> None:
    """Snowflake's APPEND_ONLY streams: 10 rows inserted, then 3 of them updated and 5 deleted in
    the window, are 10 rows with the values they were inserted with; a key deleted and inserted
    again is one row per insertion; an update of a key older than the window is no row."""
    t = HudiTable.create(
        str(tmp_path / "t"), "t", record_key="id", ordering_field="ts", table_type=table_type
    )
    start = t.write(pa.table({"id": [100], "ts": [0], "v": [0]}), "upsert").completion_time
    ten = pa.table({"id": list(range(10)), "ts": [1] * 10, "v": [i * 10 for i in range(10)]})
    t.write(ten, "upsert")
    t.write(pa.table({"id": [1, 2, 3, 100], "ts": [2] * 4, "v": [-1, -2, -3, -100]}), "upsert")
    t.delete(pa.table({"id": [3, 4, 5, 6, 7]}))
    t.write(pa.table({"id": [4], "ts": [3], "v": [44]}), "upsert")  # inserted again
    t.delete(pa.table({"id": [100]}))  # existed before the window: inserting it again counts
    end = t.write(pa.table({"id": [100], "ts": [4], "v": [1000]}), "upsert").completion_time
    got = t.read_changes(start, end, format="append_only", meta_columns=False).table
    assert got.column_names == ["id", "ts", "v"]
    assert got.to_pylist() == [
        *({"id": i, "ts": 1, "v": i * 10} for i in range(10)),
        {"id": 4, "ts": 3, "v": 44},
        {"id": 100, "ts": 4, "v": 1000},
    ]
    with_meta = t.read_changes(start, end, columns=["id", "v"], format="append_only").table
    assert with_meta.column_names == ["id", "v"] and with_meta.num_rows == 12
    full = t.read_changes(start, end, format="append_only").table
    ten_at, again_at, hundred_at = (t.timeline.completed_writes()[k].time for k in (1, 4, 6))
    assert full.column("_hoodie_commit_time").to_pylist() == [ten_at] * 10 + [again_at, hundred_at]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_append_only_from_before_the_active_timeline(tmp_path: Path, table_type: str) -> None:
    """A window reaching archived commits counts the inserts of its active commits, the first of
    them compared with the last archived state (key 0, updated by every commit, is no insert)."""
    t = HudiTable.create(
        str(tmp_path / "t"), "t", record_key="id", ordering_field="ts", table_type=table_type
    )
    for i in range(6):
        t.write(pa.table({"id": [0, i + 1], "ts": [i, i], "v": [i, i]}), "upsert")
    t.archive(
        {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.clean.commits.retained": "1"}
    )
    t = HudiTable.open(t.base_path)
    active = [i.time for i in t.timeline.completed_writes()]
    assert t.archived_timeline().instants and len(active) < 6
    got = t.read_changes("000", columns=["id", "v"], format="append_only").table.to_pylist()
    assert got == [{"id": i + 1, "v": i} for i in range(6 - len(active), 6)]


def test_append_only_rows_inserted_before_a_column_was_added(tmp_path: Path) -> None:
    """A row inserted before a column existed has it null, asked for by name or not."""
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id", ordering_field="ts")
    t.write(pa.table({"id": [1], "ts": [0], "v": [1]}), "upsert")
    t.write(pa.table({"id": [2, 1], "ts": [1, 1], "v": [2, 3], "w": ["x", "y"]}), "upsert")
    named = t.read_changes("000", columns=["id", "w"], format="append_only").table
    assert named.to_pylist() == [{"id": 1, "w": None}, {"id": 2, "w": "x"}]
    plain = t.read_changes("000", format="append_only", meta_columns=False).table
    assert plain.to_pylist() == [{"id": 1, "ts": 0, "v": 1, "w": None}, {"id": 2, "ts": 1, "v": 2, "w": "x"}]


def test_an_update_that_comes_back_and_an_insert_deleted_again_are_no_change(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id", ordering_field="ts")
    start = t.write(pa.table({"id": [1, 2], "ts": [1, 1], "v": [10, 20]}), "upsert").completion_time
    t.write(pa.table({"id": [1, 3], "ts": [2, 2], "v": [11, 30]}), "upsert")
    t.write(pa.table({"id": [1], "ts": [3], "v": [10]}), "upsert")  # back to its old value (ts aside)
    t.delete(pa.table({"id": [3]}))
    last = t.write(pa.table({"id": [2], "ts": [4], "v": [21]}), "upsert").completion_time
    delta = t.read_changes(start, last, columns=["id", "v"], format="min_delta").table.to_pylist()
    # key 1 came back to its value, key 3 was inserted and deleted inside the window: only key 2
    ops = [(r["op"], r["before"], r["after"]) for r in delta]
    assert ops == [("u", {"id": 2, "v": 20}, {"id": 2, "v": 21})]
    # append-only keeps the insert of key 3 (Snowflake's APPEND_ONLY: deleted later or not)
    appended = t.read_changes(start, last, columns=["id", "v"], format="append_only").table
    assert appended.to_pylist() == [{"id": 3, "v": 30}]
    with pytest.raises(InvalidInputError, match="unknown change format"):
        t.read_changes(start, format="cdc_full")
    with pytest.raises(InvalidInputError, match="take no filters"):
        t.read_changes(start, format="min_delta", filters=[("id", "=", 1)])
