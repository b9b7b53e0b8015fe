"""Encoding Merge-on-Read log files: data, delete and rollback command blocks, as Apache Hudi 1.x writes them.

Byte layout of one block (big-endian, log format version 1; see :mod:`inlet.core.log.blocks`)::

    #HUDI# | i64 block length | i32 format version (1) | i32 block type | header |
    i64 content length | content | footer | i64 total block length

- *block length* counts every byte after itself: version, type, header, content length, content,
  footer and the trailing total length (``HoodieLogFormatWriter#getLogBlockLength``);
- *total block length* counts every byte of the block before itself, magic included (the
  "reverse pointer" readers use to detect a torn block): ``block length + 6``;
- header and footer: ``i32 count``, then per entry ``i32 key ordinal, i32 value length, UTF-8``.
  Inlet writes the entries in key-ordinal order (Apache Hudi uses a ``HashMap``, so its order is
  arbitrary; readers look entries up by key).

Content by block type:

- AVRO_DATA (3): ``i32 block version (3) | i32 record count | (i32 length | Avro binary datum)*``,
  each record encoded with the writer schema of the ``SCHEMA`` header (the table schema with the
  five ``_hoodie_*`` meta fields first);
- PARQUET_DATA (5): a whole Parquet file (``PAR1 ... PAR1``), no version prefix;
- DELETE (1): ``i32 block version (3) | i32 length | Avro datum of HoodieDeleteRecordList``. The
  ordering value is wrapped the way ``HoodieAvroUtils#wrapValueIntoAvro`` wraps it: a union of
  ``null`` and one-field wrapper records (``BooleanWrapper``, ``IntWrapper``, ``LongWrapper``, ...,
  see :data:`ORDERING_WRAPPERS`); a delete without an ordering value (the ``delete`` operation)
  carries Hudi's default ordering value, the ``Integer`` 0 (``IntWrapper``, union branch 2), which
  readers treat as "delete regardless of ordering";
- COMMAND (0): no content (length 0); the header holds ``INSTANT_TIME``, ``TARGET_INSTANT_TIME``
  and ``COMMAND_BLOCK_TYPE`` (``"0"`` = rollback).
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import io
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import avro
from inlet.core.config import ConfigKey
from inlet.core.errors import InvalidInputError
from inlet.core.log.blocks import (
    DATA_BLOCK_VERSION,
    LOG_FORMAT_VERSION,
    MAGIC,
    BlockType,
    CommandType,
    DeleteRecord,
    HeaderKey,
)
from inlet.core.schema import MetaField
from inlet.core.storage import Storage

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_KEY_FIELD = MetaField.RECORD_KEY


class DataBlockFormat(enum.StrEnum):
    AVRO = "avro"
    PARQUET = "parquet"

    @classmethod
    def parse(cls, value: str) -> DataBlockFormat:
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(f"unknown log data block format {value!r} (expected avro or parquet)") from None

    @property
    def block_type(self) -> BlockType:
        return BlockType.AVRO_DATA if self is DataBlockFormat.AVRO else BlockType.PARQUET_DATA


# Apache Hudi's write option choosing the data block of log files (HoodieStorageConfig).
DATA_BLOCK_FORMAT = ConfigKey("hoodie.logfile.data.block.format", DataBlockFormat.parse, DataBlockFormat.AVRO)

# Branches of HoodieDeleteRecord.orderingVal (Apache Hudi >= 0.14, table versions 6 and 8): union
# branch index -> wrapper record name. Every wrapper is a record with one field ``value``, so its
# binary form is that of the value. (Hudi 1.1 appends ``ArrayWrapper`` as branch 12.)
ORDERING_WRAPPERS = (
    "null",
    "BooleanWrapper",
    "IntWrapper",
    "LongWrapper",
    "FloatWrapper",
    "DoubleWrapper",
    "BytesWrapper",
    "StringWrapper",
    "DateWrapper",
    "DecimalWrapper",
    "TimeMicrosWrapper",
    "TimestampMicrosWrapper",
)
BOOLEAN, INT, LONG, FLOAT, DOUBLE, BYTES, STRING, DATE, DECIMAL = 1, 2, 3, 4, 5, 6, 7, 8, 9
DECIMAL_WRAPPER_PRECISION, DECIMAL_WRAPPER_SCALE = 30, 15


# ---------------------------------------------------------------------------------- Avro binary


_zigzag = avro.encode_long


def _avro_bytes(data: bytes) -> bytes:
    return _zigzag(len(data)) + data


def _avro_string(text: str) -> bytes:
    return _avro_bytes(text.encode("utf-8"))


def _optional_string(text: str | None) -> bytes:
    return _zigzag(0) if text is None else _zigzag(1) + _avro_string(text)


def _java_big_integer_bytes(n: int) -> bytes:
    """``BigInteger#toByteArray``: minimal big-endian two's complement."""
    length = max(1, (n + (n < 0)).bit_length() // 8 + 1)
    return n.to_bytes(length, "big", signed=True)


def ordering_branch(typ: pa.DataType) -> int:
    """The wrapper (union branch) Apache Hudi writes for ordering values of an Arrow column type.

    Hudi reads the ordering value from the Avro record (``HoodieAvroUtils#getNestedFieldVal``, logical
    types converted): int -> ``Integer``, long -> ``Long``, date -> ``LocalDate``, decimal ->
    ``BigDecimal``; timestamps stay ``Long`` (micros or millis as stored) unless
    ``hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled`` is set.
    """
    if pa.types.is_boolean(typ):
        return BOOLEAN
    if pa.types.is_integer(typ):
        return LONG if pa.types.is_int64(typ) or pa.types.is_uint32(typ) or pa.types.is_uint64(typ) else INT
    if pa.types.is_float32(typ) or pa.types.is_float16(typ):
        return FLOAT
    if pa.types.is_float64(typ):
        return DOUBLE
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return STRING
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ) or pa.types.is_fixed_size_binary(typ):
        return BYTES
    if pa.types.is_date(typ):
        return DATE
    if pa.types.is_decimal(typ):
        return DECIMAL
    if pa.types.is_timestamp(typ):
        return LONG
    raise InvalidInputError(f"an ordering field of type {typ} cannot be written into a delete block")


