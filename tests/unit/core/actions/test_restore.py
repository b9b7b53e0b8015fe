"""Restore (``inlet.core.actions.restore``): after a restore to a savepoint the table reads as the model
had it at the savepoint (Inlet and both hudi-rs readers, snapshot and as of every retained instant),
the files of the rolled-back writes are gone (derived from file names), the timeline holds Hudi's
restore instant and no rollback after the savepoint; a restore killed at each step leaves a table
that reads as one of the model's states and the next restore finishes; refusals."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support import hudi_rs
from support.history import Model, data_rows, make_table
from support.tables import rows, run_python

from inlet.core import HudiTable, avro
from inlet.core.errors import InvalidInputError
from inlet.core.timeline.instant import Action

# base files <fileId>_<token>_<t>.parquet, log files .<fileId>_<t>.log.<v>_<token>
WRITTEN_AT = re.compile(r"^(?:[^_]+_[^_]+_(?P<b>\d{17})\.parquet|\.[^_]+_(?P<l>\d{17})\.log\..*)$")


def data_files(path: Path) -> dict[str, str]:
    """File name -> the instant that wrote it."""
    out = {}
    for root, _dirs, files in os.walk(path):
        if ".hoodie" in root:
            continue
        for f in files:
            m = WRITTEN_AT.match(f)
            if m:
                out[f] = m.group("b") or m.group("l")
    return out


def all_reads(path: str, as_of: str | None = None) -> dict[str, list]:
    out = {"inlet": data_rows(rows(HudiTable.open(path).read(as_of=as_of)))}
    for v in hudi_rs.READER_VERSIONS:
        got = hudi_rs.read(path, v, as_of=as_of)
        out[f"hudi-v{v}"] = data_rows(rows(got)) if got is not None else []
    return out


def build(tmp_path: Path, table_type: str, index: str, seed: int) -> tuple[HudiTable, Model, str]:
    """A table with writes and a delete, a savepoint, then more writes (and compactions on MOR)."""
    table = make_table(tmp_path / "t", table_type, index)
    model = Model(seed)
    model.write(table, first=True)
    model.write(table)
    model.delete(table)
    saved = model.write(table)
    HudiTable.open(table.base_path).savepoint(saved)
    for i in range(5):
        model.write(table)
        if table_type == "MERGE_ON_READ" and i in (1, 3):
            HudiTable.open(table.base_path).compact({"hoodie.compact.inline.max.delta.commits": "1"})
    model.delete(table)
    return table, model, saved


@pytest.mark.parametrize(
    ("table_type", "index"),
    [("COPY_ON_WRITE", "simple"), ("MERGE_ON_READ", "bucket"), ("MERGE_ON_READ", "simple")],
)
def test_restore_to_savepoint_reads_as_the_model(tmp_path: Path, table_type: str, index: str) -> None:
    table, model, saved = build(tmp_path, table_type, index, 21)
    t = HudiTable.open(table.base_path)
    t.clean({"hoodie.clean.commits.retained": "1"})  # would remove the savepoint's files if unprotected
    before = data_files(tmp_path / "t")
    after_savepoint = {i.time for i in t.timeline.instants if i.action != Action.SAVEPOINT and i.time > saved}
    later_writes = {i.time for i in t.timeline.completed_writes() if i.time > saved}
    assert later_writes
    result = HudiTable.open(table.base_path).restore(saved)
    assert result.savepoint == saved and set(result.rolled_back) == later_writes
    assert list(result.rolled_back) == sorted(result.rolled_back, reverse=True)  # newest first
    # reads: snapshot and as of every retained write equal the model
    for reader, got in all_reads(table.base_path).items():
        assert got == model.at[saved], reader
    t = HudiTable.open(table.base_path)
    # (the clean kept only the savepoint among the older instants, so it is the one to read as of)
    for reader, got in all_reads(table.base_path, as_of=saved).items():
        assert got == model.at[saved], reader
    # files: exactly those written after the savepoint are gone
    assert data_files(tmp_path / "t") == {f: w for f, w in before.items() if w <= saved}
    # timeline: no write, rollback or clean of the rolled-back range is pending; one completed restore
    assert [i.time for i in t.timeline.completed_writes()][-1] == saved
    assert not [i for i in t.timeline.instants if i.action == Action.ROLLBACK and i.time > saved]
    assert not t.timeline.pending()
    restores = t.timeline.completed([Action.RESTORE])
    assert [r.time for r in restores] == [result.instant]
    md = avro.decode(t.timeline.read_bytes(restores[0]))
    assert set(md["instantsToRollback"]) == later_writes and set(md["hoodieRestoreMetadata"]) == later_writes
    assert {i["commitTime"] for i in md["restoreInstantInfo"]} == later_writes
    names = set(os.listdir(tmp_path / "t" / ".hoodie" / "timeline"))
    assert f"{result.instant}.restore.requested" in names and f"{result.instant}.restore.inflight" in names
    assert not any(n.startswith(tuple(sorted(later_writes))) for n in names)
    assert after_savepoint  # the range was not empty
    # the table keeps working: a new write lands on the restored state
    model.restore(saved)
    nxt = model.write(HudiTable.open(table.base_path))
    assert data_rows(rows(HudiTable.open(table.base_path).read())) == model.at[nxt]


RESTORE = """
import sys
from inlet.core import HudiTable
HudiTable.open(sys.argv[1]).restore(sys.argv[2])
"""


@pytest.mark.parametrize("point", ["restore_after_plan", "restore_mid_rollback", "restore_before_complete"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_killed_restore_is_finished_by_the_next(tmp_path: Path, point: str, table_type: str) -> None:
    table, model, saved = build(tmp_path, table_type, "simple", 22)
    before = data_files(tmp_path / "t")
    assert run_python(RESTORE, table.base_path, saved, crash_at=point) == 77
    t = HudiTable.open(table.base_path)
    pending = t.timeline.pending([Action.RESTORE])
    assert len(pending) == 1
    # readers in between: the table reads as the model at its latest remaining write, the same in
    # Inlet and both hudi-rs readers (the rolled-back writes were unpublished before their files went)
    latest = t.timeline.completed_writes()[-1].time
    for reader, got in all_reads(table.base_path).items():
        assert got == model.at[latest], reader
    if point == "restore_after_plan":
        assert latest > saved
    if point == "restore_mid_rollback":
        assert saved < latest < sorted(model.at)[-1]
    if point == "restore_before_complete":
        assert latest == saved
    # a restore to another instant is refused while this one is pending
    with pytest.raises(InvalidInputError, match="pending"):
        t.restore(sorted(model.at)[0])
    result = HudiTable.open(table.base_path).restore(saved)
    assert result.resumed and result.instant == pending[0].time
    for reader, got in all_reads(table.base_path).items():
        assert got == model.at[saved], reader
    assert data_files(tmp_path / "t") == {f: w for f, w in before.items() if w <= saved}
    t = HudiTable.open(table.base_path)
    for w in t.timeline.completed_writes():  # nothing was cleaned: every retained instant reads
        assert data_rows(rows(t.read(as_of=w.time))) == model.at[w.time], f"as of {w.time}"
    assert not t.timeline.pending()
    assert not [i for i in t.timeline.instants if i.action == Action.ROLLBACK and i.time > saved]


def test_restore_refusals(tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", "COPY_ON_WRITE", "simple")
    model = Model(23)
    writes = [model.write(table, first=True)] + [model.write(table) for _ in range(3)]
    t = HudiTable.open(table.base_path)
    with pytest.raises(InvalidInputError, match=f"cannot restore to {writes[1]}: it is not a savepoint"):
        t.restore(writes[1])
    t.savepoint(writes[1])
    t.savepoint(writes[2])
    with pytest.raises(InvalidInputError, match=f"later savepoint.*{writes[2]}.*delete them first"):
        t.restore(writes[1])
    assert not HudiTable.open(table.base_path).timeline.completed([Action.RESTORE])
    assert data_rows(rows(HudiTable.open(table.base_path).read())) == model.at[writes[-1]]
    t.delete_savepoint(writes[2])
    assert t.restore(writes[1]).rolled_back == (writes[3], writes[2])
    assert data_rows(rows(HudiTable.open(table.base_path).read())) == model.at[writes[1]]
