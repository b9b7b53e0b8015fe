"""Online backfills: Debezium's incremental snapshots, started by a signal, followed by its notifications.

``inlet backfill TABLE...`` loads tables while their changes keep streaming, on the connector's own
replication slot. It is Debezium's incremental snapshot (DBLog): the connector reads each table in
primary-key chunks of ``incremental.snapshot.chunk.size`` rows; before a chunk it writes a
*low watermark* row into the signal table, after it a *high watermark* row, and every change of a
key of the chunk that streams between the two watermarks drops that key from the chunk. The rows
left are emitted as ``op: r`` events at the high watermark, so in the topic every ``r`` event
follows every change its read saw and precedes every change it did not see.

What this module holds:

- :func:`connector_settings`: the connector settings that enable it - the signal table (source
  channel), the chunk size, ``insert_delete`` watermarks (a chunk's rows are removed again, so the
  signal table stays small), and notifications to a Kafka topic (``sink`` channel);
- :func:`ensure_signal_table`: creates the signal table (``inlet.debezium_signal`` by default, in
  its own schema so ``--tables public.*`` never replicates it). Debezium adds the signal table to
  the tables it captures, so a ``filtered`` publication gets it too; a publication a DBA made must
  list it (``ALTER PUBLICATION ... ADD TABLE inlet.debezium_signal``);
- :func:`send_signal`: checks the tables (they exist, have a primary key) and inserts the
  ``execute-snapshot`` signal; its id is the id of every notification of the snapshot;
- :class:`NotificationReader` / :func:`follow`: reads the notification topic from its start (a
  throwaway consumer group, nothing committed) and
  yields the snapshot's notifications (``STARTED``, ``IN_PROGRESS`` per chunk, ``TABLE_SCAN_COMPLETED``
  per table with its row count, ``COMPLETED`` or ``ABORTED``).

Debezium's change events for the signal table itself (its own topic ``<prefix>.inlet.debezium_signal``)
are not data: the CDC consumer drops them (``inlet cdc run --signal-table``).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from inlet.services.cdc_consumer.settings import DEFAULT_SIGNAL_TABLE as DEFAULT_SIGNAL_TABLE

DEFAULT_CHUNK_SIZE = 1024
NOTIFICATION_AGGREGATE = "Incremental Snapshot"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*")


class BackfillError(RuntimeError):
    """A backfill cannot be started or did not finish (the message names the problem)."""


def notification_topic(topic_prefix: str) -> str:
    """The Kafka topic Debezium's notifications go to (outside ``^<prefix>\\.``, like the heartbeats)."""
    return f"__debezium-notification.{topic_prefix}"


def split_name(name: str, what: str = "table") -> tuple[str, str]:
    """``schema.table`` as its two parts (plain identifiers only); BackfillError otherwise."""
    if not _NAME.fullmatch(name):
        raise BackfillError(f"{what} {name!r} is not SCHEMA.TABLE")
    schema, table = name.split(".")
    return schema, table


def connector_settings(
    topic_prefix: str, signal_table: str = DEFAULT_SIGNAL_TABLE, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> dict[str, str]:
    """The Debezium settings that make a connector run the incremental snapshots a signal asks for."""
    split_name(signal_table, "signal table")
    if chunk_size < 1:
        raise BackfillError(f"incremental snapshot chunk size must be at least 1, got {chunk_size}")
    return {
        "signal.enabled.channels": "source",
        "signal.data.collection": signal_table,
        "incremental.snapshot.chunk.size": str(chunk_size),
        "incremental.snapshot.watermarking.strategy": "insert_delete",
        "notification.enabled.channels": "sink",
        "notification.sink.topic.name": notification_topic(topic_prefix),
    }


def ensure_signal_table(url: str, signal_table: str = DEFAULT_SIGNAL_TABLE) -> None:
    """Create the signal table (and its schema) in the source if absent: ``id``, ``type``, ``data``."""
    schema, table = split_name(signal_table, "signal table")
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        # one a DBA made is used as it is (CREATE SCHEMA IF NOT EXISTS needs CREATE on the database)
        found = conn.execute(
            """SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relname = %s""",
            (schema, table),
        ).fetchone()
        if found is not None:
            return
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data text)"
            ).format(sql.Identifier(schema, table))
        )


def _check_tables(conn: psycopg.Connection[Any], tables: Sequence[str], signal_table: str) -> None:
    for name in tables:
        schema, table = split_name(name)
        if name == signal_table:
            raise BackfillError(f"{name} is the signal table, not a table to backfill")
        row = conn.execute(
            """SELECT c.oid, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')""",
            (schema, table),
        ).fetchone()
        if row is None:
            raise BackfillError(f"table {name} does not exist in the source")
        if not row[1]:
            raise BackfillError(
                f"table {name} has no primary key: Debezium's incremental snapshot reads in key order"
            )


