"""PostgreSQL's edge values as the real Debezium 3.6 connector sends them -> Inlet's typed values.

Every wire value below was read from the live connector (default settings, JSON with schemas) for
the SQL literal in the comment; the live end-to-end check is
tests/integration/cdc_consumer/test_decode_live_types.py. Mappings (docs/cdc.md, "Values at the edges"):
timestamp/timestamptz ``±infinity`` -> the int64 bounds in microseconds, date ``±infinity`` -> the
int32 bounds in days, whatever form Debezium used; an instant past int64 microseconds is refused
with the reason (dead letter), never wrapped around.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from test_cdc_types import decode_one, envelope, micros, unscaled

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import DecodeError, Decoder, render_change

MICRO_TS = {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}
MILLI_TS = {"type": "int64", "name": "io.debezium.time.Timestamp"}
ZONED_TS = {"type": "string", "name": "io.debezium.time.ZonedTimestamp"}
DATE = {"type": "int32", "name": "io.debezium.time.Date"}
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
I32_MAX, I32_MIN = 2**31 - 1, -(2**31)
DAY_US = 86_400_000_000


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, astronomical years (Python's date stops
    at year 1): whole 400-year cycles of 146097 days moved into Python's range."""
    cycles = (year - 2000) // 400
    return (dt.date(year - 400 * cycles, month, day) - dt.date(1970, 1, 1)).days + 146097 * cycles


def value_of(field: dict[str, Any], wire: Any) -> Any:
    _, value = decode_one(field, wire)
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return [
            getattr(v, v.WhichOneof("kind")) if v.WhichOneof("kind") else None
            for v in value.list_value.values
        ]
    return getattr(value, kind) if kind else None


EDGE_CASES: list[tuple[Any, ...]] = [
    # timestamp 'infinity' / '-infinity': pgjdbc's infinity milliseconds, sent as microseconds
    ("timestamp infinity", MICRO_TS, 9223372036825200000, I64_MAX),
    ("timestamp -infinity", MICRO_TS, -9223372036832400000, I64_MIN),
    # timestamp(0) 'infinity' / '-infinity' (io.debezium.time.Timestamp, milliseconds)
    ("timestamp(0) infinity", MILLI_TS, 9223372036825200, I64_MAX),
    ("timestamp(0) -infinity", MILLI_TS, -9223372036832400, I64_MIN),
    ("timestamptz infinity", ZONED_TS, "infinity", I64_MAX),
    ("timestamptz -infinity", ZONED_TS, "-infinity", I64_MIN),
    # timestamp '10000-01-01 00:00:00' and '4713-01-01 00:00:00 BC': beyond Python's datetime
    ("timestamp year 10000", MICRO_TS, 253402300800000000, days_from_civil(10000, 1, 1) * DAY_US),
    ("timestamp 4713 BC", MICRO_TS, -210863520000000000, days_from_civil(-4712, 1, 1) * DAY_US),
    # timestamptz '10000-01-01 00:00:00+00', '4713-01-01 00:00:00+00 BC', '0001-01-01 00:00:00+00'
    ("timestamptz year 10000", ZONED_TS, "+10000-01-01T00:00:00.000000Z", 253402300800000000),
    ("timestamptz 4713 BC", ZONED_TS, "-4712-01-01T00:00:00.000000Z", -210863520000000000),
    ("timestamptz year 1", ZONED_TS, "0001-01-01T00:00:00.000000Z", days_from_civil(1, 1, 1) * DAY_US),
    ("timestamptz wide, offset", ZONED_TS, "+10000-01-01T02:00:00.5+02:00", 253402300800500000),
    # date 'infinity' / '-infinity': streamed as LocalDate -5877611-06-21 / -22 ...
    ("date infinity streamed", DATE, -2147472692, I32_MAX),
    ("date -infinity streamed", DATE, -2147472691, I32_MIN),
    # ... and snapshotted as pgjdbc's infinity java.sql.Date, its epoch days wrapped around
    ("date infinity snapshot", DATE, -622191234, I32_MAX),
    ("date -infinity snapshot", DATE, -625821272, I32_MIN),
    ("date infinity snapshot, worker a day east", DATE, -622191233, I32_MAX),
    # date '5874897-12-31' (PostgreSQL's last) and '4713-01-01 BC'
    ("date last", DATE, 2145042905, 2145042905),
    ("date 4713 BC", DATE, -2440550, days_from_civil(-4712, 1, 1)),
    # timestamp[] '{"2024-01-01 00:00:00",infinity}': elements are decoded alike
    (
        "timestamp[] with infinity",
        {"type": "array", "items": {**MICRO_TS, "optional": True}},
        [1704067200000000, 9223372036825200000, None],
        [micros(dt.datetime(2024, 1, 1)), I64_MAX, None],
    ),
    (
        "date[] with infinity",
        {"type": "array", "items": {**DATE, "optional": True}},
        [19723, -622191234],
        [19723, I32_MAX],
    ),
]


