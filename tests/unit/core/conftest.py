"""Shared fixtures of the core unit tests: a small partitioned table and independent readers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import tables

from inlet.core import HudiTable


@pytest.fixture
def trips_table(tmp_path: Path) -> Callable[..., HudiTable]:
    """A factory of partitioned tables (``city``) keyed by ``id`` with ordering field ``ts``."""

    def make(name: str = "trips", **kwargs: Any) -> HudiTable:
        opts: dict[str, Any] = {"record_key": "id", "partition_by": "city", "ordering_field": "ts"}
        opts.update(kwargs)
        return HudiTable.create(str(tmp_path / name), name=name, **opts)

    return make


@pytest.fixture
def kit() -> Any:
    """The shared helpers (:mod:`support.tables`), as a fixture for the tests that take them so."""
    return tables
