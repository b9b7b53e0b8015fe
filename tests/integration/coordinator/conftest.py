"""Coordinator fixtures: a real coordinator (gRPC on 127.0.0.1, free port) on a fresh PostgreSQL
database (``pg_url`` from tests/conftest.py), a client, and a lake root under ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import RunningServer, serve
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

StartCoordinator = Callable[..., RunningServer]


@pytest.fixture
def start_coordinator(pg_url: str, lake: Path) -> Iterator[StartCoordinator]:
    """Start coordinators on this test's database (insecure loopback unless told otherwise);
    every one still running is stopped at the end."""
    running: list[RunningServer] = []

    def start(**settings: Any) -> RunningServer:
        values: dict[str, Any] = {
            "listen": "127.0.0.1:0",
            "database_url": pg_url,
            "lake_roots": (str(lake),),
            "insecure": True,
            "janitor_interval_ms": 200,
            "max_workers": 16,
            "db_pool_size": 12,
            "grace_s": 1.0,
        }
        values.update(settings)
        server = serve(CoordinatorConfig(**values))
        running.append(server)
        return server

    yield start
    for server in running:
        server.stop(0)


@pytest.fixture
def coordinator(start_coordinator: StartCoordinator) -> RunningServer:
    return start_coordinator()


@pytest.fixture
def client(coordinator: RunningServer) -> Iterator[CoordinatorClient]:
    with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as c:
        yield c


@pytest.fixture
def protocols() -> Iterator[list[GrpcCommitProtocol]]:
    """Protocols created by a test; their heartbeat threads are closed at the end."""
    made: list[GrpcCommitProtocol] = []
    yield made
    for p in made:
        p.close()


@pytest.fixture
def open_table(protocols: list[GrpcCommitProtocol]) -> Callable[..., HudiTable]:
    """``open_table(client, table_id, path)``: the table with a GrpcCommitProtocol of its own."""

    def open_(client: CoordinatorClient, table_id: str, path: Path | str, **kwargs: Any) -> HudiTable:
        protocol = GrpcCommitProtocol(client, table_id, Storage(str(path)), **kwargs)
        protocols.append(protocol)
        return HudiTable.open(str(path), commit_protocol=protocol)

    return open_