@pytest.mark.parametrize(("label", "field", "wire", "expected"), EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_infinities_and_far_dates(label: str, field: dict[str, Any], wire: Any, expected: Any) -> None:
    assert value_of(field, wire) == expected


@pytest.mark.parametrize(
    ("field", "wire", "message"),
    [
        # timestamp '294276-12-31 23:59:59.999999': Debezium's microseconds wrapped around a long
        (
            MICRO_TS,
            -9223372036853775810,
            "column 'c': -9223372036853775810 (Debezium's microseconds overflowed): the timestamp is after "
            "294247-01-10T04:00:54.775807Z, the last instant int64 microseconds hold",
        ),
        # timestamp(0) '294276-12-31 23:59:59': milliseconds fit a long, microseconds do not
        (
            MILLI_TS,
            9224318015999000,
            "column 'c': 9224318015999000 milliseconds: the timestamp is after "
            "294247-01-10T04:00:54.775807Z, the last instant int64 microseconds hold",
        ),
        (
            ZONED_TS,
            "+294276-12-31T23:59:59.999999Z",
            "column 'c': '+294276-12-31T23:59:59.999999Z' is after 294247-01-10T04:00:54.775807Z, the "
            "last instant int64 microseconds hold",
        ),
        (
            DATE,
            -5_000_000,
            "column 'c': -5000000 days is outside PostgreSQL's dates (4714-11-24 BC .. 5874897-12-31)",
        ),
    ],
    ids=["MicroTimestamp", "Timestamp", "ZonedTimestamp", "Date"],
)
def test_instants_past_int64_micros_are_refused_with_the_reason(
    field: dict[str, Any], wire: Any, message: str
) -> None:
    with pytest.raises(DecodeError) as e:
        decode_one(field, wire)
    assert e.value.reason == message


def test_a_date_key_at_infinity_or_past_9999_is_a_record_key() -> None:
    for days, text in [
        (days_from_civil(10000, 1, 1), "10000-01-01"),
        (days_from_civil(-4712, 1, 1), "-4712-01-01"),
        (19723, "2024-01-01"),
    ]:
        key, value = envelope([{**DATE, "optional": False, "field": "d"}], {"id": 1, "d": days}, key=("d",))
        (rec,) = Decoder().decode("srv.public.t", 0, 0, key, value)
        assert rec.change.record_key == text
    key, value = envelope(
        [{**DATE, "optional": False, "field": "d"}], {"id": 1, "d": -2147472692}, key=("d",)
    )
    (rec,) = Decoder().decode("srv.public.t", 0, 0, key, value)
    assert rec.change.key.values[0].int_value == I32_MAX
    assert render_change(rec.change)["after"]["d"] == "infinity"


VALUE_CASES: list[tuple[Any, ...]] = [
    # numeric(38,18) '12345678901234567890.123456789012345678': all 38 digits
    (
        "numeric(38,18)",
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "18", "connect.decimal.precision": "38"},
        },
        "CUmw9vACMxPESZBQ3jjzTg==",
        pb.COLUMN_TYPE_DECIMAL,
        "12345678901234567890.123456789012345678",
    ),
    # numeric '123456789012345678901234567890123456789012345.678901' (51 digits, no typmod)
    (
        "numeric beyond 38 digits",
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": []},
        {"scale": 6, "value": "VHj54iCtsl5NIYCMzbfPb+QOdmw1"},
        pb.COLUMN_TYPE_DECIMAL,
        "123456789012345678901234567890123456789012345.678901",
    ),
    # numeric '1E+50': Debezium sends scale 0 and the 51-digit unscaled value
    (
        "numeric 1E+50",
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": []},
        {"scale": 0, "value": "RGw7FfmSZofSxAU0/bVkAAAAAAAA"},
        pb.COLUMN_TYPE_DECIMAL,
        "1" + "0" * 50,
    ),
    # money '92233720368547758.07' / '-92233720368547758.08' (the int64 bounds in cents)
    (
        "money max",
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
        "f/////////8=",
        pb.COLUMN_TYPE_DECIMAL,
        "92233720368547758.07",
    ),
    (
        "money min",
        {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
        "gAAAAAAAAAA=",
        pb.COLUMN_TYPE_DECIMAL,
        "-92233720368547758.08",
    ),
    # real 'NaN' and '-Infinity', 1e-45 (Java writes 1.4E-45)
    ("float4 NaN", {"type": "float"}, "NaN", pb.COLUMN_TYPE_FLOAT32, "nan"),
    ("float4 -Infinity", {"type": "float"}, "-Infinity", pb.COLUMN_TYPE_FLOAT32, float("-inf")),
    ("float8 -0", {"type": "double"}, -0.0, pb.COLUMN_TYPE_FLOAT64, -0.0),
    (
        "float8[] '{NaN,Infinity,-Infinity,1.5,NULL}'",
        {"type": "array", "items": {"type": "double", "optional": True}},
        ["NaN", "Infinity", "-Infinity", 1.5, None],
        pb.COLUMN_TYPE_LIST,
        ["nan", float("inf"), float("-inf"), 1.5, None],
    ),
    # text[] with quotes, a backslash, braces, NULL, 'NULL' and ''
    (
        "text[] quotes and nulls",
        {"type": "array", "items": {"type": "string", "optional": True}},
        ['say "hi"', None, "it's", "back\\slash", "{braces}", "NULL", "", " sp "],
        pb.COLUMN_TYPE_LIST,
        ['say "hi"', None, "it's", "back\\slash", "{braces}", "NULL", "", " sp "],
    ),
    # jsonb '{"k": "va\"l", "u": "\u00e9", "n": 1.0e2, "z": [true, null]}' in jsonb's own text
    (
        "jsonb",
        {"type": "string", "name": "io.debezium.data.Json"},
        '{"k": "va\\"l", "n": 100, "u": "é", "z": [true, null]}',
        pb.COLUMN_TYPE_JSON,
        '{"k": "va\\"l", "n": 100, "u": "é", "z": [true, null]}',
    ),
    ("bytea", {"type": "bytes"}, "AP9/gA==", pb.COLUMN_TYPE_BYTES, b"\x00\xff\x7f\x80"),
    ("bytea empty", {"type": "bytes"}, "", pb.COLUMN_TYPE_BYTES, b""),
    (
        "enum with quotes",
        {"type": "string", "name": "io.debezium.data.Enum", "parameters": {"allowed": 'sad,it\'s "x"'}},
        'it\'s "x"',
        pb.COLUMN_TYPE_STRING,
        'it\'s "x"',
    ),
    # interval '178000000 years' / '-178000000 years': Debezium's long saturates
    (
        "interval max",
        {"type": "int64", "name": "io.debezium.time.MicroDuration"},
        I64_MAX,
        pb.COLUMN_TYPE_DURATION_MICROS,
        I64_MAX,
    ),
    # bit(10) B'1010000001' -> Bits little-endian; B'0000000000' -> no bytes at all; varbit ''
    (
        "bit(10)",
        {"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "10"}},
        "gQI=",
        pb.COLUMN_TYPE_BYTES,
        b"\x81\x02",
    ),
    (
        "bit(10) zeros",
        {"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "10"}},
        "",
        pb.COLUMN_TYPE_BYTES,
        b"",
    ),
]


@pytest.mark.parametrize(
    ("label", "field", "wire", "ctype", "expected"), VALUE_CASES, ids=[c[0] for c in VALUE_CASES]
)
def test_values_listed_in_issue_21(
    label: str, field: dict[str, Any], wire: Any, ctype: int, expected: Any
) -> None:
    col, _ = decode_one(field, wire)
    assert col.type == ctype
    got = value_of(field, wire)
    if isinstance(expected, list):
        got = ["nan" if isinstance(g, float) and g != g else g for g in got]
    elif expected == "nan":
        got = "nan" if got != got else got
    assert got == expected


def test_numeric_38_18_keeps_precision_and_scale() -> None:
    col, _ = decode_one(
        {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "18", "connect.decimal.precision": "38"},
        },
        unscaled(-(10**38 - 1)),
    )
    assert (col.precision, col.scale) == (38, 18)
    assert (
        value_of(
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "18", "connect.decimal.precision": "38"},
            },
            unscaled(-(10**38 - 1)),
        )
        == "-99999999999999999999.999999999999999999"
    )
