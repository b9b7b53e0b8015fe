"""Dead letters, shared by the CDC consumer and the writer: one topic (``inlet.dlq`` by default), one
set of headers, so ``inlet dlq show`` lists both services' letters.

A dead letter is the original record -- key, value and headers byte for byte -- with these headers
added: ``inlet-dlq-reason`` (why), ``inlet-dlq-error-class``, ``inlet-dlq-topic`` /
``inlet-dlq-partition`` / ``inlet-dlq-offset`` (where it was read) and ``inlet-dlq-timestamp``
(its timestamp, ms; -1 when it had none). A record too large for the dead-letter topic too is
sent without its value, with ``inlet-dlq-value-bytes`` giving its size: it is still in its topic at
that position while the topic's retention keeps it.

:func:`fetch` reads records back from their topic by position (a consumer without a group), for
the letters of records whose bytes are no longer in memory (the writer names its bad rows after
decoding them; the CDC consumer learns of a refused output after it produced it).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from inlet.services.kafka_topics import (
    PRODUCER_SAFETY,
    TopicRefused,
    TopicRetention,
    TopicSpec,
    ensure_topics,
)

DEFAULT_TOPIC = "inlet.dlq"

H_DLQ_REASON = "inlet-dlq-reason"
H_DLQ_TOPIC = "inlet-dlq-topic"
H_DLQ_PARTITION = "inlet-dlq-partition"
H_DLQ_OFFSET = "inlet-dlq-offset"
H_DLQ_TIMESTAMP = "inlet-dlq-timestamp"
H_DLQ_ERROR_CLASS = "inlet-dlq-error-class"
H_DLQ_VALUE_BYTES = "inlet-dlq-value-bytes"  # set when the value was left out (too large)

Headers = list[tuple[str, str | bytes | None]]
Position = tuple[str, int, int]  # (topic, partition, offset)

#: produce errors about one record that no retry can fix: the record is a dead letter, the stream
#: goes on (librdkafka checks ``message.max.bytes`` itself; the broker checks its and the topic's
#: ``max.message.bytes``)
PERMANENT_RECORD_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_MSG_SIZE,
    }
)
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


class DeadLetterError(Exception):
    """A dead letter could not be written (or its record read back); nothing was skipped."""


def permanent(err: KafkaError | None) -> bool:
    """Whether ``err`` refuses one record for good (not a broker outage, not the whole client)."""
    return err is not None and err.code() in PERMANENT_RECORD_ERRORS and not err.fatal()


def headers(
    original: Iterable[tuple[str, Any]] | None,
    position: Position,
    timestamp_ms: int,
    reason: str,
    error_class: str,
) -> Headers:
    """The original headers, then the ``inlet-dlq-*`` ones."""
    topic, partition, offset = position
    out: Headers = list(original or [])
    out += [
        (H_DLQ_REASON, reason.encode("utf-8", "replace")),
        (H_DLQ_TOPIC, topic.encode()),
        (H_DLQ_PARTITION, str(partition).encode()),
        (H_DLQ_OFFSET, str(offset).encode()),
        (H_DLQ_TIMESTAMP, str(timestamp_ms).encode()),
        (H_DLQ_ERROR_CLASS, error_class.encode()),
    ]
    return out


def message_headers(m: Message, reason: str, error_class: str) -> Headers:
    ts_type, ts = m.timestamp()
    position = (str(m.topic()), m.partition() or 0, m.offset() or 0)
    original = m.headers()  # a list of (name, value) on a consumed record
    pairs = list(original.items()) if isinstance(original, dict) else original
    return headers(pairs, position, ts if ts_type else -1, reason, error_class)


def without_value(letter_headers: Iterable[tuple[str, Any]], size: int) -> Headers:
    """The headers of a dead letter sent without its ``size`` bytes of value."""
    return [*letter_headers, (H_DLQ_VALUE_BYTES, str(size).encode())]


def fetch_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`fetch`'s consumer takes of a service's consumer settings: the cluster, its
    security and the fetch and socket tuning (not the group's settings)."""
    return {
        k: v
        for k, v in settings.items()
        if k.startswith(("bootstrap.", "security.", "sasl.", "ssl.", "client.", "fetch.", "socket."))
    }


