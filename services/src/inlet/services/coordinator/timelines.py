"""The coordinator's timelines: each call sees the directory as it is, without re-reading it all.

Every snapshot lists the timeline directory again (file names only, no ``stat``), so an instant
written, completed or deleted by anyone (another coordinator replica, a client's rollback, a
tool on the lake) is seen by the next call. What is kept between calls is what cannot change:

- the instant each file name stands for (a pure function of the name in timeline layout 2);
- the parsed commit metadata of completed instants (``<t>_<completion>.<action>`` is written
  once; a removed file's entry is dropped, and instant times are never reused).

Layout 1 names carry no completion time (the file's write time stands in for it), so those
tables are listed in full every time (:meth:`Timeline.load`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from inlet.core.storage import Storage
from inlet.core.timeline.active import Timeline, latest_states
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant


@dataclass
class _Dir:
    lock: threading.Lock = field(default_factory=threading.Lock)
    names: frozenset[str] = frozenset()
    parsed: dict[str, Instant | None] = field(default_factory=dict)
    instants: list[Instant] = field(default_factory=list)
    metadata: dict[Instant, CommitMetadata] = field(default_factory=dict)


class Timelines:
    """Timeline snapshots of many tables, keyed by their timeline directory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: dict[str, _Dir] = {}

    def load(self, storage: Storage, layout_version: int, timeline_path: str) -> Timeline:
        tdir = Timeline.dir_of(layout_version, timeline_path)
        if layout_version < 2:
            return Timeline(storage, layout_version, tdir)
        key = storage.full(tdir)
        with self._lock:
            d = self._dirs.setdefault(key, _Dir())
        names = frozenset(storage.list_names(tdir))
        with d.lock:
            if names != d.names:
                parsed = {n: d.parsed[n] if n in d.parsed else Instant.parse_file_name(n) for n in names}
                present = {i for i in parsed.values() if i is not None}
                d.metadata = {i: md for i, md in d.metadata.items() if i in present}
                d.parsed, d.names = parsed, names
                d.instants = latest_states(present)
            return Timeline(storage, layout_version, tdir, d.instants, d.metadata)
