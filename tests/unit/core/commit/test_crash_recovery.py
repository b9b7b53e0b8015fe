"""Crash recovery: a writer killed at each crash point leaves the table readable as before, and the
next writer rolls the pending instant back (rollback instant, files, markers, heartbeat)."""

from __future__ import annotations

import io
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable, avro, faults
from inlet.core.commit import heartbeat, markers
from inlet.core.file_group.view import BaseFile
from inlet.core.timeline.instant import Action, Instant, State
from inlet.core.write import run as write_run

WRITER = """
import sys
import pyarrow.parquet as pq
from inlet.core import HudiTable

HudiTable.open(sys.argv[1]).write(pq.read_table(sys.argv[2]), sys.argv[3])
"""

ROLLBACK_ONLY = """
import sys
from inlet.core import HudiTable

HudiTable.open(sys.argv[1]).rollback_failed_writes()
"""

WRITE_POINTS = [
    faults.AFTER_REQUESTED,
    faults.AFTER_INFLIGHT,
    faults.AFTER_DATA_FILES,
    faults.BEFORE_COMPLETE,
]


# ------------------------------------------------------------------------------ helpers


def _first_commit(kit: Any, table: HudiTable) -> dict[str, list[dict[str, Any]]]:
    first = table.write(kit.trips([1, 2, 3, 4, 5, 6], ["sf", "nyc"] * 3, 1, "v1"), "upsert")
    before = kit.all_reads(table.base_path)
    assert _strip_meta(before["inlet"]) == kit.rows(kit.trips([1, 2, 3, 4, 5, 6], ["sf", "nyc"] * 3, 1, "v1"))
    assert all(r == before["inlet"] for r in before.values()), before
    assert {r["_hoodie_commit_time"] for r in before["inlet"]} == {first.instant_time}
    return before


def _upsert(kit: Any) -> Any:
    """Updates of ids 1 (sf) and 4 (nyc), inserts 7, 8 and 9 (9 in a new partition)."""
    return kit.trips([1, 4, 7, 8, 9], ["sf", "nyc", "sf", "nyc", "la"], 2, "v2")


def _expected_after_upsert(kit: Any) -> list[dict[str, Any]]:
    old = kit.rows(kit.trips([2, 3, 5, 6], ["nyc", "sf", "sf", "nyc"], 1, "v1"))
    new = kit.rows(kit.trips([1, 4, 7, 8, 9], ["sf", "nyc", "sf", "nyc", "la"], 2, "v2"))
    return sorted(old + new, key=lambda r: r["id"])


def _strip_meta(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not k.startswith("_hoodie")} for r in rows]


def _timeline_files(table: HudiTable) -> list[str]:
    tdir = Path(table.storage.full(table.timeline.dir))
    return sorted(p.name for p in tdir.iterdir() if p.is_file())


def _decode(data: bytes) -> dict[str, Any]:
    recs = list(fastavro.reader(io.BytesIO(data)))
    assert len(recs) == 1
    rec = recs[0]
    assert isinstance(rec, dict)
    return rec


def _completed_rollbacks(table: HudiTable) -> list[tuple[Instant, dict[str, Any]]]:
    tl = table.timeline
    out = []
    for inst in tl.completed([Action.ROLLBACK]):
        name = inst.file_name(tl.layout_version)
        assert name == f"{inst.time}_{inst.completion_time}.rollback"
        out.append((inst, _decode(tl.read_bytes(inst))))
    return out


