"""CDC log files of a write (``hoodie.table.cdc.enabled``), as Apache Hudi's ``HoodieCDCLogger`` writes them.

When a write rewrites a file group's base file (Hudi's ``HoodieMergeHandleWithChangeLog``), every
record it inserts, updates or deletes there is also logged, beside the data files, in one log file
named like the write's log files plus Hudi's ``HoodieCDCUtils.CDC_LOGFILE_SUFFIX`` ``.cdc``:
``.<fileId>_<instant>.log.1_<writeToken>.cdc``. The file holds one ``CDC_DATA`` block (Avro record
content, like an Avro data block) whose header has ``INSTANT_TIME`` and ``SCHEMA``; the records'
schema depends on ``hoodie.table.cdc.supplemental.logging.mode`` (``HoodieCDCUtils``):

- ``OP_KEY_ONLY``: record ``Record`` {``op``, ``record_key``}, both ``["string","null"]``;
- ``DATA_BEFORE``: record ``CDC`` (the table schema's namespace) {``op``, ``record_key``, ``before``};
- ``DATA_BEFORE_AFTER``: record ``CDC`` {``op``, ``ts_ms`` (the instant time), ``before``, ``after``};

where ``op`` is ``i``/``u``/``d`` and ``before``/``after`` are the table's record without the
``_hoodie_*`` meta fields, nullable; every field has doc ``""`` and default null. The write stat
lists the file in ``cdcStats`` (path relative to the table -> size). Like Hudi, a file group written
from scratch (every record an insert) and a Merge-on-Read log append get no CDC file: Hudi's CDC reader
infers those (``BASE_FILE_INSERT``, ``LOG_FILE``), and so does :mod:`inlet.core.read.cdc`. The file
gets a ``CREATE`` marker first, so a failed write's rollback deletes it like its data files.

Copy-on-Write tables only. Apache Hudi also logs a Merge-on-Read merge (inserts into a small base
file through the merge handle), but hudi-rs 0.5.0 reads every log file of a Merge-on-Read slice,
``.cdc`` ones included, and fails on their ``CDC_DATA`` blocks ("Unsupported block type: CdcData"):
so Inlet writes none on Merge-on-Read tables, whose commits the CDC query infers.
"""

from __future__ import annotations

import json
import posixpath
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.commit import markers
from inlet.core.config import CdcLoggingMode
from inlet.core.file_group.view import log_file_name
from inlet.core.log import writer as logs
from inlet.core.log.blocks import DATA_BLOCK_VERSION, BlockType, HeaderKey
from inlet.core.storage import Storage

CDC_LOGFILE_SUFFIX = ".cdc"
OP, TS, BEFORE, AFTER, RECORD_KEY = "op", "ts_ms", "before", "after", "record_key"
INSERT, UPDATE, DELETE = "i", "u", "d"

# HoodieCDCUtils.CDC_SCHEMA_OP_AND_RECORDKEY_STRING, as Avro prints it back
OP_KEY_ONLY_SCHEMA = (
    '{"type":"record","name":"Record","fields":[{"name":"op","type":["string","null"]},'
    '{"name":"record_key","type":["string","null"]}]}'
)


def cdc_file_name(file_id: str, instant_time: str, token: str) -> str:
    """``.<fileId>_<instant>.log.1_<token>.cdc`` (a log file name with Hudi's CDC suffix)."""
    return log_file_name(file_id, instant_time, 1, token) + CDC_LOGFILE_SUFFIX


def _field(name: str, typ: Any) -> dict[str, Any]:
    # Avro (Java) prints a field as name, type, doc, default
    return {"name": name, "type": typ, "doc": "", "default": None}


def cdc_schema(mode: CdcLoggingMode, table_schema: str) -> str:
    """The CDC block's Avro schema for ``mode`` over the table's Avro schema (no meta fields), in
    the JSON form Avro's ``Schema.toString`` gives Hudi's ``HoodieCDCUtils.schemaBySupplementalLoggingMode``:
    the nested table record drops a namespace equal to the enclosing one, and its second use is by name."""
    mode = CdcLoggingMode(mode)
    if mode is CdcLoggingMode.OP_KEY_ONLY:
        return OP_KEY_ONLY_SCHEMA
    table = json.loads(table_schema)
    namespace = table.get("namespace")
    image = {k: v for k, v in table.items() if not (k == "namespace" and v == namespace)}
    nullable_string = ["null", "string"]
    fields = [_field(OP, nullable_string)]
    if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
        fields += [
            _field(TS, nullable_string),
            _field(BEFORE, ["null", image]),
            _field(AFTER, ["null", table["name"]]),
        ]
    else:
        fields += [_field(RECORD_KEY, nullable_string), _field(BEFORE, ["null", image])]
    record: dict[str, Any] = {"type": "record", "name": "CDC"}
    if namespace:
        record["namespace"] = namespace
    record["doc"] = ""
    record["fields"] = fields
    return json.dumps(record, separators=(",", ":"))


