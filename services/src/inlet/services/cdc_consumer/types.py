"""Debezium PostgreSQL column encodings -> Inlet's typed values.

Every column is described in Kafka Connect's schema form (the ``schema`` of JsonConverter's
output: ``{"type": "int64", "name": "io.debezium.time.MicroTimestamp", "optional": true, ...}``);
the Avro path (:mod:`.avro`) and the PostgreSQL catalog (:mod:`.catalog`) translate their schemas
into the same form, so one function, :func:`column_plan`, maps all three. It returns the
:class:`~inlet.proto.changes.v1.changes_pb2.Column` plus a converter that turns one wire value
(never ``None``) into a ``Value``: the converter is chosen once per column, so decoding a row is a
loop over precomputed functions. A converter raises TypeError/ValueError/KeyError for a value of
the wrong encoding; the caller reports the column and ``ColumnPlan.expected``.

``wire`` is ``"json"`` (bytes travel base64-encoded) or ``"avro"`` (bytes are bytes).
"""

from __future__ import annotations

import binascii
import datetime as dt
import hashlib
import re
import struct
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from inlet.proto.changes.v1 import changes_pb2 as pb

Value = pb.Value
CT = pb.ColumnType
Converter = Callable[[Any, Any], None]  # (add, wire value) -> None; see "converters" below

#: Debezium's default ``unavailable.value.placeholder`` (an unchanged TOASTed value).
PLACEHOLDER = "__debezium_unavailable_value"
PLACEHOLDER_BYTES = PLACEHOLDER.encode()
PLACEHOLDER_B64 = binascii.b2a_base64(PLACEHOLDER_BYTES, newline=False).decode()
# what Debezium sends for unchanged TOASTed arrays / hstore / uuid[] (UnchangedToastedPlaceholder)
_PH_INT_LIST = list(PLACEHOLDER_BYTES)
_PH_UUID = str(uuid.UUID(bytes=hashlib.md5(PLACEHOLDER_BYTES).digest(), version=3))  # Java nameUUIDFromBytes
_PH_HSTORE_JSON = orjson.dumps({PLACEHOLDER: PLACEHOLDER}).decode()
# geometry placeholders: 'SRID=4326;POINT(-99999999 -99999999)'::geometry and the geography one
_PH_GEOMETRY_WKB = bytes.fromhex("0101000020E6100000000000FC83D797C1000000FC83D797C1")
_PH_GEOGRAPHY_WKB = bytes.fromhex("0101000020E61000000C21E7FDFF7F66401842CEFBFF7F5640")
_PH_POINT = -99999999.0

#: timestamps PostgreSQL calls 'infinity' / '-infinity': the largest / smallest int64 microseconds
#: (what Arrow's and Parquet's timestamp(us) can hold), whichever form Debezium sent them in
INFINITY_MICROS = 2**63 - 1
NEG_INFINITY_MICROS = -(2**63)
#: dates 'infinity' / '-infinity': the largest / smallest int32 days (Arrow's date32)
INFINITY_DAYS = 2**31 - 1
NEG_INFINITY_DAYS = -(2**31)
# Debezium's encodings of them (PostgresValueConverter): timestamp (Micro)Timestamp sends pgjdbc's
# infinity milliseconds 9223372036825200000 / -9223372036832400000 as they are (MicroTimestamp) or
# in milliseconds' digits (Timestamp); a date is sent as epoch days of LocalDate -5877611-06-21 /
# -5877611-06-22 while streaming and as pgjdbc's infinity java.sql.Date while snapshotting (its epoch
# days wrap around int32; +-1 day for the Connect worker's time zone). All lie before PostgreSQL's
# first day, so no real value is mistaken for them.
_DBZ_TS_INFINITY = 9223372036825200000
_DBZ_TS_NEG_INFINITY = -9223372036832400000
_DBZ_DATE_INFINITY = (-2147472692, -622191234)
_DBZ_DATE_NEG_INFINITY = (-2147472691, -625821272)
# PostgreSQL's range: 4714-11-24 BC .. 5874897-12-31 (dates), .. 294276-12-31 24:00 (timestamps)
PG_MIN_DAYS = -2440588
PG_MAX_DAYS = 2145042905
PG_MIN_MICROS = PG_MIN_DAYS * 86_400_000_000
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

