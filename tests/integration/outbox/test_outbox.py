"""The outbox publisher against a real PostgreSQL and a real Kafka-protocol broker (Apache Kafka).

Rows are inserted here the way the coordinator inserts them (the DDL below is the contract), with
CommitEvent payloads built by hand; expectations come from those hand-built values.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from inlet.proto.events.v1 import events_pb2
from inlet.proto.hudi.v1 import commit_pb2
from inlet.services.coordinator.outbox import OutboxPublisher
from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka

OUTBOX_DDL = """
CREATE TABLE IF NOT EXISTS outbox (
  id BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL UNIQUE,
  table_id TEXT NOT NULL,
  sequence BIGINT NOT NULL,
  payload BYTEA NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  published_at TIMESTAMPTZ,
  attempts INT NOT NULL DEFAULT 0,
  last_error TEXT
)
"""
PROTOBUF_CONTENT_TYPE = b"application/x-protobuf; message=inlet.proto.events.v1.CommitEvent"


# -- building events and rows ------------------------------------------------------------------


def instant_time(n: int) -> str:
    return f"20250102030405{n:03d}"


def make_event(
    table_id: str, seq: int, *, action: str = "commit", table_name: str | None = None
) -> events_pb2.CommitEvent:
    t = instant_time(seq)
    event = events_pb2.CommitEvent(
        event_id=f"{table_id}/{t}",
        table_id=table_id,
        table_name=table_name or table_id.replace("-", "_"),
        base_path=f"/lake/{table_id}",
        table_type="COPY_ON_WRITE" if action == "commit" else "MERGE_ON_READ",
        instant=commit_pb2.Instant(
            instant_time=t,
            action=action,
            state=commit_pb2.INSTANT_STATE_COMPLETED,
            completion_time=f"20250102030406{seq:03d}",
        ),
        sequence=seq,
        num_inserts=10 * seq,
    )
    event.metadata.operation_type = "UPSERT"
    event.metadata.extra_metadata["schema"] = '{"type":"record","name":"r","fields":[]}'
    event.metadata.extra_metadata["inlet.checkpoint"] = f"topic:0:{100 + seq}"
    stats = event.metadata.partition_to_write_stats["2025/01/02"].stats
    stats.add(
        file_id=f"fg-{seq}-a",
        path=f"2025/01/02/fg-{seq}-a_0-1-0_{t}.parquet",
        partition_path="2025/01/02",
        prev_commit="null",
        num_writes=10 * seq,
        num_inserts=10 * seq,
        total_write_bytes=4096 + seq,
        file_size_in_bytes=4096 + seq,
    )
    return event


def ensure_table(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute(OUTBOX_DDL)


def insert_rows(pg_url: str, events: list[events_pb2.CommitEvent]) -> None:
    """Insert outbox rows in one transaction, in list order (= completion order)."""
    ensure_table(pg_url)
    with psycopg.connect(pg_url) as conn:
        for ev in events:
            conn.execute(
                "INSERT INTO outbox (event_id, table_id, sequence, payload) VALUES (%s, %s, %s, %s)",
                (ev.event_id, ev.table_id, ev.sequence, ev.SerializeToString()),
            )


def outbox_rows(pg_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(pg_url) as conn:
        cur = conn.execute("SELECT event_id, published_at, attempts, last_error FROM outbox ORDER BY id")
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def interleaved(tables: dict[str, int]) -> list[events_pb2.CommitEvent]:
    """Events of several tables, sequences 1..n each, interleaved round-robin."""
    out = []
    for seq in range(1, max(tables.values()) + 1):
        for table, count in tables.items():
            if seq <= count:
                out.append(make_event(table, seq))
    return out


# -- reading Kafka ----------------------------------------------------------------------------


def consume(
    bootstrap: str, topic: str, count: int, timeout_s: float = 30.0, linger_s: float = 1.0
) -> list[Message]:
    """``count`` messages from the start of every partition of ``topic``, then ``linger_s`` more for extras.

    The partitions are assigned directly: a consumer group's join would add seconds and prove nothing here.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
        }
    )
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:  # the topic exists once something was published to it
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                break
            assert time.monotonic() < deadline, f"topic {topic} does not exist"
            time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
        end = time.monotonic() + linger_s
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def header(msg: Message, name: str) -> bytes | None:
    for pair in msg.headers() or []:  # a list of (name, value) pairs
        if pair[0] == name:
            value = pair[1]
            return value if isinstance(value, bytes) else None
    return None


def by_table_in_offset_order(messages: list[Message]) -> dict[str, list[events_pb2.CommitEvent]]:
    out: dict[str, list[events_pb2.CommitEvent]] = {}
    for msg in sorted(messages, key=lambda m: (m.partition() or 0, m.offset() or 0)):
        ev = events_pb2.CommitEvent.FromString(msg.value() or b"")
        out.setdefault((msg.key() or b"").decode(), []).append(ev)
    return out


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.fixture
def topic(kafka_server: EmbeddedKafka) -> str:
    name = f"inlet.commits.{uuid.uuid4().hex[:8]}"
    kafka_server.create_topic(name, partitions=3)
    return name


