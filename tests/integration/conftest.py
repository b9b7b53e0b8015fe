"""Fixtures shared by the integration tests: ``lake`` (a directory under tmp_path), ``coordinator`` (a real
coordinator on the test's database, insecure, loopback, tables under ``lake``; directories override it
where they need another), ``slot`` (an initial load's replication slot name, dropped afterwards) and
``events_coordinator`` for services that follow commit events."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import RunningServer, serve


@pytest.fixture
def events_coordinator(
    pg_url: str, tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> Iterator[RunningServer]:
    """A coordinator (insecure, loopback) whose commit events go to ``kafka_topic``; tables under tmp_path."""
    server = serve(
        CoordinatorConfig(
            listen="127.0.0.1:0",
            database_url=pg_url,
            lake_roots=(str(tmp_path),),
            insecure=True,
            kafka_bootstrap=kafka_bootstrap,
            topic=kafka_topic,
            grace_s=1.0,
        )
    )
    try:
        yield server
    finally:
        server.stop(0)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    root.mkdir()
    return root


@pytest.fixture
def coordinator(pg_url: str, lake: Path) -> Iterator[RunningServer]:
    server = serve(
        CoordinatorConfig(
            listen="127.0.0.1:0",
            database_url=pg_url,
            lake_roots=(str(lake),),
            insecure=True,
            janitor_interval_ms=200,
            max_workers=16,
            db_pool_size=8,
            grace_s=1.0,
        )
    )
    yield server
    server.stop(0)


@pytest.fixture
def slot(pg_url: str) -> Iterator[str]:
    """A replication slot name for an initial load on the test's database; the slot is dropped
    afterwards, before the database is."""
    name = "load_" + uuid.uuid4().hex[:10]
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
