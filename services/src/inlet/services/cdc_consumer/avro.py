"""Confluent Avro wire format: magic byte 0, 4-byte big-endian schema id, Avro binary.

Writer schemas come from the schema registry (cached per id). They are read with fastavro with
``logicalType`` annotations removed, so decimals stay their two's-complement bytes and every value
has exactly the encoding the Connect schema (``connect.name`` / ``connect.parameters``) describes;
:func:`to_connect` translates an Avro schema into Kafka Connect's schema form for :mod:`.types`.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from typing import Any

import fastavro
import orjson

from inlet.services.cdc_consumer.errors import DecodeError

MAGIC = 0
HEADER = 5


@dataclass(frozen=True)
class WriterSchema:
    schema_id: int
    parsed: Any  # fastavro's parsed schema
    connect: dict[str, Any]  # the schema in Kafka Connect form


def split(data: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro body) of a Confluent-framed message."""
    if len(data) < HEADER:
        raise DecodeError(
            f"Avro message too short: {len(data)} bytes, the Confluent header alone is {HEADER}"
        )
    if data[0] != MAGIC:
        raise DecodeError(f"not Confluent Avro: magic byte {data[0]}, expected 0")
    return int.from_bytes(data[1:HEADER], "big"), memoryview(data)[HEADER:]


def _strip_logical(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strip_logical(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _strip_logical(v) for k, v in schema.items() if k != "logicalType"}
    return schema


_AVRO_TO_CONNECT = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}


def to_connect(schema: Any, named: dict[str, Any] | None = None, namespace: str = "") -> dict[str, Any]:
    """An Avro schema in Kafka Connect's JSON schema form (``optional`` from ``["null", T]``)."""
    named = {} if named is None else named
    optional = False
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        optional = len(branches) < len(schema)
        if len(branches) != 1:
            raise DecodeError(f"unsupported Avro union {orjson.dumps(schema).decode()[:80]}")
        schema = branches[0]
    if isinstance(schema, str):
        if schema in _AVRO_TO_CONNECT:
            return {"type": _AVRO_TO_CONNECT[schema], "optional": optional}
        ref = named.get(schema) or named.get(f"{namespace}.{schema}")
        if ref is None:
            raise DecodeError(f"unknown Avro type {schema!r}")
        return {**ref, "optional": optional}
    if not isinstance(schema, dict):
        raise DecodeError(f"unsupported Avro schema {schema!r}")
    avro_type = schema.get("type")
    out: dict[str, Any]
    if avro_type == "record":
        ns = schema.get("namespace", namespace)
        full = schema["name"] if "." in schema["name"] or not ns else f"{ns}.{schema['name']}"
        out = {"type": "struct", "fields": []}
        named[full] = out  # before the fields: a record may refer to itself
        for f in schema.get("fields", []):
            sub = to_connect(f["type"], named, ns)
            out["fields"].append({**sub, "field": f["name"]})
    elif avro_type == "array":
        out = {"type": "array", "items": to_connect(schema["items"], named, namespace)}
    elif avro_type == "map":
        out = {
            "type": "map",
            "keys": {"type": "string"},
            "values": to_connect(schema["values"], named, namespace),
        }
    elif avro_type == "enum":
        out = {"type": "string"}
    elif avro_type == "fixed":
        out = {"type": "bytes"}
    elif avro_type in _AVRO_TO_CONNECT:
        connect_type = schema.get("connect.type")
        out = {"type": connect_type if connect_type in ("int8", "int16") else _AVRO_TO_CONNECT[avro_type]}
    elif isinstance(avro_type, (list, dict, str)):
        inner = to_connect(avro_type, named, namespace)
        out = dict(inner)
    else:
        raise DecodeError(f"unsupported Avro type {avro_type!r}")
    if "connect.name" in schema:
        out["name"] = schema["connect.name"]
    if "connect.parameters" in schema:
        out["parameters"] = schema["connect.parameters"]
    out["optional"] = optional
    return out


class SchemaCache:
    """Writer schemas by id, fetched once from a ``confluent_kafka`` ``SchemaRegistryClient``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._schemas: dict[int, WriterSchema] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> WriterSchema:
        found = self._schemas.get(schema_id)
        if found is not None:
            return found
        if self._client is None:
            raise DecodeError(f"Avro message with schema id {schema_id} but no schema registry is configured")
        with self._lock:
            found = self._schemas.get(schema_id)
            if found is None:
                found = self._fetch(schema_id)
                self._schemas[schema_id] = found
        return found

    def _fetch(self, schema_id: int) -> WriterSchema:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                raise DecodeError(f"unknown schema id {schema_id}") from None
            raise DecodeError(f"schema registry: schema id {schema_id}: {e.error_message}") from None
        except Exception as e:  # connection problems
            raise DecodeError(f"schema registry: schema id {schema_id}: {type(e).__name__}: {e}") from None
        if (schema.schema_type or "AVRO") != "AVRO":
            raise DecodeError(f"schema id {schema_id} is {schema.schema_type}, not Avro")
        try:
            raw = orjson.loads(schema.schema_str)
            parsed = fastavro.parse_schema(_strip_logical(raw))
        except Exception as e:
            raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {e}") from None
        return WriterSchema(schema_id, parsed, to_connect(raw))


def read(body: memoryview, writer: WriterSchema) -> Any:
    """One Avro datum; a truncated or corrupt body raises :class:`DecodeError`."""
    buf = io.BytesIO(body)
    try:
        datum = fastavro.schemaless_reader(buf, writer.parsed, None)
    except Exception as e:  # EOFError, StopIteration, UnicodeDecodeError, ...
        raise DecodeError(
            f"Avro body does not match schema id {writer.schema_id} (truncated or corrupt): {type(e).__name__}"
            f"{': ' + str(e) if str(e) else ''}"
        ) from None
    if buf.tell() != len(body):
        raise DecodeError(
            f"Avro body has {len(body) - buf.tell()} bytes left over after a record of schema id {writer.schema_id}"
        )
    return datum
