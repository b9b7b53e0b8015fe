"""Verify fixtures: a replication slot name for the initial load (dropped afterwards, before the
database is); the lake and the coordinator are tests/integration's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest


@pytest.fixture
def slot(pg_url: str) -> Iterator[str]:
    name = "verify_" + uuid.uuid4().hex[:10]
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
