"""The writer's batch cuts keep source transactions whole even when a transaction's END reaches the
change topic before its changes (the CDC consumer relays the END from Debezium's transaction topic
as soon as it reads it)."""

from __future__ import annotations

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.batcher import Entry, TableBuffer
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
    b.drop_prefix(cut.count)
    b.add(change("t", 0, 3))
    assert b.cut(max_records=100, max_hold_s=60) is None  # one of t's two changes: hold
    assert b.open_transactions() == ["t"]
    b.add(change("t", 1, 0))
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 2 and cut.reason == "all"  # not "hold_expired"
    b.drop_prefix(cut.count)
    assert b.carried_seen == {} and b.carried_end == {}  # t is done: nothing carried


def test_a_forced_cut_carries_the_changes_already_taken() -> None:
    b = TableBuffer()
    b.add(change("big", 0, 0))
    b.add(change("big", 0, 1))
    cut = b.cut(max_records=2, max_hold_s=60)
    assert cut is not None and cut.reason == "oversized_transaction"
    b.drop_prefix(cut.count)
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
    assert b.complete_prefix() == 1  # the END alone; t's change opens it
    b.drop_prefix(1)
    b.add(change("t", 1, 0))
    assert b.complete_prefix() == 0  # 2 of 3 changes of t
    b.add(change("t", 2, 0))
    assert b.complete_prefix() == 4
