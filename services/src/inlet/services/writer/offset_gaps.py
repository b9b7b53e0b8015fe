"""Offset gaps: a table checkpoint outside the offsets its partition still holds.

A checkpointed offset below a partition's earliest available offset means retention deleted
records the table never saw; one above its latest means the topic was recreated behind the table.
Either is a gap the writer reports (Hudi Streamer's fail-on-data-loss) instead of skipping.

The earliest and latest offsets come from the broker's ListOffsets answer (librdkafka's
``get_watermark_offsets``): Apache Kafka answers ListOffsets(latest) with the high watermark, across
restarts too. (The stand-in broker used before answered a stale latest offset, so a checkpoint above
it was confirmed with a fetch; Kafka needs no such second look.) A broker that does not answer is an
error to retry, never "no gap".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from inlet.core.errors import InletError


class OffsetsUnknownError(InletError):
    """The broker did not tell a partition's available offsets (the check is retried)."""


@dataclass(frozen=True)
class Gap:
    partition: int
    checkpoint: int
    earliest: int
    latest: int

    def describe(self, table_id: str, topic: str) -> str:
        where = "below the earliest" if self.checkpoint < self.earliest else "above the latest"
        return (
            f"offset gap: table {table_id} checkpointed offset {self.checkpoint} of topic {topic} "
            f"partition {self.partition} is {where} available offset "
            f"(earliest {self.earliest}, latest {self.latest})"
        )


def find_gaps(
    consumer: Consumer,
    topic: str,
    checkpoints: Mapping[int, int],
    timeout_s: float = 10.0,
) -> list[Gap]:
    """The partitions of ``topic`` whose checkpointed offset (``checkpoints``: partition -> next
    offset to read) lies outside the offsets the broker holds, as ``consumer`` lists them. Raises
    :class:`OffsetsUnknownError` when the broker does not answer."""
    gaps = []
    for p in sorted(checkpoints):
        try:
            marks: tuple[int, int] | None = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s
            )
        except KafkaException as e:
            raise OffsetsUnknownError(f"cannot list the offsets of {topic}[{p}]: {e}") from e
        if marks is None or marks[0] < 0 or marks[1] < 0:
            raise OffsetsUnknownError(f"cannot list the offsets of {topic}[{p}]: no answer ({marks})")
        low, high = marks
        if not low <= checkpoints[p] <= high:
            gaps.append(Gap(p, checkpoints[p], low, high))
    return gaps
