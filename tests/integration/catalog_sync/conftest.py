"""One real Hive Metastore (Hive 2.3 from PySpark's jars, Derby) per test session."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from catalog_sync_helpers import RecordingClient

from inlet.services.stack.metastore import EmbeddedMetastore

_counter = itertools.count()


@pytest.fixture(scope="session")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedMetastore]:
    hms = EmbeddedMetastore.from_env(tmp_path_factory.mktemp("hms"))
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
