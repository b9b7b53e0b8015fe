"""What the row conversion reads from the target table: the stored rows of some keys (a
TOAST-unchanged value, a key's current partition) and every stored key (a TRUNCATE)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.rows import LSN_COL, Change, key_values, table_rows, to_arrow


def every_key(table: HudiTable, columns: Sequence[str]) -> pa.Table | None:
    """``columns`` of every stored row, as Arrow columns (a large table's keys are no Python objects)."""
    if table.schema() is None:
        return None
    return table.read(columns=list(columns), meta_columns=False)


def rows_of_keys(
    table: HudiTable, images: list[dict[str, Any]], columns: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The stored rows (``columns`` of them, all by default) whose first record key field has a
    value among ``images``'; the caller matches whole keys."""
    if table.schema() is None:
        return []
    first = table.record_key_fields[0]
    values = sorted({i[first] for i in images if i.get(first) is not None}, key=repr)
    cols = list(columns) if columns is not None else None
    try:
        found = table.read(
            columns=cols, filters=[(first, "in", key_values(table, first, values))], meta_columns=False
        )
    except OverflowError:  # a date/timestamp key past year 9999 cannot be a filter value
        found = table.read(columns=cols, meta_columns=False)
    return table_rows(found)


def batch_input(changes: Sequence[Change], table: HudiTable) -> pa.Table:
    """The upsert input for ``changes`` into ``table`` (:func:`~.rows.to_arrow` with the table's
    lookups). A table partitioned by columns outside its record key looks up where the batch's keys
    are stored (a global index: one read of the key, partition and ``_event_lsn`` columns of those
    keys per batch, as Apache Hudi's global simple index reads every partition's keys)."""
    keys = list(table.record_key_fields)
    parts = [p for p in table.partition_fields if p not in keys]
    truncates = any(c.event.op == pb.OPERATION_TRUNCATE for c in changes)
    return to_arrow(
        changes,
        key_fields=keys,
        table_schema=table.schema() if truncates else None,
        existing_keys=lambda: every_key(table, [*keys, *parts]),
        current_rows=lambda images: rows_of_keys(table, images),
        partition_fields=table.partition_fields,
        stored_locations=lambda images: _locations(table, images, [*keys, *parts]),
    )


def _locations(table: HudiTable, images: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
    """The key, partition and ordering (``_event_lsn``, when the table has it) columns of the stored
    rows of ``images``' keys."""
    schema = table.schema()
    if schema is None:
        return []
    return rows_of_keys(table, images, [*columns, *([LSN_COL] if LSN_COL in schema.names else [])])
