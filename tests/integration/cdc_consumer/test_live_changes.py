"""The CDC consumer service behind the live Debezium connector: every change comes out typed, equal to
what PostgreSQL holds, with the before images each REPLICA IDENTITY gives, TOAST values marked
unchanged, transactions bracketed per table, a primary-key change carrying its old key, and a column
added mid-stream carried in a new schema.

The connector runs as ``inlet stack up`` runs it: JSON without schemas (issue #23), so every column
type comes from the source catalog (``--database-url``), the added column's too.

Expected values come from the SQL below and from PostgreSQL itself, never from the decoder.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
import pytest
from cdc_helpers import OutRecord, make_config, read_all, running, unique_prefix, wait_for

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.stack.debezium import STACK_SCHEMAS_ENABLE

pytestmark = pytest.mark.slow

LONG_NOTE = "".join(f"{i:05d}" for i in range(2000))  # 10 kB, stored out of line (TOAST)


def value(column: pb.Column, v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "unchanged":
        return "<unchanged>"
    if kind == "decimal_value":
        return Decimal(v.decimal_value)
    return getattr(v, kind)


def row(ev: pb.ChangeEvent, which: str) -> dict[str, Any]:
    r = getattr(ev, which)
    return {c.name: value(c, v) for c, v in zip(ev.schema.columns, r.values, strict=True)}


def records_of(out: list[OutRecord]) -> list[pb.ChangeRecord]:
    records = []
    for m in out:
        rec = pb.ChangeRecord()
        rec.ParseFromString(m.value or b"")
        records.append(rec)
    return records


def decoded_changes(out: list[OutRecord]) -> list[pb.ChangeEvent]:
    return [r.change for r in records_of(out) if r.WhichOneof("record") == "change"]


def test_live_changes_through_the_consumer(start_debezium, pg_url: str, kafka_bootstrap: str) -> None:
    prefix = unique_prefix()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, name text NOT NULL, note text)")
        conn.execute("ALTER TABLE a ALTER COLUMN note SET STORAGE EXTERNAL")  # a long note is TOASTed
        conn.execute("CREATE TABLE b (id int PRIMARY KEY, v numeric(8,2), label text)")
        conn.execute("ALTER TABLE b REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO a VALUES (1, 'first', %s), (2, 'second', 'short')", (LONG_NOTE,))
    start_debezium(prefix, schemas_enable=STACK_SCHEMAS_ENABLE)
    with (
        running(make_config(kafka_bootstrap, prefix, topic_prefix=prefix, database_url=pg_url)),
        psycopg.connect(pg_url, autocommit=True) as conn,
    ):
        conn.execute("INSERT INTO b VALUES (1, 1.50, 'one'), (2, 2.00, 'two')")
        conn.execute("UPDATE a SET name = 'renamed' WHERE id = 1")  # note unchanged: TOAST placeholder
        conn.execute("UPDATE b SET v = 2.25 WHERE id = 1")  # FULL: the whole before image
        conn.execute("DELETE FROM a WHERE id = 2")  # DEFAULT: the key alone
        conn.execute("DELETE FROM b WHERE id = 2")  # FULL: every column
        with conn.transaction():  # one transaction over both tables
            conn.execute("INSERT INTO a VALUES (3, 'tx', 'n3')")
            conn.execute("UPDATE b SET label = 'in-tx' WHERE id = 1")
        # Debezium reads a table's columns from the live catalog when it meets a new relation: let it
        # catch up before the ALTER, so the changes before it keep the old schema
        topics = [f"inlet.changes.{prefix}.public.a", f"inlet.changes.{prefix}.public.b"]
        wait_for(
            lambda: len(decoded_changes(read_all(kafka_bootstrap, topics, idle_s=0.5))) >= 10, timeout_s=120
        )
        conn.execute("ALTER TABLE a ADD COLUMN extra int")
        conn.execute("INSERT INTO a VALUES (4, 'wide', 'n4', 42)")
        conn.execute("UPDATE a SET id = 5 WHERE id = 3")  # a primary-key change: delete 3, create 5
        out = read_all(kafka_bootstrap, topics, min_count=22, idle_s=3.0, timeout_s=120)
        pg_a = {r[0]: r for r in conn.execute("SELECT id, name, note, extra FROM a").fetchall()}
        pg_b = {r[0]: r for r in conn.execute("SELECT id, v, label FROM b").fetchall()}

    records = records_of(out)
    changes = decoded_changes(out)
    ends = {
        (r.transaction.table_id, r.transaction.id): r.transaction
        for r in records
        if r.WhichOneof("record") == "transaction"
    }
    by_table: dict[str, list[pb.ChangeEvent]] = {}
    for ev in sorted(
        changes, key=lambda e: (e.source.lsn, e.source.kafka_offset)
    ):  # snapshot rows share an LSN
        by_table.setdefault(ev.table_id.rsplit(".", 1)[1], []).append(ev)
    op = {
        pb.OPERATION_READ: "r",
        pb.OPERATION_CREATE: "c",
        pb.OPERATION_UPDATE: "u",
        pb.OPERATION_DELETE: "d",
    }
    assert [(op[e.op], e.record_key) for e in by_table["a"]] == [
        ("r", "1"), ("r", "2"), ("u", "1"), ("d", "2"), ("c", "3"), ("c", "4"), ("d", "3"), ("c", "5"),
    ]  # fmt: skip
    assert [(op[e.op], e.record_key) for e in by_table["b"]] == [
        ("c", "1"), ("c", "2"), ("u", "1"), ("d", "2"), ("u", "1"),
    ]  # fmt: skip

    snap1, _, upd, dele, ins3, ins4, _, moved = by_table["a"]
    assert snap1.source.snapshot and row(snap1, "after") == {"id": 1, "name": "first", "note": LONG_NOTE}
    # the unchanged TOAST value is marked, never sent as Debezium's placeholder string
    assert row(upd, "after") == {"id": 1, "name": "renamed", "note": "<unchanged>"}
    # REPLICA IDENTITY DEFAULT: a delete's before image holds the key; the rest is null
    assert row(dele, "before") == {"id": 2, "name": "", "note": None}  # NOT NULL name: Debezium's default
    assert not dele.HasField("after")
    b_ins1, _, b_upd, b_del, b_tx = by_table["b"]
    # REPLICA IDENTITY FULL: updates and deletes carry the whole before image
    assert row(b_upd, "before") == {"id": 1, "v": Decimal("1.50"), "label": "one"}
    assert row(b_upd, "after") == {"id": 1, "v": Decimal("2.25"), "label": "one"}
    assert row(b_del, "before") == {"id": 2, "v": Decimal("2.00"), "label": "two"}
    assert [c.precision for c in b_ins1.schema.columns if c.name == "v"] == [8]

    # the multi-table transaction: both changes name it, and each table got its END with its count
    tx = ins3.transaction.id
    assert tx and b_tx.transaction.id == tx and ins3.source.tx_id == b_tx.source.tx_id
    assert ends[(f"{prefix}.public.a", tx)].table_event_count == 1
    assert ends[(f"{prefix}.public.b", tx)].table_event_count == 1

    # the added column: a new schema version carrying it, typed
    assert ins4.schema_version != ins3.schema_version
    assert [(c.name, c.type) for c in ins4.schema.columns][-1] == ("extra", pb.COLUMN_TYPE_INT32)
    assert row(ins4, "after") == {"id": 4, "name": "wide", "note": "n4", "extra": 42}

    # the primary-key change: the new key's create names the old key (Debezium's __debezium.oldkey)
    assert [value(pb.Column(), v) for v in moved.old_key.values] == [3]
    assert row(moved, "after") == {"id": 5, "name": "tx", "note": "n3", "extra": None}

    # the last change of every key equals what PostgreSQL holds now
    last_a = {int(e.record_key): e for e in by_table["a"]}
    assert {k for k, e in last_a.items() if e.op != pb.OPERATION_DELETE} == set(pg_a)
    for key, (_, name, note, extra) in pg_a.items():
        after = row(last_a[key], "after")
        assert after["name"] == name
        assert after["note"] in (note, "<unchanged>")
        assert after.get("extra") == extra
    last_b = {int(e.record_key): e for e in by_table["b"]}
    assert {k for k, e in last_b.items() if e.op != pb.OPERATION_DELETE} == set(pg_b)
    for key, (_, v, label) in pg_b.items():
        assert row(last_b[key], "after") == {"id": key, "v": v, "label": label}
