"""The common batch, converted column by column: :func:`columnar` (used by :func:`.rows.to_arrow`).

A batch whose changes all carry the bytes they were read from (``Change.raw``) and share one schema
is parsed once more as a whole, with message types that mirror ``ChangeRecord`` but declare every
field ``repeated``: protobuf merges a message field that occurs again, so the concatenated records
parse into one message whose fields hold the values of every change in order -- all LSNs in one
list, every ``after`` value in one list of encoded ``Value`` cells. Column ``j`` is every
``ncols``-th cell; its cells, concatenated and parsed again, give the column's values in one call
(a null cell is empty and an unchanged TOASTed one is ``B\\x00``; one value kind per column). No
Python code runs per value but for columns with nulls, TOAST placeholders or lists.

What it handles is the plain case: inserts, updates, snapshot reads and deletes of a table with a
primary key (the batch's record key), no ``before`` image on inserts and updates (REPLICA IDENTITY
DEFAULT), no primary-key change, no TRUNCATE, no global index lookups, and an unchanged TOASTed
value that an earlier change of the batch gives, or that the merge fills (a string or bytes column:
Debezium's placeholder). The values become exactly what :func:`.rows.to_arrow`'s row-by-row path
makes of them; anything else -- and any count that does not add up, any value that does not
convert -- returns None, and the row-by-row path converts the batch (and names a bad value).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from inlet.proto.changes.v1 import changes_pb2 as pb

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "inlet_writer_columns"

#: an encoded Value: null (no kind) and unchanged (field 8, an empty message)
_NULL = b""
_UNCHANGED = b"B\x00"
#: Value's fields (kinds) as the ``Cells`` message names them
_CELL_FIELDS = (
    "bool_value",
    "int_value",
    "double_value",
    "string_value",
    "bytes_value",
    "decimal_value",
    "list_value",
)


def _classes() -> tuple[Any, ...]:
    """``Records`` (concatenated ``ChangeRecord``s), ``Cells`` (concatenated ``Value``s) and ``Rows``
    (a ``Row`` or ``ListValue``, its values encoded)."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto3")
    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL

    def message(name: str, fields: list[tuple[int, str, int, int, str | None]]) -> None:
        m = fdp.message_type.add(name=name)
        for number, fname, typ, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=typ, label=label)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"

    message(
        "Cells",  # Value, every kind repeated
        [
            (1, "bool_value", _F.TYPE_BOOL, rep, None),
            (2, "int_value", _F.TYPE_SINT64, rep, None),
            (3, "double_value", _F.TYPE_DOUBLE, rep, None),
            (4, "string_value", _F.TYPE_STRING, rep, None),
            (5, "bytes_value", _F.TYPE_BYTES, rep, None),
            (6, "decimal_value", _F.TYPE_STRING, rep, None),
            (7, "list_value", _F.TYPE_BYTES, rep, None),
            (8, "unchanged", _F.TYPE_BYTES, rep, None),
        ],
    )
    message("Rows", [(1, "values", _F.TYPE_BYTES, rep, None)])  # Row: its Values still encoded
    message(
        "Sources",  # SourcePosition
        [
            (5, "lsn", _F.TYPE_INT64, rep, None),
            (6, "tx_id", _F.TYPE_INT64, rep, None),
            (7, "xmin", _F.TYPE_INT64, rep, None),
            (8, "source_ts_ms", _F.TYPE_INT64, rep, None),
            (9, "processed_ts_ms", _F.TYPE_INT64, rep, None),
        ],
    )
    message(
        "Events",  # ChangeEvent
        [
            (1, "table_id", _F.TYPE_STRING, rep, None),
            (2, "op", _F.TYPE_INT32, rep, None),
            (4, "key", _F.TYPE_MESSAGE, opt, "Rows"),
            (5, "before", _F.TYPE_MESSAGE, opt, "Rows"),
            (6, "after", _F.TYPE_MESSAGE, opt, "Rows"),
            (7, "schema", _F.TYPE_BYTES, rep, None),
            (9, "source", _F.TYPE_MESSAGE, opt, "Sources"),
            (11, "old_key", _F.TYPE_MESSAGE, opt, "Rows"),
        ],
    )
    message("Records", [(1, "change", _F.TYPE_MESSAGE, opt, "Events")])  # ChangeRecord
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return tuple(
        message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in ("Records", "Cells", "Rows")
    )


_Records, _Cells, _Rows = _classes()


class _Fallback(Exception):
    """The batch is not the plain case (or something does not add up): the row-by-row path."""


#: the tag byte that starts an encoded Value of each kind (field number << 3 | wire type)
_TAGS = {
    "bool_value": 0x08,
    "int_value": 0x10,
    "double_value": 0x19,
    "string_value": 0x22,
    "bytes_value": 0x2A,
    "decimal_value": 0x32,
    "list_value": 0x3A,
}


