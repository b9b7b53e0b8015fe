"""Snapshot -> stream handoff (issue #21): a transaction still open at the slot's consistent point.

PostgreSQL's snapshot builder (snapbuild.c) becomes consistent in steps, each at a running-xacts
record: BUILDING waits for the transactions running at the first one, FULL (every transaction that
starts from here on is decoded whole) for those running at the second. A transaction that begins
between FULL and CONSISTENT and is still open at the consistent point is not in the exported
snapshot, so the COPY initial load misses its changes; it is streamed when it commits, with change
LSNs *below* the consistent point. Its changes must still win over the loaded rows.

Here the steps are driven deterministically with three transactions (a walsender creating a slot
waits for each transaction listed in a running-xacts record, then logs the next record itself):
A holds an xid when the slot creation starts (BUILDING waits for A); C takes an xid while it waits
(so FULL, reached when A commits, waits for C); B updates and deletes while FULL waits for C; C
commits, the slot is consistent with B open, the load reads the snapshot, B commits. B's changes,
with the LSNs the slot reports for them, go through the CDC consumer's decoder (Debezium's JSON) and
the writer's rows into the loaded table, which must then equal PostgreSQL. The same changes must also
win over Debezium's own snapshot of that slot ('r' events whose source.lsn is the consistent point).

B's LSNs come from ``pg_logical_slot_peek_binary_changes`` on the load's slot: the LSN PostgreSQL
reports for each decoded change, which is what Debezium (started on that slot with
``snapshot.mode=no_data``, as the stack does) sends as ``source.lsn``; the peek also proves B is
streamed, and the slot is left as it was.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.services.cdc_consumer import Decoder, PostgresCatalog
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.writer import initial_load, tables
from inlet.services.writer.rows import LSN_COL, SNAPSHOT_ORDERING, Change, to_arrow


def _xid(conn: psycopg.Connection[Any]) -> str:
    """The open transaction's xid (32 bits, as pg_locks shows it); assigns one if it has none."""
    row = conn.execute("SELECT (txid_current() % 4294967296)::text").fetchone()
    assert row is not None
    return str(row[0])


def _wait_until_waiting_on(observer: psycopg.Connection[Any], xid: str, timeout_s: float = 30.0) -> None:
    """Until some backend (the walsender creating the slot) waits for transaction ``xid`` to end."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = observer.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted "
            "AND transactionid::text = %s",
            (xid,),
        ).fetchone()
        if found:
            return
        time.sleep(0.02)
    raise AssertionError(f"the slot creation never waited for transaction {xid}")


def _lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _source(dbname: str, tx_id: int, snapshot: str) -> dict[str, Any]:
    """Debezium's ``source`` block (without the lsn)."""
    return {
        "version": "3.6.0.Final",
        "connector": "postgresql",
        "name": "srv",
        "ts_ms": int(time.time() * 1000),
        "snapshot": snapshot,
        "db": dbname,
        "schema": "public",
        "table": "src_items",
        "txId": tx_id or None,
        "xmin": None,
    }


def _envelope(
    op: str, key: int, before: dict[str, Any] | None, after: dict[str, Any] | None, source: dict[str, Any]
) -> tuple[bytes, bytes]:
    """A Debezium record (key, value) as JSON without schemas."""
    value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": int(time.time() * 1000)}
    return orjson.dumps({"id": key}), orjson.dumps(value)


def _write_as_the_writer(
    pg_url: str, client: CoordinatorClient, prefix: str, path: str, records: list[tuple[bytes, bytes]]
) -> None:
    """``records`` through the CDC consumer's decoder and the writer's rows, one upsert commit
    through the coordinator (what the writer commits for a batch)."""
    catalog = PostgresCatalog(pg_url)
    try:
        decoder = Decoder(topic_prefix=prefix, value_format="json", catalog=catalog)
        batch = []
        for offset, (key, value) in enumerate(records):
            (record,) = decoder.decode(f"{prefix}.public.src_items", 0, offset, key, value)
            assert record.change.source.lsn == orjson.loads(value)["source"]["lsn"]
            batch.append(Change(record.change, 0, offset))
    finally:
        catalog.close()
    protocol = GrpcCommitProtocol(client, f"{prefix}.public.src_items", Storage(path))
    table = HudiTable.open(path, commit_protocol=protocol)
    table.write(to_arrow(batch, key_fields=list(table.record_key_fields)), "upsert")


def _lake_rows(path: str) -> list[tuple[Any, ...]]:
    got = HudiTable.open(path).read(columns=["id", "name", "qty"], meta_columns=False)
    return sorted(zip(*(got.column(n).to_pylist() for n in ("id", "name", "qty")), strict=True))


