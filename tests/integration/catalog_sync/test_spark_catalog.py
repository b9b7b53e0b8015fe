"""Spark (local[2], Hive catalog on the embedded metastore) reads what catalog sync registered.

Against Hive Metastore 4.0.1 Spark's built-in Hive client (2.3, also in PySpark 4.3) fails: it reads a
table with the ``get_table`` Thrift call, which Hive 4.0.1 removed (HIVE-26537). The session reaches the
metastore through the Hive 3.1.3 client of the pom's ``hive-client`` part instead
(``spark.sql.hive.metastore.version=3.1.3``, ``spark.sql.hive.metastore.jars=path``: docs/catalog.md),
which calls ``get_table_req``.

Spark takes a ``spark.sql.sources.provider=hudi`` table's schema from the ``spark.sql.sources.schema.*``
properties HiveSyncTool writes: the columns below come from those properties (timestamps are ``timestamp``
there, ``bigint`` in the Hive columns), partition columns last.

``SELECT ... FROM db.table`` through Inlet's Python ``hudi`` data source does not work with PySpark 4.3: a
catalog table whose provider is a Python data source reaches the data source with no options at all (not
the table's ``path``), so the reader cannot find the table. Reading the same catalog needs Hudi's Spark
bundle (its ``DefaultSource`` reads ``path`` and ``hoodie.query.as.ro.table``); the xfail below pins the
limitation so a PySpark that lifts it is noticed.
"""

from __future__ import annotations

import datetime
import decimal
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from inlet.core import HudiTable
from inlet.core.spark import datasource
from inlet.services.catalog_sync import MetastoreClient, sync_table
from inlet.services.stack import maven
from inlet.services.stack.metastore import EmbeddedMetastore

pytestmark = pytest.mark.slow  # a Spark session with Hive support


@pytest.fixture(scope="module")
def spark(metastore: EmbeddedMetastore) -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("inlet-catalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.hadoop.hive.metastore.uris", metastore.uri)
        .config("spark.sql.warehouse.dir", str(metastore.warehouse_dir))
        .config("spark.sql.hive.metastore.version", "3.1.3")
        .config("spark.sql.hive.metastore.jars", "path")
        .config(
            "spark.sql.hive.metastore.jars.path",
            ",".join(jar.as_uri() for jar in maven.classpath("hive-client")),
        )
        .enableHiveSupport()
        .getOrCreate()
    )
    datasource.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory, metastore: EmbeddedMetastore) -> Path:
    base = tmp_path_factory.mktemp("spark-catalog") / "kinds"
    t = HudiTable.create(
        str(base),
        name="kinds",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int64()),
                "city": ["x", "y"],
                "ts": pa.array([1, 1], pa.int64()),
                "price": pa.array([decimal.Decimal("1.20")] * 2, pa.decimal128(10, 2)),
                "at": pa.array([datetime.datetime(2024, 1, 1)] * 2, pa.timestamp("us", tz="UTC")),
                "tags": pa.array([["a"], ["b"]]),
                "attrs": pa.array([[("k", 1)], [("k", 2)]], pa.map_(pa.string(), pa.int32())),
                "addr": pa.array([{"street": "x", "zip": 1}] * 2),
            }
        ),
        "insert",
    )
    with MetastoreClient(metastore.uri) as c:
        sync_table(str(base), c, database="sparkdb")
    return base


@pytest.mark.parametrize("name", ["kinds_ro", "kinds_rt", "kinds"])
def test_spark_sees_the_tables_and_their_schema(spark: SparkSession, synced: Path, name: str) -> None:
    assert {r.tableName for r in spark.sql("SHOW TABLES IN sparkdb").collect()} == {
        "kinds_ro",
        "kinds_rt",
        "kinds",
    }
    cols = [(c.name, c.dataType, c.nullable) for c in spark.catalog.listColumns(f"sparkdb.{name}")]
    assert cols == [
        ("_hoodie_commit_time", "string", True),
        ("_hoodie_commit_seqno", "string", True),
        ("_hoodie_record_key", "string", True),
        ("_hoodie_partition_path", "string", True),
        ("_hoodie_file_name", "string", True),
        ("id", "bigint", True),
        ("ts", "bigint", True),
        ("price", "decimal(10,2)", True),
        ("at", "timestamp", True),
        ("tags", "array<string>", True),
        ("attrs", "map<string,int>", True),
        ("addr", "struct<street:string,zip:bigint>", True),
        ("city", "string", True),
    ]


@pytest.mark.xfail(
    strict=True, reason="PySpark 4.3 gives a catalog table's Python data source no options (no path)"
)
def test_select_by_name_with_the_python_data_source(spark: SparkSession, synced: Path) -> None:
    rows = spark.sql("SELECT id, city FROM sparkdb.kinds ORDER BY id").collect()
    assert [(r.id, r.city) for r in rows] == [(1, "x"), (2, "y")]
