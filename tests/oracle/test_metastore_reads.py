"""Spark SQL with Apache Hudi's bundle reads, by name, the tables catalog sync registered in Hive Metastore 4.

A Copy-on-Write table and a Merge-on-Read table with log files (both written by Inlet) are synced by
catalog sync into the stack's metastore (Apache Hive's standalone metastore 4.0.1 on PostgreSQL); Apache
Hudi 1.0.2 on Spark 3.5 then answers ``SELECT * FROM db.t``, ``db.t_ro`` and ``db.t_rt`` equal to Inlet's
snapshot and read-optimized reads.

Spark's built-in Hive 2.3 client cannot read a Hive 4 metastore (it calls ``get_table``, gone in Hive 4);
Spark reaches it through the Hive 3.1.3 client of the pom's ``hive-client`` part, loaded in isolation
(``spark.sql.hive.metastore.version=3.1.3``, ``spark.sql.hive.metastore.jars=path``), which calls
``get_table_req`` (docs/catalog.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from compare import META, data_columns, diff, rows
from support.apache_hudi import ApacheHudi, ApacheHudiPool

from inlet.core import HudiTable
from inlet.services.catalog_sync import MetastoreClient, sync_table
from inlet.services.stack import EmbeddedPostgres, maven
from inlet.services.stack.metastore import EmbeddedMetastore

DB = "lake"
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("ts", pa.int64()), ("qty", pa.int64())])


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "day": ["2026-01-0" + str(1 + i % 2) for i in ids],
            "ts": [ts] * len(ids),
            "qty": [i * 10 + ts for i in ids],
        },
        schema=SCHEMA,
    )


def spark_hive_conf(metastore_uri: str, warehouse: Path) -> dict[str, str]:
    """The Spark 3.5 settings that read a Hive Metastore 4 (docs/catalog.md)."""
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": metastore_uri,
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.sql.hive.metastore.version": "3.1.3",
        "spark.sql.hive.metastore.jars": "path",
        "spark.sql.hive.metastore.jars.path": ",".join(
            jar.as_uri() for jar in maven.classpath("hive-client")
        ),
    }


@pytest.fixture(scope="module")
def metastore(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: EmbeddedPostgres
) -> Iterator[EmbeddedMetastore]:
    hms = EmbeddedMetastore.from_env(
        tmp_path_factory.mktemp("hms"), database_url=postgres_server.url(f"hms_{uuid.uuid4().hex[:12]}")
    )
    hms.start()
    try:
        yield hms
    finally:
        hms.stop()


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory, metastore: EmbeddedMetastore) -> dict[str, HudiTable]:
    base = tmp_path_factory.mktemp("oracle-hms")
    cow = HudiTable.create(
        str(base / "items"), name="items", record_key="id", partition_by="day", ordering_field="ts"
    )
    cow.write(_rows(list(range(6)), 1), "insert")
    cow.write(_rows([1, 2, 7], 2), "upsert")
    cow.write(_rows([3], 0).select(["id", "day", "ts"]), "delete")
    mor = HudiTable.create(
        str(base / "orders"),
        name="orders",
        record_key="id",
        partition_by="day",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    mor.write(_rows(list(range(8)), 1), "insert")
    mor.write(_rows([0, 1, 9], 2), "upsert")  # log files
    mor.write(_rows([4], 0).select(["id", "day", "ts"]), "delete")  # a delete block
    with MetastoreClient(metastore.uri) as client:
        for t in (cow, mor):
            sync_table(t.base_path, client, database=DB)
    return {"items": cow, "orders": mor}


@pytest.fixture(scope="module")
def spark(
    apache_hudi: ApacheHudiPool, metastore: EmbeddedMetastore, tmp_path_factory: pytest.TempPathFactory
) -> ApacheHudi:
    return apache_hudi("1.0", conf=spark_hive_conf(metastore.uri, tmp_path_factory.mktemp("warehouse")))


def _assert_same(label: str, got: pa.Table, want: pa.Table) -> None:
    columns = [*META, *data_columns(want)]
    g, w = rows(got, columns), rows(want, columns)
    assert g == w, diff(label, g, w, columns)


def test_the_synced_tables_are_listed(spark: ApacheHudi, tables: dict[str, HudiTable]) -> None:
    names = spark.sql(f"SHOW TABLES IN {DB}").column("tableName").to_pylist()
    assert sorted(names) == ["items", "orders", "orders_ro", "orders_rt"]


@pytest.mark.parametrize(
    ("name", "table", "query_type"),
    [
        ("items", "items", "snapshot"),
        ("orders", "orders", "snapshot"),
        ("orders_rt", "orders", "snapshot"),
        ("orders_ro", "orders", "read_optimized"),
    ],
)
def test_select_by_name_equals_the_lake(
    spark: ApacheHudi, tables: dict[str, HudiTable], name: str, table: str, query_type: str
) -> None:
    t = tables[table]
    got = spark.sql(f"SELECT * FROM {DB}.{name}")
    want = t.read(query_type=query_type)
    if query_type == "read_optimized":  # the log files' records are not in the base files
        assert want.num_rows != t.read().num_rows
    _assert_same(f"{DB}.{name}", got, want)