def _infer_branch(value: Any) -> int:
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return LONG
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, bytes | bytearray | memoryview):
        return BYTES
    if isinstance(value, decimal.Decimal):
        return DECIMAL
    if isinstance(value, dt.datetime):
        return LONG
    if isinstance(value, dt.date):
        return DATE
    raise InvalidInputError(f"ordering value {value!r} of type {type(value).__name__} has no Avro wrapper")


def _timestamp_number(value: dt.datetime, typ: pa.DataType | None) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(typ, pa.TimestampType) and typ.unit in ("s", "ms"):
        return micros // 1000
    return micros


def encode_ordering_value(value: Any, typ: pa.DataType | None = None) -> bytes:
    """The Avro binary of ``HoodieDeleteRecord.orderingVal`` (union branch index, then the value).

    ``None`` is Hudi's default ordering value, the ``Integer`` 0 (what a ``delete`` writes).
    ``typ`` is the ordering field's Arrow type; without it the wrapper follows the Python type.
    """
    if value is None:
        return _zigzag(INT) + _zigzag(0)
    branch = ordering_branch(typ) if typ is not None else _infer_branch(value)
    head = _zigzag(branch)
    if branch == BOOLEAN:
        return head + (b"\x01" if value else b"\x00")
    if branch in (INT, LONG):
        if isinstance(value, dt.datetime):
            number = _timestamp_number(value, typ)
        elif isinstance(value, dt.timedelta | dt.date):
            raise InvalidInputError(f"ordering value {value!r} does not fit an integer wrapper")
        else:
            number = int(value)
        if branch == INT and not -(2**31) <= number < 2**31:
            raise InvalidInputError(f"ordering value {number} does not fit an int")
        return head + _zigzag(number)
    if branch == FLOAT:
        return head + struct.pack("<f", float(value))
    if branch == DOUBLE:
        return head + struct.pack("<d", float(value))
    if branch == BYTES:
        return head + _avro_bytes(bytes(value))
    if branch == STRING:
        return head + _avro_string(str(value))
    if branch == DATE:
        day = value.date() if isinstance(value, dt.datetime) else value
        return head + _zigzag((day - dt.date(1970, 1, 1)).days)
    if branch == DECIMAL:
        # HoodieAvroUtils#tryUpcastDecimal to DECIMAL(30, 15), then the unscaled value's bytes
        scaled = decimal.Decimal(value).scaleb(DECIMAL_WRAPPER_SCALE)
        unscaled = int(scaled.to_integral_value())
        if unscaled != scaled or len(str(abs(unscaled))) > DECIMAL_WRAPPER_PRECISION:
            raise InvalidInputError(f"ordering value {value} does not fit DECIMAL(30, 15)")
        return head + _avro_bytes(_java_big_integer_bytes(unscaled))
    raise AssertionError(branch)


