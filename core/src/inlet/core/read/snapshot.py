"""Snapshot, time-travel and read-optimized reads of Copy-on-Write and Merge-on-Read tables.

- Copy-on-Write, and Merge-on-Read ``read_optimized``: the base file of each visible file slice.
- Merge-on-Read ``snapshot``: each visible file slice's base file merged with its log files
  (:mod:`inlet.core.file_group.reader`), one file group at a time.

Partition pruning uses the partition values encoded in partition paths; file and row-group
pruning uses Parquet statistics (pyarrow's filtered Parquet scan) for slices without log files.
Slices with log files are filtered after merging (a base record that fails a filter may still be
replaced by a log record that passes it, and the other way round). Files written before a schema
change are read with the current schema (new columns null, promoted types cast).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from inlet.core.config import TableConfig, TableType
from inlet.core.errors import InvalidInputError
from inlet.core.file_group.reader import BlockFilter, merge_columns, read_file_slice
from inlet.core.file_group.view import BaseFile, CommittedInstants, FileSlice
from inlet.core.merge.records import DEBEZIUM_UNAVAILABLE_VALUE, MergeConfig
from inlet.core.read.options import Filter, QueryType
from inlet.core.schema import META_COLUMNS, cast_to, meta_schema
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.instant import normalize_instant_time

_OPS = {"=", "==", "!=", "<>", "<", "<=", ">", ">=", "in", "not in"}
# Hudi's FILL_UNAVAILABLE partial-update marker (RECORD_MERGE_PROPERTY_PREFIX + "partial.update.unavailable.value")


def _decimal_scalar(value: Any) -> pa.Scalar:
    """A decimal scalar holding ``value`` exactly, in its own precision and scale.

    It is not cast to the column's type: ``amount > 1000`` must work on a DECIMAL(15,2) column
    (an int64 does not fit 15 digits) and ``amount > 999.995`` must not be rounded to the
    column's scale. Arrow compares decimals of different precision and scale exactly.
    """
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if isinstance(value, bool) or not isinstance(value, int | float | str | decimal.Decimal):
        raise ValueError(f"not a number: {value!r}")
    try:
        number = decimal.Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except decimal.InvalidOperation as e:
        raise ValueError(f"not a number: {value!r}") from e
    if not number.is_finite():
        raise ValueError(f"not a finite number: {value!r}")
    return pa.scalar(number)


def _timestamp_scalar(value: str, typ: pa.TimestampType) -> pa.Scalar:
    """A timestamp from text; on a zoned column, text without an offset is taken as UTC."""
    text = value.strip()
    if not typ.tz:
        return pa.scalar(text).cast(typ)
    try:
        return pa.scalar(text).cast(typ)  # ISO-8601 with an offset (``Z``, ``+01:00``)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        naive = pa.scalar(text).cast(pa.timestamp(typ.unit))
        return pc.assume_timezone(naive, "UTC").cast(typ)


def _coerce(value: Any, typ: pa.DataType, column: str) -> Any:
    if isinstance(value, list | tuple | set):
        return [_coerce(v, typ, column) for v in value]
    try:
        if value is not None and pa.types.is_decimal(typ):
            return _decimal_scalar(value)
        if isinstance(value, str) and not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            if pa.types.is_boolean(typ):
                return pa.scalar(value.strip().lower() in ("true", "1", "yes"))
            if pa.types.is_timestamp(typ):
                return _timestamp_scalar(value, typ)
            return pa.scalar(value).cast(typ)
        return pa.scalar(value).cast(typ) if not isinstance(value, pa.Scalar) else value.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise InvalidInputError(f"filter value {value!r} does not fit column {column!r} of type {typ}") from e


def _value_array(values: Sequence[Any], typ: pa.DataType) -> pa.Array:
    """The array of an ``in`` list; decimals the column cannot hold exactly are left out
    (no value of the column can equal them)."""
    items = []
    for x in values:
        if isinstance(x, pa.Scalar):
            if pa.types.is_decimal(typ) and x.is_valid:
                try:
                    x = x.cast(typ)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
            items.append(x.as_py())
        else:
            items.append(x)
    return pa.array(items, typ)


def filter_expression(filters: Sequence[Filter], schema: pa.Schema) -> ds.Expression | None:
    expr: ds.Expression | None = None
    for f in filters:
        if len(f) != 3:
            raise InvalidInputError(f"a filter is (column, op, value), got {f!r}")
        col, op, value = f
        op = op.strip().lower()
        if op not in _OPS:
            raise InvalidInputError(f"unknown filter operator {op!r} (use one of {', '.join(sorted(_OPS))})")
        if col not in schema.names:
            raise InvalidInputError(f"unknown column {col!r} in filter")
        field = ds.field(col)
        v = _coerce(value, schema.field(col).type, col)
        if op in ("in", "not in"):
            values = v if isinstance(v, list) else [v]
            e = field.isin(_value_array(values, schema.field(col).type))
            if op == "not in":
                e = ~e
        elif op in ("=", "=="):
            e = field == v
        elif op in ("!=", "<>"):
            e = field != v
        elif op == "<":
            e = field < v
        elif op == "<=":
            e = field <= v
        elif op == ">":
            e = field > v
        else:
            e = field >= v
        expr = e if expr is None else expr & e
    return expr


def _partition_matches(
    table: TableHandle, partition: str, filters: Sequence[Filter], schema: pa.Schema
) -> bool:
    kg = table.meta.key_generator
    if not kg.partition_fields or kg.timestamp is not None:
        return True
    values = kg.partition_values(partition)
    relevant = [f for f in filters if f[0] in values]
    if not relevant:
        return True
    row: dict[str, list[Any]] = {}
    for name, text in values.items():
        typ = schema.field(name).type if name in schema.names else pa.string()
        try:
            row[name] = [pa.scalar(text).cast(typ).as_py() if text is not None else None]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True  # cannot interpret the path value; let the row filter decide
    one = pa.table(
        {k: pa.array(v, schema.field(k).type if k in schema.names else pa.string()) for k, v in row.items()}
    )
    expr = filter_expression(relevant, one.schema)
    return expr is None or one.filter(expr).num_rows > 0


def merge_config(table: TableHandle) -> MergeConfig:
    """How ``table`` merges records (its merge mode, ordering field and partial-update marker)."""
    return MergeConfig(
        mode=table.meta.merge_mode,
        ordering_field=table.meta.ordering_field,
        unavailable_value=TableConfig.PARTIAL_UPDATE_UNAVAILABLE_VALUE.get(table.meta.props)
        or DEBEZIUM_UNAVAILABLE_VALUE,
        # keys come from _hoodie_record_key; tables without meta fields recompute them
        key_generator=None if table.meta.populate_meta_fields else table.meta.key_generator,
    )


@dataclass
class ReadPlan:
    """What a read returns and which file slices it reads (after partition pruning).

    Plain values (picklable): :func:`read_slice` reads one of ``slices`` anywhere the table's
    storage is reachable, e.g. in a Spark task.
    """

    slices: list[FileSlice]
    out_schema: pa.Schema  # the columns returned, in order
    read_schema: pa.Schema  # out_schema's columns plus those the filters need
    queryable: pa.Schema  # meta columns + data columns (what filters and columns may name)
    filters: list[Filter]
    merge: MergeConfig | None  # None: base files only (Copy-on-Write, read-optimized)
    blocks: BlockFilter
    as_of: str | None = None
    pruned_slices: int = 0  # slices left out by partition pruning


def plan_read(
    table: TableHandle,
    as_of: str | None = None,
    columns: Sequence[str] | None = None,
    filters: Sequence[Filter] | None = None,
    meta_columns: bool = True,
    query_type: QueryType | str = QueryType.SNAPSHOT,
) -> ReadPlan:
    """The file slices a snapshot or read-optimized read of ``table`` touches (partition-pruned by
    ``filters``) and its schemas."""
    qt = QueryType.parse(query_type)
    if qt is QueryType.INCREMENTAL:
        raise InvalidInputError("incremental queries read a range of commits: use read_changes")
    as_of_t = normalize_instant_time(as_of) if as_of else None
    snap = table.snapshot(as_of_t)
    view = snap.view
    merge_logs = qt is QueryType.SNAPSHOT and table.meta.table_type is TableType.MERGE_ON_READ
    if merge_logs:
        slices = view.latest_file_slices()
    else:
        slices = [FileSlice(b.partition, b.file_id, b.instant_time, b) for b in view.latest_base_files()]
    files = [s.base_file for s in slices if s.base_file is not None]
    data_schema = snap.schema
    if data_schema is None:
        data_schema = _schema_from_files(table, files)
    with_meta = meta_columns and bool(TableConfig.POPULATE_META_FIELDS.get(table.meta.props))
    full = pa.schema((list(meta_schema()) if with_meta else []) + list(data_schema))
    queryable = pa.schema(list(meta_schema()) + [f for f in data_schema if f.name not in META_COLUMNS])
    if columns is not None:
        unknown = [c for c in columns if c not in queryable.names]
        if unknown:
            raise InvalidInputError(f"unknown column(s): {', '.join(unknown)}")
        out_schema = pa.schema([queryable.field(c) for c in columns])
    else:
        out_schema = full
    filters = list(filters or [])
    filter_expression(filters, queryable)  # validates the filters before any file is read
    needed = list(dict.fromkeys([*out_schema.names, *(f[0] for f in filters)]))
    read_schema = pa.schema([queryable.field(c) for c in needed])
    kept = [fs for fs in slices if not filters or _partition_matches(table, fs.partition, filters, queryable)]
    config = merge_config(table) if merge_logs else None
    return ReadPlan(
        slices=kept,
        out_schema=out_schema,
        read_schema=read_schema,
        queryable=queryable,
        filters=filters,
        merge=config,
        blocks=BlockFilter(CommittedInstants.of(view), as_of_t),
        as_of=as_of_t,
        pruned_slices=len(slices) - len(kept),
    )


def read_slice(
    table: TableHandle, plan: ReadPlan, fs: FileSlice, expr: ds.Expression | None = None
) -> Iterator[pa.Table]:
    """The rows of one planned file slice (filtered, with ``plan.out_schema``'s columns), in pieces:
    a base file at once, a merged slice batch by batch. ``expr``: the plan's filters as an
    expression, when the caller built it once for all its slices (a long ``in`` list costs)."""
    if expr is None:
        expr = filter_expression(plan.filters, plan.queryable)
    if plan.merge is not None and fs.log_files:
        merge_schema = pa.schema(
            [
                plan.queryable.field(c)
                for c in merge_columns(plan.read_schema.names, plan.queryable, plan.merge)
            ]
        )
        for piece in read_file_slice(table.storage, fs, merge_schema, plan.merge, plan.blocks):
            if expr is not None:
                piece = piece.filter(expr)
            if piece.num_rows:
                yield piece.select(plan.out_schema.names)
    elif fs.base_file is not None:
        yield _read_file(table, fs.base_file, plan.read_schema, expr).select(plan.out_schema.names)


def read_table(
    table: TableHandle,
    as_of: str | None = None,
    columns: Sequence[str] | None = None,
    filters: Sequence[Filter] | None = None,
    meta_columns: bool = True,
    query_type: QueryType | str = QueryType.SNAPSHOT,
) -> pa.Table:
    plan = plan_read(table, as_of, columns, filters, meta_columns, query_type)
    expr = filter_expression(plan.filters, plan.queryable)
    pieces = [piece for fs in plan.slices for piece in read_slice(table, plan, fs, expr)]
    if not pieces:
        return plan.out_schema.empty_table()
    return pa.concat_tables(pieces)


def _read_file(table: TableHandle, bf: BaseFile, schema: pa.Schema, expr: ds.Expression | None) -> pa.Table:
    storage = table.storage
    dataset = ds.dataset(storage.full(bf.path), format="parquet", filesystem=storage.fs)
    present = [c for c in schema.names if c in dataset.schema.names]
    can_push = expr is not None and all(c in dataset.schema.names for c in _expr_columns(expr, schema))
    t = dataset.to_table(columns=present, filter=expr if can_push else None)
    t = cast_to(t, schema)
    if expr is not None and not can_push:
        t = t.filter(expr)
    return t


def _expr_columns(expr: ds.Expression, schema: pa.Schema) -> list[str]:
    text = str(expr)
    return [c for c in schema.names if c in text]


def _schema_from_files(table: TableHandle, files: list[BaseFile]) -> pa.Schema:
    if not files:
        return pa.schema([])
    arrow = table.storage.parquet_file(files[-1].path).schema_arrow
    return pa.schema([f for f in arrow if f.name not in META_COLUMNS])
