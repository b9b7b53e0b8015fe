"""One Debezium PostgreSQL Kafka record -> Inlet's typed change events (``inlet.proto.changes.v1``).

:class:`Decoder` reads the three formats Debezium's converters produce -- JSON with schemas, JSON
without schemas (column types from the source catalog) and Confluent Avro (writer schemas from the
schema registry) -- and returns ``ChangeRecord`` messages:

- data change (``op`` c/u/d/r): one ``ChangeRecord(change=...)``;
- truncate (``op`` t): one change with ``OPERATION_TRUNCATE``, source and transaction filled, empty
  key/before/after/schema (Debezium sends ``t`` only with ``skipped.operations`` not containing it);
- tombstone (null value), heartbeat (``__debezium-heartbeat.<prefix>``), logical decoding message
  (``op`` m, topic ``<prefix>.message``), transaction ``BEGIN``: nothing;
- transaction ``END`` (``<prefix>.transaction``): one ``ChangeRecord(transaction=...)`` per table
  the transaction touched, with that table's and the total event counts (Debezium lists a logical
  decoding message as a pseudo collection ``io.debezium...LogicalDecodingMessageId@...``: skipped,
  though ``total_event_count`` still counts it, as Debezium does).

Transaction ids (``TransactionRef.id``, ``TransactionEvent.id``) are the txId part of Debezium's
``"<txId>:<lsn>"``: Debezium 3.x's PostgreSQL connector puts each event's own LSN after the colon,
so only the txId is the same across a transaction's changes and its END.

A JSON value or key whose only field is ``payload`` (``{"payload": {...}}``: how several tools store
Debezium events, the schema dropped) is JSON without schemas: decoded exactly as the bare envelope
``schemas.enable=false`` gives, column types (Debezium's logical types such as
``io.debezium.time.MicroTimestamp`` included) from the source catalog.

Values: see :mod:`.types` (one converter per column, chosen from the Connect schema, the Avro writer
schema or the catalog). Of the ``headers`` only ``__debezium.oldkey`` is read: Debezium's
PostgreSQL connector turns a primary-key UPDATE into a DELETE of the old key and a CREATE of the new
one carrying the old key in that header; the CREATE's ``old_key`` holds its values, so the writer can
give the new key the old row's unchanged TOASTed values.

Everything else raises :class:`DecodeError` with a one-line reason.

A table without a primary key (Debezium sends a null Kafka key; such a table needs REPLICA IDENTITY
FULL for PostgreSQL to publish its updates and deletes) has no natural Hudi record key. ``keyless``
decides what its changes become:

- ``"whole_row"``: keyed by the whole row: ``record_key`` is Hudi's complex key over every column
  (:func:`row_record_key`) of ``after`` (c/r/u) or ``before`` (d), ``key`` is empty and no column
  has a ``key_position``. Identical rows share a key (Hudi keeps one), and an UPDATE moves the row
  to a new key: the old one is ``row_record_key(schema, before)`` (the writer deletes it).
- ``"skip"``: dropped, with one warning per table; so are the table's entries in transaction ENDs
  decoded after its first change (one decoded before has no change to wait for: the service relays
  it, empty, after ``--transaction-end-wait-ms``). A table whose changes come with a key (a primary
  key added, or Debezium's ``message.key.columns``) is replicated from then on.
- ``"auto"`` (the service's default): ``"whole_row"`` for a table whose REPLICA IDENTITY is FULL,
  read from the source catalog, else ``"skip"``: under DEFAULT (or NOTHING, or USING INDEX)
  PostgreSQL publishes no old row for updates and deletes, so the lake could not follow them.
  Without a catalog the identity is unknown: skipped, the warning says how to replicate it.
- ``"reject"`` (the library's default): ``DecodeError("table ... has no primary key ...")``, to the
  dead letters.

Setting Debezium's ``message.key.columns`` for the table gives it a real key instead.

Per table and schema (Connect schema bytes, Avro schema id, or catalog column set) the decoder
builds a :class:`_TablePlan` once -- the ``TableSchema`` and one converter per column -- and reuses
it for every record. Thread-safe for concurrent ``decode`` calls (plans are immutable; caches only
grow).
"""

from __future__ import annotations

import binascii
import decimal
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from inlet.core.keys import EMPTY_KEY, NULL_KEY
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import avro, connect_values
from inlet.services.cdc_consumer.catalog import Catalog, connect_field
from inlet.services.cdc_consumer.errors import DecodeError
from inlet.services.cdc_consumer.types import (
    Converter,
    Unrepresentable,
    UnsupportedType,
    column_plan,
    fingerprint,
    key_text,
    placeholder_literal,
)
from inlet.services.cdc_consumer.types import (
    _int as _int_converter,
)

__all__ = ["DecodeError", "Decoder", "KeylessMode", "ValueFormat", "row_record_key"]

ValueFormat = Literal["json", "avro", "auto"]
KeylessMode = Literal["auto", "reject", "skip", "whole_row"]
KEYLESS_MODES: tuple[str, ...] = ("auto", "reject", "skip", "whole_row")
log = logging.getLogger("inlet.cdc")


class _Skipped(Exception):
    """A change of a table whose changes are skipped (``keyless`` skip): no records."""


HEARTBEAT_PREFIX = "__debezium-heartbeat."
#: the header Debezium puts on the CREATE of a primary-key change: the old key
OLD_KEY_HEADER = "__debezium.oldkey"
_log = logging.getLogger("inlet.cdc_consumer.decode")

