"""The transactional outbox's publisher: delivers the coordinator's commit events to Kafka.

The coordinator inserts one ``outbox`` row per completed instant in the transaction that records the
completion. :class:`OutboxPublisher` reads unpublished rows in ``id`` order (completion order per
table), produces each to ``topic`` (default ``inlet.commits``) with

- key = ``table_id`` (one partition per table, so per-table order holds),
- value = the serialized ``inlet.proto.events.v1.CommitEvent``,
- headers ``event_id``, ``content-type`` (:data:`CONTENT_TYPE`) and ``sequence``,

waits for the broker's acknowledgement (``acks=all``), and only then marks the rows published.
Delivery is at-least-once: a crash between acknowledgement and marking re-sends the same
``event_id``; subscribers deduplicate by it (or by ``sequence`` per table).

Only one publisher per database publishes at a time: each holds a PostgreSQL session advisory lock
(:data:`PUBLISHER_LOCK_KEY`) while it leads; the others' passes return 0 until the leader goes away
(its session ends, releasing the lock). A Kafka outage leaves rows unpublished with ``attempts`` and
``last_error`` updated; the background loop backs off exponentially and delivers them, in order,
when Kafka returns. The producer keeps one request in flight per connection so retries cannot
reorder a table's events.

Optional: the same event as the JSON of Apache Hudi's ``HoodieWriteCommitKafkaCallback`` on
``hudi_json_topic`` (record key = table name, as Hudi does; delivered with the protobuf message
before the row counts as published), and an HTTP POST of that JSON to ``http_callback_url`` as
``HoodieWriteCommitHttpCallback`` does (best effort, like Hudi's: a failure is logged and counted,
not retried).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any

import psycopg
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient
from google.protobuf.message import DecodeError

from inlet.proto.events.v1 import events_pb2
from inlet.services.coordinator import hudi_callback
from inlet.services.coordinator.store import OUTBOX_DDL
from inlet.services.kafka_topics import PRODUCER_SAFETY, TopicSpec, ensure_topics

log = logging.getLogger("inlet.coordinator.outbox")
_kafka_log = logging.getLogger("inlet.coordinator.outbox.kafka")

DEFAULT_TOPIC = "inlet.commits"
CONTENT_TYPE = "application/x-protobuf; message=inlet.proto.events.v1.CommitEvent"
JSON_CONTENT_TYPE = "application/json"
#: pg_try_advisory_lock key held by the leading publisher of a database
PUBLISHER_LOCK_KEY = 0x1A1E0B0C

# keeps the publisher's scan cheap once most rows are published
UNPUBLISHED_INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS outbox_unpublished ON outbox (id) WHERE published_at IS NULL"
)

_MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class OutboxRow:
    id: int
    event_id: str
    table_id: str
    sequence: int
    payload: bytes


@dataclass
class PublisherStats:
    """Counters since the publisher was created (for a later ``/metrics``)."""

    published_total: int = 0  # rows delivered and marked published
    failed_total: int = 0  # row delivery attempts that failed (rows stayed pending)
    passes_total: int = 0  # passes run while leading
    hudi_json_failed_total: int = 0  # rows whose payload could not be turned into Hudi's JSON
    http_posted_total: int = 0
    http_failed_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    last_published_at: float | None = None  # time.time() of the last successful delivery
    errors_by_kind: dict[str, int] = field(default_factory=dict)


class OutboxPublisher:
    """Publishes ``outbox`` rows to Kafka; see the module docstring for the guarantees.

    ``start()`` runs passes in a background thread every ``poll_interval_s`` (backing off up to
    ``max_backoff_s`` after failures); ``publish_pending()`` runs one pass (tests, shutdown).
    ``delivery_timeout_s`` bounds how long a pass waits for Kafka (``message.timeout.ms``).
    ``topic_partitions`` makes the publisher create its topics (if missing) with that many
    partitions; otherwise the broker's auto-creation applies. ``producer_config`` overrides
    librdkafka settings.
    """

    def __init__(
        self,
        dsn: str,
        bootstrap_servers: str,
        topic: str = DEFAULT_TOPIC,
        hudi_json_topic: str | None = None,
        http_callback_url: str | None = None,
        poll_interval_s: float = 0.2,
        *,
        batch_size: int = 100,
        delivery_timeout_s: float = 10.0,
        max_backoff_s: float = 30.0,
        topic_partitions: int | None = None,
        topic_config: Mapping[str, str] | None = None,
        producer_config: Mapping[str, Any] | None = None,
        http_api_key: str = hudi_callback.DEFAULT_HTTP_API_KEY,
        http_headers: Mapping[str, str] | None = None,
        http_timeout_s: float = hudi_callback.DEFAULT_HTTP_TIMEOUT_S,
        lock_key: int = PUBLISHER_LOCK_KEY,
    ) -> None:
        for name, value in (("dsn", dsn), ("bootstrap_servers", bootstrap_servers), ("topic", topic)):
            if not value or not value.strip():
                raise ValueError(f"OutboxPublisher needs a non-empty {name}")
        if hudi_json_topic is not None and not hudi_json_topic.strip():
            raise ValueError("hudi_json_topic must be None or a topic name")
        if http_callback_url is not None and not http_callback_url.startswith(("http://", "https://")):
            raise ValueError(f"http_callback_url must be an http(s) URL, got {http_callback_url!r}")
        if poll_interval_s <= 0 or delivery_timeout_s <= 0 or max_backoff_s <= 0 or http_timeout_s <= 0:
            raise ValueError(
                "poll_interval_s, delivery_timeout_s, max_backoff_s and http_timeout_s must be > 0"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if topic_partitions is not None and topic_partitions < 1:
            raise ValueError(f"topic_partitions must be None or at least 1, got {topic_partitions}")
        self.dsn = dsn
        self.topic_config = dict(topic_config or {})
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.hudi_json_topic = hudi_json_topic
        self.http_callback_url = http_callback_url
        self.poll_interval_s = poll_interval_s
        self.batch_size = batch_size
        self.delivery_timeout_s = delivery_timeout_s
        self.max_backoff_s = max_backoff_s
        self.topic_partitions = topic_partitions
        self.http_api_key = http_api_key
        self.http_headers = dict(http_headers or {})
        self.http_timeout_s = http_timeout_s
        self.lock_key = lock_key
        self._producer_overrides = dict(producer_config or {})
        self.stats = PublisherStats()
        self._conn: psycopg.Connection[Any] | None = None
        self._leader = False
        self._producer: Producer | None = None
        self._topics_ready = False
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> OutboxPublisher:
        """Run passes in a background thread until :meth:`stop`."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="inlet-outbox-publisher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop the thread (after its current pass), flush the producer, release the leader lock."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s if timeout_s is not None else self.delivery_timeout_s + 30)
            self._thread = None
        with self._pass_lock:
            if self._producer is not None:
                self._producer.flush(1.0)
                self._producer = None
            self._close_connection()

    def __enter__(self) -> OutboxPublisher:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def is_leader(self) -> bool:
        """Whether this publisher holds the database's publisher lock."""
        return self._leader

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- metrics ----------------------------------------------------------------------------------

    def lag_seconds(self) -> float:
        """Age in seconds of the oldest unpublished row (0.0 when none is pending)."""
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::float8 "
                "FROM outbox WHERE published_at IS NULL"
            ).fetchone()
        return float(row[0]) if row is not None else 0.0

    def pending_count(self) -> int:
        """Rows not yet published."""
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            row = conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
        return int(row[0]) if row is not None else 0

    def metrics(self) -> dict[str, float]:
        """Counters plus lag and pending rows (the latter two read the database; NaN if it is down)."""
        out: dict[str, float] = {
            "published_total": self.stats.published_total,
            "failed_total": self.stats.failed_total,
            "passes_total": self.stats.passes_total,
            "http_posted_total": self.stats.http_posted_total,
            "http_failed_total": self.stats.http_failed_total,
            "hudi_json_failed_total": self.stats.hudi_json_failed_total,
            "leader": 1.0 if self._leader else 0.0,
        }
        try:
            out["lag_seconds"] = self.lag_seconds()
            out["pending"] = self.pending_count()
        except psycopg.Error:
            out["lag_seconds"] = out["pending"] = float("nan")
        return out

    # -- one pass ---------------------------------------------------------------------------------

    def publish_pending(self) -> int:
        """One pass: deliver every unpublished row (in id order) if this publisher leads.

        Returns the number of rows published. Kafka failures leave rows pending (``attempts`` +1,
        ``last_error``) and end the pass; database errors propagate (the connection is reset).
        """
        with self._pass_lock:
            try:
                conn = self._connection()
                if not self._try_lead(conn):
                    return 0
                self.stats.passes_total += 1
                producer = self._producer_instance()
                self._ensure_topics()
                published = 0
                while True:
                    rows = self._fetch(conn)
                    if not rows:
                        self.stats.consecutive_failures = 0
                        break
                    delivered, failed = self._send(producer, rows)
                    if self.http_callback_url is not None:
                        self._post_http([row for row in rows if row.id in delivered])
                    self._mark(conn, delivered, failed)
                    published += len(delivered)
                    if failed:
                        self.stats.consecutive_failures += 1
                        break
                    if len(rows) < self.batch_size:
                        self.stats.consecutive_failures = 0
                        break
                return published
            except psycopg.Error as exc:
                self._note_error("database", f"database error: {exc}")
                self._close_connection()
                raise

    # -- internals: database ----------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is not None and (self._conn.closed or self._conn.broken):
            self._close_connection()
        if self._conn is None:
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=10, application_name="inlet-outbox-publisher"
            )
            try:
                ensure_outbox_table(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
            self._leader = False
        return self._conn

    def _close_connection(self) -> None:
        if self._conn is not None:
            if self._leader and not self._conn.broken:
                # release at once (closing alone frees it only when the server ends the session)
                with contextlib.suppress(psycopg.Error):
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.lock_key,))
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None
        self._leader = False

    def _try_lead(self, conn: psycopg.Connection[Any]) -> bool:
        if not self._leader:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.lock_key,)).fetchone()
            self._leader = bool(row and row[0])
            if self._leader:
                log.info("outbox publisher leads (advisory lock %#x)", self.lock_key)
        return self._leader

    def _fetch(self, conn: psycopg.Connection[Any]) -> list[OutboxRow]:
        rows = conn.execute(
            "SELECT id, event_id, table_id, sequence, payload FROM outbox "
            "WHERE published_at IS NULL ORDER BY id LIMIT %s",
            (self.batch_size,),
        ).fetchall()
        return [OutboxRow(r[0], r[1], r[2], r[3], bytes(r[4])) for r in rows]

    def _mark(
        self, conn: psycopg.Connection[Any], delivered: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        with conn.transaction():
            if delivered:
                conn.execute(
                    "UPDATE outbox SET published_at = now(), attempts = attempts + 1 "
                    "WHERE id = ANY(%s) AND published_at IS NULL",
                    (list(delivered),),
                )
            for row_id, error in failed.items():
                conn.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = %s WHERE id = %s",
                    (error[:_MAX_ERROR_CHARS], row_id),
                )
        if delivered:
            self.stats.published_total += len(delivered)
            self.stats.last_published_at = time.time()
        if failed:
            self.stats.failed_total += len(failed)
            self._topics_ready = False  # a new broker may have lost them
            first = next(iter(failed.values()))
            self._note_error("kafka", first)
            log.warning("outbox: %d event(s) not delivered, will retry: %s", len(failed), first)

    # -- internals: Kafka -------------------------------------------------------------------------

    def producer_settings(self) -> dict[str, Any]:
        """The event producer's librdkafka settings: the overrides tune it, :data:`PRODUCER_SAFETY` wins."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": "inlet-outbox-publisher",
            # one request in flight: a table's events leave in completion order, retries included
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": int(self.delivery_timeout_s * 1000),
            "retry.backoff.ms": 100,
            "linger.ms": 5,
            "logger": _kafka_log,
        }
        config.update(self._producer_overrides)
        config.update(PRODUCER_SAFETY)  # idempotent, acks=all: no override makes it lose or repeat events
        return config

    def _producer_instance(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self.producer_settings())
        return self._producer

    def _ensure_topics(self) -> None:
        if self.topic_partitions is None or self._topics_ready:
            return
        names = [self.topic] + ([self.hudi_json_topic] if self.hudi_json_topic else [])
        admin_config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _kafka_log,
            **self._producer_overrides,  # security settings reach the admin client too
        }
        admin = AdminClient(admin_config)
        specs = [TopicSpec(name, self.topic_partitions, config=self.topic_config) for name in names]
        try:
            ensure_topics(admin, specs, timeout_s=self.delivery_timeout_s)
            self._topics_ready = True
        except Exception as exc:  # the produce below reports the outage per row
            log.warning("outbox: cannot create topics %s: %s", names, exc)

    def _send(self, producer: Producer, rows: Sequence[OutboxRow]) -> tuple[list[int], dict[int, str]]:
        """Produce every row (and its Hudi JSON twin) and wait; returns (delivered ids, id -> error)."""
        outstanding: dict[int, int] = {}
        errors: dict[int, str] = {}

        fatal_seen: list[bool] = []

        def delivered(row_id: int, err: KafkaError | None, _msg: Message) -> None:
            outstanding[row_id] -= 1
            if err is not None:
                fatal_seen.append(err.fatal())
                errors.setdefault(row_id, f"kafka delivery failed: {err.str()}")

        for row in rows:
            messages = [self._protobuf_message(row)]
            if self.hudi_json_topic is not None:
                twin = self._hudi_json_message(row)
                if twin is not None:
                    messages.append(twin)
            outstanding[row.id] = 0
            for topic, key, value, headers in messages:
                try:
                    producer.produce(
                        topic, key=key, value=value, headers=headers, on_delivery=partial(delivered, row.id)
                    )
                    outstanding[row.id] += 1
                except (BufferError, KafkaException) as exc:
                    errors.setdefault(row.id, f"kafka produce failed: {exc}")
                producer.poll(0)
        fatal = False
        try:
            remaining = producer.flush(self.delivery_timeout_s + 5.0)
            if remaining:
                # still undecided after the delivery timeout: give up on them for this pass
                producer.purge(in_queue=True, in_flight=True)
                producer.flush(1.0)
        except (KafkaException, SystemError) as exc:
            # a fatal producer error (e.g. an idempotent producer whose broker lost its producer id)
            fatal = True
            for row in rows:
                errors.setdefault(row.id, f"kafka producer failed: {exc}")
        if fatal or any(fatal_seen):
            log.warning("outbox: Kafka producer hit a fatal error; a new one is made for the next pass")
            self._producer = None
        ok: list[int] = []
        for row in rows:
            if row.id in errors:
                continue
            if outstanding[row.id] != 0:
                errors[row.id] = "kafka delivery not confirmed within the delivery timeout"
            else:
                ok.append(row.id)
        return ok, errors

    def _protobuf_message(
        self, row: OutboxRow
    ) -> tuple[str, bytes, bytes, list[tuple[str, str | bytes | None]]]:
        headers: list[tuple[str, str | bytes | None]] = [
            ("event_id", row.event_id.encode()),
            ("content-type", CONTENT_TYPE.encode()),
            ("sequence", str(row.sequence).encode()),
        ]
        return self.topic, row.table_id.encode(), row.payload, headers

    def _hudi_json_message(
        self, row: OutboxRow
    ) -> tuple[str, bytes, bytes, list[tuple[str, str | bytes | None]]] | None:
        assert self.hudi_json_topic is not None
        event = _decode(row)
        if event is None:
            self.stats.hudi_json_failed_total += 1
            return None
        key = (event.table_name or row.table_id).encode()  # Hudi keys its callback by table name
        headers: list[tuple[str, str | bytes | None]] = [
            ("event_id", row.event_id.encode()),
            ("content-type", JSON_CONTENT_TYPE.encode()),
        ]
        return self.hudi_json_topic, key, hudi_callback.callback_json(event).encode(), headers

    # -- internals: HTTP --------------------------------------------------------------------------

    def _post_http(self, rows: Sequence[OutboxRow]) -> None:
        assert self.http_callback_url is not None
        for row in rows:
            event = _decode(row)
            if event is None:
                self.stats.http_failed_total += 1
                continue
            try:
                hudi_callback.post_callback(
                    self.http_callback_url,
                    hudi_callback.callback_json(event),
                    api_key=self.http_api_key,
                    headers=self.http_headers,
                    timeout_s=self.http_timeout_s,
                )
                self.stats.http_posted_total += 1
            except hudi_callback.HttpCallbackError as exc:
                self.stats.http_failed_total += 1
                self._note_error("http", str(exc))
                log.warning("outbox: HTTP callback for %s failed: %s", row.event_id, exc)

    # -- internals: loop --------------------------------------------------------------------------

    def _note_error(self, kind: str, message: str) -> None:
        self.stats.last_error = message
        self.stats.errors_by_kind[kind] = self.stats.errors_by_kind.get(kind, 0) + 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.publish_pending()
            except Exception as exc:  # keep running: the database or Kafka may come back
                self.stats.consecutive_failures += 1
                log.warning("outbox pass failed: %s", exc)
            failures = self.stats.consecutive_failures
            delay = self.poll_interval_s
            if failures:
                delay = min(self.max_backoff_s, self.poll_interval_s * 2 ** min(failures, 20))
            self._stop.wait(delay)


def ensure_outbox_table(conn: psycopg.Connection[Any]) -> None:
    """Create ``outbox`` (and the publisher's partial index) unless they exist.

    Two sessions racing on ``CREATE TABLE IF NOT EXISTS`` can still collide in PostgreSQL's
    catalog; the loser's error is ignored when the table is there afterwards.
    """
    for ddl in (OUTBOX_DDL, UNPUBLISHED_INDEX_DDL):
        try:
            with conn.transaction():
                conn.execute(ddl)
        except (
            psycopg.errors.UniqueViolation,
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateObject,
        ):
            log.debug("outbox DDL raced with another session; already created")


def _decode(row: OutboxRow) -> events_pb2.CommitEvent | None:
    try:
        return events_pb2.CommitEvent.FromString(row.payload)
    except DecodeError as exc:
        log.error("outbox row %s (%s): payload is not a CommitEvent: %s", row.id, row.event_id, exc)
        return None