def test_a_change_of_a_transaction_open_at_the_consistent_point_wins_over_the_loaded_row(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    publication = slot + "_pub"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_items (id int PRIMARY KEY, name text, qty int)")
        conn.execute("INSERT INTO src_items SELECT g, 'item ' || g, g FROM generate_series(1, 5) g")
        dbname = conn.info.dbname

    a, b, c = (psycopg.connect(pg_url) for _ in range(3))
    observer = psycopg.connect(pg_url, autocommit=True)
    client = CoordinatorClient(coordinator.address)
    outcome: dict[str, Any] = {}

    def run_load() -> None:
        try:
            outcome["summary"] = initial_load.load(
                pg_url,
                ["public.src_*"],
                client=client,
                lake_root=str(lake),
                topic_prefix="srv",
                slot=slot,
                publication=publication,
            )
        except BaseException as e:
            outcome["error"] = e

    loader = threading.Thread(target=run_load, name="initial-load", daemon=True)
    try:
        xid_a = _xid(a)  # running when the slot starts: BUILDING waits for A
        loader.start()
        _wait_until_waiting_on(observer, xid_a)
        xid_c = _xid(c)  # began during BUILDING: running at the next record, so FULL waits for C
        a.commit()
        _wait_until_waiting_on(observer, xid_c)
        # FULL reached: B begins now, after it, and stays open past the consistent point
        b.execute("UPDATE src_items SET name = 'updated by B', qty = 200 WHERE id = 2")
        b.execute("DELETE FROM src_items WHERE id = 3")
        xid_b = _xid(b)
        c.commit()  # C ends: consistent, with B still open
        loader.join(timeout=120)
        assert not loader.is_alive(), "the initial load did not finish"
        assert "error" not in outcome, outcome.get("error")
        summary: initial_load.LoadSummary = outcome["summary"]
        b.execute("SET LOCAL synchronous_commit = on")  # its commit flushed: decodable right away
        b.commit()

        # what the load missed: the snapshot did not see B
        path = lake / dbname / "public" / "src_items"
        loaded_table = HudiTable.open(str(path))
        loaded = loaded_table.read(columns=["id", "name", "qty", LSN_COL], meta_columns=False)
        assert set(loaded.column(LSN_COL).to_pylist()) == {SNAPSHOT_ORDERING}  # below any streamed LSN
        timeline = loaded_table.timeline
        (load_commit,) = timeline.completed_writes()
        metadata = timeline.commit_metadata(load_commit).extra_metadata
        assert metadata[initial_load.LOAD_LSN_KEY] == str(summary.lsn)  # the snapshot's point, kept
        loaded_rows = sorted(zip(*(loaded.column(n).to_pylist() for n in ("id", "name", "qty")), strict=True))
        assert loaded_rows == [(i, f"item {i}", i) for i in range(1, 6)]

        # B streams when it commits (after the consistent point), at change LSNs below it
        streamed = observer.execute(
            "SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_binary_changes("
            "%s, NULL, NULL, 'proto_version', '1', 'publication_names', %s)",
            (slot, publication),
        ).fetchall()
        changes = [
            (initial_load.parse_lsn(lsn), bytes(data)[:1]) for lsn, xid, data in streamed if xid == xid_b
        ]
        dml = [(lsn, kind) for lsn, kind in changes if kind in (b"U", b"D")]
        assert [kind for _, kind in dml] == [b"U", b"D"], changes
        (update_lsn, _), (delete_lsn, _) = dml
        assert update_lsn < delete_lsn < summary.lsn, (
            f"not reproduced: B's changes at {_lsn_text(update_lsn)}, {_lsn_text(delete_lsn)}, "
            f"consistent point {_lsn_text(summary.lsn)}"
        )

        # B's changes as Debezium sends them (JSON without schemas) through the CDC consumer's decoder
        # and the writer's rows into the loaded table, as the writer commits a batch
        source = _source(dbname, int(xid_b), "false")
        streamed_changes = [
            _envelope(
                "u", 2, None, {"id": 2, "name": "updated by B", "qty": 200}, source | {"lsn": update_lsn}
            ),
            _envelope("d", 3, {"id": 3, "name": None, "qty": None}, None, source | {"lsn": delete_lsn}),
        ]
        _write_as_the_writer(pg_url, client, "srv", str(path), streamed_changes)
        source_rows = [tuple(r) for r in observer.execute("SELECT id, name, qty FROM src_items ORDER BY id")]
        assert source_rows == [(1, "item 1", 1), (2, "updated by B", 200), (4, "item 4", 4), (5, "item 5", 5)]
        assert _lake_rows(str(path)) == source_rows

        # Debezium's own snapshot on such a slot: 'r' events whose source.lsn is the consistent point,
        # then the same streamed changes below it, into the table the writer creates for them
        dbz_path = tables.ensure_table(
            client,
            "dbz.public.src_items",
            str(lake / "dbz"),
            dbname,
            "public",
            "src_items",
            ["id"],
            tables.TableSettings(),
        )
        snapshot = _source(dbname, 0, "true") | {"lsn": summary.lsn}
        reads = [
            _envelope("r", i, None, {"id": i, "name": name, "qty": qty}, snapshot)
            for i, name, qty in loaded_rows
        ]
        _write_as_the_writer(pg_url, client, "dbz", dbz_path, reads)
        assert _lake_rows(dbz_path) == loaded_rows
        _write_as_the_writer(pg_url, client, "dbz", dbz_path, streamed_changes)
        assert _lake_rows(dbz_path) == source_rows
    finally:
        for conn in (a, b, c):
            conn.close()
        loader.join(timeout=60)
        client.close()
        observer.close()
