"""Byte layout of the log blocks Inlet writes, checked against independently computed bytes and
against log files written by Apache Hudi (``../shared/testdata/hudi-tables``).

The expectations here are built with :mod:`struct` and a small block parser written for this test
(not Inlet's reader), from the format as Apache Hudi's ``HoodieLogFormatWriter`` writes it::

    #HUDI# | i64 block length | i32 format version | i32 block type | header |
    i64 content length | content | footer | i64 total block length

where the block length counts every byte after itself (trailer included) and the trailer counts
every byte of the block before itself (magic included).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable
from inlet.core.config import TableType
from inlet.core.file_group.reader import BlockFilter
from inlet.core.file_group.view import LogFile
from inlet.core.index.simple import LogKeyCache
from inlet.core.log import writer as lw
from inlet.core.log.blocks import BlockType, DeleteRecord, HeaderKey
from inlet.core.schema import META_COLUMNS, from_avro_schema, meta_schema, to_avro_schema
from inlet.core.storage import Storage

TESTDATA = Path(__file__).resolve().parents[4].parent / "shared" / "testdata" / "hudi-tables"

V9_TABLE = "sample_table_mor_avro_v9_txns_simple_meta"
V9_DATA_LOG = (
    "v9_txns_simple_meta/region=us/.3e93c8a9-fda0-4e8a-91dc-b4ade7dab76d-0_20260307162604102.log.1_0-52-126"
)
V9_DELETE_LOG = (
    "v9_txns_simple_meta/region=us/.3e93c8a9-fda0-4e8a-91dc-b4ade7dab76d-0_20260307162606034.log.1_0-78-180"
)
V6_TRIPS_TABLE = "quickstart_trips_table_mor_avro_v6_trips_8i3d"
V6_TRIPS_DELETE_LOG = (
    "v6_trips_8i3d/city=san_francisco/.6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_20250618054711154.log.1_0-26-85"
)
V6_ROLLBACK_TABLE = "sample_table_mor_parquet_v6_nonpartitioned_rollback"
V6_PARQUET_LOG = (
    "v6_nonpartitioned_rollback/.0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0_20250126040823628.log.1_0-33-43"
)
V6_ROLLBACK_LOG = (
    "v6_nonpartitioned_rollback/.0712b9f9-d2d5-4cae-bcf4-8fd7146af503-0_20250126040823628.log.2_1-0-1"
)

needs_testdata = pytest.mark.skipif(not TESTDATA.is_dir(), reason="Apache Hudi test tables not available")


# ------------------------------------------------------------------------------ an independent parser


def parse_blocks(data: bytes) -> list[dict[str, Any]]:
    """Every block of a log file: its fields, and the lengths as stored."""
    out = []
    pos = 0
    while pos < len(data):
        assert data[pos : pos + 6] == b"#HUDI#", f"no magic at {pos}"
        (block_length,) = struct.unpack_from(">q", data, pos + 6)
        version, btype, n = struct.unpack_from(">iii", data, pos + 14)
        p = pos + 26
        header = {}
        for _ in range(n):
            key, size = struct.unpack_from(">ii", data, p)
            header[key] = data[p + 8 : p + 8 + size].decode("utf-8")
            p += 8 + size
        (content_length,) = struct.unpack_from(">q", data, p)
        content = data[p + 8 : p + 8 + content_length]
        p += 8 + content_length
        (nf,) = struct.unpack_from(">i", data, p)
        p += 4
        footer = {}
        for _ in range(nf):
            key, size = struct.unpack_from(">ii", data, p)
            footer[key] = data[p + 8 : p + 8 + size].decode("utf-8")
            p += 8 + size
        (total,) = struct.unpack_from(">q", data, p)
        end = p + 8
        out.append(
            {
                "offset": pos,
                "block_length": block_length,
                "version": version,
                "type": btype,
                "header": header,
                "content": content,
                "footer": footer,
                "total": total,
                "end": end,
            }
        )
        pos = end
    return out


def check_lengths(block: dict[str, Any]) -> None:
    size = block["end"] - block["offset"]
    assert block["block_length"] == size - 6 - 8, "block length = every byte after the length field"
    assert block["total"] == size - 8, "trailer = every byte of the block before the trailer"


def member(table: str, name: str) -> bytes:
    with zipfile.ZipFile(TESTDATA / f"{table}.zip") as zf:
        return zf.read(name)


def canonical(block: dict[str, Any]) -> tuple[Any, ...]:
    return (block["version"], block["type"], block["header"], block["content"], block["footer"])


# ------------------------------------------------------------------------------ framing


def test_block_framing_is_computed_independently() -> None:
    header = {HeaderKey.SCHEMA: "s\u00e9", HeaderKey.INSTANT_TIME: "20250101000000000"}
    content = b"\x00\x01\x02"
    block = lw.encode_block(BlockType.AVRO_DATA, header, content)
    # header entries in key order: INSTANT_TIME (0), then SCHEMA (2) with its UTF-8 length (3 bytes)
    head = struct.pack(">i", 2)
    head += struct.pack(">ii", 0, 17) + b"20250101000000000"
    head += struct.pack(">ii", 2, 3) + "s\u00e9".encode()
    body = struct.pack(">ii", 1, 3) + head + struct.pack(">q", 3) + content + struct.pack(">i", 0)
    expected = b"#HUDI#" + struct.pack(">q", len(body) + 8) + body + struct.pack(">q", 6 + 8 + len(body))
    assert block == expected
    [parsed] = parse_blocks(block)
    check_lengths(parsed)
    assert parsed["header"] == {0: "20250101000000000", 2: "s\u00e9"}


def test_footer_is_written_and_counted() -> None:
    block = lw.encode_block(
        BlockType.COMMAND, {HeaderKey.INSTANT_TIME: "1"}, b"", {HeaderKey.BLOCK_IDENTIFIER: "x"}
    )
    [parsed] = parse_blocks(block)
    check_lengths(parsed)
    assert parsed["footer"] == {int(HeaderKey.BLOCK_IDENTIFIER): "x"}


def test_rollback_command_block() -> None:
    block = lw.rollback_block("20250126040936578", "20250126040826878")
    header = struct.pack(">i", 3)
    for key, value in ((0, "20250126040936578"), (1, "20250126040826878"), (3, "0")):
        header += struct.pack(">ii", key, len(value)) + value.encode()
    body = struct.pack(">ii", 1, 0) + header + struct.pack(">q", 0) + struct.pack(">i", 0)
    assert block == b"#HUDI#" + struct.pack(">q", len(body) + 8) + body + struct.pack(">q", 14 + len(body))


@needs_testdata
def test_rollback_command_block_matches_apache_hudi() -> None:
    real = member(V6_ROLLBACK_TABLE, V6_ROLLBACK_LOG)
    [theirs] = parse_blocks(real)
    check_lengths(theirs)
    ours_bytes = lw.rollback_block(theirs["header"][0], theirs["header"][1])
    [ours] = parse_blocks(ours_bytes)
    assert canonical(ours) == canonical(theirs)
    assert len(ours_bytes) == len(real)  # same bytes, header entries in another order


# ------------------------------------------------------------------------------ delete blocks


@needs_testdata
@pytest.mark.parametrize(
    ("table", "path"), [(V9_TABLE, V9_DELETE_LOG), (V6_TRIPS_TABLE, V6_TRIPS_DELETE_LOG)], ids=["v9", "v6"]
)
def test_delete_block_is_byte_identical_to_apache_hudi(table: str, path: str) -> None:
    """Deletes of Hudi's delete operation: IntWrapper(0) ordering values, byte for byte."""
    real = member(table, path)
    [theirs] = parse_blocks(real)
    check_lengths(theirs)
    assert theirs["type"] == BlockType.DELETE
    # decode their keys with Hudi's own schema (written out by hand below), then re-encode
    decoded = decode_delete_content(theirs["content"])
    assert all(d[2] == ("org.apache.hudi.avro.model.IntWrapper", {"value": 0}) for d in decoded)
    deletes = [DeleteRecord(k, p, None) for k, p, _ in decoded]
    assert lw.encode_delete_records(deletes) == theirs["content"]
    ours_bytes = lw.delete_block(deletes, theirs["header"][0], theirs["header"][2])
    [ours] = parse_blocks(ours_bytes)
    check_lengths(ours)
    assert canonical(ours) == canonical(theirs)
    assert len(ours_bytes) == len(real)


