"""Step 1 of a write, prepare: check the options and input, evolve the schema, key the records and merge duplicate keys by the table's merge mode. Everything that can reject the input happens here, before an instant exists (both engines use these checks)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import (
    ConfigKey,
    MergeMode,
    TableType,
    WriteConfig,
    WriteOperation,
    check_options,
    config_keys,
)
from inlet.core.errors import InvalidInputError, SchemaError, UnsupportedError
from inlet.core.keys import KeyGenerator
from inlet.core.log import writer as logs
from inlet.core.merge import dedupe as merging
from inlet.core.schema import (
    IS_DELETED_COLUMN,
    META_COLUMNS,
    cast_to,
    evolve,
    normalize_schema,
    to_avro_schema,
)
from inlet.core.table.handle import TableHandle
from inlet.core.table.meta import TableMeta

KEY = merging.KEY
PARTITION = merging.PARTITION
DELETED = "__inlet_deleted"
# every option a write parses (both engines); checked before the instant begins
WRITE_OPTION_KEYS: tuple[ConfigKey[Any], ...] = (*config_keys(WriteConfig), logs.DATA_BLOCK_FORMAT)


def check_write_options(options: dict[str, str]) -> None:
    """Parse every write option (:data:`WRITE_OPTION_KEYS`): a malformed value raises
    :class:`~inlet.core.errors.InvalidOptionError` naming key and value, before anything is written."""
    check_options(options, WRITE_OPTION_KEYS)
    if WriteConfig.METADATA_ENABLE.get(options):
        raise UnsupportedError(
            "hoodie.metadata.enable=true: Inlet does not maintain Apache Hudi's metadata table; its "
            "commits turn a table's metadata table off (Apache Hudi's writers build it again)"
        )


@dataclass
class PreparedBatch:
    """Incoming records with ``_hoodie_record_key``, ``_hoodie_partition_path`` and a delete flag."""

    operation: WriteOperation
    records: pa.Table
    schema: pa.Schema  # the table's data schema after this write
    avro_schema: str


def _as_arrow(data: pa.Table | pa.RecordBatchReader | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        raise InvalidInputError("no input record batches")
    return pa.Table.from_batches(batches)


def check_input_columns(names: Sequence[str]) -> None:
    """Refuse input with duplicate column names (meta columns already dropped)."""
    dupes = {c for c in names if list(names).count(c) > 1}
    if dupes:
        raise SchemaError(f"duplicate column name(s) in the input: {', '.join(sorted(dupes))}")


def delete_key_fields(table: TableHandle, names: Sequence[str]) -> list[str]:
    """The columns the delete operation reads (record key and partition fields); all must be given."""
    kg = table.meta.key_generator
    needed = list(dict.fromkeys([*kg.record_key_fields, *kg.partition_fields]))
    missing = [c for c in needed if c not in names]
    if missing:
        raise SchemaError(
            f"delete input lacks column(s) {', '.join(missing)} (record key and partition fields)"
        )
    return needed


def delete_key_schema(current: pa.Schema | None, key_input: pa.Schema) -> pa.Schema:
    """The types delete keys are read as: the table's (``current``), for the columns it has (keys
    print the same)."""
    if current is None:
        return key_input
    return pa.schema([current.field(f.name) if f.name in current.names else f for f in key_input])


def write_schema(meta: TableMeta, current: pa.Schema | None, input_schema: pa.Schema) -> pa.Schema:
    """The table's data schema after writing records of ``input_schema`` (meta columns dropped):
    the ``current`` schema evolved by the input, or the input's own on the first write.

    Raises :class:`SchemaError` for input lacking a record key, partition or ordering field, for
    an incompatible type change and for a non-boolean ``_hoodie_is_deleted``. Decided from the
    schemas alone, so a distributed engine decides it on its driver.
    """
    if len(input_schema) == 0:
        raise SchemaError("the input has no columns")
    kg = meta.key_generator
    ordering = meta.ordering_field
    incoming = normalize_schema(input_schema)
    for f in (*kg.record_key_fields, *kg.partition_fields, *([ordering] if ordering else [])):
        if f not in incoming.names:
            raise SchemaError(
                f"required column {f!r} (record key, partition or ordering field) is missing from the input"
            )
    schema = evolve(current, incoming) if current is not None else incoming
    if IS_DELETED_COLUMN in schema.names and not pa.types.is_boolean(schema.field(IS_DELETED_COLUMN).type):
        raise SchemaError(f"{IS_DELETED_COLUMN} must be a boolean column")
    return schema


def delete_records(kg: KeyGenerator, key_input: pa.Table) -> pa.Table:
    """Delete-operation records: ``KEY``, ``PARTITION`` and a set delete flag per input row."""
    return pa.table(
        {
            KEY: kg.record_keys(key_input),
            PARTITION: kg.partition_paths(key_input),
            DELETED: pa.array(np.ones(key_input.num_rows, dtype=bool)),
        }
    )


def keyed_records(kg: KeyGenerator, rows: pa.Table) -> pa.Table:
    """``rows`` (already cast to the write schema) with ``KEY``, ``PARTITION`` and the delete flag
    (``_hoodie_is_deleted``, null meaning false) appended."""
    deleted = (
        pc.fill_null(rows.column(IS_DELETED_COLUMN), False)
        if IS_DELETED_COLUMN in rows.column_names
        else pa.array(np.zeros(rows.num_rows, dtype=bool))
    )
    records = rows.append_column(KEY, kg.record_keys(rows)).append_column(PARTITION, kg.partition_paths(rows))
    return records.append_column(DELETED, deleted)


def combines(op: WriteOperation, options: dict[str, str]) -> bool:
    """Whether incoming records are deduplicated by key before writing (upserts and deletes always;
    the other operations unless ``hoodie.combine.before.insert=false``)."""
    return op in (WriteOperation.UPSERT, WriteOperation.DELETE) or bool(
        WriteConfig.COMBINE_BEFORE_INSERT.get(options)
    )


def prepare(
    table: TableHandle, current: pa.Schema | None, data: pa.Table, op: WriteOperation, options: dict[str, str]
) -> PreparedBatch:
    """Key, type and dedupe ``data`` for a write onto a table whose schema is ``current``."""
    data = data.drop_columns([c for c in data.column_names if c in META_COLUMNS])
    check_input_columns(data.column_names)
    kg = table.meta.key_generator
    if op is WriteOperation.DELETE:
        key_input = data.select(delete_key_fields(table, data.column_names))
        key_input = cast_to(key_input, delete_key_schema(current, key_input.schema))
        schema = current if current is not None else normalize_schema(key_input.schema)
        return PreparedBatch(
            op,
            merging.dedupe(delete_records(kg, key_input), MergeMode.COMMIT_TIME_ORDERING, None),
            schema,
            to_avro_schema(schema, table.meta.name),
        )

    schema = write_schema(table.meta, current, data.schema)
    records = keyed_records(kg, cast_to(data, schema))
    if combines(op, options):
        records = merging.dedupe(records, table.meta.merge_mode, table.meta.ordering_field)
    return PreparedBatch(op, records, schema, to_avro_schema(schema, table.meta.name))


def delete_ordering_field(meta: TableMeta) -> str | None:
    """The ordering field ``_hoodie_is_deleted`` rows bound for a log file must carry a value of
    (a delete block records each delete's ordering value, and readers compare it with the stored
    record's; Apache Hudi refuses records without one): Merge-on-Read tables under event-time
    ordering. None where the rule does not apply. Both engines check by it."""
    if meta.table_type is not TableType.MERGE_ON_READ or meta.merge_mode is not MergeMode.EVENT_TIME_ORDERING:
        return None
    return meta.ordering_field


def null_ordering_deletes_error(ordering: str) -> InvalidInputError:
    return InvalidInputError(
        f"{IS_DELETED_COLUMN} rows need a value in the ordering field {ordering!r} on a "
        "Merge-on-Read table (the delete block records it)"
    )


def check_soft_delete_ordering(table: TableHandle, records: pa.Table) -> None:
    """Refuse ``_hoodie_is_deleted`` rows without an ordering value where a delete block would
    have to carry it (:func:`delete_ordering_field`). The local engine checks a whole batch before
    its instant begins; planning checks the rows bound for log files."""
    refuse_null_ordering_deletes(records, delete_ordering_field(table.meta))


def refuse_null_ordering_deletes(records: pa.Table, ordering: str | None) -> None:
    """:func:`check_soft_delete_ordering` for records known to go to a log file of such a table."""
    if not ordering or ordering not in records.column_names:
        return
    deleted = records.filter(records.column(DELETED))
    if deleted.num_rows and deleted.column(ordering).null_count:
        raise null_ordering_deletes_error(ordering)


def parse_operation(operation: WriteOperation | str) -> WriteOperation:
    """A write operation (table services are refused)."""
    op = WriteOperation.parse(operation) if isinstance(operation, str) else operation
    if op in (WriteOperation.COMPACT, WriteOperation.CLUSTER):
        raise InvalidInputError(f"{op.value.lower()} is a table service, not a write operation")
    return op


def check_writable(table: TableHandle) -> None:
    if table.meta.version != 8:
        raise UnsupportedError(f"Inlet writes table version 8; this table is version {table.meta.version}")
