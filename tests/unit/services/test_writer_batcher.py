"""The writer's batch cuts keep source transactions whole: with ENDs relayed per partition after the
changes they count (each naming every partition's count), and with table-wide ENDs that may reach
the change topic before their changes (CDC consumers before per-partition ENDs)."""

from __future__ import annotations

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.batcher import Cut, Entry, TableBuffer
from inlet.services.writer.rows import Change


def change(tx: str | None, partition: int, offset: int) -> Entry:
    ev = pb.ChangeEvent(op=pb.OPERATION_CREATE)
    return Entry(partition, offset, 10, Change(ev, partition, offset), tx)


def end(tx: str, count: int, partition: int, offset: int) -> Entry:
    return Entry(partition, offset, 5, None, tx, count)


def test_an_end_committed_before_its_changes_still_completes_them() -> None:
    b = TableBuffer()
    b.add(change("a", 0, 0))
    b.add(end("a", 1, 0, 1))
    b.add(end("t", 2, 0, 2))  # t's END first, its changes not relayed yet
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 3 and cut.reason == "all"
    b.drop(cut)
    b.add(change("t", 0, 3))
    assert b.cut(max_records=100, max_hold_s=60) is None  # one of t's two changes: hold
    assert b.open_transactions() == ["t"]
    b.add(change("t", 1, 0))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 2 and cut.reason == "all"  # not "hold_expired"
    b.drop(cut)
    assert b.carried.seen == {} and b.carried.ended == {}  # t is done: nothing carried


def test_a_forced_cut_carries_the_changes_already_taken() -> None:
    b = TableBuffer()
    b.add(change("big", 0, 0))
    b.add(change("big", 0, 1))
    cut = b.cut(max_records=2, max_hold_s=60)
    assert cut is not None and cut.reason == "oversized_transaction"
    b.drop(cut)
    b.add(change("big", 0, 2))
    b.add(end("big", 3, 0, 3))
    b.add(change(None, 1, 0))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 3 and cut.reason == "all"


def test_an_unfinished_transaction_still_holds_the_cut_after_a_drop() -> None:
    b = TableBuffer()
    b.add(end("t", 3, 0, 0))
    b.add(change("t", 0, 1))
    b.add(change(None, 0, 2))
    assert sum(b.complete_cut()) == 1  # the END alone; t's change opens it
    b.drop(Cut(b.complete_cut(), "complete"))
    b.add(change("t", 1, 0))
    assert sum(b.complete_cut()) == 0  # 2 of 3 changes of t
    b.add(change("t", 2, 0))
    assert sum(b.complete_cut()) == 4


def part_end(tx: str, counts: dict[int, int], partition: int, offset: int) -> Entry:
    return Entry(partition, offset, 5, None, tx, sum(counts.values()), dict(counts))


def test_a_transaction_is_taken_once_each_owned_partition_holds_the_changes_its_end_counts() -> None:
    b = TableBuffer(assigned={0, 1})
    b.add(change("t", 0, 0))
    b.add(change("t", 0, 1))
    b.add(part_end("t", {0: 2, 1: 1}, 0, 2))  # partition 0 complete, partition 1's change still to come
    b.add(change(None, 0, 3))
    assert sum(b.complete_cut()) == 0 and b.open_transactions() == ["t"]
    assert b.cut(max_records=100, max_hold_s=60) is None
    b.add(change("u", 1, 0))  # u's END not here yet: u stays out, t's change in partition 1 follows it
    b.add(change("t", 1, 1))
    assert sum(b.complete_cut()) == 0  # t needs partition 1's prefix up to its change, which holds u
    b.add(part_end("u", {1: 1}, 1, 2))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 7 and cut.reason == "all"


def test_an_end_after_later_changes_still_lets_the_earlier_transaction_go() -> None:
    # partition 0: t's change, then u's change, then t's END (relayed once t was acknowledged)
    b = TableBuffer(assigned={0})
    b.add(change("t", 0, 0))
    b.add(change("u", 0, 1))
    b.add(part_end("t", {0: 1}, 0, 2))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.reason == "complete"
    assert [(e.offset, e.tx_id) for e in b.taken(cut)] == [(0, "t")]
    b.drop(cut)
    b.add(part_end("u", {0: 1}, 0, 3))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.reason == "all" and cut.count == 3


def test_a_worker_waits_only_for_the_ends_of_its_own_partitions() -> None:
    b = TableBuffer(assigned={1})  # partitions 0 and 2 belong to other workers
    b.add(change("t", 1, 0))
    b.add(part_end("t", {0: 5, 1: 1, 2: 3}, 1, 1))
    b.add(change("u", 1, 2))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 2 and cut.reason == "complete"  # t whole here, u open
    b.drop(cut)
    assert b.carried.parts == {}  # t complete: not carried
    b.add(part_end("u", {1: 1}, 1, 3))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 2 and cut.reason == "all"


def test_a_forced_cut_inside_a_per_partition_transaction_carries_its_changes() -> None:
    b = TableBuffer(assigned={0, 1})
    b.add(change("t", 0, 0))
    b.add(change("t", 0, 1))
    cut = b.cut(max_records=2, max_hold_s=60)
    assert cut is not None and cut.reason == "oversized_transaction"
    b.drop(cut)
    assert b.carried.seen_parts == {"t": {0: 2}}
    b.add(change("t", 1, 0))
    assert b.cut(max_records=100, max_hold_s=60) is None  # no END yet
    b.add(part_end("t", {0: 2, 1: 1}, 1, 1))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 2 and cut.reason == "all"


def test_a_cut_takes_a_prefix_of_each_partition_not_of_the_arrival_order() -> None:
    # the consumer fetched partition 0's chunk (t1, t2, t3 whole there), then partition 1's (t1, t2
    # whole, t3's change there not yet): no prefix of the arrival order is complete, but t1 and t2 are
    b = TableBuffer(assigned={0, 1})
    ends = {"t1": {0: 1, 1: 1}, "t2": {0: 1, 1: 1}, "t3": {0: 1, 1: 1}}
    offset = 0
    for tx in ("t1", "t2", "t3"):
        b.add(change(tx, 0, offset))
        b.add(part_end(tx, ends[tx], 0, offset + 1))
        offset += 2
    offset = 0
    for tx in ("t1", "t2"):
        b.add(change(tx, 1, offset))
        b.add(part_end(tx, ends[tx], 1, offset + 1))
        offset += 2
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.reason == "complete"
    taken = b.taken(cut)
    assert sorted((e.partition, e.offset) for e in taken) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 0),
        (1, 1),
        (1, 2),
        (1, 3),
    ]
    b.drop(cut)
    assert [(e.partition, e.offset, e.tx_id) for e in b.entries] == [(0, 4, "t3"), (0, 5, "t3")]
    b.add(change("t3", 1, 4))
    b.add(part_end("t3", ends["t3"], 1, 5))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.reason == "all" and cut.count == 4