def test_delete_content_layout() -> None:
    content = lw.encode_delete_records([DeleteRecord("k1", "p", None), DeleteRecord("k2", "", None)])
    datum = (
        b"\x04"  # one array block of 2 records
        + b"\x02\x04k1\x02\x02p\x04\x00"  # key, partition, IntWrapper(0)
        + b"\x02\x04k2\x02\x00\x04\x00"
        + b"\x00"  # end of array
    )
    assert content == struct.pack(">ii", 3, len(datum)) + datum
    assert lw.encode_delete_records([]) == struct.pack(">ii", 3, 1) + b"\x00"


# Apache Hudi 1.0's HoodieDeleteRecordList (hudi-common/src/main/avro/HoodieDeleteRecordList.avsc),
# with the wrapper records of HoodieMetadata.avsc inlined: written out here from Hudi's schema files.
def _wrapper(name: str, typ: Any) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "namespace": "org.apache.hudi.avro.model",
        "fields": [{"name": "value", "type": typ}],
    }


HUDI_DELETE_LIST = {
    "type": "record",
    "name": "HoodieDeleteRecordList",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {
            "name": "deleteRecordList",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieDeleteRecord",
                    "fields": [
                        {"name": "recordKey", "type": ["null", "string"], "default": None},
                        {"name": "partitionPath", "type": ["null", "string"], "default": None},
                        {
                            "name": "orderingVal",
                            "type": [
                                "null",
                                _wrapper("BooleanWrapper", "boolean"),
                                _wrapper("IntWrapper", "int"),
                                _wrapper("LongWrapper", "long"),
                                _wrapper("FloatWrapper", "float"),
                                _wrapper("DoubleWrapper", "double"),
                                _wrapper("BytesWrapper", "bytes"),
                                _wrapper("StringWrapper", "string"),
                                _wrapper("DateWrapper", "int"),
                                _wrapper(
                                    "DecimalWrapper",
                                    {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 15},
                                ),
                                _wrapper("TimeMicrosWrapper", {"type": "long", "logicalType": "time-micros"}),
                                _wrapper("TimestampMicrosWrapper", "long"),
                            ],
                            "default": None,
                        },
                    ],
                },
            },
        }
    ],
}


