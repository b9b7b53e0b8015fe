"""The real Debezium 3.6 PostgreSQL connector in real Kafka Connect standalone, on the embedded PostgreSQL and Apache Kafka.

What the CDC pipeline relies on: a snapshot of existing rows (``op=r``), then insert / update / delete
envelopes keyed by primary key, a tombstone after each delete, BEGIN/END markers with per-table counts on
``<prefix>.transaction``; a stop and start on the same data directory resumes from the stored offsets (no
new snapshot, nothing lost or repeated); ``schemas_enable=False`` gives payload-only JSON. Every envelope is
compared with the real connector's output captured in ``<repo>/../shared/testdata/debezium`` (same tables,
same statements, same Debezium version): schemas and row images must be identical, names aside.

One connector per configuration is shared by the tests of this module (a JVM start costs ~10 s here).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inlet.services.stack import (
    TEST_CONSUMER_SETTINGS,
    EmbeddedDebezium,
    EmbeddedPostgres,
    StackError,
    heartbeat,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
CAPTURE_DIR = REPO_ROOT.parent / "shared" / "testdata" / "debezium"
CAPTURE_PREFIX = "dbserver1"  # topic.prefix of the captured run
CAPTURE_DB = "cdcdb"

# The captured run's tables and first rows (capture_script.py), so envelopes can be compared one to one.
SETUP = [
    "CREATE TABLE public.customers (id serial PRIMARY KEY, name text NOT NULL, balance numeric(10,2), "
    "score numeric, born date, created_at timestamp(6), updated_at timestamptz, doc jsonb, uid uuid, "
    "tags text[], photo bytea, bio text)",
    "CREATE TABLE public.orders (order_id bigint PRIMARY KEY, customer_id int, amount numeric(12,3), "
    "note varchar(20))",
    "INSERT INTO public.customers (name, balance, score, born, created_at, updated_at, doc, uid, tags, photo, bio) "
    "VALUES ('Anne', 4.99, 123.4500, '1990-05-17', '2018-06-20 15:13:16.945104', '2024-01-02 03:04:05.1234+02', "
    """'{"vip": true, "n": [1, 2]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', ARRAY['x','y z'], '\\x0102ff'::bytea, """
    "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 1500) i)), "
    "('Bob', -0.5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'short bio')",
    "INSERT INTO public.orders VALUES (100, 1, 12.345, 'first')",
]
TABLES = ["public.customers", "public.orders"]


def load_capture(name: str) -> list[dict[str, Any]]:
    path = CAPTURE_DIR / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def renamed(obj: Any, prefix: str, db: str) -> Any:
    """``obj`` (JSON) with the captured run's topic prefix and database name replaced by ours."""
    text = json.dumps(obj).replace(f'"{CAPTURE_PREFIX}.', f'"{prefix}.')
    text = text.replace(f'"name": "{CAPTURE_PREFIX}"', f'"name": "{prefix}"').replace(
        f'"{CAPTURE_DB}"', f'"{db}"'
    )
    return json.loads(text)


