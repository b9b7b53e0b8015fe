"""The catalog sync service: keep a Hive Metastore in step with every commit published on ``inlet.commits``.

It consumes the coordinator's ``CommitEvent``s (consumer group ``inlet-catalog-sync``), remembers which tables
changed, and syncs each changed table once its first unsynced event is ``coalesce_s`` old (a burst of commits
to one table is one sync). A sync always starts from the table's own ``last_commit_time_sync`` in the
metastore, so it covers every commit since, not just the events seen.

Kafka offsets are committed only up to the oldest event whose table is not synced yet: a restart (or a
crash mid-sync) re-reads those events and syncs again, which is idempotent. While the metastore is down the
pending tables stay pending and are retried with exponential backoff (``retry_initial_s`` doubling to
``retry_max_s``); nothing is skipped. A sync the metastore refuses for good (an incompatible schema change)
is logged, counted in ``inlet_catalog_sync_failures_total`` and retried on the table's next event.

Database: ``database`` if set, else the part of the event's ``table_id`` before its last ``.``
(``sales.trips`` -> ``sales``, ``shop.public.orders`` -> ``shop_public``), else the table's ``hoodie.database.name``, else ``default``. ``options`` are
Hudi's ``hoodie.datasource.hive_sync.*`` options for every table.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inlet.services.catalog_sync.errors import CatalogSyncError, MetastoreUnavailableError
from inlet.services.catalog_sync.metastore import MetastoreClient
from inlet.services.catalog_sync.sync import SyncReport, sync_table

_log = logging.getLogger(__name__)

DEFAULT_TOPIC = "inlet.commits"
DEFAULT_GROUP = "inlet-catalog-sync"


def database_of(table_id: str) -> str | None:
    """The metastore database of a coordinator table id: its part before the last ``.``, as a Hive name.

    ``sales.trips`` -> ``sales``; ``shop.public.orders`` -> ``shop_public`` (Hive names are ``[A-Za-z0-9_]``);
    no ``.`` (or a path) -> None (the table's ``hoodie.database.name``, else ``default``).
    """
    if "." not in table_id or "/" in table_id:
        return None
    prefix = table_id.rsplit(".", 1)[0]
    return re.sub(r"[^A-Za-z0-9_]", "_", prefix).lower() or None


@dataclass
class ServiceConfig:
    bootstrap: str
    metastore: str
    topic: str = DEFAULT_TOPIC
    group: str = DEFAULT_GROUP
    database: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    coalesce_s: float = 2.0
    retry_initial_s: float = 1.0
    retry_max_s: float = 30.0
    metastore_timeout_s: float = 60.0
    kafka: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Pending:
    table_id: str
    base_path: str
    first_seen: float
    latest_instant: str = ""
    committed_at: float | None = None  # commit time of the oldest unsynced event (lag metric)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> lowest offset
    next_attempt: float = 0.0
    failures: int = 0


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter("inlet_catalog_events_total", "CommitEvents consumed", registry=r)
        self.bad_events = Counter(
            "inlet_catalog_bad_events_total", "Undecodable messages skipped", registry=r
        )
        self.syncs = Counter("inlet_catalog_syncs_total", "Table syncs", ["result"], registry=r)
        self.failures = Counter(
            "inlet_catalog_sync_failures_total",
            "Syncs refused for good (not retried until the next event)",
            registry=r,
        )
        self.sync_seconds = Histogram("inlet_catalog_sync_seconds", "Duration of one table sync", registry=r)
        self.lag_seconds = Histogram(
            "inlet_catalog_sync_lag_seconds",
            "From a commit's completion to its table's sync",
            buckets=(0.5, 1, 2, 3, 5, 10, 30, 60, 300, 1800),
            registry=r,
        )
        self.pending = Gauge("inlet_catalog_pending_tables", "Tables with unsynced commits", registry=r)
        self.metastore_up = Gauge(
            "inlet_catalog_metastore_up", "1 when the last metastore call worked", registry=r
        )
        self.partitions = Counter(
            "inlet_catalog_partition_changes_total",
            "Partitions added/updated/dropped",
            ["change"],
            registry=r,
        )


class CatalogSyncService:
    """Consume ``inlet.commits`` and sync every changed table into the metastore."""

    def __init__(self, config: ServiceConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.pending: dict[str, _Pending] = {}
        self.client = MetastoreClient(config.metastore, config.metastore_timeout_s)
        self.consumer: Any = None
        self.last_error: str | None = None
        self.last_reports: dict[str, SyncReport] = {}
        self.synced = threading.Condition()
        self.sync_count = 0
        self._retry_delay = config.retry_initial_s
        self._metastore_ok = True
        self._committed: dict[tuple[str, int], int] = {}

    # -- health -----------------------------------------------------------------------------------

    def health(self) -> tuple[bool, Mapping[str, Any]]:
        return self._metastore_ok, {
            "pending_tables": len(self.pending),
            "metastore": self.config.metastore,
            "last_error": self.last_error,
        }

    # -- the loop ---------------------------------------------------------------------------------

    def _consumer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.config.bootstrap,
            "group.id": self.config.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
        settings.update(self.config.kafka)
        return settings

    def run(self, stop: threading.Event | Any) -> int:
        from confluent_kafka import Consumer

        self.consumer = Consumer(self._consumer_settings())
        self.consumer.subscribe([self.config.topic])
        _log.info("catalog sync consuming %s (group %s)", self.config.topic, self.config.group)
        try:
            while not stop.is_set():
                for msg in self.consumer.consume(num_messages=500, timeout=0.2):
                    self._handle(msg)
                self._tick()
        finally:
            self.close()
        return 0

    def close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = None
        self.client.close()

    def _handle(self, msg: Any) -> None:
        from inlet.proto.events.v1 import events_pb2

        if msg.error() is not None:
            _log.warning("kafka: %s", msg.error())
            return
        event = events_pb2.CommitEvent()
        try:
            event.ParseFromString(msg.value() or b"")
        except Exception as e:  # protobuf's DecodeError; a bad message must not stop the service
            self.metrics.bad_events.inc()
            _log.error(
                "skipping an undecodable message at %s[%d]@%d: %s",
                msg.topic(),
                msg.partition(),
                msg.offset(),
                e,
            )
            return
        if not event.base_path:
            self.metrics.bad_events.inc()
            _log.error(
                "skipping a CommitEvent without base_path at %s[%d]@%d",
                msg.topic(),
                msg.partition(),
                msg.offset(),
            )
            return
        self.metrics.events.inc()
        now = time.monotonic()
        key = event.table_id or event.base_path
        p = self.pending.get(key)
        if p is None:
            p = self.pending[key] = _Pending(key, event.base_path, now)
            if event.HasField("committed_at"):
                p.committed_at = event.committed_at.ToDatetime().timestamp()
        p.base_path = event.base_path
        p.latest_instant = max(
            p.latest_instant, event.instant.instant_time if event.HasField("instant") else ""
        )
        tp = (msg.topic(), msg.partition())
        p.offsets[tp] = min(p.offsets.get(tp, msg.offset()), msg.offset())
        self.metrics.pending.set(len(self.pending))

    def _tick(self) -> None:
        now = time.monotonic()
        for key in list(self.pending):
            p = self.pending[key]
            if now - p.first_seen < self.config.coalesce_s or now < p.next_attempt:
                continue
            self._sync(p)
        self._commit_offsets()

    def _database_for(self, table_id: str) -> str | None:
        if self.config.database:
            return self.config.database
        return database_of(table_id)

    def _sync(self, p: _Pending) -> None:
        started = time.monotonic()
        try:
            report = sync_table(
                p.base_path, self.client, database=self._database_for(p.table_id), options=self.config.options
            )
        except MetastoreUnavailableError as e:
            self._metastore_ok = False
            self.metrics.metastore_up.set(0)
            self.metrics.syncs.labels("unavailable").inc()
            self.last_error = str(e)
            p.failures += 1
            p.next_attempt = time.monotonic() + self._retry_delay
            _log.warning(
                "metastore unavailable, %s stays pending (retry in %.1fs): %s",
                p.table_id,
                self._retry_delay,
                e,
            )
            self._retry_delay = min(self._retry_delay * 2, self.config.retry_max_s)
            return
        except (CatalogSyncError, Exception) as e:  # a refused sync must not stop the other tables
            self.metrics.syncs.labels("failed").inc()
            self.metrics.failures.inc()
            self.last_error = f"{p.table_id}: {e}"
            _log.error("cannot sync %s (%s): %s", p.table_id, p.base_path, e)
            self._done(p)
            return
        finally:
            self.client.reset_counts()
        self._metastore_ok = True
        self.metrics.metastore_up.set(1)
        self._retry_delay = self.config.retry_initial_s
        self.metrics.syncs.labels("ok").inc()
        self.metrics.sync_seconds.observe(time.monotonic() - started)
        if p.committed_at is not None:
            self.metrics.lag_seconds.observe(max(0.0, time.time() - p.committed_at))
        for t in report.tables:
            self.metrics.partitions.labels("added").inc(len(t.partitions_added))
            self.metrics.partitions.labels("updated").inc(len(t.partitions_updated))
            self.metrics.partitions.labels("dropped").inc(len(t.partitions_dropped))
        self.last_reports[p.table_id] = report
        _log.info(
            "synced %s into %s: %s",
            p.table_id,
            report.database,
            ", ".join(f"{t.name}{' (changed)' if t.changed else ''}" for t in report.tables),
        )
        self._done(p)

    def _done(self, p: _Pending) -> None:
        self.pending.pop(p.table_id, None)
        self.metrics.pending.set(len(self.pending))
        with self.synced:
            self.sync_count += 1
            self.synced.notify_all()

    def _commit_offsets(self) -> None:
        """Commit, per partition, up to the oldest offset of a table still pending (or all consumed)."""
        if self.consumer is None:
            return
        from confluent_kafka import TopicPartition

        try:
            positions = self.consumer.position(self.consumer.assignment())
        except Exception:  # no assignment yet
            return
        to_commit = []
        for tp in positions:
            if tp.offset < 0:
                continue
            low = min(
                (
                    p.offsets[(tp.topic, tp.partition)]
                    for p in self.pending.values()
                    if (tp.topic, tp.partition) in p.offsets
                ),
                default=tp.offset,
            )
            if self._committed.get((tp.topic, tp.partition)) != low:
                to_commit.append(TopicPartition(tp.topic, tp.partition, low))
        if to_commit:
            try:
                self.consumer.commit(offsets=to_commit, asynchronous=False)
            except Exception as e:  # retried on the next tick
                _log.debug("offset commit failed: %s", e)
                return
            for tp in to_commit:
                self._committed[(tp.topic, tp.partition)] = tp.offset
