"""Issue #21: a checkpoint below the earliest available offset (retention deleted records the table
never saw) stops the table, or with ``on_offset_gap="earliest"`` moves it to the earliest offset.
(The recreated-topic case and a broker restart run against Apache Kafka in
tests/integration/writer/test_writer_offset_gaps.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inlet.services.writer.service import TableState, Writer, WriterConfig


class FakeConsumer:
    """The broker's ListOffsets answers per partition; an exception is raised, None is no answer."""

    def __init__(self, marks: dict[int, tuple[int, int] | Exception | None]) -> None:
        self.marks = marks

    def get_watermark_offsets(
        self, tp: Any, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int] | None:
        answer = self.marks[tp.partition]
        if isinstance(answer, Exception):
            raise answer
        return answer


def state(positions: dict[int, int]) -> TableState:
    st = TableState("db.public.t", "inlet.changes.db.public.t")
    st.assigned = set(positions)
    st.positions = dict(positions)
    return st


@pytest.mark.parametrize("mode", ["fail", "earliest"])
def test_checkpoint_below_earliest(mode: str) -> None:
    w = Writer(
        WriterConfig(bootstrap="x:1", coordinator="127.0.0.1:1", lake_root="/nowhere", on_offset_gap=mode)
    )
    try:
        st = state({0: 3, 1: 7})
        result = w._check_offsets(FakeConsumer({0: (5, 9), 1: (0, 7)}), st)  # type: ignore[arg-type]
        if mode == "fail":
            assert result is not None
            kind, err = result
            assert kind == "offset_gap"
            for part in (
                "db.public.t",
                "inlet.changes.db.public.t",
                "partition 0",
                "offset 3",
                "below the earliest",
                "earliest 5",
                "latest 9",
            ):
                assert part in err, (part, err)
            assert "partition 1" not in err
            assert st.positions == {0: 3, 1: 7}
        else:
            assert result is None
            assert st.positions == {0: 5, 1: 7}
    finally:
        w.close()


def test_checkpoint_within_offsets_is_no_gap() -> None:
    w = Writer(WriterConfig(bootstrap="x:1", coordinator="127.0.0.1:1", lake_root="/nowhere"))
    try:
        st = state({0: 5, 1: 9})
        assert w._check_offsets(FakeConsumer({0: (5, 9), 1: (0, 9)}), st) is None  # type: ignore[arg-type]
        assert st.positions == {0: 5, 1: 9}
    finally:
        w.close()


@pytest.mark.parametrize(
    "answer", [KafkaException(KafkaError(KafkaError._TIMED_OUT)), None, (-1001, -1001)], ids=str
)
def test_offsets_the_broker_does_not_tell_are_retried_not_taken_as_no_gap(answer: Any) -> None:
    """Without an answer the checkpoint is unchecked: the table waits (a transient failure, retried
    with backoff) instead of resuming where a gap may be."""
    w = Writer(WriterConfig(bootstrap="x:1", coordinator="127.0.0.1:1", lake_root="/nowhere"))
    try:
        st = state({0: 5, 1: 9})
        result = w._check_offsets(FakeConsumer({0: (0, 9), 1: answer}), st)  # type: ignore[arg-type]
        assert result is not None
        kind, err = result
        assert kind == "transient"
        assert "db.public.t" in err and "inlet.changes.db.public.t[1]" in err, err
        assert st.positions == {0: 5, 1: 9}
    finally:
        w.close()
