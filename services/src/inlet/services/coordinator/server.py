"""Run the coordinator: gRPC server (+ health, reflection, TLS, token auth), janitor and outbox publisher.

>>> running = serve(CoordinatorConfig(listen="127.0.0.1:0", database_url=url, lake_roots=("/lake",),
...                                   insecure=True))
>>> running.port          # the bound port (0 picks a free one)
>>> running.stop()
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Mapping
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from inlet.proto.coordinator.v1 import coordinator_pb2, coordinator_pb2_grpc
from inlet.services.coordinator import validation
from inlet.services.coordinator.auth import TokenAuthInterceptor, TokenFile
from inlet.services.coordinator.commits import Coordinator
from inlet.services.coordinator.config import ConfigError, CoordinatorConfig
from inlet.services.coordinator.janitor import Janitor
from inlet.services.coordinator.service import CoordinatorServicer
from inlet.services.coordinator.store import Store
from inlet.services.logs import log_event
from inlet.services.runtime import HttpEndpoint, serve_http

log = logging.getLogger("inlet.coordinator")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # commit metadata of large writes exceeds gRPC's 4 MiB default
SERVICE_NAME: str = coordinator_pb2.DESCRIPTOR.services_by_name["CoordinatorService"].full_name


@dataclass
class RunningServer:
    """A started coordinator; :meth:`stop` ends it gracefully (idempotent)."""

    config: CoordinatorConfig
    server: grpc.Server
    port: int
    store: Store
    coordinator: Coordinator
    janitor: Janitor
    health: health.HealthServicer
    publisher: Any | None = None
    auth: TokenAuthInterceptor | None = None  # the bearer tokens (reloaded when their file changes)
    http: HttpEndpoint | None = None  # /metrics, /livez, /readyz (config.metrics_listen)
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> str:
        host = self.config.listen_host
        host = f"[{host}]" if ":" in host else host
        return f"{host}:{self.port}"

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of /metrics, /livez and /readyz (None: not served)."""
        return self.http.address if self.http is not None else None

    def stop(self, grace_s: float | None = None) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        grace = self.config.grace_s if grace_s is None else grace_s
        self.health.enter_graceful_shutdown()
        if self.http is not None:
            self.http.stop()
        self.server.stop(grace).wait()
        self.janitor.stop()
        if self.publisher is not None:
            try:
                self.publisher.stop()
            except Exception:
                log.exception("stopping the outbox publisher failed")
        self.store.close()
        log_event(log, logging.INFO, "coordinator stopped", address=self.address)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server terminates (e.g. :meth:`stop` from a signal handler)."""
        return bool(self.server.wait_for_termination(timeout_s))

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _credentials(config: CoordinatorConfig) -> grpc.ServerCredentials | None:
    if not config.tls_cert or not config.tls_key:
        return None
    with open(config.tls_cert, "rb") as f:
        cert = f.read()
    with open(config.tls_key, "rb") as f:
        key = f.read()
    return grpc.ssl_server_credentials([(key, cert)])


def _start_publisher(config: CoordinatorConfig) -> Any | None:
    if not config.kafka_bootstrap:
        log.warning(
            "no Kafka bootstrap servers: commit events stay in the outbox table until a publisher runs"
        )
        return None
    try:
        outbox = importlib.import_module("inlet.services.coordinator.outbox")
    except ImportError:
        log.warning("the outbox publisher is not available; commit events stay in the outbox table")
        return None
    publisher = outbox.OutboxPublisher(
        config.database_url,
        config.kafka_bootstrap,
        topic=config.topic,
        producer_config=config.producer_config(),
        # created with Kafka's retention settings; one partition (a table's events are keyed by table)
        topic_partitions=1,
        topic_config=config.retention.configs(),
    )
    publisher.start()
    log_event(log, logging.INFO, "outbox publisher started", kafka=config.kafka_bootstrap, topic=config.topic)
    return publisher


def serve(config: CoordinatorConfig) -> RunningServer:
    """Validate ``config``, migrate the database and start serving; returns the running server.

    Raises :class:`ConfigError` for bad settings (e.g. ``--insecure`` on a non-loopback address)
    and :class:`~inlet.services.coordinator.errors.Unavailable` if the database cannot be reached.
    """
    config.validate()
    try:
        roots = validation.lake_roots(config.lake_roots)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    interceptors = []
    auth = TokenAuthInterceptor(TokenFile(config.tokens_file)) if config.tokens_file else None
    if auth is not None:
        interceptors.append(auth)
    credentials = _credentials(config)

    store = Store(config.database_url, pool_size=config.db_pool_size).open()
    started: list[Any] = []
    try:
        store.migrate()
        # lock waits may hold at most half of the worker threads (the others serve every other
        # call, ReleaseLock included); more waiters wait on their clients' side
        coordinator = Coordinator(
            store,
            roots,
            config.heartbeat_timeout_ms,
            config.lock_lease_ms,
            lock_wait_slots=config.max_workers // 2,
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=config.max_workers, thread_name_prefix="inlet-coordinator"
            ),
            interceptors=interceptors,
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        coordinator_pb2_grpc.add_CoordinatorServiceServicer_to_server(
            CoordinatorServicer(coordinator), server
        )
        health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        if credentials is not None:
            port = server.add_secure_port(config.listen, credentials)
        else:
            port = server.add_insecure_port(config.listen)
        if port == 0:
            raise ConfigError(f"cannot listen on {config.listen} (address in use or not local)")
        server.start()
        started.append(server)
        janitor = Janitor(coordinator, config.janitor_interval_ms).start()
        started.append(janitor)
        publisher = _start_publisher(config)
        for name in ("", SERVICE_NAME):
            health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    except BaseException:
        for part in reversed(started):
            part.stop(0) if isinstance(part, grpc.Server) else part.stop()
        store.close()
        raise
    running = RunningServer(
        config, server, port, store, coordinator, janitor, health_servicer, publisher, auth
    )
    if config.metrics_listen:
        try:
            running.http = _serve_metrics(config.metrics_listen, running)
        except OSError as e:
            running.stop(0)
            raise ConfigError(f"cannot serve --metrics-listen {config.metrics_listen}: {e}") from None
    log_event(
        log,
        logging.INFO,
        "coordinator serving",
        address=running.address,
        tls=credentials is not None,
        tokens=bool(config.tokens_file),
        lake_roots=[str(r) for r in roots],
        coordinator_id=coordinator.id,
        metrics=running.metrics_address,
    )
    return running


def _serve_metrics(listen: str, running: RunningServer) -> HttpEndpoint:
    """/metrics (the coordinator's registry), /livez (the janitor's loop turns: the one loop a
    restart would cure) and /readyz (serving, and the database answers)."""

    def ready() -> tuple[bool, Mapping[str, Any]]:
        try:
            running.store.ping()
        except Exception as e:
            return False, {"database": f"unreachable: {e}"}
        return True, {"database": "ok", "address": running.address}

    live = running.janitor.liveness
    return serve_http(listen, running.coordinator.metrics.registry, live, ready=ready, live=live)
