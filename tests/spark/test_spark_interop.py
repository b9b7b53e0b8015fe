"""The interoperability suites of the COW and MOR issues, with Spark as the writer.

The scenarios are the suites' own functions (tests/interop/test_cow_interop.py and
test_mor_interop.py), run with harnesses whose writes go through ``inlet.core.spark.write``
(``engine="spark"``, tests/interop/conftest.py). After every commit the harnesses check the
``hudi`` reader (hudi-rs 0.5.0, file group readers 1 and 2) and Inlet's reader against the pandas
models, for the snapshot and as of every completed instant. Chosen to cover every operation on
both table types, both indexes, partitioned and non-partitioned tables and both merge modes,
in a few minutes on two cores.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pyspark.sql import SparkSession

INTEROP = Path(__file__).resolve().parents[1] / "interop"


def _load(name: str, file: str) -> ModuleType:
    """A module of tests/interop under its own name (every conftest.py is 'conftest' to pytest)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, INTEROP / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


harness_mod = _load("inlet_interop_harness", "conftest.py")
cow = _load("inlet_interop_cow", "test_cow_interop.py")
mor = _load("inlet_interop_mor", "test_mor_interop.py")


@pytest.fixture
def spark_harness(spark: SparkSession, tmp_path: Path) -> Callable[..., Any]:
    """The COW suite's harness factory, writing with Spark."""
    count = 0

    def make(**kwargs: Any) -> Any:
        nonlocal count
        count += 1
        h = harness_mod.Harness(tmp_path / f"table{count}", engine="spark", **kwargs)
        assert h.table.engine == "spark"
        return h

    return make


@pytest.fixture
def spark_mor(spark: SparkSession, tmp_path: Path) -> Callable[..., Any]:
    """The MOR suite's harness factory, writing with Spark."""
    count = 0

    def make(**kwargs: Any) -> Any:
        nonlocal count
        count += 1
        h = mor.MorHarness(tmp_path / f"t{count}", **kwargs)
        h.table = harness_mod.EngineTable(h.table, "spark")
        return h

    return make


def _shape(name: str) -> Any:
    return next(s for s in cow.SHAPES if s.name == name)


# ------------------------------------------------------------------------------ Copy-on-Write


@pytest.mark.parametrize(
    ("shape", "mode"),
    [("hive_single", "event_time"), ("bucket_complex_non_partitioned", "commit_time")],
)
def test_cow_every_operation(spark_harness: Callable[..., Any], shape: str, mode: str) -> None:
    """Upserts with in-batch duplicates, soft deletes, deletes, inserts creating duplicates,
    bulk_insert, insert_overwrite, delete_partition, insert_overwrite_table, each checked."""
    cow.test_every_operation(spark_harness, _shape(shape), mode)


def test_cow_small_files_and_bulk_insert_sort(spark_harness: Callable[..., Any]) -> None:
    """Tiny file sizes: inserts spread over several file groups and fill small ones later; a
    partitioned non-hive table; GLOBAL_SORT bulk insert and the replace operations."""
    cow.test_many_file_groups_per_partition(spark_harness)
    cow.test_replace_operations_and_time_travel(spark_harness)


def test_cow_schema_evolution(spark_harness: Callable[..., Any]) -> None:
    """Columns added, widened and nested evolution decided on the driver; an incompatible change
    refused with the table left as it was."""
    cow.test_schema_evolution(spark_harness)


# ------------------------------------------------------------------------------ Merge-on-Read


def test_mor_event_time_story(spark_mor: Callable[..., Any]) -> None:
    """Log appends (updates in and out of order, deletes of both kinds, re-inserts) on the simple
    index of a partitioned table, in Avro data blocks (Parquet ones: the bucket-index test below)."""
    h = spark_mor(partitioned=True, block_format="avro")
    mor.run_event_time_story(h, True)
    logs = [s for r in h.results for s in r.metadata.write_stats() if mor.LogFile.parse(s.path)]
    assert logs and any(s.num_deletes for s in logs) and any(s.num_update_writes for s in logs)
    h.check()


def test_mor_bucket_index_and_commit_time(spark_mor: Callable[..., Any]) -> None:
    mor.test_bucket_index_appends_to_log_only_file_groups(spark_mor, mor.COMMIT_TIME_ORDERING, "parquet")
    mor.test_commit_time_ordering(spark_mor)
    mor.test_bucket_index_bulk_insert_writes_base_files(spark_mor)


def test_mor_replace_operations(spark_mor: Callable[..., Any]) -> None:
    """On the bucket index (the simple index's replace operations: tests/interop, one engine's
    file groups being the other's, tests/spark/test_engine_input_parity.py)."""
    mor.test_replace_operations_replace_file_groups_with_logs(spark_mor, "bucket")


def test_mor_small_files_and_read_optimized(spark_mor: Callable[..., Any]) -> None:
    """Inserts fill small file groups without logs (rewritten with their updates); bulk_insert;
    read-optimized reads see base files only."""
    mor.test_small_file_groups_without_logs_take_inserts(spark_mor)
    mor.test_read_optimized_reads_base_files_only(spark_mor)
