"""Fixtures of a lake and what loads into it, for the integration and the Spark tests (their
conftest modules import them): ``lake`` (a directory under tmp_path), ``coordinator`` (a real
coordinator on the test's database, insecure, loopback, tables under ``lake``; a directory's
conftest may override it) and ``slot`` (an initial load's replication slot name, dropped
afterwards, before the database is)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import RunningServer, serve


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
    name = "load_" + uuid.uuid4().hex[:10]
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