_UNCHANGED_MSG = pb.Unchanged()
#: the placeholders a converter made by :func:`_string_with` ("string") or :func:`_list` ("list")
#: compares a value with (the CDC consumer's compiled rows write the comparison out)
PLACEHOLDERS: weakref.WeakKeyDictionary[Converter, tuple[str, Any]] = weakref.WeakKeyDictionary()

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ONE_US = dt.timedelta(microseconds=1)


class UnsupportedType(Exception):
    """A Connect schema this decoder does not map."""


class Unrepresentable(ValueError):
    """A value of the right encoding that no Inlet value can hold (the message says why)."""


@dataclass(frozen=True)
class ColumnPlan:
    column: pb.Column  # key_position not set
    convert: Converter
    expected: str  # the wire encoding, for error messages ("int32 days for io.debezium.time.Date")


# ------------------------------------------------------------------------------ converters
#
# A converter is ``conv(add, raw)``: ``add`` is the ``add`` method of a repeated ``Value`` field
# (building values in place is twice as fast as constructing and copying them); ``raw`` is never
# None. Plain ints and strings rely on protobuf's own type checks (a TypeError names no column:
# the row loop turns it into a DecodeError with the column's expected encoding).


def _int(add: Any, raw: Any) -> None:
    add(int_value=raw)


def _scaled_int(factor: int) -> Converter:
    def conv(add: Any, raw: Any) -> None:
        if raw.__class__ is not int:
            raise TypeError
        add(int_value=raw * factor)

    return conv


