"""The oracle layer: Apache Hudi itself (1.0.2 and 1.2.0, on Spark 3.5) reads what Inlet writes.

``apache_hudi`` is the session's :class:`support.apache_hudi.ApacheHudiPool`: ``apache_hudi("1.0")``
is Apache Hudi 1.0.2's Spark process, started on first use, stopped at the end of the session. Every
module under tests/oracle/ is one work unit of a parallel run ("oracle" in tests/conftest.py), so each
line's process starts once per run.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.apache_hudi import ApacheHudiPool, pool

LINES = ("1.0", "1.2")


@pytest.fixture(scope="session")
def apache_hudi() -> Iterator[ApacheHudiPool]:
    with pool() as started:
        yield started
