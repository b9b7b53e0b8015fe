"""Catalog sync against a real Hive Metastore: what HiveSyncTool (HMS mode) would register, read back via Thrift.

The expected values are written out from Apache Hudi's source (apache/hudi, hudi-sync):
``HMSDDLExecutor.createTable`` (EXTERNAL=TRUE, tableType EXTERNAL_TABLE, location = base path, columns without
partition fields, partition keys typed from the schema, ``serialization.format=1``), ``HoodieInputFormatUtils``
(input/output formats, ``ParquetHiveSerDe``), ``SparkDataSourceTableUtils`` (``spark.sql.sources.*`` and the
``path`` / ``hoodie.query.as.ro.table`` serde properties), ``Parquet2SparkSchemaUtils`` (the schema JSON),
``HiveSchemaUtil`` (Hive types; timestamps are ``bigint`` unless ``support_timestamp``),
``HoodieHiveSyncClient.updateLastCommitTimeSynced`` (``last_commit_time_sync``,
``last_commit_completion_time_sync``), ``HiveSyncTool.doSync`` (``_ro``, ``_rt`` and the plain name for MOR),
the partition value extractors and ``TimelineUtils.getWrittenPartitions/getDroppedPartitions``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from catalog_sync_helpers import RecordingClient, columns, partitions, table_params

from inlet.core import HudiTable
from inlet.core.keys import TimestampPartitioning
from inlet.services.catalog_sync import (
    CatalogSyncError,
    MetastoreClient,
    MetastoreUnavailableError,
    sync_table,
)
from inlet.services.stack.metastore import EmbeddedMetastore

INPUT = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
RT_INPUT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"

META = [
    ("_hoodie_commit_time", "string"),
    ("_hoodie_commit_seqno", "string"),
    ("_hoodie_record_key", "string"),
    ("_hoodie_partition_path", "string"),
    ("_hoodie_file_name", "string"),
]
META_SPARK = (
    '{"name":"_hoodie_commit_time","type":"string","nullable":true,"metadata":{}},'
    '{"name":"_hoodie_commit_seqno","type":"string","nullable":true,"metadata":{}},'
    '{"name":"_hoodie_record_key","type":"string","nullable":true,"metadata":{}},'
    '{"name":"_hoodie_partition_path","type":"string","nullable":true,"metadata":{}},'
    '{"name":"_hoodie_file_name","type":"string","nullable":true,"metadata":{}}'
)


def spark_field(name: str, type_: str) -> str:
    return f'{{"name":"{name}","type":{type_},"nullable":true,"metadata":{{}}}}'


def spark_schema(*fields: str) -> str:
    return '{"type":"struct","fields":[' + ",".join([META_SPARK, *fields]) + "]}"


def rows(ids: list[int], city: list[str], ts: int = 1, **extra: list[Any]) -> pa.Table:
    cols: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "city": city,
        "ts": pa.array([ts] * len(ids), pa.int64()),
        "fare": [float(i) for i in ids],
    }
    cols.update(extra)
    return pa.table(cols)


def last_commit(t: HudiTable) -> tuple[str, str]:
    commits = [
        i for i in t.instants() if i.is_completed and i.action in ("commit", "deltacommit", "replacecommit")
    ]
    assert commits
    return commits[-1].time, max(str(i.completion_time) for i in commits)


def sync(path: Path, client: MetastoreClient, db: str, **options: str) -> dict[str, Any]:
    client.reset_counts()
    return sync_table(str(path), client, database=db, options=options).to_dict()


def check_table(
    hms: MetastoreClient,
    db: str,
    name: str,
    base: Path,
    cols: list[tuple[str, str]],
    partition_keys: list[tuple[str, str]],
    spark: str,
    t: HudiTable,
    *,
    input_format: str = INPUT,
    read_optimized: bool = False,
) -> Any:
    """Everything HiveSyncTool sets on a table, compared exactly."""
    tbl = hms.get_table(db, name)
    instant, completion = last_commit(t)
    assert tbl.tableType == "EXTERNAL_TABLE"
    assert tbl.sd.location == f"file:{base}"
    assert tbl.sd.inputFormat == input_format
    assert tbl.sd.outputFormat == OUTPUT
    assert tbl.sd.serdeInfo.serializationLib == SERDE
    assert tbl.sd.serdeInfo.parameters == {
        "path": str(base),
        "hoodie.query.as.ro.table": "true" if read_optimized else "false",
        "serialization.format": "1",
    }
    assert columns(tbl.sd.cols) == META + cols
    assert columns(tbl.partitionKeys) == partition_keys
    expected = {
        "EXTERNAL": "TRUE",
        "spark.sql.sources.provider": "hudi",
        "spark.sql.sources.schema.numParts": "1",
        "spark.sql.sources.schema.part.0": spark,
        "last_commit_time_sync": instant,
        "last_commit_completion_time_sync": completion,
    }
    if partition_keys:
        expected["spark.sql.sources.schema.numPartCols"] = str(len(partition_keys))
        for i, (k, _) in enumerate(partition_keys):
            expected[f"spark.sql.sources.schema.partCol.{i}"] = k
    assert table_params(tbl) == expected
    return tbl


def check_partition_columns(hms: MetastoreClient, db: str, name: str) -> None:
    """Every partition carries the table's columns, formats and serde (HMSDDLExecutor.addPartitionsToTable)."""
    tbl = hms.get_table(db, name)
    for p in hms.call("get_partitions", db, name, -1):
        assert columns(p.sd.cols) == columns(tbl.sd.cols), p.values
        assert p.sd.inputFormat == tbl.sd.inputFormat
        assert p.sd.serdeInfo.serializationLib == SERDE