def _assert_rolled_back(kit: Any, table: HudiTable, crashed: str, files_before: list[str]) -> str:
    """The crashed instant was rolled back completely; returns the rollback instant time."""
    rollbacks = [(i, md) for i, md in _completed_rollbacks(table) if crashed in md["commitsRollback"]]
    assert len(rollbacks) == 1, _timeline_files(table)
    rb, md = rollbacks[0]
    assert md["commitsRollback"] == [crashed]
    assert md["instantsRollback"][0]["commitTime"] == crashed
    assert md["instantsRollback"][0]["action"] == Action.COMMIT
    assert md["startRollbackTime"] == rb.time
    deleted = sorted(f for p in md["partitionMetadata"].values() for f in p["successDeleteFiles"])
    assert deleted == sorted(files_before)
    assert md["totalFilesDeleted"] == len(files_before)
    assert rb.time > crashed and rb.completion_time is not None and rb.completion_time > rb.time
    # the rollback plan is there too, naming the crashed instant
    plan = _decode(table.timeline.read_bytes(Instant(rb.time, Action.ROLLBACK, State.REQUESTED)))
    assert plan["instantToRollback"]["commitTime"] == crashed
    # nothing of the crashed instant is left
    names = _timeline_files(table)
    assert f"{crashed}.commit.requested" not in names
    assert f"{crashed}.inflight" not in names
    assert not [n for n in names if n.startswith(crashed)], names
    assert kit.data_files_of(table.base_path, crashed) == []
    for f in files_before:
        assert not table.storage.exists(f)
    assert not table.storage.exists(markers.marker_dir(crashed))
    assert not table.storage.exists(f"{heartbeat.HEARTBEAT_DIR}/{crashed}")
    assert crashed not in [i.time for i in table.timeline.instants]
    return rb.time


def _crash_write(kit: Any, table: HudiTable, tmp_path: Path, point: str, op: str = "upsert") -> str:
    batch = tmp_path / "batch.parquet"
    pq.write_table(_upsert(kit), batch)
    rc = kit.run_python(WRITER, table.base_path, str(batch), op, crash_at=point)
    assert rc == faults.CRASH_EXIT_CODE
    pending = table.timeline.pending()
    assert len(pending) == 1, pending
    return pending[0].time


# ------------------------------------------------------------------------------ crash points


@pytest.mark.parametrize("point", WRITE_POINTS)
def test_crash_at_each_point_is_invisible_and_rolled_back_by_next_writer(
    point: str, kit: Any, trips_table: Any, tmp_path: Path
) -> None:
    table = trips_table()
    before = _first_commit(kit, table)
    crashed = _crash_write(kit, table, tmp_path, point)

    # the crash left what it had reached
    pending = table.timeline.pending()[0]
    assert pending.state is (State.REQUESTED if point == faults.AFTER_REQUESTED else State.INFLIGHT)
    left = kit.data_files_of(table.base_path, crashed)
    if point in (faults.AFTER_DATA_FILES, faults.BEFORE_COMPLETE):
        assert len(left) >= 3  # sf, nyc and the new la partition
        assert sorted(markers.marked_files(table.storage, crashed)) == sorted(left)
    else:
        assert left == []
    # the dead writer's heartbeat is still there: recovery must rely on its pid being gone
    beat = json.loads(table.storage.read_bytes(f"{heartbeat.HEARTBEAT_DIR}/{crashed}"))
    assert beat["host"] == socket.gethostname() and beat["pid"] != os.getpid()

    # (a) every reader sees exactly the table as it was
    assert kit.all_reads(table.base_path) == before

    # (b) the next write rolls the crashed instant back, then commits
    result = HudiTable.open(table.base_path).write(_upsert(kit), "upsert")
    rb_time = _assert_rolled_back(kit, table, crashed, left)
    assert result.instant_time > rb_time
    assert result.num_updates == 2 and result.num_inserts == 3
    reads = kit.all_reads(table.base_path)
    for name, got in reads.items():
        assert _strip_meta(got) == _expected_after_upsert(kit), name
        changed = {r["id"] for r in got if r["_hoodie_commit_time"] == result.instant_time}
        assert changed == {1, 4, 7, 8, 9}, name
    assert table.timeline.pending() == []


