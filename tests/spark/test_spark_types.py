"""Spark <-> Arrow <-> Avro type mapping (``inlet.core.spark.types``) and refusal of unwritable types.

Expected Avro forms are written by hand from Apache Hudi's Spark-to-Avro conversion
(``AvroConversionUtils`` / ``SchemaConverters``: decimals as named ``fixed``, timestamps as
``timestamp-micros``, dates as ``date``, byte/short as ``int``, nullable unions everywhere), not
taken from the code under test. The Arrow side is checked against what a real Spark session
produces for the same DataFrame.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
    CharType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    VariantType,
    YearMonthIntervalType,
)

from inlet.core.errors import SchemaError
from inlet.core.spark import types as T


def schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(n, t, True) for n, t in fields])


SUPPORTED = schema(
    ("b", BooleanType()),
    ("y", ByteType()),
    ("s", ShortType()),
    ("i", IntegerType()),
    ("l", LongType()),
    ("f", FloatType()),
    ("d", DoubleType()),
    ("dec", DecimalType(10, 2)),
    ("str", StringType()),
    ("ch", CharType(3)),
    ("vc", VarcharType(10)),
    ("bin", BinaryType()),
    ("day", DateType()),
    ("ts", TimestampType()),
    ("arr", ArrayType(LongType())),
    ("m", MapType(StringType(), DoubleType())),
    ("st", StructType([StructField("x", IntegerType()), StructField("tags", ArrayType(StringType()))])),
    ("n", NullType()),
)


# ---------------------------------------------------------------------- refusals


def test_supported_types_pass_the_check() -> None:
    T.check_writable(SUPPORTED)
    assert T.unwritable_columns(SUPPORTED) == []


@pytest.mark.parametrize(
    ("bad", "path", "why"),
    [
        (schema(("t", TimestampNTZType())), "t", "UTC instants"),
        (schema(("iv", CalendarIntervalType())), "iv", "intervals"),
        (schema(("dt", DayTimeIntervalType())), "dt", "intervals"),
        (schema(("ym", YearMonthIntervalType())), "ym", "intervals"),
        (schema(("v", VariantType())), "v", "variant"),
        (schema(("m", MapType(IntegerType(), StringType()))), "m.key", "string keys"),
        (schema(("a", ArrayType(TimestampNTZType()))), "a.element", "UTC instants"),
        (schema(("m", MapType(StringType(), DayTimeIntervalType()))), "m.value", "intervals"),
        (
            schema(
                ("s", StructType([StructField("ok", LongType()), StructField("in", CalendarIntervalType())]))
            ),
            "s.in",
            "intervals",
        ),
        (
            schema(("s", StructType([StructField("x", LongType()), StructField("x", LongType())]))),
            "s.x",
            "twice",
        ),
        (schema(("a", LongType()), ("a", StringType())), "a", "twice"),
    ],
)
def test_unwritable_types_are_refused_naming_the_column(bad: StructType, path: str, why: str) -> None:
    with pytest.raises(SchemaError) as err:
        T.check_writable(bad)
    message = str(err.value)
    assert f"column {path!r}" in message and why in message
    with pytest.raises(SchemaError):
        T.to_table_arrow_schema(bad)


def test_every_refusal_is_listed_at_once() -> None:
    bad = schema(("ok", LongType()), ("t", TimestampNTZType()), ("iv", CalendarIntervalType()))
    assert [c for c, _, _ in T.unwritable_columns(bad)] == ["t", "iv"]


# ---------------------------------------------------------------------- Spark -> Arrow


def test_arrow_schema_matches_what_spark_produces(spark: SparkSession) -> None:
    df = spark.sql(
        """SELECT true AS b, CAST(1 AS TINYINT) AS y, CAST(2 AS SMALLINT) AS s, 3 AS i, 4L AS l,
                  CAST(1.5 AS FLOAT) AS f, 2.5D AS d, CAST(12.34 AS DECIMAL(10, 2)) AS dec, 'x' AS str,
                  X'0102' AS bin, DATE'2024-02-29' AS day, TIMESTAMP'2024-01-01 12:00:00' AS ts,
                  array(1L, 2L) AS arr, map('k', 1.0D) AS m, named_struct('x', 1, 'tags', array('a')) AS st"""
    )
    spark_arrow = df.toArrow().schema
    mine = T.to_arrow_schema(df.schema)
    assert mine.names == spark_arrow.names
    for name in mine.names:
        got, want = mine.field(name).type, spark_arrow.field(name).type
        if pa.types.is_timestamp(want):
            # the same instants; only the zone label may differ (Spark labels the session zone)
            assert got == pa.timestamp("us", tz="UTC") and want.unit == "us" and want.tz is not None
        else:
            assert got == want, name


def test_table_arrow_schema_is_what_hudi_stores() -> None:
    stored = T.to_table_arrow_schema(SUPPORTED)
    types = {f.name: f.type for f in stored}
    assert types["y"] == pa.int32() and types["s"] == pa.int32()  # Avro has no byte / short
    assert types["dec"] == pa.decimal128(10, 2)
    assert types["ch"] == pa.string() and types["vc"] == pa.string()
    assert types["ts"] == pa.timestamp("us", tz="UTC")
    assert types["day"] == pa.date32()
    assert types["n"] == pa.string()
    assert all(f.nullable for f in stored)
    with_meta = StructType([StructField("_hoodie_commit_time", StringType()), *SUPPORTED.fields])
    assert T.to_table_arrow_schema(with_meta).names == stored.names  # the writer sets meta columns


# ---------------------------------------------------------------------- Spark -> Avro (Hudi's form)


def _fields(avro_json: str) -> dict[str, Any]:
    rec = json.loads(avro_json)
    assert rec["type"] == "record" and rec["name"] == "trips_record" and rec["namespace"] == "hoodie.trips"
    out = {}
    for f in rec["fields"]:
        assert f["type"][0] == "null" and f.get("default", "missing") is None, f  # nullable, default null
        out[f["name"]] = f["type"][1]
    return out


def test_avro_schema_has_hudis_forms() -> None:
    fields = _fields(T.to_avro_schema_json(SUPPORTED, "trips"))
    assert fields["b"] == "boolean"
    assert fields["y"] == fields["s"] == fields["i"] == "int"
    assert fields["l"] == "long" and fields["f"] == "float" and fields["d"] == "double"
    dec = fields["dec"]
    # DECIMAL(10, 2): 5 bytes hold 10 digits (2^39 - 1 > 10^10 - 1 > 2^31 - 1)
    assert (dec["type"], dec["size"], dec["logicalType"], dec["precision"], dec["scale"]) == (
        "fixed",
        5,
        "decimal",
        10,
        2,
    )
    assert fields["str"] == fields["ch"] == fields["vc"] == "string"
    assert fields["bin"] == "bytes"
    assert fields["day"] == {"type": "int", "logicalType": "date"}
    assert fields["ts"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert fields["arr"] == {"type": "array", "items": ["null", "long"]}
    assert fields["m"] == {"type": "map", "values": ["null", "double"]}
    st = fields["st"]
    assert st["type"] == "record" and [f["name"] for f in st["fields"]] == ["x", "tags"]


# ---------------------------------------------------------------------- Avro / Arrow -> Spark


def _avro(*fields: tuple[str, Any]) -> str:
    return json.dumps(
        {
            "type": "record",
            "name": "t_record",
            "namespace": "hoodie.t",
            "fields": [{"name": n, "type": ["null", t], "default": None} for n, t in fields],
        }
    )


def test_spark_schema_of_apache_hudi_avro_forms() -> None:
    got = T.from_avro_schema_json(
        _avro(
            ("millis", {"type": "long", "logicalType": "timestamp-millis"}),
            ("micros", {"type": "long", "logicalType": "timestamp-micros"}),
            ("local", {"type": "long", "logicalType": "local-timestamp-micros"}),
            ("day", {"type": "int", "logicalType": "date"}),
            (
                "dec",
                {
                    "type": "fixed",
                    "name": "fixed",
                    "size": 9,
                    "logicalType": "decimal",
                    "precision": 20,
                    "scale": 4,
                },
            ),
            ("kind", {"type": "enum", "name": "kind", "symbols": ["A", "B"]}),
            ("id", {"type": "string", "logicalType": "uuid"}),
            ("raw", {"type": "fixed", "name": "raw", "size": 4}),
            ("tags", {"type": "array", "items": "string"}),
            ("attrs", {"type": "map", "values": ["null", "long"]}),
        ),
        meta_columns=True,
    )
    assert got.fieldNames()[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    types = {f.name: f.dataType for f in got.fields}
    assert types["millis"] == TimestampType() and types["micros"] == TimestampType()
    assert types["local"] == TimestampNTZType()
    assert types["day"] == DateType()
    assert types["dec"] == DecimalType(20, 4)
    assert types["kind"] == StringType() and types["id"] == StringType()
    assert types["raw"] == BinaryType()
    assert types["tags"] == ArrayType(StringType(), True)
    assert types["attrs"] == MapType(StringType(), LongType(), True)
    assert all(f.nullable for f in got.fields)


def test_arrow_types_spark_cannot_hold_are_refused() -> None:
    with pytest.raises(SchemaError, match="'big'"):
        T.from_arrow_schema(pa.schema([pa.field("big", pa.decimal256(50, 2))]))
    with pytest.raises(SchemaError, match="'u'"):
        T.from_arrow_schema(pa.schema([pa.field("u", pa.uint64())]))


# ---------------------------------------------------------------------- data


def test_conform_gives_sparks_exact_arrow_layout() -> None:
    target = T.to_arrow_schema(
        schema(
            ("ts", TimestampType()),
            ("tags", ArrayType(LongType())),
            ("m", MapType(StringType(), LongType())),
            ("gone", StringType()),
        )
    )
    moment = dt.datetime(2024, 1, 1, 0, 0, 1, 234000, tzinfo=dt.UTC)
    data = pa.table(
        {
            "m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64())),
            "ts": pa.array([moment], pa.timestamp("ms", tz="UTC")),  # Apache Hudi's timestamp-millis
            "tags": pa.array([[1, 2]], pa.list_(pa.field("array", pa.int64()))),  # parquet-avro's item name
        }
    )
    out = T.conform(data, target)
    assert out.schema.equals(target)  # what PySpark checks before handing batches to the JVM
    assert out.to_pylist() == [{"ts": moment, "tags": [1, 2], "m": [("a", 1)], "gone": None}]