_NULL_BRANCH = pa.scalar(b"\x00", pa.large_binary())  # union branch 0 (null) as an Avro varint
_RECORD_BRANCH = pa.scalar(b"\x02", pa.large_binary())  # union branch 1 (the record)
_EMPTY = pa.scalar(b"", pa.large_binary())


def _image_datums(
    rows: pa.Table, positions: list[int | None], data: pa.Schema, table_schema: str
) -> pa.Array:
    """Per change, the Avro datum of a ``["null", <table record>]`` image: the null branch, or the
    record branch then row ``positions[i]`` of ``rows`` encoded column by column."""
    present = [p for p in positions if p is not None]
    if not present:
        return pa.repeat(_NULL_BRANCH, len(positions))
    subset = rows.select(data.names).take(pa.array(present, pa.int64())).cast(data)
    datums = logs.encode_avro_datums(subset, table_schema)
    slots = np.cumsum([p is not None for p in positions]) - 1
    index = pa.array(slots, pa.int64(), mask=np.array([p is None for p in positions]))
    images = pc.binary_join_element_wise(_RECORD_BRANCH, datums.take(index), _EMPTY)
    return pc.fill_null(images, _NULL_BRANCH)


def _block_content(datums: pa.Array) -> bytes:
    """CDC_DATA content as Hudi's Avro data blocks lay it out: block version, record count, then each
    record length-prefixed (big-endian i32)."""
    n = len(datums)
    head = struct.pack(">ii", DATA_BLOCK_VERSION, n)
    if n == 0:
        return head
    sizes = np.asarray(pc.binary_length(datums).to_numpy(), dtype=">i4")
    prefix = pa.Array.from_buffers(pa.binary(4), n, [None, pa.py_buffer(sizes.tobytes())]).cast(
        pa.large_binary()
    )
    joined = pc.binary_join_element_wise(prefix, datums, _EMPTY)
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64, count=n + 1, offset=joined.offset * 8)
    return head + bytes(memoryview(joined.buffers()[2])[int(offsets[0]) : int(offsets[-1])])


def encode_cdc_records(
    mode: CdcLoggingMode,
    instant_time: str,
    key_column: str,
    data: pa.Schema,
    before: pa.Table,
    after: pa.Table,
    table_schema: str,
) -> tuple[int, bytes]:
    """The CDC records of one file group's changes, as CDC_DATA block content (and their count), by
    record key: a key only in ``after`` (the records written) is an insert, in both an update, only
    in ``before`` (the stored records replaced or deleted) a delete. Each record's datum is built
    from pieces: ``op`` and ``ts_ms``/``record_key``, then the images' unions."""
    mode = CdcLoggingMode(mode)
    b_pos = {k: i for i, k in enumerate(before.column(key_column).to_pylist())}
    a_pos = {k: i for i, k in enumerate(after.column(key_column).to_pylist())}
    keys = sorted(b_pos.keys() | a_pos.keys())
    ops = [INSERT if k not in b_pos else UPDATE if k in a_pos else DELETE for k in keys]
    second = (
        (TS, [instant_time] * len(keys)) if mode is CdcLoggingMode.DATA_BEFORE_AFTER else (RECORD_KEY, keys)
    )
    fields = json.loads(cdc_schema(mode, table_schema))["fields"][:2]
    head = pa.table({OP: pa.array(ops, pa.string()), second[0]: pa.array(second[1], pa.string())})
    pieces = [logs.encode_avro_datums(head, json.dumps({"type": "record", "name": "Head", "fields": fields}))]
    if mode is not CdcLoggingMode.OP_KEY_ONLY:
        pieces.append(_image_datums(before, [b_pos.get(k) for k in keys], data, table_schema))
    if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
        pieces.append(_image_datums(after, [a_pos.get(k) for k in keys], data, table_schema))
    datums = pc.binary_join_element_wise(*pieces, _EMPTY) if len(pieces) > 1 else pieces[0]
    return len(keys), _block_content(datums)


def write_cdc_log(
    storage: Storage,
    *,
    mode: CdcLoggingMode,
    instant_time: str,
    table_schema: str,
    partition: str,
    file_id: str,
    token: str,
    key_column: str,
    data: pa.Schema,
    before: pa.Table,
    after: pa.Table,
) -> dict[str, int]:
    """Write the CDC log file of one file group's changes (marker first); returns its ``cdcStats``
    entry ({} when nothing changed)."""
    count, content = encode_cdc_records(mode, instant_time, key_column, data, before, after, table_schema)
    if count == 0:
        return {}
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: cdc_schema(mode, table_schema)}
    block = logs.encode_block(BlockType.CDC_DATA, header, content)
    name = cdc_file_name(file_id, instant_time, token)
    rel = posixpath.join(partition, name) if partition else name
    markers.create_marker(storage, instant_time, partition, name, "CREATE")
    return {rel: logs.write_log_file(storage, rel, [block])}


def changed_rows(stored: pa.Table, replaced: np.ndarray) -> pa.Table:
    """The stored records a merge replaced (updated or deleted): the CDC before images."""
    return stored.filter(pa.array(replaced)) if bool(np.any(replaced)) else stored.slice(0, 0)