def _floored_int(divisor: int) -> Converter:
    def conv(add: Any, raw: Any) -> None:
        if raw.__class__ is not int:
            raise TypeError
        add(int_value=raw // divisor)

    return conv


_FLOAT_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _float(add: Any, raw: Any) -> None:
    cls = raw.__class__
    if cls is str:  # Jackson writes NaN and the infinities as strings
        raw = _FLOAT_WORDS[raw]  # KeyError -> the row loop reports the column
    elif cls is bool:
        raise TypeError
    add(double_value=raw)


def _bool(add: Any, raw: Any) -> None:
    if raw is not True and raw is not False:
        raise TypeError
    add(bool_value=raw)


def _string(add: Any, raw: Any) -> None:
    if raw == PLACEHOLDER:
        add(unchanged=_UNCHANGED_MSG)
    else:
        add(string_value=raw)


def _string_with(placeholders: frozenset[str]) -> Converter:
    def conv(add: Any, raw: Any) -> None:
        if raw in placeholders:
            add(unchanged=_UNCHANGED_MSG)
        else:
            add(string_value=raw)

    PLACEHOLDERS[conv] = ("string", placeholders)
    return conv


def _b64(raw: Any) -> bytes:
    if raw.__class__ is not str:
        raise TypeError
    return binascii.a2b_base64(raw, strict_mode=True)  # binascii.Error is a ValueError


def _bytes_json(add: Any, raw: Any) -> None:
    if raw == PLACEHOLDER_B64:
        add(unchanged=_UNCHANGED_MSG)
    else:
        add(bytes_value=_b64(raw))


def _bytes_avro(add: Any, raw: Any) -> None:
    if raw == PLACEHOLDER_BYTES:
        add(unchanged=_UNCHANGED_MSG)
    else:
        add(bytes_value=raw)


def _raw_bytes(raw: Any, wire: str) -> bytes:
    if wire == "json":
        return _b64(raw)
    if raw.__class__ is not bytes:
        raise TypeError
    return raw


def decimal_text(unscaled: int, scale: int) -> str:
    """The exact decimal text of ``unscaled * 10**-scale`` (scale digits after the point)."""
    if scale <= 0:
        return str(unscaled * 10**-scale)
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    text = f"{digits[:-scale]}.{digits[-scale:]}"
    return "-" + text if unscaled < 0 else text


def _decimal(wire: str, scale: int) -> Converter:
    from_bytes = int.from_bytes

    if wire == "json":

        def conv(add: Any, raw: Any) -> None:
            data = _b64(raw)
            if not data:
                raise ValueError
            add(decimal_value=decimal_text(from_bytes(data, "big", signed=True), scale))

        return conv

    def conv_avro(add: Any, raw: Any) -> None:
        if raw.__class__ is not bytes or not raw:
            raise TypeError
        add(decimal_value=decimal_text(from_bytes(raw, "big", signed=True), scale))

    return conv_avro


def _variable_decimal(wire: str) -> Converter:
    def conv(add: Any, raw: Any) -> None:
        if raw.__class__ is not dict:
            raise TypeError
        scale = raw.get("scale")
        value = raw.get("value")
        if scale.__class__ is not int or value is None:
            raise TypeError
        data = _raw_bytes(value, wire)
        if not data:
            raise ValueError
        add(decimal_value=decimal_text(int.from_bytes(data, "big", signed=True), scale))

    return conv


_TOO_LATE = "is after 294247-01-10T04:00:54.775807Z, the last instant int64 microseconds hold"


def _micro_timestamp(add: Any, raw: Any) -> None:
    if raw.__class__ is not int:
        raise TypeError
    if raw < PG_MIN_MICROS:  # before PostgreSQL's first day: infinity, or an overflow in Debezium
        if raw == _DBZ_TS_NEG_INFINITY:
            raw = NEG_INFINITY_MICROS
        else:  # Debezium's long wrapped around: the timestamp is past int64 microseconds
            raise Unrepresentable(f"{raw} (Debezium's microseconds overflowed): the timestamp {_TOO_LATE}")
    elif raw == _DBZ_TS_INFINITY:
        raw = INFINITY_MICROS
    add(int_value=raw)


def _milli_timestamp(add: Any, raw: Any) -> None:
    if raw.__class__ is not int:
        raise TypeError
    if raw == _DBZ_TS_INFINITY // 1000:
        add(int_value=INFINITY_MICROS)
    elif raw == _DBZ_TS_NEG_INFINITY // 1000:
        add(int_value=NEG_INFINITY_MICROS)
    elif not _INT64_MIN <= raw * 1000 <= _INT64_MAX:
        raise Unrepresentable(f"{raw} milliseconds: the timestamp {_TOO_LATE}")
    else:
        add(int_value=raw * 1000)


def _date(add: Any, raw: Any) -> None:
    if raw.__class__ is not int:
        raise TypeError
    if PG_MIN_DAYS <= raw <= PG_MAX_DAYS:
        add(int_value=raw)
    elif raw == _DBZ_DATE_INFINITY[0] or abs(raw - _DBZ_DATE_INFINITY[1]) <= 1:
        add(int_value=INFINITY_DAYS)
    elif raw == _DBZ_DATE_NEG_INFINITY[0] or abs(raw - _DBZ_DATE_NEG_INFINITY[1]) <= 1:
        add(int_value=NEG_INFINITY_DAYS)
    else:
        raise Unrepresentable(f"{raw} days is outside PostgreSQL's dates (4714-11-24 BC .. 5874897-12-31)")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical years: 0 is 1 BC)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01, proleptic Gregorian, any year."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


# Debezium writes years past 9999 with a sign and BC years as negative astronomical years
# ("+294276-12-31T23:59:59.999999Z", "-4712-01-01T00:00:00.000000Z"): beyond Python's datetime
_WIDE_ISO = re.compile(
    r"([+-]?\d{4,})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?"
    r"(Z|[+-]\d\d(?::?\d\d)?)"
)


def _wide_iso_micros(raw: str) -> int:
    m = _WIDE_ISO.fullmatch(raw)
    if m is None:
        raise ValueError
    year, month, day, hour, minute, second, frac, zone = m.groups()
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31 and int(hour) <= 24 and int(minute) <= 59):
        raise ValueError
    seconds = (int(hour) * 60 + int(minute)) * 60 + int(second or 0)
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:4] or 0) * 60)
    days = days_from_civil(int(year), int(month), int(day))
    return (days * 86400 + seconds) * 1_000_000 + int((frac or "0").ljust(9, "0")) // 1000


