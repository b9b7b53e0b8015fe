"""ChangeEvents -> one Arrow table for one Hudi upsert.

Column types (ColumnType -> Arrow; chosen so Hudi's Avro schema, Spark and hudi-rs all read them):

==================  ===================================================================
BOOLEAN             bool
INT16, INT32        int32 (Avro has no 16-bit int; Hudi/Spark read Avro ``int``)
INT64               int64
FLOAT32 / FLOAT64   float32 / float64
DECIMAL(p, s)       decimal128(p, s) when the source declares 1 <= p <= 38 (all 38 digits exact);
                    otherwise string: the exact decimal text (PostgreSQL ``numeric`` without a
                    typmod, or with more than 38 digits, has no decimal128 that holds every value)
STRING, JSON, UUID  string
BYTES               binary
DATE                date32 (any int32 day: 'infinity' / '-infinity' are its largest / smallest)
TIME_MICROS         int64, microseconds since midnight (Spark has no TIME type)
TIMESTAMP_MICROS*   timestamp(us, UTC) (wall-clock timestamps are stored as if UTC; 'infinity' /
                    '-infinity' are the largest / smallest int64)
DURATION_MICROS     int64 microseconds
LIST                list<element>
==================  ===================================================================

Dates and timestamps go into Arrow as their day and microsecond numbers, never through Python's
``datetime`` (which ends at year 9999). A value that does not fit its column is a :class:`RowError`
naming the table, the column and the value: bad input, never retried as if it were transient.

Columns Apache Hudi's ``PostgresDebeziumSource`` adds (names from ``DebeziumConstants``):
``_change_operation_type`` (c/u/d/r), ``_upstream_event_processed_ts_ms``, ``db_shard_source_partition``,
``_event_origin_ts_ms``, ``_event_tx_id``, ``_event_lsn``, ``_event_xmin`` (longs but the op and shard),
plus ``_hoodie_is_deleted``. Deletes are rows with ``_hoodie_is_deleted = true`` carrying the key
(and the ``before`` image when sent), so one upsert orders inserts, deletes and re-inserts of a key by
``_event_lsn`` (EVENT_TIME_ORDERING). An UPDATE whose key changed also deletes the old key; in a
table without a primary key, keyed by the whole row, that is every UPDATE that changes a value.

Snapshot reads (Debezium ``r`` events, and the COPY initial load's rows) carry
:data:`SNAPSHOT_ORDERING` (0) as ``_event_lsn``, not the snapshot's LSN, so they lose to every
streamed change of their key whatever its LSN: a transaction still open at a snapshot's point is
missing from the snapshot and streams when it commits, with change LSNs *below* that point
(PostgreSQL's snapshot builder becomes consistent in steps; one that began between them is decoded
whole yet invisible to the exported snapshot). Between streamed changes the LSN decides; between two
snapshot reads of a key the later write wins (Hudi's tie rule). Debezium's incremental (signal-based)
snapshots (``inlet backfill``, :mod:`inlet.services.backfill`) are ``r`` events too, without an LSN,
and get 0 as well: a chunk row whose key changed in the chunk's window is dropped by Debezium, and a
change the chunk missed because its transaction was still open streams after the row with a lower LSN
and must win (tests/integration/cdc_consumer/test_backfill_live.py holds such a transaction open).
So an incremental snapshot fills keys the lake lacks but never overwrites a row the stream wrote (to
resynchronise a lake that drifted, ``inlet verify --repair`` writes at a real LSN; docs/backfill.md).

TOAST: an ``Unchanged`` value takes the key's previous value (see :func:`to_arrow`): from ``before``,
from the key's earlier change in the batch, or from the stored row -- for a string/bytes column as
Debezium's placeholder ``__debezium_unavailable_value``, which the merge (Copy-on-Write) and Inlet's
reader and compaction (Merge-on-Read) replace with the stored value, as Hudi's FILL_UNAVAILABLE
partial update does; for other types, and for the new key of a primary-key change (``old_key``), read
from the table here.
"""

from __future__ import annotations

import decimal
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from inlet.core.schema import IS_DELETED_COLUMN
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer.decode import row_record_key
from inlet.services.cdc_consumer.errors import DecodeError
from inlet.services.writer.columns import columnar

log = logging.getLogger("inlet.writer.rows")

PLACEHOLDER = "__debezium_unavailable_value"
OP_COL = "_change_operation_type"
PROCESSED_TS_COL = "_upstream_event_processed_ts_ms"
SHARD_COL = "db_shard_source_partition"
ORIGIN_TS_COL = "_event_origin_ts_ms"
TX_ID_COL = "_event_tx_id"
LSN_COL = "_event_lsn"
XMIN_COL = "_event_xmin"
DELETED_COL = IS_DELETED_COLUMN
SYNTHETIC_KEY_COL = "_inlet_record_key"  # tables without a primary key: the event's record key
#: ``_event_lsn`` of a snapshot read: below every LSN, so any streamed change of the key wins over it
SNAPSHOT_ORDERING = 0

