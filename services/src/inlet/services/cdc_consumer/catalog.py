"""Column types of source tables from the PostgreSQL catalog, for JSON records without schemas.

``schemas.enable=false`` JSON carries values only; :class:`PostgresCatalog` reads each table's
columns through psycopg (cached per table, re-read when a record has a column it does not know)
and :func:`connect_field` says how Debezium's PostgreSQL connector, with its default settings
(``decimal.handling.mode=precise``, ``time.precision.mode=adaptive``,
``interval.handling.mode=numeric``, ``binary.handling.mode=bytes``, ``hstore.handling.mode=json``),
encodes a column of that type -- as the Kafka Connect field schema it would have sent with
schemas enabled, so :mod:`.types` maps all three formats the same way. It also reads a table's
REPLICA IDENTITY (how the decoder treats a table without a primary key).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from inlet.services.cdc_consumer.errors import DecodeError


@dataclass(frozen=True)
class CatalogColumn:
    name: str
    type_name: str  # pg_type.typname after resolving domains, e.g. "int4", "numeric", "_text"
    typmod: int  # pg_attribute.atttypmod (-1 = none)
    not_null: bool
    is_enum: bool = False
    element_type: str | None = None  # arrays: the element's typname
    element_is_enum: bool = False


class Catalog(Protocol):
    """What the decoder needs from a catalog."""

    def columns(self, schema: str, table: str, refresh: bool = False) -> dict[str, CatalogColumn]: ...


_QUERY = """
SELECT a.attname,
       t.typname,
       CASE WHEN t0.typtype = 'd' THEN t0.typtypmod ELSE a.atttypmod END,
       a.attnotnull,
       t.typtype = 'e',
       e.typname,
       coalesce(e.typtype = 'e', false)
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type t0 ON t0.oid = a.atttypid
JOIN pg_catalog.pg_type t ON t.oid = CASE WHEN t0.typtype = 'd' THEN t0.typbasetype ELSE t0.oid END
LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


_IDENTITY_QUERY = """
SELECT c.relreplident
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s
"""
_IDENTITIES = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}


#: How old the CDC consumer lets a table's cached columns get (``inlet cdc run``): after an ALTER
#: COLUMN ... TYPE, JSON without schemas decodes with the new type within this many seconds. Events
#: written before the change and decoded after it still get the new type: docs/cdc.md, "Encoding".
CATALOG_MAX_AGE_S = 5.0


class PostgresCatalog:
    """Reads column types from the source database (``conninfo``: a libpq URL or DSN).

    One connection, opened on first use, reopened after an error; safe to share between threads.
    ``max_age_s``: a table's columns are read again when its cached copy is older (None: never,
    only on ``refresh``); a column whose type changed keeps its name, so nothing else would tell.
    A read that finds the same columns returns the cached dict itself: a caller may compare by
    identity.
    """

    def __init__(self, conninfo: str, max_age_s: float | None = None) -> None:
        self._conninfo = conninfo
        self.max_age_s = max_age_s
        self._conn: Any = None
        self._cache: dict[tuple[str, str], tuple[float, dict[str, CatalogColumn]]] = {}
        self._lock = threading.Lock()

    def columns(self, schema: str, table: str, refresh: bool = False) -> dict[str, CatalogColumn]:
        key = (schema, table)
        found = self._cache.get(key)
        fresh = found is not None and (
            self.max_age_s is None or time.monotonic() - found[0] <= self.max_age_s
        )
        if not refresh and found is not None and fresh:
            return found[1]
        with self._lock:
            cols = self._query(schema, table)
            if found is not None and found[1] == cols:
                cols = found[1]
            self._cache[key] = (time.monotonic(), cols)
        return cols

    def _query(self, schema: str, table: str) -> dict[str, CatalogColumn]:
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._conninfo, autocommit=True)
            rows = self._conn.execute(_QUERY, (schema, table)).fetchall()
        except psycopg.Error as e:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise DecodeError(f"source catalog: cannot read the columns of {schema}.{table}: {e}") from None
        if not rows:
            raise DecodeError(f"source catalog has no table {schema}.{table}")
        return {r[0]: CatalogColumn(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows}

    def replica_identity(self, schema: str, table: str) -> str:
        """The table's REPLICA IDENTITY: ``DEFAULT``, ``FULL``, ``NOTHING`` or ``USING INDEX``."""
        rows = self._run(_IDENTITY_QUERY, schema, table, "replica identity")
        if not rows:
            raise DecodeError(f"source catalog has no table {schema}.{table}")
        ident = rows[0][0]
        ident = ident.decode() if isinstance(ident, bytes) else str(ident)
        return _IDENTITIES.get(ident, ident)

    def _run(self, query: str, schema: str, table: str, what: str) -> list[Any]:
        import psycopg

        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self._conninfo, autocommit=True)
                return self._conn.execute(query, (schema, table)).fetchall()  # type: ignore[no-any-return]
            except psycopg.Error as e:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                raise DecodeError(
                    f"source catalog: cannot read the {what} of {schema}.{table}: {e}"
                ) from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# ------------------------------------------------------------------------------ types

