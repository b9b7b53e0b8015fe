"""A coordinator keeps parsed timelines between calls, yet never decides on a stale one: what another
replica on the same database and lake completed, and what a tool removed from the timeline, is
seen by its next conflict check, Kafka-checkpoint fence and pending check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from inlet.core import HudiTable
from inlet.core.errors import CommitConflictError
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import ConflictError, CoordinatorClient, GrpcCommitProtocol
from inlet.services.writer import checkpoint as ckpt

TOPIC = "inlet.changes.app.public.orders"
GROUP = "fg-0000-0000-0000-0000-000000000000-0"


def _metadata(
    instant: Instant | None, file_id: str, offsets: tuple[int, int] | None = None
) -> CommitMetadata:
    md = CommitMetadata(operation_type="UPSERT")
    path = f"p/{file_id}_0-0-0_{instant.time}.parquet" if instant else ""
    md.add(WriteStat(file_id=file_id, path=path, partition_path="p", num_writes=1))
    if offsets is not None:
        md.extra_metadata = {
            ckpt.CHECKPOINT_KEY: ckpt.format_checkpoint(TOPIC, {0: offsets[1]}),
            ckpt.RANGES_KEY: ckpt.format_ranges(TOPIC, {0: offsets}),
        }
    return md


def _begin(protocol: GrpcCommitProtocol, file_id: str) -> Instant:
    instant = protocol.begin("commit")
    protocol.set_inflight(instant, _metadata(None, file_id).to_bytes())
    return instant


def test_a_replica_sees_what_another_completed_and_what_left_the_timeline(
    start_coordinator: Callable[..., RunningServer], lake: Path, protocols: list[GrpcCommitProtocol]
) -> None:
    path = lake / "orders"
    HudiTable.create(str(path), name="orders", record_key="id")
    replicas = [start_coordinator(), start_coordinator()]
    clients = [CoordinatorClient(r.address, timeout_s=30, retries=0) for r in replicas]
    clients[0].register_table("orders", str(path))

    def protocol(replica: int, writer: str) -> GrpcCommitProtocol:
        made = GrpcCommitProtocol(clients[replica], "orders", Storage(str(path)), writer_id=writer)
        protocols.append(made)
        return made

    a, b = protocol(0, "a"), protocol(1, "b")
    try:
        # replica 0 has listed the timeline (and kept it) while its writer's instant was begun
        mine = _begin(a, GROUP)
        a.complete(_begin(a, "other-group"), _metadata(None, "other-group", (0, 5)))
        # replica 1 completes a commit on the same file group, with later Kafka offsets
        theirs = _begin(b, GROUP)
        b.complete(theirs, _metadata(theirs, GROUP, (5, 9)))

        # replica 0's next conflict check sees it
        with pytest.raises(ConflictError, match=f"conflicts with commit {theirs.time}"):
            a.complete(mine, _metadata(mine, GROUP))
        # and so does its Kafka-checkpoint fence (offsets 5-9 are the table's already)
        late = _begin(a, "third-group")
        with pytest.raises(CommitConflictError, match=rf"fenced: offsets 5-7 of {TOPIC}\[0\]"):
            a.complete(late, _metadata(late, "third-group", (5, 7)))

        # a tool removes a pending instant's files from the timeline: replica 0 sees it gone
        gone = _begin(a, "fourth-group")
        timeline = a.timeline()
        storage = Storage(str(path))
        for name in storage.list_names(timeline.dir):
            if name.startswith(gone.time):
                storage.delete(f"{timeline.dir}/{name}")
        with pytest.raises(CommitConflictError, match="no longer on the timeline"):
            a.complete(gone, _metadata(gone, "fourth-group"))
    finally:
        for c in clients:
            c.close()


def test_the_fence_does_not_read_back_what_the_coordinator_just_wrote(
    client: CoordinatorClient,
    lake: Path,
    protocols: list[GrpcCommitProtocol],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Kafka-checkpoint fence reads the newest commit's metadata on every commit: the
    coordinator keeps what it completed instead of parsing the file again."""
    path = lake / "orders"
    HudiTable.create(str(path), name="orders", record_key="id")
    client.register_table("orders", str(path))
    p = GrpcCommitProtocol(client, "orders", Storage(str(path)), writer_id="w")
    protocols.append(p)
    first = _begin(p, GROUP)
    p.complete(first, _metadata(first, GROUP, (0, 5)))
    parsed: list[str] = []
    original = CommitMetadata.from_bytes

    def counting(data: bytes, what: str = "commit metadata") -> CommitMetadata:
        parsed.append(what)
        return original(data, what)

    monkeypatch.setattr(CommitMetadata, "from_bytes", counting)
    for offsets in ((5, 6), (6, 7), (7, 8)):
        nxt = _begin(p, GROUP)
        p.complete(nxt, _metadata(nxt, GROUP, offsets))
    monkeypatch.undo()
    assert not [w for w in parsed if w.startswith("instant ")], parsed
    with pytest.raises(CommitConflictError, match="fenced"):  # and the fence did hold
        stale = _begin(p, GROUP)
        p.complete(stale, _metadata(stale, GROUP, (6, 8)))