def _as_is(values: Any) -> list[Any]:
    return list(values)


def _texts(values: Any) -> list[Any]:
    return list(map(str, values))


def _reprs(values: Any) -> list[Any]:
    return list(map(repr, values))


def _conversions(arrow: pa.DataType) -> dict[str, Any]:
    """Per value kind this path takes for a column of type ``arrow``, how its values become what the
    row path (``rows._py``) makes of them; a kind not listed goes to the row path."""
    if pa.types.is_list(arrow):
        return {"list_value": None}  # see _decode
    if pa.types.is_decimal(arrow):  # decimal text, cast (checked) by Arrow; an integer as its text
        return {"decimal_value": _as_is, "int_value": _texts}
    if pa.types.is_string(arrow):  # numbers as text
        kinds = ("string_value", "decimal_value", "bytes_value", "bool_value")
        return {**dict.fromkeys(kinds, _as_is), "int_value": _texts, "double_value": _reprs}
    return dict.fromkeys(("int_value", "double_value", "string_value", "bytes_value", "bool_value"), _as_is)


def _decode(cells: list[bytes], col: pb.Column, arrow: pa.DataType, unchanged: Any) -> list[Any]:
    """The values of one column's encoded ``cells`` (``unchanged`` for a TOAST placeholder)."""
    values: list[Any] = _decode_counted(cells, col, arrow, unchanged)[0]
    return values


def _decode_counted(
    cells: list[bytes], col: pb.Column, arrow: pa.DataType, unchanged: Any
) -> tuple[Any, int]:
    """:func:`_decode`'s values and how many are ``unchanged``. A column of one kind taken as it is,
    without nulls or placeholders, is protobuf's repeated field itself (``pa.array`` reads it without
    a Python list: ~35 ns less a string value); any other is a list."""
    parsed = _Cells.FromString(b"".join(cells))
    nulls = cells.count(_NULL)
    unch = len(parsed.unchanged)
    if unch and cells.count(_UNCHANGED) != unch:  # only unchanged cells of exactly that encoding
        raise _Fallback
    conversions = _conversions(arrow)
    by_kind: dict[str, Any] = {}
    total = 0
    for name in _CELL_FIELDS:
        found = getattr(parsed, name)
        if not len(found):
            continue
        if name not in conversions:
            raise _Fallback
        total += len(found)
        if name == "list_value":
            base = _lists(list(found), col, arrow)
            by_kind[name] = list(range(len(base)))
        elif conversions[name] is _as_is and not nulls and not unch:
            by_kind[name] = found  # converted below if the column has another kind too
        else:
            by_kind[name] = conversions[name](found)
    if total + nulls + unch != len(cells):
        raise _Fallback  # a cell of two kinds, or one this path does not read
    if len(by_kind) > 1:  # kinds in cell order: each cell's tag byte says which
        its = {_TAGS[name]: iter(values) for name, values in by_kind.items()}
        out = [None if c == _NULL else unchanged if c == _UNCHANGED else next(its[c[0]]) for c in cells]
        return out, unch
    values = next(iter(by_kind.values())) if by_kind else []
    if nulls or unch:
        it = iter(values)
        values = [None if c == _NULL else unchanged if c == _UNCHANGED else next(it) for c in cells]
    if pa.types.is_list(arrow):
        return _Lists(values, base if by_kind else pa.array([], arrow)), unch
    return values, unch


class _Lists(list):  # type: ignore[type-arg]
    """A list column's values: each an index into ``base`` (the decoded lists, an Arrow array), so
    no Python list is built per row (a copied TOASTed value copies the index)."""

    def __init__(self, values: list[Any], base: pa.Array) -> None:
        super().__init__(values)
        self.base = base

    def like(self, values: list[Any]) -> _Lists:
        return _Lists(values, self.base)


def _lists(encoded: list[bytes], col: pb.Column, arrow: pa.DataType) -> pa.Array:
    """Encoded ListValues as an Arrow list array: every list's elements decoded as one column."""
    lengths = [len(_Rows.FromString(v).values) for v in encoded]
    elements = list(_Rows.FromString(b"".join(encoded)).values)
    if len(elements) != sum(lengths):
        raise _Fallback
    flat = _decode(elements, col.element, arrow.value_type, None)  # an unchanged element is null
    offsets = pa.array([0, *itertools.accumulate(lengths)], pa.int32())
    return pa.ListArray.from_arrays(offsets, _array(flat, arrow.value_type), type=arrow)


def _positions(values: list[Any], item: Any) -> list[int]:
    """Where ``item`` (compared by identity first, as ``list.index`` does) is in ``values``."""
    out: list[int] = []
    at = -1
    try:
        while True:
            at = values.index(item, at + 1)
            out.append(at)
    except ValueError:
        return out


