"""The decoder against real Debezium 3.6 output (../shared/testdata/debezium).

Expected values come from the SQL in capture_script.py, not from the decoder: e.g. the first
customer was inserted with born '1990-05-17', balance 4.99, updated_at '2024-01-02 03:04:05.1234+02'.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import DecodeError, Decoder, PostgresCatalog, row_record_key
from inlet.services.cdc_consumer.catalog import CatalogColumn

DATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "debezium"
UNCHANGED = object()

# --- the values capture_script.py inserted -------------------------------------------------------
BIO = "".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(1, 1501))
BORN = (dt.date(1990, 5, 17) - dt.date(1970, 1, 1)).days
CREATED_AT = (dt.datetime(2018, 6, 20, 15, 13, 16, 945104) - dt.datetime(1970, 1, 1)) // dt.timedelta(
    microseconds=1
)
UPDATED_AT = (
    dt.datetime(2024, 1, 2, 3, 4, 5, 123400, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
) // dt.timedelta(microseconds=1)
ANNE = {
    "id": 1,
    "name": "Anne",
    "balance": Decimal("4.99"),
    "score": Decimal("123.4500"),
    "born": BORN,
    "created_at": CREATED_AT,
    "updated_at": UPDATED_AT,
    "doc": {"vip": True, "n": [1, 2]},
    "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "tags": ["x", "y z"],
    "photo": b"\x01\x02\xff",
    "bio": BIO,
}
BOB = {
    "id": 2,
    "name": "Bob",
    "balance": Decimal("-0.5"),
    "score": None,
    "born": None,
    "created_at": None,
    "updated_at": None,
    "doc": None,
    "uid": None,
    "tags": None,
    "photo": None,
    "bio": "short bio",
}

CAPTURE_DDL = [
    "CREATE TABLE public.events_nopk (ev text, n int)",
    "ALTER TABLE public.events_nopk REPLICA IDENTITY FULL",
    """CREATE TABLE public.customers (
        id serial PRIMARY KEY, name text NOT NULL, balance numeric(10,2), score numeric, born date,
        created_at timestamp(6), updated_at timestamptz, doc jsonb, uid uuid, tags text[], photo bytea,
        bio text)""",
    "CREATE TABLE public.orders (order_id bigint PRIMARY KEY, customer_id int, amount numeric(12,3), note varchar(20))",
    "ALTER TABLE public.orders ADD COLUMN status text DEFAULT 'new'",
]


def pyval(column: pb.Column, v: pb.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "unchanged":
        return UNCHANGED
    if kind == "list_value":
        return [pyval(column.element, e) for e in v.list_value.values]
    if kind == "decimal_value":
        return Decimal(v.decimal_value)
    if column.type == pb.COLUMN_TYPE_JSON:
        return json.loads(v.string_value)
    return getattr(v, kind)


def row(ev: pb.ChangeEvent, which: str) -> dict[str, Any] | None:
    if not ev.HasField(which):
        return None
    r = getattr(ev, which)
    return {c.name: pyval(c, v) for c, v in zip(ev.schema.columns, r.values, strict=True)}


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def as_bytes(doc: Any) -> bytes | None:
    # the JsonConverter bytes: compact JSON (what Kafka carries)
    return None if doc is None else json.dumps(doc, separators=(",", ":")).encode()


Outcome = list[pb.ChangeRecord] | DecodeError


def decode_file(decoder: Decoder, name: str) -> list[tuple[dict[str, Any], Outcome]]:
    out: list[tuple[dict[str, Any], Outcome]] = []
    for offset, rec in enumerate(load(name)):
        try:
            res: Outcome = decoder.decode(
                rec["topic"], 0, offset, as_bytes(rec["key"]), as_bytes(rec["value"])
            )
        except DecodeError as e:
            res = e
        out.append((rec, res))
    return out


def changes(results: list[tuple[dict[str, Any], Outcome]]) -> list[pb.ChangeEvent]:
    return [r.change for _, res in results if isinstance(res, list) for r in res if r.HasField("change")]


def find(
    evs: list[pb.ChangeEvent], table: str, op: int, pred: Callable[[pb.ChangeEvent], bool] = lambda e: True
):
    found = [e for e in evs if e.table_id == f"dbserver1.public.{table}" and e.op == op and pred(e)]
    assert found, f"no {pb.Operation.Name(op)} on {table}"
    return found


# ------------------------------------------------------------------------------ JSON with schemas


@pytest.fixture(scope="module")
def with_schemas() -> list[tuple[dict[str, Any], Outcome]]:
    return decode_file(Decoder(keyless="whole_row"), "real_schemas_true.jsonl")


def check_capture(results: list[tuple[dict[str, Any], Outcome]]) -> list[pb.ChangeEvent]:
    """The assertions both JSON formats must pass; returns the change events."""
    # everything decodes
    for rec, res in results:
        assert not isinstance(res, DecodeError), (rec["topic"], res.reason)
    # tombstones, heartbeats, the logical message and BEGINs give nothing
    for rec, res in results:
        if (
            rec["value"] is None
            or rec["topic"].startswith("__debezium-heartbeat")
            or rec["topic"] == "dbserver1.message"
        ):
            assert res == []
    evs = changes(results)

    # snapshot
    anne_r = find(evs, "customers", pb.OPERATION_READ, lambda e: e.record_key == "1")[0]
    assert row(anne_r, "after") == ANNE
    assert row(anne_r, "before") is None
    assert anne_r.source.snapshot is True
    assert anne_r.source.connector == "postgresql" and anne_r.source.database == "cdcdb"
    assert (anne_r.source.schema, anne_r.source.table) == ("public", "customers")
    assert anne_r.source.lsn > 0 and anne_r.source.tx_id > 0 and anne_r.source.processed_ts_ms > 0
    bob_r = find(evs, "customers", pb.OPERATION_READ, lambda e: e.record_key == "2")[0]
    assert row(bob_r, "after") == BOB
    order_r = find(evs, "orders", pb.OPERATION_READ)[0]
    assert order_r.record_key == "100"
    assert row(order_r, "after") == {
        "order_id": 100,
        "customer_id": 1,
        "amount": Decimal("12.345"),
        "note": "first",
    }

    # schema: key column, types, decimal precision/scale, nullability
    cols = {c.name: c for c in anne_r.schema.columns}
    assert [c.name for c in anne_r.schema.columns] == list(ANNE)
    assert (
        cols["id"].key_position == 1 and cols["id"].type == pb.COLUMN_TYPE_INT32 and not cols["id"].nullable
    )
    assert not cols["name"].nullable and cols["bio"].nullable
    assert sum(1 for c in anne_r.schema.columns if c.key_position) == 1
    assert (cols["balance"].type, cols["balance"].precision, cols["balance"].scale) == (
        pb.COLUMN_TYPE_DECIMAL,
        10,
        2,
    )
    assert (cols["score"].type, cols["score"].precision) == (pb.COLUMN_TYPE_DECIMAL, 0)
    assert cols["born"].type == pb.COLUMN_TYPE_DATE
    assert cols["created_at"].type == pb.COLUMN_TYPE_TIMESTAMP_MICROS
    assert cols["updated_at"].type == pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC
    assert cols["doc"].type == pb.COLUMN_TYPE_JSON and cols["uid"].type == pb.COLUMN_TYPE_UUID
    assert cols["tags"].type == pb.COLUMN_TYPE_LIST and cols["tags"].element.type == pb.COLUMN_TYPE_STRING
    assert cols["photo"].type == pb.COLUMN_TYPE_BYTES and cols["bio"].type == pb.COLUMN_TYPE_STRING
    assert anne_r.schema_version == anne_r.schema.fingerprint != ""
    assert list(anne_r.key.values) == [pb.Value(int_value=1)]

    # INSERT Carl with balance 1234567.89
    carl = find(evs, "customers", pb.OPERATION_CREATE, lambda e: e.record_key == "3")[0]
    assert row(carl, "after") == {
        **dict.fromkeys(ANNE),
        "id": 3,
        "name": "Carl",
        "balance": Decimal("1234567.89"),
    }
    assert carl.source.snapshot is False and carl.source.snapshot_marker == "false"

    # UPDATE balance = 24.99 (REPLICA IDENTITY DEFAULT): no before, bio TOASTed and unchanged
    upd = find(
        evs, "customers", pb.OPERATION_UPDATE, lambda e: row(e, "after")["balance"] == Decimal("24.99")
    )
    first = upd[0]
    assert row(first, "before") is None
    assert row(first, "after") == {**ANNE, "balance": Decimal("24.99"), "bio": UNCHANGED}

    # primary-key change 2 -> 42: delete of 2 and create of 42 in one transaction
    del2 = find(evs, "customers", pb.OPERATION_DELETE, lambda e: e.record_key == "2")[0]
    cre42 = find(evs, "customers", pb.OPERATION_CREATE, lambda e: e.record_key == "42")[0]
    assert row(del2, "after") is None and row(del2, "before")["id"] == 2
    assert row(cre42, "after") == {**BOB, "id": 42}
    assert del2.source.tx_id == cre42.source.tx_id
    assert del2.transaction.id == cre42.transaction.id != ""
    assert (del2.transaction.total_order, cre42.transaction.total_order) == (1, 2)

    # REPLICA IDENTITY FULL: before has every column
    full = find(evs, "customers", pb.OPERATION_UPDATE, lambda e: row(e, "after")["name"] == "Anne-Marie")[0]
    assert row(full, "before") == {**ANNE, "balance": Decimal("24.99")}
    assert row(full, "after") == {**ANNE, "balance": Decimal("24.99"), "name": "Anne-Marie"}
    del42 = find(evs, "customers", pb.OPERATION_DELETE, lambda e: e.record_key == "42")[0]
    assert row(del42, "before") == {**BOB, "id": 42}

    # the two-table transaction: orders 101 + customers score = 0, and its END per table
    o101 = find(evs, "orders", pb.OPERATION_CREATE, lambda e: e.record_key == "101")[0]
    assert row(o101, "after") == {"order_id": 101, "customer_id": 1, "amount": Decimal("0.001"), "note": "tx"}
    s0 = find(evs, "customers", pb.OPERATION_UPDATE, lambda e: row(e, "after")["score"] == Decimal(0))[0]
    assert s0.source.tx_id == o101.source.tx_id and s0.transaction.id == o101.transaction.id
    ends = [
        r.transaction
        for _, res in results
        if isinstance(res, list)
        for r in res
        if r.HasField("transaction") and r.transaction.id == o101.transaction.id
    ]
    assert {(t.table_id, t.table_event_count, t.total_event_count) for t in ends} == {
        ("dbserver1.public.orders", 1, 2),
        ("dbserver1.public.customers", 1, 2),
    }
    assert all(t.status == pb.TransactionEvent.STATUS_END for t in ends)
    # no END names the logical message's pseudo collection
    all_tx = [
        r.transaction for _, res in results if isinstance(res, list) for r in res if r.HasField("transaction")
    ]
    assert all(t.table_id.startswith("dbserver1.public.") for t in all_tx)

    # ALTER TABLE orders ADD COLUMN status DEFAULT 'new': new column, new fingerprint
    o102 = find(evs, "orders", pb.OPERATION_CREATE, lambda e: e.record_key == "102")[0]
    assert row(o102, "after") == {
        "order_id": 102,
        "customer_id": 1,
        "amount": Decimal("5"),
        "note": None,
        "status": "new",
    }
    assert o102.schema_version != o101.schema_version
    assert [c.name for c in o102.schema.columns][:4] == [c.name for c in o101.schema.columns]

    # the table without a primary key (REPLICA IDENTITY FULL) is keyed by the whole row:
    # INSERT ('x', 1); UPDATE SET n = 2; DELETE
    nopk = [e for e in evs if e.table_id == "dbserver1.public.events_nopk"]
    assert [e.op for e in nopk] == [pb.OPERATION_CREATE, pb.OPERATION_UPDATE, pb.OPERATION_DELETE]
    assert [e.record_key for e in nopk] == ["ev:x,n:1", "ev:x,n:2", "ev:x,n:2"]
    assert [row(e, "after") for e in nopk] == [{"ev": "x", "n": 1}, {"ev": "x", "n": 2}, None]
    assert [row(e, "before") for e in nopk] == [None, {"ev": "x", "n": 1}, {"ev": "x", "n": 2}]
    assert all(len(e.key.values) == 0 and not any(c.key_position for c in e.schema.columns) for e in nopk)
    assert row_record_key(nopk[1].schema, nopk[1].before) == nopk[0].record_key  # the updated row's old key

    # TRUNCATE orders
    trunc = find(evs, "orders", pb.OPERATION_TRUNCATE)[0]
    assert not trunc.HasField("after") and not trunc.HasField("before") and trunc.record_key == ""

    # Kafka position
    assert anne_r.source.kafka_topic == "dbserver1.public.customers" and anne_r.source.kafka_offset == 0
    return evs


def test_json_with_schemas_decodes_what_capture_script_inserted(with_schemas: Any) -> None:
    check_capture(with_schemas)


def test_table_without_primary_key_is_rejected_by_default() -> None:
    results = decode_file(Decoder(), "real_schemas_true.jsonl")
    errors = [(rec["topic"], res.reason) for rec, res in results if isinstance(res, DecodeError)]
    assert [t for t, _ in errors] == ["dbserver1.public.events_nopk"] * 3  # insert, update, delete
    assert all(r.startswith("table dbserver1.public.events_nopk has no primary key") for _, r in errors)


def test_schema_fingerprint_is_stable_within_a_table(with_schemas: Any) -> None:
    evs = changes(with_schemas)
    cust = {e.schema_version for e in evs if e.table_id.endswith("customers")}
    assert len(cust) == 1


# ------------------------------------------------------------------------------ JSON without schemas


@pytest.fixture
def capture_db(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in CAPTURE_DDL:
            conn.execute(stmt)
    return pg_url


def test_schemaless_json_with_the_source_catalog(capture_db: str, with_schemas: Any) -> None:
    catalog = PostgresCatalog(capture_db)
    try:
        results = decode_file(Decoder(catalog=catalog, keyless="whole_row"), "real_schemas_false.jsonl")
    finally:
        catalog.close()
    evs = check_capture(results)
    # the same table has the same fingerprint and the same columns whatever the format
    by_schema = {
        (e.table_id, len(e.schema.columns)): e.schema for e in changes(with_schemas) if e.schema.columns
    }
    for e in evs:
        if e.schema.columns:
            other = by_schema[(e.table_id, len(e.schema.columns))]
            assert e.schema_version == other.fingerprint
            assert [
                (c.name, c.type, c.precision, c.scale, c.nullable, c.key_position) for c in e.schema.columns
            ] == [(c.name, c.type, c.precision, c.scale, c.nullable, c.key_position) for c in other.columns]


def test_schemaless_json_refreshes_the_catalog_for_a_new_column(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY)")
        catalog = PostgresCatalog(pg_url)
        decoder = Decoder(catalog=catalog)

        def event(after: dict[str, Any]) -> bytes:
            src = {
                "connector": "postgresql",
                "name": "srv",
                "db": "x",
                "schema": "public",
                "table": "t",
                "ts_ms": 1,
            }
            return orjson.dumps({"before": None, "after": after, "source": src, "op": "c", "ts_ms": 2})

        (rec,) = decoder.decode("srv.public.t", 0, 0, b'{"id":1}', event({"id": 1}))
        assert [c.name for c in rec.change.schema.columns] == ["id"]
        conn.execute("ALTER TABLE public.t ADD COLUMN born date")
        (rec,) = decoder.decode("srv.public.t", 0, 1, b'{"id":2}', event({"id": 2, "born": 3}))
        assert rec.change.schema.columns[1].type == pb.COLUMN_TYPE_DATE
        assert rec.change.after.values[1].int_value == 3
        with pytest.raises(DecodeError, match=re.escape("'ghost' of public.t is not in the source catalog")):
            decoder.decode("srv.public.t", 0, 2, b'{"id":3}', event({"id": 3, "ghost": 1}))
        catalog.close()


def test_schemaless_json_follows_a_changed_column_type_once_the_catalog_is_read_again(pg_url: str) -> None:
    """The same column names, another type: a catalog older than ``max_age_s`` is read again and the
    decoder's plan for the table rebuilt (without it the new numeric(12,5) values were read with the
    old scale 3, 1000 times too large, until a column was added or dropped)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t_retype (id int PRIMARY KEY, n numeric(10,3))")
        catalog = PostgresCatalog(pg_url, max_age_s=0.0)  # every record may re-read it
        decoder = Decoder(catalog=catalog)
        src = {"connector": "postgresql", "name": "srv", "db": "x", "schema": "public", "table": "t_retype"}

        def n_of(offset: int, unscaled: int) -> tuple[str, int]:
            raw = base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode()
            value = {"before": None, "after": {"id": offset, "n": raw}, "source": src, "op": "c", "ts_ms": 2}
            (rec,) = decoder.decode("srv.public.t_retype", 0, offset, b'{"id":1}', orjson.dumps(value))
            column = rec.change.schema.columns[1]
            return rec.change.after.values[1].decimal_value, column.scale

        assert n_of(1, 1234567) == ("1234.567", 3)
        conn.execute("ALTER TABLE public.t_retype ALTER COLUMN n TYPE numeric(12,5)")
        assert n_of(2, 123456789) == ("1234.56789", 5)
        catalog.close()


