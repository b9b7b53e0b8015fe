"""Heartbeats and the janitor (a crashed writer's instant is rolled back, a live one never), and
leased table locks with fencing tokens."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from coordinator_helpers import rows
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import HudiTable, avro, faults
from inlet.core.errors import CommitConflictError
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant, State
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import (
    CoordinatorCallError,
    CoordinatorClient,
    GrpcCommitProtocol,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_MS = 1500

CRASHING_WRITER = """
import sys
import pyarrow as pa
from inlet.core.storage import Storage
from inlet.core import HudiTable
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
address, table_id, path = sys.argv[1:4]
protocol = GrpcCommitProtocol(CoordinatorClient(address), table_id, Storage(path), writer_id="doomed")
table = HudiTable.open(path, commit_protocol=protocol)
table.write(pa.table({"id": pa.array([1, 9], pa.int64()), "city": ["sf", "la"],
                      "ts": pa.array([5, 5], pa.int64()), "fare": [100.0, 900.0]}), "upsert")
"""


def hudi_rows(path: Path) -> list[dict[str, object]]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read(HudiReadOptions())
    data = pa.concat_tables([pa.Table.from_batches([b]) for b in batches])
    out: list[dict[str, object]] = data.select(["id", "city", "ts", "fare"]).sort_by("id").to_pylist()
    return out


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_janitor_rolls_back_a_dead_writer_never_a_live_one(
    client: CoordinatorClient,
    coordinator: RunningServer,
    lake: Path,
    open_table: Callable[..., HudiTable],
    protocols: list[GrpcCommitProtocol],
) -> None:
    path = lake / "hb"
    HudiTable.create(str(path), name="hb", record_key="id", partition_by="city", ordering_field="ts")
    client.register_table("hb", str(path), heartbeat_timeout_ms=TIMEOUT_MS)
    open_table(client, "hb", path).write(rows([1, 2], "sf", 1), "insert")
    before = hudi_rows(path)

    # a live writer: its instant is pending all along, with heartbeats from its protocol's thread
    live_protocol = GrpcCommitProtocol(client, "hb", Storage(str(path)), writer_id="alive")
    protocols.append(live_protocol)
    live = live_protocol.begin("commit")
    live_began = time.monotonic()
    # a silent writer: began through the raw client, sends no heartbeats
    silent = client.begin_instant("hb", "commit", writer_id="silent").instant.instant_time

    # a writer process killed after writing its data files
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASHING_WRITER), coordinator.address, "hb", str(path)],
        env={**os.environ, "INLET_CRASH_AT": faults.AFTER_DATA_FILES},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == faults.CRASH_EXIT_CODE, proc.stderr
    table = HudiTable.open(str(path))
    [crashed] = [i for i in table.timeline.pending() if i.time not in (live.time, silent)]
    left = sorted(
        str(p.relative_to(path)) for p in path.rglob(f"*{crashed.time}*") if ".hoodie" not in p.parts
    )
    assert left, "the crashed writer left no data files"
    assert hudi_rows(path) == before  # a pending write is invisible

    def rolled_back() -> set[str]:
        tl = HudiTable.open(str(path)).timeline
        out = set()
        for rb in tl.completed(["rollback"]):
            out.update(avro.decode(tl.read_bytes(rb), "rollback")["commitsRollback"])
        return out

    wait_for(lambda: {crashed.time, silent} <= rolled_back(), 20, "the janitor's rollbacks")
    # the live instant outlived several heartbeat timeouts and is untouched
    time.sleep(max(0.0, 3 * TIMEOUT_MS / 1000 - (time.monotonic() - live_began)))
    assert live.time not in rolled_back()
    tl = HudiTable.open(str(path)).timeline
    assert [i.time for i in tl.pending()] == [live.time]
    assert not [p for p in path.rglob(f"*{crashed.time}*") if ".hoodie" not in p.parts]
    assert hudi_rows(path) == before  # the table reads as if the crashed write never started
    rb = next(
        i
        for i in tl.completed(["rollback"])
        if crashed.time in avro.decode(tl.read_bytes(i), "r")["commitsRollback"]
    )
    meta = avro.decode(tl.read_bytes(rb), "rollback")
    deleted = sorted(f for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"])
    assert deleted == left

    done = live_protocol.complete(live, CommitMetadata(operation_type="UPSERT"))
    assert done.state is State.COMPLETED
    # the silent writer finds out: no more heartbeats, no completion
    with pytest.raises(CoordinatorCallError) as e:
        client.heartbeat("hb", silent)
    assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "rolled back" in e.value.details
    silent_protocol = GrpcCommitProtocol(client, "hb", Storage(str(path)))
    protocols.append(silent_protocol)
    with pytest.raises(CommitConflictError, match="rolled back"):
        silent_protocol.complete(Instant(silent, "commit", State.REQUESTED), CommitMetadata())


def test_lock_leases_and_fencing_tokens(client: CoordinatorClient, lake: Path) -> None:
    path = lake / "locked"
    HudiTable.create(str(path), name="locked", record_key="id")
    client.register_table("locked", str(path))

    a = client.acquire_lock("locked", "owner-a", lease_ms=10_000)
    assert a.fencing_token == 1 and a.lock_id
    assert a.expires_at_ms > time.time() * 1000 + 5_000
    with pytest.raises(CoordinatorCallError) as held:
        client.acquire_lock("locked", "owner-b", wait_ms=0)
    assert held.value.code == grpc.StatusCode.ABORTED and "owner-a" in held.value.details
    # a retried acquisition by the holder gets the same lease back
    assert client.acquire_lock("locked", "owner-a").fencing_token == 1
    renewed = client.renew_lock("locked", a.lock_id, lease_ms=20_000)
    assert renewed.fencing_token == 1 and renewed.expires_at_ms > a.expires_at_ms
    client.release_lock("locked", a.lock_id)
    with pytest.raises(CoordinatorCallError) as gone:
        client.release_lock("locked", a.lock_id)
    assert gone.value.code == grpc.StatusCode.FAILED_PRECONDITION

    # a waiter gets the lock when the holder releases it
    b = client.acquire_lock("locked", "owner-b", lease_ms=300)
    assert b.fencing_token == 2
    started = time.monotonic()
    c = client.acquire_lock("locked", "owner-c", lease_ms=10_000, wait_ms=5_000)  # b's lease runs out
    waited = time.monotonic() - started
    assert c.fencing_token == 3 and 0.1 < waited < 5
    with pytest.raises(CoordinatorCallError) as expired:
        client.renew_lock("locked", b.lock_id)
    assert expired.value.code == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(CoordinatorCallError) as bad:
        client.acquire_lock("locked", "", wait_ms=0)
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(CoordinatorCallError) as unknown:
        client.acquire_lock("nope", "x")
    assert unknown.value.code == grpc.StatusCode.NOT_FOUND


def test_named_locks_are_held_apart(client: CoordinatorClient, lake: Path) -> None:
    """A table's named locks ("" the write lock, "services" the table services' one) have their own
    holders and leases; renew/release find a lock by its id; fencing tokens grow across all of them."""
    path = lake / "named"
    HudiTable.create(str(path), name="named", record_key="id")
    client.register_table("named", str(path))
    writer = client.acquire_lock("named", "writer", lease_ms=10_000)
    services = client.acquire_lock("named", "services-a", lease_ms=10_000, lock_name="services")
    assert (writer.fencing_token, services.fencing_token) == (1, 2) and writer.lock_id != services.lock_id
    with pytest.raises(CoordinatorCallError) as held:
        client.acquire_lock("named", "services-b", wait_ms=0, lock_name="services")
    assert held.value.code == grpc.StatusCode.ABORTED
    assert "services-a" in held.value.details and "'services'" in held.value.details
    with pytest.raises(CoordinatorCallError) as held_write:
        client.acquire_lock("named", "services-b", wait_ms=0)
    assert held_write.value.code == grpc.StatusCode.ABORTED and "writer" in held_write.value.details
    assert (
        client.renew_lock("named", services.lock_id, lease_ms=20_000).expires_at_ms > services.expires_at_ms
    )
    client.release_lock("named", services.lock_id)
    # the write lock is still held; the services lock is free for the next instance
    assert client.acquire_lock("named", "services-b", lock_name="services").fencing_token == 3
    with pytest.raises(CoordinatorCallError) as still:
        client.acquire_lock("named", "other-writer", wait_ms=0)
    assert still.value.code == grpc.StatusCode.ABORTED
    with pytest.raises(CoordinatorCallError) as bad:
        client.acquire_lock("named", "x", lock_name="no spaces")
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and "lock name" in bad.value.details


def test_janitor_releases_expired_leases(client: CoordinatorClient, lake: Path, pg_url: str) -> None:
    import psycopg

    path = lake / "leased"
    HudiTable.create(str(path), name="leased", record_key="id")
    client.register_table("leased", str(path))
    client.acquire_lock("leased", "short", lease_ms=100)

    def leases() -> int:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT count(*) FROM table_locks").fetchone()
            return int(row[0]) if row else 0

    assert leases() == 1
    wait_for(lambda: leases() == 0, 10, "the janitor to release the expired lease")
    assert client.acquire_lock("leased", "next").fencing_token == 2


def test_janitor_finishes_a_rollback_whose_writer_died(
    client: CoordinatorClient, coordinator: RunningServer, lake: Path, pg_url: str
) -> None:
    """A writer began rolling back its failed write (plan written, inflight) and died: once the
    rollback's heartbeat expires the janitor finishes it from its plan."""
    import psycopg

    from inlet.core.actions import rollback

    path = lake / "rb"
    HudiTable.create(str(path), name="rb", record_key="id", partition_by="city")
    client.register_table("rb", str(path), heartbeat_timeout_ms=TIMEOUT_MS)
    failed = client.begin_instant("rb", "commit", writer_id="w").instant.instant_time
    (path / "sf").mkdir()
    orphan = path / "sf" / f"f1-0_0-0-0_{failed}.parquet"
    orphan.write_bytes(b"half a file")
    plan = rollback.plan_rollback(Instant(failed, "commit", State.REQUESTED), [f"sf/{orphan.name}"])
    rb = client.begin_instant("rb", "rollback", avro.encode("HoodieRollbackPlan", plan), writer_id="w")
    client.mark_inflight("rb", rb.instant.instant_time)
    # the owner may finish its own rollback while alive; the janitor waits for the heartbeat to expire
    with pytest.raises(CoordinatorCallError) as alive:
        client.heartbeat("rb", failed)
    assert alive.value.code == grpc.StatusCode.FAILED_PRECONDITION  # the failed write is being rolled back

    def done() -> bool:
        return any(i.time == rb.instant.instant_time for i in HudiTable.open(str(path)).timeline.completed())

    wait_for(done, 20, "the janitor to finish the rollback")
    assert not orphan.exists()
    tl = HudiTable.open(str(path)).timeline
    assert not tl.pending()
    with psycopg.connect(pg_url) as conn:
        states: dict[str, str] = dict(conn.execute("SELECT instant_time, state FROM instants").fetchall())
    assert states == {failed: "ROLLED_BACK", rb.instant.instant_time: "COMPLETED"}