def _key_texts(columns: list[list[Any]]) -> list[str]:
    """Each row's key text as the row path's ``key_of`` makes it (``repr`` of each key value)."""
    if len(columns) == 1:
        return list(map(repr, columns[0]))
    return ["\x00".join(parts) for parts in zip(*(map(repr, c) for c in columns), strict=True)]


def _optional(values: Sequence[int], n: int, per_event: Any) -> list[int | None]:
    """A SourcePosition field (0 = not sent) of every change: from the merged list when every change
    (or none) sent it, else read change by change."""
    if len(values) == n:
        return list(values)
    if not len(values):
        return [None] * n
    return [per_event(i) or None for i in range(n)]


def columnar(
    changes: Sequence[Any],
    key_fields: Sequence[str] | None,
    partition_fields: Sequence[str],
    global_index: bool,
) -> pa.Table | None:
    """The upsert input of ``changes`` (``rows.Change``s) as :func:`.rows.to_arrow` builds it with
    these arguments, or None when the batch is not the plain case (see the module docstring)."""
    from inlet.services.writer import rows as R

    if not changes or any(ch.raw is None for ch in changes):
        return None
    try:
        fields, schema_keys = R.batch_schema(changes[:1])  # the batch's, when every change has its schema
        keys = list(key_fields) if key_fields is not None else schema_keys
        names = {f.name for f in fields}
        if (
            not keys
            or keys == [R.SYNTHETIC_KEY_COL]
            or any(k not in names for k in [*keys, *partition_fields])
        ):
            return None
        if global_index and any(p not in keys for p in partition_fields):
            return None
        return _columnar(changes, fields, keys)
    except (_Fallback, R.RowError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _columnar(
    changes: Sequence[Any],
    fields: list[pa.Field],
    key_names: Sequence[str],
) -> pa.Table | None:
    from inlet.services.writer import rows as R

    n = len(changes)
    raws = [ch.raw for ch in changes]
    first = changes[0].event
    schema = first.schema
    names = [c.name for c in schema.columns]
    ncols = len(names)
    types = {f.name: f.type for f in fields}
    meta_names = {f.name for f in R.META_FIELDS} | {R.SYNTHETIC_KEY_COL}
    if (
        not ncols
        or [f.name for f in fields] != names
        or list(key_names) != R.key_columns(schema)
        or meta_names & set(names)
    ):
        raise _Fallback
    ev_all = _Records.FromString(b"".join(raws)).change
    schemas = ev_all.schema
    if len(schemas) != n or len(set(schemas)) != 1 or schemas[0] != schema.SerializeToString():
        raise _Fallback  # one schema, the first change's
    ops = list(ev_all.op)
    if len(ops) != n or not set(ops) <= R.OPS.keys() or len(ev_all.old_key.values):
        raise _Fallback
    deleted = [op == pb.OPERATION_DELETE for op in ops]
    n_del = sum(deleted)
    before_cells = ev_all.before.values
    has_before = [ch.event.HasField("before") for ch in changes] if len(before_cells) else [False] * n
    if any(b and not d for b, d in zip(has_before, deleted, strict=True)):
        raise _Fallback  # an insert or update with its old image: the row path (key changes, FULL)
    after_cells = ev_all.after.values
    if len(after_cells) != ncols * (n - n_del):
        raise _Fallback
    by_name = {c.name: (i, c) for i, c in enumerate(schema.columns)}
    key_pos = [by_name[k][0] for k in key_names]
    for k in key_names:
        kt = types[k]
        if pa.types.is_decimal(kt) or pa.types.is_floating(kt) or pa.types.is_list(kt):
            raise _Fallback  # their key text differs between the paths' value forms
    unchanged = R.UNCHANGED
    after_flat = list(after_cells)
    decoded = [
        _decode_counted(after_flat[j::ncols], col, types[col.name], unchanged)
        for j, col in enumerate(schema.columns)
    ]
    after_cols = [values for values, _ in decoded]
    if any(decoded[p][1] for p in key_pos):
        raise _Fallback
    del_cols: list[list[Any]] = []
    if n_del:
        # a delete's row: its before image (unchanged values are null), with the key's values
        before_flat = list(before_cells)
        n_before = sum(has_before)
        if len(before_flat) != ncols * n_before:
            raise _Fallback
        before_cols = [
            _decode(before_flat[j::ncols], col, types[col.name], None) for j, col in enumerate(schema.columns)
        ]
        key_flat = list(ev_all.key.values)
        nkeys = len(key_names)
        if len(key_flat) != nkeys * n:
            raise _Fallback
        del_idx = [i for i in range(n) if deleted[i]]
        if n_before == n_del:
            del_cols = before_cols
        else:  # deletes without an old image: nulls but for the key
            it_before = [iter(c) for c in before_cols]
            with_before = [has_before[i] for i in del_idx]
            del_cols = [[next(it) if b else None for b in with_before] for it in it_before]
            del_cols = [
                c.like(d) if isinstance(c, _Lists) else d for c, d in zip(before_cols, del_cols, strict=True)
            ]
        for ki, p in enumerate(key_pos):
            cells = key_flat[ki::nkeys]
            cells = [cells[i] for i in del_idx]
            if _UNCHANGED in cells:
                raise _Fallback
            del_cols[p] = _decode(cells, schema.columns[p], types[key_names[ki]], None)
    # each change's record key (the row path's key text) and the TOAST placeholders' previous versions
    after_keys = _key_texts([after_cols[p] for p in key_pos])
    del_keys = _key_texts([del_cols[p] for p in key_pos]) if n_del else []
    toasted = [j for j, (_, unch) in enumerate(decoded) if unch]
    if toasted:
        prev: list[int | None] = []  # per after row: the after row of the key's previous version, -1 deleted
        last: dict[str, int] = {}
        ia = idel = 0
        for d in deleted:
            if d:
                last[del_keys[idel]] = -1
                idel += 1
            else:
                rk = after_keys[ia]
                prev.append(last.get(rk))
                last[rk] = ia
                ia += 1
        for j in toasted:
            column = after_cols[j]
            arrow = types[names[j]]
            placeholder = R._placeholder(arrow)
            for i in _positions(column, unchanged):
                p_row = prev[i]
                if p_row is None:  # the stored row's value: the merge fills the placeholder
                    if placeholder is unchanged:
                        raise _Fallback  # read from the table: the row path
                    column[i] = placeholder
                elif p_row < 0:
                    column[i] = None  # the key did not exist before
                else:
                    column[i] = column[p_row]
    # the change's meta columns
    src = ev_all.source
    lsns = list(src.lsn)
    if len(lsns) != n:
        lsns = [ch.event.source.lsn for ch in changes]
    reads = pb.OPERATION_READ in ops
    meta: dict[str, list[Any]] = {
        R.OP_COL: [R.OPS[op] for op in ops],
        R.PROCESSED_TS_COL: _optional(
            src.processed_ts_ms, n, lambda i: changes[i].event.source.processed_ts_ms
        ),
        R.SHARD_COL: _shards(list(ev_all.table_id), changes),
        R.ORIGIN_TS_COL: _optional(src.source_ts_ms, n, lambda i: changes[i].event.source.source_ts_ms),
        R.TX_ID_COL: _optional(src.tx_id, n, lambda i: changes[i].event.source.tx_id),
        R.LSN_COL: [
            R.SNAPSHOT_ORDERING if op == pb.OPERATION_READ else x for op, x in zip(ops, lsns, strict=True)
        ]
        if reads
        else lsns,
        R.XMIN_COL: _optional(src.xmin, n, lambda i: changes[i].event.source.xmin),
        R.DELETED_COL: deleted,
    }
    arrays: list[pa.Array] = []
    perm: pa.Array | None = None
    if n_del:
        ia, idel, order = 0, n - n_del, []
        for d in deleted:
            if d:
                order.append(idel)
                idel += 1
            else:
                order.append(ia)
                ia += 1
        perm = pa.array(order, pa.int64())
    for j, f in enumerate(fields):
        a = _array(after_cols[j], f.type)
        if perm is not None:
            a = pa.concat_arrays([a, _array(del_cols[j], f.type)]).take(perm)
        arrays.append(a)
    out_fields = [*fields, *R.META_FIELDS]
    arrays.extend(pa.array(meta[f.name], f.type) for f in R.META_FIELDS)
    return pa.Table.from_arrays(arrays, schema=pa.schema(out_fields))


def _array(values: list[Any], arrow: pa.DataType) -> pa.Array:
    if isinstance(values, _Lists):  # indices into the decoded lists
        return values.base.take(pa.array(values, pa.int64()))
    if pa.types.is_decimal(arrow):  # exact decimal text; a value that does not fit raises (row path)
        return pa.array(values, pa.string()).cast(arrow)
    return pa.array(values, arrow)


def _shards(table_ids: list[str], changes: Sequence[Any]) -> list[str | None]:
    """``db_shard_source_partition`` of every change: its table id's first part (None without one)."""
    if len(table_ids) != len(changes):  # some change has no table id
        table_ids = [ch.event.table_id for ch in changes]
    shards: dict[str, str | None] = {}
    for t in set(table_ids):
        shards[t] = t.split(".", 1)[0] if t else None
    return [shards[t] for t in table_ids]
