"""Clean (``inlet.core.actions.clean``): after a clean every instant of the retained window still reads as
the model of the writes had it, the latest state reads the same by Inlet and both hudi-rs readers,
exactly the files Hudi's cleaner rules name are gone (computed here from file names alone), pending
compactions keep their input, and a clean killed at any step is finished by the next run."""

from __future__ import annotations

import os
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from support.tables import all_reads, rows, run_python, trips

from inlet.core import HudiTable
from inlet.core.errors import InvalidOptionError
from inlet.core.timeline.instant import Action, State

CITIES = ["sf", "nyc", "la"]
BASE_NAME = re.compile(r"^(?P<fid>[^_]+)_[^_]+_(?P<t>\d{17})\.parquet$")


class Model:
    """Rows by id after each write, keyed by the write's instant time."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.current: dict[int, dict[str, Any]] = {}
        self.at: dict[str, list[dict[str, Any]]] = {}
        self.step = 0

    def write(self, table: HudiTable, first: bool = False, operation: str = "upsert") -> str:
        self.step += 1
        ids = list(range(30)) if first else self.rng.sample(range(40), 12)
        cities = [CITIES[i % 3] for i in ids]  # a key keeps its partition
        batch = trips(ids, cities, self.step, f"w{self.step}")
        result = table.write(
            batch, operation if not first else "bulk_insert" if operation == "bulk" else "insert"
        )
        t = result.instant_time
        for r in rows(batch):
            self.current[r["id"]] = r
        self.at[t] = self.snapshot()
        return t

    def delete(self, table: HudiTable) -> str:
        ids = self.rng.sample(sorted(self.current), 3)
        batch = trips(ids, [CITIES[i % 3] for i in ids], self.step, "del")
        t = table.delete(batch).instant_time
        for i in ids:
            del self.current[i]
        self.at[t] = self.snapshot()
        return t

    def snapshot(self) -> list[dict[str, Any]]:
        return sorted(self.current.values(), key=lambda r: r["id"])


def data_rows(read: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "_hoodie_commit_time"} for r in read]


def base_files(path: Path) -> set[str]:
    out = set()
    for root, _dirs, files in os.walk(path):
        if ".hoodie" in root:
            continue
        out.update(os.path.relpath(os.path.join(root, f), path) for f in files if f.endswith(".parquet"))
    return out


def expected_cow_survivors(files: set[str], earliest: str) -> set[str]:
    """Hudi's KEEP_LATEST_COMMITS over base files, from their names: per file group the newest, the
    newest older than ``earliest``, and every one from ``earliest`` on."""
    groups: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for f in files:
        m = BASE_NAME.match(os.path.basename(f))
        assert m, f
        groups[(os.path.dirname(f), m["fid"])].append((m["t"], f))
    keep = set()
    for versions in groups.values():
        versions.sort()
        keep.add(versions[-1][1])
        older = [f for t, f in versions if t < earliest]
        if older:
            keep.add(older[-1])
        keep.update(f for t, f in versions if t >= earliest)
    return keep


def check_window(path: Path, model: Model, earliest: str) -> None:
    table = HudiTable.open(str(path))
    for t, expected in model.at.items():
        if t >= earliest:
            assert data_rows(rows(table.read(as_of=t))) == expected, f"as of {t}"
    reads = all_reads(str(path))
    for reader, got in reads.items():
        assert data_rows(got) == model.snapshot(), reader


def test_keep_latest_commits_on_copy_on_write(tmp_path: Path) -> None:
    table = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", partition_by="city", ordering_field="ts"
    )
    model = Model(1)
    model.write(table, first=True)
    for i in range(7):
        model.delete(table) if i == 3 else model.write(table)
    before = base_files(tmp_path / "t")
    result = HudiTable.open(table.base_path).clean({"hoodie.clean.commits.retained": "3"})
    writes = sorted(model.at)
    assert result.instant is not None and result.earliest_to_retain == writes[-3]
    after = base_files(tmp_path / "t")
    assert after == expected_cow_survivors(before, writes[-3])
    assert result.files_deleted == len(before - after) > 0
    check_window(tmp_path / "t", model, writes[-3])
    done = [i for i in HudiTable.open(table.base_path).timeline.instants if i.action == Action.CLEAN]
    assert [(i.time, i.state) for i in done] == [(result.instant, State.COMPLETED)]
    names = set(os.listdir(tmp_path / "t" / ".hoodie" / "timeline"))
    assert {f"{result.instant}.clean.requested", f"{result.instant}.clean.inflight"} <= names
    assert f"{result.instant}_{done[0].completion_time}.clean" in names
    shown = HudiTable.open(table.base_path).cleans()
    assert shown[-1]["files_deleted"] == result.files_deleted and shown[-1]["policy"] == "KEEP_LATEST_COMMITS"


@pytest.mark.parametrize(("index", "first"), [("simple", "insert"), ("bucket", "bulk")])
def test_keep_latest_commits_on_merge_on_read(tmp_path: Path, index: str, first: str) -> None:
    table = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index=index,
        buckets=2,
    )
    model = Model(2)
    model.write(table, first=True, operation=first)
    for i in range(9):
        model.write(table)
        if i in (2, 6):  # compactions start new slices; the older ones become cleanable
            HudiTable.open(table.base_path).compact({"hoodie.compact.inline.max.delta.commits": "1"})
    t = HudiTable.open(table.base_path)
    view_before = t.file_system_view()
    result = t.clean({"hoodie.clean.commits.retained": "2"})
    assert result.instant is not None and result.files_deleted > 0
    earliest = result.earliest_to_retain
    assert earliest is not None
    view = HudiTable.open(table.base_path).file_system_view()
    for group in view.file_groups():
        old = [s.base_instant for s in group.slices if s.base_instant < earliest]
        assert len(old) <= 1, f"{group.file_id}: slices {old} older than {earliest} survived"
        before = next(g for g in view_before.file_groups() if g.file_id == group.file_id)
        assert group.slices[-1].base_instant == before.slices[-1].base_instant  # the latest always stays
    check_window(tmp_path / "t", model, earliest)


def test_pending_compaction_keeps_its_input(tmp_path: Path) -> None:
    table = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ"
    )
    model = Model(3)
    model.write(table, first=True)
    for _ in range(3):
        model.write(table)
    planned = HudiTable.open(table.base_path).schedule_compaction(
        {"hoodie.compact.inline.max.delta.commits": "1"}
    )
    assert planned is not None
    for _ in range(3):
        model.write(table)
    t = HudiTable.open(table.base_path)
    plan = next(c for c in t.compactions() if c.instant_time == planned).plan
    inputs = {
        os.path.join(op.partition, name)
        for op in plan.operations
        for name in ([op.base_file] if op.base_file else []) + list(op.log_files)
    }
    t.clean({"hoodie.clean.commits.retained": "1"})
    assert all((tmp_path / "t" / f).exists() for f in inputs)
    HudiTable.open(table.base_path).run_compaction(planned)
    assert data_rows(rows(HudiTable.open(table.base_path).read())) == model.snapshot()


def test_nothing_to_clean_and_bad_options_write_no_instant(tmp_path: Path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts")
    model = Model(4)
    for i in range(3):
        model.write(table, first=i == 0)
    assert HudiTable.open(table.base_path).clean().instant is None  # 3 commits, 10 retained
    with pytest.raises(InvalidOptionError, match=r"hoodie\.clean\.commits\.retained"):
        HudiTable.open(table.base_path).clean({"hoodie.clean.commits.retained": "0"})
    with pytest.raises(InvalidOptionError, match=r"hoodie\.cleaner\.policy"):
        HudiTable.open(table.base_path).clean({"hoodie.cleaner.policy": "KEEP_EVERYTHING"})
    assert not [i for i in HudiTable.open(table.base_path).timeline.instants if i.action == Action.CLEAN]


def test_keep_latest_file_versions(tmp_path: Path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts")
    model = Model(5)
    model.write(table, first=True)
    for _ in range(5):
        model.write(table)
    result = HudiTable.open(table.base_path).clean(
        {"hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.clean.fileversions.retained": "2"}
    )
    assert result.instant is not None
    per_group: dict[str, int] = defaultdict(int)
    for f in base_files(tmp_path / "t"):
        m = BASE_NAME.match(os.path.basename(f))
        assert m
        per_group[m["fid"]] += 1
    assert per_group and max(per_group.values()) <= 2
    assert data_rows(all_reads(table.base_path)["hudi-v2"]) == model.snapshot()


CLEAN = """
import sys
from inlet.core import HudiTable
HudiTable.open(sys.argv[1]).clean({"hoodie.clean.commits.retained": "2"})
"""


@pytest.mark.parametrize("point", ["clean_after_plan", "clean_after_delete"])
def test_a_killed_clean_is_finished_by_the_next(tmp_path: Path, point: str) -> None:
    table = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts")
    model = Model(6)
    model.write(table, first=True)
    for _ in range(5):
        model.write(table)
    before = base_files(tmp_path / "t")
    assert run_python(CLEAN, table.base_path, crash_at=point) == 77
    pending = HudiTable.open(table.base_path).timeline.pending([Action.CLEAN])
    assert len(pending) == 1 and pending[0].state is State.INFLIGHT
    # readers never see a partial state: the latest slices are untouched
    assert data_rows(all_reads(table.base_path)["inlet"]) == model.snapshot()
    result = HudiTable.open(table.base_path).clean({"hoodie.clean.commits.retained": "2"})
    assert result.resumed == (pending[0].time,)
    assert not HudiTable.open(table.base_path).timeline.pending([Action.CLEAN])
    writes = sorted(model.at)
    assert base_files(tmp_path / "t") == expected_cow_survivors(before, writes[-2])
    check_window(tmp_path / "t", model, writes[-2])
