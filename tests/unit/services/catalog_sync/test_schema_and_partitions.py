"""Hive/Spark schema conversion and partition value extraction, with expectations from Apache Hudi's source
(HiveSchemaUtil, Parquet2SparkSchemaUtils, the PartitionValueExtractor implementations, HoodieSyncConfig)."""

from __future__ import annotations

import pytest

from inlet.services.catalog_sync import CatalogSyncError, SyncConfig
from inlet.services.catalog_sync import partitions as parts
from inlet.services.catalog_sync import schema as sch


def record(*fields: dict) -> dict:
    return {"type": "record", "name": "r", "fields": list(fields)}


def opt(name: str, t: object) -> dict:
    return {"name": name, "type": ["null", t], "default": None}


def test_hive_types_of_avro_types() -> None:
    avro = record(
        opt("i", "int"),
        opt("l", "long"),
        {"name": "req", "type": "string"},
        opt("f", "float"),
        opt("b", "bytes"),
        opt("fx", {"type": "fixed", "name": "fx", "size": 4}),
        opt("e", {"type": "enum", "name": "e", "symbols": ["A"]}),
        opt("dec", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9}),
        opt("ms", {"type": "long", "logicalType": "timestamp-millis"}),
        opt("tm", {"type": "int", "logicalType": "time-millis"}),
        opt("arr_rec", {"type": "array", "items": record(opt("a-b", "int"), opt("c$", "string"))}),
        opt("nested", {"type": "array", "items": {"type": "array", "items": "long"}}),
        opt("m", {"type": "map", "values": {"type": "map", "values": "double"}}),
    )
    fields = sch.avro_to_parquet(avro)
    assert sch.hive_columns(fields, support_timestamp=False) == [
        ("i", "int"),
        ("l", "bigint"),
        ("req", "string"),
        ("f", "float"),
        ("b", "binary"),
        ("fx", "binary"),
        ("e", "string"),
        ("dec", "decimal(38,9)"),
        ("ms", "bigint"),
        ("tm", "int"),
        # struct names: '$' -> '_dollar_', then '-' -> '_' over the struct text
        ("arr_rec", "array<struct<a_b:int,c_dollar_:string>>"),
        ("nested", "array<array<bigint>>"),
        ("m", "map<string,map<string,double>>"),
    ]
    assert dict(sch.hive_columns(fields, support_timestamp=True))["ms"] == "timestamp"
    assert [f.repetition for f in fields[:3]] == ["OPTIONAL", "OPTIONAL", "REQUIRED"]


def test_spark_schema_json_is_hudis_text() -> None:
    avro = record(
        {"name": "id", "type": "long"},
        opt("tags", {"type": "array", "items": "string"}),
        opt("m", {"type": "map", "values": "int"}),
        opt("city", "string"),
    )
    props = sch.spark_table_properties(sch.avro_to_parquet(avro), ["city"], "", 4000)
    assert props == {
        "spark.sql.sources.provider": "hudi",
        "spark.sql.sources.schema.numParts": "1",
        "spark.sql.sources.schema.part.0": (
            '{"type":"struct","fields":['
            '{"name":"id","type":"long","nullable":false,"metadata":{}},'
            '{"name":"tags","type":{"type":"array", "elementType":"string","containsNull":false},'
            '"nullable":true,"metadata":{}},'
            '{"name":"m","type":{"type":"map", "keyType":"string","valueType":"integer","valueContainsNull":false},'
            '"nullable":true,"metadata":{}},'
            '{"name":"city","type":"string","nullable":true,"metadata":{}}]}'
        ),
        "spark.sql.sources.schema.numPartCols": "1",
        "spark.sql.sources.schema.partCol.0": "city",
    }
    # a partition field missing from the schema is a required string at the end; long schemas are split
    small = sch.spark_table_properties(sch.avro_to_parquet(avro), ["dt"], "3.5.1", 50)
    text = "".join(
        small[f"spark.sql.sources.schema.part.{i}"]
        for i in range(int(small["spark.sql.sources.schema.numParts"]))
    )
    assert text.endswith('{"name":"dt","type":"string","nullable":false,"metadata":{}}]}')
    assert all(
        len(small[f"spark.sql.sources.schema.part.{i}"]) <= 50
        for i in range(int(small["spark.sql.sources.schema.numParts"]))
    )
    assert small["spark.sql.create.version"] == "3.5.1"


def test_schema_difference_rules() -> None:
    new = [("a", "bigint"), ("b", "double"), ("s", "struct<x:int,y:int>"), ("c", "string")]
    diff = sch.schema_difference(
        new, {"a": "INT", "b": "float", "s": "struct<x:int>", "p": "string"}, ["p"], "t"
    )
    assert diff.added == [("c", "string")]
    assert [n for n, _, _ in diff.updated] == ["a", "b", "s"]
    with pytest.raises(CatalogSyncError, match="from bigint to int for field a"):
        sch.schema_difference([("a", "int")], {"a": "bigint"}, [], "t")
    with pytest.raises(CatalogSyncError, match="lost column"):
        sch.schema_difference([("a", "int")], {"a": "int", "gone": "string"}, [], "t")