META_FIELDS: tuple[pa.Field, ...] = (
    pa.field(OP_COL, pa.string()),
    pa.field(PROCESSED_TS_COL, pa.int64()),
    pa.field(SHARD_COL, pa.string()),
    pa.field(ORIGIN_TS_COL, pa.int64()),
    pa.field(TX_ID_COL, pa.int64()),
    pa.field(LSN_COL, pa.int64()),
    pa.field(XMIN_COL, pa.int64()),
    pa.field(DELETED_COL, pa.bool_()),
)
OPS = {
    pb.OPERATION_CREATE: "c",
    pb.OPERATION_UPDATE: "u",
    pb.OPERATION_DELETE: "d",
    pb.OPERATION_READ: "r",
}


class RowError(ValueError):
    """A change cannot be turned into a row (the table's partitions pause; nothing is skipped)."""


#: decimal arithmetic wide enough for any decimal128 (quantize must never round or overflow)
_DECIMALS = decimal.Context(prec=100, traps=[decimal.InvalidOperation, decimal.Inexact])


def arrow_type(col: pb.Column) -> pa.DataType:
    t = col.type
    if t == pb.COLUMN_TYPE_BOOLEAN:
        return pa.bool_()
    if t in (pb.COLUMN_TYPE_INT16, pb.COLUMN_TYPE_INT32):
        return pa.int32()
    if t in (pb.COLUMN_TYPE_INT64, pb.COLUMN_TYPE_TIME_MICROS, pb.COLUMN_TYPE_DURATION_MICROS):
        return pa.int64()
    if t == pb.COLUMN_TYPE_FLOAT32:
        return pa.float32()
    if t == pb.COLUMN_TYPE_FLOAT64:
        return pa.float64()
    if t == pb.COLUMN_TYPE_DECIMAL:
        if 1 <= col.precision <= 38 and 0 <= col.scale <= col.precision:
            return pa.decimal128(col.precision, col.scale)
        return pa.string()
    if t in (pb.COLUMN_TYPE_STRING, pb.COLUMN_TYPE_JSON, pb.COLUMN_TYPE_UUID):
        return pa.string()
    if t == pb.COLUMN_TYPE_BYTES:
        return pa.binary()
    if t == pb.COLUMN_TYPE_DATE:
        return pa.date32()
    if t in (pb.COLUMN_TYPE_TIMESTAMP_MICROS, pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC):
        return pa.timestamp("us", tz="UTC")
    if t == pb.COLUMN_TYPE_LIST:
        if not col.HasField("element"):
            raise RowError(f"column {col.name!r}: LIST without an element type")
        return pa.list_(pa.field("element", arrow_type(col.element), True))
    raise RowError(f"column {col.name!r}: unsupported column type {pb.ColumnType.Name(t)}")


def key_columns(schema: pb.TableSchema) -> list[str]:
    """The primary-key column names in key_position order (empty: no primary key)."""
    keyed = sorted((c.key_position, c.name) for c in schema.columns if c.key_position > 0)
    return [name for _, name in keyed]


class _Unchanged:
    pass


UNCHANGED = _Unchanged()


def _py(value: pb.Value, col: pb.Column, arrow: pa.DataType) -> Any:
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "unchanged":
        return UNCHANGED
    if kind == "list_value":
        elem_arrow = arrow.value_type if pa.types.is_list(arrow) else pa.string()
        out = []
        for v in value.list_value.values:
            item = _py(v, col.element, elem_arrow)
            out.append(None if item is UNCHANGED else item)
        return out
    if kind == "decimal_value":
        text = value.decimal_value
        if pa.types.is_decimal(arrow):
            try:
                d = decimal.Decimal(text)
                if not d.is_finite():
                    raise decimal.InvalidOperation
                d = d.quantize(decimal.Decimal(1).scaleb(-arrow.scale), context=_DECIMALS)
            except decimal.DecimalException:
                raise RowError(f"column {col.name!r}: value {text!r} does not fit {arrow}") from None
            if len(d.as_tuple().digits) > arrow.precision and d:
                raise RowError(f"column {col.name!r}: value {text!r} does not fit {arrow}")
            return d
        return text
    if kind == "int_value":
        n = value.int_value  # dates and timestamps too: Arrow takes their numbers as they are
        if pa.types.is_string(arrow):  # a numeric without typmod sent as an integer
            return str(n)
        return n
    if kind == "double_value":
        if pa.types.is_string(arrow):
            return repr(value.double_value)
        return value.double_value
    if kind == "string_value":
        return value.string_value
    if kind == "bytes_value":
        return value.bytes_value
    if kind == "bool_value":
        return value.bool_value
    raise RowError(f"column {col.name!r}: unknown value kind {kind}")


