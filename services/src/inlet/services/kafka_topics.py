"""The topics Inlet creates, and how Inlet produces to Kafka: one place for both.

Topics: every topic an Inlet service creates (``inlet.changes.*``, ``inlet.dlq``, ``inlet.commits``)
goes through :func:`ensure_topics`, with the retention of :data:`TOPIC_SETTINGS` as topic configs
(``retention.ms``, ``retention.bytes``, ``cleanup.policy``). Retention is Kafka's own: the broker deletes
old segments; nothing of Inlet's deletes records. The defaults keep a week, as Kafka does, which is how
long a stopped writer may stay down before changes it never read are gone (the lake then needs
``inlet verify --repair`` or a backfill): raise ``--topic-retention-ms`` where outages can last longer.
A topic that already exists keeps its settings (change them with ``kafka-configs``).

Producers: :data:`PRODUCER_SAFETY` is what every Inlet producer starts from. ``acks=all`` waits until
the record is on every in-sync replica; ``enable.idempotence`` makes the broker drop a retried batch it
already has (no duplicates from retries) and keeps a partition's order across retries with up to five
requests in flight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from inlet.core.errors import InletError
from inlet.services.runtime import Setting

#: What every Inlet producer's settings start from (a service may add, never weaken these).
PRODUCER_SAFETY: dict[str, Any] = {"acks": "all", "enable.idempotence": True}

DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # Kafka's own default (log.retention.hours=168)
DEFAULT_RETENTION_BYTES = -1  # per partition; -1: no size limit
DEFAULT_CLEANUP_POLICY = "delete"

#: The retention settings of the services that create topics (``cdc run``, ``coordinator serve``).
TOPIC_SETTINGS = [
    Setting(
        "topic_retention_ms",
        "--topic-retention-ms",
        "retention.ms of the topics this service creates: how long Kafka keeps a record (-1: forever)",
        kind="int",
        default=DEFAULT_RETENTION_MS,
        metavar="MS",
    ),
    Setting(
        "topic_retention_bytes",
        "--topic-retention-bytes",
        "retention.bytes of the topics this service creates: the most a partition keeps before Kafka "
        "deletes its oldest segments (-1: no limit)",
        kind="int",
        default=DEFAULT_RETENTION_BYTES,
        metavar="BYTES",
    ),
    Setting(
        "topic_cleanup_policy",
        "--topic-cleanup-policy",
        "cleanup.policy of the topics this service creates: delete, compact or compact,delete",
        default=DEFAULT_CLEANUP_POLICY,
        metavar="POLICY",
    ),
]

_POLICIES = {"delete", "compact", "compact,delete", "delete,compact"}


@dataclass(frozen=True)
class TopicRetention:
    """Kafka's retention of a topic: how long and how much it keeps, and how it cleans."""

    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = DEFAULT_RETENTION_BYTES
    cleanup_policy: str = DEFAULT_CLEANUP_POLICY

    def __post_init__(self) -> None:
        if self.retention_ms < -1 or self.retention_ms == 0:
            raise ValueError(f"--topic-retention-ms must be positive or -1, got {self.retention_ms}")
        if self.retention_bytes < -1 or self.retention_bytes == 0:
            raise ValueError(f"--topic-retention-bytes must be positive or -1, got {self.retention_bytes}")
        if self.cleanup_policy.replace(" ", "") not in _POLICIES:
            raise ValueError(
                f"--topic-cleanup-policy must be delete, compact or compact,delete, got {self.cleanup_policy!r}"
            )

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> TopicRetention:
        """From the resolved :data:`TOPIC_SETTINGS` (defaults for those missing)."""
        return cls(
            retention_ms=int(values.get("topic_retention_ms", DEFAULT_RETENTION_MS)),
            retention_bytes=int(values.get("topic_retention_bytes", DEFAULT_RETENTION_BYTES)),
            cleanup_policy=str(values.get("topic_cleanup_policy", DEFAULT_CLEANUP_POLICY)),
        )

    def broker_defaults(self) -> dict[str, str]:
        """The same as broker defaults (``log.retention.ms`` ...): for topics others create (Debezium's)."""
        return {f"log.{key}": value for key, value in self.configs().items()}

    def configs(self) -> dict[str, str]:
        """The topic configs (``NewTopic(config=...)``)."""
        return {
            "retention.ms": str(self.retention_ms),
            "retention.bytes": str(self.retention_bytes),
            "cleanup.policy": self.cleanup_policy.replace(" ", ""),
        }


class TopicRefused(InletError):
    """The broker refuses to create a topic as asked (a replication factor above its broker count, a bad
    config, no authorization...): asking again cannot help, so the service stops and says why."""


# What asking again cannot change (anything else, a timeout or a broker away, is worth a retry).
_REFUSALS = frozenset(
    {
        KafkaError.INVALID_REPLICATION_FACTOR,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.INVALID_CONFIG,
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        KafkaError.INVALID_REQUEST,
        KafkaError.POLICY_VIOLATION,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


@dataclass(frozen=True)
class TopicSpec:
    """One topic to create: partitions, replication factor (``None``: the broker's default) and configs."""

    name: str
    partitions: int
    replication_factor: int | None = None
    config: dict[str, str] = field(default_factory=dict)


def ensure_topics(admin: AdminClient, specs: Sequence[TopicSpec], *, timeout_s: float = 30.0) -> set[str]:
    """Create each topic of ``specs`` that does not exist; returns the names created now.

    A topic that exists already (made by another process meanwhile, too) is left as it is. A refusal
    that asking again cannot change raises :class:`TopicRefused` naming the topic and the broker's
    reason; any other error (worth a retry) the :class:`KafkaException` of the first topic that failed.
    """
    if not specs:
        return set()
    topics = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=-1 if s.replication_factor is None else s.replication_factor,
            config=dict(s.config),
        )
        for s in specs
    ]
    futures = admin.create_topics(topics, request_timeout=timeout_s)
    created: set[str] = set()
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.add(name)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError):
                raise
            if error.code() in _REFUSALS:
                raise TopicRefused(
                    f"the broker refuses to create topic {name}: {error.str()} ({error.name()})"
                ) from exc
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created
