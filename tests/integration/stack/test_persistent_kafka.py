"""Durable local stack: Apache Kafka keeping its data in a directory, and SeaweedFS as a real S3 endpoint.

A broker on a persistent ``data_dir`` (the stack's ``DIR/kafka``) that is killed or stopped and started
again on it (``inlet stack down`` + ``up``) is back on the same port with the same cluster id and still has
its topics with their partition counts, every acknowledged record with key, value and per-partition order,
the consumer groups' committed offsets, and continues new produces at the next offsets. A broker on a
temporary directory leaves nothing behind.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka, EmbeddedS3, S3Storage, StackError

PARTITIONS = 4
MESSAGES = 300


# -- helpers -----------------------------------------------------------------------------------


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def tcp_listeners(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on, IPv4 and IPv6, from /proc."""
    inodes = _socket_inodes(pid)
    found = set()
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        if not os.path.exists(table):
            continue
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                address, port_hex = fields[1].split(":")
                if fields[3] != "0A" or int(fields[9]) not in inodes:
                    continue
                raw = bytes.fromhex(address)
                if v6:
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    ip = socket.inet_ntop(socket.AF_INET6, words)
                else:
                    ip = socket.inet_ntoa(raw[::-1])
                found.add((ip, int(port_hex, 16)))
    return found


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def outward_ip() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: only selects the outgoing interface
            ip: str = sock.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


Record = tuple[int, bytes, bytes]  # offset, key, value


def produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> dict[int, list[Record]]:
    """Produce with acks=all; partition -> delivered (offset, key, value) in offset order."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000}
    )
    delivered: dict[int, list[Record]] = {}
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
            return
        delivered.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]

    for key, value in items:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return {p: sorted(records) for p, records in delivered.items()}


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
            "session.timeout.ms": 2000,
            "heartbeat.interval.ms": 500,
        }
    )


def read(
    bootstrap: str, topic: str, count: int, group: str | None = None, timeout_s: float = 40.0
) -> dict[int, list[Record]]:
    """``count`` records through group ``group`` (a new group when None), partition -> records in order read."""
    c = consumer(bootstrap, group or f"reader-{uuid.uuid4().hex}")
    c.subscribe([topic])
    got: dict[int, list[Record]] = {}
    n = 0
    deadline = time.monotonic() + timeout_s
    try:
        while n < count and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
            n += 1
        extra_until = time.monotonic() + 1.0  # nothing beyond the expected records may follow
        while time.monotonic() < extra_until:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return got


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = consumer(bootstrap, group)
    try:
        result = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in result}


def wait_until_gone(pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


Acked = tuple[int, int, bytes, bytes]  # partition, offset, key, value


def produce_then_kill(broker: EmbeddedKafka, pid: int) -> tuple[Producer, str, set[Acked]]:
    """A topic gets MESSAGES records acknowledged (acks=all), then MESSAGES more are queued and in
    flight when the broker gets SIGKILL. Returns the producer (it retries what was not acknowledged
    once a broker answers again), the topic and the records acknowledged so far (the set grows)."""
    topic = f"killed.{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=PARTITIONS)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000}
    )
    acked: set[Acked] = set()

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acked.add((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for prefix in ("before", "inflight"):
        for i in range(MESSAGES):
            producer.produce(
                topic, key=f"key-{i % 17}".encode(), value=f"{prefix}-{i}".encode(), on_delivery=on_delivery
            )
            producer.poll(0)
        if prefix == "before":
            assert producer.flush(30) == 0 and len(acked) == MESSAGES
    os.kill(pid, signal.SIGKILL)
    wait_until_gone(pid)
    return producer, topic, acked


def check_acknowledged_survived(
    broker: EmbeddedKafka, producer: Producer, topic: str, acked: set[Acked]
) -> None:
    """Every record acknowledged before or after the kill is read back at its offset with its key and
    value (a retried batch may also appear twice: at-least-once)."""
    producer.flush(60)
    assert len(acked) > MESSAGES  # in-flight records were acknowledged too (before or after the kill)
    seen: set[Acked] = set()
    c = consumer(broker.bootstrap, f"reader-{uuid.uuid4().hex}")
    c.subscribe([topic])
    deadline = time.monotonic() + 40
    try:
        while not acked <= seen and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    assert sorted(acked - seen) == []


# -- EmbeddedS3 --------------------------------------------------------------------------------


def test_s3_temporary_directory_is_removed_and_fixed_busy_port_is_a_clear_error() -> None:
    server = EmbeddedS3()
    with server:
        base = server.data_dir.parent
        server.create_bucket("scratch")
        assert base.is_dir()
    assert not base.exists()

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        busy = squatter.getsockname()[1]
        blocked = EmbeddedS3(port=busy)
        with pytest.raises(StackError, match=f"cannot listen on 127.0.0.1:{busy}"):
            blocked.start()
        assert blocked.pid is None


# -- SeaweedFS (the lake of --lake s3) -------------------------------------------------------------


@pytest.fixture
def s3_dir(tmp_path: Path) -> Path:
    return tmp_path / "s3"


def check_s3_serves_loopback_only_with_credentials(server: EmbeddedS3) -> None:
    """Every port is on loopback; a bucket and an object are made; requests need the credentials."""
    port, pid, ports = server.port, server.pid, server.ports
    assert pid is not None and server.endpoint == f"http://127.0.0.1:{port}"
    listeners = tcp_listeners(pid)
    # every port it opens (S3, master, volume, filer, and their gRPC ports) is on loopback
    assert {address for address, _ in listeners} == {"127.0.0.1"}, listeners
    assert {p for _, p in listeners} == set(ports) and len(ports) == 8
    ip = outward_ip()
    if ip is not None:
        with pytest.raises(OSError):
            socket.create_connection((ip, port), timeout=1).close()

    server.create_bucket("kept")
    server.create_bucket("kept")  # exists: fine
    assert server.buckets() == ["kept"]
    fs = server.storage("kept").filesystem()
    with fs.open_output_stream("kept/dir/object.bin") as out:
        out.write(b"survives restart" * 1000)

    # requests need the configured credentials
    wrong = S3Storage(server.endpoint, "kept", server.access_key, "not-the-secret").filesystem()
    with pytest.raises(OSError):
        wrong.get_file_info(pafs.FileSelector("kept"))
    anonymous = pafs.S3FileSystem(anonymous=True, endpoint_override=f"127.0.0.1:{port}", scheme="http")
    with pytest.raises(OSError):
        anonymous.get_file_info(pafs.FileSelector("kept"))


def check_s3_stopped_clean(base: Path, pid: int, ports: list[int]) -> None:
    """No process, port or gRPC socket left; the data and the 0600 credentials file stay."""
    wait_until_gone(pid)
    assert not Path(f"/proc/{pid}").exists()
    assert all(refused(p) for p in ports)
    assert processes_mentioning(str(base)) == []
    assert not any(
        Path(f"/tmp/seaweedfs-{role}-grpc-{p}.sock").exists()
        for role in ("master", "volume", "filer", "s3")
        for p in ports
    )
    assert (base / "data").is_dir() and stat.S_IMODE((base / "s3.json").stat().st_mode) == 0o600


def test_s3_serves_loopback_only_and_keeps_objects_across_a_restart(s3_dir: Path) -> None:
    server = EmbeddedS3(s3_dir)
    with server:
        check_s3_serves_loopback_only_with_credentials(server)
        s3_port, s3_pid, s3_ports = server.port, server.pid, server.ports
    assert s3_pid is not None
    check_s3_stopped_clean(s3_dir, s3_pid, s3_ports)
    with EmbeddedS3(s3_dir, port=s3_port) as again:
        assert again.port == s3_port
        with again.filesystem().open_input_stream("kept/dir/object.bin") as src:
            assert src.read() == b"survives restart" * 1000
        assert again.buckets() == ["kept"]
        again_ports = again.ports
    assert all(refused(p) for p in again_ports)
    assert processes_mentioning(str(s3_dir)) == []


# -- Apache Kafka on a persistent data directory -------------------------------------------------


def test_kafka_data_dir_keeps_topics_records_and_group_offsets_across_restarts(tmp_path: Path) -> None:
    """The first broker is killed with SIGKILL while a producer (acks=all) has batches in flight: the
    restarted one (same directory, no port given) has every record that was acknowledged; a clean stop
    and a third start keep everything too (``inlet stack down`` + ``up``)."""
    data = tmp_path / "kafka"
    broker = EmbeddedKafka(data_dir=data)
    broker.start()
    port, pid, cluster = broker.port, broker.pid, broker.cluster_id
    controller = broker.controller_port
    assert pid is not None and cluster and controller is not None
    # both listeners (broker and controller) on loopback only
    assert tcp_listeners(pid) == {("127.0.0.1", port), ("127.0.0.1", controller)}
    topic = f"durable.{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    try:
        broker.create_topic(topic, partitions=PARTITIONS)
        items = [(f"key-{i % 17}".encode(), f"value-{i}".encode()) for i in range(MESSAGES)]
        delivered = produce(broker.bootstrap, topic, items)
        assert sum(len(r) for r in delivered.values()) == MESSAGES
        assert len(delivered) == PARTITIONS  # 17 keys spread over every partition
        for records in delivered.values():
            assert [offset for offset, _, _ in records] == list(range(len(records)))  # dense, from 0

        # the group reads everything, then commits a position in the middle of each partition
        first = read(broker.bootstrap, topic, MESSAGES, group=group)
        assert first == delivered
        positions = {p: len(records) // 2 for p, records in delivered.items()}
        c = consumer(broker.bootstrap, group)
        c.commit(offsets=[TopicPartition(topic, p, off) for p, off in positions.items()], asynchronous=False)
        c.close()
        assert committed(broker.bootstrap, group, topic) == positions

        # the broker dies by SIGKILL while another topic's producer has batches in flight
        killed = produce_then_kill(broker, pid)
    finally:
        broker.stop()
    wait_until_gone(pid)
    assert refused(port)
    assert (data / "logs" / "meta.properties").is_file()  # a given directory is kept

    # 1. restart on the same directory: the same port and cluster, nothing acknowledged lost
    with EmbeddedKafka(data_dir=data) as again:
        assert again.bootstrap == f"127.0.0.1:{port}" and again.cluster_id == cluster
        check_acknowledged_survived(again, *killed)
        check_resumed(again, topic, group, delivered, positions)
        more = produce(
            again.bootstrap, topic, [(f"key-{i % 17}".encode(), f"late-{i}".encode()) for i in range(40)]
        )
        # new produces continue at the next offsets of each partition
        for p, records in more.items():
            assert [o for o, _, _ in records] == list(
                range(len(delivered[p]), len(delivered[p]) + len(records))
            )
            delivered[p] = delivered[p] + records
    assert refused(port)

    # 2. after a clean stop (SIGTERM: controlled shutdown), a third start resumes too
    with EmbeddedKafka(data_dir=data) as third:
        assert third.port == port and third.cluster_id == cluster
        check_resumed(third, topic, group, delivered, positions)
        extra = produce(third.bootstrap, topic, [(b"key-0", b"after-full-restart")])
        [(p, [(offset, _, _)])] = extra.items()
        assert offset == len(delivered[p])
    assert refused(port)
    assert processes_mentioning(str(data)) == []


def check_resumed(
    broker: EmbeddedKafka,
    topic: str,
    group: str,
    delivered: dict[int, list[Record]],
    positions: dict[int, int],
) -> None:
    total = sum(len(r) for r in delivered.values())
    assert broker.topics()[topic] == PARTITIONS
    # every record, with its key, value and offset, in per-partition order, read by a new group
    assert read(broker.bootstrap, topic, total) == delivered
    # the group's committed offsets are kept, and it resumes from them
    assert committed(broker.bootstrap, group, topic) == positions
    rest = read(broker.bootstrap, topic, total - sum(positions.values()), group=group)
    assert rest == {p: records[positions[p] :] for p, records in delivered.items()}


def test_temporary_data_dir_is_removed_and_a_new_broker_on_the_port_is_empty() -> None:
    """The default: data in a temporary directory, gone at stop; a new broker on the same port starts
    empty (how tests simulate an outage that loses the broker's data)."""
    with EmbeddedKafka() as broker:
        data = broker.data_dir
        port = broker.port
        assert data is not None and (data / "logs" / "meta.properties").is_file()
        broker.create_topic("lost.at.stop", partitions=2)
    assert not data.exists() and refused(port)
    with EmbeddedKafka(port=port) as again:
        assert again.port == port and "lost.at.stop" not in again.topics()
    assert processes_mentioning(str(data)) == []