@pytest.fixture
def publishers() -> Iterator[list[OutboxPublisher]]:
    """Publishers created by a test; all stopped afterwards."""
    made: list[OutboxPublisher] = []
    yield made
    for pub in made:
        pub.stop()


# -- tests --------------------------------------------------------------------------------------


def test_rows_arrive_keyed_by_table_in_sequence_order(
    pg_url: str, kafka_bootstrap: str, topic: str, publishers: list[OutboxPublisher]
) -> None:
    events = interleaved({"sales-orders": 5, "crm-users": 4, "web-clicks": 3})
    insert_rows(pg_url, events)
    pub = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic, batch_size=4)  # several batches
    publishers.append(pub)

    assert pub.publish_pending() == 12
    assert pub.publish_pending() == 0  # nothing is sent twice

    got = consume(kafka_bootstrap, topic, 12)
    assert len(got) == 12
    tables = by_table_in_offset_order(got)
    assert {t: [e.sequence for e in evs] for t, evs in tables.items()} == {
        "sales-orders": [1, 2, 3, 4, 5],
        "crm-users": [1, 2, 3, 4],
        "web-clicks": [1, 2, 3],
    }
    expected = {e.event_id: e for e in events}
    for msg in got:
        ev = events_pb2.CommitEvent.FromString(msg.value() or b"")
        assert ev == expected[ev.event_id]  # payload is the row's bytes, unchanged
        assert header(msg, "event_id") == ev.event_id.encode()
        assert header(msg, "sequence") == str(ev.sequence).encode()
        assert header(msg, "content-type") == PROTOBUF_CONTENT_TYPE
    for key in tables:  # one table -> one partition
        assert len({m.partition() for m in got if m.key() == key.encode()}) == 1

    rows = outbox_rows(pg_url)
    assert all(r["published_at"] is not None and r["attempts"] == 1 for r in rows)
    assert pub.stats.published_total == 12
    assert pub.pending_count() == 0 and pub.lag_seconds() == 0.0


def test_publisher_creates_the_outbox_table_and_runs_in_background(
    pg_url: str, kafka_bootstrap: str, topic: str, publishers: list[OutboxPublisher]
) -> None:
    pub = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic, poll_interval_s=0.05)
    publishers.append(pub)
    pub.start()  # before the coordinator made the table
    wait_until(lambda: pub.is_leader, 10, "the publisher to lead")
    insert_rows(pg_url, [make_event("t1", 1), make_event("t1", 2)])
    wait_until(lambda: pub.stats.published_total == 2, 15, "two events published")
    insert_rows(pg_url, [make_event("t1", 3)])
    wait_until(lambda: pub.stats.published_total == 3, 15, "the third event published")
    pub.stop()
    assert not pub.is_running
    got = consume(kafka_bootstrap, topic, 3)
    assert [events_pb2.CommitEvent.FromString(m.value() or b"").sequence for m in got] == [1, 2, 3]


