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
from inlet.services.catalog_sync.transport import MetastoreSecurity
from inlet.services.commit_events import DEFAULT_TOPIC, CommitEventFollower, PendingTable

_log = logging.getLogger(__name__)

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
    metastore_security: MetastoreSecurity = field(default_factory=MetastoreSecurity)


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
        self.events = CommitEventFollower(
            config.bootstrap,
            config.group,
            config.topic,
            config.kafka,
            config.coalesce_s,
            on_event=self.metrics.events.inc,
            on_bad_event=self.metrics.bad_events.inc,
        )
        self.client = MetastoreClient(config.metastore, config.metastore_timeout_s, config.metastore_security)
        self.last_error: str | None = None
        self.last_reports: dict[str, SyncReport] = {}
        self.synced = threading.Condition()
        self.sync_count = 0
        self._retry_delay = config.retry_initial_s
        self._metastore_ok = True

    @property
    def pending(self) -> dict[str, PendingTable]:
        return self.events.pending

    # -- health -----------------------------------------------------------------------------------

    def health(self) -> tuple[bool, Mapping[str, Any]]:
        return self._metastore_ok, {
            "pending_tables": len(self.pending),
            "metastore": self.config.metastore,
            "last_error": self.last_error,
        }

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, stop: threading.Event | Any) -> int:
        self.events.open()
        try:
            while not stop.is_set():
                self.events.poll()
                self.metrics.pending.set(len(self.pending))
                self._tick()
        finally:
            self.close()
        return 0

    def close(self) -> None:
        self.events.close()
        self.client.close()

    def _tick(self) -> None:
        for p in self.events.due():
            self._sync(p)
        self.events.commit_offsets()

    def _database_for(self, table_id: str) -> str | None:
        if self.config.database:
            return self.config.database
        return database_of(table_id)

    def _sync(self, p: PendingTable) -> None:
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
            self.events.retry_later(p, self._retry_delay)
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

    def _done(self, p: PendingTable) -> None:
        self.events.done(p)
        self.metrics.pending.set(len(self.pending))
        with self.synced:
            self.sync_count += 1
            self.synced.notify_all()
