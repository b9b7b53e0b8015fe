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

from compare import completed_writes
from support.apache_hudi import ApacheHudi, ApacheHudiPool, pool

from inlet.core import HudiTable
from inlet.core.read.incremental import EARLIEST

LINES = ("1.0", "1.2")


@pytest.fixture(scope="session")
def apache_hudi() -> Iterator[ApacheHudiPool]:
    with pool() as started:
        yield started


def incremental_begin(oracle: ApacheHudi, table: HudiTable, begin: str) -> str:
    """Inlet's (exclusive) begin for the window Apache Hudi answers to ``begin``.

    Apache Hudi 1.0 takes ``hoodie.datasource.read.begin.instanttime`` as an *inclusive* completion
    time, from 1.1 on exclusive, as Inlet does (docs/table-format.md, "Apache Hudi's readers"): for
    1.0 the window also holds the instant that completed at ``begin``, which is Inlet's window
    beginning at the completion before it."""
    if oracle.version.startswith("1.0") and begin.strip("0"):
        earlier = [i.completion_time for i in completed_writes(table) if i.completion_time < begin]
        return max(earlier, default=EARLIEST)
    return begin
