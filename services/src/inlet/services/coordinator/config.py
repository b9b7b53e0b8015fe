"""The coordinator's settings: one dataclass, each field from a flag or an ``INLET_COORDINATOR_*`` variable.

:data:`SETTINGS` declares every setting once as a :class:`inlet.services.runtime.Setting` (flag,
environment variable, type, default, help), like every other service: the CLI builds its parser
from it and :meth:`CoordinatorConfig.from_env` reads the variables alone.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from inlet.services.kafka_topics import (
    DEFAULT_CLEANUP_POLICY,
    DEFAULT_RETENTION_BYTES,
    DEFAULT_RETENTION_MS,
    TOPIC_SETTINGS,
    TopicRetention,
)
from inlet.services.runtime import Setting, SettingsError, resolve

ENV_PREFIX = "INLET_COORDINATOR_"
DEFAULT_LISTEN = "127.0.0.1:50551"
DEFAULT_HEARTBEAT_TIMEOUT_MS = 60_000
DEFAULT_LOCK_LEASE_MS = 30_000
DEFAULT_JANITOR_INTERVAL_MS = 5_000
DEFAULT_TOPIC = "inlet.commits"
DEFAULT_METRICS_LISTEN = "127.0.0.1:0"  # the command's default; a CoordinatorConfig made in code serves none


class ConfigError(ValueError):
    """A coordinator setting is missing, malformed or inconsistent with another one."""


SETTINGS: tuple[Setting, ...] = (
    Setting("listen", "--listen", "address to serve on", default=DEFAULT_LISTEN, metavar="HOST:PORT"),
    Setting(
        "database_url",
        "--database-url",
        "PostgreSQL URL of the coordinator's state, e.g. postgresql://inlet@db:5432/inlet (required)",
        metavar="URL",
    ),
    Setting(
        "kafka_bootstrap",
        "--kafka-bootstrap",
        "Kafka bootstrap servers for commit events; empty: events stay in the outbox",
        metavar="HOST:PORT",
    ),
    Setting(
        "lake_roots",
        "--lake-root",
        "directory (or URI) under which registered tables must live (repeatable; the variable takes "
        "a comma-separated list; at least one is required)",
        kind="list",
        metavar="PATH",
        env_name="LAKE_ROOT",
    ),
    Setting("tls_cert", "--tls-cert", "PEM certificate chain of the server", metavar="FILE"),
    Setting("tls_key", "--tls-key", "PEM private key of the server", metavar="FILE"),
    Setting(
        "tokens_file",
        "--tokens",
        'JSON file of bearer tokens: {"tokens": [{"token": "...", "tables": ["sales.*"]}]}; reloaded '
        "when it changes (no restart)",
        metavar="FILE",
        env_name="TOKENS",
    ),
    Setting(
        "insecure",
        "--insecure",
        "serve plaintext without TLS (tokens only if --tokens is given); refused unless the listen "
        "address is loopback",
        kind="bool",
    ),
    Setting(
        "heartbeat_timeout_ms",
        "--heartbeat-timeout-ms",
        "default time after a writer's last heartbeat when its instant may be rolled back",
        kind="int",
        default=DEFAULT_HEARTBEAT_TIMEOUT_MS,
        metavar="N",
    ),
    Setting(
        "lock_lease_ms",
        "--lock-lease-ms",
        "default lease of a table lock",
        kind="int",
        default=DEFAULT_LOCK_LEASE_MS,
        metavar="N",
    ),
    Setting(
        "janitor_interval_ms",
        "--janitor-interval-ms",
        "how often expired instants and leases are looked for",
        kind="int",
        default=DEFAULT_JANITOR_INTERVAL_MS,
        metavar="N",
    ),
    Setting("max_workers", "--max-workers", "gRPC worker threads", kind="int", default=32, metavar="N"),
    Setting(
        "db_pool_size",
        "--db-pool-size",
        "PostgreSQL connections at most",
        kind="int",
        default=16,
        metavar="N",
    ),
    Setting("topic", "--topic", "Kafka topic of commit events", default=DEFAULT_TOPIC, metavar="NAME"),
    *TOPIC_SETTINGS,
    Setting(
        "kafka_options",
        "--kafka-option",
        "librdkafka setting KEY=VALUE of the commit-event producer, e.g. security.protocol=SASL_SSL, "
        "sasl.mechanism=SCRAM-SHA-512 (repeatable)",
        kind="pairs",
        default=(),
        metavar="KEY=VALUE",
    ),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "HOST:PORT of /metrics (Prometheus), /livez (the janitor's loop turns) and /readyz (the "
        "database answers); port 0: any free port, named on the serving line; empty: off",
        default=DEFAULT_METRICS_LISTEN,
        metavar="HOST:PORT",
    ),
)


@dataclass(frozen=True)
class CoordinatorConfig:
    listen: str = DEFAULT_LISTEN
    database_url: str = ""
    kafka_bootstrap: str = ""
    lake_roots: tuple[str, ...] = ()
    tls_cert: str | None = None
    tls_key: str | None = None
    tokens_file: str | None = None
    insecure: bool = False
    heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    lock_lease_ms: int = DEFAULT_LOCK_LEASE_MS
    janitor_interval_ms: int = DEFAULT_JANITOR_INTERVAL_MS
    max_workers: int = 32
    db_pool_size: int = 16
    topic: str = DEFAULT_TOPIC
    kafka_options: tuple[str, ...] = ()  # KEY=VALUE librdkafka settings of the event producer
    topic_retention_ms: int = DEFAULT_RETENTION_MS  # Kafka's retention of the commits topic it creates
    topic_retention_bytes: int = DEFAULT_RETENTION_BYTES
    topic_cleanup_policy: str = DEFAULT_CLEANUP_POLICY
    metrics_listen: str = ""  # HOST:PORT of /metrics, /livez, /readyz; empty: none
    # not settable from the command line: how long a stop waits for calls in progress
    grace_s: float = field(default=5.0, compare=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> CoordinatorConfig:
        """Settings from ``INLET_COORDINATOR_*`` variables, then ``overrides`` (None = not given)."""
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown coordinator setting(s): {', '.join(sorted(unknown))}")
        return cls.from_args(None, environ).with_(**{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_args(
        cls, args: argparse.Namespace | None, environ: Mapping[str, str] | None = None
    ) -> CoordinatorConfig:
        """Each setting from its flag in ``args``, else its variable, else its default."""
        try:
            values = resolve(args, SETTINGS, ENV_PREFIX, environ)
        except SettingsError as e:
            raise ConfigError(str(e)) from None
        return cls(**{k: v for k, v in values.items() if v is not None})

    @property
    def retention(self) -> TopicRetention:
        """Kafka's retention of the commit-event topic the publisher creates."""
        try:
            return TopicRetention(
                self.topic_retention_ms, self.topic_retention_bytes, self.topic_cleanup_policy
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def with_(self, **changes: Any) -> CoordinatorConfig:
        if "lake_roots" in changes:
            changes["lake_roots"] = tuple(changes["lake_roots"])
        return replace(self, **changes)

    def producer_config(self) -> dict[str, str]:
        """``--kafka-option`` as librdkafka settings; a malformed or unknown one is a ConfigError."""
        out: dict[str, str] = {}
        for pair in self.kafka_options:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--kafka-option {pair!r} is not KEY=VALUE")
            out[key.strip()] = value.strip()
        try:  # librdkafka checks names and values when a client is made
            from confluent_kafka import Producer

            Producer({"bootstrap.servers": self.kafka_bootstrap or "127.0.0.1:9", **out})
        except Exception as e:
            raise ConfigError(f"--kafka-option: {e}") from None
        return out

    @property
    def listen_host(self) -> str:
        return split_host_port(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return split_host_port(self.listen)[1]

    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first problem."""
        host, _port = split_host_port(self.listen)
        if not self.database_url:
            raise ConfigError(f"a database URL is required (--database-url or {ENV_PREFIX}DATABASE_URL)")
        if not self.lake_roots:
            raise ConfigError(f"at least one lake root is required (--lake-root or {ENV_PREFIX}LAKE_ROOT)")
        for name in (
            "heartbeat_timeout_ms",
            "lock_lease_ms",
            "janitor_interval_ms",
            "max_workers",
            "db_pool_size",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.metrics_listen:
            try:
                split_host_port(self.metrics_listen)
            except ConfigError as e:
                raise ConfigError(f"--metrics-listen: {e}") from None
        if self.kafka_options:
            self.producer_config()  # a bad option is named now, not by a publisher retrying forever
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together: give both or neither")
        for path in (self.tls_cert, self.tls_key, self.tokens_file):
            if path and not os.path.isfile(path):
                raise ConfigError(f"file not found: {path}")
        if self.insecure:
            if self.tls_cert:
                raise ConfigError(
                    "--insecure serves plaintext; it cannot be combined with --tls-cert/--tls-key"
                )
            if not is_loopback(host):
                raise ConfigError(
                    f"--insecure is refused on {self.listen}: plaintext is allowed only on a loopback "
                    "address (127.0.0.1, ::1, localhost); use --tls-cert/--tls-key and --tokens"
                )
        else:
            if not self.tls_cert:
                raise ConfigError(
                    "TLS is required: give --tls-cert and --tls-key (or --insecure on loopback)"
                )
            if not self.tokens_file:
                raise ConfigError(
                    "token authentication is required: give --tokens (or --insecure on loopback)"
                )


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port); raises :class:`ConfigError`."""
    text = address.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigError(f"invalid listen address {address!r}: expected [IPv6]:PORT")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"invalid listen address {address!r}: expected HOST:PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"invalid port in listen address {address!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"invalid port in listen address {address!r}: {port}")
    return host, port


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
