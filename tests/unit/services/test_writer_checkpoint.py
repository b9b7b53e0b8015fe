"""Finding a worker's Kafka checkpoint in a table's commits, also once those commits are archived."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from inlet.core import HudiTable
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, format_checkpoint, table_checkpoint

TOPIC = "inlet.changes.public.orders"
KEEP = {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4", "hoodie.clean.commits.retained": "2"}


def _commit(t: HudiTable, i: int, offsets: dict[int, int]) -> None:
    t.write(
        pa.table({"id": [i % 3], "v": [i]}),
        "upsert",
        extra_metadata={CHECKPOINT_KEY: format_checkpoint(TOPIC, offsets)},
    )


def test_a_partition_whose_last_commit_was_archived_resumes_from_the_archive(tmp_path: Path) -> None:
    """Two workers share a table (NBCC style): worker A checkpoints partition 0 once, long ago;
    worker B keeps committing partition 1. After archive moved A's commit out of the active
    timeline, partition 0 must still resume at A's offset, not from the beginning."""
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id")
    _commit(t, 0, {0: 17})
    for i in range(1, 12):
        _commit(t, i, {1: 100 + i})
    t.clean(KEEP)
    archived = t.archive(KEEP).archived
    first = t.archived_timeline().instants[0].time
    assert first in archived, "the test needs partition 0's commit archived"
    assert all(i.time != first for i in t.timeline.instants)
    assert table_checkpoint(t.storage, TOPIC, partitions=[0, 1]) == {0: 17, 1: 111}
    assert table_checkpoint(t.storage, TOPIC) == {0: 17, 1: 111}


def test_the_newest_checkpoint_of_a_partition_wins_over_archived_ones(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id")
    for i in range(12):
        _commit(t, i, {0: 10 + i})
    t.clean(KEEP)
    assert t.archive(KEEP).archived
    assert table_checkpoint(t.storage, TOPIC, partitions=[0]) == {0: 21}
    assert table_checkpoint(t.storage, "inlet.changes.other") == {}


def test_commits_without_a_checkpoint_are_skipped(tmp_path: Path) -> None:
    """A repair (``inlet verify --repair``) or another writer commits no Kafka checkpoint: the
    worker resumes each partition from the newest commit that has one, not from the start."""
    t = HudiTable.create(str(tmp_path / "t"), "t", record_key="id")
    _commit(t, 0, {0: 5, 1: 9})
    t.write(pa.table({"id": [1], "v": [-1]}), "upsert", extra_metadata={"inlet.verify.repair": "{}"})
    t.write(pa.table({"id": [2], "v": [-2]}), "upsert")
    assert table_checkpoint(t.storage, TOPIC) == {0: 5, 1: 9}
    assert table_checkpoint(t.storage, TOPIC, partitions=[0])[0] == 5
