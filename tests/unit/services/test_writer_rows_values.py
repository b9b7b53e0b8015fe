"""PostgreSQL's edge values, as the real Debezium connector sends them, through the CDC consumer's
decoder into the writer's Arrow rows (``writer.rows.to_arrow``); and a value that does not fit is bad
input naming the table, the column and the value, never a transient error retried as if it could pass.

Wire values were read from the live connector (tests/integration/cdc_consumer/test_decode_live_types.py
checks the same values end to end); expected values are worked out from the SQL literals.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import orjson
import pyarrow as pa
import pytest

from inlet.core.errors import InvalidInputError
from inlet.services.cdc_consumer import Decoder
from inlet.services.writer.rows import Change, RowError, table_rows, to_arrow
from inlet.services.writer.service import _kind

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
I32_MAX, I32_MIN = 2**31 - 1, -(2**31)
DAY_US = 86_400_000_000


def days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01, proleptic Gregorian, astronomical years (400-year cycles of 146097 days
    move any year into Python's date range)."""
    cycles = (year - 2000) // 400
    return (dt.date(year - 400 * cycles, month, day) - dt.date(1970, 1, 1)).days + 146097 * cycles


def decimal_field(scale: int, precision: int | None = None) -> dict[str, Any]:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": params}


FIELDS: dict[str, dict[str, Any]] = {
    "ts": {"type": "int64", "name": "io.debezium.time.MicroTimestamp"},
    "ts0": {"type": "int64", "name": "io.debezium.time.Timestamp"},
    "tstz": {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
    "d": {"type": "int32", "name": "io.debezium.time.Date"},
    "n38": decimal_field(18, 38),
    "nfree": {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "fields": []},
    "n50": decimal_field(10, 50),
    "f4": {"type": "float"},
    "f8": {"type": "double"},
    "fa": {"type": "array", "items": {"type": "double", "optional": True}},
    "ta": {"type": "array", "items": {"type": "string", "optional": True}},
    "tsa": {"type": "array", "items": {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}},
    "jb": {"type": "string", "name": "io.debezium.data.Json"},
    "u": {"type": "string", "name": "io.debezium.data.Uuid"},
    "ba": {"type": "bytes"},
    "e": {"type": "string", "name": "io.debezium.data.Enum", "parameters": {"allowed": 'sad,it\'s "x"'}},
    "iv": {"type": "int64", "name": "io.debezium.time.MicroDuration"},
    "bits": {"type": "bytes", "name": "io.debezium.data.Bits", "parameters": {"length": "10"}},
    "m": decimal_field(2),
}

# the live connector's values for rows 1-3 of the SQL in test_decode_live_types.EDGE_ROWS
ROW_MAX = {
    "ts": 9223372036825200000,  # 'infinity'
    "ts0": 9223372036825200,  # 'infinity'
    "tstz": "infinity",
    "d": -2147472692,  # 'infinity'
    "n38": "CUmw9vACMxPESZBQ3jjzTg==",  # 12345678901234567890.123456789012345678
    "nfree": {"scale": 6, "value": "VHj54iCtsl5NIYCMzbfPb+QOdmw1"},  # 51 digits
    "n50": "CHJ/Y2mq+DyhUCZ0evjH8ZaMBNUV",  # 1234567890123456789012345678901234567890.0123456789
    "f4": "NaN",
    "f8": "Infinity",
    "fa": ["NaN", "Infinity", "-Infinity", 1.5, None],
    "ta": ['say "hi"', None, "it's", "back\\slash", "{braces}", "NULL", "", " sp "],
    "tsa": [1704067200000000, 9223372036825200000],
    "jb": '{"k": "va\\"l", "n": 100, "u": "é", "z": [true, null]}',
    "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
    "ba": "AP9/gA==",
    "e": 'it\'s "x"',
    "iv": I64_MAX,  # '178000000 years': Debezium's long saturates
    "bits": "gQI=",  # B'1010000001'
    "m": "f/////////8=",  # 92233720368547758.07
}
ROW_MIN = {
    "ts": -9223372036832400000,  # '-infinity'
    "ts0": -9223372036832400,
    "tstz": "-infinity",
    "d": -625821272,  # '-infinity' as snapshotted
    "n38": "tMSzV6V5O4X2dd3AAAAAAQ==",  # -99999999999999999999.999999999999999999
    "nfree": None,  # 'NaN': Debezium sends null
    "n50": None,
    "f4": "-Infinity",
    "f8": "NaN",
    "fa": [],
    "ta": [],
    "tsa": None,
    "jb": "[]",
    "u": "00000000-0000-0000-0000-000000000000",
    "ba": "",
    "e": "sad",
    "iv": I64_MIN,
    "bits": "",  # B'0000000000'
    "m": "gAAAAAAAAAA=",  # -92233720368547758.08
}
ROW_FAR = {
    "ts": 253402300800000000,  # '10000-01-01 00:00:00'
    "ts0": -210863520000000,  # '4713-01-01 00:00:00 BC'
    "tstz": "+10000-01-01T00:00:00.000000Z",
    "d": 2145042905,  # '5874897-12-31'
    "nfree": {"scale": 0, "value": "RGw7FfmSZofSxAU0/bVkAAAAAAAA"},  # 1E+50
}


def envelope(row: dict[str, Any], table: str = "edges") -> tuple[bytes, bytes]:
    fields = [{"type": "int32", "optional": False, "field": "id"}]
    fields += [{**f, "optional": True, "field": name} for name, f in FIELDS.items()]
    row_schema = {"type": "struct", "fields": fields, "optional": True, "name": f"srv.public.{table}.Value"}
    schema = {
        "type": "struct",
        "name": f"srv.public.{table}.Envelope",
        "fields": [
            {**row_schema, "field": "before"},
            {**row_schema, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    source = {"connector": "postgresql", "name": "srv", "db": "d", "schema": "public", "table": table}
    source |= {"ts_ms": 5, "lsn": 100 + row["id"], "txId": 9}
    after = {name: None for name in FIELDS} | row
    value = {"schema": schema, "payload": {"before": None, "after": after, "source": source, "op": "c"}}
    key = {
        "schema": {"type": "struct", "fields": fields[:1], "optional": False, "name": "k"},
        "payload": {"id": row["id"]},
    }
    return orjson.dumps(key), orjson.dumps(value)


def changes(*rows: dict[str, Any]) -> list[Change]:
    decoder = Decoder()
    out = []
    for offset, row in enumerate(rows):
        key, value = envelope(row)
        (rec,) = decoder.decode(f"srv.public.{'edges'}", 0, offset, key, value)
        out.append(Change(rec.change, 0, offset))
    return out


def numbers(table: pa.Table) -> dict[int, dict[str, Any]]:
    """Rows by id, dates and timestamps as their numbers (what the Parquet file holds)."""
    return {r["id"]: r for r in table_rows(table)}


def test_edge_values_become_their_documented_arrow_values() -> None:
    table = to_arrow(changes({"id": 1} | ROW_MAX, {"id": 2} | ROW_MIN, {"id": 3} | ROW_FAR))
    types = {f.name: f.type for f in table.schema}
    assert types["ts"] == types["tstz"] == pa.timestamp("us", tz="UTC")
    assert types["d"] == pa.date32()
    assert types["n38"] == pa.decimal128(38, 18)
    assert types["nfree"] == types["n50"] == types["m"] == pa.string()  # no decimal128 holds them all
    assert types["fa"] == pa.list_(pa.field("element", pa.float64()))
    got = numbers(table)
    top, bottom, far = got[1], got[2], got[3]

    assert (top["ts"], top["ts0"], top["tstz"], top["d"]) == (I64_MAX, I64_MAX, I64_MAX, I32_MAX)
    assert (bottom["ts"], bottom["ts0"], bottom["tstz"], bottom["d"]) == (I64_MIN, I64_MIN, I64_MIN, I32_MIN)
    assert far["ts"] == far["tstz"] == days(10000, 1, 1) * DAY_US
    assert far["ts0"] == days(-4712, 1, 1) * DAY_US and far["d"] == days(5874897, 12, 31)
    assert top["tsa"] == [days(2024, 1, 1) * DAY_US, I64_MAX]

    assert top["n38"] == decimal.Decimal("12345678901234567890.123456789012345678")
    assert bottom["n38"] == decimal.Decimal("-99999999999999999999.999999999999999999")
    assert top["nfree"] == "123456789012345678901234567890123456789012345.678901"
    assert far["nfree"] == "1" + "0" * 50
    assert top["n50"] == "1234567890123456789012345678901234567890.0123456789"
    assert bottom["nfree"] is None and bottom["n50"] is None  # numeric NaN: Debezium sends null
    assert (top["m"], bottom["m"]) == ("92233720368547758.07", "-92233720368547758.08")

    assert math.isnan(top["f4"]) and top["f8"] == math.inf
    assert bottom["f4"] == -math.inf and math.isnan(bottom["f8"])
    fa = top["fa"]
    assert math.isnan(fa[0]) and fa[1:] == [math.inf, -math.inf, 1.5, None] and bottom["fa"] == []
    assert top["ta"] == ['say "hi"', None, "it's", "back\\slash", "{braces}", "NULL", "", " sp "]
    assert top["jb"] == '{"k": "va\\"l", "n": 100, "u": "é", "z": [true, null]}' and bottom["jb"] == "[]"
    assert (top["u"], top["ba"], bottom["ba"]) == (ROW_MAX["u"], b"\x00\xff\x7f\x80", b"")
    assert (top["e"], bottom["e"]) == ('it\'s "x"', "sad")
    assert (top["iv"], bottom["iv"]) == (I64_MAX, I64_MIN)
    assert (top["bits"], bottom["bits"]) == (b"\x81\x02", b"")


def test_toast_lookup_matches_date_and_timestamp_keys_as_numbers() -> None:
    """An unchanged (TOAST) int[] takes the stored row's value; the stored rows come back through
    ``table_rows`` with their dates and timestamps as numbers, as the batch's keys are."""
    event = changes({"id": 1, "d": -2147472692, "ts": 253402300800000000})[0].event
    after = event.after.values
    names = [c.name for c in event.schema.columns]
    after[names.index("fa")].unchanged.SetInParent()
    stored = pa.table(
        {
            "id": pa.array([1], pa.int32()),
            "d": pa.array([I32_MAX], pa.date32()),
            "ts": pa.array([days(10000, 1, 1) * DAY_US], pa.timestamp("us", tz="UTC")),
            "fa": pa.array([[2.5]], pa.list_(pa.float64())),
        }
    )
    seen: list[list[dict[str, Any]]] = []

    def current_rows(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append(keys)
        return table_rows(stored)

    table = to_arrow([Change(event, 0, 0)], key_fields=["d", "ts"], current_rows=current_rows)
    assert seen == [[{"d": I32_MAX, "ts": days(10000, 1, 1) * DAY_US}]]
    assert table.column("fa").to_pylist() == [[2.5]]


def test_a_value_that_does_not_fit_names_the_table_column_and_value() -> None:
    FIELDS["small"] = decimal_field(2, 5)
    try:
        batch = changes({"id": 1, "small": "ALxhTg=="})  # unscaled 12345678: 123456.78 in numeric(5,2)
    finally:
        del FIELDS["small"]
    with pytest.raises(RowError) as e:
        to_arrow(batch)
    assert str(e.value).startswith("srv.public.edges: column 'small': value ")
    assert "123456.78" in str(e.value) and "decimal128(5, 2)" in str(e.value)
    assert _kind(e.value) == "bad_input"


@pytest.mark.parametrize(
    "error",
    [
        OverflowError("date value out of range"),
        decimal.InvalidOperation([decimal.InvalidOperation]),
        pa.ArrowInvalid("Rescaling Decimal value would cause data loss"),
        pa.ArrowTypeError("object of type <class 'str'> cannot be converted to int"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        RowError("srv.public.t: column 'c': value 1 does not fit int32"),
        InvalidInputError("record key field 'id' is null"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_conversion_errors_are_bad_input_not_transient(error: BaseException) -> None:
    assert _kind(error) == "bad_input"


def test_other_errors_stay_transient() -> None:
    assert _kind(OSError("connection reset")) == "transient"
    assert _kind(TimeoutError()) == "transient"


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_edge_rows_survive_a_merge_on_read_table(tmp_path: Any, block_format: str) -> None:
    """The writer's default table (Merge-on-Read, bucket index): the rows go into log blocks, are
    read back (Avro blocks: by fastavro, whose dates end at year 9999) and compacted, unchanged."""
    from inlet.core import HudiTable

    arrow = to_arrow(changes({"id": 1} | ROW_MAX, {"id": 2} | ROW_MIN, {"id": 3} | ROW_FAR))
    table = HudiTable.create(
        str(tmp_path / "edges"),
        name="edges",
        record_key="id",
        ordering_field="_event_lsn",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=2,
    )
    options = {"hoodie.logfile.data.block.format": block_format}
    table.write(arrow, "upsert", options)
    table.write(arrow, "upsert", options)  # updates: log blocks over the first slice
    expected = repr(sorted(numbers(arrow).items()))  # repr: NaN equals NaN
    assert (
        repr(sorted(numbers(table.read(meta_columns=False).select(arrow.column_names)).items())) == expected
    )
    instant = table.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    assert instant is not None
    table.run_compaction(instant, options)
    assert (
        repr(sorted(numbers(table.read(meta_columns=False).select(arrow.column_names)).items())) == expected
    )
