"""Spark SQL types <-> Arrow <-> the table's Avro schema, and which Spark types a table can hold.

The Arrow form is pyspark's own (``pyspark.sql.pandas.types``): what ``mapInArrow``,
``applyInArrow`` and Python data sources exchange with the JVM. On top of it:

=============================  ===========================  =========================================
Spark                          Arrow (Inlet stores)         Avro (commit metadata, Hudi's Spark form)
=============================  ===========================  =========================================
boolean                        bool                         boolean
byte, short, int               int8/int16 -> int32          int (read back as ``int``)
long                           int64                        long
float, double                  float32, float64             float, double
decimal(p, s)                  decimal128(p, s)             fixed, logicalType decimal
string, char(n), varchar(n)    string                       string
binary                         binary                       bytes
date                           date32                       int, logicalType date
timestamp                      timestamp[us, UTC]           long, logicalType timestamp-micros
array<T>                       list<element: T>             array
map<string, T>                 map<string, T>               map (Avro maps have string keys)
struct<...>                    struct<...>                  record
void (NullType)                null -> string               string (always null)
=============================  ===========================  =========================================

Timestamps are UTC instants: Spark's ``TimestampType`` holds microseconds since the epoch in
UTC whatever ``spark.sql.session.timeZone`` says (the zone only affects how values are parsed
and shown), which is exactly Hudi's ``timestamp-micros``. Tables written by Apache Hudi with
``timestamp-millis`` are read as ``TimestampType`` too (widened to micros), and
``local-timestamp-*`` columns as ``TimestampNTZType``.

Refused on write (:func:`check_writable`, before any file is written), naming the column:

- ``timestamp_ntz``: Inlet's writer stores every timestamp as a UTC instant
  (``timestamp-micros``); a wall-clock value without a zone would silently become an instant
  and read back shifted by the reader's session zone. Cast it first (``to_utc_timestamp(c,
  zone)`` or ``c.cast("timestamp")``).
- ``interval`` (CalendarInterval), ``interval day to second``, ``interval year to month``: no
  Avro type holds them (Apache Hudi refuses them too).
- ``time``: no Hudi/Avro reader Inlet writes for understands it yet.
- ``variant``, ``geometry``, ``geography``: not part of the Hudi table format Inlet writes.
- maps whose keys are not strings (Avro maps only have string keys).
- duplicate column or struct field names (Avro records need unique names).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type as _pyspark_from_arrow_type
from pyspark.sql.pandas.types import to_arrow_schema as _pyspark_to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
    CharType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    UserDefinedType,
    VarcharType,
    YearMonthIntervalType,
)

from inlet.core.errors import SchemaError
from inlet.core.schema import (
    META_COLUMNS,
    cast_to,
    from_avro_schema,
    meta_schema,
    normalize_schema,
    to_avro_schema,
)

UTC = "UTC"
SPARK_MAX_DECIMAL_PRECISION = 38

_WRITABLE_ATOMS = (
    BooleanType,
    ByteType,
    ShortType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    CharType,
    VarcharType,
    BinaryType,
    DateType,
    TimestampType,
    NullType,
)

_NTZ_REASON = (
    "Inlet stores timestamps as UTC instants (Avro timestamp-micros), so a timestamp without a time "
    "zone would change meaning; cast it first, e.g. to_utc_timestamp(col, 'Europe/Paris') or "
    "col.cast('timestamp')"
)
_INTERVAL_REASON = "no Avro type holds intervals (Apache Hudi refuses them too)"


def _why_not(typ: DataType) -> str:
    if isinstance(typ, TimestampNTZType):
        return _NTZ_REASON
    if isinstance(typ, CalendarIntervalType | DayTimeIntervalType | YearMonthIntervalType):
        return _INTERVAL_REASON
    name = type(typ).__name__
    if name == "TimeType":
        return "Hudi readers do not understand a TIME column yet (store it as a string or a long)"
    if name == "VariantType":
        return (
            "variant columns are not part of the Hudi table format Inlet writes (store them as JSON strings)"
        )
    if name in ("GeometryType", "GeographyType"):
        return "spatial columns are not part of the Hudi table format Inlet writes (store them as WKB binary)"
    return "Hudi tables cannot store it"


def _walk(typ: DataType, path: str) -> Iterator[tuple[str, DataType, str]]:
    """(column path, type, reason) of every unwritable type inside ``typ``."""
    if isinstance(typ, UserDefinedType):
        yield from _walk(typ.sqlType(), path)
    elif isinstance(typ, StructType):
        seen: set[str] = set()
        for f in typ.fields:
            child = f"{path}.{f.name}" if path else f.name
            if f.name in seen:
                yield child, f.dataType, "the name occurs twice (Avro record fields need unique names)"
            seen.add(f.name)
            yield from _walk(f.dataType, child)
    elif isinstance(typ, ArrayType):
        yield from _walk(typ.elementType, f"{path}.element")
    elif isinstance(typ, MapType):
        key = typ.keyType
        if not isinstance(key, StringType | CharType | VarcharType):
            yield f"{path}.key", key, "Avro maps (and so Hudi tables) only have string keys"
        yield from _walk(typ.valueType, f"{path}.value")
    elif not isinstance(typ, _WRITABLE_ATOMS) or isinstance(typ, TimestampNTZType):
        yield path, typ, _why_not(typ)


def unwritable_columns(schema: StructType) -> list[tuple[str, str, str]]:
    """(column path, Spark type, reason) of every column :func:`check_writable` refuses."""
    return [(path, typ.simpleString(), why) for path, typ, why in _walk(schema, "")]


def check_writable(schema: StructType) -> None:
    """Raise :class:`SchemaError` naming the column(s) and type(s) a Hudi table cannot store."""
    bad = unwritable_columns(schema)
    if bad:
        listed = "; ".join(f"column {path!r} of type {typ}: {why}" for path, typ, why in bad)
        raise SchemaError(f"cannot write to a Hudi table: {listed}")


# ---------------------------------------------------------------- Spark -> Arrow / Avro


def _plain_strings(typ: DataType) -> DataType:
    """char(n) / varchar(n) as plain strings (pyspark's Arrow mapping has no case for them)."""
    if isinstance(typ, CharType | VarcharType):
        return StringType()
    if isinstance(typ, StructType):
        return StructType(
            [StructField(f.name, _plain_strings(f.dataType), f.nullable, f.metadata) for f in typ.fields]
        )
    if isinstance(typ, ArrayType):
        return ArrayType(_plain_strings(typ.elementType), typ.containsNull)
    if isinstance(typ, MapType):
        return MapType(_plain_strings(typ.keyType), _plain_strings(typ.valueType), typ.valueContainsNull)
    return typ


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark exchanges for ``schema`` (timestamps ``timestamp[us, tz=UTC]``).

    This is what a Python data source's ``read`` must yield and what ``mapInArrow`` batches
    carry (up to the time zone name, which does not change the values). Refuses nothing:
    call :func:`check_writable` before writing.
    """
    plain = _plain_strings(schema)
    assert isinstance(plain, StructType)
    return _pyspark_to_arrow_schema(plain, timezone=UTC)


def to_table_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Inlet stores for data of Spark ``schema`` (checked first).

    Meta columns (``_hoodie_*``) in ``schema`` are left out: the writer sets them.
    """
    check_writable(schema)
    data = StructType([f for f in schema.fields if f.name not in META_COLUMNS])
    return normalize_schema(to_arrow_schema(data))


def to_avro_schema_json(schema: StructType, table_name: str) -> str:
    """The Avro schema (JSON) Hudi records in commit metadata for data of Spark ``schema``."""
    return to_avro_schema(to_table_arrow_schema(schema), table_name)


# ---------------------------------------------------------------- Arrow / Avro -> Spark


def _nullable_type(typ: pa.DataType) -> DataType:
    if pa.types.is_decimal(typ) and typ.precision > SPARK_MAX_DECIMAL_PRECISION:
        raise SchemaError(
            f"decimal({typ.precision}, {typ.scale}) exceeds Spark's maximum precision "
            f"{SPARK_MAX_DECIMAL_PRECISION}"
        )
    if pa.types.is_unsigned_integer(typ) or pa.types.is_float16(typ):
        raise SchemaError(f"Arrow type {typ} has no Spark type")
    try:
        out = _pyspark_from_arrow_type(typ, prefer_timestamp_ntz=True)
    except Exception as e:  # pyspark's PySparkTypeError for types it cannot map
        raise SchemaError(f"Arrow type {typ} has no Spark type: {e}") from e
    return _all_nullable(out)


def _all_nullable(typ: DataType) -> DataType:
    """Hudi's Avro fields are nullable unions: so are the Spark fields Inlet shows."""
    if isinstance(typ, StructType):
        return StructType([StructField(f.name, _all_nullable(f.dataType), True) for f in typ.fields])
    if isinstance(typ, ArrayType):
        return ArrayType(_all_nullable(typ.elementType), True)
    if isinstance(typ, MapType):
        return MapType(typ.keyType, _all_nullable(typ.valueType), True)
    return typ


def from_arrow_schema(schema: pa.Schema) -> StructType:
    """Spark schema of Arrow ``schema`` as Inlet reads it: every field nullable, zoned timestamps
    ``TimestampType``, naive ones (Avro ``local-timestamp-*``) ``TimestampNTZType``."""
    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, _nullable_type(f.type), True))
        except SchemaError as e:
            raise SchemaError(f"column {f.name!r}: {e}") from e
    return StructType(fields)


def from_avro_schema_json(avro_json: str, meta_columns: bool = False) -> StructType:
    """Spark schema of a table's Avro schema (the five ``_hoodie_*`` columns first if asked)."""
    data = from_avro_schema(avro_json)
    meta = list(meta_schema()) if meta_columns else []
    return from_arrow_schema(pa.schema(meta + list(data)))


# ---------------------------------------------------------------- data


def conform(data: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """``data`` cast to ``schema`` exactly (column order, types, field names and nullability), as
    Spark requires of what a Python data source yields. Millisecond timestamps widen to micros,
    list items are renamed ``element``, missing columns become nulls."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    return cast_to(table, schema)


__all__ = [
    "check_writable",
    "conform",
    "from_arrow_schema",
    "from_avro_schema_json",
    "to_arrow_schema",
    "to_avro_schema_json",
    "to_table_arrow_schema",
    "unwritable_columns",
]
