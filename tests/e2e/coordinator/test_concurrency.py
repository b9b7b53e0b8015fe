"""Several writer processes on one table, through a coordinator subprocess.

The interleavings are forced with gate files (see writer.py): every writer has begun its instant
and written its files before any of them completes, so each pair of writers is truly concurrent,
and the expected conflicts are known in advance from the file groups each writer touches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.services.coordinator_client.client import GrpcCommitProtocol

READER_VERSIONS = ("1", "2")


def seed(
    e2e: Any,
    coordinator: Any,
    table_id: str,
    path: Path,
    mode: str,
    data: list[dict[str, Any]],
    compact: bool = False,
    options: dict[str, str] | None = None,
) -> Any:
    """Register the table and write its first commit through the coordinator (from this process);
    with ``compact``, compact it at once (through the coordinator too), so that file slices have
    base files."""
    with e2e.client(coordinator) as client:
        client.register_table(table_id, str(path), mode=mode)
        protocol = GrpcCommitProtocol(client, table_id, Storage(str(path)), writer_id="seed")
        try:
            table = HudiTable.open(str(path), commit_protocol=protocol)
            first = table.write(pa.Table.from_pylist(data), "upsert", options=options)
            if compact:
                done = table.compact({"hoodie.compact.inline.max.delta.commits": "1"})
                assert done is not None and done.action == "commit", done
            return first
        finally:
            protocol.close()


def apply(model: dict[int, dict[str, Any]], data: list[dict[str, Any]], event_time: bool = True) -> None:
    """Upsert ``data`` into the model: EVENT_TIME_ORDERING, a tie goes to the later write."""
    for r in data:
        old = model.get(r["id"])
        if old is None or not event_time or r["ts"] >= old["ts"]:
            model[r["id"]] = dict(r)


def files_of(path: Path, instant_time: str) -> list[str]:
    """Data files (base or log) written by ``instant_time`` anywhere in the table."""
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and instant_time in p.name
    )


def test_occ_conflicts_exactly_the_overlapping_file_groups(e2e: Any) -> None:
    """Seven writer processes, all begun before any completes: w1/w2 update file group a, w3/w4 file
    group b, w5 file group c, w6 and w7 two different file groups of partition d. Exactly one of
    w1/w2 and one of w3/w4 fails with a ConflictError that names the other's instant and the shared
    file group; w5, w6, w7 and the winners commit; the losers are rolled back; hudi-rs reads the
    seed + the winners."""
    coordinator = e2e.coordinator()
    path = e2e.cow_table("occ")
    data0 = (
        e2e.rows([1, 2, 3], "a", 1, 1.0)
        + e2e.rows([4, 5, 6], "b", 1, 1.0)
        + e2e.rows([7, 8], "c", 1, 1.0)
        + e2e.rows([9], "d", 1, 1.0)
    )
    first = seed(e2e, coordinator, "occ", path, "OPTIMISTIC", data0)
    group = {s.partition_path: s.file_id for s in first.metadata.write_stats()}
    assert sorted(group) == ["a", "b", "c", "d"]  # one file group per partition
    # a second file group in partition d (no small file to pack the insert into)
    data1 = e2e.rows([10], "d", 1, 1.0)
    second = seed(
        e2e, coordinator, "occ", path, "OPTIMISTIC", data1, options={"hoodie.parquet.small.file.limit": "0"}
    )
    [d2] = [s.file_id for s in second.metadata.write_stats()]
    assert d2 != group["d"]

    plan = {
        "w1": e2e.rows([1], "a", 2, 10.0),
        "w2": e2e.rows([2, 3], "a", 2, 20.0),
        "w3": e2e.rows([4], "b", 2, 30.0),
        "w4": e2e.rows([5], "b", 2, 40.0),
        "w5": e2e.rows([7, 8], "c", 2, 50.0),
        "w6": e2e.rows([9], "d", 2, 60.0),  # w6 and w7: the same partition, other file groups
        "w7": e2e.rows([10], "d", 2, 70.0),
    }
    everyone = [f"{n}.ready" for n in plan]
    writers = {
        n: e2e.writer(coordinator, "occ", path, n, [{"op": "upsert", "rows": r}], complete_after=everyone)
        for n, r in plan.items()
    }
    e2e.wait_writers(list(writers.values()))
    journal = {n: w.journal() for n, w in writers.items()}
    begun = {n: next(e["instant"] for e in j if e["event"] == "begun") for n, j in journal.items()}
    acked = {n: w.acked() for n, w in writers.items()}
    failed = {n: w.failed() for n, w in writers.items()}

    for n in ("w5", "w6", "w7"):
        assert acked[n] and not failed[n], journal[n]
    for x, y, partition in (("w1", "w2", "a"), ("w3", "w4", "b")):
        winners = [n for n in (x, y) if acked[n]]
        losers = [n for n in (x, y) if failed[n]]
        assert len(winners) == 1 and len(losers) == 1, (journal[x], journal[y])
        [win], [lose] = winners, losers
        [f] = failed[lose]
        assert f["conflict"] and f["error"] == "ConflictError", f
        assert f["instant"] == begun[lose]
        assert f["other"] == begun[win], f"{lose}'s conflict must name {win}'s instant: {f}"
        assert begun[win] in f["message"]
        assert f["file_groups"] == [[partition, group[partition]]], f
        # the loser was rolled back: no file of its instant is left
        assert files_of(path, begun[lose]) == []

    tl = e2e.check_times(path, "occ")
    rolled = {i.time for i in tl if i.action == "rollback" and i.is_completed}
    assert len(rolled) == 2
    completed_writes = sorted(i.time for i in tl if i.is_completed and i.action == "commit")
    winners_times = sorted(a["instant"] for n in plan for a in acked[n])
    assert completed_writes == sorted([first.instant_time, second.instant_time, *winners_times])
    assert not [i for i in tl if not i.is_completed], "nothing may stay pending"
    by_time = {r.instant_time: r for r in e2e.db_instants("occ")}
    for n in plan:
        if failed[n]:
            assert by_time[begun[n]].state == "ROLLED_BACK"
            assert by_time[begun[n]].rolled_back_by in rolled

    model: dict[int, dict[str, Any]] = {}
    apply(model, data0 + data1)
    for n in sorted((n for n in plan if acked[n]), key=lambda n: acked[n][0]["completion"]):
        apply(model, plan[n])
    expected = sorted(model.values(), key=lambda r: r["id"])
    for version in READER_VERSIONS:
        assert e2e.hudi_rows(path, version) == expected, f"hudi-rs file group reader v{version}"
    assert e2e.inlet_rows(path) == expected


def nbcc_run(e2e: Any, merge_mode: str, writes: Any) -> tuple[Path, list[dict[str, Any]], list[str], Any]:
    """Three writer processes upsert ``writes(k)`` into the same bucket file groups of an NBCC
    table (seeded with ``data0`` and compacted once, so slices have base files). They begin in the
    order w0, w1, w2 and complete in the reverse order w2, w1, w0 (all begun and written before the
    first completes). Checks that all commit, appending logs to the seed's file groups, with times
    in order; returns (path, seed rows, completion times, timeline)."""
    coordinator = e2e.coordinator()
    path = e2e.nbcc_table("nbcc", buckets=2, merge_mode=merge_mode)
    data0 = e2e.rows([1, 2, 3, 4, 5], "sf", 1, 1.0)
    first = seed(e2e, coordinator, "nbcc", path, "NON_BLOCKING", data0, compact=True)
    seed_groups = {(s.partition_path, s.file_id) for s in first.metadata.write_stats()}
    assert len(seed_groups) == 2

    everyone = [f"w{k}.ready" for k in range(3)]
    order = {
        "w0": {"begin_after": [], "complete_after": [*everyone, "w1.done"]},
        "w1": {"begin_after": ["w0.begun"], "complete_after": [*everyone, "w2.done"]},
        "w2": {"begin_after": ["w1.begun"], "complete_after": everyone},
    }
    writers = [
        e2e.writer(
            coordinator, "nbcc", path, f"w{k}", [{"op": "upsert", "rows": writes(k)}], **order[f"w{k}"]
        )
        for k in range(3)
    ]
    e2e.wait_writers(writers)
    acked = {w.name: w.acked() for w in writers}
    assert all(len(a) == 1 for a in acked.values()) and not any(w.failed() for w in writers), [
        w.journal() for w in writers
    ]
    begun = [acked[f"w{k}"][0]["instant"] for k in range(3)]
    completed = [acked[f"w{k}"][0]["completion"] for k in range(3)]
    assert begun == sorted(begun) and completed == sorted(completed, reverse=True), (begun, completed)
    assert all(a[0]["action"] == "deltacommit" for a in acked.values())
    # all three appended logs to the seed's bucket file groups (no new file group under NBCC)
    tl = e2e.check_times(path, "nbcc")
    table = HudiTable.open(str(path))
    for t in begun:
        md = table.timeline.commit_metadata(next(i for i in tl if i.time == t))
        assert {(s.partition_path, s.file_id) for s in md.write_stats()} <= seed_groups
        assert all(s.log_files for s in md.write_stats())
    return path, data0, completed, tl


def reads(e2e: Any, path: Path) -> dict[str, list[dict[str, Any]]]:
    return {f"hudi-rs v{v}": e2e.hudi_rows(path, v) for v in READER_VERSIONS} | {
        "inlet": e2e.inlet_rows(path)
    }


def test_nbcc_concurrent_upserts_all_commit_and_merge(e2e: Any) -> None:
    """NBCC, event-time ordering: the three concurrent writers' updates of the same keys all land
    (distinct event times, so every key has one right answer whatever the order), and every
    reader's snapshot equals the model applied in completion-time order."""
    ts = {0: (9, 9, 7, 5), 1: (8, 7, 9, 6), 2: (7, 8, 8, 7)}  # per writer: ts of ids 1, 2, 3, 4

    def writes(k: int) -> list[dict[str, Any]]:
        shared: list[dict[str, Any]] = [
            e2e.rows([i + 1], "sf", t, 100.0 * (k + 1))[0] for i, t in enumerate(ts[k])
        ]
        own: list[dict[str, Any]] = e2e.rows([10 + k], "sf", 5, 100.0 * (k + 1))
        return shared + own

    path, data0, completed, _tl = nbcc_run(e2e, "EVENT_TIME_ORDERING", writes)
    model: dict[int, dict[str, Any]] = {}
    apply(model, data0)
    for k in sorted(range(3), key=lambda k: completed[k]):
        apply(model, writes(k))
    expected = sorted(model.values(), key=lambda r: r["id"])
    assert [r["fare"] for r in expected[:5]] == [100.01, 100.02, 200.03, 300.04, 1.05]
    wrong = {reader: rows for reader, rows in reads(e2e, path).items() if rows != expected}
    assert not wrong, f"expected {expected}, but {wrong}"


