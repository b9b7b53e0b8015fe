"""Following the coordinator's commit events (``inlet.commits``) table by table.

Services that act on a table after its commits (catalog sync, table services) consume the
``CommitEvent``s with a consumer group of their own, gather the events of each table, act once per
table when its first unhandled event is ``coalesce_s`` old (a burst of commits is one action), and
commit Kafka offsets only up to the oldest event of a table not handled yet: after a restart or a
crash those events are read again and the (idempotent) action runs again; nothing is skipped.
An undecodable message, or one without a base path, is logged, counted and skipped.

A subscriber asks for the changes of the instant in an event with :func:`changes_of`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inlet.core import HudiTable
from inlet.core.errors import InvalidInputError
from inlet.core.read.incremental import Changes
from inlet.services.runtime import Setting

_log = logging.getLogger(__name__)

DEFAULT_TOPIC = "inlet.commits"


def follower_settings(group: str, action: str, retried: str) -> tuple[Setting, ...]:
    """The settings every service that follows commit events declares: bootstrap, topic, consumer
    group (default ``group``), coalescing (``action``: what one table's commits are gathered for),
    the longest retry wait (``retried``: what is retried), the metrics endpoint and librdkafka
    options."""
    return (
        Setting(
            "bootstrap",
            "--kafka-bootstrap",
            "Kafka bootstrap servers",
            metavar="HOST:PORT",
            required=True,
            env_name="KAFKA_BOOTSTRAP",
            aliases=("--bootstrap",),
            env_aliases=("BOOTSTRAP",),
        ),
        Setting("topic", "--topic", "commit event topic", default=DEFAULT_TOPIC),
        Setting("group", "--group", "Kafka consumer group", default=group),
        Setting(
            "coalesce",
            "--coalesce",
            f"seconds to gather a table's commits before one {action}",
            kind="float",
            default=2.0,
            metavar="SECONDS",
        ),
        Setting(
            "retry_max", "--retry-max", f"longest wait between {retried} (s)", kind="float", default=30.0
        ),
        Setting(
            "metrics_listen",
            "--metrics-listen",
            "HOST:PORT of /metrics and /healthz (empty: off)",
            default="127.0.0.1:0",
            metavar="HOST:PORT",
        ),
        Setting(
            "kafka",
            "--kafka-option",
            "librdkafka setting KEY=VALUE of every Kafka client of this service; repeatable",
            kind="pairs",
            metavar="KEY=VALUE",
            env_name="KAFKA_OPTIONS",
        ),
    )


def consumer_settings(bootstrap: str, group: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """confluent-kafka settings of a commit-event consumer: manual offset commits, from the start."""
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    settings.update(extra or {})
    return settings


@dataclass
class PendingTable:
    """A table with commit events not handled yet."""

    table_id: str
    base_path: str
    first_seen: float
    latest_instant: str = ""
    actions: set[str] = field(default_factory=set)  # the events' actions (commit, deltacommit...)
    committed_at: float | None = None  # commit time (epoch s) of the oldest unhandled event
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) -> lowest
    next_attempt: float = 0.0
    failures: int = 0


class CommitEventFollower:
    """Consume ``topic`` as ``group`` and keep :attr:`pending`, one :class:`PendingTable` per table."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str = DEFAULT_TOPIC,
        kafka: dict[str, Any] | None = None,
        coalesce_s: float = 2.0,
        on_event: Callable[[], None] | None = None,
        on_bad_event: Callable[[], None] | None = None,
    ) -> None:
        self.settings = consumer_settings(bootstrap, group, kafka)
        self.topic = topic
        self.coalesce_s = coalesce_s
        self.on_event = on_event or (lambda: None)
        self.on_bad_event = on_bad_event or (lambda: None)
        self.pending: dict[str, PendingTable] = {}
        self.consumer: Any = None
        self._committed: dict[tuple[str, int], int] = {}

    def open(self) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(self.settings)
        self.consumer.subscribe([self.topic])
        _log.info("consuming %s (group %s)", self.topic, self.settings["group.id"])

    def close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):
                self.consumer.close()
            self.consumer = None

    def poll(self, timeout_s: float = 0.2, max_messages: int = 500) -> int:
        """Consume what is there (waiting up to ``timeout_s``); returns the messages seen."""
        msgs = self.consumer.consume(num_messages=max_messages, timeout=timeout_s)
        for msg in msgs:
            self._handle(msg)
        return len(msgs)

    def due(self, now: float | None = None) -> list[PendingTable]:
        """Tables whose first unhandled event is ``coalesce_s`` old and which are not backing off."""
        now = time.monotonic() if now is None else now
        return [
            p
            for p in list(self.pending.values())
            if now - p.first_seen >= self.coalesce_s and now >= p.next_attempt
        ]

    def done(self, table: PendingTable) -> None:
        """The table's events are handled: their offsets may be committed."""
        self.pending.pop(table.table_id, None)

    def retry_later(self, table: PendingTable, delay_s: float) -> None:
        table.failures += 1
        table.next_attempt = time.monotonic() + delay_s

    def _handle(self, msg: Any) -> None:
        from inlet.proto.events.v1 import events_pb2

        if msg.error() is not None:
            _log.warning("kafka: %s", msg.error())
            return
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        event = events_pb2.CommitEvent()
        try:
            event.ParseFromString(msg.value() or b"")
        except Exception as e:  # protobuf's DecodeError; a bad message must not stop the service
            self.on_bad_event()
            _log.error("skipping an undecodable message at %s: %s", where, e)
            return
        if not event.base_path:
            self.on_bad_event()
            _log.error("skipping a CommitEvent without base_path at %s", where)
            return
        self.on_event()
        key = event.table_id or event.base_path
        p = self.pending.get(key)
        if p is None:
            p = self.pending[key] = PendingTable(key, event.base_path, time.monotonic())
            if event.HasField("committed_at"):
                p.committed_at = event.committed_at.ToDatetime().timestamp()
        p.base_path = event.base_path
        if event.HasField("instant"):
            p.latest_instant = max(p.latest_instant, event.instant.instant_time)
            p.actions.add(event.instant.action)
        tp = (msg.topic(), msg.partition())
        p.offsets[tp] = min(p.offsets.get(tp, msg.offset()), msg.offset())

    def commit_offsets(self) -> None:
        """Commit, per partition, up to the oldest offset of a table still pending (or all consumed)."""
        if self.consumer is None:
            return
        from confluent_kafka import TopicPartition

        try:
            positions = self.consumer.position(self.consumer.assignment())
        except Exception:  # no assignment yet
            return
        to_commit = []
        for tp in positions:
            if tp.offset < 0:
                continue
            low = min(
                (
                    p.offsets[(tp.topic, tp.partition)]
                    for p in self.pending.values()
                    if (tp.topic, tp.partition) in p.offsets
                ),
                default=tp.offset,
            )
            if self._committed.get((tp.topic, tp.partition)) != low:
                to_commit.append(TopicPartition(tp.topic, tp.partition, low))
        if to_commit:
            try:
                self.consumer.commit(offsets=to_commit, asynchronous=False)
            except Exception as e:  # retried on the next call
                _log.debug("offset commit failed: %s", e)
                return
            for tp in to_commit:
                self._committed[(tp.topic, tp.partition)] = tp.offset


def changes_of(
    event: Any,
    format: str = "latest_state",
    columns: list[str] | None = None,
    meta_columns: bool = True,
) -> Changes:
    """What the instant of a ``CommitEvent`` changed in its table: the records it wrote
    (``latest_state``), or its net change per key (``min_delta``) or the records it inserted (``append_only``).
    Nothing for instants that change no records (a rollback, a compaction, a clean)."""
    if not event.base_path or not event.instant.instant_time:
        raise InvalidInputError(f"commit event {event.event_id!r} names no table path or instant")
    table = HudiTable.open(event.base_path)
    return table.read_changes(
        instant=event.instant.instant_time, format=format, columns=columns, meta_columns=meta_columns
    )
