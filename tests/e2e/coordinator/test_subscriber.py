"""A Kafka subscriber of the commits topic (confluent-kafka consumer group on the shared Apache Kafka broker)
sees one CommitEvent per completed instant of every table, with the files and counts that the
timeline records. The expectation is read from the tables' timelines through inlet.core, never from
the coordinator's own answers."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant, parse_instant_time
from inlet.proto.events.v1 import events_pb2
from inlet.proto.hudi.v1 import commit_pb2
from inlet.services.commit_events import changes_of
from inlet.services.coordinator_client.client import GrpcCommitProtocol
from inlet.services.stack.kafka import TEST_CONSUMER_SETTINGS

WRITE_ACTIONS = ("commit", "deltacommit", "replacecommit")


def stat_rows(md: CommitMetadata) -> set[tuple[Any, ...]]:
    return {
        (
            s.partition_path,
            s.file_id,
            s.path,
            s.prev_commit,
            s.num_writes,
            s.num_inserts,
            s.num_update_writes,
            s.num_deletes,
            s.total_write_bytes,
            s.file_size_in_bytes,
            tuple(s.log_files or ()),
        )
        for s in md.write_stats()
    }


def proto_stat_rows(md: commit_pb2.CommitMetadata) -> set[tuple[Any, ...]]:
    return {
        (
            s.partition_path,
            s.file_id,
            s.path,
            s.prev_commit,
            s.num_writes,
            s.num_inserts,
            s.num_update_writes,
            s.num_deletes,
            s.total_write_bytes,
            s.file_size_in_bytes,
            tuple(s.log_files),
        )
        for stats in md.partition_to_write_stats.values()
        for s in stats.stats
    }


def subscribe(bootstrap: str, topic: str, want: int, timeout_s: float = 60.0) -> list[Any]:
    """A consumer group member of ``topic``: messages until ``want`` arrived, plus 2 s for extras."""
    consumer = Consumer(
        {
            **TEST_CONSUMER_SETTINGS,
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-subscriber-{topic}",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        extra_until = None
        while time.monotonic() < (extra_until or deadline):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
            if len(got) >= want and extra_until is None:
                extra_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return got


def check_event(
    event: events_pb2.CommitEvent, table_id: str, path: Path, table: HudiTable, instant: Instant
) -> None:
    where = f"{table_id} {instant.time} {instant.action}"
    assert event.event_id == f"{table_id}/{instant.time}", where
    assert (event.table_id, event.table_name, event.table_type) == (
        table_id,
        table.name,
        table.table_type.value,
    ), where
    assert os.path.realpath(event.base_path) == os.path.realpath(path), where
    assert (event.instant.instant_time, event.instant.action, event.instant.completion_time) == (
        instant.time,
        instant.action,
        instant.completion_time,
    ), where
    assert event.instant.state == commit_pb2.INSTANT_STATE_COMPLETED
    assert instant.completion_time is not None
    committed = parse_instant_time(instant.completion_time).replace(tzinfo=dt.UTC)
    assert event.committed_at.ToDatetime(tzinfo=dt.UTC) == committed, where
    if instant.action not in WRITE_ACTIONS:  # a rollback: no write stats
        assert not event.metadata.partition_to_write_stats, where
        assert (event.num_inserts, event.num_updates, event.num_deletes, event.num_files) == (0, 0, 0, 0)
        return
    md = table.timeline.commit_metadata(instant)
    stats = md.write_stats()
    assert stats, where
    assert event.metadata.operation_type == (md.operation_type or ""), where
    assert proto_stat_rows(event.metadata) == stat_rows(md), where
    assert event.metadata.compacted == bool(md.compacted), where
    assert dict(event.metadata.extra_metadata) == dict(md.extra_metadata or {}), where
    assert event.num_inserts == sum(s.num_inserts for s in stats), where
    assert event.num_updates == sum(s.num_update_writes for s in stats), where
    assert event.num_deletes == sum(s.num_deletes for s in stats), where
    assert event.num_files == len(stats), where


def test_subscriber_sees_one_event_per_completed_instant(
    e2e: Any, kafka_bootstrap: str, kafka_topic: str
) -> None:
    """Two tables (COW simple index; MOR bucket index) written by two writer processes at once
    (insert, upsert, delete), a MOR compaction and an aborted write (a rollback) through the
    coordinator: the subscriber gets exactly one event per completed instant, keyed by table, in
    completion order per table with sequence 1..n, whose instant, files and counts are the
    timeline's."""
    coordinator = e2e.coordinator(kafka_bootstrap=kafka_bootstrap, topic=kafka_topic)
    cow = e2e.cow_table("orders")
    mor = e2e.lake / "events"
    HudiTable.create(
        str(mor),
        name="events",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=2,
    )
    tables = {"sales.orders": cow, "sales.events": mor}
    with e2e.client(coordinator) as client:
        for table_id, path in tables.items():
            client.register_table(table_id, str(path))

    def writes() -> list[dict[str, Any]]:
        return [
            {"op": "insert", "rows": e2e.rows([1, 2, 3], "sf", 1, 1.0) + e2e.rows([4], "la", 1, 1.0)},
            {"op": "upsert", "rows": e2e.rows([1, 2], "sf", 2, 5.0) + e2e.rows([5], "la", 2, 5.0)},
            {"op": "delete", "rows": e2e.rows([3], "sf", 3, 0.0)},
        ]

    writers = [e2e.writer(coordinator, t, p, t, writes()) for t, p in tables.items()]
    assert e2e.wait_writers(writers) == [0, 0], [w.journal() for w in writers]
    with e2e.client(coordinator) as client:
        protocol = GrpcCommitProtocol(client, "sales.events", Storage(str(mor)), writer_id="compactor")
        try:
            compacted = HudiTable.open(str(mor), commit_protocol=protocol).compact(
                {"hoodie.compact.inline.max.delta.commits": "1"}
            )
        finally:
            protocol.close()
        assert compacted is not None
        t = client.begin_instant("sales.orders", "commit", writer_id="test").instant.instant_time
        rollback = client.abort_instant("sales.orders", t, "e2e").rollback_instant_time

    timelines = {t: [i for i in e2e.check_times(p, t) if i.is_completed] for t, p in tables.items()}
    assert [i.action for i in timelines["sales.orders"]] == ["commit"] * 3 + ["rollback"]
    assert timelines["sales.orders"][-1].time == rollback
    assert [i.action for i in timelines["sales.events"]] == ["deltacommit"] * 3 + ["commit"]
    want = sum(len(v) for v in timelines.values())

    messages = subscribe(kafka_bootstrap, kafka_topic, want)
    by_table: dict[str, list[events_pb2.CommitEvent]] = {t: [] for t in tables}
    for m in messages:
        event = events_pb2.CommitEvent.FromString(m.value())
        assert m.key() == event.table_id.encode()
        assert dict(m.headers() or [])["event_id"] == event.event_id.encode()
        by_table[event.table_id].append(event)
    for table_id, path in tables.items():
        events = by_table[table_id]
        instants = sorted(timelines[table_id], key=lambda i: i.completion_time or "")
        assert [e.event_id for e in events] == [f"{table_id}/{i.time}" for i in instants], (
            "exactly one event per completed instant, in completion order"
        )
        assert [e.sequence for e in events] == list(range(1, len(instants) + 1))
        table = HudiTable.open(str(path))
        for event, instant in zip(events, instants, strict=True):
            check_event(event, table_id, path, table, instant)

    # the counts themselves, from what was written (not from any metadata)
    orders = by_table["sales.orders"]
    assert [(e.num_inserts, e.num_updates, e.num_deletes) for e in orders[:3]] == [
        (4, 0, 0),
        (1, 2, 0),
        (0, 0, 1),
    ]
    assert [e.metadata.operation_type for e in orders[:3]] == ["INSERT", "UPSERT", "DELETE"]
    assert by_table["sales.events"][-1].metadata.compacted

    # a subscriber asks for what each event's instant changed (the rollback changed nothing)
    written = [sorted(r["id"] for r in changes_of(e, columns=["id"]).table.to_pylist()) for e in orders]
    assert written == [[1, 2, 3, 4], [1, 2, 5], [], []]
    net = changes_of(orders[2], format="min_delta", columns=["id"]).table.to_pylist()
    assert [(r["op"], r["before"]) for r in net] == [("d", {"id": 3})]
    compaction = changes_of(by_table["sales.events"][-1])
    assert compaction.table.num_rows == 0, "a compaction writes no new record versions"
