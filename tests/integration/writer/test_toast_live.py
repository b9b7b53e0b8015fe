"""Unchanged TOASTed values from the live Debezium connector keep their stored value (issue #21).

PostgreSQL -> the real Debezium 3.6 connector (Kafka Connect, its headers included) -> the CDC
consumer's decoder -> the writer's rows (``to_arrow`` with the lake lookups the writer service
uses) -> upserts into Hudi tables made as the writer makes them, Copy-on-Write and Merge-on-Read.
One connector for the module; its events are written in two batches (the second after the first
is committed), and after each the lake must equal PostgreSQL, row by row and column by column,
for text, bytea, jsonb, text[] and int[] columns stored out of line (Debezium sends its
placeholder for each when an UPDATE leaves it unchanged, and for all of them on the new key of a
primary-key change: a delete of the old key, then a create of the new one whose header
``__debezium.oldkey`` names the old key).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import Decoder
from inlet.services.stack import TEST_CONSUMER_SETTINGS
from inlet.services.writer import tables
from inlet.services.writer.lookup import batch_input
from inlet.services.writer.rows import Change, table_rows

pytestmark = pytest.mark.slow

COLUMNS = ["id", "n", "note", "blob", "doc", "tags", "nums"]
DDL = [
    "CREATE TABLE public.docs (id int PRIMARY KEY, n int, note text, blob bytea, doc jsonb, tags text[], nums int[])",
    *(f"ALTER TABLE public.docs ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in COLUMNS[2:]),
]
SELECT = "SELECT id, n, note, blob, doc::text, tags, nums FROM public.docs ORDER BY id"


def insert(i: int) -> tuple[str, tuple[Any, ...]]:
    """A row whose note, blob, doc, tags and nums are each stored out of line (TOAST, EXTERNAL)."""
    text = "".join(f"{i}:{j:05d}" for j in range(1500))
    return (
        "INSERT INTO public.docs VALUES (%s, 0, %s, %s, %s, %s, %s)",
        (i, text, text.encode()[::-1], f'{{"k": "{text}"}}', [text, "x"], list(range(i, i + 3000))),
    )


# What each row of the end state proves (ids after the second batch).
SCENARIOS = {
    10: "one batch: insert, update (TOAST unchanged), then a primary-key change 1 -> 10",
    11: "a primary-key change 10 -> 11 of a row that a primary-key change made in the batch before",
    20: "a primary-key change 3 -> 20 of a row committed in the batch before, then an update",
    22: "an update (TOAST unchanged) of a committed row, then its primary-key change 2 -> 22 in one batch",
    4: "an update (TOAST unchanged) of a row committed in the batch before",
}
ROUND_1 = [
    insert(1),
    insert(2),
    insert(3),
    insert(4),
    ("UPDATE public.docs SET n = 1 WHERE id = 1", ()),
    ("UPDATE public.docs SET id = 10 WHERE id = 1", ()),
]
ROUND_2 = [
    ("UPDATE public.docs SET n = 4 WHERE id = 4", ()),
    ("UPDATE public.docs SET id = 20 WHERE id = 3", ()),
    ("UPDATE public.docs SET n = 20 WHERE id = 20", ()),
    ("UPDATE public.docs SET id = 11, n = 11 WHERE id = 10", ()),
    ("UPDATE public.docs SET n = 2 WHERE id = 2", ()),
    ("UPDATE public.docs SET id = 22 WHERE id = 2", ()),
]


@dataclass
class Round:
    changes: list[pb.ChangeEvent]
    expected: dict[int, dict[str, Any]]  # PostgreSQL's rows after the round, by id


def _pg_rows(conn: psycopg.Connection[Any]) -> dict[int, dict[str, Any]]:
    return {r[0]: dict(zip(COLUMNS, r, strict=True)) for r in conn.execute(SELECT).fetchall()}


class _Reader:
    """Every record of one topic from its start, in order (tombstones included)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        settings = {"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"}
        self.consumer = Consumer(settings | {"enable.auto.commit": False} | dict(TEST_CONSUMER_SETTINGS))
        self.topic = topic
        self.assigned = False

    def take(self, count: int, timeout_s: float = 60.0) -> list[Any]:
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            if not self.assigned:
                topics = self.consumer.list_topics(timeout=5).topics
                if self.topic not in topics:
                    time.sleep(0.2)
                    continue
                self.consumer.assign(
                    [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in topics[self.topic].partitions]
                )
                self.assigned = True
            for m in self.consumer.consume(num_messages=100, timeout=0.3):
                assert m.error() is None, m.error()
                out.append(m)
        assert len(out) == count, f"{len(out)} of {count} records on {self.topic} after {timeout_s}s"
        return out


@pytest.fixture(scope="module")
def rounds(postgres_server: Any, debezium_factory: Any, kafka_bootstrap: str) -> Iterator[list[Round]]:
    """The decoded changes of ROUND_1 and ROUND_2 and PostgreSQL's rows after each."""
    name = f"t_toast_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for stmt in DDL:
                conn.execute(stmt)
        dbz = debezium_factory(url, table_include_list=["public.docs"])
        reader = _Reader(kafka_bootstrap, dbz.topic("docs"))
        decoder = Decoder()
        out = []
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for statements, records in ((ROUND_1, 8), (ROUND_2, 12)):
                    for stmt, params in statements:
                        conn.execute(stmt, params)
                    changes = []
                    for m in reader.take(records):  # a primary-key change: delete, tombstone, create
                        for rec in decoder.decode(
                            m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers()
                        ):
                            changes.append(rec.change)
                    out.append(Round(changes, _pg_rows(conn)))
            yield out
        finally:
            reader.consumer.close()
            debezium_factory.release(dbz)
    finally:
        postgres_server.drop_database(name)


def _lake_rows(path: str) -> dict[int, dict[str, Any]]:
    data = HudiTable.open(path).read(columns=COLUMNS, meta_columns=False)
    return {r["id"]: r for r in table_rows(data)}


def _differences(got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]]) -> list[str]:
    out = []
    for key in sorted(set(got) | set(want)):
        what = SCENARIOS.get(key, f"row {key}")
        if key not in got or key not in want:
            out.append(f"{what}: {'missing from' if key not in got else 'extra in'} the lake")
            continue
        for c in COLUMNS:
            if got[key][c] != want[key][c]:
                shown = repr(got[key][c])
                out.append(f"{what}: column {c} is {shown[:60]}{'...' if len(shown) > 60 else ''}")
    return out


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_unchanged_toast_keeps_the_stored_value(rounds: list[Round], table_type: str, tmp_path: Path) -> None:
    path = str(tmp_path / "docs")
    tables.open_or_create(path, "docs", "db", ["id"], tables.TableSettings(table_type=table_type))
    assert [len(r.changes) for r in rounds] == [7, 9]  # c c c c u d c | u d c u d c u d c
    assert sum(bool(ch.old_key.values) for r in rounds for ch in r.changes) == 4  # one per key change
    problems = []
    for i, rnd in enumerate(rounds, start=1):
        table = HudiTable.open(path)
        arrow = batch_input([Change(ev, 0, n) for n, ev in enumerate(rnd.changes)], table)
        table.write(arrow, "upsert")
        problems += [f"after batch {i}: {d}" for d in _differences(_lake_rows(path), rnd.expected)]
    assert not problems, "\n".join(problems)
