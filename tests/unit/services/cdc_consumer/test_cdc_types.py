"""Every Debezium PostgreSQL encoding (default connector settings) -> Inlet's typed values.

Each case is a Connect field schema as Debezium's PostgreSQL connector declares it, a wire value as
JsonConverter writes it, and the value worked out by hand from the PostgreSQL literal.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import struct
from typing import Any

import orjson
import pytest

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import CatalogColumn, DecodeError, Decoder, render_change
from inlet.services.cdc_consumer.catalog import connect_field
from inlet.services.cdc_consumer.types import PLACEHOLDER, column_plan, decimal_text

CT = pb.ColumnType
US = dt.timedelta(microseconds=1)
EPOCH = dt.datetime(1970, 1, 1)


def micros(d: dt.datetime) -> int:
    if d.tzinfo is not None:
        return (d - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // US
    return (d - EPOCH) // US


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unscaled(n: int) -> str:
    """Base64 of the minimal big-endian two's-complement bytes of n (Connect Decimal)."""
    length = max(1, (n.bit_length() + 8) // 8)
    return b64(n.to_bytes(length, "big", signed=True))


def envelope(
    fields: list[dict[str, Any]], after: dict[str, Any], op: str = "c", key: tuple[str, ...] = ("id",)
):
    row_fields = [{"type": "int32", "optional": False, "field": "id"}, *fields]
    row_schema = {"type": "struct", "fields": row_fields, "optional": True, "name": "srv.public.t.Value"}
    source_schema = {
        "type": "struct",
        "fields": [],
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
    }
    schema = {
        "type": "struct",
        "name": "srv.public.t.Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {**source_schema, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    source = {
        "connector": "postgresql",
        "name": "srv",
        "db": "d",
        "schema": "public",
        "table": "t",
        "ts_ms": 5,
        "lsn": 7,
    }
    value = {
        "schema": schema,
        "payload": {"before": None, "after": after, "source": source, "op": op, "ts_ms": 6},
    }
    key_fields = [next(f for f in row_fields if f["field"] == k) for k in key]  # in key order
    key_doc = {
        "schema": {"type": "struct", "fields": key_fields, "optional": False, "name": "srv.public.t.Key"},
        "payload": {k: after[k] for k in key},
    }
    return orjson.dumps(key_doc), orjson.dumps(value)


def decode_one(field: dict[str, Any], wire: Any, op: str = "c") -> tuple[pb.Column, pb.Value]:
    key, value = envelope([{**field, "optional": True, "field": "c"}], {"id": 1, "c": wire}, op=op)
    (rec,) = Decoder().decode("srv.public.t", 0, 0, key, value)
    return rec.change.schema.columns[1], rec.change.after.values[1]


CASES: list[tuple[str, dict[str, Any], Any, int, str, Any]] = [
    # (label, Connect schema, wire value, column type, Value field, expected)
    ("int2", {"type": "int16"}, -32768, CT.COLUMN_TYPE_INT16, "int_value", -32768),
    ("int4", {"type": "int32"}, 2147483647, CT.COLUMN_TYPE_INT32, "int_value", 2147483647),
    ("int8", {"type": "int64"}, -9223372036854775808, CT.COLUMN_TYPE_INT64, "int_value", -(2**63)),
    ("float4", {"type": "float"}, 1.5, CT.COLUMN_TYPE_FLOAT32, "double_value", 1.5),
    ("float8", {"type": "double"}, -2.25e300, CT.COLUMN_TYPE_FLOAT64, "double_value", -2.25e300),
    ("float8 inf", {"type": "double"}, "Infinity", CT.COLUMN_TYPE_FLOAT64, "double_value", math.inf),
    ("float8 -inf", {"type": "double"}, "-Infinity", CT.COLUMN_TYPE_FLOAT64, "double_value", -math.inf),
    ("bool", {"type": "boolean"}, True, CT.COLUMN_TYPE_BOOLEAN, "bool_value", True),
    ("bit(1)", {"type": "boolean"}, False, CT.COLUMN_TYPE_BOOLEAN, "bool_value", False),
    ("text", {"type": "string"}, "héllo ☃", CT.COLUMN_TYPE_STRING, "string_value", "héllo ☃"),
    ("bytea", {"type": "bytes"}, b64(b"\x00\xde\xad"), CT.COLUMN_TYPE_BYTES, "bytes_value", b"\x00\xde\xad"),
    # numeric(10,2) -12.34: unscaled -1234
    (
        "numeric(10,2)",
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        },
        unscaled(-1234),
        CT.COLUMN_TYPE_DECIMAL,
        "decimal_value",
        "-12.34",
    ),
    # numeric(38,0) 10^37 (exact, beyond float precision)
    (
        "numeric(38,0)",
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "0", "connect.decimal.precision": "38"},
        },
        unscaled(10**37 + 1),
        CT.COLUMN_TYPE_DECIMAL,
        "decimal_value",
        "10000000000000000000000000000000000001",
    ),
    # money '$-1.05' (decimal.handling.mode=precise: Decimal scale 2)
    (
        "money",
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
        unscaled(-105),
        CT.COLUMN_TYPE_DECIMAL,
        "decimal_value",
        "-1.05",
    ),
    # numeric 0.00012 -> VariableScaleDecimal{scale 5, 12}
    (
        "numeric",
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": []},
        {"scale": 5, "value": unscaled(12)},
        CT.COLUMN_TYPE_DECIMAL,
        "decimal_value",
        "0.00012",
    ),
    # date '2024-02-29'
    (
        "date",
        {"type": "int32", "name": "io.debezium.time.Date"},
        (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,
        CT.COLUMN_TYPE_DATE,
        "int_value",
        19782,
    ),
    # date '1900-01-01' (negative days)
    (
        "date old",
        {"type": "int32", "name": "io.debezium.time.Date"},
        -25567,
        CT.COLUMN_TYPE_DATE,
        "int_value",
        -25567,
    ),
    # time(3) '13:14:15.123' -> io.debezium.time.Time milliseconds
    (
        "time(3)",
        {"type": "int32", "name": "io.debezium.time.Time"},
        ((13 * 60 + 14) * 60 + 15) * 1000 + 123,
        CT.COLUMN_TYPE_TIME_MICROS,
        "int_value",
        ((13 * 60 + 14) * 60 + 15) * 1_000_000 + 123_000,
    ),
    # time '23:59:59.999999' -> MicroTime
    (
        "time",
        {"type": "int64", "name": "io.debezium.time.MicroTime"},
        86_399_999_999,
        CT.COLUMN_TYPE_TIME_MICROS,
        "int_value",
        86_399_999_999,
    ),
    (
        "time nanos",
        {"type": "int64", "name": "io.debezium.time.NanoTime"},
        1_500_999,
        CT.COLUMN_TYPE_TIME_MICROS,
        "int_value",
        1500,
    ),
    # timestamp(3) '2020-01-01 00:00:00.123' -> Timestamp milliseconds
    (
        "timestamp(3)",
        {"type": "int64", "name": "io.debezium.time.Timestamp"},
        micros(dt.datetime(2020, 1, 1, 0, 0, 0, 123000)) // 1000,
        CT.COLUMN_TYPE_TIMESTAMP_MICROS,
        "int_value",
        micros(dt.datetime(2020, 1, 1, 0, 0, 0, 123000)),
    ),
    # timestamp '1969-12-31 23:59:59.999999' (negative micros, exact)
    (
        "timestamp",
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        -1,
        CT.COLUMN_TYPE_TIMESTAMP_MICROS,
        "int_value",
        micros(dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
    ),
    (
        "timestamp nanos",
        {"type": "int64", "name": "io.debezium.time.NanoTimestamp"},
        1_700_000_000_123_456_789,
        CT.COLUMN_TYPE_TIMESTAMP_MICROS,
        "int_value",
        1_700_000_000_123_456,
    ),
    # timestamptz '2262-04-11 23:47:16.854775+00' (beyond float-exact microseconds)
    (
        "timestamptz",
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        "2262-04-11T23:47:16.854775Z",
        CT.COLUMN_TYPE_TIMESTAMP_MICROS_UTC,
        "int_value",
        micros(dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=dt.UTC)),
    ),
    (
        "timestamptz infinity",
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        "infinity",
        CT.COLUMN_TYPE_TIMESTAMP_MICROS_UTC,
        "int_value",
        2**63 - 1,
    ),
    (
        "timetz",
        {"type": "string", "name": "io.debezium.time.ZonedTime"},
        "10:15:30.5Z",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "10:15:30.5Z",
    ),
    # interval '1 day 02:00:00.000001' -> MicroDuration
    (
        "interval",
        {"type": "int64", "name": "io.debezium.time.MicroDuration"},
        (86400 + 7200) * 1_000_000 + 1,
        CT.COLUMN_TYPE_DURATION_MICROS,
        "int_value",
        (86400 + 7200) * 1_000_000 + 1,
    ),
    (
        "interval string mode",
        {"type": "string", "name": "io.debezium.time.Interval"},
        "P1Y2M3DT4H5M6.78S",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "P1Y2M3DT4H5M6.78S",
    ),
    (
        "jsonb",
        {"type": "string", "name": "io.debezium.data.Json"},
        '{"a": [1]}',
        CT.COLUMN_TYPE_JSON,
        "string_value",
        '{"a": [1]}',
    ),
    (
        "hstore json",
        {"type": "string", "name": "io.debezium.data.Json"},
        '{"k":"v"}',
        CT.COLUMN_TYPE_JSON,
        "string_value",
        '{"k":"v"}',
    ),
    (
        "hstore map",
        {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}},
        {"k": "v"},
        CT.COLUMN_TYPE_JSON,
        "string_value",
        '{"k":"v"}',
    ),
    (
        "uuid",
        {"type": "string", "name": "io.debezium.data.Uuid"},
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        CT.COLUMN_TYPE_UUID,
        "string_value",
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    ),
    (
        "enum",
        {"type": "string", "name": "io.debezium.data.Enum", "parameters": {"allowed": "a,b"}},
        "b",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "b",
    ),
    (
        "xml",
        {"type": "string", "name": "io.debezium.data.Xml"},
        "<a/>",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "<a/>",
    ),
    (
        "ltree",
        {"type": "string", "name": "io.debezium.data.Ltree"},
        "a.b.c",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "a.b.c",
    ),
    ("inet", {"type": "string"}, "192.168.0.1/24", CT.COLUMN_TYPE_STRING, "string_value", "192.168.0.1/24"),
    (
        "macaddr",
        {"type": "string"},
        "08:00:2b:01:02:03",
        CT.COLUMN_TYPE_STRING,
        "string_value",
        "08:00:2b:01:02:03",
    ),
    # bit(10) B'1000000001': Debezium Bits, little-endian bytes of the bit set
    (
        "bit(10)",
        {"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "10"}},
        b64(b"\x01\x02"),
        CT.COLUMN_TYPE_BYTES,
        "bytes_value",
        b"\x01\x02",
    ),
    # point(1.5, -2) -> Point{x, y, wkb}
    (
        "point",
        {"type": "struct", "name": "io.debezium.data.geometry.Point", "fields": []},
        {"x": 1.5, "y": -2.0, "wkb": b64(struct.pack("<BIdd", 1, 1, 1.5, -2.0)), "srid": None},
        CT.COLUMN_TYPE_BYTES,
        "bytes_value",
        struct.pack("<BIdd", 1, 1, 1.5, -2.0),
    ),
    (
        "geometry",
        {"type": "struct", "name": "io.debezium.data.geometry.Geometry", "fields": []},
        {"wkb": b64(bytes.fromhex("0101000020E6100000000000000000F03F0000000000000040")), "srid": 4326},
        CT.COLUMN_TYPE_BYTES,
        "bytes_value",
        bytes.fromhex("0101000020E6100000000000000000F03F0000000000000040"),
    ),
]


