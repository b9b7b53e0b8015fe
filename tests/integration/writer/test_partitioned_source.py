"""A range-partitioned source table replicates into ONE lake table, its root's (issue #32 item 1).

PostgreSQL -> the initial load by COPY (its slot, its publication) -> the real Debezium 3.6
connector streaming from that slot (``snapshot.mode=no_data``, as ``inlet stack up`` runs it) ->
the CDC consumer's decoder -> the writer's rows -> upserts into the table the load made. Changes
land in several partitions, a partition created later and one attached later; an UPDATE of the
partition key moves a row across partitions (PostgreSQL deletes it from one and inserts it into
the other); a row is deleted. Debezium must emit every change on the root's topic (the
publication publishes them via the root), none on a partition's, and the lake table must equal
PostgreSQL's root with one row per key. Before the publication had ``publish_via_partition_root``,
changes went to ``<prefix>.public.<partition>`` topics and the root's table froze at the load.
Then what PostgreSQL publishes no row change for - a partition detached, one truncated on its own, a
table that holds rows attached - and ``inlet verify --repair``, the documented remedy, on the root.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from support.loads import load, table_path

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import Decoder
from inlet.services.cli.main import main
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.source_tables import debezium_include_list
from inlet.services.stack import TEST_CONSUMER_SETTINGS
from inlet.services.writer.lookup import batch_input
from inlet.services.writer.rows import Change, table_rows

pytestmark = pytest.mark.slow

SETUP = [
    "CREATE TABLE src_events (id int, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)",
    "CREATE TABLE src_events_jan PARTITION OF src_events FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')",
    "CREATE TABLE src_events_feb PARTITION OF src_events FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')",
    "INSERT INTO src_events SELECT g, date '2026-01-01' + g % 59, 'v' || g FROM generate_series(1, 300) g",
]
CHANGES = [
    # into both partitions, one transaction
    "INSERT INTO src_events VALUES (1001, '2026-01-20', 'new jan'), (1002, '2026-02-20', 'new feb')",
    # the partition key changes: a delete from src_events_jan and an insert into src_events_feb
    "UPDATE src_events SET day = '2026-02-10', v = 'moved' WHERE id = 5",
    "UPDATE src_events SET v = 'changed' WHERE id = 6",
    "DELETE FROM src_events WHERE id = 7",
    # a partition created later, and one attached later (empty when attached: see docs/stack.md)
    "CREATE TABLE src_events_mar PARTITION OF src_events FOR VALUES FROM ('2026-03-01') TO ('2026-04-01')",
    "INSERT INTO src_events VALUES (1003, '2026-03-03', 'new mar')",
    "CREATE TABLE src_events_apr (LIKE src_events INCLUDING ALL)",
    "ALTER TABLE src_events ATTACH PARTITION src_events_apr FOR VALUES FROM ('2026-04-01') TO ('2026-05-01')",
    "INSERT INTO src_events_apr VALUES (1004, '2026-04-04', 'into the partition itself')",
    "UPDATE src_events SET day = '2026-04-10' WHERE id = 8",  # jan -> the attached partition
    "UPDATE src_events SET day = '2026-03-09', v = 'moved again' WHERE id = 1002",  # feb -> mar
]


def _pg_rows(url: str) -> dict[tuple[int, int], str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id, day - date '1970-01-01', v FROM src_events").fetchall()
    return {(i, d): v for i, d, v in rows}


def _lake_rows(path: str) -> dict[tuple[int, int], str]:
    rows = table_rows(HudiTable.open(path).read(columns=["id", "day", "v"], meta_columns=False))
    return {(r["id"], r["day"]): r["v"] for r in rows}


def _take_until_last(consumer: Consumer, decoder: Decoder, timeout_s: float = 90.0) -> list[Change]:
    """Every change of the root's topic up to the create of id 9999 (the last statement)."""
    changes: list[Change] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in consumer.consume(num_messages=100, timeout=0.3):
            assert m.error() is None, m.error()
            for rec in decoder.decode(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers()):
                changes.append(Change(rec.change, m.partition(), m.offset()))
                if rec.change.op == pb.OPERATION_CREATE and rec.change.key.values[0].int_value == 9999:
                    return changes
    raise AssertionError(f"the root's topic had {len(changes)} changes, not the last one, after {timeout_s}s")


def _ids(change: Change) -> tuple[str, int]:
    return pb.Operation.Name(change.event.op), change.event.key.values[0].int_value


