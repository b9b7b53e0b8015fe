"""Spark reads (``spark.read.format("hudi")``) of every table Apache Hudi wrote under
``../shared/testdata/hudi-tables`` equal the ``hudi`` reader's (hudi-rs 0.5.0, file group reader
versions 1 and 2): the snapshot, every completed instant (time travel) and, for Merge-on-Read
tables, the read-optimized view. One Spark input partition per file slice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from test_spark_read import check_equals_hudi, hudi_rows

from inlet.core import HudiTable
from inlet.core.spark.datasource import register

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

from support.hudi_testdata import COW_TABLES, MOR_TABLES, TableCache, available

pytestmark = pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> TableCache:
    return TableCache(tmp_path_factory.mktemp("apache-hudi-tables-spark"))


@pytest.fixture(scope="module")
def hudi_spark(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


@pytest.mark.parametrize("name", COW_TABLES + MOR_TABLES)
def test_spark_reads_equal_hudi_reader(hudi_spark: SparkSession, tables: TableCache, name: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    got = check_equals_hudi(hudi_spark, path, f"{name} snapshot")
    if "empty" not in name:
        assert got, f"{name}: Apache Hudi wrote rows; Spark read none"
        want, _ = hudi_rows(path, "2")
        assert len(got) == len(want)
    df = hudi_spark.read.format("hudi").load(str(path))
    assert df.rdd.getNumPartitions() == max(1, len(table.file_system_view().latest_file_slices()))
    for inst in table.timeline.completed_writes():
        check_equals_hudi(hudi_spark, path, f"{name} as of {inst.time}", as_of=inst.time)
    if name in MOR_TABLES:
        check_equals_hudi(
            hudi_spark, path, f"{name} read_optimized", **{"hoodie.read.use.read_optimized.mode": "true"}
        )