@pytest.mark.parametrize(
    ("label", "field", "wire", "ctype", "kind", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_type_mapping(
    label: str, field: dict[str, Any], wire: Any, ctype: int, kind: str, expected: Any
) -> None:
    col, value = decode_one(field, wire)
    assert col.type == ctype
    assert value.WhichOneof("kind") == kind
    assert getattr(value, kind) == expected


def test_nan_double_is_kept() -> None:
    _, value = decode_one({"type": "double"}, "NaN")
    assert math.isnan(value.double_value)


def test_decimal_precision_and_scale_on_the_column() -> None:
    col, _ = decode_one(
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "3", "connect.decimal.precision": "12"},
        },
        unscaled(5),
    )
    assert (col.precision, col.scale, col.source_type) == (12, 3, "org.apache.kafka.connect.data.Decimal")


def test_null_is_an_unset_value() -> None:
    _, value = decode_one({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}, None)
    assert value.WhichOneof("kind") is None


def test_arrays() -> None:
    col, value = decode_one({"type": "array", "items": {"type": "int32", "optional": True}}, [1, None, -3])
    assert col.type == CT.COLUMN_TYPE_LIST and col.element.type == CT.COLUMN_TYPE_INT32
    vals = value.list_value.values
    assert [v.WhichOneof("kind") for v in vals] == ["int_value", None, "int_value"]
    assert [vals[0].int_value, vals[2].int_value] == [1, -3]
    col, value = decode_one(
        {"type": "array", "items": {"type": "int32", "name": "io.debezium.time.Date"}}, [0, 1]
    )
    assert col.element.type == CT.COLUMN_TYPE_DATE and [v.int_value for v in value.list_value.values] == [
        0,
        1,
    ]
    _, value = decode_one({"type": "array", "items": {"type": "string"}}, [])
    assert value.WhichOneof("kind") == "list_value" and len(value.list_value.values) == 0