# -- Copy-on-Write, hive-style single-field partitions: the whole lifecycle ---------------------------


def test_cow_hive_style_lifecycle(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    base = tmp_path / "trips"
    t = HudiTable.create(
        str(base), name="trips", record_key="id", partition_by="city", ordering_field="ts", hive_style=True
    )
    cols = [("id", "bigint"), ("ts", "bigint"), ("fare", "double")]
    keys = [("city", "string")]
    spark = spark_schema(
        spark_field("id", '"long"'),
        spark_field("ts", '"long"'),
        spark_field("fare", '"double"'),
        spark_field("city", '"string"'),
    )

    # 1. insert -> the table and its partitions are created (full listing: no last_commit_time_sync yet)
    t.write(rows([1, 2], ["sf", "nyc"]), "insert")
    r = sync(base, hms, database)
    assert r["database_created"] is True
    (res,) = r["tables"]
    assert (res["name"], res["kind"], res["created"], res["partition_sync"]) == ("trips", "cow", True, "full")
    assert res["partitions_added"] == ["city=nyc", "city=sf"]
    assert hms.call("get_database", database).description == "automatically created by hoodie"
    check_table(hms, database, "trips", base, cols, keys, spark, t)
    assert partitions(hms, database, "trips") == {
        ("nyc",): f"file:{base}/city=nyc",
        ("sf",): f"file:{base}/city=sf",
    }
    check_partition_columns(hms, database, "trips")

    # 2. a new partition (and an update of an old one) -> incremental: only the written partitions
    t.write(rows([3, 1], ["la", "sf"], ts=2), "upsert")
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert (res["created"], res["partition_sync"], res["partitions_added"]) == (
        False,
        "incremental",
        ["city=la"],
    )
    assert res["partitions_updated"] == [] and res["partitions_dropped"] == []
    looked_up = [args[2] for m, args in hms.log if m == "get_partitions_by_names"]
    assert [sorted(n) for n in looked_up] == [["city=la", "city=sf"]]
    assert "get_partitions" not in r["metastore_calls"]
    check_table(hms, database, "trips", base, cols, keys, spark, t)
    assert set(partitions(hms, database, "trips")) == {("nyc",), ("sf",), ("la",)}

    # 3. delete_partition -> the partition is dropped (TimelineUtils.getDroppedPartitions)
    t.write(None, "delete_partition", partitions=["city=nyc"])
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert res["partitions_dropped"] == ["city=nyc"] and res["partitions_added"] == []
    assert set(partitions(hms, database, "trips")) == {("sf",), ("la",)}
    check_table(hms, database, "trips", base, cols, keys, spark, t)

    # 4. insert_overwrite: rewritten partitions stay (written after their replace), a new one is added
    t.write(rows([4, 5], ["la", "sea"], ts=3), "insert_overwrite")
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert res["partitions_added"] == ["city=sea"] and res["partitions_dropped"] == []
    assert set(partitions(hms, database, "trips")) == {("sf",), ("la",), ("sea",)}
    check_table(hms, database, "trips", base, cols, keys, spark, t)

    # 5. a new column -> added to the table and (CASCADE) to every partition; Spark schema refreshed
    t.write(rows([6], ["sf"], ts=4, tip=[1.5]), "upsert")
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert res["columns_added"] == ["tip"] and res["properties_updated"] is True
    spark2 = spark_schema(
        spark_field("id", '"long"'),
        spark_field("ts", '"long"'),
        spark_field("fare", '"double"'),
        spark_field("tip", '"double"'),
        spark_field("city", '"string"'),
    )
    check_table(hms, database, "trips", base, [*cols, ("tip", "double")], keys, spark2, t)
    check_partition_columns(hms, database, "trips")

    # 6. a sync with nothing new changes nothing but last_commit_time_sync's refresh
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert res["changed"] is False
    assert set(r["metastore_calls"]) <= {"get_database", "get_table_req", "alter_table"}

    # a fresh full sync of the same table into another database holds the same partitions
    other = f"{database}_full"
    sync(base, hms, other)
    assert set(partitions(hms, other, "trips")) == set(partitions(hms, database, "trips"))
    check_table(hms, other, "trips", base, [*cols, ("tip", "double")], keys, spark2, t)


# -- Merge-on-Read: _ro, _rt and the plain name; compaction ----------------------------------------


def test_mor_tables_and_compaction(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    base = tmp_path / "events"
    t = HudiTable.create(
        str(base),
        name="events",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(rows([1, 2], ["eu", "us"]), "insert")
    t.write(rows([1], ["eu"], ts=2), "upsert")
    r = sync(base, hms, database)
    assert [(x["name"], x["kind"], x["created"]) for x in r["tables"]] == [
        ("events_ro", "ro", True),
        ("events_rt", "rt", True),
        ("events", "rt", True),
    ]
    cols = [("id", "bigint"), ("ts", "bigint"), ("fare", "double")]
    keys = [("city", "string")]
    spark = spark_schema(
        spark_field("id", '"long"'),
        spark_field("ts", '"long"'),
        spark_field("fare", '"double"'),
        spark_field("city", '"string"'),
    )
    check_table(hms, database, "events_ro", base, cols, keys, spark, t, read_optimized=True)
    check_table(hms, database, "events_rt", base, cols, keys, spark, t, input_format=RT_INPUT)
    check_table(hms, database, "events", base, cols, keys, spark, t, input_format=RT_INPUT)
    # not hive-style, one field: SinglePartPartitionValueExtractor (value = the path)
    for name in ("events_ro", "events_rt", "events"):
        assert partitions(hms, database, name) == {("eu",): f"file:{base}/eu", ("us",): f"file:{base}/us"}
        check_partition_columns(hms, database, name)

    # compaction commits a `commit`: last_commit_time_sync follows it, partitions stay
    assert t.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"}) is not None
    t.run_compaction()
    r = sync(base, hms, database)
    assert all(not x["partitions_added"] and not x["partitions_dropped"] for x in r["tables"])
    instant, _ = last_commit(t)
    assert next(i for i in t.instants() if i.time == instant).action == "commit"
    for name, fmt, ro in (
        ("events_ro", INPUT, True),
        ("events_rt", RT_INPUT, False),
        ("events", RT_INPUT, False),
    ):
        check_table(hms, database, name, base, cols, keys, spark, t, input_format=fmt, read_optimized=ro)


def test_mor_strategy_and_suffix_options(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    base = tmp_path / "logs"
    t = HudiTable.create(
        str(base),
        name="logs",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(rows([1], ["eu"]), "insert")
    r = sync(base, hms, database, **{"hoodie.datasource.hive_sync.table.strategy": "RO"})
    assert [(x["name"], x["kind"]) for x in r["tables"]] == [("logs", "ro")]
    assert hms.get_table(database, "logs").sd.inputFormat == INPUT
    db2 = f"{database}_b"
    r = sync(base, hms, db2, **{"hoodie.datasource.hive_sync.skip_ro_suffix": "true"})
    assert [(x["name"], x["kind"]) for x in r["tables"]] == [("logs", "ro"), ("logs_rt", "rt")]
    db3 = f"{database}_c"
    r = sync(base, hms, db3, **{"hoodie.meta.sync.sync_snapshot_with_table_name": "false"})
    assert [x["name"] for x in r["tables"]] == ["logs_ro", "logs_rt"]
    db4 = f"{database}_d"
    sync(
        base,
        hms,
        db4,
        **{
            "hoodie.datasource.hive_sync.sync_as_datasource": "false",
            "hoodie.datasource.hive_sync.table_properties": "owner=team\ntier=gold",
        },
    )
    tbl = hms.get_table(db4, "logs_rt")
    assert tbl.sd.serdeInfo.parameters == {"serialization.format": "1", "path": str(base)}
    params = table_params(tbl)
    assert not any(k.startswith("spark.sql") for k in params)
    assert params["owner"] == "team" and params["tier"] == "gold" and params["EXTERNAL"] == "TRUE"
    with pytest.raises(CatalogSyncError, match="unknown sync option"):
        sync(base, hms, db4, **{"hoodie.datasource.hive_sync.no_such_thing": "1"})


# -- partitioning shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize("hive_style", [False, True])
def test_multi_level_partitions(
    tmp_path: Path, hms: RecordingClient, database: str, hive_style: bool
) -> None:
    base = tmp_path / "visits"
    t = HudiTable.create(
        str(base),
        name="visits",
        record_key="id",
        partition_by=["region", "city"],
        ordering_field="ts",
        hive_style=hive_style,
    )
    t.write(
        pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "region": ["eu", "eu", "us"],
                "city": ["paris", "rome", "nyc"],
                "ts": pa.array([1, 1, 1], pa.int64()),
            }
        ),
        "insert",
    )
    r = sync(base, hms, database)
    (res,) = r["tables"]
    fmt = "region={}/city={}" if hive_style else "{}/{}"
    assert res["partitions_added"] == sorted(
        fmt.format(a, b) for a, b in [("eu", "paris"), ("eu", "rome"), ("us", "nyc")]
    )
    spark = spark_schema(
        spark_field("id", '"long"'),
        spark_field("ts", '"long"'),
        spark_field("region", '"string"'),
        spark_field("city", '"string"'),
    )
    check_table(
        hms,
        database,
        "visits",
        base,
        [("id", "bigint"), ("ts", "bigint")],
        [("region", "string"), ("city", "string")],
        spark,
        t,
    )
    # MultiPartKeysValueExtractor: one value per level
    assert partitions(hms, database, "visits") == {
        (a, b): f"file:{base}/{fmt.format(a, b)}" for a, b in [("eu", "paris"), ("eu", "rome"), ("us", "nyc")]
    }
    t.write(None, "delete_partition", partitions=[fmt.format("eu", "rome")])
    r = sync(base, hms, database)
    assert r["tables"][0]["partitions_dropped"] == [fmt.format("eu", "rome")]
    assert set(partitions(hms, database, "visits")) == {("eu", "paris"), ("us", "nyc")}


def test_non_partitioned(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    base = tmp_path / "users"
    t = HudiTable.create(str(base), name="users", record_key="id", ordering_field="ts")
    t.write(
        pa.table({"id": pa.array([1], pa.int64()), "name": ["a"], "ts": pa.array([1], pa.int64())}), "insert"
    )
    r = sync(base, hms, database)
    assert r["tables"][0]["partitions_added"] == []
    spark = spark_schema(
        spark_field("id", '"long"'), spark_field("name", '"string"'), spark_field("ts", '"long"')
    )
    check_table(
        hms, database, "users", base, [("id", "bigint"), ("name", "string"), ("ts", "bigint")], [], spark, t
    )
    assert hms.call("get_partitions", database, "users", -1) == []
    t.write(
        pa.table({"id": pa.array([2], pa.int64()), "name": ["b"], "ts": pa.array([1], pa.int64())}), "upsert"
    )
    r = sync(base, hms, database)
    assert r["tables"][0]["partition_sync"] == "none"
    check_table(
        hms, database, "users", base, [("id", "bigint"), ("name", "string"), ("ts", "bigint")], [], spark, t
    )


# -- types ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("support_timestamp", [False, True])
def test_nested_and_logical_types(
    tmp_path: Path, hms: RecordingClient, database: str, support_timestamp: bool
) -> None:
    base = tmp_path / "kinds"
    t = HudiTable.create(
        str(base), name="kinds", record_key="id", partition_by="day", ordering_field="ts", hive_style=True
    )
    t.write(
        pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "ts": pa.array([1], pa.int64()),
                "qty": pa.array([1], pa.int32()),
                "ok": [True],
                "ratio": pa.array([0.5], pa.float32()),
                "price": pa.array([decimal.Decimal("1.20")], pa.decimal128(10, 2)),
                "at": pa.array([datetime.datetime(2024, 1, 1)], pa.timestamp("us", tz="UTC")),
                "day": pa.array([datetime.date(2024, 1, 1)]),
                "raw": [b"x"],
                "tags": pa.array([["a"]]),
                "attrs": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int32())),
                "addr": pa.array([{"street": "x", "zip": 1}]),
            }
        ),
        "insert",
    )
    opts = {"hoodie.datasource.hive_sync.support_timestamp": "true"} if support_timestamp else {}
    sync(base, hms, database, **opts)
    tbl = hms.get_table(database, "kinds")
    assert columns(tbl.sd.cols) == [
        *META,
        ("id", "bigint"),
        ("ts", "bigint"),
        ("qty", "int"),
        ("ok", "boolean"),
        ("ratio", "float"),
        ("price", "decimal(10,2)"),
        ("at", "timestamp" if support_timestamp else "bigint"),
        ("raw", "binary"),
        ("tags", "array<string>"),
        ("attrs", "map<string,int>"),
        ("addr", "struct<street:string,zip:bigint>"),
    ]
    # a partition field present in the schema keeps its type (HiveSchemaUtil.getPartitionKeyType)
    assert columns(tbl.partitionKeys) == [("day", "date")]
    schema = json.loads(table_params(tbl)["spark.sql.sources.schema.part.0"])
    assert [(f["name"], f["type"]) for f in schema["fields"][5:]] == [
        ("id", "long"),
        ("ts", "long"),
        ("qty", "integer"),
        ("ok", "boolean"),
        ("ratio", "float"),
        ("price", "decimal(10,2)"),
        ("at", "timestamp"),
        ("raw", "binary"),
        ("tags", {"type": "array", "elementType": "string", "containsNull": False}),
        ("attrs", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}),
        (
            "addr",
            {
                "type": "struct",
                "fields": [
                    {"name": "street", "type": "string", "nullable": True, "metadata": {}},
                    {"name": "zip", "type": "long", "nullable": True, "metadata": {}},
                ],
            },
        ),
        ("day", "date"),
    ]
    # Hudi's hand-written JSON, spaces included
    assert (
        '{"type":"array", "elementType":"string","containsNull":false}'
        in table_params(tbl)["spark.sql.sources.schema.part.0"]
    )


