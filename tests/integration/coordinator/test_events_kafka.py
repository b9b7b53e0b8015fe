"""``serve`` with Kafka: the outbox publisher it starts delivers one CommitEvent per completed
instant to the commits topic (a real Apache Kafka broker), keyed by table, in completion order."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from coordinator_helpers import rows

from inlet.core import HudiTable
from inlet.proto.events.v1 import events_pb2
from inlet.services.coordinator.config import ConfigError
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("inlet.services.coordinator.outbox") is None, reason="no outbox publisher yet"
)


def test_serve_publishes_commit_events(
    start_coordinator: Callable[..., RunningServer],
    kafka_bootstrap: str,
    kafka_topic: str,
    lake: Path,
    open_table: Callable[..., HudiTable],
) -> None:
    # --kafka-option settings reach the event producer (a secured cluster's go this way); a
    # misspelt one stops the start with its name, not a publisher that retries forever
    with pytest.raises(ConfigError, match=r"--kafka-option: .*sasl\.mechansim"):
        start_coordinator(kafka_bootstrap=kafka_bootstrap, kafka_options=("sasl.mechansim=PLAIN",))
    server = start_coordinator(
        kafka_bootstrap=kafka_bootstrap, topic=kafka_topic, kafka_options=("compression.type=zstd",)
    )
    assert server.publisher is not None
    assert server.publisher._producer_overrides == {"compression.type": "zstd"}
    path = lake / "ev"
    HudiTable.create(str(path), name="ev", record_key="id", partition_by="city", ordering_field="ts")
    with CoordinatorClient(server.address) as client:
        client.register_table("sales.ev", str(path))
        table = open_table(client, "sales.ev", path)
        first = table.write(rows([1, 2, 3], "sf", 1), "insert")
        second = table.write(rows([2], "sf", 2), "upsert")

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": f"test-{kafka_topic}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
        }
    )
    consumer.assign([TopicPartition(kafka_topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[bytes | None, events_pb2.CommitEvent]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.key(), events_pb2.CommitEvent.FromString(msg.value() or b"")))
    finally:
        consumer.close()
    assert [k for k, _ in got] == [b"sales.ev", b"sales.ev"]
    events = [e for _, e in got]
    assert [(e.instant.instant_time, e.instant.completion_time) for e in events] == [
        (first.instant_time, first.completion_time),
        (second.instant_time, second.completion_time),
    ]
    assert [e.sequence for e in events] == [1, 2]
    assert (events[0].num_inserts, events[1].num_updates) == (3, 1)
    assert events[1].event_id == f"sales.ev/{second.instant_time}"
