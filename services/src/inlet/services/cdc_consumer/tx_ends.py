"""Transaction ENDs relayed per output partition, after the transaction's changes there.

Debezium writes a transaction's END to ``<prefix>.transaction`` and its changes to the tables'
topics; the CDC consumer reads those topics independently, so it often reads an END before the
changes it counts. A writer that owns some of a table's output partitions must know when it holds all
of a transaction's changes in *its* partitions. So an END is not relayed when it is read: it is kept
(:meth:`TransactionEnds.park`) until the broker has acknowledged ``table_event_count`` changes of that
transaction and table (counted per output partition as their acknowledgements arrive), then relayed
once to each partition that holds some of them, carrying every partition's count
(``TransactionEvent.partition_event_counts``). Because a partition's END is produced after its
changes were acknowledged, it follows them in that partition, and a writer knows the transaction is
complete in its partitions once each of those partitions showed its END.

The changes come from the table's topic, which can lag the small transaction topic by the whole
backlog, so ``wait_s`` is long (a minute by default): it is for changes that never come (the consumer
restarted in the middle of a transaction whose earlier changes were already committed upstream, or
changes that went to the dead letters). Such an END is relayed with the counts seen so far, and logged; writers then fall back to
their hold limit for partitions that got no END. While an END is kept, its poll batch is not
acknowledged, so the source offsets it came from are not committed: a restart reads it again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inlet.proto.changes.v1 import changes_pb2 as pb

MAX_OPEN = 200_000  # transactions whose delivered counts are remembered (oldest dropped beyond)

Key = tuple[str, str]  # (table id, transaction id)


@dataclass
class ParkedEnd:
    batch: Any  # the poll batch the END came in (its placeholder acknowledgement is held)
    topic: str  # the table's output topic
    record: pb.ChangeRecord
    headers: list[tuple[str, str | bytes | None]]
    expected: int
    since: float = field(default_factory=time.monotonic)


@dataclass
class ReadyEnd:
    parked: ParkedEnd
    counts: dict[int, int]  # output partition -> acknowledged changes of the transaction
    late: bool  # relayed after wait_s without all its changes

    def records(self) -> list[tuple[int, bytes]]:
        """(partition, value) of each copy: one per partition holding changes, with all counts."""
        rec = pb.ChangeRecord()
        rec.CopyFrom(self.parked.record)
        rec.transaction.partition_event_counts.update(self.counts)
        value = rec.SerializeToString(deterministic=True)
        return [(p, value) for p in sorted(self.counts)]


class TransactionEnds:
    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._delivered: OrderedDict[Key, dict[int, int]] = OrderedDict()  # copies per partition
        self._events: dict[Key, int] = {}  # source events fully counted (a TRUNCATE once, for all copies)
        self._parked: dict[Key, ParkedEnd] = {}
        self._check: set[Key] = set()

    @property
    def parked(self) -> int:
        return len(self._parked)

    def change_ack(self, batch_ack: Callable[[Any, Any], None], key: Key) -> Callable[[Any, Any], None]:
        """The delivery callback of a change of transaction ``key``: the batch's, then counted in its
        partition (a TRUNCATE's copies: :meth:`truncate_acks`)."""

        def on_delivery(err: Any, msg: Any) -> None:
            batch_ack(err, msg)
            if err is None:
                self._count(key, msg.partition(), 1)

        return on_delivery

    def _count(self, key: Key, partition: int, event: int) -> None:
        """One acknowledged copy of a change of ``key`` in ``partition``, weighing ``event`` events."""
        counts = self._delivered.get(key)
        if counts is None:
            counts = self._delivered[key] = {}
            if len(self._delivered) > MAX_OPEN:
                old, _ = self._delivered.popitem(last=False)
                self._events.pop(old, None)
        counts[partition] = counts.get(partition, 0) + 1
        self._events[key] = self._events.get(key, 0) + event
        if key in self._parked:
            self._check.add(key)

    def truncate_acks(
        self, batch_ack: Callable[[Any, Any], None], key: Key, copies: int
    ) -> list[Callable[[Any, Any], None]]:
        """The delivery callbacks of a TRUNCATE's ``copies`` (one per partition): each counts in its
        partition, and the TRUNCATE counts as the transaction's one event only once every copy is
        acknowledged, so its END never goes out before a partition's copy is in."""
        left = [copies]

        def on_delivery(err: Any, msg: Any) -> None:
            batch_ack(err, msg)
            if err is None:
                left[0] -= 1
                self._count(key, msg.partition(), int(left[0] == 0))

        return [on_delivery] * copies

    def park(self, key: Key, end: ParkedEnd) -> None:
        """Keep an END until its changes are acknowledged (the caller holds one pending ack on its batch)."""
        previous = self._parked.pop(key, None)
        if previous is not None:  # the same END read twice (a re-read after a rebalance): keep the newer
            previous.batch.pending -= 1
        self._parked[key] = end
        self._check.add(key)

    def ready(self, now: float | None = None) -> list[ReadyEnd]:
        """ENDs to relay now: all their changes acknowledged, or waited ``wait_s`` (late)."""
        now = time.monotonic() if now is None else now
        out: list[ReadyEnd] = []
        keys = set(self._check)
        self._check.clear()
        keys.update(k for k, e in self._parked.items() if now - e.since >= self.wait_s)
        for key in keys:
            end = self._parked.get(key)
            if end is None:
                continue
            counts = self._delivered.get(key, {})
            complete = self._events.get(key, 0) >= end.expected
            if complete or now - end.since >= self.wait_s:
                del self._parked[key]
                self._delivered.pop(key, None)
                self._events.pop(key, None)
                out.append(ReadyEnd(end, dict(counts), late=not complete))
        return out

    def drop_all(self) -> list[ParkedEnd]:
        """Forget every kept END (partitions revoked: they are read again); returns them."""
        ends = list(self._parked.values())
        self._parked.clear()
        self._check.clear()
        self._delivered.clear()
        self._events.clear()
        return ends