PH_B64 = b64(PLACEHOLDER.encode())


@pytest.mark.parametrize(
    ("field", "wire"),
    [
        ({"type": "string"}, PLACEHOLDER),
        ({"type": "string", "name": "io.debezium.data.Json"}, PLACEHOLDER),
        ({"type": "string", "name": "io.debezium.data.Xml"}, PLACEHOLDER),
        ({"type": "bytes"}, PH_B64),
        ({"type": "array", "items": {"type": "string"}}, [PLACEHOLDER]),
        ({"type": "array", "items": {"type": "bytes"}}, [PH_B64]),
        ({"type": "array", "items": {"type": "int32"}}, list(PLACEHOLDER.encode())),  # int[] placeholder
        ({"type": "array", "items": {"type": "int64"}}, list(PLACEHOLDER.encode())),
        (
            {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}},
            {PLACEHOLDER: PLACEHOLDER},
        ),
    ],
)
def test_unchanged_toast_placeholder(field: dict[str, Any], wire: Any) -> None:
    _, value = decode_one(field, wire, op="u")  # an UPDATE's new row (an insert's is a real value)
    assert value.WhichOneof("kind") == "unchanged"


@pytest.mark.parametrize(
    ("field", "wire", "message"),
    [
        (
            {"type": "int32", "name": "io.debezium.time.Date"},
            "x",
            "column 'c': expected int32 days for io.debezium.time.Date, got 'x'",
        ),
        ({"type": "int64"}, True, "column 'c': expected int64, got True"),
        ({"type": "string"}, 5, "column 'c': expected string, got 5"),
        ({"type": "double"}, "abc", "column 'c': expected float64, got 'abc'"),
        ({"type": "boolean"}, 1, "column 'c': expected boolean, got 1"),
        ({"type": "bytes"}, "***", "column 'c': expected base64 bytes, got '***'"),
        (
            {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
            "2024-13-01T00:00:00Z",
            "column 'c': expected an ISO-8601 string for io.debezium.time.ZonedTimestamp, got '2024-13-01T00:00:00Z'",
        ),
        (
            {"type": "array", "items": {"type": "int32"}},
            ["a"],
            "column 'c': expected an array of int32, got ['a']",
        ),
    ],
)
def test_wrong_types_name_column_and_encoding(field: dict[str, Any], wire: Any, message: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_one(field, wire)
    assert e.value.reason == message


def test_unsupported_connect_type() -> None:
    with pytest.raises(DecodeError, match=re.escape("column 'c': unsupported type struct some.Thing")):
        decode_one({"type": "struct", "name": "some.Thing", "fields": []}, {})


def test_decimal_text() -> None:
    assert decimal_text(-5, 3) == "-0.005"
    assert decimal_text(0, 2) == "0.00"
    assert decimal_text(123, 0) == "123"
    assert decimal_text(12, -2) == "1200"


# ------------------------------------------------------------------------------ keys


def test_composite_key_renders_like_hudi_complex_key_generator() -> None:
    fields = [
        {"type": "string", "optional": False, "field": "region"},
        {"type": "int32", "optional": False, "name": "io.debezium.time.Date", "field": "day"},
    ]
    after = {"id": 7, "region": "", "day": (dt.date(2024, 3, 1) - dt.date(1970, 1, 1)).days}
    key, value = envelope(fields, after, key=("region", "day", "id"))
    (rec,) = Decoder().decode("srv.public.t", 0, 0, key, value)
    ev = rec.change
    assert ev.record_key == "region:__empty__,day:2024-03-01,id:7"
    assert {c.name: c.key_position for c in ev.schema.columns} == {"id": 3, "region": 1, "day": 2}
    assert render_change(ev)["key"] == {"region": "", "day": "2024-03-01", "id": 7}


def test_table_without_primary_key_is_rejected_by_default() -> None:
    _, value = envelope([], {"id": 1})
    with pytest.raises(
        DecodeError, match=re.escape("table srv.public.t has no primary key (Debezium sent a null key)")
    ):
        Decoder().decode("srv.public.t", 0, 0, None, value)


def test_table_without_primary_key_is_keyed_by_the_whole_row() -> None:
    fields = [
        {"type": "string", "optional": True, "field": "s"},
        {"type": "array", "optional": True, "items": {"type": "int32", "optional": True}, "field": "a"},
        {"type": "string", "optional": True, "field": "big"},
    ]
    _, value = envelope(fields, {"id": 1, "s": "", "a": [1, None], "big": "long text"})
    (rec,) = Decoder(keyless="whole_row").decode("srv.public.t", 0, 0, None, value)
    assert rec.change.record_key == 'id:1,s:__empty__,a:["1",null],big:long text'
    # a delete without a before image cannot be keyed
    doc = orjson.loads(value)
    doc["payload"].update(op="d", before=None, after=None)
    with pytest.raises(DecodeError, match=re.escape("table srv.public.t has no primary key and the delete")):
        Decoder(keyless="whole_row").decode("srv.public.t", 0, 0, None, orjson.dumps(doc))
    # an update whose after image has an unchanged TOASTed value takes it from before
    doc["payload"].update(
        op="u",
        before={"id": 1, "s": "", "a": None, "big": "long text"},
        after={"id": 1, "s": "z", "a": None, "big": PLACEHOLDER},
    )
    (rec,) = Decoder(keyless="whole_row").decode("srv.public.t", 0, 0, None, orjson.dumps(doc))
    assert rec.change.record_key == "id:1,s:z,a:__null__,big:long text"
    doc["payload"]["before"] = None
    with pytest.raises(DecodeError, match="column 'big' is an unchanged TOASTed value: no record key"):
        Decoder(keyless="whole_row").decode("srv.public.t", 0, 0, None, orjson.dumps(doc))


def test_null_single_key_is_refused() -> None:
    _, value = envelope([], {"id": 1})
    with pytest.raises(DecodeError, match="record key column 'id' is null or empty"):
        Decoder().decode("srv.public.t", 0, 0, b'{"id": null}', value)


# ------------------------------------------------------------------------------ fingerprints


def test_fingerprint_changes_with_type_nullability_and_columns_only() -> None:
    def fp(*fields: dict[str, Any]) -> str:
        return Decoder()._plan("k", list(fields), "json", None).fingerprint

    a = {"type": "int32", "optional": True, "field": "a"}
    b = {"type": "string", "optional": True, "field": "b"}
    assert fp(a, b) == fp(dict(a), dict(b))
    assert fp(a, b) != fp(a)
    assert fp(a, b) != fp({**a, "type": "int64"}, b)
    assert fp(a, b) != fp({**a, "optional": False}, b)
    assert fp(a, b) != fp(b, a)
    # the same column from a Connect schema, an Avro schema and the catalog: one fingerprint
    dec = {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "optional": True,
        "field": "m",
    }
    from_catalog = connect_field(CatalogColumn("m", "numeric", (10 << 16 | 2) + 4, False))
    assert fp(dec) == fp(from_catalog)
    from inlet.services.cdc_consumer.avro import to_connect

    avro_field = to_connect(
        [
            "null",
            {
                "type": "bytes",
                "scale": 2,
                "precision": 10,
                "connect.name": "org.apache.kafka.connect.data.Decimal",
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                "logicalType": "decimal",
            },
        ]
    )
    assert fp({**avro_field, "field": "m"}) == fp(dec)


# ------------------------------------------------------------------------------ catalog -> Connect


@pytest.mark.parametrize(
    ("col", "connect_type", "name"),
    [
        (CatalogColumn("c", "int2", -1, True), "int16", None),
        (CatalogColumn("c", "timestamp", -1, False), "int64", "io.debezium.time.MicroTimestamp"),
        (CatalogColumn("c", "timestamp", 3, False), "int64", "io.debezium.time.Timestamp"),
        (CatalogColumn("c", "time", 0, False), "int32", "io.debezium.time.Time"),
        (CatalogColumn("c", "time", -1, False), "int64", "io.debezium.time.MicroTime"),
        (CatalogColumn("c", "timestamptz", -1, False), "string", "io.debezium.time.ZonedTimestamp"),
        (CatalogColumn("c", "numeric", -1, False), "struct", "io.debezium.data.VariableScaleDecimal"),
        (CatalogColumn("c", "bit", 1, False), "boolean", None),
        (CatalogColumn("c", "bit", 8, False), "bytes", "io.debezium.data.Bits"),
        (CatalogColumn("c", "mood", -1, False, is_enum=True), "string", "io.debezium.data.Enum"),
        (CatalogColumn("c", "interval", -1, False), "int64", "io.debezium.time.MicroDuration"),
        (CatalogColumn("c", "_int4", -1, False, element_type="int4"), "array", None),
    ],
)
def test_catalog_types_follow_debezium_defaults(
    col: CatalogColumn, connect_type: str, name: str | None
) -> None:
    f = connect_field(col)
    assert f["type"] == connect_type and f.get("name") == name
    assert f["optional"] is (not col.not_null)
    column_plan(f, "json")  # and the decoder maps it


# ------------------------------------------------------------------------------ rendering


def test_render_change_values() -> None:
    fields = [
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "d"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "t"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "ts"},
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "tz"},
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2"},
            "field": "m",
        },
        {"type": "bytes", "optional": True, "field": "b"},
        {"type": "string", "optional": True, "field": "big"},
        {"type": "array", "optional": True, "items": {"type": "string", "optional": True}, "field": "arr"},
        {"type": "double", "optional": True, "field": "f"},
        {"type": "string", "optional": True, "field": "n"},
    ]
    after = {
        "id": 1,
        "d": (dt.date(2001, 2, 3) - dt.date(1970, 1, 1)).days,
        "t": ((4 * 60 + 5) * 60 + 6) * 1_000_000 + 7,
        "ts": micros(dt.datetime(1999, 12, 31, 23, 59, 59, 1)),
        "tz": "2024-01-02T03:04:05.1234+02:00",
        "m": unscaled(-5),
        "b": b64(b"\xff\x00"),
        "big": PLACEHOLDER,
        "arr": ["a", None],
        "f": "NaN",
        "n": None,
    }
    key, value = envelope(fields, after, op="u")
    (rec,) = Decoder().decode("srv.public.t", 3, 9, key, value)
    doc = json.loads(orjson.dumps(render_change(rec.change)))
    assert doc == {
        "op": "u",
        "table": "srv.public.t",
        "key": {"id": 1},
        "before": None,
        "after": {
            "id": 1,
            "d": "2001-02-03",
            "t": "04:05:06.000007",
            "ts": "1999-12-31T23:59:59.000001",
            "tz": "2024-01-02T01:04:05.123400Z",
            "m": "-0.05",
            "b": b64(b"\xff\x00"),
            "big": {"unchanged": True},
            "arr": ["a", None],
            "f": "NaN",
            "n": None,
        },
        "lsn": 7,
        "tx_id": 0,
        "source_ts_ms": 5,
        "snapshot": False,
    }
    assert rec.change.source.kafka_partition == 3 and rec.change.source.kafka_offset == 9
