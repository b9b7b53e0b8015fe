"""Decoding Merge-on-Read log files: block framing, Avro/Parquet data blocks, delete and command blocks.

A log file is a sequence of blocks (see :mod:`inlet.core.log.blocks` for the byte layout). Reading
happens in two steps, so a reader can stream a file group with bounded memory:

1. :func:`scan_log_file` walks the block *frames*: magic, lengths, header, footer and the trailing
   total length of every block, without decoding any content. The result lists each block's
   header and where its content lies.
2. :func:`iter_block_rows` / :func:`read_delete_records` / :func:`decode_block` decode the content of
   one block at a time.

Damage is classified while scanning, and never turns into wrong rows:

- **Torn tail**: the file ends inside a block whose bytes so far are a consistent prefix of a block
  (a crashed or still-running append). The whole blocks before it are returned and a warning is
  logged; the partial block is ignored.
- **Corruption**: anything else that is not a well-formed block (bad magic, a length that does not
  match the block's own structure, an impossible header, a block that claims to run past the end
  of the file while well-formed blocks follow it, content that does not decode) raises
  :class:`~inlet.core.errors.CorruptFileError` naming the file and the block's byte offset.

Hudi's log blocks carry no checksum: a flipped bit inside a value (not a length or magic) cannot
be detected by any reader, Apache Hudi's included.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import io
import json
import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from inlet.core import avro
from inlet.core.errors import CorruptFileError, UnsupportedError
from inlet.core.log.blocks import (
    DATA_BLOCK_VERSION,
    LOG_FORMAT_VERSION,
    MAGIC,
    BlockHeaderView,
    BlockType,
    DeleteRecord,
    HeaderKey,
    LogBlock,
)
from inlet.core.storage import Storage

log = logging.getLogger(__name__)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MAX_METADATA_ENTRIES = 1024
_MAX_HEADER_KEY = 255  # header keys Inlet does not know (newer Hudi) are skipped, not fatal
_RESYNC_CHUNK = 1 << 20
_HEADER_KEYS = {int(k): k for k in HeaderKey}
DEFAULT_CHUNK_ROWS = 8192

# Apache Hudi's HoodieDeleteRecordList (delete block content, block version 3)
# Delete blocks are decoded with Apache Hudi's own HoodieDeleteRecordList schema (avro/): ordering
# values sit in one-field wrapper records (IntWrapper, LongWrapper, ..., TimestampMicrosWrapper).
_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def unwrap_ordering_value(value: Any) -> Any:
    """The Python value of a decoded ``orderingVal`` (``(wrapper name, {"value": v})`` or None)."""
    if value is None:
        return None
    name, body = value if isinstance(value, tuple) else ("", value)
    v = body.get("value") if isinstance(body, dict) else body
    kind = name.rsplit(".", 1)[-1]
    if kind == "DateWrapper" and isinstance(v, int):
        return _EPOCH_DAY + dt.timedelta(days=v)
    if kind == "TimestampMicrosWrapper" and isinstance(v, int):
        return _EPOCH + dt.timedelta(microseconds=v)
    return v


# ---------------------------------------------------------------------------------- byte sources


class ByteSource(Protocol):
    """Random access to the bytes of one file."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer only at the end of the file)."""
        ...