def test_crashed_insert_overwrite_is_invisible_and_rolled_back(
    kit: Any, trips_table: Any, tmp_path: Path
) -> None:
    table = trips_table()
    before = _first_commit(kit, table)
    crashed = _crash_write(kit, table, tmp_path, faults.BEFORE_COMPLETE, "insert_overwrite")
    names = _timeline_files(table)
    assert f"{crashed}.replacecommit.requested" in names
    assert f"{crashed}.replacecommit.inflight" in names
    assert kit.all_reads(table.base_path) == before
    left = kit.data_files_of(table.base_path, crashed)
    assert left

    table.write(kit.trips([10], ["sf"], 3, "v3"), "upsert")
    rollbacks = [md for _, md in _completed_rollbacks(table) if md["commitsRollback"] == [crashed]]
    assert len(rollbacks) == 1
    assert rollbacks[0]["instantsRollback"][0]["action"] == Action.REPLACE_COMMIT
    assert not [n for n in _timeline_files(table) if n.startswith(crashed)]
    assert kit.data_files_of(table.base_path, crashed) == []
    for name, got in kit.all_reads(table.base_path).items():
        assert got[:6] == before[name], name
        assert [r["id"] for r in got] == [1, 2, 3, 4, 5, 6, 10], name


# ------------------------------------------------------------------------------ interrupted rollback


@pytest.mark.parametrize("point", [faults.ROLLBACK_AFTER_PLAN, faults.ROLLBACK_AFTER_DELETE])
def test_interrupted_rollback_is_finished_by_next_writer(
    point: str, kit: Any, trips_table: Any, tmp_path: Path
) -> None:
    table = trips_table()
    before = _first_commit(kit, table)
    crashed = _crash_write(kit, table, tmp_path, faults.AFTER_DATA_FILES)
    left = kit.data_files_of(table.base_path, crashed)
    assert left

    assert kit.run_python(ROLLBACK_ONLY, table.base_path, crash_at=point) == faults.CRASH_EXIT_CODE
    tl = table.timeline
    pending_rb = tl.pending([Action.ROLLBACK])
    assert len(pending_rb) == 1 and pending_rb[0].state is State.INFLIGHT
    rb_time = pending_rb[0].time
    plan = _decode(tl.read_bytes(Instant(rb_time, Action.ROLLBACK, State.REQUESTED)))
    assert plan["instantToRollback"]["commitTime"] == crashed
    planned = sorted(f for r in plan["RollbackRequests"] for f in r["filesToBeDeleted"])
    assert planned == sorted(left)
    if point == faults.ROLLBACK_AFTER_DELETE:
        assert kit.data_files_of(table.base_path, crashed) == []
    else:
        assert sorted(kit.data_files_of(table.base_path, crashed)) == sorted(left)
    # the crashed write is still pending, and still invisible
    assert crashed in [i.time for i in table.timeline.pending([Action.COMMIT])]
    assert kit.all_reads(table.base_path) == before

    result = table.write(_upsert(kit), "upsert")
    # the pending rollback was finished (same instant), not replaced by a second one
    assert [i.time for i in table.timeline.completed([Action.ROLLBACK])] == [rb_time]
    assert _assert_rolled_back(kit, table, crashed, left) == rb_time
    for name, got in kit.all_reads(table.base_path).items():
        assert _strip_meta(got) == _expected_after_upsert(kit), name
    assert result.instant_time > rb_time
    assert table.timeline.pending() == []


def test_rollback_of_rollback_left_requested_only_is_finished(kit: Any, trips_table: Any) -> None:
    """A rollback that died right after writing its plan (no inflight file) is finished too."""
    table = trips_table()
    _first_commit(kit, table)
    proto = table.commit_protocol
    victim = proto.begin(Action.COMMIT)
    proto.set_inflight(victim)
    plan = {
        "instantToRollback": {"commitTime": victim.time, "action": Action.COMMIT},
        "RollbackRequests": [],
        "version": 1,
    }
    rb = proto.begin(Action.ROLLBACK, avro.encode("HoodieRollbackPlan", plan))
    assert table.timeline.pending([Action.ROLLBACK])[0].state is State.REQUESTED
    # just planned, no heartbeat yet: its owner may be alive, so the next writer leaves it alone
    table.rollback_failed_writes()
    assert [i.time for i in table.timeline.pending([Action.ROLLBACK])] == [rb.time]
    # once its files are older than the heartbeat timeout, its owner is gone: the next write finishes it
    stale = time.time() - 3 * heartbeat.DEFAULT_INTERVAL_MS / 1000 - 60
    for name in _timeline_files(table):
        if name.startswith((rb.time, victim.time)):
            os.utime(Path(table.storage.full(table.timeline.dir)) / name, (stale, stale))
    table.write(_upsert(kit), "upsert")
    done = table.timeline.completed([Action.ROLLBACK])
    assert [i.time for i in done] == [rb.time]
    assert f"{rb.time}.rollback.inflight" in _timeline_files(table)  # moved through inflight
    assert victim.time not in [i.time for i in table.timeline.instants]
    assert _strip_meta(kit.rows(table.read())) == _expected_after_upsert(kit)


