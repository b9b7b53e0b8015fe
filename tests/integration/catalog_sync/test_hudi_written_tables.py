"""Tables written by Apache Hudi (``<repo>/../shared/testdata/hudi-tables``) registered by catalog sync.

The expected Hive columns follow HiveSchemaUtil's rules applied to each table's Avro schema (Spark's byte and
short columns are Avro ints -> ``int``; timestamps ``bigint``; nested records ``struct<...>``); the metastore
lower-cases column names, the Spark schema keeps them.
"""

from __future__ import annotations

import json
import posixpath
import zipfile
from pathlib import Path

import pytest
from catalog_sync_helpers import RecordingClient, columns, partitions, table_params

from inlet.services.catalog_sync import sync_table

TESTDATA = Path(__file__).resolve().parents[3].parent / "shared" / "testdata" / "hudi-tables"

pytestmark = pytest.mark.skipif(not TESTDATA.is_dir(), reason="../shared/testdata/hudi-tables is not present")

TABLES = {
    # zip name: (metastore tables, partition values)
    "sample_table_cow_v8_complexkeygen_hivestyle": (
        ["v8_complexkeygen_hivestyle"],
        {("10", "300"), ("20", "100"), ("30", "100")},
    ),
    "sample_table_cow_v8_nonpartitioned": (["v8_nonpartitioned"], set()),
    "sample_table_cow_v8_simplekeygen_nonhivestyle": (
        ["v8_simplekeygen_nonhivestyle"],
        {("10",), ("20",), ("30",)},
    ),
    "sample_table_cow_v9_txns_simple_meta": (["v9_txns_cow_simple_meta"], {("apac",), ("eu",), ("us",)}),
    "quickstart_trips_table_mor_avro_v6_trips_8i3d": (
        ["v6_trips_8i3d_ro", "v6_trips_8i3d_rt", "v6_trips_8i3d"],
        {("chennai",), ("san_francisco",), ("sao_paulo",)},
    ),
    "sample_table_mor_avro_v9_txns_simple_overwrite": (
        [
            "v9_txns_mor_simple_overwrite_ro",
            "v9_txns_mor_simple_overwrite_rt",
            "v9_txns_mor_simple_overwrite",
        ],
        {("apac",), ("eu",), ("us",)},
    ),
}


def extract(name: str, dest: Path) -> Path:
    with zipfile.ZipFile(TESTDATA / f"{name}.zip") as zf:
        for info in zf.infolist():
            if (
                info.filename.startswith("__MACOSX/")
                or posixpath.basename(info.filename.rstrip("/")) == ".DS_Store"
            ):
                continue
            zf.extract(info, dest)
    (table,) = [p.parent.parent for p in dest.glob("*/.hoodie/hoodie.properties")]
    return table


@pytest.mark.parametrize("name", sorted(TABLES))
def test_apache_hudi_table_is_registered(
    tmp_path: Path, hms: RecordingClient, database: str, name: str
) -> None:
    base = extract(name, tmp_path)
    report = sync_table(str(base), hms, database=database)
    names, values = TABLES[name]
    assert [t.name for t in report.tables] == names
    for table in names:
        assert set(partitions(hms, database, table)) == values
        tbl = hms.get_table(database, table)
        assert tbl.sd.location == f"file:{base}"
        assert table_params(tbl)["last_commit_time_sync"] == report.tables[0].last_commit_time_sync
    # a second sync finds nothing to change
    again = sync_table(str(base), hms, database=database)
    assert not any(t.changed for t in again.tables)


def test_complex_types_of_a_spark_written_table(tmp_path: Path, hms: RecordingClient, database: str) -> None:
    base = extract("sample_table_cow_v8_complexkeygen_hivestyle", tmp_path)
    sync_table(str(base), hms, database=database)
    tbl = hms.get_table(database, "v8_complexkeygen_hivestyle")
    assert columns(tbl.sd.cols)[5:] == [
        ("id", "int"),
        ("name", "string"),
        ("isactive", "boolean"),
        ("intfield", "int"),
        ("longfield", "bigint"),
        ("floatfield", "float"),
        ("doublefield", "double"),
        ("decimalfield", "decimal(10,5)"),
        ("datefield", "date"),
        ("timestampfield", "bigint"),
        ("binaryfield", "binary"),
        ("arrayfield", "array<struct<arr_struct_f1:string,arr_struct_f2:int>>"),
        (
            "mapfield",
            "map<string,struct<map_field_value_struct_f1:double,map_field_value_struct_f2:boolean>>",
        ),
        (
            "structfield",
            "struct<field1:string,field2:int,child_struct:struct<child_field1:double,child_field2:boolean>>",
        ),
    ]
    assert columns(tbl.partitionKeys) == [("bytefield", "int"), ("shortfield", "int")]
    assert partitions(hms, database, "v8_complexkeygen_hivestyle")[("20", "100")] == (
        f"file:{base}/byteField=20/shortField=100"
    )
    spark = json.loads(table_params(tbl)["spark.sql.sources.schema.part.0"])
    assert [f["name"] for f in spark["fields"]][-3:] == ["structField", "byteField", "shortField"]
    assert table_params(tbl)["spark.sql.sources.schema.partCol.0"] == "byteField"