def test_schemaless_json_without_catalog_is_refused() -> None:
    rec = load("real_schemas_false.jsonl")[0]
    with pytest.raises(DecodeError, match="without schema and no source catalog"):
        Decoder().decode(rec["topic"], 0, 0, as_bytes(rec["key"]), as_bytes(rec["value"]))


# ------------------------------------------------------------------------------ JSON: payload only


class CaptureCatalog:
    """The capture's tables as :class:`PostgresCatalog` reads them after ``CAPTURE_DDL`` (no server)."""

    TABLES: dict[str, list[CatalogColumn]] = {
        "customers": [
            CatalogColumn("id", "int4", -1, True),
            CatalogColumn("name", "text", -1, True),
            CatalogColumn("balance", "numeric", (10 << 16 | 2) + 4, False),
            CatalogColumn("score", "numeric", -1, False),
            CatalogColumn("born", "date", -1, False),
            CatalogColumn("created_at", "timestamp", 6, False),
            CatalogColumn("updated_at", "timestamptz", -1, False),
            CatalogColumn("doc", "jsonb", -1, False),
            CatalogColumn("uid", "uuid", -1, False),
            CatalogColumn("tags", "_text", -1, False, element_type="text"),
            CatalogColumn("photo", "bytea", -1, False),
            CatalogColumn("bio", "text", -1, False),
        ],
        "orders": [
            CatalogColumn("order_id", "int8", -1, True),
            CatalogColumn("customer_id", "int4", -1, False),
            CatalogColumn("amount", "numeric", (12 << 16 | 3) + 4, False),
            CatalogColumn("note", "varchar", 24, False),
            CatalogColumn("status", "text", -1, False),
        ],
        "events_nopk": [CatalogColumn("ev", "text", -1, False), CatalogColumn("n", "int4", -1, False)],
    }

    def columns(self, schema: str, table: str, refresh: bool = False) -> dict[str, CatalogColumn]:
        if schema != "public" or table not in self.TABLES:
            raise DecodeError(f"source catalog has no table {schema}.{table}")
        return {c.name: c for c in self.TABLES[table]}


