"""Table schemas: Arrow <-> Avro (the form Hudi records in commit metadata) and schema evolution.

Evolution on write follows Apache Hudi's rules for schema-on-write: new nullable columns may be
added, types may be promoted (int -> long/float/double, long -> float/double, float -> double,
string <-> bytes is refused, decimal precision may widen at equal scale), dropped columns are
refused unless nullable (they are filled with nulls). Anything else is refused before a byte is
written.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.errors import SchemaError


class MetaField(enum.StrEnum):
    """Hudi's meta columns (``HoodieRecord.HoodieMetadataField``), in file order."""

    COMMIT_TIME = "_hoodie_commit_time"
    COMMIT_SEQNO = "_hoodie_commit_seqno"
    RECORD_KEY = "_hoodie_record_key"
    PARTITION_PATH = "_hoodie_partition_path"
    FILE_NAME = "_hoodie_file_name"


META_COLUMNS: tuple[str, ...] = tuple(f.value for f in MetaField)
IS_DELETED_COLUMN = "_hoodie_is_deleted"
MAX_DECIMAL_PRECISION = 38  # Spark's, hudi-rs's (Arrow decimal128) and this reader's
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_]")


def meta_schema() -> pa.Schema:
    return pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS])


def without_meta(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in META_COLUMNS], metadata=schema.metadata)


# ---------------------------------------------------------------- normalisation of input types


def normalize_type(typ: pa.DataType) -> pa.DataType:
    """The storage type Inlet writes for an input type (what Hudi/Avro can represent)."""
    if pa.types.is_timestamp(typ):
        # Hudi stores timestamps as UTC instants with micro- (or milli-) second precision
        unit = "ms" if typ.unit in ("s", "ms") else "us"
        return pa.timestamp(unit, tz="UTC")
    if pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return pa.string()
    if pa.types.is_large_binary(typ) or pa.types.is_binary_view(typ) or pa.types.is_fixed_size_binary(typ):
        return pa.binary()
    if pa.types.is_int8(typ) or pa.types.is_int16(typ) or pa.types.is_uint8(typ) or pa.types.is_uint16(typ):
        return pa.int32()
    if pa.types.is_uint32(typ):
        return pa.int64()
    if pa.types.is_uint64(typ):
        raise SchemaError("unsigned 64-bit integers are not supported by Hudi (no Avro type holds them)")
    if pa.types.is_float16(typ):
        return pa.float32()
    if pa.types.is_decimal(typ) and not pa.types.is_decimal128(typ):
        if typ.precision > MAX_DECIMAL_PRECISION:
            # Avro would take it, but no reader Inlet serves does (nor Inlet's own, nor Spark)
            raise SchemaError(
                f"decimal({typ.precision}, {typ.scale}) exceeds the maximum precision "
                f"{MAX_DECIMAL_PRECISION} of Hudi's readers"
            )
        return pa.decimal128(typ.precision, typ.scale)
    if pa.types.is_date64(typ):
        return pa.date32()
    if pa.types.is_dictionary(typ):
        return normalize_type(typ.value_type)
    if pa.types.is_large_list(typ) or pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ):
        return pa.list_(pa.field("element", normalize_type(typ.value_type), True))
    if pa.types.is_map(typ):
        if not (pa.types.is_string(typ.key_type) or pa.types.is_large_string(typ.key_type)):
            raise SchemaError(f"map keys must be strings in Hudi (Avro maps), got {typ.key_type}")
        return pa.map_(pa.string(), normalize_type(typ.item_type))
    if pa.types.is_struct(typ):
        return pa.struct([pa.field(f.name, normalize_type(f.type), True) for f in typ])
    if pa.types.is_time(typ) or pa.types.is_duration(typ) or pa.types.is_interval(typ):
        raise SchemaError(f"type {typ} is not supported by Hudi tables")
    if pa.types.is_null(typ):
        return pa.string()
    return typ


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, normalize_type(f.type), True) for f in schema])