class BytesSource:
    """A log file held in memory."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, n: int) -> bytes:
        return self._data[offset : offset + n]


class FileSource:
    """A log file read through a ``pyarrow`` random-access file (local disk or object store)."""

    def __init__(self, handle: pa.NativeFile) -> None:
        self._handle = handle
        self._size = int(handle.size())

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, n: int) -> bytes:
        if offset >= self._size or n <= 0:
            return b""
        return bytes(self._handle.read_at(min(n, self._size - offset), offset))

    def close(self) -> None:
        self._handle.close()


# ---------------------------------------------------------------------------------- framing


@dataclass(frozen=True)
class BlockFrame(BlockHeaderView):
    """Where one block lies in its file, and its header and footer (content not decoded)."""

    offset: int  # byte offset of the block's magic
    end: int  # byte offset just past the block
    block_type: BlockType
    header: dict[HeaderKey, str]
    footer: dict[HeaderKey, str]
    content_offset: int
    content_length: int

    @property
    def is_data(self) -> bool:
        return self.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.HFILE_DATA)

    @property
    def compacted_instants(self) -> list[str]:
        """Instants whose blocks this (log-compacted) block replaces (``COMPACTED_BLOCK_TIMES``)."""
        text = self.header.get(HeaderKey.COMPACTED_BLOCK_TIMES)
        return [t for t in (text or "").split(",") if t]


@dataclass
class LogFileScan:
    """The frames of one log file, in file order."""

    path: str
    size: int
    frames: list[BlockFrame] = field(default_factory=list)
    torn_at: int | None = None  # offset of an ignored partial block at the end, if any


class _Truncated(Exception):
    """The file ends inside a block whose bytes so far are consistent."""


class _Malformed(Exception):
    """The bytes at this offset are not a well-formed block."""


class _Cursor:
    def __init__(self, src: ByteSource, pos: int, limit: int) -> None:
        self.src = src
        self.pos = pos
        self.limit = limit  # the block's declared end; reads past it are malformed

    def take(self, n: int) -> bytes:
        if self.pos + n > self.limit:
            raise _Malformed(f"a field at offset {self.pos} runs past the block's declared end")
        data = self.src.read(self.pos, n)
        if len(data) < n:
            raise _Truncated()
        self.pos += n
        return data

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])


def _read_metadata(cur: _Cursor, what: str) -> dict[HeaderKey, str]:
    count = cur.i32()
    if not 0 <= count <= _MAX_METADATA_ENTRIES:
        raise _Malformed(f"{what} claims {count} entries")
    out: dict[HeaderKey, str] = {}
    for _ in range(count):
        key = cur.i32()
        if not 0 <= key <= _MAX_HEADER_KEY:
            raise _Malformed(f"{what} has an invalid key {key}")
        length = cur.i32()
        if length < 0 or cur.pos + length > cur.limit:
            raise _Malformed(f"{what} value of key {key} has an invalid length {length}")
        raw = cur.take(length)
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Malformed(f"{what} value of key {key} is not UTF-8") from e
        known = _HEADER_KEYS.get(key)
        if known is not None:
            out[known] = value
    return out


def _parse_frame(src: ByteSource, offset: int) -> BlockFrame:
    """The block starting at ``offset``; raises _Truncated or _Malformed."""
    magic = src.read(offset, len(MAGIC))
    if magic != MAGIC:
        if len(magic) < len(MAGIC) and MAGIC.startswith(magic):
            raise _Truncated()
        raise _Malformed("bad magic (expected #HUDI#)")
    head = src.read(offset + 6, 8)
    if len(head) < 8:
        raise _Truncated()
    length = int(_I64.unpack(head)[0])
    # smallest block: version, type, empty header, content length, empty footer, total length
    if length < 4 + 4 + 4 + 8 + 4 + 8:
        raise _Malformed(f"impossible block length {length}")
    end = offset + 14 + length
    cur = _Cursor(src, offset + 14, end)
    version = cur.i32()
    if version != LOG_FORMAT_VERSION:
        if version == 0:
            raise UnsupportedError("log format version 0 (Hudi before 0.5) is not supported")
        raise _Malformed(f"unknown log format version {version}")
    type_id = cur.i32()
    if type_id not in BlockType._value2member_map_:
        raise _Malformed(f"unknown block type {type_id}")
    header = _read_metadata(cur, "header")
    content_length = cur.i64()
    if content_length < 0 or cur.pos + content_length > end:
        raise _Malformed(f"content length {content_length} does not fit the block")
    content_offset = cur.pos
    cur.pos += content_length
    footer = _read_metadata(cur, "footer")
    total_at = cur.pos
    total = cur.i64()
    if total != total_at - offset:
        raise _Malformed(f"trailing block length {total} does not match the block ({total_at - offset})")
    if cur.pos != end:
        raise _Malformed(f"block length {length} does not match the block's structure")
    return BlockFrame(offset, end, BlockType(type_id), header, footer, content_offset, content_length)


def _next_valid_block(src: ByteSource, after: int) -> int | None:
    """Offset of the first well-formed, complete block starting after ``after``, if any."""
    pos = after + 1
    size = src.size
    while pos < size:
        chunk = src.read(pos, _RESYNC_CHUNK + len(MAGIC) - 1)
        idx = chunk.find(MAGIC)
        while idx >= 0:
            try:
                _parse_frame(src, pos + idx)
                return pos + idx
            except (_Truncated, _Malformed, UnsupportedError):
                idx = chunk.find(MAGIC, idx + 1)
        pos += _RESYNC_CHUNK
    return None


def scan_frames(src: ByteSource, path: str) -> LogFileScan:
    """Frame every block of a log file (see the module docstring for torn tails and corruption)."""
    scan = LogFileScan(path, src.size)
    pos = 0
    while pos < src.size:
        try:
            frame = _parse_frame(src, pos)
        except _Malformed as e:
            raise CorruptFileError(f"log file {path}: corrupt block at byte offset {pos}: {e}") from None
        except _Truncated:
            follow = _next_valid_block(src, pos)
            if follow is not None:
                raise CorruptFileError(
                    f"log file {path}: corrupt block at byte offset {pos}: its length runs past a "
                    f"well-formed block at byte offset {follow}"
                ) from None
            log.warning(
                "log file %s: ignoring a partial block at byte offset %d (%d trailing bytes, torn write)",
                path,
                pos,
                src.size - pos,
            )
            scan.torn_at = pos
            break
        scan.frames.append(frame)
        pos = frame.end
    return scan


def open_source(storage: Storage, path: str) -> FileSource:
    return FileSource(storage.fs.open_input_file(storage.full(path)))


def scan_log_file(storage: Storage, path: str) -> LogFileScan:
    """Frame the blocks of the log file at ``path`` (relative to the table)."""
    src = open_source(storage, path)
    try:
        return scan_frames(src, path)
    finally:
        src.close()


# ---------------------------------------------------------------------------------- content


def _content(src: ByteSource, frame: BlockFrame, path: str) -> bytes:
    data = src.read(frame.content_offset, frame.content_length)
    if len(data) != frame.content_length:
        raise CorruptFileError(f"log file {path}: block at byte offset {frame.offset} is cut short")
    return data


def _corrupt(path: str, frame: BlockFrame, what: str) -> CorruptFileError:
    return CorruptFileError(
        f"log file {path}: corrupt {frame.block_type.name} block at byte offset {frame.offset}: {what}"
    )


@functools.lru_cache(maxsize=64)
def _parsed_schema(schema_json: str) -> Any:
    return fastavro.parse_schema(json.loads(schema_json))


_TEMPORAL = frozenset(
    {
        "date",
        "timestamp-millis",
        "timestamp-micros",
        "local-timestamp-millis",
        "local-timestamp-micros",
    }
)


def _without_temporal(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("logicalType") in _TEMPORAL:
            return node["type"]
        return {k: _without_temporal(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_without_temporal(v) for v in node]
    return node


@functools.lru_cache(maxsize=64)
def _numbers_schema(schema_json: str) -> Any:
    """The writer schema with dates and timestamps as their plain int/long numbers: the same bytes,
    decoded without Python's date and datetime (which end at year 9999)."""
    return fastavro.parse_schema(_without_temporal(json.loads(schema_json)))


