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
from typing import Any

import numpy as np
import pyarrow as pa

from inlet.core.commit import markers
from inlet.core.config import CdcLoggingMode
from inlet.core.file_group.view import log_file_name
from inlet.core.log import writer as logs
from inlet.core.log.blocks import BlockType, HeaderKey
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


def _images(rows: pa.Table, positions: list[int | None], data: pa.Schema) -> pa.Array:
    """A nullable struct column: row ``positions[i]`` of ``rows`` (None: a null image)."""
    mask = pa.array([p is None for p in positions], pa.bool_())
    if all(p is None for p in positions):  # e.g. a delete's records carry no data columns
        return pa.nulls(len(positions), pa.struct(list(data)))
    taken = rows.select(data.names).take(pa.array(positions, pa.int64()))
    arrays = [taken.column(c).cast(data.field(c).type).combine_chunks() for c in data.names]
    return pa.StructArray.from_arrays(arrays, fields=list(data), mask=mask)


def cdc_records(
    mode: CdcLoggingMode,
    instant_time: str,
    key_column: str,
    data: pa.Schema,
    before: pa.Table,
    after: pa.Table,
) -> pa.Table:
    """The CDC records of one file group's changes, by record key: a key only in ``after`` (the
    records written) is an insert, in both an update, only in ``before`` (the stored records
    replaced or deleted) a delete."""
    b_keys = before.column(key_column).to_pylist()
    a_keys = after.column(key_column).to_pylist()
    b_pos = {k: i for i, k in enumerate(b_keys)}
    a_pos = {k: i for i, k in enumerate(a_keys)}
    keys = sorted(b_pos.keys() | a_pos.keys())
    ops = [INSERT if k not in b_pos else UPDATE if k in a_pos else DELETE for k in keys]
    cols: dict[str, pa.Array] = {OP: pa.array(ops, pa.string())}
    if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
        cols[TS] = pa.repeat(pa.scalar(instant_time, pa.string()), len(keys))
    else:
        cols[RECORD_KEY] = pa.array(keys, pa.string())
    if mode is not CdcLoggingMode.OP_KEY_ONLY:
        cols[BEFORE] = _images(before, [b_pos.get(k) for k in keys], data)
    if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
        cols[AFTER] = _images(after, [a_pos.get(k) for k in keys], data)
    return pa.table(cols)


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
    records = cdc_records(mode, instant_time, key_column, data, before, after)
    if records.num_rows == 0:
        return {}
    schema = cdc_schema(mode, table_schema)
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema}
    block = logs.encode_block(BlockType.CDC_DATA, header, logs.encode_avro_records(records, schema))
    name = cdc_file_name(file_id, instant_time, token)
    rel = posixpath.join(partition, name) if partition else name
    markers.create_marker(storage, instant_time, partition, name, "CREATE")
    return {rel: logs.write_log_file(storage, rel, [block])}


def changed_rows(stored: pa.Table, replaced: np.ndarray) -> pa.Table:
    """The stored records a merge replaced (updated or deleted): the CDC before images."""
    return stored.filter(pa.array(replaced)) if bool(np.any(replaced)) else stored.slice(0, 0)
