"""The lake side of ``inlet verify``: a replicated table's rows as a reader of the Hudi table sees them.

The table is read with Inlet's snapshot reader (Merge-on-Read log files merged, the latest file
slices only), one file slice at a time; each piece is reduced to keys and row hashes right away.
Only the columns the source compares are read, plus the writer's delete markers: rows with
``_hoodie_is_deleted = true`` or Debezium's op ``d`` are not rows of the table (the reader already
drops merged deletes; a base file should hold none). Hudi's meta columns (``_hoodie_*``) and the
writer's Debezium columns (``_change_operation_type``, ``_event_lsn``, ... see
:mod:`inlet.services.writer.rows`) are never compared. Each compared column is cast to the
source's (writer's) type; a column the lake lacks compares as null.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from inlet.core import HudiTable
from inlet.core.read.snapshot import plan_read, read_slice
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.services.verify.compare import Hashed, row_hashes
from inlet.services.writer.rows import DELETED_COL, META_FIELDS, OP_COL, SHARD_COL

WRITER_COLUMNS = frozenset(f.name for f in META_FIELDS)  # the writer's Debezium columns and delete flag


class LakeError(RuntimeError):
    """The lake table cannot be compared (one line)."""


def open_table(path: str) -> HudiTable | None:
    """The Hudi table at ``path`` (None when there is none)."""
    if not Storage(path).exists(props_io.PROPERTIES_PATH):
        return None
    return HudiTable.open(path)


def lake_tables(lake_root: str, database: str) -> list[tuple[str, str]]:
    """(schema, table) of the Hudi tables under ``<lake_root>/<database>/<schema>/<table>``."""
    storage = Storage(f"{lake_root.rstrip('/')}/{database}")
    found = []
    for schema_dir in _dirs(storage, storage.root):
        for table_dir in _dirs(storage, schema_dir):
            if storage.fs.get_file_info(f"{table_dir}/.hoodie/hoodie.properties").type == pafs.FileType.File:
                found.append((schema_dir.rsplit("/", 1)[-1], table_dir.rsplit("/", 1)[-1]))
    return sorted(found)


def _dirs(storage: Storage, path: str) -> list[str]:
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
    return [i.path for i in storage.fs.get_file_info(selector) if i.type == pafs.FileType.Directory]


def progress_marker(path: str) -> str:
    """Changes whenever an instant completes on the table's timeline."""
    table = open_table(path)
    if table is None:
        return ""
    completed = table.timeline.completed()
    return max((f"{i.completion_time or i.time}.{i.time}" for i in completed), default="")


@dataclass
class LakeRead:
    hashed: Hashed
    rows: pa.Table | None  # the compared columns of every row read, when asked for
    shard: str | None  # a db_shard_source_partition value (the Debezium topic prefix), if any
    lake_only: list[str]  # data columns of the lake the source does not have


def read_hashed(
    table: HudiTable,
    fields: Sequence[pa.Field],
    keys: Sequence[str],
    *,
    only_keys: pa.Table | None = None,
    keep_rows: bool = False,
    extra_columns: Sequence[str] = (),
    progress: Callable[[int, int, int], None] | None = None,
) -> LakeRead:
    """The live rows of ``table`` as keys + hashes over ``fields`` (cast to their types).

    ``only_keys``: just the rows with those keys. ``keep_rows``: also return the rows (``fields``
    plus ``extra_columns`` the lake has, as stored). ``progress(slices done, slices, rows)``."""
    schema = table.schema()
    key_schema = pa.schema([f for f in fields if f.name in keys])
    key_schema = pa.schema([key_schema.field(k) for k in keys])
    target = pa.schema(list(fields))
    if schema is None:  # created, never written
        empty = target.empty_table()
        return LakeRead(Hashed.empty(key_schema), empty if keep_rows else None, None, [])
    compared = {f.name for f in fields}
    present = [f.name for f in fields if f.name in schema.names]
    markers = [c for c in (DELETED_COL, OP_COL, SHARD_COL) if c in schema.names]
    extra = [c for c in extra_columns if c in schema.names and c not in compared]
    lake_only = [n for n in schema.names if n not in compared and n not in WRITER_COLUMNS]
    columns = list(dict.fromkeys([*present, *markers, *extra]))
    plan = plan_read(table, columns=columns, meta_columns=False)
    wanted: np.ndarray | None = None
    if only_keys is not None:
        wanted = np.unique(row_hashes(only_keys.cast(key_schema), keys))
    parts: list[Hashed] = []
    kept: list[pa.Table] = []
    shard: str | None = None
    rows = 0
    for done, fs in enumerate(plan.slices, 1):
        for piece in read_slice(table, plan, fs):
            piece = _live(piece)
            if shard is None and SHARD_COL in piece.column_names:
                found = pc.drop_null(piece.column(SHARD_COL))
                shard = str(found[0]) if len(found) else None
            data = _conform(piece, target)
            if wanted is not None and data.num_rows:
                mask = np.isin(row_hashes(data, keys), wanted)
                data = data.filter(pa.array(mask))
                piece = piece.filter(pa.array(mask))
            if not data.num_rows:
                continue
            parts.append(Hashed.of(data, keys, target.names))
            if keep_rows:
                kept.append(_with_extra(data, piece, extra))
            rows += data.num_rows
        if progress is not None:
            progress(done, len(plan.slices), rows)
    hashed = Hashed.concat(parts, key_schema)
    rows_table = None
    if keep_rows:
        rows_table = pa.concat_tables(kept) if kept else target.empty_table()
    return LakeRead(hashed, rows_table, shard, lake_only)


def _live(piece: pa.Table) -> pa.Table:
    """Without soft-deleted rows (``_hoodie_is_deleted``, Debezium op ``d``)."""
    mask = None
    if DELETED_COL in piece.column_names:
        mask = pc.invert(pc.fill_null(piece.column(DELETED_COL), False))
    if OP_COL in piece.column_names:
        not_d = pc.fill_null(pc.not_equal(piece.column(OP_COL), "d"), True)
        mask = not_d if mask is None else pc.and_(mask, not_d)
    if mask is None or pc.all(mask).as_py() is not False:
        return piece
    return piece.filter(mask)


def _conform(piece: pa.Table, target: pa.Schema) -> pa.Table:
    arrays = []
    for f in target:
        if f.name not in piece.column_names:
            arrays.append(pa.nulls(piece.num_rows, f.type))
            continue
        column = piece.column(f.name)
        if column.type != f.type:
            try:
                column = column.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise LakeError(
                    f"column {f.name!r}: the lake's {column.type} does not convert to the source's {f.type}: {e}"
                ) from None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=target)


def _with_extra(data: pa.Table, piece: pa.Table, extra: Sequence[str]) -> pa.Table:
    for name in extra:
        data = data.append_column(piece.schema.field(name), piece.column(name))
    return data
