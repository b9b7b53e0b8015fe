"""Progress of a long job, logged at INFO at most every few seconds: done/total units, rows, rate and ETA.

One helper for every long job (the initial load's tables, compaction's file groups, clustering's groups,
clean's files, archive's instants)::

    progress = Progress("compaction 20250101000000000", "file groups", total=len(operations))
    for op in operations:
        ...
        progress.advance(rows=stat.num_writes)
    progress.finish()

A line is logged (logger ``inlet.progress``, INFO) once ``interval_s`` has passed since the start or the
previous line, never more often, so a job shorter than ``interval_s`` logs nothing; :meth:`finish` logs a
closing line only for a job that logged progress. The line reads like ``compaction 2025…: 3/12 file
groups, 1.2M rows, 2.4k rows/s, ETA 40 s``; its numbers also go as structured fields (the ``inlet_fields``
record attribute that ``inlet.services.logs`` renders as JSON keys or ``key=value``).

The ``inlet`` CLI shows ``inlet.progress`` at its default log level (WARNING); ``--log-level ERROR`` hides it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

LOGGER = "inlet.progress"
FIELDS_ATTR = "inlet_fields"  # the record attribute inlet.services.logs reads structured fields from
DEFAULT_INTERVAL_S = 5.0

_log = logging.getLogger(LOGGER)


def human(n: float) -> str:
    """``1234567`` -> ``1.2M``; ``950`` -> ``950``."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= limit:
            return f"{n / limit:.1f}{suffix}"
    return f"{n:.0f}"


class Throttle:
    """Whether a line is due: at most one per ``interval_s`` for each key (thread-safe). A key seen for the
    first time is due at once, unless :meth:`hold` started its interval (a job's first line)."""

    def __init__(self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = DEFAULT_INTERVAL_S if interval_s is None else interval_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def hold(self, key: str = "") -> None:
        """Start ``key``'s interval now: its first line is due only ``interval_s`` from now."""
        with self._lock:
            self._last[key] = self._clock()

    def due(self, key: str = "", force: bool = False) -> bool:
        with self._lock:
            now = self._clock()
            last = self._last.get(key)
            if force or last is None or now - last >= self.interval_s:
                self._last[key] = now
                return True
            return False


class Progress:
    """Thread-safe counters of one job, logged at most every ``interval_s`` (see the module doc)."""

    def __init__(
        self,
        job: str,
        unit: str,
        total: int | None = None,
        *,
        interval_s: float | None = None,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        **fields: Any,
    ) -> None:
        self.job = job
        self.unit = unit
        self.total = total
        self._throttle = Throttle(interval_s, clock)
        self.interval_s = self._throttle.interval_s
        self.done = 0
        self.rows = 0
        self.lines = 0  # progress lines logged so far
        self._fields = fields
        self._logger = logger or _log
        self._clock = clock
        self.started = clock()
        self._throttle.hold()
        self._lock = threading.Lock()

    def advance(self, units: int = 1, rows: int = 0) -> None:
        """Count ``units`` done (and ``rows`` processed); log a line if one is due."""
        with self._lock:
            self.done += units
            self.rows += rows
        if self._throttle.due():
            self.log()

    def add_rows(self, rows: int) -> None:
        self.advance(0, rows)

    def fields(self) -> dict[str, Any]:
        """done, total, rows, rows_per_s, elapsed_s, eta_s (None while nothing is done or no total)."""
        elapsed = max(self._clock() - self.started, 1e-9)
        eta = None
        if self.total and self.done:
            fraction = min(self.done / self.total, 1.0)
            eta = round(elapsed * (1 - fraction) / fraction, 1)
        return {
            **self._fields,
            "done": self.done,
            "total": self.total,
            "rows": self.rows,
            "rows_per_s": round(self.rows / elapsed),
            "elapsed_s": round(elapsed, 1),
            "eta_s": eta,
        }

    def message(self, f: dict[str, Any] | None = None) -> str:
        f = f or self.fields()
        count = f"{f['done']}/{f['total']}" if f["total"] is not None else str(f["done"])
        parts = [f"{count} {self.unit}"]
        if f["rows"]:
            parts.append(f"{human(f['rows'])} rows, {human(f['rows_per_s'])} rows/s")
        if f["eta_s"] is not None and f["done"] != f["total"]:
            parts.append(f"ETA {f['eta_s']:.0f} s")
        return f"{self.job}: {', '.join(parts)}"

    def log(self, suffix: str = "") -> None:
        f = self.fields()
        self.lines += 1
        self._logger.info("%s%s", self.message(f), suffix, extra={FIELDS_ATTR: {"job": self.job, **f}})

    def finish(self) -> None:
        """A closing line, for a job that logged progress (a short job stays silent)."""
        if self.lines:
            self.log(f" (done in {self._clock() - self.started:.0f} s)")