def _delete_list_schema() -> Any:
    return avro.schema("HoodieDeleteRecordList")


def _block_version(data: bytes, path: str, frame: BlockFrame) -> int:
    if len(data) < 4:
        raise _corrupt(path, frame, "content too short")
    version = int(_I32.unpack_from(data, 0)[0])
    if version != DATA_BLOCK_VERSION:
        raise UnsupportedError(
            f"log file {path}: block at byte offset {frame.offset} has block version {version} "
            f"(only version {DATA_BLOCK_VERSION} is supported)"
        )
    return version


_LENGTH = "__inlet_record_length"


@functools.lru_cache(maxsize=64)
def _container_header(schema_json: str) -> tuple[bytes, bytes]:
    """The header of an in-memory Avro object container whose records are a data block's records
    *with* their 4-byte length prefixes: the writer schema with a leading ``fixed(4)`` field, so
    that a block's content after its 8-byte preamble is the container's one data block as is."""
    schema = json.loads(schema_json)
    prefix = {"type": "fixed", "name": _LENGTH, "size": 4}
    wrapped = {**schema, "fields": [{"name": _LENGTH, "type": prefix}, *schema["fields"]]}
    sync = b"inlet-log-block!"  # any 16 bytes
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(wrapped), [], sync_marker=sync)
    return buf.getvalue(), sync