def payload_only(doc: Any) -> Any:
    """How several tools store a Debezium record: ``{"payload": ...}``, the schema dropped."""
    return None if doc is None else {"payload": bare(doc)}


def bare(doc: Any) -> Any:
    """The record as JsonConverter writes it with ``schemas.enable=false``."""
    return doc["payload"] if doc.__class__ is dict and set(doc) == {"schema", "payload"} else doc


def decode_as(name: str, form: Callable[[Any], Any]) -> list[tuple[dict[str, Any], Outcome]]:
    """``name``'s records with key and value in ``form``, decoded with the catalog."""
    decoder = Decoder(catalog=CaptureCatalog(), keyless="whole_row")
    out: list[tuple[dict[str, Any], Outcome]] = []
    for offset, rec in enumerate(load(name)):
        try:
            res: Outcome = decoder.decode(
                rec["topic"], 0, offset, as_bytes(form(rec["key"])), as_bytes(form(rec["value"]))
            )
        except DecodeError as e:
            res = e
        out.append((rec, res))
    return out


@pytest.mark.parametrize("name", ["real_schemas_false.jsonl", "real_schemas_true.jsonl"])
def test_payload_only_json_decodes_as_json_without_schemas(name: str) -> None:
    """{"payload": envelope} (the schemaless capture wrapped, or the enveloped one with its schemas
    dropped) decodes exactly as the bare schemaless envelope: every record, with Debezium's logical
    types (MicroTimestamp created_at, ZonedTimestamp, Date, Decimal, VariableScaleDecimal) typed by
    the catalog."""
    got = decode_as(name, payload_only)
    check_capture(got)
    assert [res for _, res in got] == [res for _, res in decode_as(name, bare)]
    anne = find(changes(got), "customers", pb.OPERATION_READ, lambda e: e.record_key == "1")[0]
    created = next(c for c in anne.schema.columns if c.name == "created_at")
    assert created.type == pb.COLUMN_TYPE_TIMESTAMP_MICROS
    after = row(anne, "after")
    assert after is not None and after["created_at"] == CREATED_AT


