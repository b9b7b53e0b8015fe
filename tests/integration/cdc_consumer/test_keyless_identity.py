"""Tables without a primary key under the CDC consumer's default ``--keyless auto`` (issue #21): the
REPLICA IDENTITY comes from the source catalog. A FULL table is keyed by the whole row (the writer
then deletes an update's old image, tests/unit/services/test_writer_keyless.py); a DEFAULT table,
whose updates and deletes PostgreSQL publishes without the old row, is skipped with one warning
naming the fix, and so are its entries in transaction ENDs. Schemaless JSON, its column types from
the same catalog.
"""

from __future__ import annotations

import logging

import orjson
import psycopg
import pytest

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import Decoder, PostgresCatalog


def change(table: str, after: dict[str, object]) -> bytes:
    source = {
        "connector": "postgresql",
        "name": "srv",
        "db": "d",
        "schema": "public",
        "table": table,
        "lsn": 7,
    }
    return orjson.dumps({"before": None, "after": after, "source": source, "op": "c", "ts_ms": 6})


def end(*tables: str) -> bytes:
    collections = [{"data_collection": f"public.{t}", "event_count": 1} for t in tables]
    return orjson.dumps(
        {"status": "END", "id": "9:1", "event_count": len(tables), "data_collections": collections}
    )


def test_auto_keys_a_replica_identity_full_table_by_the_whole_row_and_skips_a_default_one(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE full_t (id int, s text)")
        conn.execute("ALTER TABLE full_t REPLICA IDENTITY FULL")
        conn.execute("CREATE TABLE default_t (id int, s text)")
        conn.execute("CREATE TABLE keyed_t (id int PRIMARY KEY, s text)")
    catalog = PostgresCatalog(pg_url)
    try:
        decoder = Decoder(catalog=catalog, keyless="auto")
        with caplog.at_level(logging.WARNING, "inlet.cdc"):
            (rec,) = decoder.decode("srv.public.full_t", 0, 0, None, change("full_t", {"id": 1, "s": "a"}))
            assert rec.change.op == pb.OPERATION_CREATE and rec.change.record_key == "id:1,s:a"
            assert (
                decoder.decode("srv.public.default_t", 0, 0, None, change("default_t", {"id": 1, "s": "a"}))
                == []
            )
            assert (
                decoder.decode("srv.public.default_t", 0, 1, None, change("default_t", {"id": 2, "s": "b"}))
                == []
            )
            (key_rec,) = decoder.decode(
                "srv.public.keyed_t", 0, 0, b'{"id": 1}', change("keyed_t", {"id": 1, "s": "a"})
            )
            assert key_rec.change.record_key == "1"
            # the skipped table's entries in transaction ENDs are dropped too
            recs = decoder.decode("srv.transaction", 0, 0, None, end("full_t", "default_t", "keyed_t"))
            assert [r.transaction.table_id for r in recs] == ["srv.public.full_t", "srv.public.keyed_t"]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == [
            "table srv.public.default_t has no primary key and REPLICA IDENTITY DEFAULT: its changes are "
            "skipped (PostgreSQL publishes no old row to follow its updates and deletes by); ALTER TABLE "
            '"public"."default_t" REPLICA IDENTITY FULL, or add a primary key, to replicate it'
        ]
    finally:
        catalog.close()