_COLUMNAR_PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
_COLUMNAR_LOGICAL = frozenset({("int", "date"), ("long", "timestamp-micros"), ("long", "timestamp-millis")})


def _columnar_type(t: Any) -> bool:
    """Whether polars decodes this Avro type to what :func:`avro_to_arrow_type` says (after a cast)."""
    if isinstance(t, list):
        branches = [x for x in t if x != "null"]
        return len(branches) == 1 and _columnar_type(branches[0])
    if isinstance(t, str):
        return t in _COLUMNAR_PRIMITIVES
    if isinstance(t, dict):
        logical = t.get("logicalType")
        if logical is None:
            return t.get("type") in _COLUMNAR_PRIMITIVES
        return (t.get("type"), logical) in _COLUMNAR_LOGICAL
    return False


@functools.lru_cache(maxsize=64)
def _columnar_schema(schema_json: str) -> pa.Schema | None:
    """The Arrow schema to decode a block into columnar, or None when some field needs fastavro."""
    rec = json.loads(schema_json)
    if not isinstance(rec, dict) or rec.get("type") != "record":
        return None
    if not all(_columnar_type(f.get("type")) for f in rec.get("fields", [])):
        return None
    return avro_to_arrow_schema(schema_json)


def _decode_columnar(schema_json: str, target: pa.Schema, data: bytes, count: int) -> pa.Table | None:
    """A data block's ``count`` records decoded straight into Arrow by polars' Avro reader, cast
    to the block's Arrow schema; None if that fails or the length prefixes do not add up."""
    import polars  # here: importing it takes a while, and only Avro log blocks need it

    header, sync = _container_header(schema_json)
    body = memoryview(data)[8:]
    container = b"".join([header, avro.encode_long(count), avro.encode_long(len(body)), body, sync])
    try:
        table = polars.read_avro(io.BytesIO(container)).to_arrow()
        if table.num_rows != count or table.column_names != [_LENGTH, *target.names]:
            return None
        prefixes = table.column(0).combine_chunks().cast(pa.binary())
        first = int(
            np.frombuffer(prefixes.buffers()[1], dtype=np.int32, count=1, offset=prefixes.offset * 4)[0]
        )
        sizes = np.frombuffer(prefixes.buffers()[2], dtype=">i4", count=count, offset=first)
        if (sizes < 0).any() or int(sizes.sum(dtype=np.int64)) + 4 * count != len(body):
            return None
        return table.drop_columns([_LENGTH]).cast(target)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException:  # errors of several types; polars panics (a BaseException) on short data
        return None


