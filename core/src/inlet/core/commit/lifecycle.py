"""One instant's lifecycle, the same for every action: begin -> heartbeat -> inflight -> execute ->
remove stray files -> complete, or roll back on failure.

Apache Hudi's write client runs every action through the same steps (``startCommit``, the
heartbeat client, ``transitionRequestedToInflight``, the markers' reconciliation before
``commit``, ``rollback`` of a failed instant). :class:`PendingInstant` holds one instant between
its steps, so an engine whose steps are separate callbacks (the Spark data source's driver
``begin`` / ``commit`` / ``abort``) drives it as well as one that runs them in one function:

- :meth:`PendingInstant.begin` issues the instant (``<t>.<action>.requested``) and starts its
  heartbeat; :meth:`PendingInstant.resume` takes over an instant requested earlier (a
  compaction plan);
- :meth:`set_inflight` writes ``<t>.<action>.inflight`` (the planned workload);
- :meth:`remove_stray_files` deletes what the instant's markers name but its write stats do
  not (failed or duplicate task attempts) before anything becomes visible;
- :meth:`complete` / :meth:`finish` complete it through the commit protocol (conflict check,
  atomic completed file), then stop the heartbeat and drop the markers;
- :meth:`abort` (or leaving :meth:`guard` by an exception) stops the heartbeat, rolls the
  instant back with the caller's rollback (the rollback action lives above this layer), and
  deletes the heartbeat; if the rollback fails the pending instant stays for the next writer,
  which rolls it back once the heartbeat has expired.

Options must be checked before :meth:`begin`: nothing may fail between ``begin`` and the guard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from inlet.core.commit import heartbeat, markers
from inlet.core.commit.protocol import CommitProtocol
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant

log = logging.getLogger(__name__)

RollBack = Callable[[Instant], object]


class PendingInstant:
    """An instant between ``begin`` and its completion or rollback."""

    def __init__(
        self,
        storage: Storage,
        protocol: CommitProtocol,
        instant: Instant,
        beat: heartbeat.Heartbeat | None = None,
    ) -> None:
        self.storage = storage
        self.protocol = protocol
        self.instant = instant
        self._beat = beat

    @classmethod
    def begin(
        cls,
        storage: Storage,
        protocol: CommitProtocol,
        action: str,
        heartbeat_interval_ms: int,
        requested: bytes = b"",
    ) -> PendingInstant:
        """Issue a new instant of ``action`` and start its heartbeat."""
        instant = protocol.begin(action, requested)
        return cls(
            storage,
            protocol,
            instant,
            heartbeat.Heartbeat(storage, instant.time, heartbeat_interval_ms).start(),
        )

    @classmethod
    def resume(
        cls, storage: Storage, protocol: CommitProtocol, instant: Instant, heartbeat_interval_ms: int
    ) -> PendingInstant:
        """Take over ``instant``, requested earlier (a compaction plan), and start its heartbeat."""
        return cls(
            storage,
            protocol,
            instant,
            heartbeat.Heartbeat(storage, instant.time, heartbeat_interval_ms).start(),
        )

    @property
    def time(self) -> str:
        return self.instant.time

    def set_inflight(self, content: bytes = b"") -> Instant:
        self.instant = self.protocol.set_inflight(self.instant, content)
        return self.instant

    def remove_stray_files(self, written: Iterable[str]) -> list[str]:
        """Delete the data files the instant's markers name but ``written`` (its write stats) does
        not: files of failed or duplicate (speculative) task attempts."""
        keep = set(written)
        stray = [f for f in markers.marked_files(self.storage, self.time) if f not in keep]
        for f in stray:
            self.storage.delete(f)
        if stray:
            log.info("instant %s: deleted %d file(s) of failed or duplicate attempts", self.time, len(stray))
        return stray

    def complete(self, metadata: CommitMetadata) -> Instant:
        """Complete a write with its commit metadata (the protocol checks conflicts)."""
        return self._done(self.protocol.complete(self.instant, metadata))

    def finish(self, content: bytes) -> Instant:
        """Complete a table service with its own completed-file content (not conflict-checked)."""
        return self._done(self.protocol.finish(self.instant, content))

    def _done(self, done: Instant) -> Instant:
        self.instant = done
        if self._beat is not None:
            self._beat.stop()
        else:
            heartbeat.delete(self.storage, self.time)
        markers.delete_markers(self.storage, self.time)
        return done

    def abort(self, roll_back: RollBack) -> None:
        """Roll the instant back after a failure (the heartbeat goes last, so no other writer
        takes the instant for abandoned while it is rolled back)."""
        if self._beat is not None:
            self._beat.stop(delete=False)
        try:
            roll_back(self.instant)
        except Exception:  # the pending instant stays; the next writer rolls it back
            log.exception("rollback of failed instant %s failed", self.time)
        heartbeat.delete(self.storage, self.time)

    @contextmanager
    def guard(self, roll_back: RollBack) -> Iterator[PendingInstant]:
        """Run the steps inside; any exception (a crash point, KeyboardInterrupt too) aborts the
        instant with ``roll_back`` and propagates."""
        try:
            yield self
        except BaseException:
            self.abort(roll_back)
            raise