# ------------------------------------------------------------------------------ live writers are left alone


def _pending_write(table: HudiTable) -> Instant:
    proto = table.commit_protocol
    inst = proto.begin(Action.COMMIT)
    proto.set_inflight(inst)
    return inst


def test_pending_instant_with_live_heartbeat_thread_is_not_rolled_back(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    beat = heartbeat.Heartbeat(table.storage, inst.time).start()
    try:
        table.write(_upsert(kit), "upsert")
        assert inst.time in [i.time for i in table.timeline.pending()]
        assert table.rollback_failed_writes() == []
        assert table.timeline.completed([Action.ROLLBACK]) == []
    finally:
        beat.stop(delete=False)
    # same process, heartbeat thread gone: that writer is certainly dead
    assert table.rollback_failed_writes() == [inst.time]
    assert table.timeline.pending() == []


def _write_beat(table: HudiTable, instant_time: str, body: bytes, age_s: float = 0) -> None:
    rel = f"{heartbeat.HEARTBEAT_DIR}/{instant_time}"
    table.storage.write_bytes(rel, body)
    if age_s:
        t = time.time() - age_s
        os.utime(table.storage.full(rel), (t, t))


def test_fresh_heartbeat_from_another_host_is_not_rolled_back(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    body = {
        "host": f"not-{socket.gethostname()}",
        "pid": os.getpid() + 100000,
        "ts_ms": int(time.time() * 1000),
    }
    _write_beat(table, inst.time, json.dumps(body).encode())
    table.write(_upsert(kit), "upsert")
    assert inst.time in [i.time for i in table.timeline.pending()]
    assert table.timeline.completed([Action.ROLLBACK]) == []

    # the same heartbeat, last refreshed 10 minutes ago: expired
    body["ts_ms"] = int((time.time() - 600) * 1000)
    _write_beat(table, inst.time, json.dumps(body).encode(), age_s=600)
    assert table.rollback_failed_writes() == [inst.time]


def test_same_host_name_in_another_pid_namespace_is_judged_by_age(kit: Any, trips_table: Any) -> None:
    """Containers can share a host name but not pids: a pid from another namespace proves nothing."""
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    dead_pid = 2**22 + 12345  # above Linux's pid_max: no such process here
    body = {
        "host": socket.gethostname(),
        "pid_ns": "pid:[1]",
        "pid": dead_pid,
        "ts_ms": int(time.time() * 1000),
    }
    _write_beat(table, inst.time, json.dumps(body).encode())
    assert table.rollback_failed_writes() == []
    # the same dead pid in our own namespace (as our own heartbeat records it): certainly dead
    heartbeat.Heartbeat(table.storage, "20000101000000000").beat()
    ours = json.loads(table.storage.read_bytes(f"{heartbeat.HEARTBEAT_DIR}/20000101000000000"))
    assert ours["pid_ns"] != "pid:[1]"
    _write_beat(table, inst.time, json.dumps({**body, "pid_ns": ours["pid_ns"]}).encode())
    assert table.rollback_failed_writes() == [inst.time]


def test_pending_instant_honours_the_writers_own_heartbeat_interval(kit: Any, trips_table: Any) -> None:
    """A writer beating every 10 minutes is alive 5 minutes after its last beat."""
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    body = {
        "host": f"not-{socket.gethostname()}",
        "pid": 1,
        "ts_ms": int((time.time() - 300) * 1000),
        "interval_ms": 600_000,
    }
    _write_beat(table, inst.time, json.dumps(body).encode(), age_s=300)
    assert table.rollback_failed_writes() == []


def test_java_writer_heartbeat_uses_file_modification_time(kit: Any, trips_table: Any) -> None:
    """Apache Hudi's heartbeat files are empty: the modification time is the last beat."""
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    _write_beat(table, inst.time, b"")
    assert table.rollback_failed_writes() == []
    assert inst.time in [i.time for i in table.timeline.pending()]
    _write_beat(table, inst.time, b"", age_s=600)
    assert table.rollback_failed_writes() == [inst.time]


def test_pending_instant_without_heartbeat_yet_is_not_rolled_back(kit: Any, trips_table: Any) -> None:
    """Between ``begin`` and the first beat a writer has no heartbeat file; it is not dead."""
    table = trips_table()
    _first_commit(kit, table)
    inst = _pending_write(table)
    assert table.rollback_failed_writes() == []
    assert inst.time in [i.time for i in table.timeline.pending()]
    # long abandoned (timeline files 10 minutes old, no heartbeat ever): rolled back
    old = time.time() - 600
    tdir = Path(table.storage.full(table.timeline.dir))
    for p in tdir.iterdir():
        if p.name.startswith(inst.time):
            os.utime(p, (old, old))
    assert table.rollback_failed_writes() == [inst.time]


# ------------------------------------------------------------------------------ failure inside the write


def test_exception_after_files_were_written_rolls_the_write_back(
    kit: Any, trips_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = trips_table()
    before = _first_commit(kit, table)
    real = write_run.write_file_group
    written: list[str] = []

    def flaky(storage: Any, ctx: Any, fg: Any, task_id: int, attempt: int = 0) -> Any:
        if len(written) == 1:
            assert table.storage.exists(written[0])  # the first file group is on disk
            raise RuntimeError("disk on fire")
        stat = real(storage, ctx, fg, task_id, attempt)
        written.append(stat.path)
        return stat

    monkeypatch.setattr(write_run, "write_file_group", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        table.write(_upsert(kit), "upsert")
    monkeypatch.undo()

    parsed = BaseFile.parse(written[0])
    assert parsed is not None
    failed = parsed.instant_time
    assert table.timeline.pending() == []
    _assert_rolled_back(kit, table, failed, written)
    assert kit.all_reads(table.base_path) == before

    table.write(_upsert(kit), "upsert")
    for name, got in kit.all_reads(table.base_path).items():
        assert _strip_meta(got) == _expected_after_upsert(kit), name


# ------------------------------------------------------------------------------ markers


def test_markers_name_the_files_of_a_write(tmp_path: Path) -> None:
    from inlet.core.storage import Storage

    storage = Storage(str(tmp_path / "t"))
    t = "20240102030405678"
    markers.create_marker(storage, t, "sf", "f1-0_0-0-0_20240102030405678.parquet", "CREATE")
    markers.create_marker(storage, t, "a/b/c", "f2-0_1-0-0_20240102030405678.parquet", "MERGE")
    markers.create_marker(storage, t, "", "f3-0_2-0-0_20240102030405678.parquet", "CREATE")
    assert storage.exists(f".hoodie/.temp/{t}/sf/f1-0_0-0-0_{t}.parquet.marker.CREATE")
    # Apache Hudi's timeline-server-based markers: MARKERS<n> files listing markers, one a line
    storage.write_bytes(f".hoodie/.temp/{t}/MARKERS.type", b"TIMELINE_SERVER_BASED")
    storage.write_bytes(
        f".hoodie/.temp/{t}/MARKERS0",
        f"nyc/f4-0_3-0-0_{t}.parquet.marker.CREATE\nnyc/.f5-0_{t}.log.1_4-0-0.marker.APPEND\n".encode(),
    )
    assert markers.marked_files(storage, t) == sorted(
        [
            f"sf/f1-0_0-0-0_{t}.parquet",
            f"a/b/c/f2-0_1-0-0_{t}.parquet",
            f"f3-0_2-0-0_{t}.parquet",
            f"nyc/f4-0_3-0-0_{t}.parquet",
            f"nyc/.f5-0_{t}.log.1_4-0-0",
        ]
    )
    assert markers.marked_files(storage, "20240102030405679") == []
    markers.delete_markers(storage, t)
    assert not storage.exists(markers.marker_dir(t))
    assert markers.marked_files(storage, t) == []
