"""Incremental queries (latest state, ``HudiTable.read_changes``) against a model: random upserts,
inserts and deletes (and compactions on Merge-on-Read) with one writer, then for every window
``(begin, end]`` of completion times the result is exactly the records the model says a commit of
the window wrote and nothing overwrote or deleted by the window's last commit, with their
``_hoodie_commit_time``; resuming from ``resume_from`` sees every later commit once."""

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

CITIES = ["sf", "nyc"]


def batch(ids: list[int], step: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [CITIES[i % 2] for i in ids],
            "ts": pa.array([step] * len(ids), pa.int64()),
            "name": [f"s{step}-{i}" for i in ids],
        }
    )


class Model:
    """After each commit: every live key's row and the request time of the commit that wrote it."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[str, dict[str, Any]]] = {}
        self.commits: list[tuple[str, str, dict[int, tuple[str, dict[str, Any]]]]] = []  # (t, done, state)

    def record(self, table: HudiTable, t: str) -> None:
        done = next(
            i.completion_time for i in HudiTable.open(table.base_path).timeline.instants if i.time == t
        )
        assert done is not None
        self.commits.append((t, done, dict(self.live)))

    def expected(self, begin: str, end: str | None) -> list[dict[str, Any]]:
        window = [
            (t, done, state)
            for t, done, state in self.commits
            if done > begin and (end is None or done <= end)
        ]
        if not window:
            return []
        times = {t for t, _, _ in window}
        last_state = window[-1][2]
        return sorted(
            ({"_hoodie_commit_time": t, **row} for t, row in last_state.values() if t in times),
            key=lambda r: r["id"],
        )


def run_workload(table: HudiTable, seed: int, mor: bool) -> Model:
    rng = random.Random(seed)
    model = Model()
    for step in range(1, 13):
        kind = "insert" if step == 1 else rng.choice(["upsert", "upsert", "delete"])
        if kind == "delete" and len(model.live) > 4:
            ids = rng.sample(sorted(model.live), 3)
            t = HudiTable.open(table.base_path).delete(batch(ids, step)).instant_time
            for i in ids:
                del model.live[i]
        else:
            ids = list(range(10)) if step == 1 else rng.sample(range(16), 6)
            data = batch(ids, step)
            t = HudiTable.open(table.base_path).write(data, "insert" if step == 1 else "upsert").instant_time
            for row in data.to_pylist():
                model.live[row["id"]] = (t, row)
        model.record(table, t)
        if mor and step in (5, 9):  # a compaction: no new versions, no change for the queries
            # (nothing to compact when a clustering just rewrote every file group)
            HudiTable.open(table.base_path).compact({"hoodie.compact.inline.max.delta.commits": "1"})
        simple = HudiTable.open(table.base_path).index_type == "SIMPLE"
        interrupt(
            HudiTable.open(table.base_path), rng, batch(rng.sample(range(16), 3), 99), clustering=simple
        )
    return model


def got(table: HudiTable, begin: str, end: str | None) -> list[dict[str, Any]]:
    changes = HudiTable.open(table.base_path).read_changes(
        begin, end, columns=["_hoodie_commit_time", "id", "city", "ts", "name"]
    )
    return sorted(changes.table.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize(
    ("table_type", "index"),
    [("COPY_ON_WRITE", "simple"), ("MERGE_ON_READ", "simple"), ("MERGE_ON_READ", "bucket")],
)
def test_every_window_equals_the_model(tmp_path: Path, table_type: str, index: str) -> None:
    table = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        index=index,
        buckets=2,
    )
    mor = table_type == "MERGE_ON_READ"
    model = run_workload(table, 7, mor)
    bounds = ["00000000000000000"] + [done for _, done, _ in model.commits]
    for b, e in itertools.combinations(bounds, 2):
        assert got(table, b, e) == model.expected(b, e), f"window ({b}, {e}]"
    for b in bounds:
        assert got(table, b, None) == model.expected(b, None), f"window ({b}, latest]"


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_the_changes_of_one_instant_are_its_window_of_the_model(tmp_path: Path, table_type: str) -> None:
    """read_changes(instant=T) (a commit event's instant) is the window holding T alone."""
    table = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type=table_type
    )
    model = run_workload(table, 5, table_type == "MERGE_ON_READ")
    previous = "00000000000000000"
    for t, done, _ in model.commits:
        changes = HudiTable.open(table.base_path).read_changes(
            instant=t, columns=["_hoodie_commit_time", "id", "city", "ts", "name"]
        )
        assert sorted(changes.table.to_pylist(), key=lambda r: r["id"]) == model.expected(previous, done), t
        assert changes.resume_from == done
        previous = done
    with pytest.raises(InvalidInputError, match=r"begin \(and end\), or one instant"):
        table.read_changes(previous, instant=model.commits[0][0])


def test_resuming_from_resume_from_sees_each_commit_once(tmp_path: Path) -> None:
    table = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ"
    )
    seen: list[str] = []
    checkpoint = "00000000000000000"
    for step in range(1, 6):
        HudiTable.open(table.base_path).write(batch([step, step + 100], step), "upsert")
        changes = HudiTable.open(table.base_path).read_changes(checkpoint)
        seen.extend(changes.table.column("name").to_pylist())
        checkpoint = changes.resume_from
    assert sorted(seen) == sorted(f"s{s}-{i}" for s in range(1, 6) for i in (s, s + 100))
    nothing = HudiTable.open(table.base_path).read_changes(checkpoint)
    assert nothing.table.num_rows == 0 and nothing.resume_from == checkpoint


def test_bad_windows_are_refused(tmp_path: Path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts")
    table.write(batch([1], 1), "insert")
    with pytest.raises(InvalidInputError, match="before it begins"):
        table.read_changes("20300101000000000", "20200101000000000")
    with pytest.raises(InvalidInputError, match="invalid instant time"):
        table.read_changes("yesterday")


def hudi_rs_incremental(path: str, begin: str, end: str | None) -> list[dict[str, Any]]:
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    options = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(begin)
    if end is not None:
        options = options.with_end_timestamp(end)
    batches = HudiTableBuilder.from_base_uri(path).build().read(options)
    if not batches:
        return []
    t = pa.Table.from_batches(batches).select(["_hoodie_commit_time", "id", "city", "ts", "name"])
    return sorted(t.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_windows_equal_hudi_rs_incremental_reads(tmp_path: Path, table_type: str) -> None:
    """hudi-rs 0.5.0 takes the same completion-time window (checked on every window here)."""
    table = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
    )
    model = run_workload(table, 11, table_type == "MERGE_ON_READ")
    bounds = [done for _, done, _ in model.commits]
    for b, e in itertools.combinations(bounds, 2):
        assert got(table, b, e) == hudi_rs_incremental(table.base_path, b, e), f"window ({b}, {e}]"
