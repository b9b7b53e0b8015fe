"""The lake of these tests is on S3: ``lake`` (the root of the ``coordinator`` fixture) is ``s3_lake``
(tests/integration/conftest.py: a SeaweedFS server per module, a fresh prefix per test)."""

from __future__ import annotations

import pytest


@pytest.fixture
def lake(s3_lake: str) -> str:
    """The lake root of the ``coordinator`` fixture (tests/integration/conftest.py): on S3 here."""
    return s3_lake