# -- incremental cost and schema refusal -------------------------------------------------------------


def test_incremental_sync_touches_only_written_partitions(
    tmp_path: Path, hms: RecordingClient, database: str
) -> None:
    base = tmp_path / "wide"
    t = HudiTable.create(str(base), name="wide", record_key="id", partition_by="p", ordering_field="ts")
    t.write(
        pa.table(
            {
                "id": pa.array(range(40), pa.int64()),
                "p": [f"p{i % 20:02d}" for i in range(40)],
                "ts": pa.array([1] * 40, pa.int64()),
            }
        ),
        "insert",
    )
    r = sync(base, hms, database)
    assert len(r["tables"][0]["partitions_added"]) == 20
    assert r["metastore_calls"]["get_partitions"] == 1
    t.write(
        pa.table(
            {"id": pa.array([3, 100], pa.int64()), "p": ["p03", "p20"], "ts": pa.array([2, 2], pa.int64())}
        ),
        "upsert",
    )
    r = sync(base, hms, database)
    (res,) = r["tables"]
    assert res["partition_sync"] == "incremental"
    assert res["partitions_added"] == ["p20"] and res["partitions_updated"] == []
    calls = r["metastore_calls"]
    assert calls.get("get_partitions", 0) == 0
    assert calls["get_partitions_by_names"] == 1 and calls["add_partitions_req"] == 1
    (names,) = [args[2] for m, args in hms.log if m == "get_partitions_by_names"]
    assert sorted(names) == ["p=p03", "p=p20"]
    (req,) = [args[0] for m, args in hms.log if m == "add_partitions_req"]
    assert [p.values for p in req.parts] == [["p20"]] and req.ifNotExists is True
    assert len(partitions(hms, database, "wide")) == 21


