"""Savepoints (``inlet.core.actions.savepoint``): a savepointed instant keeps reading as the model had it
(Inlet and both hudi-rs readers, as of that instant) after later writes, a clean with retention low
enough to delete its files, and an archive; the instant files and metadata are Hudi's; refusals."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support import hudi_rs
from support.history import Model, data_rows, make_table
from support.tables import rows

from inlet.core import HudiTable, avro
from inlet.core.errors import InvalidInputError


def reads_as_of(path: str, t: str) -> dict[str, list[dict[str, Any]]]:
    out = {"inlet": data_rows(rows(HudiTable.open(path).read(as_of=t)))}
    for v in hudi_rs.READER_VERSIONS:
        got = hudi_rs.read(path, v, as_of=t)
        out[f"hudi-v{v}"] = data_rows(rows(got)) if got is not None else []
    return out


def files_on_disk(path: Path) -> set[str]:
    out = set()
    for root, _dirs, files in os.walk(path):
        if ".hoodie" not in root:
            out.update(f for f in files if f.endswith(".parquet") or ".log." in f)
    return out


@pytest.mark.parametrize(
    ("table_type", "index"),
    [("COPY_ON_WRITE", "simple"), ("MERGE_ON_READ", "bucket"), ("MERGE_ON_READ", "simple")],
)
def test_savepoint_survives_clean_and_archive(tmp_path: Path, table_type: str, index: str) -> None:
    table = make_table(tmp_path / "t", table_type, index)
    model = Model(11)
    model.write(table, first=True)
    saved = model.delete(table)
    info = HudiTable.open(table.base_path).savepoint(saved, user="alice", comment="before the load")
    for i in range(8):
        model.write(table)
        if table_type == "MERGE_ON_READ" and i in (1, 4):
            HudiTable.open(table.base_path).compact({"hoodie.compact.inline.max.delta.commits": "1"})
    t = HudiTable.open(table.base_path)
    t.clean({"hoodie.clean.commits.retained": "1"})
    t.archive({"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"})
    # every file the savepoint listed is still there, and the instant reads as the model had it
    listed = {f for names in info.partitions.values() for f in names}
    assert listed and listed <= files_on_disk(tmp_path / "t")
    for reader, got in reads_as_of(table.base_path, saved).items():
        assert got == model.at[saved], reader
    # without the savepoint, the same clean would have removed some of them (so the test bites)
    t2 = HudiTable.open(table.base_path)
    t2.delete_savepoint(saved)
    plan = t2.plan_clean({"hoodie.clean.commits.retained": "1"})
    doomed = {os.path.basename(f) for fs in plan.files.values() for f in fs}
    assert doomed & listed


def test_savepoint_instant_files_and_metadata(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", "COPY_ON_WRITE", "simple")
    model = Model(12)
    first = model.write(table, first=True)
    second = model.write(table)
    info = HudiTable.open(table.base_path).savepoint(first, user="bob", comment="c1")
    names = set(os.listdir(tmp_path / "t" / ".hoodie" / "timeline"))
    # Hudi 1.x: the savepoint takes the commit's time; inflight then completed, no requested file
    assert f"{first}.savepoint.inflight" in names and f"{first}.savepoint.requested" not in names
    completed = f"{first}_{info.completion_time}.savepoint"
    assert completed in names
    md = avro.decode((tmp_path / "t" / ".hoodie" / "timeline" / completed).read_bytes())
    assert md["savepointedBy"] == "bob" and md["comments"] == "c1"
    # the latest base file of every group as of the first commit: the first commit's files (by name)
    expected: dict[str, list[str]] = {}
    for root, _d, files in os.walk(tmp_path / "t"):
        if ".hoodie" in root:
            continue
        for f in files:
            if f.endswith(f"_{first}.parquet"):
                expected.setdefault(os.path.relpath(root, tmp_path / "t"), []).append(f)
    got = {p: sorted(m["savepointDataFile"]) for p, m in md["partitionMetadata"].items()}
    assert got == {p: sorted(v) for p, v in expected.items()}
    assert all(m["partitionPath"] == p for p, m in md["partitionMetadata"].items())
    # the commit itself is unchanged on the timeline, and both are listed
    t = HudiTable.open(table.base_path)
    assert [i.time for i in t.timeline.completed_writes()] == [first, second]
    assert [s.instant for s in t.savepoints()] == [first]
    assert data_rows(rows(t.read())) == model.snapshot()
    t.delete_savepoint(first)
    names = set(os.listdir(tmp_path / "t" / ".hoodie" / "timeline"))
    assert not any(".savepoint" in n for n in names)
    assert HudiTable.open(table.base_path).savepoints() == []


def test_savepoint_refusals(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", "COPY_ON_WRITE", "simple")
    model = Model(13)
    writes = [model.write(table, first=True)] + [model.write(table) for _ in range(4)]
    t = HudiTable.open(table.base_path)
    with pytest.raises(InvalidInputError, match="no such instant"):
        t.savepoint("20000101000000000")
    with pytest.raises(InvalidInputError, match="invalid instant time"):
        t.savepoint("yesterday")
    pending = t.commit_protocol.begin("commit")
    with pytest.raises(InvalidInputError, match="pending commit"):
        t.savepoint(pending.time)
    clean = t.clean({"hoodie.clean.commits.retained": "2"})
    assert clean.earliest_to_retain == writes[-2]
    with pytest.raises(InvalidInputError, match=f"kept only commits from {writes[-2]}"):
        t.savepoint(writes[-3])
    with pytest.raises(InvalidInputError, match="clean"):
        t.savepoint(clean.instant or "")
    t.savepoint(writes[-2])
    with pytest.raises(InvalidInputError, match="already savepointed"):
        t.savepoint(writes[-2])
    with pytest.raises(InvalidInputError, match=f"no savepoint at {writes[-1]}"):
        t.delete_savepoint(writes[-1])
    assert [s.instant for s in t.savepoints()] == [writes[-2]]