def test_a_completion_under_a_lost_lease_is_fenced_off(client: CoordinatorClient, lake: Path) -> None:
    """A writer that completes under a lease (CompleteInstant.fence) is refused once the lease ran out
    and another holder took the lock (a newer fencing token): a stalled ("zombie") writer cannot
    commit over its successor. Nothing of its write becomes visible; the successor's commit lands."""
    path = lake / "fenced"
    HudiTable.create(str(path), name="fenced", record_key="id", ordering_field="ts")
    client.register_table("fenced", str(path))
    batch = pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())})

    def writer(name: str) -> tuple[HudiTable, GrpcCommitProtocol]:
        protocol = GrpcCommitProtocol(client, "fenced", Storage(str(path)), writer_id=name)
        return HudiTable.open(str(path), commit_protocol=protocol), protocol

    zombie, zombie_protocol = writer("zombie")
    stale = client.acquire_lock("fenced", "zombie", lease_ms=300, lock_name="writer")
    zombie_protocol.fence = ("writer", stale.fencing_token)
    time.sleep(0.5)  # the zombie stalls past its lease; a successor takes the lock
    fresh = client.acquire_lock("fenced", "successor", lease_ms=10_000, lock_name="writer")
    assert fresh.fencing_token > stale.fencing_token
    with pytest.raises(CommitConflictError, match=r"fenced: the lease of lock 'writer'.*held by successor"):
        zombie.write(batch, "upsert")
    zombie_protocol.close()
    assert HudiTable.open(str(path)).timeline.completed_writes() == []

    successor, successor_protocol = writer("successor")
    successor_protocol.fence = ("writer", fresh.fencing_token)
    successor.write(batch, "upsert")
    successor_protocol.close()
    assert [r["id"] for r in HudiTable.open(str(path)).read().to_pylist()] == [1]
    client.release_lock("fenced", fresh.lock_id)
    # a released lock fences off its last holder too
    after, after_protocol = writer("late")
    after_protocol.fence = ("writer", fresh.fencing_token)
    with pytest.raises(CommitConflictError, match="the lock is free"):
        after.write(batch, "upsert")
    after_protocol.close()
