"""Writes through a real coordinator whose lake root is on S3 (SeaweedFS): concurrent NBCC writers,
the coordinator writing the timeline with single PUTs, and no table lock needed from the store."""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from support import hudi_rs

from inlet.core import CommitResult, HudiTable
from inlet.core.s3 import ConditionalS3, S3Options
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

NBCC_PROPS = {"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"}


class GatedProtocol(GrpcCommitProtocol):
    """Completes only when every writer has written its files: the writes overlap for certain."""

    def __init__(self, *args: Any, barrier: threading.Barrier, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier = barrier

    def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
        self.barrier.wait(timeout=60)
        return super().complete(instant, metadata)


def _batch(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "ts": [1] * len(ids), "name": [f"{tag}-{i}" for i in ids]})


def test_concurrent_writers_through_the_coordinator_on_s3(
    coordinator: RunningServer,
    s3_lake: str,
    s3_options: S3Options,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the coordinator serialises commits: these writes need no conditional writes from the store
    monkeypatch.setitem(ConditionalS3._probed, (s3_options.endpoint, "lake"), False)
    path = f"{s3_lake}/sales/trips"
    HudiTable.create(
        path,
        name="trips",
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="BUCKET",
        buckets=2,
        extra_properties=NBCC_PROPS,
    )
    batches = [_batch([1, 2], "a"), _batch([3, 4], "b")]
    barrier = threading.Barrier(len(batches))
    results: list[CommitResult | BaseException] = [RuntimeError("not run")] * len(batches)
    protocols: list[GrpcCommitProtocol] = []
    with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as client:
        client.register_table("sales.trips", path, mode="NON_BLOCKING")
        first = GrpcCommitProtocol(client, "sales.trips", Storage(path), writer_id="w")
        protocols.append(first)
        HudiTable.open(path, commit_protocol=first).write(_batch([1, 2, 3, 4], "z"), "upsert")

        def run(i: int) -> None:
            protocol = GatedProtocol(client, "sales.trips", Storage(path), barrier=barrier, writer_id=f"w{i}")
            protocols.append(protocol)
            try:
                results[i] = HudiTable.open(path, commit_protocol=protocol).write(batches[i], "upsert")
            except BaseException as e:
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for p in protocols:
            p.close()
    assert all(isinstance(r, CommitResult) for r in results), results
    table = HudiTable.open(path)
    timeline = table.load_timeline()
    assert len(timeline.completed()) == 3 and not timeline.pending()
    expected = [(1, "a-1"), (2, "a-2"), (3, "b-3"), (4, "b-4")]
    assert sorted(zip(*table.read().select(["id", "name"]).to_pydict().values(), strict=True)) == expected
    # hudi-rs's file-group reader 1 cannot read log-only file slices (bucket-index NBCC tables, on
    # local disk too: "Unable to get field named ts"); reader 2 can
    got = hudi_rs.read(path, "2", storage_options=s3_options.hudi_rs_options())
    assert got is not None
    assert sorted(zip(*got.select(["id", "name"]).to_pydict().values(), strict=True)) == expected


def test_a_coordinator_writer_rolls_back_on_a_store_without_conditional_writes(
    coordinator: RunningServer,
    s3_lake: str,
    s3_options: S3Options,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rollback takes the table lock; through the coordinator it needs no lock object on the store."""
    monkeypatch.setitem(ConditionalS3._probed, (s3_options.endpoint, "lake"), False)
    path = f"{s3_lake}/sales/orders"
    HudiTable.create(path, name="orders", record_key="id", ordering_field="ts")
    with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as client:
        client.register_table("sales.orders", path, heartbeat_timeout_ms=1000)
        failed = client.begin_instant("sales.orders", "commit").instant.instant_time
        protocol = GrpcCommitProtocol(client, "sales.orders", Storage(path), writer_id="w")
        try:
            table = HudiTable.open(path, commit_protocol=protocol)
            deadline = time.monotonic() + 30  # until the coordinator takes its writer for dead
            while not (rolled := table.rollback_failed_writes(force=True)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert rolled == [failed]
            table.write(_batch([1], "a"), "upsert")
        finally:
            protocol.close()
    timeline = HudiTable.open(path).load_timeline()
    assert not timeline.pending()
    assert [i.action for i in timeline.completed()] == ["rollback", "commit"]
