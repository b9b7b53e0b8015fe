"""A ``ChangeEvent`` as one JSON-ready object (what ``inlet cdc decode`` prints).

``{"op", "table", "key", "before", "after", "lsn", "tx_id", "source_ts_ms", "snapshot"}``: op as
Debezium's letter (c/u/d/r/t); key an object of the key columns (null for a truncate); before /
after objects of all columns or null. Values: integers and floats as numbers (NaN and infinities
as the strings "NaN", "Infinity", "-Infinity"), decimals as strings, dates ``yyyy-MM-dd``, times
``HH:MM:SS.ffffff``, timestamps ISO-8601 (``...Z`` for timestamptz; PostgreSQL's infinities of
dates and timestamps as "infinity"/"-infinity"), durations as microseconds, bytes base64, JSON columns as their text,
lists as arrays, an unchanged TOASTed value as ``{"unchanged": true}``.
"""

from __future__ import annotations

import binascii
import datetime as dt
import math
from collections.abc import Callable
from typing import Any

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer.types import (
    INFINITY_DAYS,
    INFINITY_MICROS,
    NEG_INFINITY_DAYS,
    NEG_INFINITY_MICROS,
)

CT = pb.ColumnType

OP_LETTERS = {
    pb.OPERATION_CREATE: "c",
    pb.OPERATION_UPDATE: "u",
    pb.OPERATION_DELETE: "d",
    pb.OPERATION_READ: "r",
    pb.OPERATION_TRUNCATE: "t",
}

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
UNCHANGED_JSON = {"unchanged": True}


def _micros_to_datetime(micros: int) -> dt.datetime | str:
    if micros == INFINITY_MICROS:
        return "infinity"
    if micros == NEG_INFINITY_MICROS:
        return "-infinity"
    try:
        return _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        return str(micros)


def _timestamp(micros: int) -> str:
    moment = _micros_to_datetime(micros)
    return moment if isinstance(moment, str) else moment.isoformat(timespec="microseconds")


def _timestamp_utc(micros: int) -> str:
    moment = _micros_to_datetime(micros)
    return moment if isinstance(moment, str) else moment.isoformat(timespec="microseconds") + "Z"


def _date(days: int) -> str:
    if days == INFINITY_DAYS:
        return "infinity"
    if days == NEG_INFINITY_DAYS:
        return "-infinity"
    try:
        return (_EPOCH_DATE + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        return str(days)


def _time(micros: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    minutes, s = divmod(seconds, 60)
    h, m = divmod(minutes, 60)
    return f"{h:02d}:{m:02d}:{s:02d}.{us:06d}"


def _float(x: float) -> Any:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


_INT_RENDER: dict[int, Callable[[int], Any]] = {
    CT.COLUMN_TYPE_DATE: _date,
    CT.COLUMN_TYPE_TIME_MICROS: _time,
    CT.COLUMN_TYPE_TIMESTAMP_MICROS: _timestamp,
    CT.COLUMN_TYPE_TIMESTAMP_MICROS_UTC: _timestamp_utc,
}


def render_value(column: pb.Column, value: pb.Value) -> Any:
    """One value as JSON (see the module docstring)."""
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "int_value":
        f = _INT_RENDER.get(column.type)
        return f(value.int_value) if f else value.int_value
    if kind == "string_value":
        return value.string_value
    if kind == "decimal_value":
        return value.decimal_value
    if kind == "double_value":
        return _float(value.double_value)
    if kind == "bool_value":
        return value.bool_value
    if kind == "bytes_value":
        return binascii.b2a_base64(value.bytes_value, newline=False).decode()
    if kind == "unchanged":
        return dict(UNCHANGED_JSON)
    if kind == "list_value":
        return [render_value(column.element, v) for v in value.list_value.values]
    raise ValueError(f"unknown value kind {kind}")


def _row(columns: Any, row: pb.Row) -> dict[str, Any]:
    return {c.name: render_value(c, v) for c, v in zip(columns, row.values, strict=False)}


def render_change(event: pb.ChangeEvent) -> dict[str, Any]:
    """``event`` as one JSON-ready object."""
    columns = event.schema.columns
    key: dict[str, Any] | None = None
    if event.op != pb.OPERATION_TRUNCATE:
        key_cols = sorted((c for c in columns if c.key_position), key=lambda c: c.key_position)
        key = {c.name: render_value(c, v) for c, v in zip(key_cols, event.key.values, strict=False)}
    src = event.source
    return {
        "op": OP_LETTERS.get(event.op, "?"),
        "table": event.table_id,
        "key": key,
        "before": _row(columns, event.before) if event.HasField("before") else None,
        "after": _row(columns, event.after) if event.HasField("after") else None,
        "lsn": src.lsn,
        "tx_id": src.tx_id,
        "source_ts_ms": src.source_ts_ms,
        "snapshot": src.snapshot,
    }


def render_transaction(event: pb.TransactionEvent) -> dict[str, Any]:
    """A transaction END as ``{"transaction", "status", "table", "table_event_count", ...}``."""
    return {
        "transaction": event.id,
        "status": pb.TransactionEvent.Status.Name(event.status).removeprefix("STATUS_"),
        "table": event.table_id,
        "table_event_count": event.table_event_count,
        "total_event_count": event.total_event_count,
        "source_ts_ms": event.source_ts_ms,
    }
