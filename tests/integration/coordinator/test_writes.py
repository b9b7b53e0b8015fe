"""Core writes committed through the coordinator (GrpcCommitProtocol): tables the independent
``hudi`` reader (hudi-rs 0.5.0) reads correctly, OCC conflicts, NBCC, and the mode rules."""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from coordinator_helpers import rows
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import CommitResult, HudiTable
from inlet.core.errors import CommitConflictError
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator_client.client import (
    ConflictError,
    CoordinatorCallError,
    CoordinatorClient,
    GrpcCommitProtocol,
)

NBCC_PROPS = {"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"}
DATA = ["id", "city", "ts", "fare"]


def hudi_rows(path: Path) -> list[dict[str, Any]]:
    """The snapshot as the hudi-rs reader sees it (data columns, sorted by id)."""
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions())
    if not batches:
        return []
    data = pa.concat_tables([pa.Table.from_batches([b]) for b in batches]).select(DATA)
    out: list[dict[str, Any]] = data.sort_by("id").to_pylist()
    return out


def as_rows(t: pa.Table) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = t.select(DATA).sort_by("id").to_pylist()
    return out


class GatedProtocol(GrpcCommitProtocol):
    """Holds every completion at a barrier, so that concurrent writers have all begun (and written
    their files) before any of them completes: a deterministic overlap of two writes."""

    def __init__(self, *args: Any, barrier: threading.Barrier, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier = barrier

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        self.barrier.wait(timeout=60)
        return super().complete(instant, metadata)


def concurrent_writes(
    client: CoordinatorClient,
    table_id: str,
    path: Path,
    batches: list[pa.Table],
    protocols: list[GrpcCommitProtocol],
) -> list[CommitResult | BaseException]:
    barrier = threading.Barrier(len(batches))
    results: list[CommitResult | BaseException] = [RuntimeError("not run")] * len(batches)

    def run(i: int, batch: pa.Table) -> None:
        protocol = GatedProtocol(
            client, table_id, Storage(str(path)), barrier=barrier, writer_id=f"writer-{i}"
        )
        protocols.append(protocol)
        try:
            results[i] = HudiTable.open(str(path), commit_protocol=protocol).write(batch, "upsert")
        except BaseException as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, b)) for i, b in enumerate(batches)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    return results