# ---------------------------------------------------------------------------------- block content


def encode_metadata(entries: Mapping[HeaderKey, str]) -> bytes:
    """A block header or footer: ``i32 count`` and ``(i32 key, i32 length, UTF-8 value)`` per entry."""
    out = bytearray(_I32.pack(len(entries)))
    for key in sorted(entries, key=int):
        value = entries[key].encode("utf-8")
        out += _I32.pack(int(key)) + _I32.pack(len(value)) + value
    return bytes(out)


def _py_value(value: Any, typ: pa.DataType) -> Any:
    """An Arrow ``to_pylist`` value in the form fastavro writes for the matching Avro type."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {k: _py_value(v, typ.item_type) for k, v in value}
    if pa.types.is_struct(typ):
        return {f.name: _py_value(value.get(f.name), f.type) for f in typ}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return [_py_value(v, typ.value_type) for v in value]
    return value


def _needs_conversion(typ: pa.DataType) -> bool:
    return bool(pa.types.is_map(typ) or pa.types.is_struct(typ) or pa.types.is_list(typ))


def _as_numbers(typ: pa.DataType) -> pa.DataType:
    """``typ`` with its dates and micro-/millisecond timestamps (also inside lists) as their numbers,
    which fastavro writes for ``date`` / ``timestamp-*`` as it writes Python dates and datetimes."""
    if pa.types.is_timestamp(typ) and typ.unit in ("ms", "us"):
        return pa.int64()
    if pa.types.is_date32(typ):
        return pa.int32()
    if pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(_as_numbers(typ.value_type)))
    if pa.types.is_large_list(typ):
        return pa.large_list(typ.value_field.with_type(_as_numbers(typ.value_type)))
    return typ


def _pylist(col: pa.ChunkedArray) -> list[Any]:
    try:
        return col.to_pylist()  # type: ignore[no-any-return]
    except (OverflowError, ValueError):  # a date or timestamp Python's datetime cannot hold
        return col.cast(_as_numbers(col.type)).to_pylist()  # type: ignore[no-any-return]


def _avro_rows(records: pa.Table, fields: list[dict[str, Any]], schema: Any) -> list[bytes]:
    """Each record's Avro binary datum, encoded one record at a time by fastavro."""
    columns = []
    for f in fields:
        col = records.column(f["name"])
        values = _pylist(col)
        if _needs_conversion(col.type):
            values = [_py_value(v, col.type) for v in values]
        columns.append(values)
    names = [f["name"] for f in fields]
    out = []
    buf = io.BytesIO()
    for i in range(records.num_rows):
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, schema, {n: columns[j][i] for j, n in enumerate(names)})
        out.append(buf.getvalue())
    return out