def _iter_avro_rows(
    data: bytes, frame: BlockFrame, path: str, chunk_rows: int, columnar: bool = False
) -> Iterator[pa.Table | list[dict[str, Any]]]:
    """The records of an Avro data block, in chunks: Python rows decoded one by one by fastavro,
    or with ``columnar`` and a schema of flat primitive fields, Arrow tables decoded by polars in
    one pass (about 15 times faster); a block polars cannot decode is decoded by fastavro, which
    names the record at fault."""
    schema_json = frame.header.get(HeaderKey.SCHEMA)
    if not schema_json:
        raise _corrupt(path, frame, "the header has no writer schema")
    try:
        schema = _parsed_schema(schema_json)
    except Exception as e:  # fastavro raises several types on a bad schema
        raise _corrupt(path, frame, f"invalid writer schema: {e}") from e
    _block_version(data, path, frame)
    if len(data) < 8:
        raise _corrupt(path, frame, "content too short")
    count = int(_I32.unpack_from(data, 4)[0])
    if count < 0:
        raise _corrupt(path, frame, f"negative record count {count}")
    target = _columnar_schema(schema_json) if columnar and count else None
    if target is not None:
        table = _decode_columnar(schema_json, target, data, count)
        if table is not None:
            for i in range(0, table.num_rows, chunk_rows):
                yield table.slice(i, chunk_rows)
            return
    view = memoryview(data)
    pos = 8
    rows: list[dict[str, Any]] = []
    for i in range(count):
        if pos + 4 > len(data):
            raise _corrupt(path, frame, f"record {i} of {count} is missing")
        size = int(_I32.unpack_from(data, pos)[0])
        pos += 4
        if size < 0 or pos + size > len(data):
            raise _corrupt(path, frame, f"record {i} has an invalid length {size}")
        buf = io.BytesIO(view[pos : pos + size])
        try:
            rec = fastavro.schemaless_reader(buf, schema, None)
        except (OverflowError, ValueError) as e:  # a date or timestamp past Python's datetime?
            buf = io.BytesIO(view[pos : pos + size])
            try:  # its numbers then (Arrow takes them for the column's date or timestamp type)
                rec = fastavro.schemaless_reader(buf, _numbers_schema(schema_json), None)
            except Exception:
                raise _corrupt(path, frame, f"record {i} does not decode: {e}") from e
        except Exception as e:  # fastavro raises several unrelated types on garbage
            raise _corrupt(path, frame, f"record {i} does not decode: {e}") from e
        if buf.tell() != size or not isinstance(rec, dict):
            raise _corrupt(path, frame, f"record {i} does not match its length")
        pos += size
        rows.append(rec)
        if len(rows) >= chunk_rows:
            yield rows
            rows = []
    if pos != len(data):
        raise _corrupt(path, frame, f"{len(data) - pos} bytes after the last record")
    if rows:
        yield rows