def decode_delete_content(content: bytes) -> list[tuple[str, str, Any]]:
    version, size = struct.unpack_from(">ii", content, 0)
    assert version == 3 and size == len(content) - 8
    buf = io.BytesIO(content[8:])
    rec = fastavro.schemaless_reader(
        buf, fastavro.parse_schema(HUDI_DELETE_LIST), None, return_record_name=True
    )
    assert buf.tell() == size
    return [(d["recordKey"], d["partitionPath"], d["orderingVal"]) for d in rec["deleteRecordList"]]


@pytest.mark.parametrize(
    ("value", "typ", "wrapper", "expected"),
    [
        (None, None, "IntWrapper", 0),
        (7, pa.int64(), "LongWrapper", 7),
        (-(2**40), pa.int64(), "LongWrapper", -(2**40)),
        (7, pa.int32(), "IntWrapper", 7),
        (True, pa.bool_(), "BooleanWrapper", True),
        (1.5, pa.float32(), "FloatWrapper", 1.5),
        (2.25, pa.float64(), "DoubleWrapper", 2.25),
        ("b", pa.string(), "StringWrapper", "b"),
        (b"\x00\xff", pa.binary(), "BytesWrapper", b"\x00\xff"),
        (dt.date(2024, 1, 2), pa.date32(), "DateWrapper", (dt.date(2024, 1, 2) - dt.date(1970, 1, 1)).days),
        (decimal.Decimal("-12.34"), pa.decimal128(10, 2), "DecimalWrapper", decimal.Decimal("-12.34")),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
            pa.timestamp("us", tz="UTC"),
            "LongWrapper",
            1704164645000006,
        ),
        (dt.datetime(2024, 1, 2, tzinfo=dt.UTC), pa.timestamp("ms", tz="UTC"), "LongWrapper", 1704153600000),
    ],
)
def test_ordering_values_are_wrapped_as_apache_hudi_wraps_them(
    value: Any, typ: pa.DataType | None, wrapper: str, expected: Any
) -> None:
    content = lw.encode_delete_records([DeleteRecord("k", "p", value)], typ)
    [(key, part, ordering)] = decode_delete_content(content)
    assert (key, part) == ("k", "p")
    name, record = ordering
    assert name == f"org.apache.hudi.avro.model.{wrapper}"
    assert record == {"value": expected}