def encode_avro_records_rowwise(records: pa.Table, schema_json: str) -> bytes:
    """:func:`encode_avro_records`, one record at a time through fastavro (the reference encoding)."""
    fields = _block_fields(records, schema_json)
    datums = _avro_rows(records, fields, fastavro.parse_schema(json.loads(schema_json)))
    out = bytearray(_I32.pack(DATA_BLOCK_VERSION) + _I32.pack(records.num_rows))
    for datum in datums:
        out += _I32.pack(len(datum)) + datum
    return bytes(out)


def _block_fields(records: pa.Table, schema_json: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = json.loads(schema_json)["fields"]
    missing = [f["name"] for f in fields if f["name"] not in records.column_names]
    if missing:
        raise InvalidInputError(f"records lack field(s) {', '.join(missing)} of the block schema")
    return fields


def encode_avro_records(records: pa.Table, schema_json: str) -> bytes:
    """AVRO_DATA block content: block version 3, the record count, then each record length-prefixed.

    ``records`` has one column per field of the Avro record schema ``schema_json`` (same names).
    Columns are encoded a whole column at a time (:func:`_encode_column`); the bytes are those
    fastavro writes record by record (:func:`encode_avro_records_rowwise`). A field of a type the
    columnar encoder does not know (arrays, maps, records, ...) is encoded value by value by
    fastavro, and if even that is not possible on its own (a named type defined by another field),
    the whole block is.
    """
    fields = _block_fields(records, schema_json)
    n = records.num_rows
    head = _I32.pack(DATA_BLOCK_VERSION) + _I32.pack(n)
    if n == 0:
        return head
    pieces: list[pa.Array] = []
    for f in fields:
        col = records.column(f["name"]).combine_chunks()
        encoded = _encode_column(col, f["type"])
        if encoded is None:
            encoded = _encode_column_rowwise(records, f)
            if encoded is None:
                return encode_avro_records_rowwise(records, schema_json)
        pieces.extend(encoded)
    sizes = np.zeros(n, dtype=np.int64)
    for p in pieces:
        sizes += pc.binary_length(p).to_numpy()
    if int(sizes.max()) > 2**31 - 1:
        raise InvalidInputError("an Avro record of more than 2 GiB cannot be written into a log block")
    prefix = _fixed_width(np.ascontiguousarray(sizes.astype(">i4")).view(np.uint8).reshape(n, 4))
    joined = pc.binary_join_element_wise(prefix, *pieces, _EMPTY)
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=joined.offset * 8)
    return head + memoryview(joined.buffers()[2])[int(offsets[0]) : int(offsets[-1])]


def encode_avro_datums(records: pa.Table, schema_json: str) -> pa.Array:
    """Each record's Avro binary datum (``large_binary``, no length prefix), encoded column by column
    as :func:`encode_avro_records` does: the pieces a caller nests in a larger record (a record's
    datum is its fields' datums one after the other)."""
    fields = _block_fields(records, schema_json)
    if records.num_rows == 0:
        return pa.array([], pa.large_binary())
    pieces: list[pa.Array] = []
    for f in fields:
        encoded = _encode_column(records.column(f["name"]).combine_chunks(), f["type"])
        if encoded is None:
            encoded = _encode_column_rowwise(records, f)
            if encoded is None:
                rows = _avro_rows(records, fields, fastavro.parse_schema(json.loads(schema_json)))
                return pa.array(rows, pa.large_binary())
        pieces.extend(encoded)
    return pc.binary_join_element_wise(*pieces, _EMPTY)


# ---------------------------------------------------------------------------------- columnar Avro
#
# A record's Avro binary form is its fields' encodings one after the other, so a block can be built
# column by column: every field becomes one or two ``large_binary`` arrays ("pieces") holding each
# row's bytes for that field, and one element-wise concatenation of all pieces gives the records.
# Union branch indexes, lengths and integers are zig-zag varints (built with numpy, at most ten
# passes over a column); doubles and floats are little-endian IEEE; decimals (Avro ``fixed``) are
# big-endian two's complement of the unscaled value, sign-extended to the fixed size.