_OPS = {
    "c": pb.OPERATION_CREATE,
    "u": pb.OPERATION_UPDATE,
    "d": pb.OPERATION_DELETE,
    "r": pb.OPERATION_READ,
    "t": pb.OPERATION_TRUNCATE,
}
_INTERNAL_COLLECTION = "io.debezium."
#: how an Unchanged value is encoded in a Row (or a ListValue): field 1, 2 bytes, Value field 8 empty
_ENCODED_UNCHANGED = b"\n\x02B\x00"
_AVRO_MAGIC = bytes([avro.MAGIC])
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SCHEMA_HEAD = b'{"schema":'
_PAYLOAD_SEP = b',"payload":'


@dataclass(frozen=True)
class _TablePlan:
    """How to decode the rows of one table under one schema."""

    schema: pb.TableSchema
    fingerprint: str
    names: tuple[str, ...]
    converters: tuple[Converter, ...]
    expected: tuple[str, ...]
    pairs: tuple[tuple[str, Converter], ...]
    index: dict[str, int]
    key_names: tuple[str, ...]  # Kafka key field order
    key_indexes: tuple[int, ...]
    wire: str  # "json" (bytes base64-encoded) or "avro"
    #: ``ChangeRecord(change=ChangeEvent(schema=schema))`` encoded: appended to a change's encoding
    encoded_schema: bytes
    #: :func:`_row` compiled for these columns (:func:`_compile_row`)
    fill: Any = None
    #: the key's name when the key is one integer column (converted as it is): the common key's
    #: value and text without the general loop
    int_key: str | None = None


#: a change record without its schema, and the plan whose schema it has (None: it has none)
_Decoded = tuple[pb.ChangeRecord, "_TablePlan | None"]


