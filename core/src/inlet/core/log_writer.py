"""Encoding Merge-on-Read log files: data, delete and rollback command blocks, as Apache Hudi 1.x writes them.

Byte layout of one block (big-endian, log format version 1; see :mod:`inlet.core.log_blocks`)::

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

from inlet.core.config import ConfigKey
from inlet.core.errors import CorruptFileError, InvalidInputError
from inlet.core.log_blocks import (
    DATA_BLOCK_VERSION,
    LOG_FORMAT_VERSION,
    MAGIC,
    BlockType,
    CommandType,
    DeleteRecord,
    HeaderKey,
)
from inlet.core.storage import Storage

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_KEY_FIELD = "_hoodie_record_key"


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


def _zigzag(n: int) -> bytes:
    """An Avro ``int``/``long``: zig-zag, then base-128 varint (least significant group first)."""
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


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


def encode_avro_records(records: pa.Table, schema_json: str) -> bytes:
    """AVRO_DATA block content: block version 3, the record count, then each record length-prefixed.

    ``records`` has one column per field of the Avro record schema ``schema_json`` (same names).
    """
    schema = fastavro.parse_schema(json.loads(schema_json))
    names = [f["name"] for f in json.loads(schema_json)["fields"]]
    missing = [n for n in names if n not in records.column_names]
    if missing:
        raise InvalidInputError(f"records lack field(s) {', '.join(missing)} of the block schema")
    columns = []
    for n in names:
        col = records.column(n)
        values = col.to_pylist()
        if _needs_conversion(col.type):
            values = [_py_value(v, col.type) for v in values]
        columns.append(values)
    out = io.BytesIO()
    out.write(_I32.pack(DATA_BLOCK_VERSION))
    out.write(_I32.pack(records.num_rows))
    buf = io.BytesIO()
    for i in range(records.num_rows):
        buf.seek(0)
        buf.truncate()
        fastavro.schemaless_writer(buf, schema, {n: columns[j][i] for j, n in enumerate(names)})
        datum = buf.getvalue()
        out.write(_I32.pack(len(datum)))
        out.write(datum)
    return out.getvalue()


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


# ---------------------------------------------------------------------------------- blocks


def encode_block(
    block_type: BlockType,
    header: Mapping[HeaderKey, str],
    content: bytes,
    footer: Mapping[HeaderKey, str] | None = None,
) -> bytes:
    """One whole log block: magic, lengths, header, content, footer and the total-length trailer."""
    head = encode_metadata(header)
    foot = encode_metadata(footer or {})
    body = (
        _I32.pack(LOG_FORMAT_VERSION)
        + _I32.pack(int(block_type))
        + head
        + _I64.pack(len(content))
        + content
        + foot
    )
    block_length = len(body) + _I64.size  # everything after the length field, trailer included
    total = len(MAGIC) + _I64.size + len(body)  # everything before the trailer
    return MAGIC + _I64.pack(block_length) + body + _I64.pack(total)


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


def rollback_block(instant_time: str, target_instant_time: str) -> bytes:
    """A rollback command block: the blocks of ``target_instant_time`` are to be ignored.

    Apache Hudi writes these only for table version 6 (and earlier); for table version 8 a failed
    deltacommit's log files are deleted instead (see :mod:`inlet.core.rollback`).
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


# ---------------------------------------------------------------------------------- key scan
#
# A small private decoder for what the writer's index needs: the record keys a log file holds
# (data and delete blocks). The full reader is inlet.core.log_reader.


@dataclass(frozen=True)
class _Frame:
    block_type: int
    header: dict[int, str]
    content: bytes


def _frames(data: bytes, what: str) -> Iterator[_Frame]:
    pos = 0
    n = len(data)
    while pos < n:
        if data[pos : pos + len(MAGIC)] != MAGIC:
            raise CorruptFileError(f"{what}: no block magic at byte offset {pos}")
        try:
            (length,) = _I64.unpack_from(data, pos + 6)
            end = pos + 14 + length
            if length < 32 or end > n:
                raise CorruptFileError(f"{what}: block at byte offset {pos} is cut short")
            p = pos + 14
            _version, btype, count = struct.unpack_from(">iii", data, p)
            p += 12
            header: dict[int, str] = {}
            for _ in range(count):
                key, size = struct.unpack_from(">ii", data, p)
                p += 8
                header[key] = data[p : p + size].decode("utf-8")
                p += size
            (clen,) = _I64.unpack_from(data, p)
            p += 8
            content = data[p : p + clen]
        except struct.error as e:
            raise CorruptFileError(f"{what}: block at byte offset {pos} is cut short") from e
        yield _Frame(btype, header, content)
        pos = end


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos


def _read_optional_string(data: bytes, pos: int) -> tuple[str | None, int]:
    branch, pos = _read_varint(data, pos)
    if branch == 0:
        return None, pos
    size, pos = _read_varint(data, pos)
    return data[pos : pos + size].decode("utf-8"), pos + size


def _skip_ordering_value(data: bytes, pos: int) -> int:
    branch, pos = _read_varint(data, pos)
    if branch == 0:
        return pos
    if branch == BOOLEAN:
        return pos + 1
    if branch in (INT, LONG, DATE, 10, 11):
        return _read_varint(data, pos)[1]
    if branch == FLOAT:
        return pos + 4
    if branch == DOUBLE:
        return pos + 8
    if branch in (BYTES, STRING, DECIMAL):
        size, pos = _read_varint(data, pos)
        return pos + size
    raise CorruptFileError(f"delete block: ordering value union branch {branch} is not supported")


def _delete_keys(content: bytes) -> list[str]:
    pos = 8  # block version, datum length
    keys: list[str] = []
    while True:
        count, pos = _read_varint(content, pos)
        if count == 0:
            return keys
        if count < 0:  # a block with its byte size (Avro allows it)
            count = -count
            pos = _read_varint(content, pos)[1]
        for _ in range(count):
            key, pos = _read_optional_string(content, pos)
            _, pos = _read_optional_string(content, pos)
            pos = _skip_ordering_value(content, pos)
            if key is not None:
                keys.append(key)


def _avro_data_keys(frame: _Frame) -> list[str]:
    schema = json.loads(frame.header.get(int(HeaderKey.SCHEMA), "{}"))
    names = [f["name"] for f in schema.get("fields", [])]
    content = frame.content
    (count,) = _I32.unpack_from(content, 4)
    pos = 8
    keys = []
    fast = names[:3] == ["_hoodie_commit_time", "_hoodie_commit_seqno", _KEY_FIELD]
    parsed: Any = None if fast else fastavro.parse_schema(schema)
    for _ in range(count):
        (size,) = _I32.unpack_from(content, pos)
        pos += 4
        if fast:  # the meta fields lead, each an optional string
            p = pos
            for _field in range(2):
                _, p = _read_optional_string(content, p)
            key, _ = _read_optional_string(content, p)
        else:
            rec = fastavro.schemaless_reader(io.BytesIO(content[pos : pos + size]), parsed, None)
            value = rec.get(_KEY_FIELD) if isinstance(rec, dict) else None
            key = value if isinstance(value, str) else None
        if key is not None:
            keys.append(key)
        pos += size
    return keys


def log_record_keys(data: bytes, what: str = "log file") -> dict[str, list[str]]:
    """Record keys of the data and delete blocks of a log file, by block instant time.

    Blocks of rolled-back instants (rollback command blocks of older table versions) are left out.
    """
    frames = list(_frames(data, what))
    rolled_back = {
        f.header.get(int(HeaderKey.TARGET_INSTANT_TIME), "")
        for f in frames
        if f.block_type == BlockType.COMMAND
        and f.header.get(int(HeaderKey.COMMAND_BLOCK_TYPE)) == str(int(CommandType.ROLLBACK))
    }
    out: dict[str, list[str]] = {}
    for f in frames:
        instant = f.header.get(int(HeaderKey.INSTANT_TIME), "")
        if instant in rolled_back:
            continue
        if f.block_type == BlockType.AVRO_DATA:
            keys = _avro_data_keys(f)
        elif f.block_type == BlockType.PARQUET_DATA:
            table = pq.read_table(pa.BufferReader(f.content), columns=[_KEY_FIELD])
            keys = [k for k in table.column(_KEY_FIELD).to_pylist() if k is not None]
        elif f.block_type == BlockType.DELETE:
            keys = _delete_keys(f.content)
        else:
            continue
        out.setdefault(instant, []).extend(keys)
    return out