def cast_to(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Cast ``table`` to ``schema`` (same column order), adding null columns it lacks."""
    cols = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            if pa.types.is_timestamp(col.type) and col.type.tz is None and pa.types.is_timestamp(f.type):
                col = pc.assume_timezone(col, "UTC")  # naive timestamps are taken as UTC
            if not col.type.equals(f.type):
                try:
                    col = col.cast(f.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise SchemaError(f"column {f.name!r}: cannot convert {col.type} to {f.type}: {e}") from e
            cols.append(col)
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


# ---------------------------------------------------------------- evolution

_PROMOTIONS: dict[str, tuple[str, ...]] = {
    "int32": ("int64", "float", "double"),
    "int64": ("float", "double"),
    "float": ("double",),
}


def _type_key(typ: pa.DataType) -> str:
    return str(typ)


def promotable(old: pa.DataType, new: pa.DataType) -> bool:
    if old.equals(new):
        return True
    if _type_key(new) in _PROMOTIONS.get(_type_key(old), ()):
        return True
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return bool(new.scale == old.scale and new.precision >= old.precision)
    if pa.types.is_timestamp(old) and pa.types.is_timestamp(new):
        return True  # precision is normalised to micros on write
    if pa.types.is_date32(old) and pa.types.is_timestamp(new):
        return False
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        try:
            evolve(pa.schema(list(old)), pa.schema(list(new)))
        except SchemaError:
            return False
        return True
    if (pa.types.is_list(old) and pa.types.is_list(new)) or (pa.types.is_map(old) and pa.types.is_map(new)):
        return promotable(
            old.value_type if pa.types.is_list(old) else old.item_type,
            new.value_type if pa.types.is_list(new) else new.item_type,
        )
    return False


def _merge_type(old: pa.DataType, new: pa.DataType, name: str) -> pa.DataType:
    if old.equals(new):
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        merged = evolve(pa.schema(list(old)), pa.schema(list(new)), prefix=name + ".")
        return pa.struct(list(merged))
    if pa.types.is_list(old) and pa.types.is_list(new):
        return pa.list_(
            pa.field("element", _merge_type(old.value_type, new.value_type, name + ".element"), True)
        )
    if pa.types.is_map(old) and pa.types.is_map(new):
        return pa.map_(pa.string(), _merge_type(old.item_type, new.item_type, name + ".value"))
    if promotable(old, new):
        return new
    if promotable(new, old):
        return old  # narrower input is widened to the table's type on write
    raise SchemaError(f"column {name!r}: type {new} is not compatible with the table's type {old}")


def evolve(table_schema: pa.Schema, input_schema: pa.Schema, prefix: str = "") -> pa.Schema:
    """The table schema after writing data of ``input_schema``; raises SchemaError if incompatible.

    Columns keep the table's order; new columns are appended. Input may omit nullable columns.
    """
    fields = []
    input_names = set(input_schema.names)
    for f in table_schema:
        if f.name in input_names:
            new = input_schema.field(f.name)
            fields.append(pa.field(f.name, _merge_type(f.type, new.type, prefix + f.name), True))
        else:
            if not f.nullable:
                raise SchemaError(f"required column {prefix + f.name!r} is missing from the input")
            fields.append(f)
    existing = set(table_schema.names)
    for f in input_schema:
        if f.name not in existing:
            fields.append(pa.field(f.name, f.type, True))
    return pa.schema(fields)


# ---------------------------------------------------------------- Arrow <-> Avro


def _avro_name(name: str) -> str:
    safe = _SAFE_NAME.sub("_", name)
    return safe if safe and not safe[0].isdigit() else "_" + safe


def decimal_fixed_size(precision: int) -> int:
    """Smallest byte count holding a decimal of this precision (Hudi/Spark's fixed size)."""
    size = 1
    while 2 ** (8 * size - 1) - 1 < 10**precision - 1:
        size += 1
    return size


def _arrow_to_avro(typ: pa.DataType, name: str, namespace: str) -> Any:
    if pa.types.is_boolean(typ):
        return "boolean"
    if pa.types.is_int8(typ) or pa.types.is_int16(typ) or pa.types.is_int32(typ):
        return "int"
    if pa.types.is_int64(typ):
        return "long"
    if pa.types.is_float32(typ):
        return "float"
    if pa.types.is_float64(typ):
        return "double"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "string"
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return "bytes"
    if pa.types.is_decimal(typ):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": decimal_fixed_size(typ.precision),
            "logicalType": "decimal",
            "precision": typ.precision,
            "scale": typ.scale,
        }
    if pa.types.is_date32(typ):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(typ):
        local = "" if typ.tz is not None else "local-"
        unit = "millis" if typ.unit in ("s", "ms") else "micros"
        return {"type": "long", "logicalType": f"{local}timestamp-{unit}"}
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return {"type": "array", "items": _nullable(_arrow_to_avro(typ.value_type, name, namespace))}
    if pa.types.is_map(typ):
        return {"type": "map", "values": _nullable(_arrow_to_avro(typ.item_type, name, namespace))}
    if pa.types.is_struct(typ):
        return _record(list(typ), name, namespace)
    raise SchemaError(f"type {typ} of column {name!r} has no Avro form")


def _nullable(avro_type: Any) -> Any:
    return ["null", avro_type]


def _record(fields: list[pa.Field], name: str, namespace: str) -> dict[str, Any]:
    child_ns = f"{namespace}.{name}"
    return {
        "type": "record",
        "name": _avro_name(name),
        "namespace": namespace,
        "fields": [
            {
                "name": f.name,
                "type": _nullable(_arrow_to_avro(f.type, _avro_name(f.name), child_ns)),
                "default": None,
            }
            for f in fields
        ],
    }


def to_avro_schema(schema: pa.Schema, table_name: str) -> str:
    """Avro schema JSON of a table, named the way Hudi's Spark writer names it."""
    rec = _record(list(without_meta(schema)), f"{table_name}_record", f"hoodie.{table_name}")
    return json.dumps(rec, separators=(",", ":"))


def _avro_to_arrow(t: Any) -> tuple[pa.DataType, bool]:
    """(arrow type, nullable) of an Avro type."""
    if isinstance(t, list):
        non_null = [x for x in t if x != "null"]
        if len(non_null) != 1:
            raise SchemaError(f"unsupported Avro union {t}")
        typ, _ = _avro_to_arrow(non_null[0])
        return typ, "null" in t
    if isinstance(t, str):
        simple = {
            "boolean": pa.bool_(),
            "int": pa.int32(),
            "long": pa.int64(),
            "float": pa.float32(),
            "double": pa.float64(),
            "string": pa.string(),
            "bytes": pa.binary(),
            "null": pa.null(),
        }
        if t in simple:
            return simple[t], False
        raise SchemaError(f"unsupported Avro type {t!r}")
    logical = t.get("logicalType")
    kind = t.get("type")
    if logical == "decimal":
        return pa.decimal128(int(t["precision"]), int(t.get("scale", 0))), False
    if logical == "date":
        return pa.date32(), False
    if logical in ("timestamp-micros", "timestamp-millis"):
        return pa.timestamp("us" if logical.endswith("micros") else "ms", tz="UTC"), False
    if logical in ("local-timestamp-micros", "local-timestamp-millis"):
        return pa.timestamp("us" if logical.endswith("micros") else "ms"), False
    if logical == "uuid":
        return pa.string(), False
    if kind == "record":
        return pa.struct([pa.field(f["name"], *_avro_to_arrow(f["type"])) for f in t["fields"]]), False
    if kind == "array":
        item, nullable = _avro_to_arrow(t["items"])
        return pa.list_(pa.field("element", item, nullable)), False
    if kind == "map":
        item, nullable = _avro_to_arrow(t["values"])
        return pa.map_(pa.string(), pa.field("value", item, nullable)), False
    if kind == "enum":
        return pa.string(), False
    if kind == "fixed":
        return pa.binary(), False
    if isinstance(kind, str | list | dict):
        return _avro_to_arrow(kind)
    raise SchemaError(f"unsupported Avro type {t}")


def from_avro_schema(avro_json: str) -> pa.Schema:
    rec = json.loads(avro_json)
    typ, _ = _avro_to_arrow(rec)
    return without_meta(pa.schema(list(typ)))
