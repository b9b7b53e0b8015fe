"""The driver's plan of a Spark write, from metadata and counts only: which file group each (partition, bucket) or tagged key goes to, which small file groups take inserts and how many new ones are needed (the core's sizing rules), and the Merge-on-Read delete checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inlet.core.config import (
    TableType,
    WriteOperation,
)
from inlet.core.errors import (
    InvalidInputError,
)
from inlet.core.file_group.view import BaseFile, FileSystemView
from inlet.core.table.facade import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.write.buckets import BucketLayout
from inlet.core.write.file_groups import latest_base_file
from inlet.core.write.plan import insert_slots
from inlet.core.write.prepare import delete_ordering_field, null_ordering_deletes_error


@dataclass(frozen=True)
class GroupSpec:
    """One file group of a write, as planned on the driver."""

    index: int  # unique within the write: the task id of its write token and sequence numbers
    partition: str
    file_id: str
    base_file: BaseFile | None
    explicit: bool = False
    concat: bool = False
    log: bool = False
    tagged: bool = False
    rows: int = 0  # incoming records planned for it (the inflight workload profile)


@dataclass
class SparkPlan:
    """What the driver decided from metadata and counts."""

    groups: dict[tuple[str, str], GroupSpec] = field(default_factory=dict)
    slots: list[tuple[str, float, float, str]] = field(default_factory=list)  # partition, lo, hi, file id
    buckets: list[tuple[str, int, str, bool]] = field(default_factory=list)  # partition, bucket, file id, new
    replaced: dict[str, list[str]] | None = None
    bulk_rows: dict[str, int] | None = None  # bulk path: live records per partition
    per_file: int = 0

    def add(
        self,
        partition: str,
        file_id: str,
        base: BaseFile | None,
        rows: int,
        *,
        explicit: bool = False,
        concat: bool = False,
        log: bool = False,
        tagged: bool = False,
    ) -> GroupSpec:
        key = (partition, file_id)
        previous = self.groups.get(key)
        spec = GroupSpec(
            0,
            partition,
            file_id,
            base,
            explicit,
            concat,
            log,
            tagged,
            rows + (previous.rows if previous else 0),
        )
        self.groups[key] = spec
        return spec

    def numbered(self) -> None:
        self.groups = {
            k: dataclasses.replace(g, index=i) for i, (k, g) in enumerate(sorted(self.groups.items()))
        }

    def planned_metadata(self, op: WriteOperation) -> CommitMetadata:
        md = CommitMetadata(operation_type=op.value)
        for g in self.groups.values():
            md.add(WriteStat(file_id=g.file_id, path="", partition_path=g.partition, num_inserts=g.rows))
        for p, n in sorted((self.bulk_rows or {}).items()):
            md.add(WriteStat(file_id="", path="", partition_path=p, num_inserts=n))
        return md

    def partitions(self) -> list[str]:
        return sorted({g.partition for g in self.groups.values()} | set(self.bulk_rows or {}))


@dataclass(frozen=True)
class Counts:
    """Per-key counts of incoming records (after dedupe): all, live (not deleted), and deletes
    without an ordering value."""

    rows: int
    live: int
    null_ordering_deletes: int = 0


def replace_targets(
    op: WriteOperation, view: FileSystemView, incoming: Sequence[str], partitions: Sequence[str]
) -> list[str]:
    if op is WriteOperation.INSERT_OVERWRITE_TABLE:
        return view.partitions()
    if op is WriteOperation.DELETE_PARTITION:
        targets = sorted(set(partitions) | set(incoming))
        if not targets:
            raise InvalidInputError("delete_partition needs partition paths or rows naming partitions")
        return targets
    return sorted(incoming)


def _slots(plan: SparkPlan, partition: str, slots: Sequence[tuple[str, BaseFile | None, int]]) -> None:
    """Record insert slots of a partition as hash ranges weighted by their record counts."""
    total = sum(n for _, _, n in slots)
    done = 0
    for i, (file_id, _, n) in enumerate(slots):
        lo = done / total
        done += n
        hi = 2.0 if i == len(slots) - 1 else done / total
        plan.slots.append((partition, lo, hi, file_id))


def _check_log_deletes(table: HudiTable, plan: SparkPlan, counts: Mapping[tuple[str, str], Counts]) -> None:
    """The core's rule (:func:`~inlet.core.write.prepare.delete_ordering_field`), from counts."""
    ordering = delete_ordering_field(table.meta)
    if not ordering:
        return
    for key, g in plan.groups.items():
        if g.log and not g.explicit and counts.get(key, Counts(0, 0)).null_ordering_deletes:
            raise null_ordering_deletes_error(ordering)


