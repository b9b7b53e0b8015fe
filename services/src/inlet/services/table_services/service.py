"""Follow ``inlet.commits`` and run the due table services on each table that changed.

The service consumes the coordinator's ``CommitEvent``s (consumer group ``inlet-table-services``;
see :mod:`inlet.services.commit_events`). Once a table's burst of commits has settled
(``coalesce_s``), it takes the table's ``services`` lock at the coordinator (a named lock lease, renewed while it
works), so two instances never work on one table (the writers' lock, the table's "" lock, is not
touched); then it opens the table with the coordinator as
its commit protocol and runs the services (:mod:`inlet.services.table_services.actions`). Every
instant it completes is begun, heartbeated and completed by the coordinator, which publishes its
commit event like any other.

A table another instance holds, or whose run failed, stays pending and is retried with backoff
(``retry_initial_s`` doubling to ``retry_max_s``); its events are not acknowledged to Kafka before
a run handled them, so a restart runs them again (the services are idempotent: a run with nothing
due does nothing). Commit events of the service's own instants bring the table back once: the run
they cause finds nothing due.

With ``engine="spark"`` the compaction plans execute as Spark jobs of one session the service
starts at its first compaction and keeps until it stops (``spark_master``: ``local[N]`` or a
cluster's ``spark://HOST:PORT``; ``spark_conf`` on top of the service defaults); the service is the
job's driver, so scheduling, heartbeats, the commit and the rollback of a failed run go through the
coordinator as with the local engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inlet.core import HudiTable
from inlet.services.commit_events import DEFAULT_TOPIC, CommitEventFollower, PendingTable
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol, default_writer_id
from inlet.services.coordinator_client.locks import hold_lease
from inlet.services.logs import log_event
from inlet.services.table_services.actions import (
    ALL_SERVICES,
    LOCAL,
    STALE_PLAN_S,
    Engine,
    ServiceRun,
    run_services,
)

if TYPE_CHECKING:
    from inlet.core import CommitResult

log = logging.getLogger(__name__)

DEFAULT_GROUP = "inlet-table-services"
LOCK_NAME = "services"


@dataclass
class ServiceConfig:
    bootstrap: str
    coordinator: str
    topic: str = DEFAULT_TOPIC
    group: str = DEFAULT_GROUP
    services: tuple[str, ...] = ALL_SERVICES
    options: dict[str, str] = field(default_factory=dict)  # Hudi options for every table
    coalesce_s: float = 2.0
    retry_initial_s: float = 1.0
    retry_max_s: float = 30.0
    lease_ms: int = 30_000
    stale_plan_s: float = STALE_PLAN_S  # a plan requested this long ago and not started is abandoned
    coordinator_token: str | None = None
    coordinator_ca: bytes | None = None
    coordinator_tls: bool = False
    kafka: dict[str, Any] = field(default_factory=dict)
    engine: str = "local"  # where compaction plans execute: local | spark
    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events = Counter("inlet_table_services_events_total", "CommitEvents consumed", registry=r)
        self.bad_events = Counter(
            "inlet_table_services_bad_events_total", "Undecodable commit events skipped", registry=r
        )
        self.runs = Counter(
            "inlet_table_services_runs_total", "Runs on a table, by result", ["result"], registry=r
        )
        self.instants = Counter(
            "inlet_table_services_instants_total", "Instants completed, by service", ["service"], registry=r
        )
        self.run_seconds = Histogram(
            "inlet_table_services_run_seconds", "Duration of one run on a table", registry=r
        )
        self.pending = Gauge(
            "inlet_table_services_pending_tables", "Tables with commits not handled yet", registry=r
        )


class TableServicesService:
    """Consume ``inlet.commits`` and run the due table services on every changed table."""

    def __init__(self, config: ServiceConfig, metrics: Metrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.owner = default_writer_id()
        self.events = CommitEventFollower(
            config.bootstrap,
            config.group,
            config.topic,
            config.kafka,
            config.coalesce_s,
            on_event=self.metrics.events.inc,
            on_bad_event=self.metrics.bad_events.inc,
        )
        self.client: CoordinatorClient | None = None
        self.last_error: str | None = None
        self.last_runs: dict[str, ServiceRun] = {}
        # every instant each service completed, per table, since the start
        self.completed: dict[str, dict[str, list[str]]] = {}
        self.ran = threading.Condition()
        self.run_count = 0
        self._coordinator_ok = True
        self._spark: Any = None  # the Spark session of engine "spark", started at the first compaction
        self.engine = Engine("spark", self._compact_on_spark) if config.engine == "spark" else LOCAL

    def _spark_session(self) -> Any:
        if self._spark is None:
            from inlet.services.writer.spark_load import spark_session

            c = self.config
            self._spark = spark_session(c.spark_master, c.spark_conf, "inlet table services")
            log_event(log, logging.INFO, "spark session started", master=self._spark.sparkContext.master)
        return self._spark

    def _compact_on_spark(
        self, table: HudiTable, instant: str, options: dict[str, str]
    ) -> CommitResult | None:
        import inlet.core.spark as inlet_spark

        return inlet_spark.run_compaction(
            self._spark_session(), table.base_path, instant, options, commit_protocol=table.commit_protocol
        )

    def health(self) -> tuple[bool, Mapping[str, Any]]:
        return self._coordinator_ok, {
            "pending_tables": len(self.events.pending),
            "coordinator": self.config.coordinator,
            "last_error": self.last_error,
        }

    def run(self, stop: threading.Event | Any) -> int:
        c = self.config
        self.client = CoordinatorClient(
            c.coordinator,
            root_certificates=c.coordinator_ca,
            token=c.coordinator_token,
            tls=c.coordinator_tls,
        )
        self.events.open()
        try:
            while not stop.is_set():
                self.events.poll()
                for p in self.events.due():
                    if stop.is_set():
                        break
                    self._run_table(p)
                self.metrics.pending.set(len(self.events.pending))
                self.events.commit_offsets()
        finally:
            self.events.close()
            self.client.close()
            if self._spark is not None:
                self._spark.stop()
                self._spark = None
        return 0

    def _run_table(self, p: PendingTable) -> None:
        assert self.client is not None
        started = time.monotonic()
        try:
            with hold_lease(self.client, p.table_id, LOCK_NAME, self.owner, self.config.lease_ms) as lease:
                protocol = GrpcCommitProtocol(self.client, p.table_id, HudiTable.open(p.base_path).storage)
                try:
                    table = HudiTable.open(p.base_path, commit_protocol=protocol)
                    result = run_services(
                        table,
                        p.table_id,
                        self.config.services,
                        self.config.options,
                        self.config.stale_plan_s,
                        self.engine,
                    )
                finally:
                    protocol.close()
                if lease.lost.is_set():
                    raise RuntimeError("the services lock was lost during the run")
        except Exception as e:  # held by another instance, coordinator down, a failed service
            self._coordinator_ok = "UNAVAILABLE" not in str(e)
            delay = min(self.config.retry_initial_s * 2**p.failures, self.config.retry_max_s)
            self.events.retry_later(p, delay)
            self.last_error = f"{p.table_id}: {type(e).__name__}: {e}"
            self.metrics.runs.labels("retry").inc()
            log_event(
                log,
                logging.WARNING,
                "table services will retry",
                table=p.table_id,
                retry_in_s=round(delay, 1),
                error=f"{type(e).__name__}: {e}",
            )
            return
        self._coordinator_ok = True
        elapsed = time.monotonic() - started
        self.metrics.runs.labels("ok").inc()
        self.metrics.run_seconds.observe(elapsed)
        for service, instants in result.completed.items():
            self.metrics.instants.labels(service).inc(len(instants))
        log_event(
            log,
            logging.INFO,
            "table services ran",
            table=p.table_id,
            completed={k: v for k, v in result.completed.items()},
            skipped=result.skipped,
            seconds=round(elapsed, 3),
        )
        self.events.done(p)
        self.last_runs[p.table_id] = result
        done = self.completed.setdefault(p.table_id, {})
        for service, instants in result.completed.items():
            done.setdefault(service, []).extend(instants)
        with self.ran:
            self.run_count += 1
            self.ran.notify_all()