def decimal(encoded: str, scale: int) -> Decimal:
    """A Connect ``Decimal`` (big-endian two's complement unscaled value, base64) as a ``Decimal``."""
    unscaled = int.from_bytes(base64.b64decode(encoded), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any  # None for a tombstone

    @property
    def payload(self) -> Any:
        """The envelope (``value.payload`` with schemas, the value itself without)."""
        if self.value is None:
            return None
        return self.value["payload"] if "schema" in self.value and "payload" in self.value else self.value


def read_topics(
    bootstrap: str, topics: list[str], until: Callable[[list[Record]], bool], timeout_s: float = 60.0
) -> list[Record]:
    """Every record of ``topics`` from the beginning, read until ``until(records)`` holds (else the test fails).

    Partitions are assigned directly; records keep their partition
    order (these topics have one partition).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-dbz-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
        }
    )
    records: list[Record] = []
    try:
        deadline = time.monotonic() + timeout_s
        assigned: set[str] = set()
        while time.monotonic() < deadline:
            missing = [t for t in topics if t not in assigned]
            if missing:
                metadata = consumer.list_topics(timeout=5)
                ready = [t for t in missing if t in metadata.topics]
                if ready:
                    assigned.update(ready)
                    consumer.incremental_assign(  # only the new topics: the others keep their position
                        [
                            TopicPartition(t, p, OFFSET_BEGINNING)
                            for t in ready
                            for p in metadata.topics[t].partitions
                        ]
                    )
            if assigned:
                for message in consumer.consume(num_messages=500, timeout=0.3):
                    error = message.error()
                    assert error is None, error
                    key, value = message.key(), message.value()
                    records.append(
                        Record(
                            message.topic() or "",
                            message.partition() or 0,
                            message.offset() or 0,
                            json.loads(key) if key is not None else None,
                            json.loads(value) if value is not None else None,
                        )
                    )
            else:
                time.sleep(0.3)
            if assigned == set(topics) and until(records):
                return records
        summary = [(r.topic, r.payload.get("op") if r.payload else None) for r in records]
        pytest.fail(f"condition not met on {topics} after {timeout_s}s; got {summary}")
    finally:
        consumer.close()


def ops(records: list[Record], topic: str) -> list[str | None]:
    """The ``op`` of each record of ``topic`` in order (None for a tombstone)."""
    return [r.payload["op"] if r.value is not None else None for r in records if r.topic == topic]


def execute(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


# -- shared connector (schemas enabled, the Kafka Connect default) ---------------------------------------


@pytest.fixture(scope="module")
def capture_db(postgres_server: EmbeddedPostgres) -> Iterator[str]:
    """A database holding the captured run's tables and first rows (for the module's shared connector)."""
    name = f"dbz_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    execute(url, *SETUP)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="module")
def shared(capture_db: str, debezium_factory: Any) -> Iterator[EmbeddedDebezium]:
    dbz: EmbeddedDebezium = debezium_factory(capture_db, table_include_list=TABLES)
    try:
        yield dbz
    finally:
        debezium_factory.release(dbz)


def test_connector_and_task_run_and_status_is_connects(shared: EmbeddedDebezium) -> None:
    status = shared.status()
    assert status["name"] == shared.name
    assert status["type"] == "source"
    assert status["connector"]["state"] == "RUNNING"
    assert [t["state"] for t in status["tasks"]] == ["RUNNING"]
    assert status["connector"]["version"] == "3.6.3.Final"
    assert shared.rest_url.startswith("http://127.0.0.1:")
    assert shared.is_running and shared.pid is not None
    config = shared.rest_get(f"/connectors/{shared.name}/config")
    assert config["plugin.name"] == "pgoutput" and config["table.include.list"] == ",".join(TABLES)


def test_snapshot_reads_existing_rows_like_the_real_capture(
    shared: EmbeddedDebezium, capture_db: str
) -> None:
    real = load_capture("real_schemas_true.jsonl")
    db = capture_db.rsplit("/", 1)[1]
    customers, orders = shared.topic("customers"), shared.topic("orders")
    records = read_topics(
        shared.kafka_bootstrap,
        [customers, orders],
        lambda rs: ops(rs, customers)[:2] == ["r", "r"] and ops(rs, orders)[:1] == ["r"],
    )
    snapshot = [r for r in records if r.value is not None and r.payload["op"] == "r"]
    snapshot.sort(key=lambda r: (r.topic != customers, r.offset))  # the captured order: customers, orders
    assert len(snapshot) == 3
    real_snapshot = [r for r in real if r["value"] and r["value"]["payload"].get("op") == "r"]
    for mine, theirs in zip(snapshot, real_snapshot, strict=True):
        assert mine.topic == theirs["topic"].replace(CAPTURE_PREFIX, shared.topic_prefix, 1)
        # keys: same schema (struct named <prefix>.public.<table>.Key), same primary-key payload
        assert mine.key == renamed(theirs["key"], shared.topic_prefix, db)
        # values: the whole Connect schema is identical, and so is the row image
        assert mine.value["schema"] == renamed(theirs["value"]["schema"], shared.topic_prefix, db)
        assert mine.payload["after"] == theirs["value"]["payload"]["after"]
        assert mine.payload["before"] is None and mine.payload["transaction"] is None
        source = mine.payload["source"]
        assert (source["name"], source["db"], source["schema"]) == (shared.topic_prefix, db, "public")
        assert source["version"] == "3.6.3.Final" and source["connector"] == "postgresql"
    anne = snapshot[0].payload["after"]
    assert anne["name"] == "Anne" and decimal(anne["balance"], 2) == Decimal("4.99")
    assert snapshot[0].payload["source"]["snapshot"] == "first"
    assert decimal(snapshot[1].payload["after"]["balance"], 2) == Decimal("-0.50")
    assert snapshot[2].payload["after"]["order_id"] == 100


def test_insert_update_delete_give_envelopes_and_a_tombstone(
    shared: EmbeddedDebezium, capture_db: str
) -> None:
    real = load_capture("real_schemas_true.jsonl")
    customers = shared.topic("customers")
    execute(
        capture_db,
        "INSERT INTO public.customers (name, balance) VALUES ('Carl', 1234567.89)",
        "UPDATE public.customers SET balance = 24.99 WHERE name = 'Anne'",
        "DELETE FROM public.customers WHERE name = 'Bob'",
    )

    def changes(rs: list[Record]) -> list[Record]:
        return [r for r in rs if r.topic == customers and (r.value is None or r.payload["op"] != "r")]

    records = read_topics(shared.kafka_bootstrap, [customers], lambda rs: len(changes(rs)) >= 4)
    got = changes(records)
    assert [r.payload["op"] if r.value else None for r in got] == ["c", "u", "d", None]
    insert, update, delete, tombstone = got
    assert [r.key["payload"] for r in got] == [{"id": 3}, {"id": 1}, {"id": 2}, {"id": 2}]

    real_insert = real[6]["value"]["payload"]  # the captured run's same statements
    assert real_insert["op"] == "c"
    assert insert.payload["after"] == real_insert["after"]
    assert insert.payload["before"] is None
    assert decimal(insert.payload["after"]["balance"], 2) == Decimal("1234567.89")

    real_update = real[9]["value"]["payload"]
    assert real_update["op"] == "u"
    # REPLICA IDENTITY DEFAULT: no before image; the unchanged TOASTed bio is Debezium's placeholder
    assert update.payload["before"] is None
    assert update.payload["after"] == real_update["after"]
    assert decimal(update.payload["after"]["balance"], 2) == Decimal("24.99")
    assert update.payload["after"]["bio"] == "__debezium_unavailable_value"

    real_delete = real[13]["value"]["payload"]
    assert real_delete["op"] == "d"
    assert delete.payload["after"] is None
    assert delete.payload["before"] == real_delete["before"]  # key columns only ('' for NOT NULL text)
    assert tombstone.value is None and tombstone.key == delete.key
    for r in (insert, update, delete):
        assert r.payload["source"]["snapshot"] == "false"
        assert r.payload["transaction"]["total_order"] == 1
        assert str(r.payload["source"]["txId"]) == r.payload["transaction"]["id"].split(":")[0]
    assert insert.value["schema"] == update.value["schema"] == delete.value["schema"]


def test_transaction_metadata_brackets_a_multi_table_transaction(
    shared: EmbeddedDebezium, capture_db: str
) -> None:
    real = load_capture("real_schemas_true.jsonl")
    customers, orders, transactions = (
        shared.topic("customers"),
        shared.topic("orders"),
        shared.transaction_topic,
    )
    with psycopg.connect(capture_db) as conn:  # one transaction, committed on leaving the block
        conn.execute(
            "INSERT INTO public.customers (id, name, balance) VALUES (100, 'Tx-A', 1.25), (101, 'Tx-B', 2.5)"
        )
        conn.execute("INSERT INTO public.orders VALUES (101, 100, 0.001, 'tx')")
        txid = conn.execute("SELECT txid_current()").fetchone()[0]  # type: ignore[index]

    def mine(rs: list[Record]) -> list[Record]:
        return [
            r
            for r in rs
            if r.value is not None
            and (
                (r.topic == transactions and r.payload["id"].split(":")[0] == str(txid))
                or (r.topic in (customers, orders) and r.payload["source"]["txId"] == txid)
            )
        ]

    records = read_topics(
        shared.kafka_bootstrap,
        [customers, orders, transactions],
        lambda rs: (
            [r.payload.get("status") for r in mine(rs) if r.topic == transactions] == ["BEGIN", "END"]
            and len([r for r in mine(rs) if r.topic != transactions]) == 3
        ),
    )
    found = mine(records)
    begin, end = [r for r in found if r.topic == transactions]
    data = sorted(
        (r for r in found if r.topic != transactions), key=lambda r: r.payload["transaction"]["total_order"]
    )

    real_begin = next(r for r in real if r["topic"].endswith(".transaction"))
    assert begin.key["schema"] == real_begin["key"]["schema"]
    assert begin.value["schema"] == end.value["schema"] == real_begin["value"]["schema"]
    assert begin.payload["status"] == "BEGIN" and begin.payload["event_count"] is None
    assert begin.key["payload"]["id"] == begin.payload["id"]
    assert end.payload["status"] == "END" and end.payload["event_count"] == 3
    # per table, in order of first appearance (as in the captured run)
    assert end.payload["data_collections"] == [
        {"data_collection": "public.customers", "event_count": 2},
        {"data_collection": "public.orders", "event_count": 1},
    ]
    # Debezium 3.6's transaction ids are "txId:LSN" of the event, so they differ within one transaction
    # (the captured run shows the same): the first event carries BEGIN's id, all share the txId
    assert data[0].payload["transaction"]["id"] == begin.payload["id"]
    assert {r.payload["transaction"]["id"].split(":")[0] for r in data} == {str(txid)}
    assert begin.payload["id"].split(":")[0] == end.payload["id"].split(":")[0] == str(txid)
    assert [r.payload["transaction"]["total_order"] for r in data] == [1, 2, 3]
    assert [(r.topic, r.payload["transaction"]["data_collection_order"]) for r in data] == [
        (customers, 1),
        (customers, 2),
        (orders, 1),
    ]
    assert [r.payload["after"]["name"] for r in data[:2]] == ["Tx-A", "Tx-B"]
    assert decimal(data[1].payload["after"]["balance"], 2) == Decimal("2.50")
    assert decimal(data[2].payload["after"]["amount"], 3) == Decimal("0.001")
    # markers come in order on the transaction topic (one partition): BEGIN before END
    assert begin.offset < end.offset and begin.partition == end.partition


def test_restart_keeps_a_temporary_data_dir_and_resumes(shared: EmbeddedDebezium, capture_db: str) -> None:
    customers = shared.topic("customers")
    data_dir, pid = shared.data_dir, shared.pid
    shared.restart()
    assert shared.data_dir == data_dir and data_dir.is_dir()
    assert shared.pid is not None and shared.pid != pid
    assert shared.status()["tasks"][0]["state"] == "RUNNING"
    execute(capture_db, "INSERT INTO public.customers (id, name) VALUES (200, 'after-restart')")
    records = read_topics(
        shared.kafka_bootstrap, [customers], lambda rs: any(r.key["payload"] == {"id": 200} for r in rs)
    )
    assert ops(records, customers).count("r") == 2  # the snapshot was not taken again
    assert [r.key["payload"]["id"] for r in records].count(200) == 1


# -- payload-only JSON, stop and resume ---------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_db(postgres_server: EmbeddedPostgres) -> Iterator[str]:
    name = f"dbz_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    execute(url, *SETUP)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="module")
def plain(
    plain_db: str, debezium_factory: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedDebezium]:
    """A connector with ``schemas_enable=False`` and a data directory of its own (kept across restarts),
    with the heartbeat table and publication the stack gives an embedded source."""
    data_dir = tmp_path_factory.mktemp("debezium-plain")
    heartbeat.create_table(plain_db)
    publication = f"hb_{uuid.uuid4().hex[:8]}"
    dbz: EmbeddedDebezium = debezium_factory(
        plain_db,
        data_dir=data_dir,
        schemas_enable=False,
        table_include_list=["public.customers"],
        publication_name=publication,
        heartbeat_interval_ms=500,
        extra_config={
            "publication.autocreate.mode": "all_tables",
            **heartbeat.connector_settings(plain_db, publication, "all_tables"),
        },
    )
    try:
        yield dbz
    finally:
        debezium_factory.release(dbz)


def test_schemas_disabled_gives_payload_only_json(plain: EmbeddedDebezium) -> None:
    real = load_capture("real_schemas_false.jsonl")
    customers = plain.topic("customers")
    records = read_topics(plain.kafka_bootstrap, [customers], lambda rs: ops(rs, customers)[:2] == ["r", "r"])
    anne, bob = records[:2]
    assert anne.key == {"id": 1} and bob.key == {"id": 2}  # no {"schema", "payload"} wrapper
    assert set(anne.value) == {"before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"}
    assert anne.value == anne.payload
    real_anne = real[0]
    assert real_anne["key"] == anne.key
    assert anne.value["after"] == real_anne["value"]["after"]
    assert set(anne.value["source"]) == set(real_anne["value"]["source"])
    assert bob.value["after"]["name"] == "Bob" and bob.value["after"]["bio"] == "short bio"


def test_an_idle_source_still_advances_the_slot_with_the_heartbeat(
    plain: EmbeddedDebezium, plain_db: str, postgres_server: EmbeddedPostgres
) -> None:
    """The replicated table stays idle while another database makes WAL: the heartbeat table (in the
    publication, written by heartbeat.action.query) lets Debezium confirm past it, so the slot does
    not hold that WAL (without it, confirmed_flush_lsn stays where the last change was)."""
    assert (
        plain.rest_get(f"/connectors/{plain.name}/config")["heartbeat.action.query"] == heartbeat.ACTION_QUERY
    )
    with psycopg.connect(plain_db) as conn:
        assert conn.execute(
            "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
            (plain.publication_name, heartbeat.SCHEMA, heartbeat.TABLE),
        ).fetchone() == (1,)
    customers = plain.topic("customers")
    read_topics(plain.kafka_bootstrap, [customers], lambda rs: len(ops(rs, customers)) >= 2)  # streaming
    name = f"busy_{uuid.uuid4().hex[:8]}"
    busy = postgres_server.create_database(name)
    try:
        execute(
            busy,
            "CREATE TABLE t (v text)",
            "INSERT INTO t SELECT repeat('x', 100) FROM generate_series(1, 2000)",
        )
        with psycopg.connect(plain_db) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            target = row[0]

            def confirmed_past() -> bool:
                got = conn.execute(
                    "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                    (target, plain.slot_name),
                ).fetchone()
                conn.commit()
                return got == (True,)

            deadline = time.monotonic() + 60
            while not confirmed_past():
                assert time.monotonic() < deadline, f"slot {plain.slot_name} did not confirm past {target}"
                time.sleep(0.2)
    finally:
        postgres_server.drop_database(name)


def test_restart_resumes_from_offsets_without_a_new_snapshot(
    plain: EmbeddedDebezium, plain_db: str, debezium_factory: Any
) -> None:
    customers = plain.topic("customers")
    execute(plain_db, "INSERT INTO public.customers (id, name) VALUES (50, 'before-stop')")
    read_topics(plain.kafka_bootstrap, [customers], lambda rs: any(r.key == {"id": 50} for r in rs))
    first_pid = plain.pid
    plain.stop()
    assert not plain.is_running
    assert plain.offsets_path.is_file() and plain.offsets_path.stat().st_size > 0

    # changes while Connect is down stay in the replication slot
    execute(
        plain_db,
        "INSERT INTO public.customers (id, name, balance) VALUES (51, 'while-down', 7.5)",
        "UPDATE public.customers SET name = 'Anne-2' WHERE id = 1",
        "DELETE FROM public.customers WHERE id = 2",
    )
    plain.start()
    assert plain.pid is not None and plain.pid != first_pid
    execute(plain_db, "INSERT INTO public.customers (id, name) VALUES (52, 'after-start')")

    records = read_topics(plain.kafka_bootstrap, [customers], lambda rs: any(r.key == {"id": 52} for r in rs))
    # exactly: the snapshot once, then each change once, in commit order, nothing repeated or lost
    assert ops(records, customers) == ["r", "r", "c", "c", "u", "d", None, "c"]
    assert [r.key["id"] for r in records] == [1, 2, 50, 51, 1, 2, 2, 52]
    by_op = records[3:]
    assert by_op[0].value["after"]["name"] == "while-down"
    assert decimal(by_op[0].value["after"]["balance"], 2) == Decimal("7.50")
    assert by_op[1].value["after"]["name"] == "Anne-2"
    assert by_op[2].value["before"]["id"] == 2 and by_op[2].value["after"] is None
    assert by_op[4].value["after"]["name"] == "after-start"
    assert "no snapshot will be executed" in plain.log_tail(max_chars=10**7)

    # release drops the slot and the publication, so the database can go
    debezium_factory.release(plain)
    with psycopg.connect(plain_db) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (plain.slot_name,)
        ).fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_publication WHERE pubname = %s", (plain.publication_name,)
        ).fetchone() == (0,)


def test_bad_database_fails_start_with_the_reason_and_leaves_nothing(
    pg_url: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    missing = pg_url.rsplit("/", 1)[0] + "/no_such_database"
    dbz = EmbeddedDebezium(
        missing, kafka_bootstrap, f"bad{uuid.uuid4().hex[:6]}", tmp_path, startup_timeout_s=90
    )
    with pytest.raises(StackError, match="no_such_database"):
        dbz.start()
    assert not dbz.is_running
    assert (tmp_path / "connect.log").is_file()  # a given data directory is kept