def test_decimal_wrapper_bytes_are_the_unscaled_value_at_scale_15() -> None:
    encoded = lw.encode_ordering_value(decimal.Decimal("1.5"), pa.decimal128(5, 1))
    unscaled = 15 * 10**14  # 1.5 at scale 15
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    assert encoded == bytes([2 * 9]) + bytes([2 * len(raw)]) + raw  # branch 9, then Avro bytes
    negative = lw.encode_ordering_value(decimal.Decimal("-1"), pa.decimal128(5, 0))
    raw = (-(10**15)).to_bytes(7, "big", signed=True)
    assert negative == bytes([18, 14]) + raw


def test_long_wrapper_varint() -> None:
    assert lw.encode_ordering_value(7, pa.int64()) == b"\x06\x0e"  # branch 3, zig-zag 14
    assert lw.encode_ordering_value(-1, pa.int64()) == b"\x06\x01"
    assert lw.encode_ordering_value(64, pa.int64()) == b"\x06\x80\x01"


# ------------------------------------------------------------------------------ data blocks


@needs_testdata
def test_avro_data_block_is_byte_identical_to_apache_hudi() -> None:
    """An update written by Apache Hudi 1.1, re-encoded from its decoded record, byte for byte."""
    real = member(V9_TABLE, V9_DATA_LOG)
    [theirs] = parse_blocks(real)
    check_lengths(theirs)
    assert theirs["type"] == BlockType.AVRO_DATA
    schema_json = theirs["header"][2]
    content = theirs["content"]
    version, count = struct.unpack_from(">ii", content, 0)
    assert (version, count) == (3, 1)
    (size,) = struct.unpack_from(">i", content, 8)
    record = fastavro.schemaless_reader(
        io.BytesIO(content[12 : 12 + size]), fastavro.parse_schema(json.loads(schema_json)), None
    )
    arrow_schema = pa.schema(list(meta_schema()) + list(from_avro_schema(schema_json)))
    table = pa.Table.from_pylist([record], schema=arrow_schema)
    assert lw.encode_avro_records(table, schema_json) == content
    ours_bytes = lw.data_block(table, theirs["header"][0], schema_json)
    [ours] = parse_blocks(ours_bytes)
    check_lengths(ours)
    assert canonical(ours) == canonical(theirs)
    assert len(ours_bytes) == len(real)