_SIMPLE: dict[str, dict[str, Any]] = {
    "bool": {"type": "boolean"},
    "int2": {"type": "int16"},
    "int4": {"type": "int32"},
    "int8": {"type": "int64"},
    "oid": {"type": "int64"},
    "xid": {"type": "int64"},
    "float4": {"type": "float"},
    "float8": {"type": "double"},
    "text": {"type": "string"},
    "varchar": {"type": "string"},
    "bpchar": {"type": "string"},
    "char": {"type": "string"},
    "name": {"type": "string"},
    "citext": {"type": "string"},
    "inet": {"type": "string"},
    "cidr": {"type": "string"},
    "macaddr": {"type": "string"},
    "macaddr8": {"type": "string"},
    "tsvector": {"type": "string"},
    "tsquery": {"type": "string"},
    "int4range": {"type": "string"},
    "int8range": {"type": "string"},
    "numrange": {"type": "string"},
    "tsrange": {"type": "string"},
    "tstzrange": {"type": "string"},
    "daterange": {"type": "string"},
    "bytea": {"type": "bytes"},
    "date": {"type": "int32", "name": "io.debezium.time.Date"},
    "timestamptz": {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
    "timetz": {"type": "string", "name": "io.debezium.time.ZonedTime"},
    "interval": {"type": "int64", "name": "io.debezium.time.MicroDuration"},
    "json": {"type": "string", "name": "io.debezium.data.Json"},
    "jsonb": {"type": "string", "name": "io.debezium.data.Json"},
    "hstore": {"type": "string", "name": "io.debezium.data.Json"},
    "xml": {"type": "string", "name": "io.debezium.data.Xml"},
    "uuid": {"type": "string", "name": "io.debezium.data.Uuid"},
    "ltree": {"type": "string", "name": "io.debezium.data.Ltree"},
    "money": {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}},
    "point": {"type": "struct", "name": "io.debezium.data.geometry.Point"},
    "geometry": {"type": "struct", "name": "io.debezium.data.geometry.Geometry"},
    "geography": {"type": "struct", "name": "io.debezium.data.geometry.Geography"},
}


def _scalar(type_name: str, typmod: int, is_enum: bool) -> dict[str, Any]:
    if is_enum:
        return {"type": "string", "name": "io.debezium.data.Enum"}
    if type_name == "numeric":
        if typmod < 0:
            return {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}
        precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        return {
            "type": "bytes",
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
        }
    if type_name in ("timestamp", "time"):
        precision = 6 if typmod < 0 else typmod  # time.precision.mode=adaptive
        unit = "" if precision <= 3 else "Micro" if precision <= 6 else "Nano"
        kind = "Timestamp" if type_name == "timestamp" else "Time"
        return {
            "type": "int64" if unit or kind == "Timestamp" else "int32",
            "name": f"io.debezium.time.{unit}{kind}",
        }
    if type_name in ("bit", "varbit"):
        if type_name == "bit" and typmod in (1, -1):
            return {"type": "boolean"}
        return {"type": "bytes", "name": "io.debezium.data.Bits"}
    found = _SIMPLE.get(type_name)
    if found is None:
        raise DecodeError(f"source type {type_name!r} is not supported for JSON without schemas")
    return dict(found)


def connect_field(col: CatalogColumn) -> dict[str, Any]:
    """The Connect field schema Debezium's PostgreSQL connector sends for ``col`` (default settings)."""
    if col.element_type is not None:
        items = _scalar(col.element_type, col.typmod, col.element_is_enum)
        field: dict[str, Any] = {"type": "array", "items": {**items, "optional": True}}
    else:
        field = _scalar(col.type_name, col.typmod, col.is_enum)
    field["optional"] = not col.not_null
    field["field"] = col.name
    return field
