"""The source database's logical replication slots as metrics: how much WAL each holds back.

A slot keeps every WAL segment from its ``restart_lsn`` on, so a stalled or stopped pipeline makes
PostgreSQL's disk fill up, and past ``max_slot_wal_keep_size`` the server invalidates the slot
(the pipeline then has to load everything again). :class:`SlotMonitor` reads
``pg_replication_slots`` of the source database every ``interval_s`` on a connection of its own
and exports, per slot:

- ``inlet_cdc_slot_retained_wal_bytes``: ``pg_current_wal_lsn() - restart_lsn``, the WAL the slot holds;
- ``inlet_cdc_slot_lag_bytes``: ``pg_current_wal_lsn() - confirmed_flush_lsn``, what the consumer
  (Debezium) has not confirmed yet;
- ``inlet_cdc_slot_active``: 1 while a process streams from it;
- ``inlet_cdc_slot_wal_budget_bytes``: ``safe_wal_size``, the WAL still allowed before the server
  invalidates the slot (only where ``max_slot_wal_keep_size`` is set).

A slot past ``warn_fraction`` of its budget, or whose ``wal_status`` is ``unreserved`` or ``lost``,
is logged as a warning (once per state change).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import psycopg
from prometheus_client import CollectorRegistry, Gauge

from inlet.services.logs import log_event

log = logging.getLogger("inlet.cdc.slots")

QUERY = """
SELECT slot_name, active,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
       wal_status, safe_wal_size,
       pg_size_bytes(NULLIF(current_setting('max_slot_wal_keep_size'), '-1'))
FROM pg_replication_slots
WHERE slot_type = 'logical' AND database = current_database()
ORDER BY slot_name
"""


@dataclass(frozen=True)
class SlotState:
    slot: str
    active: bool
    retained_wal_bytes: int | None
    lag_bytes: int | None
    wal_status: str | None
    budget_bytes: int | None  # safe_wal_size: None without max_slot_wal_keep_size
    max_keep_bytes: int | None

    def warning(self, warn_fraction: float) -> str | None:
        """Why the slot is at risk, or None."""
        if self.wal_status in ("unreserved", "lost"):
            return f"slot {self.slot} is {self.wal_status}: the server may drop (or has dropped) WAL it needs"
        if self.budget_bytes is not None and self.max_keep_bytes:
            used = 1 - self.budget_bytes / self.max_keep_bytes
            if used >= warn_fraction:
                return (
                    f"slot {self.slot} holds {used:.0%} of max_slot_wal_keep_size "
                    f"({self.budget_bytes} bytes left before the server invalidates it)"
                )
        return None


def read_slots(url: str) -> list[SlotState]:
    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(QUERY).fetchall()
    return [SlotState(*row) for row in rows]


class SlotMonitor:
    """Polls :func:`read_slots` in a daemon thread and keeps the gauges in ``registry`` current."""

    def __init__(
        self,
        url: str,
        registry: CollectorRegistry,
        interval_s: float = 15.0,
        warn_fraction: float = 0.8,
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.warn_fraction = warn_fraction
        labels = ["slot"]
        self.retained = Gauge(
            "inlet_cdc_slot_retained_wal_bytes", "WAL the slot holds back (bytes)", labels, registry=registry
        )
        self.lag = Gauge(
            "inlet_cdc_slot_lag_bytes",
            "WAL not confirmed by the slot's consumer (bytes)",
            labels,
            registry=registry,
        )
        self.active = Gauge(
            "inlet_cdc_slot_active", "1 while a process streams from the slot", labels, registry=registry
        )
        self.budget = Gauge(
            "inlet_cdc_slot_wal_budget_bytes",
            "WAL the slot may still hold before the server invalidates it (safe_wal_size)",
            labels,
            registry=registry,
        )
        self._warned: dict[str, str | None] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> list[SlotState]:
        """Read the slots once and update the gauges (a dropped slot's series go)."""
        slots = read_slots(self.url)
        for gauge in (self.retained, self.lag, self.active, self.budget):
            gauge.clear()
        for s in slots:
            if s.retained_wal_bytes is not None:
                self.retained.labels(s.slot).set(s.retained_wal_bytes)
            if s.lag_bytes is not None:
                self.lag.labels(s.slot).set(s.lag_bytes)
            self.active.labels(s.slot).set(1 if s.active else 0)
            if s.budget_bytes is not None:
                self.budget.labels(s.slot).set(s.budget_bytes)
            warning = s.warning(self.warn_fraction)
            if warning != self._warned.get(s.slot):
                if warning is not None:
                    log_event(
                        log, logging.WARNING, warning, slot=s.slot, retained_wal_bytes=s.retained_wal_bytes
                    )
                self._warned[s.slot] = warning
        return slots

    def start(self) -> SlotMonitor:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll()
                except (psycopg.Error, OSError) as e:
                    log.debug("reading the replication slots failed: %s", e)
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=loop, name="inlet-slot-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