def test_payload_only_json_needs_the_catalog_as_bare_json_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = load("real_schemas_false.jsonl")[0]
    wrapped = as_bytes(payload_only(rec["value"]))
    with pytest.raises(DecodeError, match="without schema and no source catalog"):
        Decoder().decode(rec["topic"], 0, 0, as_bytes(payload_only(rec["key"])), wrapped)
    # inlet cdc decode: the same lines for the bare and the payload-only record
    import inlet.services.cdc_consumer as cdc_consumer
    from inlet.services.cli.main import main

    monkeypatch.setattr(cdc_consumer, "PostgresCatalog", lambda url: _Closable(CaptureCatalog()))
    printed = []
    for key, value in ((rec["key"], rec["value"]), (payload_only(rec["key"]), payload_only(rec["value"]))):
        (tmp_path / "k.json").write_bytes(as_bytes(key) or b"")
        (tmp_path / "v.json").write_bytes(as_bytes(value) or b"")
        args = ["--key", str(tmp_path / "k.json"), "--value", str(tmp_path / "v.json")]
        assert main(["cdc", "decode", *args, "--database-url", "postgresql://unused"]) == 0
        printed.append(json.loads(capsys.readouterr().out))
    assert printed[0] == printed[1]
    assert printed[1]["after"]["created_at"] == "2018-06-20T15:13:16.945104"