def bucket_spec(
    layout: BucketLayout, concat: bool, partition: str, bucket: int, rows: int, live: int
) -> GroupSpec | None:
    """The core's bucket routing (:class:`~inlet.core.write.buckets.BucketLayout`) as the Spark
    plan's group spec: ``rows`` records of the bucket, ``live`` of them not deletes; ``concat``
    for insert and bulk_insert, which append to a base file without merging stored records."""
    t = layout.target(partition, bucket, live)
    if t is None:
        return None
    return GroupSpec(
        0,
        partition,
        t.file_id,
        t.base_file,
        explicit=layout.explicit and not t.new,
        concat=concat and not t.log,
        log=t.log,
        tagged=t.tagged,
        rows=live if t.new else rows,
    )


def concatenates(op: WriteOperation) -> bool:
    return op in (WriteOperation.INSERT, WriteOperation.BULK_INSERT)


def plan_buckets(
    table: HudiTable, op: WriteOperation, view: FileSystemView, counts: Mapping[tuple[str, int], Counts]
) -> SparkPlan:
    """Bucket index, from counts: every record goes to its bucket's file group (new ones for
    replace operations)."""
    layout = BucketLayout.of(table.meta, op, view)
    concat = concatenates(op)
    plan = SparkPlan()
    per_group: dict[tuple[str, str], Counts] = {}
    for (p, b), c in sorted(counts.items()):
        spec = bucket_spec(layout, concat, p, b, c.rows, c.live)
        if spec is None:
            continue
        plan.groups[(p, spec.file_id)] = spec
        is_new = spec.base_file is None and (p, b) not in layout.existing
        plan.buckets.append((p, b, spec.file_id, is_new))
        if not is_new:
            per_group[(p, spec.file_id)] = c
    if layout.mor and not layout.explicit:
        _check_log_deletes(table, plan, per_group)
    return plan


def plan_simple(
    table: HudiTable,
    op: WriteOperation,
    view: FileSystemView,
    options: dict[str, str],
    inserts: Mapping[str, int],
    tagged: Mapping[tuple[str, str], Counts],
) -> SparkPlan:
    """Simple index, insert / upsert / delete: tagged records to the file groups holding their keys
    (log appends on Merge-on-Read), inserts to small file groups first, then to new ones."""
    mor = table.table_type is TableType.MERGE_ON_READ
    explicit = op is WriteOperation.DELETE
    concat = op is WriteOperation.INSERT
    plan = SparkPlan()
    for (p, file_id), c in sorted(tagged.items()):
        s = next((s for s in view.latest_file_slices(p) if s.file_id == file_id), None)
        base = (s.base_file if s else None) if mor else latest_base_file(view, p, file_id)
        plan.add(p, file_id, base, c.rows, explicit=explicit, log=mor, tagged=mor)
    for p, n in sorted(inserts.items()):
        if n <= 0 or explicit:
            continue
        not_small = {s.file_id for s in view.latest_file_slices(p) if s.has_logs} if mor else None
        slots = insert_slots(table, p, n, view, options, small_files=True, not_small=not_small)
        _slots(plan, p, slots)
        for file_id, base, take in slots:
            if (p, file_id) in plan.groups:  # a small file group that also takes updates
                g = plan.groups[(p, file_id)]
                plan.groups[(p, file_id)] = dataclasses.replace(
                    g, rows=g.rows + take, log=False, tagged=False
                )
            else:
                plan.add(p, file_id, base, take, concat=concat)
    if mor and not explicit:
        _check_log_deletes(table, plan, tagged)
    return plan
