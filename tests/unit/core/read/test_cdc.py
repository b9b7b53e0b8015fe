"""CDC queries (Hudi's ``incremental.format=cdc``): every change of every commit in a window, with
before and after images, equal what a model derives from each commit's writes (random upserts,
deletes and compactions; COW and MOR; simple and bucket index)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.interruptions import interrupt

from inlet.core import HudiTable
from inlet.core.errors import InvalidInputError

COLS = ["id", "part", "ts", "v"]
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
Row = dict[str, Any]


def _story(
    path: str, table_type: str, index: str, seed: int
) -> tuple[HudiTable, list[tuple[str, list[tuple]]]]:
    """Random commits; per write commit, its completion time and the changes it made (model side):
    (op, ts_ms, before image, after image) by record key."""
    rng = random.Random(seed)
    t = HudiTable.create(
        path, "t", record_key="id", partition_by="part", ordering_field="ts",
        table_type=table_type, index=index, buckets=2,
    )  # fmt: skip
    state: dict[int, Row] = {}
    commits: list[tuple[str, list[tuple]]] = []
    for step in range(1, 11):
        changes: list[tuple[int, str, Row | None, Row | None]] = []
        if rng.random() < 0.3 and state:
            gone = rng.sample(sorted(state), k=min(len(state), rng.randint(1, 3)))
            r = t.delete(
                pa.table({"id": pa.array(gone, pa.int64()), "part": [state[i]["part"] for i in gone]})
            )
            changes = [(i, "d", state.pop(i), None) for i in gone]
        else:
            ids = rng.sample(range(12), k=rng.randint(1, 4))
            # some updates rewrite the value a key has: still a change of that commit
            rows = [{"id": i, "part": f"p{i % 3}", "ts": step, "v": rng.randint(0, 2)} for i in ids]
            r = t.write(pa.Table.from_pylist(rows, schema=SCHEMA), "upsert")
            for row in rows:
                changes.append((row["id"], "u" if row["id"] in state else "i", state.get(row["id"]), row))
                state[row["id"]] = row
        want = [(op, r.instant_time, b, a) for _, op, b, a in sorted(changes, key=lambda c: str(c[0]))]
        commits.append((r.completion_time, want))
        if table_type == "MERGE_ON_READ" and rng.random() < 0.3:
            t.compact({"hoodie.compact.inline.max.delta.commits": "1"})  # no changes of its own
        junk = [{"id": i, "part": f"p{i % 3}", "ts": 99, "v": 9} for i in rng.sample(range(12), 3)]
        interrupt(t, rng, pa.Table.from_pylist(junk, schema=SCHEMA), clustering=index == "simple")
    return t, commits


def _decoded(t: pa.Table) -> list[tuple]:
    assert t.schema.names == ["op", "ts_ms", "before", "after"]
    return [
        (
            r["op"],
            r["ts_ms"],
            json.loads(r["before"]) if r["before"] else None,
            json.loads(r["after"]) if r["after"] else None,
        )
        for r in t.to_pylist()
    ]


@pytest.mark.parametrize(
    ("table_type", "index"),
    [("COPY_ON_WRITE", "simple"), ("MERGE_ON_READ", "simple"), ("MERGE_ON_READ", "bucket")],
)
def test_cdc_rows_equal_each_commits_changes_on_every_window(
    tmp_path: Path, table_type: str, index: str
) -> None:
    t, commits = _story(str(tmp_path / "t"), table_type, index, 3)
    bounds = ["00000000000000000", *(done for done, _ in commits)]
    for i in range(len(bounds)):
        for j in range(i + 1, len(bounds)):
            got = t.read_changes(bounds[i], bounds[j], columns=COLS, format="cdc")
            want = [c for done, changes in commits[i:j] for c in changes]
            assert _decoded(got.table) == want, (i, j)
            assert got.resume_from == bounds[j]


def test_cdc_keeps_every_step_that_min_delta_nets(tmp_path: Path) -> None:
    """Insert, update, delete of one key in three commits: three CDC rows, no min-delta row."""
    t = HudiTable.create(
        str(tmp_path / "t"), "t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ"
    )
    start = t.write(pa.table({"id": [9], "ts": [0], "v": [0]}), "upsert").completion_time
    t.write(pa.table({"id": [1], "ts": [1], "v": [10]}), "upsert")
    t.write(pa.table({"id": [1], "ts": [2], "v": [11]}), "upsert")
    end = t.delete(pa.table({"id": [1]})).completion_time
    rows = _decoded(t.read_changes(start, end, columns=["id", "v"], format="cdc").table)
    assert [(op, b, a) for op, _, b, a in rows] == [
        ("i", None, {"id": 1, "v": 10}),
        ("u", {"id": 1, "v": 10}, {"id": 1, "v": 11}),
        ("d", {"id": 1, "v": 11}, None),
    ]
    assert t.read_changes(start, end, format="min_delta").table.num_rows == 0


def test_a_cdc_window_reaching_archived_commits_is_refused(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id", ordering_field="ts")
    done = [t.write(pa.table({"id": [i], "ts": [i], "v": [i]}), "upsert").completion_time for i in range(6)]
    assert t.read_changes("000", format="cdc").table.num_rows == 6  # nothing archived yet
    t.archive(
        {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.clean.commits.retained": "1"}
    )
    archived = [i.time for i in t.archived_timeline().instants]
    assert archived, "the archive must move commits out for this test"
    with pytest.raises(InvalidInputError, match="archived"):
        t.read_changes("000", format="cdc")
    last_archived = max(i.completion_time or i.time for i in t.archived_timeline().instants)
    rows = t.read_changes(last_archived, format="cdc").table
    assert rows.num_rows == sum(1 for d in done if d > last_archived)
