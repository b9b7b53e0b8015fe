"""The janitor: a background thread that rolls back instants whose writer stopped sending heartbeats.

Every ``interval_ms`` it asks the database for pending writes (and rollbacks) whose last
heartbeat is older than their table's timeout, and rolls each back with core's rollback (plan,
files deleted, rollback instant) committed through the coordinator itself
(:meth:`Coordinator.expire`, which re-checks the heartbeat under the table lock: an instant whose
owner is alive is never touched). A rollback left half-done by a dead writer is finished. Expired
table-lock leases are released, and records of instants finished more than a week ago forgotten.
"""

from __future__ import annotations

import logging
import threading
import time

from inlet.services.coordinator.commits import Coordinator
from inlet.services.coordinator.errors import CoordinatorError
from inlet.services.runtime import Liveness

log = logging.getLogger("inlet.coordinator.janitor")

# completed and rolled-back instants are remembered this long (idempotent retries within it)
DEFAULT_RETENTION_MS = 7 * 24 * 3_600_000
PRUNE_EVERY_S = 3600.0
MIN_SILENCE_S = 60.0  # /livez: the loop may be silent this long, or ten intervals if longer


class Janitor:
    def __init__(
        self, coordinator: Coordinator, interval_ms: int, retention_ms: int = DEFAULT_RETENTION_MS
    ) -> None:
        self.coordinator = coordinator
        self.interval_ms = interval_ms
        self.retention_ms = retention_ms
        self._last_prune = float("-inf")
        # /livez: the loop turns (a pass stuck on a hung call stops it, and a restart cures that)
        self.liveness = Liveness(max(MIN_SILENCE_S, 10 * interval_ms / 1000))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> list[str]:
        """One pass; returns the rollback instant times it wrote or finished."""
        done: list[str] = []
        try:
            expired = self.coordinator.expired_instants()
        except Exception:
            log.exception("janitor: cannot list expired instants")
            return done
        for table_id, t in expired:
            if self._stop.is_set():
                break
            try:
                rb = self.coordinator.expire(table_id, t)
            except CoordinatorError as e:  # e.g. another replica's janitor got there first
                log.info("janitor: not rolling back %s %s: %s", table_id, t, e.message)
                continue
            except Exception as e:  # one table's trouble must not stop the others
                log.warning("janitor: rolling back %s %s failed: %s", table_id, t, e, exc_info=True)
                continue
            if rb is not None:
                self.coordinator.metrics.janitor_rollbacks.labels(table_id).inc()
                done.append(rb)
        try:
            for table_id, owner in self.coordinator.leases.release_expired():
                log.info("janitor: released the expired lock of %s held by %s", table_id, owner)
        except Exception:
            log.exception("janitor: cannot release expired leases")
        now = time.monotonic()
        if now - self._last_prune >= PRUNE_EVERY_S:
            self._last_prune = now
            try:
                pruned = self.coordinator.prune(self.retention_ms)
                if pruned:
                    log.info(
                        "janitor: forgot %d instant record(s) older than %d ms", pruned, self.retention_ms
                    )
            except Exception:
                log.exception("janitor: cannot prune old instant records")
        return done

    def _run(self) -> None:
        self.liveness.beat()
        while not self._stop.wait(self.interval_ms / 1000):
            self.run_once()
            self.liveness.beat()

    def start(self) -> Janitor:
        self._thread = threading.Thread(target=self._run, name="inlet-coordinator-janitor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
