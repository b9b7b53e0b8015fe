"""The CDC consumer keeps a transaction's END until the broker acknowledged its changes, then relays
it to each partition holding them with every partition's count (or, after the wait, with what came)."""

from __future__ import annotations

from dataclasses import dataclass

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer.tx_ends import ParkedEnd, TransactionEnds


@dataclass
class Msg:
    part: int

    def partition(self) -> int:
        return self.part


class Batch:
    def __init__(self) -> None:
        self.pending = 0
        self.acks = 0

    def ack(self, err: object, msg: object) -> None:
        self.pending -= 1
        self.acks += 1


def _end(batch: Batch, count: int) -> ParkedEnd:
    rec = pb.ChangeRecord(
        transaction=pb.TransactionEvent(
            id="tx1", status=pb.TransactionEvent.STATUS_END, table_id="db.s.t", table_event_count=count
        )
    )
    batch.pending += 1
    return ParkedEnd(batch, "inlet.changes.db.s.t", rec, [], count)


def test_an_end_read_first_waits_for_its_changes_then_names_every_partition() -> None:
    ends = TransactionEnds(wait_s=60)
    batch = Batch()
    key = ("db.s.t", "tx1")
    ends.park(key, _end(batch, 3))
    assert ends.ready(now=0) == []  # nothing acknowledged yet
    acks = [ends.change_ack(batch.ack, key) for _ in range(3)]
    batch.pending += 3
    acks[0](None, Msg(2))
    acks[1](None, Msg(0))
    assert ends.ready() == []  # 2 of 3
    acks[2](None, Msg(2))
    (ready,) = ends.ready()
    assert not ready.late and ready.counts == {0: 1, 2: 2}
    copies = ready.records()
    assert [p for p, _ in copies] == [0, 2]
    tx = pb.ChangeRecord.FromString(copies[0][1]).transaction
    assert dict(tx.partition_event_counts) == {0: 1, 2: 2} and tx.table_event_count == 3
    assert batch.acks == 3 and ends.parked == 0


def test_changes_acknowledged_before_the_end_relay_it_at_once_and_a_truncate_counts_once() -> None:
    ends = TransactionEnds(wait_s=60)
    batch = Batch()
    key = ("db.s.t", "tx1")
    for ack, p in zip(ends.truncate_acks(batch.ack, key, 4), range(4), strict=True):
        ack(None, Msg(p))  # a TRUNCATE: a copy in every partition, one event
    ends.change_ack(batch.ack, key)(None, Msg(1))
    ends.park(key, _end(batch, 2))
    (ready,) = ends.ready()
    assert ready.counts == {0: 1, 1: 2, 2: 1, 3: 1} and not ready.late


def test_an_end_waits_for_every_copy_of_a_truncate() -> None:
    """A TRUNCATE is one event of the transaction but a copy in every partition: its END is relayed
    only once all copies are acknowledged, whichever comes first (each partition's count is in it)."""
    ends = TransactionEnds(wait_s=60)
    batch = Batch()
    key = ("db.s.t", "tx1")
    ends.park(key, _end(batch, 1))
    acks = ends.truncate_acks(batch.ack, key, 4)
    for p in (0, 2, 1):  # the first partition's copy acknowledged first
        acks[p](None, Msg(p))
        assert ends.ready() == [], f"relayed before the copy in partition 3 (after {p})"
    acks[3](None, Msg(3))
    (ready,) = ends.ready()
    assert ready.counts == {0: 1, 1: 1, 2: 1, 3: 1} and not ready.late


def test_a_failed_delivery_does_not_count_and_the_wait_relays_what_came() -> None:
    ends = TransactionEnds(wait_s=5)
    batch = Batch()
    key = ("db.s.t", "tx1")
    end = _end(batch, 2)
    ends.park(key, end)
    ends.change_ack(batch.ack, key)(None, Msg(1))
    ends.change_ack(batch.ack, key)(object(), Msg(3))  # an error: not delivered
    assert ends.ready(now=end.since + 1) == []
    (ready,) = ends.ready(now=end.since + 5)
    assert ready.late and ready.counts == {1: 1}


def test_the_same_end_parked_twice_releases_the_first_hold() -> None:
    ends = TransactionEnds(wait_s=60)
    first, second = Batch(), Batch()
    key = ("db.s.t", "tx1")
    ends.park(key, _end(first, 1))
    ends.park(key, _end(second, 1))
    assert first.pending == 0 and second.pending == 1 and ends.parked == 1
