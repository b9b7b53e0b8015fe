"""The coordinator fences a writer that lost its Kafka partitions: a commit whose checkpoint would
move the table's back (offsets its successor already committed, or a partition's older position
carried over) is refused, on a non-blocking table (which has no writer lease) as on an OCC one, and
leaves the table as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from coordinator_helpers import rows

from inlet.core import HudiTable
from inlet.core.errors import CommitConflictError
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.writer import checkpoint as ckpt

TOPIC = "inlet.changes.app.public.orders"
NBCC_PROPS = {"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"}


def _extra(ranges: dict[int, tuple[int, int]], carried: dict[int, int] | None = None) -> dict[str, str]:
    positions = {p: end for p, (_, end) in ranges.items()} | (carried or {})
    return {
        ckpt.CHECKPOINT_KEY: ckpt.format_checkpoint(TOPIC, positions),
        ckpt.RANGES_KEY: ckpt.format_ranges(TOPIC, ranges),
    }


def _ids(path: Path) -> list[tuple[int, float]]:
    t = HudiTable.open(str(path)).read(columns=["id", "fare"], meta_columns=False).sort_by("id")
    return list(zip(t.column("id").to_pylist(), t.column("fare").to_pylist(), strict=True))


@pytest.mark.parametrize("mode", ["NON_BLOCKING", "OPTIMISTIC"])
def test_a_writer_that_lost_its_partitions_cannot_commit(
    mode: str, client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable]
) -> None:
    path = lake / mode.lower()
    HudiTable.create(
        str(path),
        name="orders",
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=1,
        extra_properties=NBCC_PROPS if mode == "NON_BLOCKING" else None,
    )
    client.register_table(mode.lower(), str(path), mode=mode)
    successor = open_table(client, mode.lower(), path, writer_id="successor")
    stale = open_table(client, mode.lower(), path, writer_id="stale")
    # the successor took partitions 0 and 1 over and committed offsets 0-8 of p0 and 0-6 of p1
    successor.write(rows([1, 2], "sf", 1), "upsert", extra_metadata=_extra({0: (0, 5), 1: (0, 6)}))
    successor.write(rows([3], "sf", 1), "upsert", extra_metadata=_extra({0: (5, 8)}, carried={1: 6}))
    before = _ids(path)

    # the stale writer's batch of offsets 0-5 of p0, read before it lost the partition
    with pytest.raises(CommitConflictError, match=rf"fenced: offsets 0-5 of {TOPIC}\[0\]"):
        stale.write(rows([1, 9], "sf", 2, fare=99.0), "upsert", extra_metadata=_extra({0: (0, 5)}))
    # new offsets of p0, but p1's old position carried over
    with pytest.raises(CommitConflictError, match=rf"checkpoint 2 of {TOPIC}\[1\] is behind the table's 6"):
        stale.write(
            rows([9], "sf", 2, fare=99.0), "upsert", extra_metadata=_extra({0: (8, 9)}, carried={1: 2})
        )
    assert _ids(path) == before, "a fenced write changed the table"
    assert not client.describe_table(mode.lower()).pending

    # the successor goes on; so does a deliberate reset (a recreated topic read from its start)
    successor.write(rows([4], "sf", 3), "upsert", extra_metadata=_extra({0: (8, 10)}, carried={1: 6}))
    reset = _extra({0: (0, 1)}, carried={1: 6}) | {ckpt.RESET_KEY: "true"}
    successor.write(rows([5], "sf", 3), "upsert", extra_metadata=reset)
    assert ckpt.table_checkpoint(HudiTable.open(str(path)).storage, TOPIC) == {0: 1, 1: 6}
    assert [i for i, _ in _ids(path)] == [1, 2, 3, 4, 5]


def test_commits_without_a_kafka_checkpoint_are_not_fenced(
    client: CoordinatorClient, lake: Path, open_table: Callable[..., HudiTable]
) -> None:
    path = lake / "plain"
    HudiTable.create(str(path), name="plain", record_key="id", ordering_field="ts")
    client.register_table("plain", str(path))
    table = open_table(client, "plain", path)
    table.write(rows([1], "sf", 1), "upsert", extra_metadata=_extra({0: (0, 5)}))
    table.write(pa.concat_tables([rows([2], "sf", 1)]), "upsert")  # e.g. a backfill
    assert [i for i, _ in _ids(path)] == [1, 2]
