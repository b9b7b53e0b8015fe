"""The coordinator's Prometheus metrics (``inlet_coordinator_*``; one registry per coordinator).

- ``inlet_coordinator_commit_latency_seconds{table, action}``: histogram, from an instant's
  begin (``BeginInstant``, when the coordinator issued it) to its completion.
- ``inlet_coordinator_conflicts_total{table, mode, against}``: completions (or early
  ``MarkInflight`` checks) refused as conflicts; ``mode`` is the table's concurrency mode
  (``OPTIMISTIC``, or ``NON_BLOCKING`` for the operations NBCC still checks), ``against`` what the
  write collided with (``completed``: an instant completed after it began; ``pending_clustering``:
  a clustering plan that replaces its file groups).
- ``inlet_coordinator_outbox_pending_events{table}`` and
  ``inlet_coordinator_outbox_oldest_event_age_seconds{table}``: commit events recorded but not
  yet published to Kafka, and the age of the oldest; read from the database at every scrape,
  so they are right whichever replica publishes (and while no publisher runs at all).
- ``inlet_coordinator_janitor_rollbacks_total{table}``: instants the janitor rolled back (or
  whose rollback it finished) because their writer stopped sending heartbeats.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("inlet.coordinator.metrics")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
# against: what a refused write collided with
AGAINST_COMPLETED = "completed"
AGAINST_PENDING_CLUSTERING = "pending_clustering"

# (table id, events not yet published, age in seconds of the oldest of them; 0 when none)
OutboxBacklog = Sequence[tuple[str, int, float]]


class OutboxCollector(Collector):
    """The outbox backlog, read by ``source`` at scrape time (no sample when it fails: a scrape
    never fails for a database outage, which ``/readyz`` reports)."""

    def __init__(self, source: Callable[[], OutboxBacklog] | None) -> None:
        self.source = source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "inlet_coordinator_outbox_pending_events",
            "commit events recorded in the outbox and not yet published to Kafka, by table",
            labels=["table"],
        )
        age = GaugeMetricFamily(
            "inlet_coordinator_outbox_oldest_event_age_seconds",
            "age of the oldest commit event not yet published (0 when none waits), by table",
            labels=["table"],
        )
        rows: OutboxBacklog = ()
        if self.source is not None:
            try:
                rows = self.source()
            except Exception as e:
                log.warning("cannot read the outbox backlog for /metrics: %s", e)
        for table, count, oldest_s in rows:
            pending.add_metric([table], count)
            age.add_metric([table], oldest_s)
        yield pending
        yield age


class CoordinatorMetrics:
    """The coordinator's metrics; ``outbox`` reads the backlog (None: the families stay empty)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        outbox: Callable[[], OutboxBacklog] | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.commit_latency = Histogram(
            "inlet_coordinator_commit_latency_seconds",
            "from an instant's begin to its completion, by table and action",
            ["table", "action"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.conflicts = Counter(
            "inlet_coordinator_conflicts",
            "writes refused as conflicts, by table, concurrency mode and what they collided with",
            ["table", "mode", "against"],
            registry=r,
        )
        self.janitor_rollbacks = Counter(
            "inlet_coordinator_janitor_rollbacks",
            "instants rolled back by the janitor because their writer stopped sending heartbeats",
            ["table"],
            registry=r,
        )
        self.outbox = OutboxCollector(outbox)
        r.register(self.outbox)