def _typed_columns(n: int, seed: int) -> dict[str, pa.Array]:
    """Columns of every type a table can hold, with edge values, for the columnar encoders."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    edges = [0, 1, -1, 63, 64, -64, -65, 127, 128, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 8191, 8192]
    ints[: len(edges)] = edges
    small = rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32)
    words = ["", "a", "é", "東京", "😀", "x" * 200, "y" * 20000, "\x00nul"]
    strings = pa.array([words[i % len(words)] + str(i) for i in range(n)])
    floats = rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n)
    floats[:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    unscaled = rng.integers(-(10**17), 10**17, n)
    with np.errstate(over="ignore"):  # doubles beyond float32 become infinities
        singles = floats.astype(np.float32)
    return {
        "i64": pa.array(ints),
        "i32": pa.array(small),
        "s": strings,
        "b": strings.cast(pa.binary()),
        "f64": pa.array(floats),
        "f32": pa.array(singles),
        "bool": pa.array(rng.random(n) < 0.5),
        "d": pa.array(rng.integers(-100000, 100000, n).astype(np.int32)).cast(pa.date32()),
        "tsu": pa.array(ints // 10**6).cast(pa.timestamp("us", tz="UTC")),
        "tsm": pa.array(ints // 10**9).cast(pa.timestamp("ms", tz="UTC")),
        "local": pa.array(ints // 10**6).cast(pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(int(v)).scaleb(-4) for v in unscaled], pa.decimal128(22, 4)),
        "dec2": pa.array([decimal.Decimal(int(v) % 10**7).scaleb(-2) for v in unscaled], pa.decimal128(7, 2)),
        "list": pa.array([[i, None, 3] for i in range(n)], pa.list_(pa.int64())),
        "map": pa.array([[("k", i / 3)] for i in range(n)], pa.map_(pa.string(), pa.float64())),
        "struct": pa.array(
            [{"a": i, "b": str(i)} for i in range(n)], pa.struct([("a", pa.int32()), ("b", pa.string())])
        ),
    }


@pytest.mark.parametrize("nulls", [False, True])
def test_columnar_avro_encoding_equals_fastavro_record_by_record(nulls: bool) -> None:
    n = 600
    columns = _typed_columns(n, 7)
    if nulls:
        mask = pa.array(np.random.default_rng(3).random(n) < 0.3)
        columns = {c: pc.if_else(mask, pa.nulls(n, a.type), a) for c, a in columns.items()}
    table = pa.table(columns)
    schema_json = to_avro_schema(table.schema, "t")  # local-timestamp-micros for the naive column
    assert '"local-timestamp-micros"' in schema_json and '"timestamp-millis"' in schema_json
    for part in (table, table.slice(7, 300), table.slice(0, 0)):
        assert lw.encode_avro_records(part, schema_json) == lw.encode_avro_records_rowwise(part, schema_json)
    # unions with null second, and required fields
    schema_json = json.dumps(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "i64", "type": "long"},
                {"name": "s", "type": ["string", "null"]},
                {"name": "list", "type": {"type": "array", "items": ["null", "long"]}},
            ],
        }
    )
    plain = pa.table(_typed_columns(n, 8)).select(["i64", "s", "list"])
    assert lw.encode_avro_records(plain, schema_json) == lw.encode_avro_records_rowwise(plain, schema_json)


def test_columnar_avro_encoding_falls_back_for_shared_named_types_and_refuses_nulls() -> None:
    point = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "long"}]}
    schema_json = json.dumps(
        {"type": "record", "name": "r", "fields": [{"name": "a", "type": point}, {"name": "b", "type": "P"}]}
    )
    table = pa.table({"a": [{"x": 1}, {"x": -2}], "b": [{"x": 3}, {"x": 4}]})
    assert lw.encode_avro_records(table, schema_json) == lw.encode_avro_records_rowwise(table, schema_json)
    required = json.dumps({"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]})
    with pytest.raises((TypeError, ValueError)):
        lw.encode_avro_records(pa.table({"a": pa.array([1, None], pa.int64())}), required)


@pytest.mark.parametrize(
    "column", ["i64", "i32", "s", "b", "f64", "f32", "bool", "d", "tsu", "tsm", "local", "dec", None]
)
def test_columnar_delete_encoding_equals_record_by_record(column: str | None) -> None:
    n = 300
    columns = _typed_columns(n, 5)
    keys = pa.array([f"k{i}" if i % 50 else "東京" for i in range(n)])
    partitions = pa.array([f"p={i % 3}" if i % 7 else "" for i in range(n)])
    values = None if column is None else columns[column]
    if column == "tsm":
        values = pa.array(np.arange(n) * 1000).cast(pa.timestamp("ms", tz="UTC"))
    want = lw.encode_delete_records(
        [
            DeleteRecord(k, p, v)
            for k, p, v in zip(
                keys.to_pylist(),
                partitions.to_pylist(),
                [None] * n if values is None else values.to_pylist(),
                strict=True,
            )
        ],
        None if values is None else values.type,
    )
    assert lw.encode_delete_columns(keys, partitions, values) == want
    assert lw.encode_delete_columns(keys.slice(0, 0), partitions.slice(0, 0), None) == (
        lw.encode_delete_records([])
    )
    seconds = pa.array([0, 5, -3], pa.int64()).cast(pa.timestamp("s"))
    expected = lw.encode_delete_records(
        [DeleteRecord("k", "p", v) for v in seconds.to_pylist()], seconds.type
    )
    assert lw.encode_delete_columns(pa.array(["k"] * 3), pa.array(["p"] * 3), seconds) == expected


def test_avro_data_block_layout() -> None:
    schema_json = json.dumps(
        {
            "type": "record",
            "name": "r",
            "fields": [
                {"name": "_hoodie_record_key", "type": ["null", "string"]},
                {"name": "m", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
            ],
        }
    )
    table = pa.table(
        {
            "_hoodie_record_key": pa.array(["a", None]),
            "m": pa.array([[("x", 1)], None], pa.map_(pa.string(), pa.int64())),
        }
    )
    content = lw.encode_avro_records(table, schema_json)
    rec1 = b"\x02\x02a" + b"\x02" + b"\x02" + b"\x02x\x02\x02" + b"\x00"  # key; map of one entry x -> 1
    rec2 = b"\x00" + b"\x00"
    assert (
        content
        == struct.pack(">ii", 3, 2)
        + struct.pack(">i", len(rec1))
        + rec1
        + struct.pack(">i", len(rec2))
        + rec2
    )


@needs_testdata
def test_parquet_data_block_has_the_structure_of_apache_hudis() -> None:
    [theirs] = parse_blocks(member(V6_ROLLBACK_TABLE, V6_PARQUET_LOG))
    check_lengths(theirs)
    assert theirs["type"] == BlockType.PARQUET_DATA
    assert theirs["content"][:4] == b"PAR1" and theirs["content"][-4:] == b"PAR1"  # a whole file, no prefix
    schema_json = json.dumps(
        {
            "type": "record",
            "name": "r",
            "fields": [{"name": c, "type": ["null", "string"]} for c in META_COLUMNS],
        }
    )
    table = pa.table({c: pa.array(["v"], pa.string()) for c in META_COLUMNS})
    [ours] = parse_blocks(lw.data_block(table, "20250101000000000", schema_json, lw.DataBlockFormat.PARQUET))
    check_lengths(ours)
    assert ours["type"] == theirs["type"] and set(ours["header"]) == set(theirs["header"]) == {0, 2}
    assert ours["footer"] == theirs["footer"] == {}
    content = ours["content"]
    assert content[:4] == b"PAR1" and content[-4:] == b"PAR1"
    pf = pq.ParquetFile(pa.BufferReader(content))
    assert pf.read().to_pylist() == table.to_pylist()
    assert pf.schema_arrow.metadata[b"parquet.avro.schema"] == schema_json.encode()


def test_simple_index_reads_the_keys_of_the_blocks_that_count(tmp_path: Path) -> None:
    """The MOR simple index reads a log's keys through the log reader and counts blocks as the
    merged reader does: committed, not rolled back; a log it wrote itself is never decoded."""
    schema_json = json.dumps(
        {
            "type": "record",
            "name": "r",
            "fields": [{"name": c, "type": ["null", "string"]} for c in META_COLUMNS],
        }
    )
    table = pa.table(
        {c: pa.array(["1", "2"] if c == "_hoodie_record_key" else ["x", "y"]) for c in META_COLUMNS}
    )
    blocks = [
        lw.data_block(table, "t1", schema_json),
        lw.data_block(table.slice(0, 1), "t2", schema_json, lw.DataBlockFormat.PARQUET),
        lw.delete_block([DeleteRecord("3", "p", 5)], "t3", schema_json, pa.int64()),
        lw.delete_block([DeleteRecord("4", "p", None)], "t4"),
        lw.delete_block([DeleteRecord("5", "p", None)], "t5"),
        lw.delete_block([DeleteRecord("6", "p", None)], "t7"),
        lw.rollback_block("t6", "t5"),
    ]
    name = ".f1-0_20250101000000000.log.1_0-0-0"
    storage = Storage(str(tmp_path))
    size = lw.write_log_file(storage, name, blocks)
    lf = LogFile.parse(name, size)
    assert lf is not None
    committed = BlockFilter(lambda instant: instant != "t7")
    read = LogKeyCache().keys(storage, [lf], committed)
    assert read.to_pylist() == ["1", "2", "1", "3", "4"]

    written = LogKeyCache()
    block_keys = [pa.array(k) for k in (["1", "2"], ["1"], ["3"], ["4"], ["5"], ["6"])]
    written.put(storage, name, b"".join(blocks), block_keys)
    (tmp_path / name).write_bytes(b"not read again")  # the cache is keyed by path and size
    assert written.keys(storage, [LogFile.parse(name, size)], committed).equals(read)  # type: ignore[list-item]


def test_log_key_cache_drops_the_least_recently_used_files(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    cache = LogKeyCache(max_bytes=1)
    everything = BlockFilter(lambda instant: True)
    files = []
    for i in range(3):
        name = f".f{i}-0_20250101000000000.log.1_0-0-0"
        block = lw.delete_block([DeleteRecord(str(i), "p", None)], "t1")
        size = lw.write_log_file(storage, name, [block])
        cache.put(storage, name, block, [pa.array([str(i)])])
        files.append(LogFile.parse(name, size))
    (tmp_path / files[0].name).unlink()  # type: ignore[union-attr]
    assert cache.keys(storage, files[2:], everything).to_pylist() == ["2"]  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        cache.keys(storage, files[:1], everything)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ files written by a MOR write


def test_mor_upsert_writes_one_log_file_per_file_group_with_hudis_write_stats(tmp_path: Path) -> None:
    t = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        table_type="mor",
    )
    assert t.table_type is TableType.MERGE_ON_READ
    first = t.write(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "ts": [1, 1, 1], "v": ["x", "y", "z"]}))
    assert first.action == "deltacommit"
    assert all(s.path.endswith(".parquet") for s in first.metadata.write_stats())
    data = pa.table(
        {
            "id": [1, 2, 3],
            "p": ["a", "a", "b"],
            "ts": [2, 2, 2],
            "v": ["x2", "y2", "z2"],
            "_hoodie_is_deleted": [False, True, False],
        }
    )
    second = t.write(data, options={"hoodie.parquet.small.file.limit": "0"})
    assert second.action == "deltacommit"
    stats = sorted(second.metadata.write_stats(), key=lambda s: s.partition_path)
    assert [s.partition_path for s in stats] == ["a", "b"]
    for s, (writes, deletes) in zip(stats, [(1, 1), (1, 0)], strict=True):
        lf = LogFile.parse(s.path)
        assert lf is not None
        assert lf.instant_time == second.instant_time and lf.version == 1
        assert s.path == f"{s.partition_path}/{lf.name}"
        assert (s.prev_commit, s.base_file, s.log_files) == (second.instant_time, "", [lf.name])
        assert (s.log_version, s.log_offset) == (1, 0)
        assert (s.num_writes, s.num_update_writes, s.num_inserts, s.num_deletes) == (
            writes,
            writes,
            0,
            deletes,
        )
        assert (s.total_log_records, s.total_log_blocks) == (0, 0)  # set by compaction, not appends
        raw = (tmp_path / "t" / s.path).read_bytes()
        assert s.file_size_in_bytes == s.total_write_bytes == len(raw)
        blocks = parse_blocks(raw)
        assert [b["type"] for b in blocks] == ([BlockType.AVRO_DATA, BlockType.DELETE][: 1 + deletes])
        for b in blocks:
            check_lengths(b)
            assert b["header"][0] == second.instant_time
            fields = json.loads(b["header"][2])["fields"]
            assert [f["name"] for f in fields][:5] == list(META_COLUMNS)
        # the data block's records carry the file id as _hoodie_file_name
        content = blocks[0]["content"]
        (size,) = struct.unpack_from(">i", content, 8)
        rec = fastavro.schemaless_reader(
            io.BytesIO(content[12 : 12 + size]),
            fastavro.parse_schema(json.loads(blocks[0]["header"][2])),
            None,
        )
        assert rec["_hoodie_file_name"] == lf.file_id
        assert rec["_hoodie_commit_time"] == second.instant_time
        if deletes:
            [(key, part, ordering)] = decode_delete_content(blocks[1]["content"])
            assert (key, part, ordering) == (
                "2",
                "a",
                ("org.apache.hudi.avro.model.LongWrapper", {"value": 2}),
            )
    # the commit metadata records the same (decoded with Hudi's HoodieCommitMetadata schema)
    completed = [i for i in t.timeline.completed() if i.time == second.instant_time]
    assert completed[0].action == "deltacommit"
    stored = t.timeline.commit_metadata(completed[0]).write_stats()
    assert sorted(s.path for s in stored) == [s.path for s in stats]


def test_delete_operation_writes_default_ordering_values(tmp_path: Path) -> None:
    t = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type="mor"
    )
    t.write(pa.table({"id": [1, 2], "ts": [5, 5]}))
    result = t.delete(pa.table({"id": [2, 9]}))
    [stat] = result.metadata.write_stats()
    assert (stat.num_deletes, stat.num_writes) == (1, 0)  # 9 is not in the table: nothing to delete
    [block] = parse_blocks((tmp_path / "t" / stat.path).read_bytes())
    assert decode_delete_content(block["content"]) == [
        ("2", "", ("org.apache.hudi.avro.model.IntWrapper", {"value": 0}))
    ]


def test_soft_delete_without_ordering_value_is_refused_on_mor(tmp_path: Path) -> None:
    from inlet.core.errors import InvalidInputError

    t = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type="mor"
    )
    t.write(pa.table({"id": [1], "ts": [5]}))
    with pytest.raises(InvalidInputError, match="ordering field"):
        t.write(pa.table({"id": [1], "ts": pa.array([None], pa.int64()), "_hoodie_is_deleted": [True]}))
    assert len(t.timeline.completed()) == 1 and not t.timeline.pending()


def test_bucket_index_under_nbcc_uses_the_fixed_file_ids(tmp_path: Path) -> None:
    t = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        ordering_field="ts",
        table_type="mor",
        index="bucket",
        buckets=2,
        extra_properties={"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"},
    )
    result = t.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1]}))
    ids = sorted(s.file_id for s in result.metadata.write_stats())
    assert ids == [f"{b:08d}-0000-0000-0000-000000000000-0" for b in range(2)]
    assert all(s.base_file == "" and s.num_inserts == s.num_writes for s in result.metadata.write_stats())
    again = t.write(pa.table({"id": [1, 2, 3, 4], "ts": [2, 2, 2, 2]}))
    assert sorted(s.file_id for s in again.metadata.write_stats()) == ids
    assert all(s.num_update_writes == s.num_writes for s in again.metadata.write_stats())


def test_a_failed_deltacommit_is_rolled_back_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = HudiTable.create(
        str(tmp_path / "t"), name="t", record_key="id", ordering_field="ts", table_type="mor"
    )
    t.write(pa.table({"id": [1, 2], "ts": [1, 1]}))
    real_write = lw.write_log_file
    written: list[str] = []

    def write_then_fail(storage: Any, path: str, blocks: Any) -> int:
        written.append(path)
        real_write(storage, path, blocks)
        raise OSError("disk full")

    monkeypatch.setattr(lw, "write_log_file", write_then_fail)
    with pytest.raises(OSError, match="disk full"):
        t.write(pa.table({"id": [1], "ts": [2]}))
    assert written and not (tmp_path / "t" / written[0]).exists()
    [rb] = t.timeline.completed(["rollback"])
    assert not t.timeline.pending() and [i.action for i in t.timeline.completed_writes()] == ["deltacommit"]
    assert rb.time > t.timeline.completed_writes()[0].time


def test_simple_index_finds_keys_held_only_in_log_files(tmp_path: Path, kit: Any) -> None:
    """Keys written to log-only file groups (bucket index) are found by the simple index, so an
    upsert appends to their file group instead of inserting a duplicate into a new base file."""
    from inlet.core.table import properties

    path = str(tmp_path / "t")
    t = HudiTable.create(
        path, name="t", record_key="id", ordering_field="ts", table_type="mor", index="bucket", buckets=2
    )
    t.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1], "v": ["a"] * 4}))
    props = dict(t.props)
    props["hoodie.index.type"] = "SIMPLE"
    properties.write_properties(t.storage, props)
    t = HudiTable.open(path)
    result = t.write(pa.table({"id": [1, 3, 9], "ts": [2, 2, 2], "v": ["b"] * 3}))
    stats = result.metadata.write_stats()
    logs = [s for s in stats if LogFile.parse(s.path)]
    assert logs and sum(s.num_update_writes for s in logs) == 2  # ids 1 and 3, in their buckets' logs
    assert [s.num_inserts for s in stats if s.path.endswith(".parquet")] == [1]  # id 9
    got = kit.read_hudi(path, "2").select(["id", "ts", "v"]).to_pylist()
    assert sorted((r["id"], r["ts"], r["v"]) for r in got) == [
        (1, 2, "b"),
        (2, 1, "a"),
        (3, 2, "b"),
        (4, 1, "a"),
        (9, 2, "b"),
    ]
