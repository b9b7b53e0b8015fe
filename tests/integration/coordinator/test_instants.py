"""Registration, instant times, completion, idempotent retries, restarts and the outbox, against a
real coordinator (gRPC on 127.0.0.1) and a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from coordinator_helpers import rows

from inlet.core import HudiTable
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant, State
from inlet.proto.coordinator.v1 import coordinator_pb2
from inlet.proto.events.v1 import events_pb2
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorCallError, CoordinatorClient


def make_table(lake: Path, name: str = "trips", **kwargs: Any) -> Path:
    path = lake / name
    HudiTable.create(
        str(path), name=name, record_key="id", partition_by="city", ordering_field="ts", **kwargs
    )
    return path


def timeline_files(path: Path) -> set[str]:
    return {p.name for p in (path / ".hoodie" / "timeline").iterdir() if p.is_file()}


def outbox(pg_url: str) -> list[tuple[str, str, int, bytes]]:
    with psycopg.connect(pg_url) as conn:
        return [
            (r[0], r[1], r[2], bytes(r[3]))
            for r in conn.execute("SELECT event_id, table_id, sequence, payload FROM outbox ORDER BY id")
        ]


def one_file_metadata(partition: str, file_id: str, op: str = "UPSERT") -> CommitMetadata:
    md = CommitMetadata(operation_type=op)
    md.add(
        WriteStat(file_id, f"{partition}/{file_id}_0-0-0_x.parquet", partition, num_inserts=1, num_writes=1)
    )
    return md


# ---------------------------------------------------------------------- registration


def test_register_and_describe(client: CoordinatorClient, lake: Path) -> None:
    path = make_table(lake, table_type="MERGE_ON_READ")
    table = client.register_table("sales.trips", f"file://{path}", heartbeat_timeout_ms=5000)
    assert table.table_id == "sales.trips"
    assert table.base_path == str(path.resolve())
    assert (table.table_name, table.table_type) == ("trips", "MERGE_ON_READ")
    assert table.concurrency_mode == coordinator_pb2.CONCURRENCY_MODE_OPTIMISTIC  # the server default
    assert table.heartbeat_timeout_ms == 5000
    # idempotent: the same (or unspecified) settings return the registration
    again = client.register_table("sales.trips", str(path), mode="OPTIMISTIC")
    assert again == table
    with pytest.raises(CoordinatorCallError) as e:
        client.register_table("sales.trips", str(path), mode="SINGLE_WRITER")
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and "OPTIMISTIC" in e.value.details
    with pytest.raises(CoordinatorCallError) as e:
        client.register_table("sales.other", str(path))
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and "sales.trips" in e.value.details

    desc = client.describe_table("sales.trips")
    assert desc.table == table and not desc.pending and not desc.HasField("latest_completed")
    begun = client.begin_instant("sales.trips", "deltacommit", writer_id="w1").instant
    desc = client.describe_table("sales.trips")
    assert [(i.instant_time, i.action, i.state) for i in desc.pending] == [
        (begun.instant_time, "deltacommit", 1)
    ]
    done = client.complete_instant(
        "sales.trips", begun.instant_time, "deltacommit", metadata=CommitMetadata()
    )
    desc = client.describe_table("sales.trips")
    assert not desc.pending
    assert desc.latest_completed.instant_time == begun.instant_time
    assert desc.latest_completed.completion_time == done.instant.completion_time > begun.instant_time


def test_bad_requests_get_precise_codes(client: CoordinatorClient, lake: Path, tmp_path: Path) -> None:
    path = make_table(lake)
    outside = tmp_path / "outside"
    HudiTable.create(str(outside), name="outside", record_key="id")

    def code(fn: Callable[[], Any]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(CoordinatorCallError) as e:
            fn()
        return e.value.code, e.value.details

    assert code(lambda: client.register_table("bad/id", str(path)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert code(lambda: client.register_table("t" * 201, str(path)))[0] == grpc.StatusCode.INVALID_ARGUMENT
    c, msg = code(lambda: client.register_table("x.outside", str(outside)))
    assert c == grpc.StatusCode.PERMISSION_DENIED and "outside the lake roots" in msg
    c, msg = code(lambda: client.register_table("x.escape", str(lake / ".." / "outside")))
    assert c == grpc.StatusCode.PERMISSION_DENIED
    assert (
        code(lambda: client.register_table("x.s3", "s3://bucket/lake/t"))[0]
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert code(lambda: client.register_table("x.rel", "lake/t"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    c, msg = code(lambda: client.register_table("x.none", str(lake / "missing")))
    assert c == grpc.StatusCode.NOT_FOUND and "hoodie.properties" in msg
    c, msg = code(lambda: client.register_table("x.nbcc", str(path), mode="NON_BLOCKING"))
    assert c == grpc.StatusCode.FAILED_PRECONDITION and "Merge-on-Read" in msg

    client.register_table("t1", str(path))
    assert code(lambda: client.describe_table("nope"))[0] == grpc.StatusCode.NOT_FOUND
    assert code(lambda: client.begin_instant("t1", "kommit"))[0] == grpc.StatusCode.INVALID_ARGUMENT
    for bad_time in ("2024", "2024010100000000x", "20241399000000000"):
        c, msg = code(lambda t=bad_time: client.heartbeat("t1", t))  # type: ignore[misc]
        assert c == grpc.StatusCode.INVALID_ARGUMENT and "instant time" in msg
    assert code(lambda: client.heartbeat("t1", "20200101000000000"))[0] == grpc.StatusCode.NOT_FOUND
    c, _ = code(
        lambda: client.complete_instant("t1", "20200101000000000", "commit", metadata=CommitMetadata())
    )
    assert c == grpc.StatusCode.NOT_FOUND
    begun = client.begin_instant("t1", "commit").instant.instant_time
    bad = one_file_metadata("sf", "f1")
    bad.partition_to_write_stats["sf"][0].path = "../../etc/passwd"
    c, msg = code(lambda: client.complete_instant("t1", begun, "commit", metadata=bad))
    assert c == grpc.StatusCode.INVALID_ARGUMENT and "'..'" in msg
    c, msg = code(lambda: client.complete_instant("t1", begun, "deltacommit", metadata=CommitMetadata()))
    assert c == grpc.StatusCode.INVALID_ARGUMENT and "is a commit" in msg
    # nothing of the refused completions reached the timeline
    assert f"{begun}.commit.requested" in timeline_files(path)
    assert not [f for f in timeline_files(path) if f.startswith(f"{begun}_")]


# ---------------------------------------------------------------------- instant times


def test_instant_times_strictly_increase_across_threads(client: CoordinatorClient, lake: Path) -> None:
    path = make_table(lake)
    client.register_table("t", str(path))
    # a timeline instant written without the coordinator, later than anything it issued: times follow it
    first = client.begin_instant("t", "commit").instant.instant_time
    per_thread: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(n: int) -> None:
        try:
            with CoordinatorClient(client.target) as c:
                barrier.wait()
                per_thread[n] = [
                    c.begin_instant("t", "commit", writer_id=f"w{n}").instant.instant_time for _ in range(6)
                ]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    issued = [t for times in per_thread.values() for t in times]
    assert len(issued) == 48 and len(set(issued)) == 48, "an instant time was issued twice"
    assert all(len(t) == 17 and t.isdigit() and t > first for t in issued)
    for times in per_thread.values():
        assert times == sorted(times) and len(set(times)) == len(times)
    # every issued time has its requested file
    files = timeline_files(path)
    assert all(f"{t}.commit.requested" in files for t in issued)


def test_times_follow_a_timeline_ahead_of_the_database(client: CoordinatorClient, lake: Path) -> None:
    path = make_table(lake)
    client.register_table("t", str(path))
    t0 = client.begin_instant("t", "commit").instant.instant_time
    # an instant written by someone else (e.g. Apache Hudi) 500 ms in the future of the coordinator
    ahead = str(int(t0) + 500)
    (path / ".hoodie" / "timeline" / f"{ahead}.deltacommit.requested").write_bytes(b"")
    t1 = client.begin_instant("t", "commit").instant.instant_time
    assert t1 > ahead


# ---------------------------------------------------------------------- completion and idempotency


def test_idempotent_begin_and_complete_with_outbox_once(
    client: CoordinatorClient, lake: Path, pg_url: str
) -> None:
    path = make_table(lake)
    client.register_table("t", str(path))
    a = client.begin_instant("t", "commit", writer_id="w", request_id="begin-1").instant
    again = client.begin_instant("t", "commit", writer_id="w", request_id="begin-1").instant
    assert again.instant_time == a.instant_time  # a retried BeginInstant issues nothing new
    assert [f for f in timeline_files(path) if f.endswith(".requested")] == [
        f"{a.instant_time}.commit.requested"
    ]

    md = one_file_metadata("sf", "f1")
    first = client.complete_instant("t", a.instant_time, "commit", metadata=md, request_id="done-1")
    retry = client.complete_instant("t", a.instant_time, "commit", metadata=md, request_id="done-1")
    assert retry.instant == first.instant and retry.event_id == first.event_id == f"t/{a.instant_time}"
    completed = [f for f in timeline_files(path) if f.startswith(f"{a.instant_time}_")]
    assert completed == [f"{a.instant_time}_{first.instant.completion_time}.commit"]
    with pytest.raises(CoordinatorCallError) as e:  # another completion of the same instant is refused
        client.complete_instant("t", a.instant_time, "commit", metadata=md, request_id="done-2")
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "already completed" in e.value.details

    b = client.begin_instant("t", "commit").instant
    client.complete_instant("t", b.instant_time, "commit", metadata=one_file_metadata("la", "f2"))
    events = outbox(pg_url)
    assert [(eid, tid, seq) for eid, tid, seq, _ in events] == [
        (f"t/{a.instant_time}", "t", 1),
        (f"t/{b.instant_time}", "t", 2),
    ]
    ev = events_pb2.CommitEvent.FromString(events[0][3])
    assert ev.instant.instant_time == a.instant_time
    assert ev.instant.completion_time == first.instant.completion_time
    assert (ev.num_inserts, ev.num_files, ev.table_name, ev.base_path) == (1, 1, "trips", str(path.resolve()))
    assert [s.file_id for s in ev.metadata.partition_to_write_stats["sf"].stats] == ["f1"]


def test_completed_file_without_database_record_is_recovered(
    client: CoordinatorClient, lake: Path, pg_url: str
) -> None:
    """The coordinator wrote <t>_<c>.commit but its transaction did not commit (it crashed): the
    client's retry finds the completion on the timeline, records it with its outbox row, and
    returns it; the next begin issues a later time."""
    path = make_table(lake)
    client.register_table("t", str(path))
    t = client.begin_instant("t", "commit").instant.instant_time
    md = one_file_metadata("sf", "f1")
    completion = str(int(t) + 7)
    tl = Timeline.load(HudiTable.open(str(path)).storage, 2)
    tl.storage.write_atomic(tl.path_of(Instant(t, "commit", State.COMPLETED, completion)), md.to_bytes())
    resp = client.complete_instant("t", t, "commit", metadata=md, request_id="retry-after-crash")
    assert resp.instant.completion_time == completion
    assert [e[0] for e in outbox(pg_url)] == [f"t/{t}"]
    assert client.begin_instant("t", "commit").instant.instant_time > completion
    again = client.complete_instant("t", t, "commit", metadata=md, request_id="retry-after-crash")
    assert again.instant.completion_time == completion and len(outbox(pg_url)) == 1


def test_restart_continues_on_the_same_database(
    start_coordinator: Callable[..., RunningServer],
    lake: Path,
    pg_url: str,
    open_table: Callable[..., HudiTable],
) -> None:
    path = make_table(lake)
    first = start_coordinator()
    c1 = CoordinatorClient(first.address)
    c1.register_table("t", str(path))
    table = open_table(c1, "t", path)
    w1 = table.write(rows([1, 2], "sf", 1), "insert")
    pending = c1.begin_instant("t", "commit", writer_id="survivor", request_id="b-1").instant.instant_time
    c1.mark_inflight("t", pending)
    finished = c1.begin_instant("t", "commit").instant.instant_time
    answer = c1.complete_instant(
        "t", finished, "commit", metadata=one_file_metadata("ny", "fy"), request_id="c-1"
    )
    port = first.port
    first.stop()
    c1.close()

    second = start_coordinator(listen=f"127.0.0.1:{port}")
    c2 = CoordinatorClient(second.address)
    assert c2.describe_table("t").table.table_id == "t"  # the registration survived
    # a retried begin with the same request id (its answer was lost in the restart) gets the same instant
    assert (
        c2.begin_instant("t", "commit", writer_id="survivor", request_id="b-1").instant.instant_time
        == pending
    )
    # a retried completion whose answer was lost in the restart gets the same answer
    again = c2.complete_instant(
        "t", finished, "commit", metadata=one_file_metadata("ny", "fy"), request_id="c-1"
    )
    assert again.instant == answer.instant
    done = c2.complete_instant("t", pending, "commit", metadata=one_file_metadata("la", "fx"))
    assert done.instant.completion_time > answer.instant.completion_time > pending > w1.completion_time
    later = open_table(c2, "t", path).write(rows([3], "sf", 1), "insert")
    assert later.instant_time > done.instant.completion_time
    assert [e[2] for e in outbox(pg_url)] == [1, 2, 3, 4]
    c2.close()


def test_abort_rolls_back_a_pending_write(
    client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable]
) -> None:
    path = make_table(lake)
    client.register_table("t", str(path))
    table = open_table(client, "t", path)
    table.write(rows([1, 2], "sf", 1), "insert")
    before = table.read().sort_by("id").to_pylist()
    t = client.begin_instant("t", "commit").instant.instant_time
    data_file = path / "sf" / f"abc-0_0-0-0_{t}.parquet"
    data_file.write_bytes(b"partial")
    resp = client.abort_instant("t", t, "test")
    assert resp.rollback_instant_time > t
    assert list(resp.deleted_files) == [f"sf/{data_file.name}"] and not data_file.exists()
    files = timeline_files(path)
    assert not [f for f in files if f.startswith(t)]
    assert [f for f in files if f.endswith(".rollback") and f.startswith(resp.rollback_instant_time)]
    assert HudiTable.open(str(path)).read().sort_by("id").to_pylist() == before
    with pytest.raises(CoordinatorCallError) as e:
        client.complete_instant("t", t, "commit", metadata=CommitMetadata())
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "rolled back" in e.value.details


def test_outbox_once_per_completed_instant_in_completion_order(
    client: CoordinatorClient, lake: Path, pg_url: str, open_table: Callable[..., HudiTable]
) -> None:
    """Writers on two tables at once (some failing with conflicts, whose rollbacks complete too):
    every completed instant of each timeline has exactly one event, numbered 1..n in completion
    order, with the counts its commit metadata records."""
    paths = {tid: make_table(lake, name) for tid, name in (("a.t", "ta"), ("b.t", "tb"))}
    for tid, path in paths.items():
        client.register_table(tid, str(path))
        open_table(client, tid, path).write(rows(list(range(10)), "sf", 0), "insert")
    errors: list[BaseException] = []

    def writer(tid: str, n: int) -> None:
        with CoordinatorClient(client.target) as c:
            table = open_table(c, tid, paths[tid])
            for i in range(3):
                try:
                    table.write(rows([n * 3 + i], "sf", i + 1, fare=float(n)), "upsert")
                except Exception as e:  # conflicts are expected; anything else is not
                    if "conflict" not in str(e) and "rolled back" not in str(e):
                        errors.append(e)

    threads = [threading.Thread(target=writer, args=(tid, n)) for tid in paths for n in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    events = [events_pb2.CommitEvent.FromString(p) for _eid, _tid, _seq, p in outbox(pg_url)]
    assert len({e.event_id for e in events}) == len(events)
    for tid, path in paths.items():
        tl = HudiTable.open(str(path)).timeline
        assert not tl.pending()
        completed = sorted(tl.completed(), key=lambda i: i.completion_time or "")
        mine = sorted((e for e in events if e.table_id == tid), key=lambda e: e.sequence)
        assert [e.sequence for e in mine] == list(range(1, len(completed) + 1))
        assert [(e.instant.instant_time, e.instant.completion_time, e.instant.action) for e in mine] == [
            (i.time, i.completion_time, i.action) for i in completed
        ]
        for e, inst in zip(mine, completed, strict=True):
            if inst.action == "commit":
                md = tl.commit_metadata(inst)
                assert e.num_updates == sum(s.num_update_writes for s in md.write_stats())
                assert e.num_inserts == sum(s.num_inserts for s in md.write_stats())
                assert e.num_files == len(md.write_stats())
        assert len(completed) >= 2


def test_two_replicas_serve_one_table(
    start_coordinator: Callable[..., RunningServer],
    lake: Path,
    open_table: Callable[..., HudiTable],
    pg_url: str,
) -> None:
    """Two coordinators on one database serialise the same table through it: times issued through
    either are unique and increasing, and completions through both are all recorded once."""
    path = make_table(lake)
    replicas = [start_coordinator(), start_coordinator()]
    clients = [CoordinatorClient(r.address) for r in replicas]
    clients[0].register_table("t", str(path))
    issued: list[list[str]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        c = clients[n % 2]
        try:
            for _ in range(5):
                t = c.begin_instant("t", "commit", writer_id=f"w{n}").instant.instant_time
                c.complete_instant("t", t, "commit", metadata=one_file_metadata(f"p{n}", f"f{n}-{t}"))
                issued[n].append(t)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    times = [t for ts in issued for t in ts]
    assert len(set(times)) == 20 and all(ts == sorted(ts) for ts in issued)
    completed = HudiTable.open(str(path)).timeline.completed()
    assert sorted(i.time for i in completed) == sorted(times)
    stamps = [i.time for i in completed] + [i.completion_time or "" for i in completed]
    assert len(set(stamps)) == 40, "a completion time equals another instant's time"
    events = outbox(pg_url)
    assert [seq for _e, _t, seq, _p in events] == list(range(1, 21))
    by_completion = [i.time for i in sorted(completed, key=lambda i: i.completion_time or "")]
    assert [eid.split("/")[1] for eid, _t, _s, _p in sorted(events, key=lambda e: e[2])] == by_completion
    for c in clients:
        c.close()


def test_lost_database_connections_are_retried(
    client: CoordinatorClient, coordinator: RunningServer, lake: Path, pg_url: str
) -> None:
    """PostgreSQL drops the coordinator's connections (a failover, a restart): the calls that hit a
    dead connection answer UNAVAILABLE and the client's retries succeed on fresh ones."""
    path = make_table(lake)
    client.register_table("t", str(path))
    before = client.begin_instant("t", "commit").instant.instant_time
    with psycopg.connect(pg_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'inlet-coordinator' AND datname = current_database()"
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    times = [client.begin_instant("t", "commit", request_id=f"r{i}").instant.instant_time for i in range(4)]
    assert times == sorted(times) and times[0] > before
    # the retried begins were not issued twice
    requested = [f for f in timeline_files(path) if f.endswith(".commit.requested")]
    assert len(requested) == 5
