"""The Kafka janitor on a real Tansu broker with its S3 storage on a real SeaweedFS.

Ten batches of three records in one partition (objects at base offsets 0, 3, ..., 27); groups commit
offsets through the Kafka protocol; janitor passes delete the objects wholly below the lowest
committed offset, and what is left is still served: to the groups resuming, to new readers, to a
reader asking for a deleted offset, and by a restarted broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from inlet.services.kafka_janitor import JanitorConfig, KafkaJanitor, Rule, deletable, low_watermarks
from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka, EmbeddedS3, kafka_storage

BATCHES = 10
PER_BATCH = 3
BUCKET = "kafka"


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[EmbeddedS3]:
    with EmbeddedS3(tmp_path / "s3") as server:
        yield server


def produce_batches(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """BATCHES produce requests of PER_BATCH records each (one flush per batch): (offset, value)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50})
    out: list[tuple[int, bytes]] = []
    for b in range(BATCHES):
        for r in range(PER_BATCH):
            producer.produce(
                topic,
                value=f"{b}-{r}".encode(),
                on_delivery=lambda err, msg: out.append((msg.offset(), msg.value())) if err is None else None,
            )
        assert producer.flush(30) == 0
    return sorted(out)


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def read_from(
    bootstrap: str, topic: str, expect_last: int, group: str | None = None, offset: int | None = None
) -> list[tuple[int, bytes]]:
    """Records read until offset ``expect_last``: through ``group`` (subscribe, its committed offset
    or the earliest), or with no group from ``offset`` (assign)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"assigned-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 500,
        }
    )
    if offset is None:
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, 0, offset)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    try:
        while (not got or got[-1][0] < expect_last) and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.value()))
    finally:
        c.close()
    return got


def test_deletable_keeps_every_batch_that_reaches_the_watermark_and_the_newest() -> None:
    bases = [0, 3, 6, 9, 12]
    assert deletable(bases, 0) == []
    assert deletable(bases, 5) == [0]  # batch 3 (offsets 3-5) holds 5
    assert deletable(bases, 6) == [0, 3]
    assert deletable(bases, 100) == [0, 3, 6, 9]  # the newest stays
    assert deletable([0, 3, 20], 10) == [0]  # a gap: batch 3 may end anywhere before 20
    committed = {"a": {("t", 0): 13, ("t", 1): -1001}, "b": {("t", 0): 6}, "stale": {("t", 0): 0}}
    assert low_watermarks(committed, ["st*"]) == {("t", 0): {"a": 13, "b": 6}}
    with pytest.raises(ValueError, match="TOPIC_GLOB=GROUP"):
        Rule.parse("inlet.changes.*")


def test_janitor_deletes_what_every_group_read_and_the_rest_is_served(s3_server: EmbeddedS3) -> None:
    storage = s3_server.storage(BUCKET)
    with EmbeddedKafka(storage=kafka_storage(s3_server, BUCKET)) as broker:
        bootstrap = broker.bootstrap
        topic = f"jan.{uuid.uuid4().hex[:8]}"
        broker.create_topic(topic, partitions=1)
        records = produce_batches(bootstrap, topic)
        assert [o for o, _ in records] == list(range(BATCHES * PER_BATCH))

        def janitor(*rules: Rule) -> KafkaJanitor:
            return KafkaJanitor(JanitorConfig(bootstrap=bootstrap, storage=storage, rules=rules))

        probe = janitor(Rule(topic, ("ahead",)))
        objects = lambda: sorted(probe.batch_objects(topic, 0))  # noqa: E731
        assert objects() == list(range(0, 30, 3))

        # "ahead" read into batch 12 (offsets 12-14), "behind" into batch 6
        commit(bootstrap, "ahead", topic, 13)
        commit(bootstrap, "behind", topic, 7)

        # a group the rule requires has not committed: nothing goes
        result = janitor(Rule(topic, ("ahead", "writer-not-started"))).run_pass()
        assert (
            result.deleted == 0
            and "no offset committed by writer-not-started" in result.skipped[f"{topic}/0"]
        )
        assert objects() == list(range(0, 30, 3))

        # a dry run counts and deletes nothing
        dry = KafkaJanitor(
            JanitorConfig(bootstrap, storage, (Rule(topic, ("ahead",)),), dry_run=True)
        ).run_pass()
        assert dry.deleted == 2 and objects() == list(range(0, 30, 3))

        # the lowest group holds the data back: only the batches wholly below 7
        result = janitor(Rule(topic, ("ahead",))).run_pass()
        assert [(p.watermark, p.deleted, p.objects) for p in result.partitions] == [(7, 2, 10)]
        assert objects() == list(range(6, 30, 3))

        # "behind" catches up with "ahead": below 13 goes, batch 12 (holds 13, 14) stays
        commit(bootstrap, "behind", topic, 13)
        result = janitor(Rule(topic, ("ahead",))).run_pass()
        assert result.deleted == 2 and result.deleted_bytes > 0
        assert objects() == list(range(12, 30, 3))

        rest = records[13:]
        # each group resumes at its committed offset and reads exactly the rest
        assert read_from(bootstrap, topic, 29, group="ahead") == rest
        # a reader asking for a deleted offset gets the first record left (no out-of-range error);
        # a new group starts at the earliest record left, which ListOffsets reports too
        assert read_from(bootstrap, topic, 29, offset=0) == records[12:]
        assert read_from(bootstrap, topic, 29, group=f"new-{uuid.uuid4().hex[:6]}") == records[12:]
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
        try:
            low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        finally:
            c.close()
        assert low == 12

        # a topic no rule names is left alone
        assert janitor(Rule("other.*", ("ahead",))).run_pass().deleted == 0
        assert objects() == list(range(12, 30, 3))

        # a restarted broker on the same bucket serves what is left, and produces go on at 30
        port = broker.port
        broker.stop()
        with EmbeddedKafka(port=port, storage=kafka_storage(s3_server, BUCKET)) as again:
            more = produce_batches(again.bootstrap, topic)
            assert more[0][0] == BATCHES * PER_BATCH
            assert read_from(again.bootstrap, topic, 59, group="behind") == rest + more