_EMPTY = pa.scalar(b"", pa.large_binary())
_PRIMITIVES = ("string", "bytes", "long", "int", "double", "float", "boolean", "fixed")


def _zigzag_array(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << np.int64(1)) ^ (v >> np.int64(63))).view(np.uint64)


_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)  # 2**7, 2**14, ...


def _varint_sizes(z: np.ndarray) -> np.ndarray:
    """Bytes of each value's varint: 1 + how many of 2**7, 2**14, ... 2**63 it reaches."""
    return 1 + np.searchsorted(_VARINT_LIMITS, z, side="right").astype(np.int64)


def _binary(offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _fixed_width(values: np.ndarray) -> pa.Array:
    """Rows of an ``(n, k)`` uint8 matrix as a binary array."""
    n, k = values.shape
    return _binary(np.arange(n + 1, dtype=np.int64) * k, np.ascontiguousarray(values).reshape(-1))


def _piece(
    n: int,
    valid: np.ndarray | None,
    branches: tuple[int, int] | None,
    varint: np.ndarray | None = None,
    fixed: np.ndarray | None = None,
) -> pa.Array:
    """Per row: the union branch (``branches`` = (value branch, null branch), or no branch), then
    for non-null rows a zig-zagged varint (``varint``, uint64) or the bytes of ``fixed`` (n, k)."""
    lead = 0 if branches is None else 1
    if varint is not None:
        payload = _varint_sizes(varint)
    elif fixed is not None:
        payload = np.full(n, fixed.shape[1], dtype=np.int64)
    else:
        payload = np.zeros(n, dtype=np.int64)
    sizes = lead + (payload if valid is None else np.where(valid, payload, 0))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = np.zeros(int(offsets[-1]), dtype=np.uint8)
    starts = offsets[:-1]
    if branches is not None:
        data[starts] = branches[0] if valid is None else np.where(valid, branches[0], branches[1])
    rows = np.arange(n) if valid is None else np.flatnonzero(valid)
    at = starts[rows] + lead
    if varint is not None:
        z, size = varint[rows], payload[rows]
        for k in range(int(size.max()) if len(size) else 0):
            more = size > k
            byte = ((z[more] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            byte[size[more] > k + 1] |= 0x80
            data[at[more] + k] = byte
    elif fixed is not None and len(rows):
        data[at[:, None] + np.arange(fixed.shape[1])] = fixed[rows]
    return _binary(offsets, data)


def _avro_kind(avro_type: Any) -> tuple[str, str | None, dict[str, Any]] | None:
    """(primitive type, logical type, the type's attributes) of a non-union Avro type."""
    if isinstance(avro_type, str):
        return (avro_type, None, {}) if avro_type in _PRIMITIVES and avro_type != "fixed" else None
    if isinstance(avro_type, dict) and avro_type.get("type") in _PRIMITIVES:
        return str(avro_type["type"]), avro_type.get("logicalType"), avro_type
    return None


def _values(col: pa.Array, typ: pa.DataType) -> np.ndarray:
    """The column cast to ``typ`` as numpy values (nulls as zero: their rows write no value)."""
    values = col.cast(typ)
    if values.null_count:
        values = pc.fill_null(values, pa.scalar(False if pa.types.is_boolean(typ) else 0).cast(typ))
    return np.asarray(values.to_numpy(zero_copy_only=False))


def _encode_column(col: pa.Array, avro_type: Any) -> list[pa.Array] | None:
    """The pieces of one field for every row, or None if this encoder does not handle the type."""
    n = len(col)
    branches: tuple[int, int] | None = None
    if isinstance(avro_type, list):
        if len(avro_type) != 2 or "null" not in avro_type:
            return None
        null_at = avro_type.index("null")
        branches = (2 * (1 - null_at), 2 * null_at)  # zig-zagged union indexes
        avro_type = avro_type[1 - null_at]
    elif col.null_count:
        return None  # fastavro raises the error for a null in a non-nullable field
    kind = _avro_kind(avro_type)
    if kind is None:
        return None
    name, logical, attrs = kind
    typ = col.type
    valid = None if col.null_count == 0 else np.asarray(col.is_valid().to_numpy(zero_copy_only=False))

    def piece(varint: np.ndarray | None = None, fixed: np.ndarray | None = None) -> pa.Array:
        return _piece(n, valid, branches, varint, fixed)

    if name in ("string", "bytes") and logical is None:
        text = pa.types.is_string(typ) or pa.types.is_large_string(typ)
        raw = pa.types.is_binary(typ) or pa.types.is_large_binary(typ)
        if not (text if name == "string" else raw):
            return None
        data = col.cast(pa.large_binary())
        if col.null_count:
            data = pc.fill_null(data, _EMPTY)
        lengths = np.asarray(pc.binary_length(data).to_numpy())
        return [piece(varint=_zigzag_array(lengths)), data]
    if name == "long":
        integer = pa.types.is_integer(typ) and not pa.types.is_uint64(typ)
        stamp = pa.types.is_timestamp(typ)
        if logical is None and integer:
            return [piece(varint=_zigzag_array(_values(col, pa.int64())))]
        if stamp and logical in _TIMESTAMPS and _TIMESTAMPS[logical] == (typ.unit, typ.tz is not None):
            return [piece(varint=_zigzag_array(_values(col, pa.int64())))]
        return None
    if name == "int":
        small = pa.types.is_int8(typ) or pa.types.is_int16(typ) or pa.types.is_int32(typ)
        small = small or pa.types.is_uint8(typ) or pa.types.is_uint16(typ)
        if (logical is None and small) or (logical == "date" and pa.types.is_date32(typ)):
            return [piece(varint=_zigzag_array(_values(col, pa.int32())))]
        return None
    if name in ("double", "float") and logical is None:
        width = "<f8" if name == "double" else "<f4"
        if not (pa.types.is_float64(typ) if name == "double" else pa.types.is_float32(typ)):
            return None
        values = np.asarray(_values(col, typ), dtype=width)
        return [piece(fixed=values.view(np.uint8).reshape(n, -1))]
    if name == "boolean" and logical is None and pa.types.is_boolean(typ):
        flags = np.asarray(_values(col, typ), dtype=np.uint8)
        return [piece(fixed=flags.reshape(n, 1))]
    if name == "fixed" and logical == "decimal" and pa.types.is_decimal(typ):
        size, scale, precision = int(attrs["size"]), int(attrs.get("scale", 0)), int(attrs["precision"])
        if typ.scale != scale or typ.precision > precision or size > typ.byte_width:
            return None
        width = typ.byte_width  # little-endian two's complement, 16 or 32 bytes
        words = np.frombuffer(col.buffers()[1], dtype=np.uint8, count=n * width, offset=col.offset * width)
        return [piece(fixed=words.reshape(n, width)[:, size - 1 :: -1])]
    return None


# Avro timestamp logical types -> (Arrow unit, whether the Arrow type has a time zone). fastavro
# converts aware datetimes exactly for timestamp-*, naive ones exactly for local-timestamp-*
# (naive datetimes under timestamp-* go through the local time zone: left to fastavro).
_TIMESTAMPS = {
    "timestamp-micros": ("us", True),
    "timestamp-millis": ("ms", True),
    "local-timestamp-micros": ("us", False),
    "local-timestamp-millis": ("ms", False),
}


def _encode_column_rowwise(records: pa.Table, field: dict[str, Any]) -> list[pa.Array] | None:
    """One field encoded value by value by fastavro (None if the field's type cannot be parsed on
    its own, e.g. it names a type another field defines)."""
    try:
        schema = fastavro.parse_schema({"type": "record", "name": "InletColumn", "fields": [field]})
    except Exception:  # fastavro raises several types for unknown named types
        return None
    one = records.select([field["name"]])
    return [pa.array(_avro_rows(one, [field], schema), pa.large_binary())]


def encode_parquet_records(records: pa.Table, schema_json: str, compression: str = "gzip") -> bytes:
    """PARQUET_DATA block content: a Parquet file of the records (with the Avro schema in its footer)."""
    table = records.replace_schema_metadata({"parquet.avro.schema": schema_json, "writer.model.name": "avro"})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression=compression)
    return buf.getvalue()


def encode_delete_records(deletes: Sequence[DeleteRecord], ordering_type: pa.DataType | None = None) -> bytes:
    """DELETE block content: block version 3, then the length-prefixed ``HoodieDeleteRecordList`` datum."""
    datum = bytearray()
    if deletes:
        datum += _zigzag(len(deletes))  # one array block holding every record
        for d in deletes:
            datum += _optional_string(d.record_key)
            datum += _optional_string(d.partition_path)
            datum += encode_ordering_value(d.ordering_value, ordering_type)
    datum += _zigzag(0)  # end of the array
    return _I32.pack(DATA_BLOCK_VERSION) + _I32.pack(len(datum)) + bytes(datum)


def encode_delete_columns(
    keys: pa.Array | pa.ChunkedArray,
    partitions: pa.Array | pa.ChunkedArray,
    ordering: pa.Array | pa.ChunkedArray | None = None,
) -> bytes:
    """:func:`encode_delete_records` of the deletes ``(keys[i], partitions[i], ordering[i])``,
    encoded a column at a time; the ordering values are wrapped by the ordering column's type
    (``ordering`` None: every delete carries Hudi's default ordering value)."""
    keys, partitions = _one(keys), _one(partitions)
    n = len(keys)
    head = _I32.pack(DATA_BLOCK_VERSION)
    if n == 0:
        return head + _I32.pack(1) + _zigzag(0)
    values = None if ordering is None else _one(ordering)
    if values is None:
        wrapped: list[pa.Array] | None = [_constant(n, encode_ordering_value(None))]
    else:
        wrapped = _ordering_pieces(values)
    key_pieces = _encode_column(keys.cast(pa.string()), ["null", "string"])
    partition_pieces = _encode_column(partitions.cast(pa.string()), ["null", "string"])
    if wrapped is None or key_pieces is None or partition_pieces is None:
        ordering_values = [None] * n if values is None else values.to_pylist()
        deletes = [
            DeleteRecord(k, p, v)
            for k, p, v in zip(keys.to_pylist(), partitions.to_pylist(), ordering_values, strict=True)
        ]
        return encode_delete_records(deletes, None if values is None else values.type)
    joined = pc.binary_join_element_wise(*key_pieces, *partition_pieces, *wrapped, _EMPTY)
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=joined.offset * 8)
    records = memoryview(joined.buffers()[2])[int(offsets[0]) : int(offsets[-1])]
    datum = _zigzag(n) + records + _zigzag(0)  # one array block holding every record
    return head + _I32.pack(len(datum)) + datum


def _one(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _constant(n: int, value: bytes) -> pa.Array:
    return _fixed_width(np.tile(np.frombuffer(value, dtype=np.uint8), (n, 1)))


def _ordering_pieces(values: pa.Array) -> list[pa.Array] | None:
    """Ordering values wrapped as :func:`encode_ordering_value` wraps them (None: not handled here)."""
    typ = values.type
    branch = ordering_branch(typ)  # refuses types without a wrapper
    if values.null_count:
        return None
    if pa.types.is_timestamp(typ):
        if typ.unit == "ns":
            return None
        values = values.cast(pa.int64())
        if typ.unit == "s":  # encode_ordering_value goes through a datetime: seconds become millis
            values = pc.multiply(values, 1000)
    avro_type: Any = {
        BOOLEAN: "boolean",
        INT: "int",
        LONG: "long",
        FLOAT: "float",
        DOUBLE: "double",
        BYTES: "bytes",
        STRING: "string",
        DATE: {"type": "int", "logicalType": "date"},
    }.get(branch)
    pieces = None if avro_type is None else _encode_column(values, avro_type)
    return None if pieces is None else [_constant(len(values), _zigzag(branch)), *pieces]


# ---------------------------------------------------------------------------------- blocks


def encode_block(
    block_type: BlockType,
    header: Mapping[HeaderKey, str],
    content: bytes,
    footer: Mapping[HeaderKey, str] | None = None,
) -> bytes:
    """One whole log block: magic, lengths, header, content, footer and the total-length trailer."""
    head = _I32.pack(LOG_FORMAT_VERSION) + _I32.pack(int(block_type)) + encode_metadata(header)
    head += _I64.pack(len(content))
    foot = encode_metadata(footer or {})
    body_length = len(head) + len(content) + len(foot)
    block_length = body_length + _I64.size  # everything after the length field, trailer included
    total = len(MAGIC) + _I64.size + body_length  # everything before the trailer
    return b"".join((MAGIC, _I64.pack(block_length), head, content, foot, _I64.pack(total)))


def data_block(
    records: pa.Table,
    instant_time: str,
    schema_json: str,
    fmt: DataBlockFormat = DataBlockFormat.AVRO,
    compression: str = "gzip",
) -> bytes:
    """A data block of ``records`` (meta columns first) written by ``instant_time``."""
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json}
    if fmt is DataBlockFormat.AVRO:
        content = encode_avro_records(records, schema_json)
    else:
        content = encode_parquet_records(records, schema_json, compression)
    return encode_block(fmt.block_type, header, content)


def delete_block(
    deletes: Sequence[DeleteRecord],
    instant_time: str,
    schema_json: str | None = None,
    ordering_type: pa.DataType | None = None,
) -> bytes:
    """A delete block; Apache Hudi's append handle puts the writer schema in its header too."""
    header = {HeaderKey.INSTANT_TIME: instant_time}
    if schema_json:
        header[HeaderKey.SCHEMA] = schema_json
    return encode_block(BlockType.DELETE, header, encode_delete_records(deletes, ordering_type))


def delete_block_columns(
    keys: pa.Array | pa.ChunkedArray,
    partitions: pa.Array | pa.ChunkedArray,
    ordering: pa.Array | pa.ChunkedArray | None,
    instant_time: str,
    schema_json: str | None = None,
) -> bytes:
    """:func:`delete_block` of deletes given as columns (see :func:`encode_delete_columns`)."""
    header = {HeaderKey.INSTANT_TIME: instant_time}
    if schema_json:
        header[HeaderKey.SCHEMA] = schema_json
    return encode_block(BlockType.DELETE, header, encode_delete_columns(keys, partitions, ordering))


def rollback_block(instant_time: str, target_instant_time: str) -> bytes:
    """A rollback command block: the blocks of ``target_instant_time`` are to be ignored.

    Apache Hudi writes these only for table version 6 (and earlier); for table version 8 a failed
    deltacommit's log files are deleted instead (see :mod:`inlet.core.actions.rollback`).
    """
    header = {
        HeaderKey.INSTANT_TIME: instant_time,
        HeaderKey.TARGET_INSTANT_TIME: target_instant_time,
        HeaderKey.COMMAND_BLOCK_TYPE: str(int(CommandType.ROLLBACK)),
    }
    return encode_block(BlockType.COMMAND, header, b"")


def write_log_file(storage: Storage, path: str, blocks: Sequence[bytes]) -> int:
    """Write a new log file of ``blocks`` at ``path`` (relative to the table); returns its size."""
    data = b"".join(blocks)
    storage.write_bytes(path, data)
    return len(data)
