"""hoodie.properties: Java properties codec, checksum, and the keys a v8 table carries."""

from __future__ import annotations

import pathlib
import zlib

import pytest

from inlet.core import HudiTable, TableExistsError, TableNotFoundError
from inlet.core.errors import InvalidConfigError
from inlet.core.table.properties import dumps, loads, table_checksum


def test_round_trip_escapes_java_special_characters() -> None:
    props = {
        "a.key": "value with = and : and # and ! and \\ backslash",
        "schema": '{"type":"record","fields":[{"name":"x"}]}',
        "leading": "  two leading spaces",
        "unicode": "caf\u00e9 \u2603",
        "empty": "",
    }
    assert loads(dumps(props)) == props


def test_parses_java_written_file_with_escaped_colons() -> None:
    text = (
        "#Properties saved on 2025-07-13T01:01:15Z\n"
        "#Sun Jul 13 01:01:15 UTC 2025\n"
        'hoodie.table.create.schema={"type"\\:"record","name"\\:"r"}\n'
        "hoodie.table.name = my_table\n"
        "continued=first \\\n    second\n"
    )
    parsed = loads(text)
    assert parsed["hoodie.table.create.schema"] == '{"type":"record","name":"r"}'
    assert parsed["hoodie.table.name"] == "my_table"
    assert parsed["continued"] == "first second"


def test_checksum_is_crc32_of_database_dot_name() -> None:
    # value recorded by Apache Hudi for default.v8_complexkeygen_hivestyle in the shared test data
    assert table_checksum(
        {"hoodie.table.name": "v8_complexkeygen_hivestyle", "hoodie.database.name": "default"}
    ) == (1461121508)
    assert table_checksum({"hoodie.table.name": "t"}) == zlib.crc32(b".t")
    with pytest.raises(InvalidConfigError):
        table_checksum({})


def test_created_table_has_every_v8_key(tmp_path: pathlib.Path) -> None:
    t = HudiTable.create(
        str(tmp_path / "t"),
        name="trips",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        database="db",
    )
    text = (tmp_path / "t" / ".hoodie" / "hoodie.properties").read_text()
    props = loads(text)
    expected = {
        "hoodie.table.name": "trips",
        "hoodie.table.type": "COPY_ON_WRITE",
        "hoodie.table.version": "8",
        "hoodie.table.initial.version": "8",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.path": "timeline",
        "hoodie.table.recordkey.fields": "id",
        "hoodie.table.partition.fields": "city",
        "hoodie.table.precombine.field": "ts",
        "hoodie.record.merge.mode": "EVENT_TIME_ORDERING",
        "hoodie.record.merge.strategy.id": "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5",
        "hoodie.table.keygenerator.type": "SIMPLE",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.populate.meta.fields": "true",
        "hoodie.datasource.write.hive_style_partitioning": "false",
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.database.name": "db",
        "hoodie.table.checksum": str(zlib.crc32(b"db.trips")),
    }
    for key, value in expected.items():
        assert props.get(key) == value, key
    assert (tmp_path / "t" / ".hoodie" / "timeline").is_dir()
    assert t.describe()["table_version"] == 8
    # booleans are written lowercase, as Java's Boolean.toString does
    assert all(v not in ("True", "False") for v in props.values())


def test_create_refuses_existing_table_and_bad_names(tmp_path: pathlib.Path) -> None:
    HudiTable.create(str(tmp_path / "t"), name="t", record_key="id")
    with pytest.raises(TableExistsError):
        HudiTable.create(str(tmp_path / "t"), name="t", record_key="id")
    with pytest.raises(InvalidConfigError, match="table name"):
        HudiTable.create(str(tmp_path / "u"), name="bad name!", record_key="id")
    with pytest.raises(InvalidConfigError, match="ordering field"):
        HudiTable.create(str(tmp_path / "v"), name="v", record_key="id", merge_mode="EVENT_TIME_ORDERING")


def test_open_missing_table(tmp_path: pathlib.Path) -> None:
    with pytest.raises(TableNotFoundError, match="no Hudi table"):
        HudiTable.open(str(tmp_path / "nothing"))