#: what a value that cannot be converted raises (beside RowError): Arrow's conversion errors, Python's
#: OverflowError and decimal errors (ArithmeticErrors), UnicodeError (a ValueError)
CONVERSION_ERRORS: tuple[type[BaseException], ...] = (
    RowError,
    pa.ArrowInvalid,
    pa.ArrowTypeError,
    ArithmeticError,
    UnicodeError,
)


def _as_numbers(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _as_numbers(t.value_type), t.value_field.nullable))
    return t


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table``'s rows as :func:`to_arrow` builds them: dates and timestamps as their day and
    microsecond numbers (any value, also past year 9999 or PostgreSQL's infinities)."""
    schema = pa.schema([f.with_type(_as_numbers(f.type)) for f in table.schema])
    return table.cast(schema).to_pylist() if schema != table.schema else table.to_pylist()  # type: ignore[no-any-return]


def key_values(table: Any, column: str, values: list[Any]) -> list[Any]:
    """``values`` of ``column`` as :func:`to_arrow` builds them, typed for a filter on ``table``
    (a ``HudiTable``): day and microsecond numbers become date and timestamp scalars."""
    schema = table.schema()
    typ = schema.field(column).type if schema is not None and column in schema.names else None
    if typ is None or _as_numbers(typ) == typ:
        return values
    return list(pa.array(values, _as_numbers(typ)).cast(typ))


def _placeholder(arrow: pa.DataType) -> Any:
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return PLACEHOLDER
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return PLACEHOLDER.encode()
    return UNCHANGED


@dataclass
class Change:
    """One ChangeEvent with where it was read from."""

    event: pb.ChangeEvent
    partition: int
    offset: int
    #: the ``ChangeRecord`` bytes the event was parsed from, when kept: the batch converts column by
    #: column (:mod:`.columns`)
    raw: bytes | None = None


_KINDS = frozenset(
    ("int_value", "double_value", "string_value", "bytes_value", "bool_value", "decimal_value")
)
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _direct_kinds(arrow: pa.DataType) -> frozenset[str]:
    """The value kinds that :func:`_py` returns as they are (``getattr(value, kind)``) for ``arrow``."""
    if pa.types.is_list(arrow):
        return _KINDS - {"decimal_value"}
    if pa.types.is_string(arrow):  # numbers become text
        return _KINDS - {"int_value", "double_value"}
    if pa.types.is_decimal(arrow):  # decimal text becomes a checked Decimal
        return _KINDS - {"decimal_value"}
    return _KINDS


@dataclass(frozen=True)
class _RowPlan:
    """How to read the rows of one schema (fingerprint) with a batch's column types: per column its
    name, the column, its Arrow type, the kinds taken as they are, and the decimal's (precision,
    scale) when it is a decimal128 column, and for a list column the element kinds taken as they are."""

    columns: tuple[
        tuple[str, pb.Column, pa.DataType, frozenset[str], tuple[int, int] | None, frozenset[str] | None], ...
    ]

    @staticmethod
    def of(schema: pb.TableSchema, types: dict[str, pa.DataType]) -> _RowPlan:
        cols = []
        for col in schema.columns:
            arrow = types[col.name]
            dec = (arrow.precision, arrow.scale) if pa.types.is_decimal(arrow) else None
            elem = _direct_kinds(arrow.value_type) if pa.types.is_list(arrow) else None
            cols.append((col.name, col, arrow, _direct_kinds(arrow), dec, elem))
        return _RowPlan(tuple(cols))

    def read(self, row: pb.Row) -> dict[str, Any]:
        """The row as :func:`_py` makes its values (a row shorter than the schema has fewer keys)."""
        out: dict[str, Any] = {}
        for value, (name, col, arrow, direct, dec, elem) in zip(row.values, self.columns, strict=False):
            kind = value.WhichOneof("kind")
            if kind is None:
                out[name] = None
            elif kind in direct:
                out[name] = getattr(value, kind)
            elif dec is not None and kind == "decimal_value":
                out[name] = _decimal(value.decimal_value, dec, col, arrow)
            elif kind == "unchanged":
                out[name] = UNCHANGED
            elif kind == "list_value" and elem is not None:
                items = []
                for item in value.list_value.values:
                    k = item.WhichOneof("kind")
                    if k in elem:
                        items.append(getattr(item, k))
                    elif k is None or k == "unchanged":
                        items.append(None)
                    else:
                        items.append(_py(item, col.element, arrow.value_type))
                out[name] = items
            else:
                out[name] = _py(value, col, arrow)
        return out


def _decimal(text: str, dec: tuple[int, int], col: pb.Column, arrow: pa.DataType) -> Any:
    """:func:`_py` of a decimal text for a decimal128 column: text already at the column's scale
    (what the CDC consumer sends) becomes its Decimal directly; anything else takes the checked way."""
    precision, scale = dec
    if _DECIMAL_TEXT.fullmatch(text):
        point = text.find(".")
        if (scale == 0 and point < 0) or (point >= 0 and len(text) - point - 1 == scale):
            digits = len(text.lstrip("-").replace(".", "").lstrip("0"))
            if digits <= precision:
                return decimal.Decimal(text)
    return _py(pb.Value(decimal_value=text), col, arrow)


def _row_plans(types: dict[str, pa.DataType]) -> Callable[[pb.ChangeEvent, pb.Row], dict[str, Any]]:
    """A reader of rows with the batch's column ``types``, with one :class:`_RowPlan` per schema."""
    plans: dict[str, _RowPlan] = {}

    def read(ev: pb.ChangeEvent, row: pb.Row) -> dict[str, Any]:
        schema = ev.schema  # as batch_schema tells schemas apart: by fingerprint, else by content
        fp = schema.fingerprint or schema.SerializeToString(deterministic=True).hex()
        plan = plans.get(fp)
        if plan is None:
            plan = plans[fp] = _RowPlan.of(schema, types)
        return plan.read(row)

    return read


def _column_array(table_id: str, f: pa.Field, values: list[Any]) -> pa.Array:
    """One output column; a value that does not fit names the table, the column and the value."""
    try:
        return pa.array(values, type=f.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
        bad: Any = None
        for v in values:
            try:
                pa.array([v], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                bad = v
                break
        shown = repr(bad)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise RowError(f"{table_id}: column {f.name!r}: value {shown} does not fit {f.type}: {e}") from None


def batch_schema(changes: Sequence[Change]) -> tuple[list[pa.Field], list[str]]:
    """Data columns (union of the batch's schemas, a column's type from the last schema naming it)
    and the record key columns (the last schema's primary key)."""
    first: dict[str, pb.TableSchema] = {}  # distinct schemas (by fingerprint), by first use
    last: dict[str, pb.TableSchema] = {}  # ... and by last use
    for ch in changes:
        sch = ch.event.schema
        fp = sch.fingerprint or sch.SerializeToString(deterministic=True).hex()
        first.setdefault(fp, sch)
        last.pop(fp, None)
        last[fp] = sch
    order = list(dict.fromkeys(col.name for sch in first.values() for col in sch.columns))
    types: dict[str, pa.DataType] = {}
    for sch in last.values():
        for col in sch.columns:
            types[col.name] = arrow_type(col)
    with_schema = [ch for ch in changes if ch.event.schema.columns]
    keys = key_columns(with_schema[-1].event.schema) if with_schema else []
    return [pa.field(n, types[n], True) for n in order], keys


@dataclass(frozen=True)
class _Stored:
    """An unchanged TOASTed value that is the stored row's of ``key`` (a record key of the batch);
    ``via_key_change``: reached through a primary-key change (another key's row)."""

    key: str
    via_key_change: bool


@dataclass(frozen=True)
class _FromKey:
    """An unchanged TOASTed value that is ``key``'s as of just before LSN ``lsn`` (the new row of a
    primary-key change, whose old key is ``key``)."""

    key: str
    lsn: int


def _resolve_unchanged(
    versions: dict[str, list[tuple[int, int, dict[str, Any], str | None]]],
    arrivals: list[tuple[int, str, dict[str, Any], str | None]],
    unresolved: list[tuple[int, int, str, dict[str, Any], str | None, list[str]]],
) -> None:
    """Replace each ``UNCHANGED`` value (the columns ``names``) of ``unresolved`` rows by the value of
    the key's previous version in the batch, or by a :class:`_Stored` when there is none
    (``arrivals``: every version in arrival order, as (arrival, key, row, old key)).

    A key's previous version is its change that arrived before (a key's changes arrive in order:
    they share a partition). For the new row of a primary-key change it is the old key's last
    change with a smaller LSN (its delete has the change's LSN; the old key's changes may arrive
    after it, from another partition). Both passes are linear in the batch (a chain of updates
    copies the value one step at a time; only chains of primary-key changes are followed).
    """
    if not unresolved:
        return
    last: dict[str, dict[str, Any]] = {}
    pending = iter(unresolved)
    nxt = next(pending, None)
    for seq, rk, row, old_rk in arrivals:
        if nxt is not None and nxt[1] == seq:
            lsn, names = nxt[0], nxt[5]
            nxt = next(pending, None)
            prev = last.get(rk)
            for name in names:
                if old_rk is not None:
                    row[name] = _FromKey(old_rk, lsn)
                elif prev is None:
                    row[name] = _Stored(rk, False)
                elif prev[DELETED_COL]:
                    row[name] = None  # the key did not exist before: nothing to keep
                else:
                    row[name] = prev.get(name)
        last[rk] = row
    for _, _, _, row, _, names in unresolved:
        for name in names:
            value = row[name]
            if isinstance(value, _FromKey):
                row[name] = _old_value(versions, value, name)


def _old_value(
    versions: dict[str, list[tuple[int, int, dict[str, Any], str | None]]], ref: _FromKey, name: str
) -> Any:
    """The value of column ``name`` that ``ref`` stands for: the old key's last change with a smaller
    LSN, following earlier primary-key changes (each to a smaller LSN, so this ends)."""
    while True:
        before = [v for v in versions.get(ref.key, ()) if v[0] < ref.lsn]
        if not before:
            return _Stored(ref.key, True)
        row = before[-1][2]
        if row[DELETED_COL]:
            return None
        value = row.get(name)
        if isinstance(value, _FromKey):
            ref = value
            continue
        if isinstance(value, _Stored):
            return _Stored(value.key, True)
        return value


def _old_row_key(ev: pb.ChangeEvent) -> str | None:
    """The record key of an UPDATE's old image in a table keyed by the whole row (no primary key,
    REPLICA IDENTITY FULL: the CDC consumer keys the new image the same way); None without one."""
    if ev.op != pb.OPERATION_UPDATE or not ev.HasField("before") or not ev.before.values:
        return None
    try:
        return row_record_key(ev.schema, ev.before)
    except DecodeError as e:
        raise RowError(f"the old image of an update cannot be keyed by its whole row: {e.reason}") from None


def _location_key(image: dict[str, Any], key_names: Sequence[str]) -> str:
    return "\x00".join(repr(image.get(k)) for k in key_names)


def _pick(
    values: Sequence[pb.Value],
    columns: Sequence[pb.Column],
    names: Sequence[str],
    types: dict[str, pa.DataType],
) -> dict[str, Any] | None:
    """The values of the columns ``names`` among ``values`` (of ``columns``); None if one is missing."""
    at = {c.name: (c, v) for c, v in zip(columns, values, strict=False)}
    if any(n not in at or n not in types for n in names):
        return None
    return {n: _py(at[n][1], at[n][0], types[n]) for n in names}


def _locations(
    changes: Sequence[Change],
    key_names: Sequence[str],
    part_names: Sequence[str],
    types: dict[str, pa.DataType],
    stored_locations: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
) -> dict[str, list[tuple[dict[str, Any], int | None]]]:
    """Where the table has the rows of every key the batch changes: key -> (partition values,
    ``_event_lsn``) of each stored row (a key stored nowhere maps to an empty list)."""
    wanted: dict[str, dict[str, Any]] = {}
    for ch in changes:
        ev = ch.event
        if ev.op == pb.OPERATION_TRUNCATE:
            continue
        images: list[dict[str, Any] | None]
        if key_names == [SYNTHETIC_KEY_COL]:
            old_key = _old_row_key(ev)
            images = [{SYNTHETIC_KEY_COL: k} for k in (ev.record_key, old_key) if k is not None]
        elif ev.op == pb.OPERATION_DELETE:
            by_name = {c.name: c for c in ev.schema.columns}
            key_cols = [by_name[n] for n in key_columns(ev.schema)]
            images = [_pick(ev.key.values, key_cols, key_names, types)]
        else:  # the new key, and the old one when an update changes it
            images = [_pick(row.values, ev.schema.columns, key_names, types) for row in (ev.after, ev.before)]
        for image in images:
            if image is not None and all(image.get(n) not in (None, UNCHANGED) for n in key_names):
                wanted.setdefault(_location_key(image, key_names), image)
    where: dict[str, list[tuple[dict[str, Any], int | None]]] = {at: [] for at in wanted}
    if not wanted:
        return where
    for row in stored_locations(list(wanted.values())):
        at = _location_key(row, key_names)
        if at in where:
            where[at].append(({p: row.get(p) for p in part_names}, row.get(LSN_COL)))
    return where


def to_arrow(
    changes: Sequence[Change],
    key_fields: Sequence[str] | None = None,
    table_schema: pa.Schema | None = None,
    existing_keys: Callable[[], pa.Table | None] | None = None,
    current_rows: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    partition_fields: Sequence[str] = (),
    stored_locations: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    types_from: Sequence[Change] | None = None,
) -> pa.Table:
    """The upsert input for ``changes`` (arrival order per key; the column types are those of the
    batch ``types_from``, default ``changes``).

    A TRUNCATE becomes deletes, at its LSN, of every key in the table (``existing_keys()``, with the
    ``partition_fields``) and of every key written earlier in the batch; changes after it (larger
    LSNs) win over those deletes. ``current_rows(keys)`` returns the table's rows of those keys.

    An unchanged TOASTed value takes the value of the key's previous version: the ``before`` image
    when it has the column (REPLICA IDENTITY FULL), else the key's change before it in the batch (in
    arrival order: a key's changes share a partition), else the stored row. On the new key of a primary-key change (a CREATE with
    ``old_key``, or an UPDATE whose ``before`` key differs) the previous version is the old key's,
    as of just before the change. Where that ends at the key's own stored row, a string or bytes
    column gets Debezium's placeholder, which the merge replaces with the stored value (Hudi's
    FILL_UNAVAILABLE partial update, also on Copy-on-Write); any other column, and a value that
    ends at another key's stored row (a primary-key change), is read from the table here. A value
    found nowhere (the old key's row is not in the table) is stored as the placeholder (string and
    bytes) or null, with a warning.
    A row that moves to another partition takes its unchanged TOASTed values from the table (the
    merge in its new partition has no stored row to fill them from).

    A table partitioned by columns outside its record key (``partition_fields``) is written with a
    global index when ``stored_locations(keys)`` is given (the stored rows of those keys: record key,
    partition and ``_event_lsn`` columns), as Apache Hudi's global index with
    ``hoodie.simple.index.update.partition.path=true`` does: a key's row is where the table (or an
    earlier change of the batch) has it. A delete goes to that partition whatever its ``before``
    image holds (under REPLICA IDENTITY DEFAULT only the key: Debezium sends null, or a NOT NULL
    column's default such as ``''``, for the rest), and is dropped when the key is stored nowhere;
    a change that moves the row deletes it from its old partition and writes it into the new one;
    a change older than the row's stored version (``_event_lsn``) is dropped, as it would lose
    there anyway, so it moves nothing.
    """
    if types_from is None:  # the plain batch, column by column
        fast = columnar(changes, key_fields, partition_fields, stored_locations is not None)
        if fast is not None:
            return fast
    fields, schema_keys = batch_schema(changes if types_from is None else types_from)
    keys = list(key_fields) if key_fields is not None else schema_keys
    types = {f.name: f.type for f in fields}
    for k in dict.fromkeys([*keys, *partition_fields]):  # a batch of only TRUNCATEs carries no schema
        if k not in types and table_schema is not None and k in table_schema.names:
            types[k] = table_schema.field(k).type
            fields.append(pa.field(k, types[k], True))
    synthetic = not keys or keys == [SYNTHETIC_KEY_COL]
    key_names = [SYNTHETIC_KEY_COL] if synthetic else keys
    # partition columns outside the key: a key's partition is not a function of the key
    part_names = [p for p in partition_fields if p not in key_names]
    rows: list[dict[str, Any]] = []
    # every version of a key in this batch: (lsn, arrival, row, old key of a primary-key change)
    versions: dict[str, list[tuple[int, int, dict[str, Any], str | None]]] = {}
    key_images: dict[str, dict[str, Any]] = {}
    arrivals: list[tuple[int, str, dict[str, Any], str | None]] = []  # the versions in arrival order
    # versions with unchanged TOASTed values: (lsn, arrival, key, row, old key, the unchanged columns)
    unresolved: list[tuple[int, int, str, dict[str, Any], str | None, list[str]]] = []
    moved: set[str] = set()  # keys whose row moves to another partition in this batch
    # a TRUNCATE's deletes of the stored keys: (their key and partition columns, the delete's meta)
    stored_deletes: list[tuple[pa.Table | None, dict[str, Any]]] = []
    # global index: key -> its rows' (partition values, ordering value), stored or written in this batch
    where: dict[str, list[tuple[dict[str, Any], int | None]]] | None = None
    if part_names and stored_locations is not None:
        try:
            where = _locations(changes, key_names, part_names, types, stored_locations)
        except RowError as e:  # a key value that does not convert: named as add_change names it
            table_id = next((ch.event.table_id for ch in changes if ch.event.table_id), "")
            raise (e if str(e).startswith(f"{table_id}: ") else RowError(f"{table_id}: {e}")) from None

    row_dict = _row_plans(types)
    shards: dict[str, str | None] = {}

    def meta(ev: pb.ChangeEvent, op: str, deleted: bool) -> dict[str, Any]:
        src = ev.source
        table_id = ev.table_id
        shard = shards.get(table_id)
        if shard is None:
            shard = shards[table_id] = table_id.split(".", 1)[0] if table_id else None
        return {
            OP_COL: op,
            PROCESSED_TS_COL: src.processed_ts_ms or None,
            SHARD_COL: shard,
            ORIGIN_TS_COL: src.source_ts_ms or None,
            TX_ID_COL: src.tx_id or None,
            LSN_COL: SNAPSHOT_ORDERING if ev.op == pb.OPERATION_READ else src.lsn,
            XMIN_COL: src.xmin or None,
            DELETED_COL: deleted,
        }

    def key_of(image: dict[str, Any]) -> str:
        if len(key_names) == 1:
            return repr(image.get(key_names[0]))
        return "\x00".join(repr(image.get(k)) for k in key_names)

    def add_row(rk: str, row: dict[str, Any], old_rk: str | None = None) -> None:
        if rk not in key_images:
            key_images[rk] = {k: row.get(k) for k in key_names}
        seq = len(rows)
        version = (row[LSN_COL] or 0, seq, row, old_rk)
        found = versions.get(rk)
        if found is None:
            versions[rk] = [version]
        else:
            found.append(version)
        arrivals.append((seq, rk, row, old_rk))
        if not row[DELETED_COL] and UNCHANGED in row.values():  # compared by identity
            names = [name for name, value in row.items() if value is UNCHANGED]
            unresolved.append((version[0], seq, rk, row, old_rk, names))
        rows.append(row)

    def ordering(ev: pb.ChangeEvent) -> int:
        return SNAPSHOT_ORDERING if ev.op == pb.OPERATION_READ else ev.source.lsn

    def delete_rows(image: dict[str, Any], ev: pb.ChangeEvent, rk: str) -> None:
        """Deletes of key ``rk`` (``image``: its key and values): where its rows are (global index)."""
        if where is None:
            image.update(meta(ev, "d", True))
            add_row(rk, image)
            return
        at = _location_key(image, key_names)
        found = where.get(at, [])  # stored nowhere: nothing to delete (Hudi's global index drops it)
        for parts, _ in found:
            row = {**image, **parts}
            row.update(meta(ev, "d", True))
            add_row(rk, row)
        lsn = ordering(ev)
        where[at] = [(parts, o) for parts, o in where.get(at, []) if o is not None and o > lsn]

    def add_change(ev: pb.ChangeEvent) -> None:
        if ev.op == pb.OPERATION_TRUNCATE:
            if existing_keys is not None and not stored_deletes:
                # the table's keys stay Arrow columns (a TRUNCATE of a large table holds no Python
                # object per row); a later TRUNCATE of the batch finds them deleted already
                stored = existing_keys()
                stored_deletes.append((stored, meta(ev, "d", True)))
            truncated: dict[str, dict[str, Any]] = {}
            names = list(dict.fromkeys([*key_names, *partition_fields]))  # the rows of every partition
            for image in rows:
                if image.get(DELETED_COL):
                    continue
                key_image = {n: image.get(n) for n in names}
                truncated["\x00".join(repr(v) for v in key_image.values())] = key_image
            for key_image in truncated.values():
                key_image.update(meta(ev, "d", True))
                add_row(key_of(key_image), key_image)
            if where is not None:
                for at in where:
                    where[at] = []
            return
        op = ev.op
        if op not in OPS:
            raise RowError(f"{ev.table_id}: operation {pb.Operation.Name(op)} is not handled here")
        before = row_dict(ev, ev.before) if ev.HasField("before") else None
        if op == pb.OPERATION_DELETE:
            image = {k: v for k, v in (before or {}).items() if v is not UNCHANGED}
            key_cols = key_columns(ev.schema)
            for col_name, value in zip(key_cols, ev.key.values, strict=False):
                col = next(c for c in ev.schema.columns if c.name == col_name)
                image[col_name] = _py(value, col, types[col_name])
            if synthetic:
                image[SYNTHETIC_KEY_COL] = ev.record_key
            delete_rows(image, ev, ev.record_key if synthetic else key_of(image))
            return
        if not ev.HasField("after"):
            raise RowError(f"{ev.table_id}: {pb.Operation.Name(op)} without an after image")
        after = row_dict(ev, ev.after)
        if synthetic:
            after[SYNTHETIC_KEY_COL] = ev.record_key
        rk = ev.record_key if synthetic else key_of(after)
        at = _location_key(after, key_names) if where is not None else ""
        stored_at = where.get(at, []) if where is not None else []
        if stored_at and any(o is not None and o > ordering(ev) for _, o in stored_at):
            return  # older than the key's row (stored or earlier in the batch): it loses and moves nothing
        old_rk = None
        old_whole_row = _old_row_key(ev) if synthetic else None
        if old_whole_row is not None and old_whole_row != rk:  # keyed by the whole row: the old image goes
            gone: dict[str, Any] = {SYNTHETIC_KEY_COL: old_whole_row}
            gone.update({p: before.get(p) for p in part_names if before and before.get(p) is not UNCHANGED})
            delete_rows(gone, ev, old_whole_row)
        if not synthetic and op == pb.OPERATION_CREATE and ev.HasField("old_key") and ev.old_key.values:
            cols = {c.name: c for c in ev.schema.columns}
            old = {
                k: _py(v, cols[k], types[k])
                for k, v in zip(key_columns(ev.schema), ev.old_key.values, strict=False)
            }
            old_rk = key_of(old) if key_of(old) != rk else None
            if old_rk is not None:
                key_images.setdefault(old_rk, old)  # its stored row may be read below
        if before is not None and not synthetic and op == pb.OPERATION_UPDATE:
            old = {k: before.get(k) for k in keys}
            if all(v is not UNCHANGED for v in old.values()) and key_of(old) != rk:
                old_rk = key_of(old)
                key_images.setdefault(old_rk, dict(old))
                if where is None:
                    old.update({p: before.get(p) for p in part_names if before.get(p) is not UNCHANGED})
                delete_rows(old, ev, old_rk)
        for name, value in list(after.items()) if UNCHANGED in after.values() else ():
            if value is not UNCHANGED:
                continue
            if name in part_names and stored_at:  # a TOASTed partition value: where the row is
                after[name] = stored_at[-1][0][name]
            elif before is not None and before.get(name) not in (None, UNCHANGED):
                after[name] = before[name]  # REPLICA IDENTITY FULL: the value before the change
        if where is not None:
            target = {p: after.get(p) for p in part_names}
            for parts, _ in stored_at:
                if parts != target:  # the row moves: delete it where it was (not a version of the key)
                    gone_row = {k: after.get(k) for k in key_names}
                    gone_row.update(parts)
                    gone_row.update(meta(ev, "d", True))
                    rows.append(gone_row)
                    moved.add(rk)
            where[at] = [(target, ordering(ev))]
        after.update(meta(ev, OPS[op], False))
        add_row(rk, after, old_rk)

    for ch in changes:
        try:
            add_change(ch.event)
        except RowError as e:
            table_id = ch.event.table_id
            named = not table_id or str(e).startswith(f"{table_id}: ")
            raise (e if named else RowError(f"{table_id}: {e}")) from None

    _resolve_unchanged(versions, arrivals, unresolved)
    lookups = [
        (r, name, r[name])
        for _, _, _, r, _, names in unresolved
        for name in names
        if isinstance(r[name], _Stored)
    ]
    if lookups:
        needed = []
        for r, name, v in lookups:
            if v.via_key_change or v.key in moved or _placeholder(types[name]) is UNCHANGED:
                needed.append((r, name, v))
            else:
                r[name] = _placeholder(types[name])  # the merge fills it from the stored row
        wanted = {v.key for _, _, v in needed}
        stored: dict[str, dict[str, Any]] = {}
        if wanted:
            if current_rows is None:
                name = needed[0][1]
                raise RowError(
                    f"column {name!r} ({types[name]}) is unchanged (TOAST) with no earlier value in the batch "
                    "and no table to look it up in"
                )
            stored = {key_of(r): r for r in current_rows([key_images[k] for k in sorted(wanted)])}
        for r, name, v in needed:
            stored_row = stored.get(v.key)
            if stored_row is None or name not in stored_row:
                log.warning(
                    "column %s of a TOAST-unchanged row: the %s row is not in the table; stored as %s",
                    name,
                    "old key's" if v.via_key_change else "key's",
                    "the placeholder" if _placeholder(types[name]) is not UNCHANGED else "null",
                )
                fallback = _placeholder(types[name])
                r[name] = None if fallback is UNCHANGED else fallback
            else:
                r[name] = stored_row[name]

    out_fields = list(fields)
    if synthetic:
        out_fields.append(pa.field(SYNTHETIC_KEY_COL, pa.string(), True))
    out_fields.extend(f for f in META_FIELDS if f.name not in types)
    columns = {f.name: [r.get(f.name) for r in rows] for f in out_fields}  # column by column
    table_id = next((ch.event.table_id for ch in changes if ch.event.table_id), "")
    arrays = [_column_array(table_id, f, columns[f.name]) for f in out_fields]
    out = pa.Table.from_arrays(arrays, schema=pa.schema(out_fields))
    deletes = [_stored_deletes(stored, m, out.schema) for stored, m in stored_deletes if stored is not None]
    return pa.concat_tables([*deletes, out]) if deletes else out


def _stored_deletes(stored: pa.Table, meta: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """Delete rows of ``stored``'s keys (and partition values) with ``meta``, built column by column."""
    n = stored.num_rows
    arrays = []
    for f in schema:
        if f.name in stored.column_names:
            col = stored.column(f.name).combine_chunks()
            arrays.append(col if col.type == f.type else col.cast(f.type))
        elif meta.get(f.name) is not None:
            arrays.append(pa.repeat(pa.scalar(meta[f.name], f.type), n))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def bad_changes(
    changes: Sequence[Change], key_fields: Sequence[str], table_schema: pa.Schema | None = None
) -> list[tuple[Change, str, str]]:
    """The changes of a batch that cannot become rows, each with the reason and the error's class: every change converted
    alone with the batch's column types (the change's own when the batch's cannot be built).

    A TRUNCATE is converted without the table's keys and a TOAST-unchanged value without the stored
    row: those parts read the table, never the change, so they cannot make a change bad."""
    try:
        batch_schema(changes)
        batch: Sequence[Change] | None = changes
    except CONVERSION_ERRORS:
        batch = None
    out: list[tuple[Change, str, str]] = []
    for ch in changes:
        try:
            to_arrow(
                [ch],
                key_fields=key_fields,
                table_schema=table_schema,
                existing_keys=lambda: None,
                current_rows=lambda images: images,
                types_from=batch if batch is not None else [ch],
            )
        except CONVERSION_ERRORS as e:
            reason = str(e) if isinstance(e, RowError) else f"{type(e).__name__}: {e}"
            out.append((ch, reason, type(e).__name__))
    return out