def retype(hms: RecordingClient, database: str, name: str, column: str, hive_type: str) -> None:
    """Give ``column`` another type in the catalog. Hive 4 refuses an ``alter_table`` to a type it deems
    incompatible (``metastore.disallow.incompatible.col.type.changes``, string -> double among them), so
    the table is dropped (EXTERNAL: the files stay) and created again."""
    tbl = hms.get_table(database, name)
    tbl.sd.cols = [c if c.name != column else type(c)(column, hive_type, "") for c in tbl.sd.cols]
    hms.call("drop_table", database, name, False)
    hms.call("create_table", tbl)


def test_incompatible_schema_change_is_refused_before_any_change(
    tmp_path: Path, hms: RecordingClient, database: str
) -> None:
    base = tmp_path / "orders"
    t = HudiTable.create(
        str(base),
        name="orders",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(rows([1], ["eu"]), "insert")
    sync(base, hms, database)
    # the catalog's `orders` table says string where storage has double: double -> string is no widening
    retype(hms, database, "orders", "fare", "string")
    before = {n: table_params(hms.get_table(database, n)) for n in ("orders_ro", "orders_rt", "orders")}
    t.write(rows([2], ["us"], tip=[1.0]), "upsert")  # a new column and a new partition
    with pytest.raises(
        CatalogSyncError, match="could not convert field type from string to double for field fare"
    ):
        sync(base, hms, database)
    after = {n: table_params(hms.get_table(database, n)) for n in ("orders_ro", "orders_rt", "orders")}
    assert after == before  # nothing half-applied: not even the _ro/_rt tables synced before it
    assert set(partitions(hms, database, "orders_ro")) == {("eu",)}
    assert "tip" not in [c.name for c in hms.get_table(database, "orders_ro").sd.cols]
    # widening int -> bigint is allowed (HiveSchemaUtil.isSchemaTypeUpdateAllowed)
    retype(hms, database, "orders", "fare", "double")
    r = sync(base, hms, database)
    assert [x["columns_added"] for x in r["tables"]] == [["tip"], ["tip"], ["tip"]]
    assert all(x["partitions_added"] == ["us"] for x in r["tables"])


# -- the CLI ----------------------------------------------------------------------------------------


def test_cli_sync_prints_changes(tmp_path: Path, metastore: EmbeddedMetastore, database: str) -> None:
    base = tmp_path / "cli"
    t = HudiTable.create(str(base), name="cli", record_key="id", partition_by="city", ordering_field="ts")
    t.write(rows([1], ["sf"]), "insert")
    cmd = [
        sys.executable,
        "-m",
        "inlet.services.cli.main",
        "catalog",
        "sync",
        str(base),
        "--metastore",
        metastore.uri,
        "--database",
        database,
        "--table",
        "cli_trips",
        "--option",
        "hoodie.datasource.hive_sync.support_timestamp=true",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["database"] == database
    assert [(x["name"], x["created"], x["partitions_added"]) for x in out["tables"]] == [
        ("cli_trips", True, ["sf"])
    ]
    bad = subprocess.run(
        [*cmd[:-2], "--option", "hoodie.datasource.hive_sync.mode=jdbc"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("inlet: error:") and "only hms" in bad.stderr


# -- a sync cut short -------------------------------------------------------------------------------


class CrashingClient(MetastoreClient):
    """Fails (as a lost connection would) on the n-th call of ``method``."""

    def __init__(self, uri: str, method: str, nth: int) -> None:
        super().__init__(uri)
        self.method, self.nth, self.seen = method, nth, 0

    def call(self, method: str, *args: Any) -> Any:
        if method == self.method:
            self.seen += 1
            if self.seen == self.nth:
                self.close()
                raise MetastoreUnavailableError(f"simulated crash before {method} #{self.nth}")
        return super().call(method, *args)


@pytest.mark.parametrize(
    ("method", "nth"),
    [("add_partitions_req", 2), ("alter_table", 1), ("alter_table", 3), ("drop_partition_by_name", 1)],
)
def test_a_sync_cut_short_is_completed_by_the_next(
    tmp_path: Path, metastore: EmbeddedMetastore, hms: RecordingClient, database: str, method: str, nth: int
) -> None:
    base = tmp_path / "cut"
    t = HudiTable.create(
        str(base),
        name="cut",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    t.write(rows([1, 2], ["eu", "us"]), "insert")
    sync(base, hms, database)
    t.write(rows([3], ["asia"], ts=2, tip=[1.0]), "upsert")
    t.write(None, "delete_partition", partitions=["us"])
    with CrashingClient(metastore.uri, method, nth) as crashing, pytest.raises(MetastoreUnavailableError):
        sync_table(str(base), crashing, database=database)
    sync(base, hms, database)  # the retry
    fresh = f"{database}_fresh"
    sync(base, hms, fresh)
    for name in ("cut_ro", "cut_rt", "cut"):
        ours, full = hms.get_table(database, name), hms.get_table(fresh, name)
        assert columns(ours.sd.cols) == columns(full.sd.cols)
        assert table_params(ours) == table_params(full)
        assert ours.sd.serdeInfo.parameters == full.sd.serdeInfo.parameters
        assert (
            partitions(hms, database, name)
            == partitions(hms, fresh, name)
            == {
                ("eu",): f"file:{base}/eu",
                ("asia",): f"file:{base}/asia",
            }
        )
        check_partition_columns(hms, database, name)


# -- key generators: timestamp-based paths, URL-encoded paths -----------------------------------------


def test_timestamp_and_url_encoded_partitions(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    days = tmp_path / "days"
    t = HudiTable.create(
        str(days),
        name="days",
        record_key="id",
        partition_by="ts",
        ordering_field="ts",
        timestamp=TimestampPartitioning("EPOCHMILLISECONDS", "yyyy/MM/dd", timezone="UTC"),
    )
    t.write(
        pa.table(
            {"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1704153600000, 1704240000000], pa.int64())}
        ),
        "insert",
    )
    r = sync(days, hms, database)
    assert r["tables"][0]["partitions_added"] == ["2024/01/02", "2024/01/03"]
    # one partition field, not hive-style: SinglePartPartitionValueExtractor ('/' -> '-'); the key keeps the
    # field's type (HiveSchemaUtil.getPartitionKeyType)
    assert columns(hms.get_table(database, "days").partitionKeys) == [("ts", "bigint")]
    assert partitions(hms, database, "days") == {
        ("2024-01-02",): f"file:{days}/2024/01/02",
        ("2024-01-03",): f"file:{days}/2024/01/03",
    }

    enc = tmp_path / "enc"
    u = HudiTable.create(
        str(enc), name="enc", record_key="id", partition_by="city", ordering_field="ts", url_encode=True
    )
    u.write(
        pa.table(
            {"id": pa.array([1, 2], pa.int64()), "city": ["a/b", "c"], "ts": pa.array([1, 1], pa.int64())}
        ),
        "insert",
    )
    sync(enc, hms, database)
    # hoodie.meta.sync.decode_partition follows hoodie.datasource.write.partitionpath.urlencode
    assert partitions(hms, database, "enc") == {("a/b",): f"file:{enc}/a%2Fb", ("c",): f"file:{enc}/c"}
    u.write(None, "delete_partition", partitions=["a%2Fb"])
    r = sync(enc, hms, database)
    assert r["tables"][0]["partitions_dropped"] == ["a%2Fb"]
    assert set(partitions(hms, database, "enc")) == {("c",)}
    # a full re-listing agrees with the incremental result
    r = sync(enc, hms, database, **{"hoodie.meta.sync.incremental": "false"})
    assert r["tables"][0]["partition_sync"] == "full" and not r["tables"][0]["changed"]


def test_a_table_on_s3_is_registered_at_its_s3a_location(
    s3_lake: str, hms: RecordingClient, database: str
) -> None:
    """Table and partitions at the ``s3a://`` locations HiveSyncTool registers; the embedded metastore
    (no hadoop-aws in PySpark's jars) records them without reaching the store."""
    t = HudiTable.create(s3_lake, name="trips", record_key="id", ordering_field="ts", partition_by="city")
    t.write(rows([1, 2], ["sf", "ny"]), "insert")
    sync_table(s3_lake, hms, database=database, options={})
    location = "s3a://" + s3_lake.removeprefix("s3://")
    assert hms.get_table(database, "trips").sd.location == location
    parts = hms.call("get_partitions", database, "trips", -1)
    assert sorted(p.sd.location for p in parts) == [f"{location}/ny", f"{location}/sf"]
