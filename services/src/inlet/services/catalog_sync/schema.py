"""The table schema as HiveSyncTool registers it: Avro -> Parquet -> Hive column types and Spark's schema JSON.

Apache Hudi's HiveSyncTool (HMS mode) does not map Avro to Hive directly. It takes the table's Avro schema
(``TableSchemaResolver``: the latest commit's writer schema with the five ``_hoodie_*`` meta fields
prepended as optional strings), converts it to a Parquet ``MessageType`` with parquet-avro's
``AvroSchemaConverter`` (old two-level list structure: ``repeated <elem> array``; string-keyed maps as
``repeated group map (MAP_KEY_VALUE) {required binary key (UTF8); value}``), and then

* ``HiveSchemaUtil.parquetSchemaToMapSchema`` / ``convertField`` turn every top-level Parquet field into a
  Hive type string (lower-cased by ``convertMapSchemaToHiveFieldSchema``): ``boolean``, ``int`` (any INT32,
  also int8/int16/time-millis), ``bigint`` (any INT64: long, time-micros, and timestamps unless
  ``hoodie.datasource.hive_sync.support_timestamp=true`` makes TIMESTAMP_MICROS/MILLIS ``timestamp``),
  ``float``, ``double``, ``string`` (UTF8/ENUM), ``binary`` (bytes, fixed), ``date``,
  ``decimal(p,s)``, ``array<T>``, ``map<string,T>``, ``struct<a:T,...>`` (nested names with ``$`` ->
  ``_dollar_``; ``-`` -> ``_`` anywhere in a struct's text);
* ``Parquet2SparkSchemaUtils.convertToSparkSchemaJson`` writes the Spark schema JSON stored in the
  ``spark.sql.sources.schema.part.N`` table properties, with the partition columns moved to the end
  (``SparkDataSourceTableUtils.getSparkTableProperties``), byte for byte as Hudi's hand-written JSON
  (note the ``", "`` inside array and map types).

This module rebuilds the Parquet field tree from the Avro schema (only what those converters look at) and
applies both converters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from inlet.core.schema import META_COLUMNS
from inlet.services.catalog_sync.errors import CatalogSyncError

META_FIELDS = META_COLUMNS

REQUIRED, OPTIONAL, REPEATED = "REQUIRED", "OPTIONAL", "REPEATED"


@dataclass
class PType:
    """One Parquet field: a primitive (``primitive`` set) or a group (``fields``)."""

    name: str
    repetition: str
    primitive: str | None = None  # BOOLEAN INT32 INT64 FLOAT DOUBLE BINARY FIXED_LEN_BYTE_ARRAY
    original: str | None = None  # UTF8 ENUM DECIMAL DATE TIMESTAMP_MICROS ... LIST MAP MAP_KEY_VALUE
    precision: int = 0
    scale: int = 0
    fields: list[PType] = field(default_factory=list)

    @property
    def is_primitive(self) -> bool:
        return self.primitive is not None


# -- Avro -> Parquet (parquet-avro AvroSchemaConverter, old list structure) ----------------------------


def with_meta_fields(avro_schema: dict[str, Any]) -> dict[str, Any]:
    """``HoodieAvroUtils.addMetadataFields``: the five meta fields (optional strings) first, once."""
    fields = [f for f in avro_schema.get("fields", []) if f.get("name") not in META_FIELDS]
    meta = [{"name": n, "type": ["null", "string"], "doc": "", "default": None} for n in META_FIELDS]
    return {**avro_schema, "fields": meta + fields}


def without_meta_fields(avro_schema: dict[str, Any]) -> dict[str, Any]:
    fields = [f for f in avro_schema.get("fields", []) if f.get("name") not in META_FIELDS]
    return {**avro_schema, "fields": fields}


def avro_to_parquet(avro_schema: dict[str, Any]) -> list[PType]:
    """The top-level Parquet fields parquet-avro derives from a record schema."""
    if avro_schema.get("type") != "record":
        raise CatalogSyncError("the table schema is not an Avro record")
    named: dict[str, Any] = {}
    return [_convert_field(f["name"], f["type"], REQUIRED, named) for f in avro_schema.get("fields", [])]


def _register(schema: Any, named: dict[str, Any]) -> None:
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed") and "name" in schema:
        name = schema["name"]
        ns = schema.get("namespace")
        named[name] = schema
        if ns and "." not in name:
            named[f"{ns}.{name}"] = schema


def _resolve(schema: Any, named: dict[str, Any]) -> Any:
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, str) and "." in schema and schema.rsplit(".", 1)[1] in named:
        return named[schema.rsplit(".", 1)[1]]
    return schema


def _convert_field(name: str, schema: Any, repetition: str, named: dict[str, Any]) -> PType:
    schema = _resolve(schema, named)
    if isinstance(schema, list):  # union
        non_null = [
            s for s in schema if s != "null" and not (isinstance(s, dict) and s.get("type") == "null")
        ]
        has_null = len(non_null) < len(schema)
        if has_null and repetition == REQUIRED:
            repetition = OPTIONAL
        if not non_null:
            raise CatalogSyncError(f"field {name!r} is a union of nulls only")
        if len(non_null) == 1 and has_null:
            return _convert_field(name, non_null[0], repetition, named)
        if len(non_null) == 1:
            members = [_convert_field("member0", non_null[0], OPTIONAL, named)]
        else:
            members = [_convert_field(f"member{i}", s, OPTIONAL, named) for i, s in enumerate(non_null)]
        return PType(name, repetition, fields=members)
    if isinstance(schema, str):
        schema = {"type": schema}
    _register(schema, named)
    t = schema.get("type")
    logical = schema.get("logicalType")
    if isinstance(t, (dict, list)):
        return _convert_field(name, t, repetition, named)
    if t == "null":
        raise CatalogSyncError(f"field {name!r} has type null, which Parquet cannot store")
    if t == "boolean":
        return PType(name, repetition, "BOOLEAN")
    if t == "int":
        if logical == "date":
            return PType(name, repetition, "INT32", "DATE")
        if logical == "time-millis":
            return PType(name, repetition, "INT32", "TIME_MILLIS")
        return PType(name, repetition, "INT32")
    if t == "long":
        original = {
            "timestamp-millis": "TIMESTAMP_MILLIS",
            "timestamp-micros": "TIMESTAMP_MICROS",
            "local-timestamp-millis": "TIMESTAMP_MILLIS",
            "local-timestamp-micros": "TIMESTAMP_MICROS",
            "time-micros": "TIME_MICROS",
        }.get(logical or "")
        return PType(name, repetition, "INT64", original)
    if t == "float":
        return PType(name, repetition, "FLOAT")
    if t == "double":
        return PType(name, repetition, "DOUBLE")
    if t in ("bytes", "fixed"):
        prim = "BINARY" if t == "bytes" else "FIXED_LEN_BYTE_ARRAY"
        if logical == "decimal":
            return PType(
                name, repetition, prim, "DECIMAL", int(schema["precision"]), int(schema.get("scale", 0))
            )
        return PType(name, repetition, prim)
    if t == "string":
        return PType(name, repetition, "BINARY", "UTF8")
    if t == "enum":
        return PType(name, repetition, "BINARY", "ENUM")
    if t == "record":
        return PType(
            name,
            repetition,
            fields=[_convert_field(f["name"], f["type"], REQUIRED, named) for f in schema.get("fields", [])],
        )
    if t == "array":
        element = _convert_field("array", schema["items"], REPEATED, named)
        return PType(name, repetition, original="LIST", fields=[element])
    if t == "map":
        key = PType("key", REQUIRED, "BINARY", "UTF8")
        value = _convert_field("value", schema["values"], REQUIRED, named)
        kv = PType("map", REPEATED, original="MAP_KEY_VALUE", fields=[key, value])
        return PType(name, repetition, original="MAP", fields=[kv])
    raise CatalogSyncError(f"field {name!r}: Avro type {t!r} is not supported")


# -- Parquet -> Hive (HiveSchemaUtil, HMS mode: doFormat=false) ---------------------------------------


def hive_type(p: PType, support_timestamp: bool) -> str:
    """``HiveSchemaUtil.convertField`` with ``doFormat=false`` (upper-case keywords; callers lower-case)."""
    if p.is_primitive:
        if p.original == "DECIMAL":
            return f"DECIMAL({p.precision},{p.scale})"
        if p.original == "DATE":
            return "DATE"
        if support_timestamp and p.original in ("TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"):
            return "TIMESTAMP"
        prim = p.primitive
        if prim == "BOOLEAN":
            return "boolean"
        if prim == "INT32":
            return "int"
        if prim == "INT64":
            return "bigint"
        if prim == "INT96":
            return "timestamp-millis"
        if prim == "FLOAT":
            return "float"
        if prim == "DOUBLE":
            return "double"
        if prim == "FIXED_LEN_BYTE_ARRAY":
            return "binary"
        if prim == "BINARY":
            return "string" if p.original in ("UTF8", "ENUM") else "binary"
        raise CatalogSyncError(f"cannot convert Parquet type {prim} of {p.name!r}")
    if p.original == "LIST":
        if len(p.fields) != 1 or p.fields[0].repetition != REPEATED:
            raise CatalogSyncError(f"invalid list type {p.name!r}")
        return _hive_array(p.fields[0], p.name, support_timestamp)
    if p.original == "MAP":
        kv = p.fields[0]
        key, value = kv.fields
        if not key.is_primitive or key.primitive != "BINARY" or key.original != "UTF8":
            raise CatalogSyncError(f"map key type of {p.name!r} must be a string")
        return f"MAP<{hive_type(key, support_timestamp)},{hive_type(value, support_timestamp)}>"
    if p.original in ("UTF8", "ENUM"):
        return "string"
    if p.original is not None:
        raise CatalogSyncError(f"cannot convert Parquet type of {p.name!r}")
    return _hive_struct(p.fields, support_timestamp)


def _hive_struct(fields: list[PType], support_timestamp: bool) -> str:
    parts = [f"{f.name.replace('$', '_dollar_')}:{hive_type(f, support_timestamp)}" for f in fields]
    return ("STRUCT<" + ",".join(parts) + ">").replace("-", "_")


def _hive_array(element: PType, parent: str, support_timestamp: bool) -> str:
    if (
        element.is_primitive
        or len(element.fields) > 1
        or (len(element.fields) == 1 and element.name in ("array", f"{parent}_tuple"))
    ):
        inner = hive_type(element, support_timestamp)
    else:
        inner = hive_type(element.fields[0], support_timestamp)
    return f"ARRAY<{inner}>"


def hive_columns(fields: list[PType], support_timestamp: bool) -> list[tuple[str, str]]:
    """(name, lower-cased Hive type) per top-level field, in schema order (``parquetSchemaToMapSchema``)."""
    out = []
    for f in fields:
        text = (
            _hive_array(f, "", support_timestamp)
            if f.repetition == REPEATED
            else hive_type(f, support_timestamp)
        )
        out.append((f.name, text.lower()))
    return out


# -- Parquet -> Spark schema JSON (Parquet2SparkSchemaUtils) -----------------------------------------


def spark_schema_json(fields: list[PType]) -> str:
    """``Parquet2SparkSchemaUtils.convertToSparkSchemaJson`` of a group with these fields."""
    parts = []
    for f in fields:
        if f.repetition == OPTIONAL:
            parts.append(f'{{"name":"{f.name}","type":{_spark_type(f)},"nullable":true,"metadata":{{}}}}')
        elif f.repetition == REQUIRED:
            parts.append(f'{{"name":"{f.name}","type":{_spark_type(f)},"nullable":false,"metadata":{{}}}}')
        else:
            parts.append(
                f'{{"name":"{f.name}","type":{_spark_array(f, False)},"nullable":false,"metadata":{{}}}}'
            )
    return '{"type":"struct","fields":[' + ",".join(parts) + "]}"


def _spark_type(f: PType) -> str:
    if f.is_primitive:
        return f'"{_spark_primitive(f)}"'
    if f.original is None:
        return spark_schema_json(f.fields)
    if f.original == "LIST":
        if len(f.fields) != 1:
            raise CatalogSyncError(f"illegal list type {f.name!r}")
        repeated = f.fields[0]
        if (
            repeated.is_primitive
            or len(repeated.fields) > 1
            or repeated.name == "array"
            or repeated.name == f"{f.name}_tuple"
        ):
            return _spark_array(repeated, False)
        element = repeated.fields[0]
        return _spark_array(element, element.repetition == OPTIONAL)
    if f.original in ("MAP", "MAP_KEY_VALUE"):
        kv = f.fields[0]
        key, value = kv.fields[0], kv.fields[1]
        contains_null = "true" if value.repetition == OPTIONAL else "false"
        return (
            f'{{"type":"map", "keyType":{_spark_type(key)},"valueType":{_spark_type(value)}'
            f',"valueContainsNull":{contains_null}}}'
        )
    raise CatalogSyncError(f"cannot convert {f.name!r} to a Spark SQL type")


def _spark_array(element: PType, contains_null: bool) -> str:
    return f'{{"type":"array", "elementType":{_spark_type(element)},"containsNull":{"true" if contains_null else "false"}}}'


def _spark_primitive(f: PType) -> str:
    prim, orig = f.primitive, f.original
    decimal = f"decimal({f.precision},{f.scale})"
    if prim == "BOOLEAN":
        return "boolean"
    if prim == "FLOAT":
        return "float"
    if prim == "DOUBLE":
        return "double"
    if prim == "INT32":
        mapping = {None: "integer", "INT_8": "byte", "INT_16": "short", "INT_32": "integer", "DATE": "date"}
        if orig == "DECIMAL":
            return decimal
        if orig in mapping:
            return mapping[orig]
    elif prim == "INT64":
        if orig in (None, "INT_64"):
            return "long"
        if orig == "DECIMAL":
            return decimal
        if orig in ("TIMESTAMP_MICROS", "TIMESTAMP_MILLIS"):
            return "timestamp"
    elif prim == "INT96":
        return "timestamp"
    elif prim == "BINARY":
        if orig is None or orig == "BSON":
            return "binary"
        if orig in ("UTF8", "ENUM", "JSON"):
            return "string"
        if orig == "DECIMAL":
            return decimal
    elif prim == "FIXED_LEN_BYTE_ARRAY" and orig == "DECIMAL":
        return decimal
    raise CatalogSyncError(
        f"column {f.name!r} ({prim} {orig or ''}) has no Spark SQL type in Hudi's Spark schema conversion; "
        "sync with hoodie.datasource.hive_sync.sync_as_datasource=false"
    )


def spark_table_properties(
    fields: list[PType], partition_fields: list[str], spark_version: str, threshold: int
) -> dict[str, str]:
    """``SparkDataSourceTableUtils.getSparkTableProperties``: provider, schema parts, partition columns."""
    by_name = {f.name: f for f in fields}
    partition_cols = [by_name.get(p) or PType(p, REQUIRED, "BINARY", "UTF8") for p in partition_fields]
    data_cols = [f for f in fields if f.name not in partition_fields]
    schema = spark_schema_json(data_cols + partition_cols)
    props = {"spark.sql.sources.provider": "hudi"}
    if spark_version:
        props["spark.sql.create.version"] = spark_version
    num_parts = (len(schema) + threshold - 1) // threshold
    props["spark.sql.sources.schema.numParts"] = str(num_parts)
    for i in range(num_parts):
        props[f"spark.sql.sources.schema.part.{i}"] = schema[i * threshold : (i + 1) * threshold]
    if partition_fields:
        props["spark.sql.sources.schema.numPartCols"] = str(len(partition_fields))
        for i, p in enumerate(partition_fields):
            props[f"spark.sql.sources.schema.partCol.{i}"] = p
    return props


def parse_avro(text: str) -> dict[str, Any]:
    schema = json.loads(text)
    if not isinstance(schema, dict):
        raise CatalogSyncError("the table's Avro schema is not a record")
    return schema


# -- schema difference (HiveSchemaUtil.getSchemaDifference / isSchemaTypeUpdateAllowed) ---------------


def _norm(t: str) -> str:
    return "".join(t.split()).replace("`", "").lower()


def type_update_allowed(prev: str, new: str) -> bool:
    """``HiveSchemaUtil.isSchemaTypeUpdateAllowed``: int -> bigint, float -> double, struct -> struct."""
    p, n = _norm(prev), _norm(new)
    if not p or not n:
        return False
    if p == n or (p == "int" and n == "bigint") or (p == "float" and n == "double"):
        return True
    return "struct" in p and "struct" in n


@dataclass
class SchemaDifference:
    added: list[tuple[str, str]] = field(default_factory=list)
    updated: list[tuple[str, str, str]] = field(default_factory=list)  # (name, old, new)
    deleted: list[str] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.updated or self.deleted)


def schema_difference(
    new_columns: list[tuple[str, str]], table_columns: dict[str, str], partition_keys: list[str], table: str
) -> SchemaDifference:
    """Compare the storage schema with the metastore's columns (+ partition keys), as Hudi does.

    Type changes other than Hudi's allowed ones raise :class:`CatalogSyncError`; so do columns missing from
    the new schema (Hudi would drop them by replacing the column list; Inlet refuses, so a narrower writer
    schema never silently removes columns from the catalog).
    """
    new = {n.lower(): t for n, t in new_columns}
    table_columns = {n.lower(): t for n, t in table_columns.items()}
    lower_parts = [p.lower() for p in partition_keys]
    diff = SchemaDifference()
    seen = set()
    for name, ttype in table_columns.items():
        key = name.lower()
        if key not in new:
            if key not in lower_parts:
                diff.deleted.append(key)
            continue
        seen.add(key)
        if _norm(ttype) != _norm(new[key]):
            if not type_update_allowed(ttype, new[key]):
                raise CatalogSyncError(
                    f"{table}: could not convert field type from {ttype.lower()} to {new[key]} for field {key}"
                )
            diff.updated.append((key, ttype.lower(), new[key]))
    for name, ttype in new_columns:
        if name.lower() not in seen and name.lower() not in table_columns:
            diff.added.append((name, ttype))
    if diff.deleted:
        raise CatalogSyncError(
            f"{table}: the table schema lost column(s) {', '.join(diff.deleted)}; "
            "dropping columns from a catalog table is not supported (nothing was changed)"
        )
    return diff
