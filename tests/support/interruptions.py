"""What the model-based change-query suites mix into their random commits besides writes: a write
that fails after writing a file group (the core rolls it back: a rollback instant, no change) and
clustering (a replacecommit that rewrites file groups: no change either)."""

from __future__ import annotations

import random
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.write import run as write_run


def failed_write(table: HudiTable, data: pa.Table, operation: str = "upsert") -> None:
    """A write whose first file group is written, then fails: rolled back, the table unchanged."""
    real_base, real_log = write_run.write_file_group, write_run.write_log_group

    def base_then_fail(*args: Any, **kwargs: Any) -> Any:
        real_base(*args, **kwargs)
        raise RuntimeError("injected failure after a file group was written")

    def log_then_fail(*args: Any, **kwargs: Any) -> Any:
        real_log(*args, **kwargs)
        raise RuntimeError("injected failure after a file group was written")

    rollbacks = sum(1 for i in table.instants() if i.action == "rollback")
    with (
        mock.patch.object(write_run, "write_file_group", base_then_fail),
        mock.patch.object(write_run, "write_log_group", log_then_fail),
        pytest.raises(RuntimeError, match="injected failure"),
    ):
        table.write(data, operation)
    after = HudiTable.open(table.base_path)
    assert sum(1 for i in after.instants() if i.action == "rollback" and i.completion_time) == rollbacks + 1


def interrupt(table: HudiTable, rng: random.Random, data: pa.Table, clustering: bool) -> None:
    """Now and then a failed write of ``data``, and (``clustering``: not on bucket-index tables,
    which Hudi does not cluster this way) a clustering of every small file group."""
    if rng.random() < 0.25:
        failed_write(table, data)
    if clustering and rng.random() < 0.25:
        HudiTable.open(table.base_path).cluster(force=True)