def send_signal(url: str, tables: Sequence[str], signal_table: str = DEFAULT_SIGNAL_TABLE) -> str:
    """Insert an ``execute-snapshot`` signal (incremental) for ``tables``; the signal's id."""
    if not tables:
        raise BackfillError("name at least one table to backfill")
    schema, table = split_name(signal_table, "signal table")
    signal_id = f"inlet-backfill-{uuid.uuid4()}"
    # data-collections are regular expressions of schema.table
    data = json.dumps({"data-collections": [re.escape(t) for t in tables], "type": "incremental"})
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        _check_tables(conn, tables, signal_table)
        try:
            conn.execute(
                sql.SQL("INSERT INTO {} (id, type, data) VALUES (%s, 'execute-snapshot', %s)").format(
                    sql.Identifier(schema, table)
                ),
                (signal_id, data),
            )
        except psycopg.errors.UndefinedTable:
            raise BackfillError(
                f"the signal table {signal_table} does not exist in the source: an inlet stack creates it "
                f"at start; for a deployment create it (see docs/backfill.md)"
            ) from None
    return signal_id


@dataclass(frozen=True)
class Notification:
    """One Debezium notification: ``type`` STARTED, IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED, ABORTED, ..."""

    id: str
    type: str
    data: dict[str, str] = field(default_factory=dict)
    timestamp_ms: int = 0

    def describe(self) -> str:
        """One line for a person."""
        d = self.data
        if self.type == "STARTED":
            return f"started: {d.get('data_collections', '')}"
        if self.type == "IN_PROGRESS":
            return (
                f"{d.get('current_collection_in_progress', '')}: chunk read up to key "
                f"{d.get('last_processed_key', '?')} (last key {d.get('maximum_key', '?')})"
            )
        if self.type == "TABLE_SCAN_COMPLETED":
            return (
                f"{d.get('scanned_collection', '')}: {d.get('total_rows_scanned', '?')} rows read "
                f"({d.get('status', '?')})"
            )
        return self.type.lower()


def parse_notification(value: bytes | None) -> Notification | None:
    """A notification record's value (JSON, with or without the Connect schema envelope); None if not one."""
    if not value:
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if isinstance(doc, dict) and "payload" in doc and "schema" in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or doc.get("aggregate_type") != NOTIFICATION_AGGREGATE:
        return None
    extra = doc.get("additional_data") or {}
    return Notification(
        str(doc.get("id", "")),
        str(doc.get("type", "")),
        {str(k): str(v) for k, v in extra.items()},
        int(doc.get("timestamp") or 0),
    )


#: a table scan that ended without reading its rows
FAILED_SCANS = ("NO_PRIMARY_KEY", "SQL_EXCEPTION", "UNKNOWN_SCHEMA", "SKIPPED")


class NotificationReader:
    """Reads a notification topic from its start (a consumer without a group; nothing committed)."""

    def __init__(self, bootstrap: str, topic: str, consumer_options: dict[str, Any] | None = None) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": f"inlet-backfill-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
        conf.update(consumer_options or {})
        self._consumer = Consumer(conf)
        self._assigned = False

    def close(self) -> None:
        self._consumer.close()

    def check(self, timeout_s: float = 5.0) -> None:
        """BackfillError unless the broker answers (before a signal is sent that nobody would follow)."""
        from confluent_kafka import KafkaException

        try:
            self._consumer.list_topics(timeout=timeout_s)
        except KafkaException as e:
            raise BackfillError(f"cannot reach Kafka to follow the backfill: {e.args[0]}") from None

    def poll(self, timeout_s: float = 0.5) -> list[Notification]:
        """The notifications read within ``timeout_s`` (none while the topic does not exist yet)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if not self._assigned:
            topics = self._consumer.list_topics(timeout=5).topics
            meta = topics.get(self.topic)
            if meta is None or not meta.partitions:
                time.sleep(timeout_s)
                return []
            self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            self._assigned = True
        out = []
        for m in self._consumer.consume(num_messages=500, timeout=timeout_s):
            if m.error() is not None:
                continue
            n = parse_notification(m.value())
            if n is not None:
                out.append(n)
        return out


def follow(reader: NotificationReader, signal_id: str, timeout_s: float) -> Iterator[Notification]:
    """The notifications of snapshot ``signal_id`` until COMPLETED; BackfillError on ABORTED, a failed
    table scan, or no COMPLETED within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    seen_any = False
    while time.monotonic() < deadline:
        for n in reader.poll():
            if n.id != signal_id:
                continue
            seen_any = True
            yield n
            if n.type == "COMPLETED":
                return
            if n.type == "ABORTED":
                raise BackfillError(f"Debezium aborted the backfill {signal_id}")
            if n.type == "TABLE_SCAN_COMPLETED" and n.data.get("status") in FAILED_SCANS:
                raise BackfillError(
                    f"Debezium could not read {n.data.get('scanned_collection')}: {n.data.get('status')}"
                )
    if not seen_any:
        raise BackfillError(
            f"no notification of backfill {signal_id} on {reader.topic} after {timeout_s:.0f} s: is the "
            "connector running with signals and notifications enabled (docs/backfill.md)?"
        )
    raise BackfillError(
        f"backfill {signal_id} not completed after {timeout_s:.0f} s (it goes on in Debezium)"
    )