def test_kafka_outage_keeps_rows_pending_and_delivers_them_in_order_later(
    pg_url: str, publishers: list[OutboxPublisher]
) -> None:
    """A new broker on a fresh directory forgets producer ids: the idempotent producer (the only kind
    the publisher makes, whatever the overrides) turns fatal or resets, and the publisher carries on."""
    broker = EmbeddedKafka().start()
    port = broker.port
    try:
        pub = OutboxPublisher(
            pg_url,
            broker.bootstrap,
            topic="inlet.commits",
            delivery_timeout_s=2.0,
            max_backoff_s=0.5,
            poll_interval_s=0.1,
            topic_partitions=1,
            topic_config={"retention.ms": "3600000"},
            producer_config={"enable.idempotence": False},  # overridden: PRODUCER_SAFETY wins
        )
        publishers.append(pub)
        insert_rows(pg_url, [make_event("orders", 1), make_event("orders", 2)])
        assert pub.publish_pending() == 2
        # the publisher created its topic with the retention it was given (Kafka's own retention)
        assert topic_config(broker.bootstrap, "inlet.commits")["retention.ms"] == "3600000"
    finally:
        broker.stop()  # Kafka goes down

    during = [
        make_event("orders", 3),
        make_event("users", 1),
        make_event("orders", 4),
        make_event("users", 2),
    ]
    insert_rows(pg_url, during)
    assert pub.publish_pending() == 0
    rows = {r["event_id"]: r for r in outbox_rows(pg_url)}
    for ev in during:
        row = rows[ev.event_id]
        assert row["published_at"] is None
        assert row["attempts"] >= 1
        assert row["last_error"], "the failure is recorded"
    metrics = pub.metrics()
    assert metrics["failed_total"] >= 4 and metrics["published_total"] == 2
    assert metrics["pending"] == 4 and metrics["lag_seconds"] > 0
    assert pub.stats.last_error and "kafka" in pub.stats.last_error

    pub.start()  # the background loop retries with backoff while Kafka is still down
    time.sleep(1.0)
    assert pub.pending_count() == 4

    with EmbeddedKafka(port=port) as again:  # a new, empty broker on the same address
        wait_until(lambda: pub.pending_count() == 0, 40, "pending events delivered after the outage")
        pub.stop()
        got = consume(again.bootstrap, "inlet.commits", 4)
        tables = by_table_in_offset_order(got)
        assert {t: [e.sequence for e in evs] for t, evs in tables.items()} == {
            "orders": [3, 4],
            "users": [1, 2],
        }
    rows_after = outbox_rows(pg_url)
    assert all(r["published_at"] is not None for r in rows_after)


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's configuration as the broker describes it."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def test_two_publishers_on_one_database_do_not_interleave(
    pg_url: str, kafka_bootstrap: str, topic: str, publishers: list[OutboxPublisher]
) -> None:
    insert_rows(pg_url, interleaved({"a": 10, "b": 10}))
    first = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic, batch_size=3)
    second = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic, batch_size=3)
    publishers.extend([first, second])
    barrier = threading.Barrier(2)
    results: dict[str, int] = {}

    def run(name: str, pub: OutboxPublisher) -> None:
        barrier.wait()
        results[name] = pub.publish_pending()

    threads = [threading.Thread(target=run, args=(n, p)) for n, p in (("first", first), ("second", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results.values()) == [0, 20]  # one led, the other idled
    assert first.is_leader != second.is_leader

    leader, follower = (first, second) if first.is_leader else (second, first)
    insert_rows(pg_url, [make_event("a", 11)])
    assert follower.publish_pending() == 0  # still not leading
    leader.stop()  # its session ends: the lock is free
    assert follower.publish_pending() == 1
    assert follower.is_leader

    got = consume(kafka_bootstrap, topic, 21)
    ids = [events_pb2.CommitEvent.FromString(m.value() or b"").event_id for m in got]
    assert len(ids) == 21 and len(set(ids)) == 21  # none duplicated, none missing
    tables = by_table_in_offset_order(got)
    assert [e.sequence for e in tables["a"]] == list(range(1, 12))
    assert [e.sequence for e in tables["b"]] == list(range(1, 11))


def test_crash_between_delivery_and_marking_resends_the_same_event_id(
    pg_url: str,
    kafka_bootstrap: str,
    topic: str,
    publishers: list[OutboxPublisher],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    insert_rows(pg_url, [make_event("t", 1)])
    crashing = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic)
    publishers.append(crashing)

    def crash(*_args: object) -> None:  # fault injection: the process dies before marking
        raise RuntimeError("simulated crash before marking")

    monkeypatch.setattr(crashing, "_mark", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        crashing.publish_pending()
    crashing.stop()
    assert outbox_rows(pg_url)[0]["published_at"] is None

    survivor = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic)
    publishers.append(survivor)
    assert survivor.publish_pending() == 1
    got = consume(kafka_bootstrap, topic, 2)
    assert [header(m, "event_id") for m in got] == [b"t/" + instant_time(1).encode()] * 2


def test_hudi_callback_json_on_its_own_topic(
    pg_url: str, kafka_server: EmbeddedKafka, topic: str, publishers: list[OutboxPublisher]
) -> None:
    json_topic = topic + ".hudi"
    kafka_server.create_topic(json_topic, partitions=1)
    cow = make_event("sales-orders", 1, table_name="orders")
    mor = make_event("sales-orders", 2, action="deltacommit", table_name="orders")
    log_stat = mor.metadata.partition_to_write_stats["2025/01/03"].stats.add(
        file_id="fg-log",
        path="2025/01/03/.fg-log_20250102030405002.log.1_0-1-0",
        partition_path="2025/01/03",
        prev_commit="20250102030405001",
        num_writes=7,
        num_update_writes=5,
        num_deletes=2,
        total_write_bytes=999,
        file_size_in_bytes=999,
        base_file="fg-log_0-1-0_20250102030405001.parquet",
        log_version=1,
        log_offset=0,
    )
    log_stat.log_files.append(".fg-log_20250102030405002.log.1_0-1-0")
    insert_rows(pg_url, [cow, mor])
    pub = OutboxPublisher(pg_url, kafka_server.bootstrap, topic=topic, hudi_json_topic=json_topic)
    publishers.append(pub)
    assert pub.publish_pending() == 2

    got = consume(kafka_server.bootstrap, json_topic, 2)
    assert [m.key() for m in got] == [b"orders", b"orders"]  # Hudi keys by table name
    assert header(got[0], "content-type") == b"application/json"
    first, second = (json.loads(m.value() or b"") for m in got)
    assert first["commitTime"] == "20250102030405001"
    assert first["tableName"] == "orders"
    assert first["basePath"] == "/lake/sales-orders"
    assert first["commitActionType"] == "commit"
    assert first["extraMetadata"] == {
        "schema": '{"type":"record","name":"r","fields":[]}',
        "inlet.checkpoint": "topic:0:101",
    }
    [stat] = first["hoodieWriteStat"]
    assert stat["fileId"] == "fg-1-a"
    assert stat["path"] == "2025/01/02/fg-1-a_0-1-0_20250102030405001.parquet"
    assert stat["partitionPath"] == "2025/01/02"
    assert stat["prevCommit"] == "null"
    assert (stat["numWrites"], stat["numInserts"], stat["numUpdateWrites"], stat["numDeletes"]) == (
        10,
        10,
        0,
        0,
    )
    assert (stat["totalWriteBytes"], stat["fileSizeInBytes"]) == (4097, 4097)
    assert "logFiles" not in stat  # a base-file write is a plain HoodieWriteStat

    assert second["commitTime"] == "20250102030405002"
    assert second["commitActionType"] == "deltacommit"
    stats = {s["fileId"]: s for s in second["hoodieWriteStat"]}
    assert set(stats) == {"fg-2-a", "fg-log"}
    delta = stats["fg-log"]
    assert delta["logFiles"] == [".fg-log_20250102030405002.log.1_0-1-0"]
    assert delta["baseFile"] == "fg-log_0-1-0_20250102030405001.parquet"
    assert (delta["logVersion"], delta["logOffset"]) == (1, 0)
    assert (delta["numUpdateWrites"], delta["numDeletes"], delta["prevCommit"]) == (5, 2, "20250102030405001")


def test_undecodable_payload_is_still_published_but_gets_no_hudi_json(
    pg_url: str, kafka_bootstrap: str, topic: str, publishers: list[OutboxPublisher]
) -> None:
    ensure_table(pg_url)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO outbox (event_id, table_id, sequence, payload) VALUES ('t/1', 't', 1, %s)",
            (b"not a protobuf",),
        )
    pub = OutboxPublisher(pg_url, kafka_bootstrap, topic=topic, hudi_json_topic=topic + ".json")
    publishers.append(pub)
    assert pub.publish_pending() == 1  # the bytes go out as they are; the row does not block the outbox
    assert pub.stats.hudi_json_failed_total == 1
    assert pub.pending_count() == 0


class _Recorder(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_endpoint() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Recorder", (_Recorder,), {"received": [], "status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hudi-commits", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_http_callback_posts_hudi_json(
    pg_url: str,
    kafka_bootstrap: str,
    topic: str,
    publishers: list[OutboxPublisher],
    http_endpoint: tuple[str, type[_Recorder]],
) -> None:
    url, recorder = http_endpoint
    insert_rows(pg_url, [make_event("t", 1, table_name="trips"), make_event("t", 2, table_name="trips")])
    pub = OutboxPublisher(
        pg_url, kafka_bootstrap, topic=topic, http_callback_url=url, http_headers={"X-Team": "lake"}
    )
    publishers.append(pub)
    assert pub.publish_pending() == 2
    assert len(recorder.received) == 2
    for (headers, body), seq in zip(recorder.received, (1, 2), strict=True):
        assert headers["content-type"].startswith("application/json")
        assert headers["hudi-callback-key"] == "hudi_write_commit_http_callback"
        assert headers["x-team"] == "lake"
        message = json.loads(body)
        assert message["commitTime"] == instant_time(seq)
        assert message["tableName"] == "trips"
        assert message["hoodieWriteStat"][0]["fileId"] == f"fg-{seq}-a"
    assert pub.stats.http_posted_total == 2

    # an endpoint that fails does not hold Kafka delivery back (best effort, as Hudi's)
    recorder.status = 500
    insert_rows(pg_url, [make_event("t", 3, table_name="trips")])
    assert pub.publish_pending() == 1
    assert pub.stats.http_failed_total == 1
    assert pub.pending_count() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dsn": ""}, "non-empty dsn"),
        ({"bootstrap_servers": " "}, "non-empty bootstrap_servers"),
        ({"topic": ""}, "non-empty topic"),
        ({"http_callback_url": "ftp://x"}, "http_callback_url"),
        ({"batch_size": 0}, "batch_size"),
        ({"poll_interval_s": 0}, "must be > 0"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {
        "dsn": "postgresql://x@127.0.0.1/db",
        "bootstrap_servers": "127.0.0.1:9092",
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        OutboxPublisher(**args)
