"""The CDC consumer's fast paths give exactly what its reference paths give (issue #23 item 4).

Fast: each plan's compiled row (``decode._compile_row``) and one-integer key (``int_key``), and
:meth:`Decoder.decode_encoded` (the record without its schema, the schema's encoding appended).
Reference: a decoder built with neither (``_row``'s loop over the converters) and ``decode`` +
``SerializeToString``.
Both get the same events: a table of every kind of column the converters handle (the benchmark's
20 columns among them) with values, nulls, Debezium's TOAST placeholders and wrong encodings, as
inserts, updates, snapshot reads and deletes; and the recorded Confluent Avro events.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import DecodeError, Decoder
from inlet.services.cdc_consumer import decode as decode_module
from inlet.services.cdc_consumer.catalog import CatalogColumn
from inlet.services.cdc_consumer.types import PLACEHOLDER

DATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "debezium"
PH_B64 = base64.b64encode(PLACEHOLDER.encode()).decode()
PLACEHOLDERS = [PLACEHOLDER, PH_B64, [PLACEHOLDER], list(PLACEHOLDER.encode())]


def _decimal(scale: int, precision: int) -> dict[str, Any]:
    return {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
    }


def _unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes(max(1, (n.bit_length() + 8) // 8), "big", signed=True)).decode()


# column -> (Connect schema, values to cycle through: real ones and Debezium's placeholders)
COLUMNS: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "i2": ({"type": "int16"}, [-32768, 7]),
    "i4": ({"type": "int32"}, [2147483647, 0]),
    "i8": ({"type": "int64"}, [-(2**63), 2**40]),
    "f4": ({"type": "float"}, [1.5, "NaN", "Infinity"]),
    "f8": ({"type": "double"}, [-2.25e300, "-Infinity", 3]),
    "b": ({"type": "boolean"}, [True, False]),
    "t": ({"type": "string"}, ["héllo ☃", "", PLACEHOLDER]),
    "by": ({"type": "bytes"}, [base64.b64encode(b"\x00\xde").decode(), PH_B64]),
    "n": (_decimal(2, 12), [_unscaled(-1234), _unscaled(10**11)]),
    "vn": (
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": []},
        [{"scale": 3, "value": _unscaled(12345)}, {"scale": 0, "value": _unscaled(-1)}],
    ),
    # the dates and timestamps with Debezium's encodings of 'infinity' / '-infinity' too
    "d": ({"type": "int32", "name": "io.debezium.time.Date"}, [19782, -2440588, -2147472692, -2147472691]),
    "ts": (
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        [1529507596945104, 0, 9223372036825200000, -9223372036832400000],
    ),
    "tsm": ({"type": "int64", "name": "io.debezium.time.Timestamp"}, [1529507596945, -5]),
    "tz": (
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        ["2024-01-02T01:04:05.1234Z", "infinity", "+12024-01-01T00:00:00.5Z"],
    ),
    "tm": ({"type": "int64", "name": "io.debezium.time.MicroTime"}, [86399999999, 0]),
    "j": ({"type": "string", "name": "io.debezium.data.Json"}, ['{"a": [1, 2]}', PLACEHOLDER]),
    "u": (
        {"type": "string", "name": "io.debezium.data.Uuid"},
        ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", PLACEHOLDER],
    ),
    "ta": (
        {"type": "array", "items": {"type": "string", "optional": True}},
        [["a", None, "b"], [], [PLACEHOLDER]],
    ),
    "ia": ({"type": "array", "items": {"type": "int32"}}, [[1, 2, 3], list(PLACEHOLDER.encode())]),
    "hs": ({"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}}, [{"k": "v"}, {}]),
    "small": ({"type": "int16"}, [7, -1]),
    "real": ({"type": "float"}, [0.25, -1e30]),
}

#: a value of the wrong encoding per column (an insert each): both paths raise the same DecodeError
WRONG: dict[str, Any] = {
    "f4": True,  # a boolean is no number
    "i2": "x",
    "i4": True,
    "i8": 1.5,
    "f8": "abc",
    "b": 1,
    "t": 5,
    "by": "***",
    "n": "!!",
    "d": "x",
    "tz": "2024-13-01T00:00:00Z",
    "ia": ["a"],
}


def _events() -> list[tuple[bytes, bytes]]:
    """(key, value) JSON events with schemas of the COLUMNS table: every value of every column
    (the others cycling), nulls, inserts, updates, snapshot reads and deletes."""
    row_fields = [
        {"type": "int32", "optional": False, "field": "id"},
        *({**schema, "optional": True, "field": name} for name, (schema, _) in COLUMNS.items()),
    ]
    row_schema = {"type": "struct", "fields": row_fields, "optional": True, "name": "srv.public.t.Value"}
    schema = {
        "type": "struct",
        "name": "srv.public.t.Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    key_schema = {"type": "struct", "fields": row_fields[:1], "optional": False, "name": "srv.public.t.Key"}
    longest = max(len(values) for _, values in COLUMNS.values())
    out = []
    rows = 4 * longest + 4
    # an insert or snapshot read with a value equal to Debezium's placeholder in one column only
    # (there it is the real value): each column that has one
    alone = [(n, v) for n, (_, values) in COLUMNS.items() for v in values if v in PLACEHOLDERS]
    for i in range(rows + len(WRONG) + 2 * len(alone)):
        row: dict[str, Any] = {"id": i + 1}
        for j, (name, (_, values)) in enumerate(COLUMNS.items()):
            row[name] = None if (i + j) % 5 == 4 else values[(i // 4 + j) % len(values)]
        op = "cdur"[i % 4]
        if rows <= i < rows + len(WRONG):  # one wrong value
            name = list(WRONG)[i - rows]
            row[name], op = WRONG[name], "c"
        elif i >= rows + len(WRONG):
            k = i - rows - len(WRONG)
            row = {"id": i + 1, **{name: values[0] for name, (_, values) in COLUMNS.items()}}
            row["hs"] = None  # a map (hstore) may always be a placeholder: the row would be searched anyway
            row[alone[k // 2][0]] = alone[k // 2][1]
            op = "cr"[k % 2]
        before = row if op in "d" or i % 8 == 1 else None  # deletes, and some updates (REPLICA IDENTITY FULL)
        if op == "d" and i % 8 == 2:
            before = {"id": row["id"]}  # key only: REPLICA IDENTITY DEFAULT
        source = {"connector": "postgresql", "name": "srv", "db": "d", "schema": "public", "table": "t"}
        source.update({"ts_ms": 5 + i, "lsn": 7 + i, "txId": 3, "snapshot": "true" if op == "r" else "false"})
        payload = {
            "before": before,
            "after": None if op == "d" else row,
            "source": source,
            "op": op,
            "ts_ms": 6 + i,
            "transaction": {"id": f"3:{7 + i}", "total_order": i, "data_collection_order": i},
        }
        key = {"schema": key_schema, "payload": {"id": row["id"]}}
        out.append((orjson.dumps(key), orjson.dumps({"schema": schema, "payload": payload})))
    return out


#: the COLUMNS table as the source catalog has it (for the same events without schemas)
CATALOG = {
    c.name: c
    for c in (
        CatalogColumn("id", "int4", -1, True),
        CatalogColumn("i2", "int2", -1, False),
        CatalogColumn("i4", "int4", -1, False),
        CatalogColumn("i8", "int8", -1, False),
        CatalogColumn("f4", "float4", -1, False),
        CatalogColumn("f8", "float8", -1, False),
        CatalogColumn("b", "bool", -1, False),
        CatalogColumn("t", "text", -1, False),
        CatalogColumn("by", "bytea", -1, False),
        CatalogColumn("n", "numeric", ((12 << 16) | 2) + 4, False),
        CatalogColumn("vn", "numeric", -1, False),
        CatalogColumn("d", "date", -1, False),
        CatalogColumn("ts", "timestamp", -1, False),
        CatalogColumn("tsm", "timestamp", 3, False),
        CatalogColumn("tz", "timestamptz", -1, False),
        CatalogColumn("tm", "time", -1, False),
        CatalogColumn("j", "jsonb", -1, False),
        CatalogColumn("u", "uuid", -1, False),
        CatalogColumn("ta", "_text", -1, False, element_type="text"),
        CatalogColumn("ia", "_int4", -1, False, element_type="int4"),
        CatalogColumn("hs", "hstore", -1, False),
        CatalogColumn("small", "int2", -1, False),
        CatalogColumn("real", "float4", -1, False),
    )
}


class _Catalog:
    def columns(self, schema: str, table: str, refresh: bool = False) -> dict[str, CatalogColumn]:
        return CATALOG


class _Registry:
    """The recorded registry subjects, from memory (``get_schema`` as SchemaRegistryClient has it)."""

    def __init__(self) -> None:
        subjects = json.loads((DATA / "avro_registry_subjects.json").read_text())
        self._by_id = {
            v["id"]: Schema(json.dumps(v["schema"]), "AVRO") for vs in subjects.values() for v in vs
        }

    def get_schema(self, schema_id: int) -> Any:
        return self._by_id[schema_id]


def _avro_events() -> list[tuple[str, bytes | None, bytes | None]]:
    out = []
    for line in (DATA / "avro_records_hex.jsonl").read_text().splitlines():
        r = json.loads(line)
        key = bytes.fromhex(r["key_hex"]) if r.get("key_hex") else None
        out.append((r["topic"], key, bytes.fromhex(r["value_hex"]) if r.get("value_hex") else None))
    return out


def _outcome(decode: Any, *args: Any) -> Any:
    try:
        return decode(*args)
    except DecodeError as e:
        return ("DecodeError", e.reason)


def _compare(
    records: list[tuple[str, bytes | None, bytes | None]], registry: Any = None, catalog: Any = None
) -> tuple[int, Decoder]:
    """Decode ``records`` by the fast and the reference paths; assert the same; (the number of
    changes, the fast decoder)."""
    fast = Decoder(schema_registry=registry, catalog=catalog)
    with pytest.MonkeyPatch.context() as mp:  # the reference decoder's plans: none compiled
        mp.setattr(decode_module, "_compile_row", lambda names, converters: None)
        mp.setattr(decode_module, "_int_converter", None)  # no plan's key is "one integer column"
        reference = Decoder(schema_registry=registry, catalog=catalog)
        want = [_outcome(reference.decode, topic, 0, i, k, v) for i, (topic, k, v) in enumerate(records)]
    assert all(p.fill is None and p.int_key is None for p in reference._plans.values())
    changes = 0
    for i, (topic, k, v) in enumerate(records):
        assert _outcome(fast.decode, topic, 0, i, k, v) == want[i], (i, want[i])
        encoded = _outcome(fast.decode_encoded, topic, 0, i, k, v)
        if isinstance(want[i], tuple):
            assert encoded == want[i]
            continue
        assert len(encoded) == len(want[i])
        for (record, data), expected in zip(encoded, want[i], strict=True):
            assert pb.ChangeRecord.FromString(data) == expected
            assert pb.ChangeRecord.FromString(expected.SerializeToString()) == pb.ChangeRecord.FromString(
                data
            )
            without = pb.ChangeRecord()
            without.CopyFrom(expected)
            without.change.ClearField("schema")
            assert record == without
            changes += expected.HasField("change") and expected.change.HasField("schema")
    assert all(p.fill is not None and p.int_key is not None for p in fast._plans.values())
    return changes, fast


def test_json_events_decode_the_same_by_both_paths() -> None:
    events = [("srv.public.t", k, v) for k, v in _events()]
    changes, _ = _compare(events)
    assert changes == len(events) - len(WRONG)  # the wrong encodings: DecodeErrors on both paths


def test_json_events_without_schemas_decode_the_same_by_both_paths() -> None:
    """The same events as JsonConverter writes them with ``schemas.enable=false`` (column types from
    the source catalog)."""
    events = []
    for k, v in _events():
        payload = orjson.loads(v)["payload"]
        for row in (payload["before"], payload["after"]):
            if row and isinstance(row.get("hs"), dict):  # hstore.handling.mode=json: a string
                row["hs"] = orjson.dumps(row["hs"]).decode()
        events.append(("srv.public.t", orjson.dumps(orjson.loads(k)["payload"]), orjson.dumps(payload)))
    changes, _ = _compare(events, catalog=_Catalog())
    assert changes == len(events) - len(WRONG)


def test_recorded_avro_events_decode_the_same_by_both_paths() -> None:
    changes, fast = _compare(_avro_events(), _Registry())
    assert changes >= 3
    assert any(p.fill is not None for p in fast._plans.values())  # the Avro rows were compiled too


def test_the_writer_converts_the_appended_schema_encoding_as_the_canonical_one() -> None:
    """The writer parses the CDC consumer's encoding (schema appended) per record and, column by
    column, a batch of them concatenated: both give what the canonical encoding gives."""
    from inlet.services.writer.columns import columnar
    from inlet.services.writer.rows import Change, table_rows, to_arrow

    decoder = Decoder()
    encoded, canonical = [], []
    for i, (k, v) in enumerate(_events()):
        try:
            ((record, data),) = decoder.decode_encoded("srv.public.t", 0, i, k, v)
        except DecodeError:
            continue
        if record.change.op != pb.OPERATION_DELETE and record.change.HasField("before"):
            continue  # an old image on an update: the row path (tested below as a whole batch)
        encoded.append(data)
        canonical.append(decoder.decode("srv.public.t", 0, i, k, v)[0].SerializeToString())
    assert encoded != canonical and len(encoded) > 10

    def changes(raws: list[bytes]) -> list[Change]:
        return [Change(pb.ChangeRecord.FromString(r).change, 0, i, raw=r) for i, r in enumerate(raws)]

    def convert(raws: list[bytes]) -> pa.Table:
        return to_arrow(changes(raws), key_fields=["id"], current_rows=lambda images: [])

    def same(a: pa.Table, b: pa.Table) -> bool:  # by repr: NaN is a value here
        return a.schema == b.schema and repr(table_rows(a)) == repr(table_rows(b))

    # every change: updates whose TOASTed list is read from the table take the row path
    assert same(convert(encoded), convert(canonical))
    inserts = [
        i for i, r in enumerate(canonical) if pb.ChangeRecord.FromString(r).change.op == pb.OPERATION_CREATE
    ]
    by_columns = columnar(changes([encoded[i] for i in inserts]), ["id"], [], False)
    assert by_columns is not None  # the column path took them
    assert same(by_columns, columnar(changes([canonical[i] for i in inserts]), ["id"], [], False))
    assert same(by_columns, convert([canonical[i] for i in inserts]))