def test_a_partitioned_table_replicates_into_its_roots_lake_table(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str, start_debezium: Any, kafka_bootstrap: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in SETUP:
            conn.execute(stmt)
    summary = load(pg_url, coordinator.address, lake, slot)
    assert [(r.table_id, r.rows) for r in summary.loaded] == [("srv.public.src_events", 300)]
    path = str(table_path(pg_url, lake, "src_events"))
    assert _lake_rows(path) == _pg_rows(pg_url)

    prefix = "part" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_url) as conn:
        include = debezium_include_list(conn, ["public.src_*"])
    dbz = start_debezium(
        prefix,
        slot_name=slot,
        publication_name=slot + "_pub",
        snapshot_mode="no_data",
        table_include_list=include,
        extra_config={"publication.autocreate.mode": "all_tables"},
    )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in CHANGES:
            conn.execute(stmt)
        with conn.transaction():  # a move and a delete in one transaction
            conn.execute("UPDATE src_events SET day = '2026-01-31' WHERE id = 9")  # within jan
            conn.execute("UPDATE src_events SET day = '2026-01-02' WHERE id = 40")  # feb -> jan
            conn.execute("DELETE FROM src_events WHERE id = 41")
        conn.execute("INSERT INTO src_events VALUES (9999, '2026-01-01', 'last')")
    settings = {"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{prefix}", "enable.auto.commit": False}
    consumer = Consumer(settings | dict(TEST_CONSUMER_SETTINGS))
    try:
        consumer.assign([TopicPartition(dbz.topic("src_events"), 0, OFFSET_BEGINNING)])
        changes = _take_until_last(consumer, Decoder())
        # every change on the root's topic, none under a partition's name
        topics = consumer.list_topics(timeout=10).topics
        assert sorted(t for t in topics if t.startswith(f"{prefix}.public.")) == [dbz.topic("src_events")]
    finally:
        consumer.close()

    assert {c.event.source.table for c in changes} == {"src_events"}
    # a row moving across partitions: its old key's delete, then its new key's create, in this order
    moves = [_ids(c) for c in changes if c.event.key.values[0].int_value in (5, 8, 40)]
    assert moves == [
        ("OPERATION_DELETE", 5),
        ("OPERATION_CREATE", 5),
        ("OPERATION_DELETE", 8),
        ("OPERATION_CREATE", 8),
        ("OPERATION_DELETE", 40),
        ("OPERATION_CREATE", 40),
    ]
    with CoordinatorClient(coordinator.address) as client:
        protocol = GrpcCommitProtocol(client, "srv.public.src_events", Storage(path))
        table = HudiTable.open(path, commit_protocol=protocol)
        table.write(batch_input(changes, table), "upsert")
    got = _lake_rows(path)
    assert got == _pg_rows(pg_url)
    assert len({i for i, _ in got}) == len(got)  # one row per id: a moved row's old key is gone
    # and no lake table but the root's
    tables = sorted(p.parent.parent.name for p in lake.rglob(".hoodie/hoodie.properties"))
    assert tables == ["src_events"]

    # what PostgreSQL publishes no row changes for (docs/stack.md, "Partitioned tables"): a
    # partition detached (its rows leave the root) or truncated on its own, a table that holds
    # rows attached; `inlet verify --repair` makes the root's lake table equal again
    with psycopg.connect(pg_url, autocommit=True) as conn:
        stale = conn.execute(  # the rows of feb and mar
            "SELECT id, day - date '1970-01-01' FROM src_events WHERE day >= '2026-02-01' AND day < '2026-04-01'"
        ).fetchall()
        conn.execute("ALTER TABLE src_events DETACH PARTITION src_events_feb")
        conn.execute("TRUNCATE src_events_mar")
        conn.execute("CREATE TABLE src_events_may (LIKE src_events INCLUDING ALL)")
        conn.execute("INSERT INTO src_events_may VALUES (2001, '2026-05-01', 'before attach')")
        conn.execute(
            "ALTER TABLE src_events ATTACH PARTITION src_events_may FOR VALUES FROM ('2026-05-01') TO ('2026-06-01')"
        )
    want, got = _pg_rows(pg_url), _lake_rows(path)
    assert sorted(set(got) - set(want)) == sorted(stale) and len(stale) > 100
    assert [k[0] for k in set(want) - set(got)] == [2001]
    argv = [
        "verify",
        "--no-progress",
        "--source",
        pg_url,
        "--lake",
        str(lake),
        "--tables",
        "public.src_events",
    ]
    argv += ["--repair", "--coordinator", coordinator.address, "--topic-prefix", "srv"]
    assert main(argv) == 0
    assert _lake_rows(path) == want