def test_nbcc_same_key_updates_merge_in_instant_time_order(e2e: Any) -> None:
    """NBCC with commit-time ordering and the writers updating the same keys: Apache Hudi's file
    group reader, hudi-rs (both readers) and Inlet's reader order a file slice's log files by their
    deltacommit's instant time, so the writer that began last wins even though it completed first.
    (DESIGN §4 speaks of completion-time order; the readers of the format decide, and this test pins
    Inlet to them.) Every reader must give the model applied in instant-time order."""
    merge_mode = "COMMIT_TIME_ORDERING"

    def writes(k: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = e2e.rows([1, 2, 3, 4, 10 + k], "sf", 5, 100.0 * (k + 1))
        return rows

    path, data0, completed, _tl = nbcc_run(e2e, merge_mode, writes)
    model: dict[int, dict[str, Any]] = {}
    apply(model, data0, False)
    for k in range(3):  # the writers began (took instant times) in the order w0, w1, w2
        apply(model, writes(k), False)
    expected = sorted(model.values(), key=lambda r: r["id"])
    assert completed == sorted(completed, reverse=True)  # w2 completed first, yet wins
    assert [r["fare"] for r in expected[:4]] == [300.0 + i / 100 for i in range(1, 5)]
    got = reads(e2e, path)
    wrong = {reader: rows for reader, rows in got.items() if rows != expected}
    assert not wrong, f"expected (instant-time order) {expected}, but {wrong}"


def test_occ_commit_completed_between_plan_and_begin_is_not_lost(e2e: Any) -> None:
    """Writer a plans its upsert of file group g (reads the file slice), then writer b upserts
    another key of g and commits, then a begins, writes and commits. a's rewrite of g must not drop
    b's update: either a fails with a conflict, or the table holds both updates."""
    coordinator = e2e.coordinator()
    path = e2e.cow_table("stale")
    data0 = e2e.rows([1, 2], "a", 1, 1.0)
    seed(e2e, coordinator, "stale", path, "OPTIMISTIC", data0)
    a = e2e.writer(
        coordinator,
        "stale",
        path,
        "a",
        [{"op": "upsert", "rows": e2e.rows([1], "a", 2, 10.0)}],
        begin_after=["b.done"],
    )
    b = e2e.writer(
        coordinator,
        "stale",
        path,
        "b",
        [{"op": "upsert", "rows": e2e.rows([2], "a", 2, 20.0)}],
        begin_after=["a.planned"],
    )
    e2e.wait_writers([a, b])
    assert b.acked(), b.journal()
    e2e.check_times(path, "stale")
    rows = e2e.hudi_rows(path, "2")
    if a.failed():
        assert a.failed()[0]["conflict"], a.journal()
        assert rows == e2e.rows([1], "a", 1, 1.0) + e2e.rows([2], "a", 2, 20.0)
    else:
        assert rows == e2e.rows([1], "a", 2, 10.0) + e2e.rows([2], "a", 2, 20.0), (
            f"b's committed update was lost: a ({a.acked()}) rewrote the file group from the slice it "
            f"planned on before b ({b.acked()}) completed"
        )