def test_write_through_coordinator_reads_back_with_hudi_rs(
    client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable], pg_url: str
) -> None:
    path = lake / "trips"
    HudiTable.create(str(path), name="trips", record_key="id", partition_by="city", ordering_field="ts")
    client.register_table("sales.trips", str(path))
    table = open_table(client, "sales.trips", path)
    table.write(pa.concat_tables([rows([1, 2, 3], "sf", 1), rows([4, 5], "la", 1)]), "insert")
    table.write(rows([2], "sf", 5, fare=50.0), "upsert")
    table.write(rows([2], "sf", 4, fare=99.0), "upsert")  # an older event: loses (event-time ordering)
    table.delete(pa.table({"id": pa.array([4], pa.int64()), "city": ["la"]}))
    expected = [
        {"id": 1, "city": "sf", "ts": 1, "fare": 1.0},
        {"id": 2, "city": "sf", "ts": 5, "fare": 50.0},
        {"id": 3, "city": "sf", "ts": 1, "fare": 3.0},
        {"id": 5, "city": "la", "ts": 1, "fare": 2.0},
    ]
    assert hudi_rows(path) == expected
    assert as_rows(HudiTable.open(str(path)).read()) == expected
    # the coordinator's timeline view agrees with the files
    instants = client.get_timeline("sales.trips")
    assert [i.action for i in instants] == ["commit"] * 4
    assert [(i.time, i.completion_time) for i in instants] == [
        (i.time, i.completion_time) for i in HudiTable.open(str(path)).timeline.completed()
    ]
    assert not client.describe_table("sales.trips").pending
    assert not table.commit_protocol.heartbeats.live()  # type: ignore[attr-defined]
    # the protocol's heartbeat thread ends when no instant is left to beat for (no thread leak)
    deadline = time.monotonic() + 5
    while any(t.name == "coordinator-heartbeat-sales.trips" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the heartbeat thread outlived its instants"
        time.sleep(0.05)


def test_occ_conflict_on_the_same_file_group(
    client: CoordinatorClient,
    lake: Path,
    open_table: Callable[..., HudiTable],
    protocols: list[GrpcCommitProtocol],
) -> None:
    path = lake / "occ"
    HudiTable.create(str(path), name="occ", record_key="id", partition_by="city", ordering_field="ts")
    client.register_table("occ", str(path))
    open_table(client, "occ", path).write(
        pa.concat_tables([rows([1, 2], "sf", 1), rows([3], "la", 1)]), "insert"
    )
    before = hudi_rows(path)

    results = concurrent_writes(
        client, "occ", path, [rows([1], "sf", 2, fare=10.0), rows([2], "sf", 2, fare=20.0)], protocols
    )
    ok = [r for r in results if isinstance(r, CommitResult)]
    failed = [r for r in results if not isinstance(r, CommitResult)]
    assert len(ok) == 1 and len(failed) == 1, results
    [winner], [error] = ok, failed
    assert isinstance(error, CommitConflictError), repr(error)
    assert winner.instant_time in str(error) and "sf/" in str(error)
    assert isinstance(error, ConflictError) and error.conflict is not None
    assert error.conflict.other.instant_time == winner.instant_time
    assert error.conflict.other.completion_time == winner.completion_time
    [(partition, file_id)] = [(g.partition_path, g.file_id) for g in error.conflict.file_groups]
    assert partition == "sf" and file_id in {s.file_id for s in winner.metadata.write_stats()}
    # the loser was rolled back through the coordinator: the table holds the winner's write only
    won_id, won_fare = (1, 10.0) if results.index(winner) == 0 else (2, 20.0)
    expected = [dict(r) for r in before]
    for r in expected:
        if r["id"] == won_id:
            r.update(ts=2, fare=won_fare)
    assert hudi_rows(path) == expected
    tl = HudiTable.open(str(path)).timeline
    assert not tl.pending()
    assert len(tl.completed(["rollback"])) == 1


def test_occ_disjoint_file_groups_both_commit(
    client: CoordinatorClient,
    lake: Path,
    open_table: Callable[..., HudiTable],
    protocols: list[GrpcCommitProtocol],
) -> None:
    path = lake / "disjoint"
    HudiTable.create(str(path), name="disjoint", record_key="id", partition_by="city", ordering_field="ts")
    client.register_table("disjoint", str(path))
    open_table(client, "disjoint", path).write(
        pa.concat_tables([rows([1], "sf", 1), rows([2], "la", 1)]), "insert"
    )
    results = concurrent_writes(
        client, "disjoint", path, [rows([1], "sf", 2, fare=10.0), rows([2], "la", 2, fare=20.0)], protocols
    )
    assert all(isinstance(r, CommitResult) for r in results), results
    assert hudi_rows(path) == [
        {"id": 1, "city": "sf", "ts": 2, "fare": 10.0},
        {"id": 2, "city": "la", "ts": 2, "fare": 20.0},
    ]


def _bucket_table(lake: Path, name: str, nbcc: bool) -> Path:
    path = lake / name
    HudiTable.create(
        str(path),
        name=name,
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=1,
        extra_properties=NBCC_PROPS if nbcc else None,
    )
    return path


@pytest.mark.parametrize("mode", ["NON_BLOCKING", "OPTIMISTIC"])
def test_concurrent_upserts_to_the_same_bucket(
    mode: str,
    client: CoordinatorClient,
    lake: Path,
    open_table: Callable[..., HudiTable],
    protocols: list[GrpcCommitProtocol],
) -> None:
    """NBCC: two upserts appending logs to the same bucket file group both commit, and readers merge
    them; the same writes on an OCC table conflict."""
    path = _bucket_table(lake, mode.lower(), nbcc=mode == "NON_BLOCKING")
    client.register_table(mode.lower(), str(path), mode=mode)
    open_table(client, mode.lower(), path).write(rows([1, 2, 3, 4], "sf", 1), "upsert")
    results = concurrent_writes(
        client,
        mode.lower(),
        path,
        [rows([1, 2], "sf", 2, fare=10.0), rows([3, 4], "sf", 3, fare=30.0)],
        protocols,
    )
    ok = [r for r in results if isinstance(r, CommitResult)]
    if mode == "OPTIMISTIC":
        [failed] = [r for r in results if r not in ok]
        assert len(ok) == 1 and isinstance(failed, CommitConflictError), results
        return
    assert len(ok) == 2, results
    groups = [{(s.partition_path, s.file_id) for s in r.metadata.write_stats()} for r in ok]
    assert groups[0] == groups[1] and len(groups[0]) == 1  # the same file group
    assert all(s.log_files for r in ok for s in r.metadata.write_stats())
    completions = sorted(r.completion_time for r in ok)
    assert completions[0] < completions[1]
    expected = [
        {"id": 1, "city": "sf", "ts": 2, "fare": 10.0},
        {"id": 2, "city": "sf", "ts": 2, "fare": 11.0},
        {"id": 3, "city": "sf", "ts": 3, "fare": 30.0},
        {"id": 4, "city": "sf", "ts": 3, "fare": 31.0},
    ]
    assert as_rows(HudiTable.open(str(path)).read()) == expected
    assert hudi_rows(path) == expected


def _md(partition: str, file_id: str, op: str = "UPSERT", compacted: bool = False) -> CommitMetadata:
    md = CommitMetadata(operation_type=op, compacted=compacted)
    md.add(WriteStat(file_id, posixpath.join(partition, f"{file_id}_0-0-0_1.parquet"), partition))
    return md


def test_mode_rules(client: CoordinatorClient, lake: Path) -> None:
    """Which overlapping completions each mode refuses (raw protocol calls, deterministic order)."""
    path = _bucket_table(lake, "rules", nbcc=True)
    client.register_table("nbcc", str(path), mode="NON_BLOCKING")

    def overlap(first_op: str, second_op: str, second_action: str = "deltacommit") -> None:
        a = client.begin_instant("nbcc", "deltacommit").instant.instant_time
        b = client.begin_instant("nbcc", second_action).instant.instant_time
        client.complete_instant("nbcc", a, "deltacommit", metadata=_md("sf", "g1", first_op))
        client.complete_instant("nbcc", b, second_action, metadata=_md("sf", "g1", second_op))

    overlap("UPSERT", "UPSERT")  # NBCC: upserts never conflict
    overlap("INSERT", "DELETE")
    with pytest.raises(ConflictError, match="conflicts with deltacommit"):
        overlap("UPSERT", "BULK_INSERT")  # bulk_insert is still checked
    with pytest.raises(ConflictError):
        overlap("UPSERT", "INSERT_OVERWRITE", "replacecommit")

    occ_path = lake / "occ_rules"
    HudiTable.create(str(occ_path), name="occ_rules", record_key="id", table_type="MERGE_ON_READ")
    client.register_table("occ", str(occ_path))
    # compaction vs deltacommit never conflicts (completion-time file slicing)
    c = client.begin_instant("occ", "compaction").instant.instant_time
    d = client.begin_instant("occ", "deltacommit").instant.instant_time
    client.complete_instant("occ", d, "deltacommit", metadata=_md("", "g1"))
    done = client.complete_instant("occ", c, "compaction", metadata=_md("", "g1", "COMPACT", compacted=True))
    assert done.instant.action == "commit"
    # a write completed with raw Avro content is conflict-checked all the same
    g = client.begin_instant("occ", "deltacommit").instant.instant_time
    h = client.begin_instant("occ", "deltacommit").instant.instant_time
    client.complete_instant("occ", h, "deltacommit", metadata=_md("", "g4"))
    with pytest.raises(ConflictError, match=h):
        client.complete_instant("occ", g, "deltacommit", avro_content=_md("", "g4").to_bytes())
    with pytest.raises(CoordinatorCallError, match="not HoodieCommitMetadata"):
        client.complete_instant("occ", g, "deltacommit", avro_content=b"garbage")
    # early conflict detection: MarkInflight with planned file groups
    e = client.begin_instant("occ", "deltacommit").instant.instant_time
    f = client.begin_instant("occ", "deltacommit").instant.instant_time
    client.complete_instant("occ", f, "deltacommit", metadata=_md("", "g2"))
    client.mark_inflight("occ", e, planned_file_groups=[("", "g3")])  # disjoint: fine
    with pytest.raises(ConflictError) as err:
        client.mark_inflight("occ", e, planned_file_groups=[("", "g2"), ("", "g3")])
    assert err.value.conflict is not None and err.value.conflict.other.instant_time == f
    assert [(g.partition_path, g.file_id) for g in err.value.conflict.file_groups] == [("", "g2")]
    assert f in err.value.details and "<root>/g2" in err.value.details

    sw_path = lake / "single"
    HudiTable.create(str(sw_path), name="single", record_key="id")
    client.register_table("single", str(sw_path), mode="SINGLE_WRITER")
    first = client.begin_instant("single", "commit", writer_id="a").instant.instant_time
    with pytest.raises(CoordinatorCallError) as refused:
        client.begin_instant("single", "commit", writer_id="b")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION and first in refused.value.details
    client.complete_instant("single", first, "commit", metadata=_md("", "g1"))
    client.begin_instant("single", "commit", writer_id="b")  # free again


def test_pending_clustering_rejects_updates_to_its_file_groups(client: CoordinatorClient, lake: Path) -> None:
    path = lake / "clu"
    HudiTable.create(str(path), name="clu", record_key="id", partition_by="city")
    client.register_table("clu", str(path))
    clustering = client.begin_instant("clu", "clustering").instant.instant_time
    client.mark_inflight("clu", clustering, planned_file_groups=[("sf", "g1")])
    w = client.begin_instant("clu", "commit").instant.instant_time
    with pytest.raises(ConflictError, match=f"pending clustering {clustering}"):
        client.complete_instant("clu", w, "commit", metadata=_md("sf", "g1"))
    other = client.begin_instant("clu", "commit").instant.instant_time
    client.complete_instant("clu", other, "commit", metadata=_md("sf", "g2"))  # not under clustering


def test_compaction_commits_through_the_coordinator(
    client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable], pg_url: str
) -> None:
    import psycopg

    path = lake / "mor"
    HudiTable.create(
        str(path),
        name="mor",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    client.register_table("mor", str(path))
    table = open_table(client, "mor", path)
    table.write(rows([1, 2, 3], "sf", 1), "insert")
    table.write(rows([1, 2], "sf", 2, fare=20.0), "upsert")
    result = table.compact({"hoodie.compact.inline.max.delta.commits": "1"})
    assert result is not None and result.action == "commit"
    expected = [
        {"id": 1, "city": "sf", "ts": 2, "fare": 20.0},
        {"id": 2, "city": "sf", "ts": 2, "fare": 21.0},
        {"id": 3, "city": "sf", "ts": 1, "fare": 3.0},
    ]
    assert hudi_rows(path) == expected
    # the compaction's plan, inflight and completion went through the coordinator
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT action, state, completion_time, completed_action FROM instants WHERE instant_time = %s",
            (result.instant_time,),
        ).fetchone()
        events = conn.execute("SELECT event_id FROM outbox ORDER BY sequence").fetchall()
    assert row == ("compaction", "COMPLETED", result.completion_time, "commit")
    assert [e[0] for e in events][-1] == f"mor/{result.instant_time}"
    assert [i.action for i in client.get_timeline("mor")] == ["deltacommit", "deltacommit", "commit"]


def test_clustering_commits_through_the_coordinator(
    client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable]
) -> None:
    path = lake / "clustered"
    HudiTable.create(str(path), name="clustered", record_key="id", partition_by="city", ordering_field="ts")
    client.register_table("clustered", str(path))
    table = open_table(client, "clustered", path)
    for k in range(3):
        table.write(rows([k * 10 + 1, k * 10 + 2], "sf", 1), "bulk_insert")
    result = table.cluster({"hoodie.clustering.plan.strategy.sort.columns": "fare"}, force=True)
    assert result is not None and result.action == "replacecommit"
    assert [r["id"] for r in hudi_rows(path)] == [1, 2, 11, 12, 21, 22]
    assert len(HudiTable.open(str(path)).file_system_view().latest_file_slices()) == 1
    timeline = client.get_timeline("clustered")
    assert [i.action for i in timeline] == ["commit", "commit", "commit", "replacecommit"]
    assert timeline[-1].time == result.instant_time