def _zoned_timestamp(add: Any, raw: Any) -> None:
    if raw.__class__ is not str:
        raise TypeError
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        if raw == "infinity":
            add(int_value=INFINITY_MICROS)
            return
        if raw == "-infinity":
            add(int_value=NEG_INFINITY_MICROS)
            return
        micros = _wide_iso_micros(raw)  # ValueError: not ISO-8601 at all
        if not _INT64_MIN <= micros <= _INT64_MAX:
            raise Unrepresentable(f"{raw!r} {_TOO_LATE}") from None
        add(int_value=micros)
        return
    if moment.tzinfo is None:
        raise ValueError
    add(int_value=(moment - _EPOCH) // _ONE_US)


def _wkb_point(x: float, y: float) -> bytes:
    return struct.pack("<BIdd", 1, 1, x, y)


def _geometry(wire: str, name: str) -> Converter:
    is_point = name == "io.debezium.data.geometry.Point"
    placeholder = _PH_GEOGRAPHY_WKB if name.endswith("Geography") else _PH_GEOMETRY_WKB

    def conv(add: Any, raw: Any) -> None:
        if raw.__class__ is not dict:
            raise TypeError
        wkb = raw.get("wkb")
        if is_point:
            x, y = raw.get("x"), raw.get("y")
            if x == _PH_POINT and y == _PH_POINT:
                add(unchanged=_UNCHANGED_MSG)
                return
            if wkb is None:
                if x.__class__ not in (int, float) or y.__class__ not in (int, float):
                    raise TypeError
                add(bytes_value=_wkb_point(float(x), float(y)))
                return
        if wkb is None:
            raise TypeError
        data = _raw_bytes(wkb, wire)
        if data == placeholder:
            add(unchanged=_UNCHANGED_MSG)
        else:
            add(bytes_value=data)

    return conv


def _map_json(add: Any, raw: Any) -> None:
    if raw.__class__ is not dict:
        raise TypeError
    if raw == {PLACEHOLDER: PLACEHOLDER}:
        add(unchanged=_UNCHANGED_MSG)
    else:
        add(string_value=orjson.dumps(raw, option=orjson.OPT_SORT_KEYS).decode())


def _list(element: Converter, placeholders: list[Any]) -> Converter:
    def conv(add: Any, raw: Any) -> None:
        if raw.__class__ is not list:
            raise TypeError
        if raw and raw in placeholders:
            add(unchanged=_UNCHANGED_MSG)
            return
        lv = add().list_value
        lv.SetInParent()
        add_elem = lv.values.add
        for v in raw:
            if v is None:
                add_elem()
            else:
                element(add_elem, v)

    PLACEHOLDERS[conv] = ("list", placeholders)
    return conv


# ------------------------------------------------------------------------------ schema -> plan

_PRIMITIVE: dict[str, tuple[int, str]] = {
    "int8": (pb.COLUMN_TYPE_INT16, "int8"),
    "int16": (pb.COLUMN_TYPE_INT16, "int16"),
    "int32": (pb.COLUMN_TYPE_INT32, "int32"),
    "int64": (pb.COLUMN_TYPE_INT64, "int64"),
    "float": (pb.COLUMN_TYPE_FLOAT32, "float32"),
    "float32": (pb.COLUMN_TYPE_FLOAT32, "float32"),
    "double": (pb.COLUMN_TYPE_FLOAT64, "float64"),
    "float64": (pb.COLUMN_TYPE_FLOAT64, "float64"),
    "boolean": (pb.COLUMN_TYPE_BOOLEAN, "boolean"),
    "string": (pb.COLUMN_TYPE_STRING, "string"),
    "bytes": (pb.COLUMN_TYPE_BYTES, "bytes"),
}

_GEOMETRY_NAMES = {
    "io.debezium.data.geometry.Geometry",
    "io.debezium.data.geometry.Geography",
    "io.debezium.data.geometry.Point",
}


def column_plan(field: dict[str, Any], wire: str, name: str | None = None) -> ColumnPlan:
    """Map one Connect field schema to its column, value converter and expected encoding.

    Raises :class:`UnsupportedType` for a schema Debezium's PostgreSQL connector does not produce.
    """
    col_name = name if name is not None else field.get("field", "")
    type_ = field.get("type")
    logical = field.get("name")
    params = field.get("parameters") or {}
    col = pb.Column(name=str(col_name), nullable=bool(field.get("optional", False)))
    col.source_type = logical or str(type_)
    b64 = "base64 " if wire == "json" else ""

    def done(ctype: int, conv: Converter, expected: str) -> ColumnPlan:
        col.type = ctype  # type: ignore[assignment]
        return ColumnPlan(col, conv, expected)

    if logical == "org.apache.kafka.connect.data.Decimal":
        try:
            scale = int(params.get("scale", "0"))
            precision = int(params.get("connect.decimal.precision", "0"))
        except (TypeError, ValueError):
            raise UnsupportedType(f"decimal with parameters {params}") from None
        col.precision, col.scale = precision, scale
        return done(
            pb.COLUMN_TYPE_DECIMAL, _decimal(wire, scale), f"{b64}two's-complement bytes for {logical}"
        )
    if logical == "io.debezium.data.VariableScaleDecimal":
        return done(
            pb.COLUMN_TYPE_DECIMAL, _variable_decimal(wire), f"a {{scale, value}} struct for {logical}"
        )
    if logical in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return done(pb.COLUMN_TYPE_DATE, _date, f"int32 days for {logical}")
    if logical in ("io.debezium.time.Time", "org.apache.kafka.connect.data.Time"):
        return done(pb.COLUMN_TYPE_TIME_MICROS, _scaled_int(1000), f"int32 milliseconds for {logical}")
    if logical == "io.debezium.time.MicroTime":
        return done(pb.COLUMN_TYPE_TIME_MICROS, _int, f"int64 microseconds for {logical}")
    if logical == "io.debezium.time.NanoTime":
        return done(pb.COLUMN_TYPE_TIME_MICROS, _floored_int(1000), f"int64 nanoseconds for {logical}")
    if logical in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return done(pb.COLUMN_TYPE_TIMESTAMP_MICROS, _milli_timestamp, f"int64 milliseconds for {logical}")
    if logical == "io.debezium.time.MicroTimestamp":
        return done(pb.COLUMN_TYPE_TIMESTAMP_MICROS, _micro_timestamp, f"int64 microseconds for {logical}")
    if logical == "io.debezium.time.NanoTimestamp":
        return done(pb.COLUMN_TYPE_TIMESTAMP_MICROS, _floored_int(1000), f"int64 nanoseconds for {logical}")
    if logical == "io.debezium.time.ZonedTimestamp":
        return done(
            pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC, _zoned_timestamp, f"an ISO-8601 string for {logical}"
        )
    if logical == "io.debezium.time.MicroDuration":
        return done(pb.COLUMN_TYPE_DURATION_MICROS, _int, f"int64 microseconds for {logical}")
    if logical == "io.debezium.data.Json":
        return done(
            pb.COLUMN_TYPE_JSON,
            _string_with(frozenset((PLACEHOLDER, _PH_HSTORE_JSON))),
            f"a string for {logical}",
        )
    if logical == "io.debezium.data.Uuid":
        return done(
            pb.COLUMN_TYPE_UUID, _string_with(frozenset((PLACEHOLDER, _PH_UUID))), f"a string for {logical}"
        )
    if logical == "io.debezium.data.Bits":
        return done(
            pb.COLUMN_TYPE_BYTES, _bytes_json if wire == "json" else _bytes_avro, f"{b64}bytes for {logical}"
        )
    if logical in _GEOMETRY_NAMES:
        return done(pb.COLUMN_TYPE_BYTES, _geometry(wire, logical), f"a struct with wkb for {logical}")

    if type_ == "array":
        items = field.get("items")
        if not isinstance(items, dict):
            raise UnsupportedType("array without items")
        elem = column_plan({**items, "optional": items.get("optional", True)}, wire, name="element")
        if elem.column.type == pb.COLUMN_TYPE_LIST:
            raise UnsupportedType("nested arrays")
        col.element.CopyFrom(elem.column)
        placeholders: list[Any] = [
            [PLACEHOLDER],
            [PLACEHOLDER_B64 if wire == "json" else PLACEHOLDER_BYTES],
            _PH_INT_LIST,
            [_PH_UUID],
        ]
        return done(pb.COLUMN_TYPE_LIST, _list(elem.convert, placeholders), f"an array of {elem.expected}")
    if type_ == "map":
        return done(pb.COLUMN_TYPE_JSON, _map_json, "a map (hstore)")
    if type_ in _PRIMITIVE:
        ctype, wire_name = _PRIMITIVE[type_]
        expected = f"{wire_name} for {logical}" if logical else wire_name
        if type_ in ("int8", "int16", "int32", "int64"):
            return done(ctype, _int, expected)
        if ctype in (pb.COLUMN_TYPE_FLOAT32, pb.COLUMN_TYPE_FLOAT64):
            return done(ctype, _float, expected)
        if ctype == pb.COLUMN_TYPE_BOOLEAN:
            return done(ctype, _bool, expected)
        if ctype == pb.COLUMN_TYPE_BYTES:
            return done(ctype, _bytes_json if wire == "json" else _bytes_avro, b64 + expected)
        return done(ctype, _string, expected)  # string, and Enum, Xml, Interval, ZonedTime, Ltree...
    raise UnsupportedType(f"{type_}{' ' + logical if logical else ''}")


# ------------------------------------------------------------------------------ fingerprints


def _column_identity(c: pb.Column) -> list[Any]:
    ident: list[Any] = [c.name, int(c.type), c.precision, c.scale, c.nullable]
    if c.type == pb.COLUMN_TYPE_LIST:
        ident.append(_column_identity(c.element))
    return ident


def fingerprint(columns: list[pb.Column]) -> str:
    """A stable hash of the columns' (name, type, precision, scale, element, nullable): the same
    table decoded from JSON-with-schemas, Avro or the catalog gets the same fingerprint."""
    data = orjson.dumps([_column_identity(c) for c in columns])
    return hashlib.sha256(data).hexdigest()[:16]


# ------------------------------------------------------------------------------ record keys


_TEXT_TYPES = (pb.COLUMN_TYPE_STRING, pb.COLUMN_TYPE_JSON, pb.COLUMN_TYPE_UUID)
_INT_TYPES = (pb.COLUMN_TYPE_INT16, pb.COLUMN_TYPE_INT32, pb.COLUMN_TYPE_INT64)


def placeholder_literal(column: pb.Column, raw: Any, wire: str) -> Value | None:
    """``raw``, a value a converter read as Debezium's unchanged-TOAST placeholder, as the column's
    real value (for an insert or a snapshot read, where PostgreSQL always sends the value); None for
    a form that has no literal reading here (geometry)."""
    ctype = column.type
    if ctype in _TEXT_TYPES:
        if raw.__class__ is str:
            return Value(string_value=raw)
        if raw.__class__ is dict:  # hstore
            return Value(string_value=orjson.dumps(raw, option=orjson.OPT_SORT_KEYS).decode())
        return None
    if ctype == pb.COLUMN_TYPE_BYTES:
        if raw.__class__ is bytes:
            return Value(bytes_value=raw)
        return Value(bytes_value=_b64(raw)) if wire == "json" and raw.__class__ is str else None
    if ctype == pb.COLUMN_TYPE_LIST and raw.__class__ is list:
        values = []
        for item in raw:
            if item is None:
                values.append(Value())
                continue
            if column.element.type in _INT_TYPES and item.__class__ is int:
                values.append(Value(int_value=item))
                continue
            elem = placeholder_literal(column.element, item, wire)
            if elem is None:
                return None
            values.append(elem)
        return Value(list_value=pb.ListValue(values=values))
    return None


def key_text(column: pb.Column, value: pb.Value) -> str | None:
    """How a key value is rendered in the Hudi record key (``None`` for NULL).

    Integers, strings, UUIDs and decimal text as they are; booleans ``true``/``false``; dates as
    ``yyyy-MM-dd`` (Hudi renders Avro ``date`` values as LocalDate text); times, timestamps and
    durations as their microsecond numbers (Hudi renders ``timestamp-micros`` longs as numbers);
    doubles by Python's ``repr``; bytes base64; lists (whole-row keys only) as a JSON array of those.
    """
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    if kind == "int_value":
        if column.type == pb.COLUMN_TYPE_DATE:  # any int32 day, as Arrow casts date32 to text
            year, month, day = civil_from_days(value.int_value)
            sign = "-" if year < 0 else ""
            return f"{sign}{abs(year):04d}-{month:02d}-{day:02d}"
        return str(value.int_value)
    if kind == "string_value":
        return value.string_value
    if kind == "decimal_value":
        return value.decimal_value
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "double_value":
        return repr(value.double_value)
    if kind == "bytes_value":
        return binascii.b2a_base64(value.bytes_value, newline=False).decode()
    if kind == "list_value":  # only in the whole-row keys of tables without a primary key
        return orjson.dumps([key_text(column.element, v) for v in value.list_value.values]).decode()
    raise ValueError(f"a {kind} cannot be part of a record key")