def _parquet_file(data: bytes, frame: BlockFrame, path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as e:
        raise _corrupt(path, frame, f"not a Parquet file: {e}") from e


def iter_block_batches(
    src: ByteSource, frame: BlockFrame, path: str, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> Iterator[pa.Table | list[dict[str, Any]]]:
    """The records of a data block, a chunk at a time: Arrow tables (Parquet blocks, and Avro blocks
    of flat schemas, decoded by polars) or Python rows (other Avro blocks, decoded by the
    block's writer schema)."""
    data = _content(src, frame, path)
    if frame.block_type is BlockType.AVRO_DATA:
        yield from _iter_avro_rows(data, frame, path, chunk_rows, columnar=True)
    elif frame.block_type is BlockType.PARQUET_DATA:
        pf = _parquet_file(data, frame, path)
        try:
            for batch in pf.iter_batches(batch_size=chunk_rows):
                yield pa.Table.from_batches([batch])
        except (pa.ArrowException, OSError) as e:
            raise _corrupt(path, frame, f"Parquet content does not decode: {e}") from e
    else:
        raise UnsupportedError(
            f"log file {path}: {frame.block_type.name} blocks (byte offset {frame.offset}) are not supported"
        )


def iter_block_rows(
    src: ByteSource, frame: BlockFrame, path: str, chunk_rows: int = DEFAULT_CHUNK_ROWS
) -> Iterator[list[dict[str, Any]]]:
    """The records of a data block as Python rows, a chunk at a time."""
    for part in iter_block_batches(src, frame, path, chunk_rows):
        yield part.to_pylist() if isinstance(part, pa.Table) else part


def read_delete_records(src: ByteSource, frame: BlockFrame, path: str) -> list[DeleteRecord]:
    """The entries of a delete block (``HoodieDeleteRecordList``), with their ordering values."""
    data = _content(src, frame, path)
    _block_version(data, path, frame)
    if len(data) < 8:
        raise _corrupt(path, frame, "content too short")
    size = int(_I32.unpack_from(data, 4)[0])
    if size < 0 or 8 + size != len(data):
        raise _corrupt(path, frame, f"delete list length {size} does not match the content ({len(data) - 8})")
    buf = io.BytesIO(memoryview(data)[8:])
    try:
        rec = fastavro.schemaless_reader(buf, _delete_list_schema(), None, return_record_name=True)
    except Exception as e:  # fastavro raises several unrelated types on garbage
        raise _corrupt(path, frame, f"delete list does not decode: {e}") from e
    if buf.tell() != size or not isinstance(rec, dict):
        raise _corrupt(path, frame, "delete list does not match its length")
    out = []
    for item in rec["deleteRecordList"]:
        key = item.get("recordKey")
        if key is None:
            raise _corrupt(path, frame, "a delete record has no record key")
        ordering = unwrap_ordering_value(item.get("orderingVal"))
        out.append(DeleteRecord(key, item.get("partitionPath") or "", ordering))
    return out


# ---------------------------------------------------------------------------------- whole blocks


def avro_to_arrow_type(t: Any, named: dict[str, pa.DataType] | None = None, ns: str = "") -> pa.DataType:
    """The Arrow type of an Avro type (unions of null and one type are that type, nullable).

    ``named`` collects named types (records, fixed, enums) by full name so that later references
    resolve; ``ns`` is the enclosing namespace.
    """
    named = {} if named is None else named
    if isinstance(t, list):
        branches = [x for x in t if x != "null"]
        if len(branches) != 1:
            raise UnsupportedError(f"Avro union {t} is not supported")
        return avro_to_arrow_type(branches[0], named, ns)
    if isinstance(t, str):
        simple: dict[str, pa.DataType] = {
            "boolean": pa.bool_(),
            "int": pa.int32(),
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "string": pa.string(),
            "bytes": pa.binary(),
            "null": pa.null(),
        }
        if t in simple:
            return simple[t]
        found = named.get(t) if "." in t else named.get(f"{ns}.{t}" if ns else t)
        if found is None:
            raise UnsupportedError(f"Avro type {t!r} is not supported")
        return found
    kind = t.get("type")
    name = t.get("name")
    if kind in ("record", "fixed", "enum") and isinstance(name, str):
        if "." in name:
            full = name
        else:
            space = t.get("namespace", ns)
            full = f"{space}.{name}" if space else name
        inner_ns = full.rsplit(".", 1)[0] if "." in full else ""
        typ = _avro_complex_type(t, named, inner_ns)
        named[full] = typ
        return typ
    return _avro_complex_type(t, named, ns)


def _avro_complex_type(t: dict[str, Any], named: dict[str, pa.DataType], ns: str) -> pa.DataType:
    logical = t.get("logicalType")
    kind = t.get("type")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision = int(t["precision"])
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, int(t.get("scale", 0)))
    if logical == "date":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("ms" if logical.endswith("millis") else "us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("ms" if logical.endswith("millis") else "us")
    if logical == "time-millis":
        return pa.time32("ms")
    if logical == "time-micros":
        return pa.time64("us")
    if logical == "uuid":
        return pa.string()
    if kind == "record":
        return pa.struct([pa.field(f["name"], avro_to_arrow_type(f["type"], named, ns)) for f in t["fields"]])
    if kind == "array":
        return pa.list_(avro_to_arrow_type(t["items"], named, ns))
    if kind == "map":
        return pa.map_(pa.string(), avro_to_arrow_type(t["values"], named, ns))
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if isinstance(kind, str | list | dict):
        return avro_to_arrow_type(kind, named, ns)
    raise UnsupportedError(f"Avro type {t} is not supported")


def avro_to_arrow_schema(schema_json: str) -> pa.Schema:
    """The Arrow schema of an Avro record schema, meta columns included."""
    struct_type = avro_to_arrow_type(json.loads(schema_json))
    if not isinstance(struct_type, pa.StructType):
        raise UnsupportedError("a log block's writer schema is not an Avro record")
    return pa.schema(list(struct_type))


def decode_block(src: ByteSource, frame: BlockFrame, path: str) -> LogBlock:
    """A whole block decoded into the shared block model (records as one Arrow table)."""
    block = LogBlock(frame.block_type, dict(frame.header), dict(frame.footer), offset=frame.offset)
    if frame.block_type is BlockType.DELETE:
        block.deletes = read_delete_records(src, frame, path)
    elif frame.block_type is BlockType.AVRO_DATA:
        schema = avro_to_arrow_schema(frame.header.get(HeaderKey.SCHEMA) or "{}")
        rows = [r for part in _iter_avro_rows(_content(src, frame, path), frame, path, 1 << 62) for r in part]
        try:
            block.records = pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise _corrupt(path, frame, f"records do not fit the writer schema: {e}") from e
    elif frame.block_type is BlockType.PARQUET_DATA:
        parts = list(iter_block_batches(src, frame, path))
        tables = [p for p in parts if isinstance(p, pa.Table)]
        block.records = (
            pa.concat_tables(tables)
            if tables
            else _parquet_file(_content(src, frame, path), frame, path).schema_arrow.empty_table()
        )
    elif frame.block_type is not BlockType.COMMAND:
        raise UnsupportedError(
            f"log file {path}: {frame.block_type.name} blocks (byte offset {frame.offset}) are not supported"
        )
    return block


def read_log_blocks(
    src: ByteSource, path: str, decode: Callable[[BlockFrame], bool] | None = None
) -> list[LogBlock]:
    """Every block of a log file, decoded (only those ``decode`` accepts get their content)."""
    scan = scan_frames(src, path)
    out = []
    for frame in scan.frames:
        if decode is None or decode(frame):
            out.append(decode_block(src, frame, path))
        else:
            out.append(
                LogBlock(frame.block_type, dict(frame.header), dict(frame.footer), offset=frame.offset)
            )
    return out


def read_cdc_rows(storage: Storage, path: str) -> list[dict[str, Any]]:
    """The records of the ``CDC_DATA`` blocks of a CDC log file (``*.cdc``), decoded by each block's
    writer schema."""
    src = open_source(storage, path)
    try:
        rows: list[dict[str, Any]] = []
        for frame in scan_frames(src, path).frames:
            if frame.block_type is BlockType.CDC_DATA:
                for part in _iter_avro_rows(_content(src, frame, path), frame, path, 1 << 62):
                    rows.extend(part.to_pylist() if isinstance(part, pa.Table) else part)
        return rows
    finally:
        src.close()


def read_log_file(storage: Storage, path: str) -> list[LogBlock]:
    """Every whole block of the log file at ``path`` (relative to the table), decoded."""
    src = open_source(storage, path)
    try:
        return read_log_blocks(src, path)
    finally:
        src.close()


# ---------------------------------------------------------------------------------- values


def is_default_ordering_value(value: Any) -> bool:
    """Hudi's default ordering value (absent, or the integer 0): such a delete always wins."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 0)


def same_ordering_kind(a: Any, b: Any) -> bool:
    """Whether two ordering values are comparable (Hudi compares only values of one class)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, dt.datetime) or isinstance(b, dt.datetime):
        return isinstance(a, dt.datetime) and isinstance(b, dt.datetime)
    kinds: tuple[tuple[type, ...], ...] = (
        (int, float),
        (decimal.Decimal,),
        (str,),
        (bytes,),
        (dt.date,),
        (dt.time,),
    )
    return any(isinstance(a, group) and isinstance(b, group) for group in kinds)
