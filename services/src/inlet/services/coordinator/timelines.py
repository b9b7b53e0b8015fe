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
    parsed: dict[str, Instant] = field(default_factory=dict)  # timeline file name -> instant
    instants: list[Instant] = field(default_factory=list)
    metadata: dict[Instant, CommitMetadata] = field(default_factory=dict)

    def update(self, names: frozenset[str]) -> None:
        """Take the listing ``names``: files only added (the usual case) are parsed and merged;
        a file removed rebuilds the instants from the names left."""
        added = names - self.names
        removed = self.names - names
        if removed:
            for name in removed:
                self.parsed.pop(name, None)
            live = set(self.parsed.values())
            self.metadata = {i: md for i, md in self.metadata.items() if i in live}
        new = [(n, Instant.parse_file_name(n)) for n in added]
        self.parsed.update((n, i) for n, i in new if i is not None)
        self.names = names
        if removed:
            self.instants = latest_states(self.parsed.values())
        elif any(i is not None for _, i in new):
            self.instants = latest_states([*self.instants, *(i for _, i in new if i is not None)])


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
                d.update(names)
            return Timeline(storage, layout_version, tdir, d.instants, d.metadata)