class Decoder:
    """Decodes Debezium PostgreSQL records (see the module docstring).

    ``topic_prefix``: Debezium's ``topic.prefix`` (None: the first segment of each topic).
    ``value_format``: ``json``, ``avro`` or ``auto`` (Confluent magic byte 0 means Avro).
    ``schema_registry``: a ``confluent_kafka.schema_registry.SchemaRegistryClient`` for Avro.
    ``catalog``: column types for JSON without schemas (:class:`~.catalog.PostgresCatalog`);
    None refuses such records.
    ``keyless``: what to do with changes of a table without a primary key: ``"reject"`` (default)
    raises ``DecodeError("table ... has no primary key ...")`` (dead letters); ``"whole_row"`` keys
    them by every column; ``"skip"`` drops them; ``"auto"`` keys a REPLICA IDENTITY FULL table's by
    every column and skips the others' (see the module docstring).
    """

    def __init__(
        self,
        topic_prefix: str | None = None,
        value_format: ValueFormat = "auto",
        schema_registry: Any = None,
        catalog: Catalog | None = None,
        *,
        keyless: KeylessMode = "reject",
    ) -> None:
        if value_format not in ("json", "avro", "auto"):
            raise ValueError(f"value_format must be json, avro or auto, not {value_format!r}")
        if keyless not in KEYLESS_MODES:
            raise ValueError(f"keyless must be one of {', '.join(KEYLESS_MODES)}, not {keyless!r}")
        self.keyless = keyless
        self._keyless_modes: dict[str, str] = {}  # table id -> whole_row | skip (auto, decided)
        self.skipped: dict[str, str] = {}  # table id -> why its changes are skipped
        self.topic_prefix = topic_prefix
        self.value_format = value_format
        self.catalog = catalog
        self._schemas = avro.SchemaCache(schema_registry)
        self._avro_key_names: dict[int, tuple[str, ...]] = {}  # key schema id -> its fields
        self._json_plans: dict[bytes, dict[str, Any]] = {}  # value schema bytes -> {"fields" | "error"}
        self._json_heads: dict[str, tuple[bytes, bytes]] = {}  # topic -> (b'{"schema":S,"payload":', S)
        self._key_heads: dict[str, tuple[bytes, tuple[str, ...]]] = {}  # topic -> (key head, key names)
        self._kinds: dict[str, str] = {}
        self._plans: dict[Any, _TablePlan] = {}
        self._catalog_seen: dict[tuple[str, str], Any] = {}  # (schema, table) -> the columns planned with
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ entry point

    def decode(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> list[pb.ChangeRecord]:
        """The change records of one Kafka record; raises :class:`DecodeError` if it cannot."""
        out = []
        for record, plan in self._decode(topic, partition, offset, key, value, headers):
            if plan is not None:
                record.change.schema.CopyFrom(plan.schema)
            out.append(record)
        return out

    def decode_encoded(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> list[tuple[pb.ChangeRecord, bytes]]:
        """What :meth:`decode` returns, each record with its encoding (what the CDC consumer
        produces), but a change's record without its ``schema`` (its ``schema_version`` is set).

        The encoding parses into exactly the record :meth:`decode` returns: the record without
        the schema, then the plan's schema encoded once as a second ``ChangeRecord.change``
        (protobuf merges a message field that occurs twice). Serialising the 20 ``Column``
        messages of a schema with every change cost more than decoding the row."""
        out = []
        for record, plan in self._decode(topic, partition, offset, key, value, headers):
            data = record.SerializeToString()
            out.append((record, data + plan.encoded_schema if plan is not None else data))
        return out

    def _decode(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None,
    ) -> list[_Decoded]:
        if value is None:
            return []  # tombstone
        if topic.startswith(HEARTBEAT_PREFIX):
            return []
        if not value:
            raise DecodeError("empty value (neither JSON nor Avro)")
        fmt = self.value_format
        if fmt == "auto":
            fmt = "avro" if value[0] == avro.MAGIC else "json"
        old_key = None
        for name, header in headers or ():
            if name == OLD_KEY_HEADER:
                old_key = header
        try:
            if fmt == "avro":
                return self._decode_avro(topic, partition, offset, key, value, old_key)
            return self._decode_json(topic, partition, offset, key, value, old_key)
        except _Skipped:
            return []
        except DecodeError:
            raise
        except RecursionError:
            raise DecodeError("value nests too deeply") from None
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as e:
            # a field of the wrong JSON type where the envelope needs another (e.g. a string lsn)
            raise DecodeError(f"malformed Debezium record: {type(e).__name__}: {e}") from None

    # ------------------------------------------------------------------ JSON

    def _decode_json(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes, old_key: bytes | None
    ) -> list[_Decoded]:
        payload, schema_bytes, envelope = self._parse_json(topic, value)
        if payload is None:
            return []
        if payload.__class__ is not dict:
            raise DecodeError(f"value is not a Debezium envelope: a JSON {type(payload).__name__}")
        kind = self._kind(topic, payload)
        if kind != "change":
            return [(r, None) for r in self._non_change(kind, topic, payload)]
        key_names, key_payload = self._json_key(topic, key)
        op = self._op(payload)
        source = payload.get("source")
        if source.__class__ is not dict:
            raise DecodeError("value has no 'source' block")
        if schema_bytes is not None:
            plan = self._json_schema_plan(schema_bytes, envelope, key_names)
        else:
            if op == pb.OPERATION_TRUNCATE:
                plan = None
            else:
                return [
                    self._catalog_change(
                        topic, partition, offset, payload, source, op, key_names, key_payload, old_key
                    )
                ]
        return [self._change(topic, partition, offset, payload, source, op, plan, key_payload, old_key)]

    def _parse_json(self, topic: str, value: bytes) -> tuple[Any, bytes | None, Any]:
        """(payload, schema bytes or None, the parsed ``schema`` when parsed in full)."""
        hit = self._json_heads.get(topic)
        if hit is not None and value.startswith(hit[0]) and value.endswith(b"}"):
            # JsonConverter writes {"schema":S,"payload":P} without whitespace: once S is known to
            # be a whole JSON value, only P needs parsing (the schema is most of the bytes)
            try:
                return orjson.loads(value[len(hit[0]) : -1]), hit[1], None
            except orjson.JSONDecodeError as e:
                raise DecodeError(f"value is not JSON: {e}") from None
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise DecodeError(f"value is not JSON: {e}") from None
        if _payload_only(doc):  # the schema dropped: JSON without schemas
            return doc["payload"], None, None
        if doc.__class__ is dict and "schema" in doc and "payload" in doc and len(doc) == 2:
            schema = doc["schema"]
            if schema is None:
                return doc["payload"], None, None
            head = _verified_head(value, schema)
            if head is not None:
                schema_bytes = head[len(_SCHEMA_HEAD) : -len(_PAYLOAD_SEP)]
                self._json_heads[topic] = (head, schema_bytes)
            else:  # not JsonConverter's layout: key the schema by its canonical form
                schema_bytes = b"\x00" + orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
            return doc["payload"], schema_bytes, schema
        return doc, None, None

    def _json_key(
        self, topic: str, key: bytes | None
    ) -> tuple[tuple[str, ...] | None, dict[str, Any] | None]:
        if key is None:
            return None, None
        hit = self._key_heads.get(topic)
        if hit is not None and key.startswith(hit[0]) and key.endswith(b"}"):
            try:
                doc = orjson.loads(key[len(hit[0]) : -1])
            except orjson.JSONDecodeError as e:
                raise DecodeError(f"key is not JSON: {e}") from None
            if doc.__class__ is dict:
                return hit[1], doc
        try:
            doc = orjson.loads(key)
        except orjson.JSONDecodeError as e:
            raise DecodeError(f"key is not JSON: {e}") from None
        if _payload_only(doc):  # the schema dropped: the bare key
            doc = doc["payload"]
        elif doc.__class__ is dict and "schema" in doc and "payload" in doc and len(doc) == 2:
            schema, payload = doc["schema"], doc["payload"]
            if payload is None:
                return None, None
            if schema.__class__ is dict and schema.get("type") == "struct" and payload.__class__ is dict:
                names = tuple(str(f.get("field")) for f in schema.get("fields") or ())
                head = _verified_head(key, schema)
                if head is not None:
                    self._key_heads[topic] = (head, names)
                return names, payload
            doc = payload
        if doc is None:
            return None, None
        if doc.__class__ is not dict:
            raise DecodeError(f"key is not a JSON object: {orjson.dumps(doc).decode()[:60]}")
        return tuple(doc), doc

    def _json_schema_plan(
        self, schema_bytes: bytes, envelope: Any, key_names: tuple[str, ...] | None
    ) -> _TablePlan:
        entry = self._json_plans.get(schema_bytes)
        if entry is None:
            if envelope is None:
                envelope = orjson.loads(schema_bytes)
            entry = {}
            try:
                entry["fields"] = _envelope_row_fields(envelope)
            except DecodeError as e:
                entry["error"] = e.reason
            with self._lock:
                self._json_plans[schema_bytes] = entry
        if "error" in entry:
            raise DecodeError(entry["error"])
        return self._plan(("json", schema_bytes, key_names), entry["fields"], "json", key_names)

    # ------------------------------------------------------------------ Avro

    def _decode_avro(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes, old_key: bytes | None
    ) -> list[_Decoded]:
        schema_id, body = avro.split(value)
        writer = self._schemas.get(schema_id)
        payload = avro.read(body, writer)
        if payload.__class__ is not dict:
            raise DecodeError(f"Avro value of schema id {schema_id} is not a record")
        kind = self._kind(topic, payload)
        if kind != "change":
            return [(r, None) for r in self._non_change(kind, topic, payload)]
        key_names: tuple[str, ...] | None = None
        key_payload: dict[str, Any] | None = None
        if key is not None:
            if key[:1] == _AVRO_MAGIC:
                key_id, key_body = avro.split(key)
                key_writer = self._schemas.get(key_id)
                key_payload = avro.read(key_body, key_writer)
                if key_payload.__class__ is not dict:
                    raise DecodeError(f"Avro key of schema id {key_id} is not a record")
                key_names = self._avro_key_names.get(key_id)
                if key_names is None:
                    key_names = tuple(f["field"] for f in key_writer.connect.get("fields", ()))
                    with self._lock:
                        self._avro_key_names[key_id] = key_names
            else:
                key_names, key_payload = self._json_key(topic, key)
        op = self._op(payload)
        source = payload.get("source")
        if source.__class__ is not dict:
            raise DecodeError("value has no 'source' block")
        plan = None
        if op != pb.OPERATION_TRUNCATE:
            plan_key = ("avro", schema_id, key_names)
            plan = self._plans.get(plan_key)
            if plan is None:
                plan = self._plan(plan_key, _envelope_row_fields(writer.connect), "avro", key_names)
        return [self._change(topic, partition, offset, payload, source, op, plan, key_payload, old_key)]

    # ------------------------------------------------------------------ catalog (schemaless JSON)

    def _catalog_change(
        self,
        topic: str,
        partition: int,
        offset: int,
        payload: dict[str, Any],
        source: dict[str, Any],
        op: int,
        key_names: tuple[str, ...] | None,
        key_payload: dict[str, Any] | None,
        old_key: bytes | None,
    ) -> _Decoded:
        if self.catalog is None:
            raise DecodeError("JSON value without schema and no source catalog configured (--database-url)")
        row = payload.get("after") or payload.get("before")
        if row.__class__ is not dict:
            raise DecodeError("change has neither 'before' nor 'after'")
        schema, table = source.get("schema"), source.get("table")
        if not isinstance(schema, str) or not isinstance(table, str):
            raise DecodeError("source block has no schema/table")
        names = tuple(row)
        for attempt in (0, 1):
            cols = self.catalog.columns(schema, table, refresh=attempt == 1)
            seen = self._catalog_seen.get((schema, table))
            if cols is not seen:
                if seen is not None and cols != seen:
                    # read again (max_age_s, refresh): a column's type may have changed under its name
                    self._forget(schema, table)
                self._catalog_seen[(schema, table)] = cols
            plan_key = ("catalog", schema, table, names, key_names)
            plan = self._plans.get(plan_key)
            # a plan is kept only while the catalog's columns are (equal to) those it was made from,
            # which held every one of these names
            missing = [n for n in names if n not in cols] if plan is None else None
            if missing:
                if attempt == 0:
                    self._forget(schema, table)
                    continue
                raise DecodeError(f"column {missing[0]!r} of {schema}.{table} is not in the source catalog")
            if plan is None:
                fields = [connect_field(cols[n]) for n in names]
                plan = self._plan(plan_key, fields, "json", key_names)
            try:
                return self._change(topic, partition, offset, payload, source, op, plan, key_payload, old_key)
            except DecodeError:
                if attempt == 1:
                    raise
                self._forget(schema, table)  # a column may have changed type: read the catalog again
        raise AssertionError("unreachable")

    def _forget(self, schema: str, table: str) -> None:
        with self._lock:
            for k in [k for k in self._plans if k[0] == "catalog" and k[1] == schema and k[2] == table]:
                del self._plans[k]

    # ------------------------------------------------------------------ shared

    def _prefix(self, topic: str) -> str:
        if self.topic_prefix is not None:
            return self.topic_prefix
        return topic.split(".", 1)[0]

    def _kind(self, topic: str, payload: dict[str, Any]) -> str:
        by_topic = self._kinds.get(topic)
        if by_topic is None:
            by_topic = "data"
            if topic:
                prefix = self._prefix(topic)
                if topic == f"{prefix}.transaction":
                    by_topic = "transaction"
                elif topic == f"{prefix}.message":
                    by_topic = "message"
            self._kinds[topic] = by_topic
        if by_topic != "data":
            return by_topic
        op = payload.get("op")
        if op is not None:
            return "message" if op == "m" else "change"
        if "status" in payload and "data_collections" in payload:
            return "transaction"
        if set(payload) == {"ts_ms"}:
            return "heartbeat"
        raise DecodeError(f"not a Debezium change event: no 'op' (fields {', '.join(list(payload)[:8])})")

    def _non_change(self, kind: str, topic: str, payload: dict[str, Any]) -> list[pb.ChangeRecord]:
        if kind != "transaction":
            return []  # heartbeat, logical decoding message
        status = payload.get("status")
        if status == "BEGIN":
            return []
        if status != "END":
            raise DecodeError(f"transaction metadata with status {status!r}, expected BEGIN or END")
        tx_id = payload.get("id")
        total = payload.get("event_count")
        collections = payload.get("data_collections")
        if not isinstance(tx_id, str) or collections.__class__ is not list or total.__class__ is not int:
            raise DecodeError("transaction END without id, event_count or data_collections")
        prefix = self._prefix(topic) if topic or self.topic_prefix is not None else ""
        ts = payload.get("ts_ms")
        out = []
        for c in collections:
            if c.__class__ is dict and str(c.get("data_collection")).startswith(_INTERNAL_COLLECTION):
                continue  # Debezium counts a logical decoding message as a pseudo data collection
            if (
                c.__class__ is not dict
                or not isinstance(c.get("data_collection"), str)
                or c.get("event_count").__class__ is not int
            ):
                raise DecodeError(f"transaction END with a bad data_collections entry: {c!r:.80}")
            table_id = f"{prefix}.{c['data_collection']}" if prefix else c["data_collection"]
            if table_id in self.skipped:
                continue  # no change of the table is relayed: neither is its count
            out.append(
                pb.ChangeRecord(
                    transaction=pb.TransactionEvent(
                        id=_tx_id(tx_id),
                        status=pb.TransactionEvent.STATUS_END,
                        table_id=table_id,
                        table_event_count=c["event_count"],
                        total_event_count=total,
                        source_ts_ms=ts if ts.__class__ is int else 0,
                    )
                )
            )
        return out

    # ------------------------------------------------------------------ tables without a primary key

    def _keyless_mode(self, table_id: str, schema: str, table: str) -> str:
        """``reject``, ``whole_row`` or ``skip`` for a change of ``table_id``, which has no primary key."""
        if self.keyless in ("reject", "whole_row"):
            return self.keyless
        if self.keyless == "skip":
            self._skip(
                table_id, f"table {table_id} has no primary key: its changes are skipped (--keyless skip)"
            )
            return "skip"
        found = self._keyless_modes.get(table_id)
        if found is not None:
            return found
        identity = getattr(self.catalog, "replica_identity", None)
        if identity is None:
            self._skip(
                table_id,
                f"table {table_id} has no primary key and its REPLICA IDENTITY is unknown without a source "
                "catalog: its changes are skipped (give --database-url to replicate it if it is REPLICA "
                "IDENTITY FULL, or --keyless whole_row)",
            )
            mode = "skip"
        else:
            ident = identity(schema, table)
            mode = "whole_row" if ident == "FULL" else "skip"
            if mode == "skip":
                self._skip(table_id, _not_full(table_id, schema, table, ident))
        with self._lock:
            self._keyless_modes[table_id] = mode
        return mode

    def _unskip(self, table_id: str) -> None:
        with self._lock:
            self.skipped.pop(table_id, None)
            self._keyless_modes.pop(table_id, None)
        log.warning("table %s has a primary key now: its changes are replicated from here on", table_id)

    def _skip(self, table_id: str, reason: str) -> None:
        with self._lock:
            if table_id in self.skipped:
                return
            self.skipped[table_id] = reason
        log.warning("%s", reason)

    @staticmethod
    def _op(payload: dict[str, Any]) -> int:
        op = payload.get("op")
        found = _OPS.get(op) if isinstance(op, str) else None
        if found is None:
            raise DecodeError(f"unknown op {op!r}")
        return found

    def _plan(
        self, plan_key: Any, fields: list[dict[str, Any]], wire: str, key_names: tuple[str, ...] | None
    ) -> _TablePlan:
        plan = self._plans.get(plan_key)
        if plan is not None:
            return plan
        columns = []
        converters = []
        expected = []
        names = []
        for f in fields:
            name = f.get("field")
            if not isinstance(name, str):
                raise DecodeError("a column of the value schema has no name")
            try:
                cp = column_plan(f, wire)
            except UnsupportedType as e:
                raise DecodeError(f"column {name!r}: unsupported type {e}") from None
            columns.append(cp.column)
            converters.append(cp.convert)
            expected.append(cp.expected)
            names.append(name)
        index = {n: i for i, n in enumerate(names)}
        key_indexes: list[int] = []
        for pos, k in enumerate(key_names or (), start=1):
            i = index.get(k)
            if i is None:
                raise DecodeError(f"key column {k!r} is not a column of the value")
            columns[i].key_position = pos
            key_indexes.append(i)
        schema = pb.TableSchema(columns=columns)
        schema.fingerprint = fingerprint(columns)
        plan = _TablePlan(
            schema=schema,
            fingerprint=schema.fingerprint,
            names=tuple(names),
            converters=tuple(converters),
            expected=tuple(expected),
            pairs=tuple(zip(names, converters, strict=True)),
            index=index,
            key_names=tuple(key_names or ()),
            key_indexes=tuple(key_indexes),
            wire=wire,
            encoded_schema=pb.ChangeRecord(change=pb.ChangeEvent(schema=schema)).SerializeToString(),
            fill=_compile_row(names, converters),
            int_key=key_names[0]
            if key_names and len(key_names) == 1 and converters[key_indexes[0]] is _int_converter
            else None,
        )
        with self._lock:
            self._plans[plan_key] = plan
        return plan

    def _change(
        self,
        topic: str,
        partition: int,
        offset: int,
        payload: dict[str, Any],
        source: dict[str, Any],
        op: int,
        plan: _TablePlan | None,
        key_payload: dict[str, Any] | None,
        old_key: bytes | None = None,
    ) -> _Decoded:
        """The change record without its schema (the caller adds it or its encoding), and the plan
        whose schema it has (None: no rows, no schema)."""
        src_schema, src_table = source.get("schema"), source.get("table")
        if not isinstance(src_schema, str) or not isinstance(src_table, str):
            raise DecodeError("source block has no schema/table")
        prefix = self._prefix(topic) if topic or self.topic_prefix is not None else source.get("name") or ""
        table_id = f"{prefix}.{src_schema}.{src_table}"
        record = pb.ChangeRecord()
        ev = record.change  # built in place: wrapping a finished event would copy it
        ev.table_id = table_id
        ev.op = op  # type: ignore[assignment]
        _fill_source(ev.source, source, payload, topic, partition, offset)
        tx = payload.get("transaction")
        if tx.__class__ is dict:
            t = ev.transaction
            t.id = _tx_id(tx.get("id"))
            t.total_order = tx.get("total_order") or 0
            t.data_collection_order = tx.get("data_collection_order") or 0
        if op == pb.OPERATION_TRUNCATE and table_id in self.skipped:
            raise _Skipped
        if plan is None or op == pb.OPERATION_TRUNCATE:  # no rows, no key, no schema
            return record, None
        ev.schema_version = plan.fingerprint
        before, after = payload.get("before"), payload.get("after")
        if before is not None:
            ev.before.SetInParent()
            _fill(plan, before, "before", ev.before.values)
        if after is not None:
            ev.after.SetInParent()
            maybe_placeholder = _fill(plan, after, "after", ev.after.values) is not False
            if maybe_placeholder and (
                op == pb.OPERATION_READ or (op == pb.OPERATION_CREATE and old_key is None)
            ):
                _literal_placeholders(plan, ev.after, after)
        elif op != pb.OPERATION_DELETE:
            raise DecodeError(f"op {payload['op']!r} without 'after'")
        if key_payload is None:  # no primary key
            if self._keyless_mode(table_id, src_schema, src_table) == "skip":
                raise _Skipped
            if self.keyless == "reject":
                raise DecodeError(
                    f"table {table_id} has no primary key (Debezium sent a null key); Hudi needs a record "
                    "key: add a primary key, set Debezium's message.key.columns for it, or decode with "
                    "keyless='whole_row'"
                )
            image = ev.before if op == pb.OPERATION_DELETE else ev.after
            if not image.values:
                raise DecodeError(
                    f"table {table_id} has no primary key and the {'delete' if after is None else 'change'} "
                    "has no row image to key it by (REPLICA IDENTITY FULL is needed)"
                )
            try:
                ev.record_key = row_record_key(
                    plan.schema, image, ev.before if image is ev.after and before is not None else None
                )
            except DecodeError as e:
                raise DecodeError(f"table {table_id} has no primary key: {e.reason}") from None
            return record, plan
        if table_id in self.skipped:  # it has a primary key now: replicated from here on
            self._unskip(table_id)
        add = ev.key.values.add
        if plan.int_key is not None:  # one integer column: its value, and its text as key_text has it
            raw = key_payload.get(plan.int_key)
            if raw.__class__ is int and _INT64_MIN <= raw <= _INT64_MAX:
                add(int_value=raw)
                ev.record_key = str(raw)
                if old_key is not None and op == pb.OPERATION_CREATE:
                    _fill_old_key(plan, ev, old_key)
                return record, plan
        columns = plan.schema.columns
        texts = []
        for name, i in zip(plan.key_names, plan.key_indexes, strict=True):
            raw = key_payload.get(name)
            if raw is None:
                add()
            else:
                try:
                    plan.converters[i](add, raw)
                except Unrepresentable as e:
                    raise DecodeError(f"key column {name!r}: {e}") from None
                except (TypeError, ValueError, KeyError, OverflowError):
                    raise DecodeError(
                        f"key column {name!r}: expected {plan.expected[i]}, got {_show(raw)}"
                    ) from None
            try:
                texts.append(key_text(columns[i], ev.key.values[-1]))
            except ValueError as e:
                raise DecodeError(f"key column {name!r}: {e}") from None
        ev.record_key = _record_key(plan.key_names, texts)
        if old_key is not None and op == pb.OPERATION_CREATE:
            _fill_old_key(plan, ev, old_key)
        return record, plan


def _literal_placeholders(plan: _TablePlan, row: pb.Row, data: dict[str, Any]) -> None:
    """PostgreSQL leaves out an unchanged TOASTed value only from an UPDATE's new row (and Debezium's
    CREATE of a primary-key change's new key, which carries ``__debezium.oldkey``): in an insert or
    a snapshot read, a value equal to Debezium's placeholder is the column's real value."""
    if _ENCODED_UNCHANGED not in row.SerializeToString():  # no Unchanged value: nothing to look at
        return
    for i, v in enumerate(row.values):
        if v.WhichOneof("kind") == "unchanged":
            literal = placeholder_literal(plan.schema.columns[i], data.get(plan.names[i]), plan.wire)
            if literal is not None:
                row.values[i].CopyFrom(literal)


def _fill_old_key(plan: _TablePlan, ev: pb.ChangeEvent, header: bytes) -> None:
    """``ev.old_key`` from Debezium's ``__debezium.oldkey`` header (Connect's ``Values`` text of the
    key struct, see :mod:`.connect_values`, as the default ``SimpleHeaderConverter`` writes it; or
    JSON, with or without a schema, from a ``JsonConverter`` as ``header.converter``). A header Inlet cannot read leaves ``old_key`` empty with
    a warning: the change itself is sound; only its unchanged TOASTed values cannot be carried over."""
    columns = plan.schema.columns
    try:
        try:
            parsed = connect_values.parse(header.decode())
        except ValueError:
            parsed = orjson.loads(header)  # a JSON header converter (JSONDecodeError is a ValueError)
        if parsed.__class__ is dict and parsed.keys() == {"schema", "payload"}:
            parsed = parsed["payload"]  # JsonConverter with schemas
        if parsed.__class__ is not dict:
            raise ValueError(f"not a struct: {header[:80]!r}")
        old = pb.Row()
        add = old.values.add
        for name, i in zip(plan.key_names, plan.key_indexes, strict=True):
            raw = parsed.get(name)
            ctype = columns[i].type
            if raw is None:
                add()
            elif ctype == pb.COLUMN_TYPE_DECIMAL and raw.__class__ in (int, decimal.Decimal):
                add(decimal_value=str(raw))  # Values writes a Connect Decimal as its number
            else:
                if raw.__class__ is decimal.Decimal and ctype in (
                    pb.COLUMN_TYPE_FLOAT32,
                    pb.COLUMN_TYPE_FLOAT64,
                ):
                    raw = float(raw)
                elif plan.wire == "avro" and ctype == pb.COLUMN_TYPE_BYTES and raw.__class__ is str:
                    raw = binascii.a2b_base64(raw, strict_mode=True)  # Values writes bytes base64
                plan.converters[i](add, raw)
            if old.values[-1].WhichOneof("kind") == "unchanged":
                raise ValueError(f"key column {name!r} is Debezium's placeholder")
        missing = [n for n in plan.key_names if n not in parsed]
        if missing:
            raise ValueError(f"no key column {missing[0]!r}")
    except (ValueError, TypeError, KeyError, OverflowError, UnicodeDecodeError, Unrepresentable) as e:
        _log.warning(
            "%s: cannot read the old key %r of a primary-key change (%s); its unchanged TOASTed values "
            "are not carried over to the new key %s",
            ev.table_id,
            header[:120],
            e,
            ev.record_key,
        )
        return
    ev.old_key.CopyFrom(old)


def _tx_id(debezium_id: Any) -> str:
    """The txId part of Debezium's transaction id "<txId>:<lsn>" (Debezium 3.x's PostgreSQL
    connector puts each event's own LSN after the colon, so only the txId identifies the
    transaction across its events and its BEGIN/END)."""
    if not isinstance(debezium_id, str):
        return ""
    return debezium_id.split(":", 1)[0]


def _payload_only(doc: Any) -> bool:
    """``{"payload": P}`` with P an object or null: a JsonConverter envelope whose ``schema`` was
    dropped. (A Debezium envelope has more fields; a bare key whose one column is named ``payload``
    holds a scalar.)"""
    return (
        doc.__class__ is dict
        and len(doc) == 1
        and "payload" in doc
        and doc["payload"].__class__ in (dict, type(None))
    )


def _verified_head(data: bytes, schema: Any) -> bytes | None:
    """``b'{"schema":S,"payload":'`` if ``data`` starts so with S the exact text of ``schema``."""
    if not data.startswith(_SCHEMA_HEAD):
        return None
    sep = data.find(_PAYLOAD_SEP)
    while sep > 0:
        try:
            if orjson.loads(data[len(_SCHEMA_HEAD) : sep]) == schema:
                return data[: sep + len(_PAYLOAD_SEP)]
        except orjson.JSONDecodeError:
            pass
        sep = data.find(_PAYLOAD_SEP, sep + 1)
    return None


def _envelope_row_fields(envelope: Any) -> list[dict[str, Any]]:
    """The row fields (the ``after``/``before`` struct) of a Debezium envelope schema."""
    if envelope.__class__ is not dict or envelope.get("type") != "struct":
        raise DecodeError("value schema is not a Debezium envelope struct")
    for name in ("after", "before"):
        for f in envelope.get("fields") or ():
            if f.get("field") == name and f.get("type") == "struct":
                return list(f.get("fields") or ())
    raise DecodeError("value schema has no 'before'/'after' struct (not a Debezium change event)")


def _fill(plan: _TablePlan, data: Any, which: str, values: Any) -> bool | None:
    """:func:`_row` into the repeated ``values``, by the plan's compiled row when it reads ``data``
    (any error: the values it added are dropped and :func:`_row` reads the row, and names the error).
    False when no value can be Debezium's TOAST placeholder (the compiled row tells), else None."""
    fill = plan.fill
    if fill is not None and data.__class__ is dict and len(data) <= len(plan.names):
        try:
            return fill(values.add, data.get)  # type: ignore[no-any-return]
        except Exception:
            del values[:]
    _row(plan, data, which, values.add)
    return None


#: converters that never give an Unchanged value (any other may: the compiled row says it may)
_NEVER_UNCHANGED = frozenset(
    (
        "_int",
        "_float",
        "_bool",
        "_date",
        "_micro_timestamp",
        "_milli_timestamp",
        "_zoned_timestamp",
        "_scaled_int.<locals>.conv",
        "_floored_int.<locals>.conv",
        "_decimal.<locals>.conv",
        "_decimal.<locals>.conv_avro",
        "_variable_decimal.<locals>.conv",
    )
)


def _compile_row(names: Sequence[str], converters: Sequence[Converter]) -> Any:
    """``fill(add, get)``: :func:`_row`'s loop for these columns as straight-line code (one Python
    call less per value: ~1 µs a row of 20 columns): the converters of integers, strings, floats,
    booleans, dates and microsecond timestamps written out for their common case (anything else
    calls the converter), and the placeholder checks of strings, bytes and arrays. It returns False
    when no value was (or may have been) Debezium's placeholder, so an insert's row need not be
    searched for one; None when it does not compile."""
    from inlet.services.cdc_consumer import types as T

    lines = ["def fill(add, get):", "    u = False"]
    env: dict[str, Any] = {
        "PLACEHOLDER": T.PLACEHOLDER,
        "PH_B64": T.PLACEHOLDER_B64,
        "PH_BYTES": T.PLACEHOLDER_BYTES,
        "UNCHANGED": T._UNCHANGED_MSG,
        "PG_MIN_DAYS": T.PG_MIN_DAYS,
        "PG_MAX_DAYS": T.PG_MAX_DAYS,
        "PG_MIN_MICROS": T.PG_MIN_MICROS,
        "DBZ_TS_INFINITY": T._DBZ_TS_INFINITY,
    }
    unchanged = ["        add(unchanged=UNCHANGED)", "        u = True"]
    for i, (name, conv) in enumerate(zip(names, converters, strict=True)):
        lines.append(f"    raw = get({name!r})")
        lines.append("    if raw is None:")
        lines.append("        add()")
        env[f"c{i}"] = conv
        placeholders = T.PLACEHOLDERS.get(conv)
        if conv is T._int:
            lines += ["    else:", "        add(int_value=raw)"]
        elif conv is T._string:
            lines += [
                "    elif raw == PLACEHOLDER:",
                *unchanged,
                "    else:",
                "        add(string_value=raw)",
            ]
        elif conv is T._bytes_json:
            lines += ["    elif raw == PH_B64:", *unchanged, "    else:", f"        c{i}(add, raw)"]
        elif conv is T._bytes_avro:
            lines += ["    elif raw == PH_BYTES:", *unchanged, "    else:", f"        c{i}(add, raw)"]
        elif placeholders is not None and placeholders[0] == "string":
            env[f"p{i}"] = placeholders[1]
            lines += [f"    elif raw in p{i}:", *unchanged, "    else:", "        add(string_value=raw)"]
        elif placeholders is not None and placeholders[0] == "list":
            env[f"p{i}"] = placeholders[1]
            lines += [f"    elif raw.__class__ is list and raw and raw in p{i}:", *unchanged]
            lines += ["    else:", f"        c{i}(add, raw)"]
        elif conv is T._float:  # a number as it is; Jackson's NaN words and booleans: the converter
            lines += [
                "    elif raw.__class__ is float or raw.__class__ is int:",
                "        add(double_value=raw)",
            ]
            lines += ["    else:", f"        c{i}(add, raw)"]
        elif conv is T._bool:
            lines += ["    elif raw is True or raw is False:", "        add(bool_value=raw)"]
            lines += ["    else:", f"        c{i}(add, raw)"]
        elif conv is T._date:  # a day in PostgreSQL's range as it is; infinities: the converter
            lines += ["    elif raw.__class__ is int and PG_MIN_DAYS <= raw <= PG_MAX_DAYS:"]
            lines += ["        add(int_value=raw)", "    else:", f"        c{i}(add, raw)"]
        elif conv is T._micro_timestamp:
            lines += ["    elif raw.__class__ is int and raw >= PG_MIN_MICROS and raw != DBZ_TS_INFINITY:"]
            lines += ["        add(int_value=raw)", "    else:", f"        c{i}(add, raw)"]
        elif getattr(conv, "__qualname__", "") in _NEVER_UNCHANGED:
            lines += ["    else:", f"        c{i}(add, raw)"]
        else:  # a converter that may give an Unchanged value
            lines += ["    else:", f"        c{i}(add, raw)", "        u = True"]
    lines.append("    return u")
    try:
        exec(compile("\n".join(lines), "<row plan>", "exec"), env)  # the code generated above
    except (SyntaxError, RecursionError, ValueError):
        return None
    return env["fill"]


def _row(plan: _TablePlan, data: Any, which: str, add: Any) -> None:
    """Append the values of ``data`` (a before/after dict) in the plan's column order."""
    if data.__class__ is not dict:
        raise DecodeError(f"'{which}' is not a record")
    get = data.get
    raw: Any = None
    name = ""
    try:
        for name, conv in plan.pairs:
            raw = get(name)
            if raw is None:
                add()
            else:
                conv(add, raw)
    except Unrepresentable as e:
        raise DecodeError(f"column {name!r}: {e}") from None
    except (TypeError, ValueError, KeyError, OverflowError):
        expected = plan.expected[plan.index[name]]
        raise DecodeError(f"column {name!r}: expected {expected}, got {_show(raw)}") from None
    if len(data) > len(plan.names):
        extra = [k for k in data if k not in plan.index]
        if extra:
            raise DecodeError(f"'{which}' has column {extra[0]!r} that the schema does not declare")


def _not_full(table_id: str, schema: str, table: str, identity: str) -> str:
    return (
        f"table {table_id} has no primary key and REPLICA IDENTITY {identity}: its changes are skipped "
        f"(PostgreSQL publishes no old row to follow its updates and deletes by); ALTER TABLE "
        f'"{schema}"."{table}" REPLICA IDENTITY FULL, or add a primary key, to replicate it'
    )


def _show(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def row_record_key(schema: pb.TableSchema, row: pb.Row, before: pb.Row | None = None) -> str:
    """The record key of a table without a primary key: every column of ``row``, rendered as Hudi's
    complex key generator does (``col1:v1,col2:v2``; the value alone for a one-column table).

    The decoder keys a keyless table's c/r/u changes by their ``after`` image and deletes by their
    ``before`` image (REPLICA IDENTITY FULL sends every column), so a row's insert and its delete get
    the same key. An UPDATE changes the key: the old row's key is ``row_record_key(schema, before)``.
    An unchanged TOASTed value in ``row`` takes its value from ``before``.
    """
    names = [c.name for c in schema.columns]
    texts = []
    for i, (c, v) in enumerate(zip(schema.columns, row.values, strict=True)):
        if v.WhichOneof("kind") == "unchanged":
            if before is None or before.values[i].WhichOneof("kind") == "unchanged":
                raise DecodeError(f"column {c.name!r} is an unchanged TOASTed value: no record key")
            v = before.values[i]
        try:
            texts.append(key_text(c, v))
        except ValueError as e:
            raise DecodeError(f"column {c.name!r}: {e}") from None
    return _record_key(names, texts)


def _record_key(names: Sequence[str], texts: list[str | None]) -> str:
    """Hudi's record key text: the value of a one-column key (simple key generator), else
    ``col1:v1,col2:v2`` with ``__null__``/``__empty__`` (complex key generator)."""
    if len(names) == 1:
        text = texts[0]
        if text is None or text == "":
            raise DecodeError(f"record key column {names[0]!r} is null or empty")
        return text
    if all(t is None for t in texts):
        raise DecodeError(f"all record key columns ({', '.join(names)}) are null")
    return ",".join(
        f"{n}:{NULL_KEY if t is None else EMPTY_KEY if t == '' else t}"
        for n, t in zip(names, texts, strict=True)
    )


def _fill_source(
    s: pb.SourcePosition,
    source: dict[str, Any],
    payload: dict[str, Any],
    topic: str,
    partition: int,
    offset: int,
) -> None:
    get = source.get
    s.connector = get("connector") or ""
    s.database = get("db") or ""
    s.schema = get("schema") or ""
    s.table = get("table") or ""
    s.lsn = get("lsn") or 0
    s.tx_id = get("txId") or 0
    s.xmin = get("xmin") or 0
    s.source_ts_ms = get("ts_ms") or 0
    s.processed_ts_ms = payload.get("ts_ms") or 0
    marker = get("snapshot")
    if marker.__class__ is bool:  # older Debezium: a boolean
        marker = "true" if marker else "false"
    marker = marker or "false"
    s.snapshot_marker = marker
    s.snapshot = marker not in ("false", "")
    s.kafka_topic = topic
    s.kafka_partition = partition
    s.kafka_offset = offset