@pytest.mark.parametrize(
    ("extractor", "path", "values"),
    [
        ("MultiPartKeysValueExtractor", "2024/01/02", ["2024", "01", "02"]),
        ("MultiPartKeysValueExtractor", "region=eu/city=paris", ["eu", "paris"]),
        ("MultiPartKeysValueExtractor", "", []),
        ("SinglePartPartitionValueExtractor", "2024/01/02", ["2024-01-02"]),
        ("HiveStylePartitionValueExtractor", "city=sf", ["sf"]),
        ("SlashEncodedDayPartitionValueExtractor", "2024/1/2", ["2024-01-02"]),
        ("SlashEncodedDayPartitionValueExtractor", "y=2024/m=01/d=02", ["2024-01-02"]),
        ("SlashEncodedHourPartitionValueExtractor", "2024/01/02/03", ["2024-01-02-03"]),
        ("org.apache.hudi.hive.NonPartitionedExtractor", "anything", []),
    ],
)
def test_extractors(extractor: str, path: str, values: list[str]) -> None:
    assert parts.extractor_by_name(extractor)(path) == values


def test_extractor_errors_and_names() -> None:
    with pytest.raises(CatalogSyncError, match="not in the form partition_key=partition_value"):
        parts.hive_style("sf")
    with pytest.raises(CatalogSyncError, match="unknown partition value extractor"):
        parts.extractor_by_name("com.example.Mine")
    assert parts.partition_name(["City", "d"], ["a/b", "x=y"]) == "city=a%2Fb/d=x%3Dy"


@pytest.mark.parametrize(
    ("fields", "hive_style", "expected"),
    [
        ("", "false", "NonPartitionedExtractor"),
        ("city", "true", "HiveStylePartitionValueExtractor"),
        ("city", "false", "SinglePartPartitionValueExtractor"),
        ("region,city", "true", "MultiPartKeysValueExtractor"),
    ],
)
def test_default_extractor_inference(fields: str, hive_style: str, expected: str) -> None:
    props = {
        "hoodie.table.name": "t",
        "hoodie.table.partition.fields": fields,
        "hoodie.datasource.write.hive_style_partitioning": hive_style,
    }
    cfg = SyncConfig.resolve(props, "/lake/t")
    assert cfg.extractor_class == f"org.apache.hudi.hive.{expected}"
    assert (cfg.database, cfg.table, cfg.base_path) == ("default", "t", "/lake/t")


def test_config_options() -> None:
    props = {
        "hoodie.table.name": "T",
        "hoodie.database.name": "sales",
        "hoodie.table.partition.fields": "city",
        "hoodie.datasource.write.partitionpath.urlencode": "true",
    }
    cfg = SyncConfig.resolve(props, "/lake/t/", {"hoodie.datasource.hive_sync.table": "trips2"})
    assert (cfg.database, cfg.table, cfg.base_path, cfg.decode_partition) == (
        "sales",
        "trips2",
        "/lake/t",
        True,
    )
    assert cfg.extract("a%2Fb") == ["a/b"]
    with pytest.raises(CatalogSyncError, match="expected true or false"):
        SyncConfig.resolve(props, "/t", {"hoodie.datasource.hive_sync.skip_ro_suffix": "yes"})
    with pytest.raises(CatalogSyncError, match="PARQUET only"):
        SyncConfig.resolve(props, "/t", {"hoodie.datasource.hive_sync.base_file_format": "ORC"})
    # Hudi's other sync keys are accepted (without effect here)
    SyncConfig.resolve(
        props,
        "/t",
        {"hoodie.datasource.hive_sync.enable": "true", "hoodie.datasource.hive_sync.use_jdbc": "false"},
    )


def test_database_of_table_id() -> None:
    from inlet.services.catalog_sync.service import database_of

    assert database_of("sales.trips") == "sales"
    assert database_of("shop.public.orders") == "shop_public"
    assert database_of("Shop-1.t") == "shop_1"
    assert database_of("trips") is None
    assert database_of("/lake/a.b") is None


def test_an_s3_lake_is_registered_with_hadoops_s3a_scheme() -> None:
    props = {"hoodie.table.name": "t", "hoodie.table.partition.fields": "city"}
    cfg = SyncConfig.resolve(props, "s3://lake/app/public/t/")
    assert cfg.base_path == "s3a://lake/app/public/t"  # what Spark, Hive and Trino read through
    assert SyncConfig.resolve(props, "s3a://lake/t").base_path == "s3a://lake/t"
    assert SyncConfig.resolve(props, "/lake/t").base_path == "/lake/t"
