"""The CDC consumer service's settings: one table -> ``inlet cdc run`` flags + ``INLET_CDC_*`` variables."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inlet.services.kafka_topics import (
    DEFAULT_CLEANUP_POLICY,
    DEFAULT_RETENTION_BYTES,
    DEFAULT_RETENTION_MS,
    TOPIC_SETTINGS,
    TopicRetention,
)
from inlet.services.runtime import Setting, SettingsError

ENV_PREFIX = "INLET_CDC_"

DEFAULT_GROUP = "inlet-cdc"
DEFAULT_OUTPUT_PREFIX = "inlet.changes"
DEFAULT_DLQ_TOPIC = "inlet.dlq"
DEFAULT_SIGNAL_TABLE = "inlet.debezium_signal"  # Debezium's signal.data.collection (inlet.services.backfill)
DEFAULT_METRICS_LISTEN = "127.0.0.1:9464"
VALUE_FORMATS = ("json", "avro", "auto")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
KEYLESS_CHOICES = ("auto", "whole_row", "skip", "reject")

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "bootstrap",
        "--kafka-bootstrap",
        "Kafka bootstrap servers of the Debezium topics",
        required=True,
        metavar="HOST:PORT[,...]",
        env_name="KAFKA_BOOTSTRAP",
        aliases=("--bootstrap",),
        env_aliases=("BOOTSTRAP",),
    ),
    Setting(
        "output_bootstrap",
        "--output-kafka-bootstrap",
        "Kafka bootstrap servers for change, transaction and dead-letter topics (default: --kafka-bootstrap)",
        metavar="HOST:PORT[,...]",
        env_name="OUTPUT_KAFKA_BOOTSTRAP",
        aliases=("--output-bootstrap",),
        env_aliases=("OUTPUT_BOOTSTRAP",),
    ),
    Setting(
        "topics",
        "--topic",
        "Debezium topic to consume (repeatable or comma-separated)",
        kind="list",
        default=(),
        metavar="TOPIC",
    ),
    Setting(
        "topic_pattern",
        "--topic-pattern",
        "regular expression of the topics to consume, e.g. '^dbserver1\\.' (data, <prefix>.transaction "
        "and heartbeat topics); new matching topics are picked up within a few seconds",
        metavar="REGEX",
    ),
    Setting("group", "--group", "consumer group id", default=DEFAULT_GROUP, metavar="ID"),
    Setting(
        "signal_table",
        "--signal-table",
        "Debezium's signal table (signal.data.collection, SCHEMA.TABLE): its change events are the "
        "connector's signals and incremental-snapshot watermarks, not data, and are dropped ('' keeps them)",
        default=DEFAULT_SIGNAL_TABLE,
        metavar="SCHEMA.TABLE",
    ),
    Setting(
        "value_format",
        "--value-format",
        "Debezium value format: json, avro or auto (Confluent magic byte)",
        default="auto",
        metavar="json|avro|auto",
    ),
    Setting("schema_registry", "--schema-registry", "schema registry URL (Avro)", metavar="URL"),
    Setting(
        "database_url",
        "--database-url",
        "source PostgreSQL (libpq URL) for column types of schemaless JSON records",
        metavar="URL",
    ),
    Setting(
        "keyless",
        "--keyless",
        "a table without a primary key: auto (REPLICA IDENTITY FULL tables keyed by the whole row, "
        "others skipped with one warning; the identity is read through --database-url, without it "
        "every such table is skipped), whole_row, skip, or reject (to the dead-letter topic)",
        default="auto",
        metavar="auto|whole_row|skip|reject",
    ),
    Setting(
        "topic_prefix",
        "--topic-prefix",
        "Debezium topic.prefix (default: the first segment of each topic name)",
        metavar="PREFIX",
    ),
    Setting(
        "output_prefix",
        "--output-prefix",
        "changes go to <prefix>.<table id>",
        default=DEFAULT_OUTPUT_PREFIX,
        metavar="PREFIX",
    ),
    Setting(
        "output_partitions",
        "--output-partitions",
        "partitions of change topics this service creates",
        kind="int",
        default=4,
        metavar="N",
    ),
    Setting(
        "topic_replication_factor",
        "--topic-replication-factor",
        "replication factor of the topics this service creates (change topics, dead letters); -1: the "
        "broker's default.replication.factor. Or create them beforehand",
        kind="int",
        default=-1,
        metavar="N",
    ),
    *TOPIC_SETTINGS,
    Setting(
        "dlq_topic",
        "--dlq-topic",
        "dead-letter topic for records that cannot be decoded or whose output is refused (too large)",
        default=DEFAULT_DLQ_TOPIC,
        metavar="TOPIC",
    ),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "HOST:PORT of /metrics and /healthz (port 0: any free port)",
        default=DEFAULT_METRICS_LISTEN,
        metavar="HOST:PORT",
    ),
    Setting(
        "batch_size", "--batch-size", "records taken per consumer poll", kind="int", default=2000, metavar="N"
    ),
    Setting(
        "batch_timeout_ms",
        "--batch-timeout-ms",
        "longest wait for a poll to fill",
        kind="int",
        default=100,
        metavar="MS",
    ),
    Setting(
        "commit_interval_ms",
        "--commit-interval-ms",
        "how often acknowledged source offsets are committed",
        kind="int",
        default=1000,
        metavar="MS",
    ),
    Setting(
        "max_pending",
        "--max-pending",
        "produced records not yet acknowledged by the broker before consuming pauses",
        kind="int",
        default=200_000,
        metavar="N",
    ),
    Setting("linger_ms", "--linger-ms", "producer linger.ms", kind="int", default=5, metavar="MS"),
    Setting(
        "transaction_end_wait_ms",
        "--transaction-end-wait-ms",
        "how long a transaction's END waits for its changes to be acknowledged before it is relayed "
        "with the counts seen (logged). The changes are read from the table's topic, which may lag the "
        "transaction topic by a backlog; only changes that never come (a restart in the middle of a "
        "transaction, dead-lettered changes) should reach this limit",
        kind="int",
        default=60000,
        metavar="MS",
    ),
    Setting(
        "compression",
        "--compression",
        "producer compression.type of the change topics: none, gzip, snappy, lz4 or zstd (each change "
        "carries its table's schema, so batches compress several-fold and the broker stores less)",
        default="lz4",
        metavar="CODEC",
    ),
    Setting(
        "shutdown_timeout_s",
        "--shutdown-timeout",
        "seconds to wait for outstanding records on stop",
        kind="float",
        default=30.0,
        metavar="S",
    ),
    Setting(
        "kafka_options",
        "--kafka-option",
        "librdkafka setting KEY=VALUE of every Kafka client (consumer, producer, admin; repeatable)",
        kind="pairs",
        default=(),
        metavar="KEY=VALUE",
    ),
    Setting(
        "consumer_options",
        "--consumer-option",
        "librdkafka setting of the Debezium-topic consumer only, over --kafka-option (repeatable)",
        kind="pairs",
        default=(),
        metavar="KEY=VALUE",
    ),
    Setting(
        "producer_options",
        "--producer-option",
        "librdkafka setting of the output producer and admin client only (the --output-kafka-bootstrap "
        "cluster), over --kafka-option (repeatable)",
        kind="pairs",
        default=(),
        metavar="KEY=VALUE",
    ),
)

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def valid_topic_name(name: str) -> bool:
    return bool(_TOPIC_RE.match(name)) and name not in (".", "..")


def _options(raw: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class CdcConfig:
    """The resolved settings of one consumer process."""

    bootstrap: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    output_bootstrap: str | None = None
    group: str = DEFAULT_GROUP
    signal_table: str = DEFAULT_SIGNAL_TABLE
    value_format: str = "auto"
    schema_registry: str | None = None
    database_url: str | None = None
    keyless: str = "auto"
    topic_prefix: str | None = None
    output_prefix: str = DEFAULT_OUTPUT_PREFIX
    output_partitions: int = 4
    topic_replication_factor: int = -1  # of the topics it creates; -1: the broker's default
    topic_retention_ms: int = DEFAULT_RETENTION_MS  # Kafka's retention of the topics it creates
    topic_retention_bytes: int = DEFAULT_RETENTION_BYTES
    topic_cleanup_policy: str = DEFAULT_CLEANUP_POLICY
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    metrics_listen: str = DEFAULT_METRICS_LISTEN
    batch_size: int = 2000
    batch_timeout_ms: int = 100
    commit_interval_ms: int = 1000
    max_pending: int = 200_000
    linger_ms: int = 5
    compression: str = "lz4"
    transaction_end_wait_ms: int = 60000
    shutdown_timeout_s: float = 30.0
    kafka_options: Mapping[str, str] | None = None  # every client
    consumer_options: Mapping[str, str] | None = None  # the Debezium-topic consumers, over kafka_options
    producer_options: Mapping[str, str] | None = None  # the output producer (and admin), over kafka_options

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> CdcConfig:
        v = dict(values)
        v["kafka_options"] = _options(v.get("kafka_options") or (), "--kafka-option")
        v["consumer_options"] = _options(v.get("consumer_options") or (), "--consumer-option")
        v["producer_options"] = _options(v.get("producer_options") or (), "--producer-option")
        v["topics"] = tuple(v.get("topics") or ())
        config = cls(**{k: val for k, val in v.items() if val is not None})
        config.validate()
        return config

    @property
    def retention(self) -> TopicRetention:
        """Kafka's retention of the topics this service creates (change topics, dead letters)."""
        return TopicRetention(self.topic_retention_ms, self.topic_retention_bytes, self.topic_cleanup_policy)

    @property
    def sink_bootstrap(self) -> str:
        return self.output_bootstrap or self.bootstrap

    @property
    def subscription(self) -> list[str]:
        """What the consumer subscribes to: topic names, or ``^regex`` (librdkafka's pattern syntax)."""
        if self.topic_pattern:
            pattern = self.topic_pattern
            return [pattern if pattern.startswith("^") else "^" + pattern]
        return list(self.topics)

    def validate(self) -> None:
        if bool(self.topics) == bool(self.topic_pattern):
            raise SettingsError(
                "give the Debezium topics with --topic (repeatable) or --topic-pattern, not both "
                f"[env: {ENV_PREFIX}TOPICS / {ENV_PREFIX}TOPIC_PATTERN]"
            )
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as e:
                raise SettingsError(f"--topic-pattern: invalid regular expression: {e}") from None
        for t in self.topics:
            if not valid_topic_name(t):
                raise SettingsError(f"--topic: not a Kafka topic name: {t!r}")
        if self.value_format not in VALUE_FORMATS:
            raise SettingsError(f"--value-format: choose json, avro or auto, not {self.value_format!r}")
        if self.keyless not in KEYLESS_CHOICES:
            raise SettingsError(f"--keyless: choose auto, whole_row, skip or reject, not {self.keyless!r}")
        if self.value_format == "avro" and not self.schema_registry:
            raise SettingsError("--value-format avro needs --schema-registry URL")
        if self.compression not in COMPRESSIONS:
            raise SettingsError(
                f"--compression: choose one of {', '.join(COMPRESSIONS)}, not {self.compression!r}"
            )
        if self.signal_table and not re.fullmatch(r"[^.\s]+\.[^.\s]+", self.signal_table):
            raise SettingsError(f"--signal-table: expected SCHEMA.TABLE, got {self.signal_table!r}")
        if not valid_topic_name(self.dlq_topic):
            raise SettingsError(f"--dlq-topic: not a Kafka topic name: {self.dlq_topic!r}")
        if not self.output_prefix or not valid_topic_name(self.output_prefix + ".x"):
            raise SettingsError(f"--output-prefix: not usable in Kafka topic names: {self.output_prefix!r}")
        for name, value, low in (
            ("--output-partitions", self.output_partitions, 1),
            ("--topic-replication-factor", self.topic_replication_factor, -1),
            ("--batch-size", self.batch_size, 1),
            ("--batch-timeout-ms", self.batch_timeout_ms, 0),
            ("--commit-interval-ms", self.commit_interval_ms, 0),
            ("--max-pending", self.max_pending, 1),
            ("--linger-ms", self.linger_ms, 0),
            ("--transaction-end-wait-ms", self.transaction_end_wait_ms, 0),
        ):
            if value < low:
                raise SettingsError(f"{name} must be at least {low}, not {value}")
        if self.topic_replication_factor == 0:
            raise SettingsError("--topic-replication-factor: -1 (the broker's default) or at least 1, not 0")
        try:
            self.retention  # noqa: B018 - validates the three retention settings
        except ValueError as e:
            raise SettingsError(str(e)) from None
        if self.shutdown_timeout_s < 0:
            raise SettingsError("--shutdown-timeout must not be negative")
