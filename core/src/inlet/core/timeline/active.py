"""The active timeline: the instants under ``.hoodie/timeline/`` (layout 2) or ``.hoodie/`` (layout 1)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator

from inlet.core.errors import InstantNotFoundError
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State, normalize_instant_time


def latest_states(instants: Iterable[Instant]) -> list[Instant]:
    """Each instant time's most advanced state, ordered by requested time.

    Instant times are unique per table: a compaction is "compaction" while pending and "commit"
    once completed. A savepoint is the exception: it takes the time of the commit it protects
    (Hudi's SavepointActionExecutor), so it is kept beside that commit.
    """
    latest: dict[tuple[str, bool], Instant] = {}
    for inst in instants:
        key = (inst.time, inst.action == Action.SAVEPOINT)
        prev = latest.get(key)
        if prev is None or _STATE_ORDER[inst.state] > _STATE_ORDER[prev.state]:
            latest[key] = inst
    return sorted(latest.values(), key=lambda i: (i.time, i.action))


_STATE_ORDER = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


class Timeline:
    """An immutable snapshot of a table's active timeline (reload to see new instants).

    ``instants`` and ``completed_metadata`` let a caller that keeps timelines (the coordinator)
    hand in the instants it listed and a cache of completed instants' metadata shared between
    its snapshots (a completed instant's file never changes).
    """

    def __init__(
        self,
        storage: Storage,
        layout_version: int,
        timeline_dir: str,
        instants: list[Instant] | None = None,
        completed_metadata: dict[Instant, CommitMetadata] | None = None,
    ) -> None:
        self.storage = storage
        self.layout_version = layout_version
        self.dir = timeline_dir
        self._instants = instants
        self._metadata_cache: dict[Instant, CommitMetadata] = {}
        self._completed_metadata = completed_metadata if completed_metadata is not None else {}

    @staticmethod
    def dir_of(layout_version: int, timeline_path: str = "timeline") -> str:
        return posixpath.join(".hoodie", timeline_path) if layout_version >= 2 else ".hoodie"

    @classmethod
    def load(cls, storage: Storage, layout_version: int, timeline_path: str = "timeline") -> Timeline:
        return cls(storage, layout_version, cls.dir_of(layout_version, timeline_path))

    @property
    def instants(self) -> list[Instant]:
        """Every instant in its latest state, ordered by requested time (listed once)."""
        if self._instants is None:
            parsed = (
                Instant.parse_file_name(posixpath.basename(info.path), info.mtime_ms)
                for info in self.storage.list_files(self.dir)
            )
            self._instants = latest_states(i for i in parsed if i is not None)
        return self._instants

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def completed(self, actions: Iterable[str] | None = None) -> list[Instant]:
        acts = set(actions) if actions is not None else None
        return [i for i in self.instants if i.is_completed and (acts is None or i.action in acts)]

    def completed_writes(self) -> list[Instant]:
        """Completed commits, deltacommits and replacecommits, by requested time."""
        return self.completed(Action.WRITE_ACTIONS)

    def pending(self, actions: Iterable[str] | None = None) -> list[Instant]:
        acts = set(actions) if actions is not None else None
        return [i for i in self.instants if not i.is_completed and (acts is None or i.action in acts)]

    def latest_completed_write(self) -> Instant | None:
        writes = self.completed_writes()
        return writes[-1] if writes else None

    def max_instant_time(self) -> str | None:
        """Largest requested or completion time on the timeline (instant times must exceed it)."""
        times = [i.time for i in self.instants] + [
            i.completion_time for i in self.instants if i.completion_time
        ]
        return max(times) if times else None

    def find(self, time: str) -> Instant:
        t = normalize_instant_time(time)
        for inst in self.instants:
            if inst.time == t:
                return inst
        raise InstantNotFoundError(f"instant {time} is not on the timeline")

    def resolve_as_of(self, as_of: str) -> str:
        """Normalise a user's as-of time; readers see writes requested at or before it."""
        return normalize_instant_time(as_of)

    def last_written_ms(self, instant_time: str) -> float | None:
        """When the instant's timeline files were last written (its writer's last sign of life,
        for instants whose heartbeat file is missing); lists the folder again."""
        times = [
            float(f.mtime_ms)
            for f in self.storage.list_files(self.dir)
            if f.mtime_ms is not None and posixpath.basename(f.path).startswith(instant_time)
        ]
        return max(times) if times else None

    def path_of(self, instant: Instant) -> str:
        return posixpath.join(self.dir, instant.file_name(self.layout_version))

    def read_bytes(self, instant: Instant) -> bytes:
        return self.storage.read_bytes(self.path_of(instant))

    def commit_metadata(self, instant: Instant) -> CommitMetadata:
        cache = self._completed_metadata if instant.is_completed else self._metadata_cache
        cached = cache.get(instant)
        if cached is None:
            cached = CommitMetadata.from_bytes(self.read_bytes(instant), f"instant {instant.file_name()}")
            cache[instant] = cached
        return cached

    def remember_metadata(self, instant: Instant, metadata: CommitMetadata) -> None:
        """Keep the metadata of a completed instant its caller just wrote (``metadata`` is what the
        file holds), for the snapshots that share this one's cache."""
        if instant.is_completed:
            self._completed_metadata[instant] = metadata

    def latest_schema(self, as_of: str | None = None) -> str | None:
        """The writer schema (Avro JSON) of the latest completed write that recorded one."""
        for inst in reversed(self.completed_writes()):
            if as_of is not None and inst.time > as_of:
                continue
            md = self.commit_metadata(inst)
            if md.schema:
                return md.schema
        return None
