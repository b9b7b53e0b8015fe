"""One real Hive Metastore (Apache Hive's standalone metastore 4, its catalog in the session's PostgreSQL)
per test session."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from catalog_sync_helpers import RecordingClient, metastore_database

from inlet.services.stack import EmbeddedPostgres
from inlet.services.stack.metastore import EmbeddedMetastore

_counter = itertools.count()


@pytest.fixture(scope="session")
def metastore(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: EmbeddedPostgres
) -> Iterator[EmbeddedMetastore]:
    hms = EmbeddedMetastore.from_env(
        tmp_path_factory.mktemp("hms"), database_url=metastore_database(postgres_server)
    )
    hms.start()
    try:
        yield hms
    finally:
        hms.stop()


@pytest.fixture
def hms(metastore: EmbeddedMetastore) -> Iterator[RecordingClient]:
    with RecordingClient(metastore.uri) as c:
        yield c


@pytest.fixture
def database() -> str:
    """A fresh database name per test (the session's metastore is shared)."""
    return f"lake{next(_counter)}"