class _Closable:
    def __init__(self, catalog: CaptureCatalog) -> None:
        self.columns = catalog.columns

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------ Avro


class _Registry(BaseHTTPRequestHandler):
    schemas: dict[int, dict[str, Any]] = {}
    requests: list[str] = []

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            found = self.schemas.get(int(parts[2]))
            if found is not None:
                return self._send(200, {"schema": json.dumps(found)})
            return self._send(404, {"error_code": 40403, "message": "Schema not found"})
        return self._send(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def registry_url() -> Iterator[str]:
    """Replays the recorded registry subjects over the Confluent REST API (GET /schemas/ids/N)."""
    subjects = json.loads((DATA / "avro_registry_subjects.json").read_text())
    _Registry.schemas = {v["id"]: v["schema"] for versions in subjects.values() for v in versions}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def avro_decoder(url: str, **kw: Any) -> Decoder:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return Decoder(schema_registry=SchemaRegistryClient({"url": url}), **kw)


def avro_records() -> list[tuple[str, bytes | None, bytes | None]]:
    out = []
    for line in (DATA / "avro_records_hex.jsonl").read_text().splitlines():
        r = json.loads(line)
        key = bytes.fromhex(r["key_hex"]) if r.get("key_hex") else None
        value = bytes.fromhex(r["value_hex"]) if r.get("value_hex") else None
        out.append((r["topic"], key, value))
    return out


def test_avro_records_decode(registry_url: str) -> None:
    decoder = avro_decoder(registry_url, value_format="avro")
    results = [decoder.decode(t, 0, i, k, v) for i, (t, k, v) in enumerate(avro_records())]
    assert results[-1] == []  # the tombstone
    snap, upd, dele = (r[0].change for r in results[:3])
    assert [e.op for e in (snap, upd, dele)] == [pb.OPERATION_READ, pb.OPERATION_UPDATE, pb.OPERATION_DELETE]
    assert {e.table_id for e in (snap, upd, dele)} == {"dbserver1.public.items"}
    assert {e.record_key for e in (snap, upd, dele)} == {"1"}
    cols = {c.name: c for c in snap.schema.columns}
    assert cols["id"].key_position == 1 and not cols["id"].nullable
    assert (cols["price"].type, cols["price"].precision, cols["price"].scale) == (
        pb.COLUMN_TYPE_DECIMAL,
        8,
        2,
    )
    assert cols["qty"].type == pb.COLUMN_TYPE_DECIMAL and cols["qty"].precision == 0
    assert cols["small"].type == pb.COLUMN_TYPE_INT16  # Avro int with connect.type int16
    assert cols["added"].type == pb.COLUMN_TYPE_DATE
    assert cols["seen_tz"].type == pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC
    assert cols["attrs"].type == pb.COLUMN_TYPE_JSON and cols["ref"].type == pb.COLUMN_TYPE_UUID
    after = row(snap, "after")
    assert after is not None
    assert after["label"] == "pen" and after["price"] == Decimal("4.99") and after["qty"] == Decimal("10.5")
    assert after["seen"] == CREATED_AT  # the same '2018-06-20 15:13:16.945104' as the JSON capture
    assert after["seen_tz"] == UPDATED_AT  # '2024-01-02 03:04:05.1234+02'
    assert after["attrs"] == {"a": 1} and after["ref"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert after["small"] == 7
    assert row(upd, "before") == after
    assert row(upd, "after") == {**after, "price": Decimal("24.99"), "qty": Decimal("1200")}
    assert row(dele, "after") is None and row(dele, "before") == row(upd, "after")
    assert snap.source.snapshot and snap.source.snapshot_marker == "last"
    assert upd.source.lsn > 0 and upd.source.tx_id > 0


def test_avro_schema_fetched_once(registry_url: str) -> None:
    _Registry.requests.clear()
    decoder = avro_decoder(registry_url)
    for i, (t, k, v) in enumerate(avro_records() * 3):
        decoder.decode(t, 0, i, k, v)
    assert len(_Registry.requests) == 2  # key schema 1 and value schema 2


def test_avro_unknown_schema_id(registry_url: str) -> None:
    topic, key, value = avro_records()[0]
    assert value is not None
    bad = value[:1] + (42).to_bytes(4, "big") + value[5:]
    with pytest.raises(DecodeError, match="unknown schema id 42"):
        avro_decoder(registry_url).decode(topic, 0, 0, key, bad)


def test_avro_truncated(registry_url: str) -> None:
    topic, key, value = avro_records()[0]
    assert value is not None
    decoder = avro_decoder(registry_url)
    for cut in (len(value) - 1, len(value) // 2, 6):
        with pytest.raises(DecodeError, match=r"truncated or corrupt|left over"):
            decoder.decode(topic, 0, 0, key, value[:cut])
    with pytest.raises(DecodeError, match="too short"):
        decoder.decode(topic, 0, 0, key, value[:3])


def test_avro_wrong_magic_and_missing_registry(registry_url: str) -> None:
    topic, key, value = avro_records()[0]
    assert value is not None
    with pytest.raises(DecodeError, match="magic byte 1, expected 0"):
        avro_decoder(registry_url, value_format="avro").decode(topic, 0, 0, key, b"\x01" + value[1:])
    with pytest.raises(DecodeError, match="no schema registry"):
        Decoder().decode(topic, 0, 0, key, value)


def test_avro_cli(registry_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from inlet.services.cli.main import main

    topic, key, value = avro_records()[1]
    assert key is not None and value is not None
    (tmp_path / "k.avro").write_bytes(key)
    (tmp_path / "v.avro").write_bytes(value)
    code = main(
        [
            *("cdc", "decode", "--value", str(tmp_path / "v.avro"), "--key", str(tmp_path / "k.avro")),
            *("--schema-registry", registry_url, "--topic", topic),
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(out) == 1
    doc = json.loads(out[0])
    assert doc["op"] == "u" and doc["table"] == "dbserver1.public.items" and doc["key"] == {"id": 1}
    assert doc["after"]["price"] == "24.99" and doc["before"]["price"] == "4.99"
    assert doc["after"]["seen"] == "2018-06-20T15:13:16.945104"
    assert doc["after"]["seen_tz"] == "2024-01-02T01:04:05.123400Z"
    assert doc["snapshot"] is False


# ------------------------------------------------------------------------------ malformed input


def _first(name: str = "real_schemas_true.jsonl") -> dict[str, Any]:
    return load(name)[0]


def test_malformed_json() -> None:
    with pytest.raises(DecodeError, match="value is not JSON"):
        Decoder().decode("dbserver1.public.customers", 0, 0, None, b'{"schema": {')
    with pytest.raises(DecodeError, match="key is not JSON"):
        rec = _first()
        Decoder().decode(rec["topic"], 0, 0, b"{oops", as_bytes(rec["value"]))


def test_wrong_type_names_the_column() -> None:
    rec = _first()
    rec["value"]["payload"]["after"]["born"] = "x"
    with pytest.raises(DecodeError) as e:
        Decoder().decode(rec["topic"], 0, 0, as_bytes(rec["key"]), as_bytes(rec["value"]))
    assert e.value.reason == "column 'born': expected int32 days for io.debezium.time.Date, got 'x'"


def test_wrong_type_after_the_fast_path_is_warm() -> None:
    decoder = Decoder()
    rec = _first()
    decoder.decode(rec["topic"], 0, 0, as_bytes(rec["key"]), as_bytes(rec["value"]))
    rec["value"]["payload"]["after"]["balance"] = "not base64!"
    with pytest.raises(DecodeError, match="column 'balance': expected base64 two's-complement bytes"):
        decoder.decode(rec["topic"], 0, 1, as_bytes(rec["key"]), as_bytes(rec["value"]))
    rec["value"]["payload"]["after"]["balance"] = "AfM="
    rec["value"]["payload"]["after"]["id"] = 1.5
    with pytest.raises(DecodeError, match=re.escape("column 'id': expected int32, got 1.5")):
        decoder.decode(rec["topic"], 0, 2, as_bytes(rec["key"]), as_bytes(rec["value"]))


def test_not_an_envelope() -> None:
    with pytest.raises(DecodeError, match="unknown op 'x'"):
        Decoder().decode("a.b.c", 0, 0, b'{"id":1}', b'{"op":"x","source":{}}')
    with pytest.raises(DecodeError, match="not a Debezium change event"):
        Decoder().decode("a.b.c", 0, 0, None, b'{"hello":1}')
    with pytest.raises(DecodeError, match="not a Debezium envelope"):
        Decoder().decode("a.b.c", 0, 0, None, b"[1,2]")
    with pytest.raises(DecodeError, match="malformed"):
        src = {"schema": "s", "table": "t", "lsn": "not a number"}
        Decoder(catalog=None).decode(
            "a.s.t",
            0,
            0,
            b'{"id":1}',
            orjson.dumps({"op": "t", "source": src, "before": None, "after": None}),
        )