def fetch(
    settings: Mapping[str, Any], positions: Iterable[Position], timeout_s: float = 30.0
) -> dict[Position, Message]:
    """The records at ``positions`` read back from their topics (``settings``: the librdkafka
    consumer settings of the cluster, bootstrap and security); :class:`DeadLetterError` when one
    cannot be read within ``timeout_s``."""
    wanted = set(positions)
    if not wanted:
        return {}
    conf = fetch_settings(settings)
    conf.update(
        {
            "group.id": f"inlet-dlq-fetch-{uuid.uuid4().hex}",  # assign() only: never joins or commits
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "error",
        }
    )
    consumer = Consumer(conf)
    found: dict[Position, Message] = {}
    try:
        starts: dict[tuple[str, int], int] = {}
        for t, p, o in wanted:
            starts[(t, p)] = min(o, starts.get((t, p), o))
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        ends = {(t, p): max(o for tt, pp, o in wanted if (tt, pp) == (t, p)) for t, p in starts}
        done: set[tuple[str, int]] = set()
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                missing = sorted(wanted - found.keys())
                raise DeadLetterError(
                    f"could not read back {', '.join(f'{t}[{p}]@{o}' for t, p, o in missing)}"
                )
            for m in consumer.consume(500, 0.2):
                if m.error() is not None:
                    continue
                tp = (str(m.topic()), m.partition() or 0)
                pos = (tp[0], tp[1], m.offset() or 0)
                if pos in wanted:
                    found[pos] = m
                if pos[2] >= ends.get(tp, -1):
                    done.add(tp)
        if wanted - found.keys():
            missing = sorted(wanted - found.keys())
            raise DeadLetterError(
                f"records gone from their topic: {', '.join(f'{t}[{p}]@{o}' for t, p, o in missing)}"
            )
        return found
    except KafkaException as e:
        raise DeadLetterError(f"cannot read back the bad records: {e}") from e
    finally:
        consumer.close()


class DeadLetterSink:
    """Writes dead letters and waits for the broker to take them (for services that must not move
    past a bad record before its letter is safe)."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        topic: str = DEFAULT_TOPIC,
        timeout_s: float = 30.0,
        retention: TopicRetention | None = None,
    ) -> None:
        self.settings = dict(settings)
        self.retention = retention or TopicRetention()  # of the topic, when this sink creates it
        self.topic = topic
        self.timeout_s = timeout_s
        self._producer: Producer | None = None

    def _ensure_topic(self) -> None:
        """Create the topic (one partition, the broker's replication factor) when it is missing."""
        admin = AdminClient(self.settings)
        try:
            meta = admin.list_topics(timeout=10).topics.get(self.topic)
            if meta is not None and meta.error is None and meta.partitions:
                return
            ensure_topics(admin, [TopicSpec(self.topic, 1, config=self.retention.configs())])
        except TopicRefused as e:  # (ensure_topics leaves a topic another process made meanwhile)
            raise DeadLetterError(str(e)) from e
        except KafkaException as e:
            raise DeadLetterError(f"cannot create the dead-letter topic {self.topic}: {e}") from e

    def producer_settings(self) -> dict[str, Any]:
        """The letters' producer: the given settings, then :data:`PRODUCER_SAFETY` (idempotent, acks=all)."""
        return {"linger.ms": 0, **self.settings, **PRODUCER_SAFETY}

    def _client(self) -> Producer:
        if self._producer is None:
            self._ensure_topic()
            self._producer = Producer(self.producer_settings())
        return self._producer

    def send(self, letters: Iterable[tuple[bytes | None, bytes | None, Headers]]) -> None:
        """Produce each ``(key, value, headers)`` and wait until all are acknowledged; a value too
        large for the topic goes without it. :class:`DeadLetterError` when any is not acknowledged."""
        producer = self._client()
        errors: list[str] = []

        def produce(key: bytes | None, value: bytes | None, hdrs: Headers) -> None:
            def on_delivery(err: KafkaError | None, _m: Message) -> None:
                if err is None:
                    return
                if value is not None and err.code() in TOO_LARGE:
                    produce(key, None, without_value(hdrs, len(value)))
                    return
                errors.append(err.str())

            try:
                producer.produce(self.topic, value, key, headers=hdrs, on_delivery=on_delivery)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if value is not None and isinstance(err, KafkaError) and err.code() in TOO_LARGE:
                    produce(key, None, without_value(hdrs, len(value)))
                    return
                raise DeadLetterError(f"cannot write a dead letter to {self.topic}: {e}") from e
            except BufferError as e:
                raise DeadLetterError(f"cannot write a dead letter to {self.topic}: {e}") from e

        for key, value, hdrs in letters:
            produce(key, value, hdrs)
        left = producer.flush(self.timeout_s)
        if left:
            raise DeadLetterError(
                f"{left} dead letter(s) not acknowledged by {self.topic} in {self.timeout_s:.0f} s"
            )
        if errors:
            raise DeadLetterError(f"the broker refused a dead letter on {self.topic}: {errors[0]}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
