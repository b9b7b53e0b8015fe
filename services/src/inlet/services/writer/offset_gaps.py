"""Offset gaps: a table checkpoint outside the offsets its partition still holds.

A checkpointed offset below a partition's earliest available offset means retention deleted
records the table never saw; one above its latest means the topic was recreated behind the table.
Either is a gap the writer reports (Hudi Streamer's fail-on-data-loss) instead of skipping.

The earliest and latest offsets come from the broker's ListOffsets answer (librdkafka's
``get_watermark_offsets``). Apache Kafka answers ListOffsets(latest) with the high watermark;
Tansu 0.6 (the embedded broker) does not: it answers with a produced batch's base offset + 1 (the
last batch on memory storage; on S3 storage the first batch produced since the broker started,
not advanced afterwards), so a checkpoint at the true end of a partition looks "above the latest".
The high watermark a Fetch response carries is right on both, on Tansu across restarts too. So
a checkpoint above the listed latest offset is confirmed with a fetch (:func:`fetched_high_watermarks`)
before it is called a gap; a broker that answers neither is an error to retry, never "no gap".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

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
    settings: Mapping[str, Any],
    topic: str,
    checkpoints: Mapping[int, int],
    timeout_s: float = 10.0,
) -> list[Gap]:
    """The partitions of ``topic`` whose checkpointed offset (``checkpoints``: partition -> next
    offset to read) lies outside the offsets the broker holds. ``consumer`` lists the offsets;
    ``settings`` (the consumer's) connect the fetch that confirms a checkpoint above the listed
    latest offset. Raises :class:`OffsetsUnknownError` when the broker does not answer."""
    listed: dict[int, tuple[int, int]] = {}
    for p in sorted(checkpoints):
        try:
            marks: tuple[int, int] | None = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s
            )
        except KafkaException as e:
            raise OffsetsUnknownError(f"cannot list the offsets of {topic}[{p}]: {e}") from e
        if marks is None or marks[0] < 0 or marks[1] < 0:
            raise OffsetsUnknownError(f"cannot list the offsets of {topic}[{p}]: no answer ({marks})")
        listed[p] = marks
    above = [p for p, (_, high) in listed.items() if checkpoints[p] > high]
    fetched = fetched_high_watermarks(settings, topic, above, timeout_s) if above else {}
    unconfirmed = [p for p in above if p not in fetched]
    if unconfirmed:
        raise OffsetsUnknownError(
            f"cannot confirm the latest offsets of {topic} partitions {unconfirmed}: "
            f"no fetch answered within {timeout_s:g} s"
        )
    gaps = []
    for p, (low, listed_high) in sorted(listed.items()):
        high = max(listed_high, fetched.get(p, listed_high))
        if not low <= checkpoints[p] <= high:
            gaps.append(Gap(p, checkpoints[p], low, high))
    return gaps


def fetched_high_watermarks(
    settings: Mapping[str, Any], topic: str, partitions: Iterable[int], timeout_s: float
) -> dict[int, int]:
    """The high watermark each partition's Fetch response reports (partitions without an answer
    within ``timeout_s`` are left out). A consumer of its own, assigned (never joining a group,
    committing nothing) at each partition's beginning, an offset a fetch always accepts."""
    wanted = sorted(set(partitions))
    consumer = Consumer(
        {
            **settings,
            "group.id": f"{settings.get('group.id', 'inlet')}.offset-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "queued.max.messages.kbytes": 1024,  # the records fetched are not read
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        deadline = time.monotonic() + timeout_s
        found: dict[int, int] = {}
        while True:
            for p in wanted:
                if p not in found:
                    cached: tuple[int, int] | None = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), cached=True
                    )
                    if cached is not None and cached[1] >= 0:
                        found[p] = cached[1]
            if len(found) == len(wanted) or time.monotonic() >= deadline:
                return found
            consumer.poll(0.05)  # serves the fetches; what it returns is dropped
    finally:
        consumer.close()
