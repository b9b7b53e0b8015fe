"""The coordinator's kept timelines equal a full listing after every change of the directory."""

from __future__ import annotations

import random
from pathlib import Path

from inlet.core.storage import Storage
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Instant, State
from inlet.services.coordinator.timelines import Timelines


def test_kept_timeline_equals_a_full_listing_through_adds_and_removals(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    tdir = Timeline.dir_of(2, "timeline")
    storage.mkdirs(f"{tdir}/history")  # a directory in the timeline is no instant
    storage.write_bytes(f"{tdir}/.tmp-being-written", b"")
    kept = Timelines()
    rng = random.Random(7)
    times = [f"20260101000000{n:03d}" for n in range(40)]
    files: list[str] = []
    for step, t in enumerate(times):
        action = rng.choice(["commit", "deltacommit", "compaction", "clean", "rollback"])
        requested = Instant(t, action, State.REQUESTED)
        done = requested.with_state(State.COMPLETED, times[min(step + 1, len(times) - 1)])
        for instant in (requested, Instant(t, action, State.INFLIGHT), done)[: rng.randint(1, 3)]:
            files.append(f"{tdir}/{instant.file_name()}")
            storage.write_bytes(files[-1], b"")
            assert kept.load(storage, 2, "timeline").instants == Timeline.load(storage, 2).instants
        if step % 5 == 4:  # a rollback or a tool removes some instants' files
            for path in rng.sample(files, 3):
                storage.delete(path)
                files.remove(path)
            assert kept.load(storage, 2, "timeline").instants == Timeline.load(storage, 2).instants
    assert kept.load(storage, 2, "timeline").instants
