"""Failed writes and commits with an unknown outcome are retried from the table's checkpoint;
TRUNCATE; a hung main loop fails /livez; the checkpoint, cut and row helpers on their own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from writer_helpers import Source, commits, produce, read_rows, wait_for

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer import checkpoint as ckpt
from inlet.services.writer.batcher import Entry, TableBuffer
from inlet.services.writer.rows import Change, to_arrow
from inlet.services.writer.service import Writer

COLS = ["id", "name", "note", "amount"]


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def test_failed_write_and_unknown_outcome_are_retried_exactly_once(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix, monkeypatch
):
    """Batch 2's first attempt fails before writing; its second attempt commits but the call then
    fails (the outcome is unknown to the writer). The table decides: nothing is written twice and
    nothing is lost, and the offset ranges of the commits tile the partition."""
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    real = Writer._write
    calls = {"n": 0}

    def flaky(self: Writer, st: Any, table: Any, arrow: Any, extra: dict[str, str]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("injected: write failed before any file")
        result = real(self, st, table, arrow, extra)
        if calls["n"] == 3:
            raise TimeoutError("injected: commit landed, answer lost")
        return result

    monkeypatch.setattr(Writer, "_write", flaky)
    produce(kafka_bootstrap, src.topic, [src.insert(id=i, name="a", note="x", amount=i) for i in range(3)])
    w = start_writer(batch_interval_ms=200)
    path = table_path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="batch 1")
    produce(
        kafka_bootstrap,
        src.topic,
        [src.update(id=1, name="b", note="y", amount=10), src.insert(id=7, name="c", note="z", amount=7)],
    )
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="batch 2")
    produce(kafka_bootstrap, src.topic, [src.delete(id=0, name="a", note="x", amount=0)])
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="batch 3")
    assert calls["n"] >= 4
    spans = [ckpt.parse_ranges(e[ckpt.RANGES_KEY])[1][0] for _, _, e in commits(path) if ckpt.RANGES_KEY in e]
    assert spans == [(0, 3), (3, 5), (5, 6)]
    retries = w.writer.metrics.retries.labels(src.table_id)._value.get()
    assert retries == 1  # the failed attempt; the unknown outcome was found to have landed


def test_truncate_deletes_earlier_rows_and_keeps_later_ones(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    produce(kafka_bootstrap, src.topic, [src.insert(id=i, name="a", note="x", amount=i) for i in range(4)])
    start_writer(batch_interval_ms=200)
    path = table_path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="rows")
    before = src.insert(id=10, name="before", note="", amount=0)
    src.lsn += 10
    trunc = pb.ChangeEvent(
        table_id=src.table_id,
        op=pb.OPERATION_TRUNCATE,
        source=pb.SourcePosition(database=src.database, schema=src.db_schema, table=src.table, lsn=src.lsn),
    )
    src.model.clear()  # everything up to the TRUNCATE
    produce(
        kafka_bootstrap,
        src.topic,
        [
            before,
            ("", pb.ChangeRecord(change=trunc)),
            src.insert(id=11, name="after", note="", amount=1),
        ],
    )
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="truncated")
    assert [r["id"] for r in read_rows(path, COLS, ["id"])] == [11]


def test_checkpoint_format_round_trip():
    text = ckpt.format_checkpoint("inlet.changes.db.public.t", {1: 5, 0: 12})
    assert text == "inlet.changes.db.public.t,0:12,1:5"
    assert ckpt.parse_checkpoint(text) == ("inlet.changes.db.public.t", {0: 12, 1: 5})
    for bad in ("", "topic", "topic,0", "topic,a:1"):
        with pytest.raises(ckpt.CheckpointError):
            ckpt.parse_checkpoint(bad)


def _change(tx: str | None, partition: int, offset: int) -> Entry:
    ev = pb.ChangeEvent(op=pb.OPERATION_CREATE)
    return Entry(partition, offset, 10, Change(ev, partition, offset), tx)


def test_cut_waits_for_complete_transactions():
    b = TableBuffer()
    b.add(_change(None, 0, 0))
    b.add(_change("t1", 0, 1))
    b.add(_change("t1", 1, 0))
    assert sum(b.complete_cut()) == 1  # t1 open: only the change without a transaction
    b.add(Entry(0, 2, 5, None, "t1", 3))  # END: 3 changes of t1 for this table, 2 seen
    assert sum(b.complete_cut()) == 1
    assert b.open_transactions() == ["t1"]
    b.add(_change("t1", 1, 1))
    assert sum(b.complete_cut()) == 5
    cut = b.cut(max_records=100, max_hold_s=60)
    assert cut is not None and cut.count == 5 and cut.reason == "all"
    b.clear()
    b.add(_change("big", 0, 0))
    b.add(_change("big", 0, 1))
    assert b.cut(max_records=100, max_hold_s=60) is None
    cut = b.cut(max_records=2, max_hold_s=60)
    assert cut is not None and cut.reason == "oversized_transaction"


def test_rows_toast_and_deletes():
    src = Source("dbx")
    _, r1 = src.insert(id=1, name="a", note="long text", amount=1)
    from writer_helpers import UNCHANGED

    _, r2 = src.update(id=1, name="b", note=UNCHANGED, amount=2)
    _, r3 = src.update(id=2, name="c", note=UNCHANGED, amount=3)
    _, r4 = src.delete(id=1, name="b", note="long text", amount=2)
    t = to_arrow([Change(r.change, 0, i) for i, r in enumerate((r1, r2, r3, r4))])
    rows = t.to_pylist()
    assert [r["note"] for r in rows] == [
        "long text",
        "long text",
        "__debezium_unavailable_value",
        "long text",
    ]
    assert [r["_hoodie_is_deleted"] for r in rows] == [False, False, False, True]
    assert [r["_change_operation_type"] for r in rows] == ["c", "u", "u", "d"]
    assert rows[0]["_event_lsn"] < rows[1]["_event_lsn"] < rows[3]["_event_lsn"]


def test_toast_unchanged_array_comes_from_the_table(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    from writer_helpers import CUSTOMERS, UNCHANGED

    ints = pb.Column(
        name="scores",
        type=pb.COLUMN_TYPE_LIST,
        nullable=True,
        element=pb.Column(name="element", type=pb.COLUMN_TYPE_INT32, nullable=True),
    )
    src = Source(prefix, cols=[*CUSTOMERS, ints])
    kafka_server.create_topic(src.topic, partitions=1)
    produce(kafka_bootstrap, src.topic, [src.insert(id=1, name="a", note="n", amount=1, scores=[1, 2, 3])])
    start_writer(batch_interval_ms=200)
    path = table_path(lake, src)
    cols = [*COLS, "scores"]
    wait_for(lambda: read_rows(path, cols, ["id"]) == src.expected(cols), what="insert")
    produce(
        kafka_bootstrap, src.topic, [src.update(id=1, name="b", note=UNCHANGED, amount=2, scores=UNCHANGED)]
    )
    wait_for(lambda: read_rows(path, cols, ["id"]) == src.expected(cols), what="toast update")
    assert read_rows(path, cols, ["id"]) == [
        {"id": 1, "name": "b", "note": "n", "amount": 2, "scores": [1, 2, 3]}
    ]


def test_a_hung_loop_fails_liveness_and_nothing_else(start_writer: Any) -> None:
    """/livez is the main loop turning: a call that hangs in it (injected: a real hang cannot be made
    on demand) fails liveness after --liveness-timeout-s, so the liveness probe restarts the writer;
    once the loop turns again it is live again."""
    w = start_writer(liveness_timeout_s=1.0)
    wait_for(lambda: w.writer.liveness()[0], timeout_s=30, what="the loop to turn")
    original, entered, gate = w.writer._tick, threading.Event(), threading.Event()

    def hung() -> None:
        entered.set()
        gate.wait(30)
        original()

    w.writer._tick = hung  # type: ignore[method-assign]
    try:
        assert entered.wait(10)
        wait_for(lambda: not w.writer.liveness()[0], timeout_s=10, what="/livez to fail")
        assert w.writer.liveness()[1]["loop_silent_s"] >= 1.0
    finally:
        w.writer._tick = original  # type: ignore[method-assign]
        gate.set()
    wait_for(lambda: w.writer.liveness()[0], timeout_s=10, what="live again")
