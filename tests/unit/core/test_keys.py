"""Record keys and partition paths as Apache Hudi's key generators produce them."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from inlet.core.config import KeyGeneratorType
from inlet.core.errors import InvalidInputError, SchemaError
from inlet.core.keys import (
    KeyGenerator,
    TimestampPartitioning,
    escape_partition_value,
    java_date_format_to_strftime,
    unescape_partition_value,
)


def test_simple_key_is_the_value_as_text() -> None:
    kg = KeyGenerator(("id",))
    t = pa.table({"id": pa.array([1, 22, -3], pa.int64())})
    assert kg.record_keys(t).to_pylist() == ["1", "22", "-3"]


def test_simple_key_refuses_null_and_empty() -> None:
    kg = KeyGenerator(("id",))
    with pytest.raises(InvalidInputError, match="null or empty in 2"):
        kg.record_keys(pa.table({"id": ["a", None, ""]}))


def test_complex_key_format_with_null_and_empty_markers() -> None:
    kg = KeyGenerator(("id", "name"), key_type=KeyGeneratorType.COMPLEX)
    t = pa.table({"id": [1, 2, None], "name": ["Alice", "", "Bob"]})
    assert kg.record_keys(t).to_pylist() == ["id:1,name:Alice", "id:2,name:__empty__", "id:__null__,name:Bob"]
    with pytest.raises(InvalidInputError, match="all record key fields"):
        kg.record_keys(pa.table({"id": [None], "name": pa.array([None], pa.string())}))


def test_booleans_render_like_java() -> None:
    kg = KeyGenerator(("flag",))
    assert kg.record_keys(pa.table({"flag": [True, False]})).to_pylist() == ["true", "false"]


def test_missing_key_column_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="record key field 'id'"):
        KeyGenerator(("id",)).record_keys(pa.table({"x": [1]}))


def test_partition_paths_plain_hive_and_default() -> None:
    t = pa.table({"id": [1, 2, 3], "region": ["eu", None, ""], "day": [1, 2, 3]})
    plain = KeyGenerator(("id",), ("region", "day"), key_type=KeyGeneratorType.COMPLEX)
    assert plain.partition_paths(t).to_pylist() == [
        "eu/1",
        "__HIVE_DEFAULT_PARTITION__/2",
        "__HIVE_DEFAULT_PARTITION__/3",
    ]
    hive = KeyGenerator(("id",), ("region",), hive_style=True)
    assert hive.partition_paths(t).to_pylist() == [
        "region=eu",
        "region=__HIVE_DEFAULT_PARTITION__",
        "region=__HIVE_DEFAULT_PARTITION__",
    ]
    assert hive.partition_values("region=eu") == {"region": "eu"}
    assert hive.partition_values("region=__HIVE_DEFAULT_PARTITION__") == {"region": None}


def test_non_partitioned_paths_are_empty() -> None:
    kg = KeyGenerator(("id",), (), key_type=KeyGeneratorType.NON_PARTITION)
    assert kg.partition_paths(pa.table({"id": [1, 2]})).to_pylist() == ["", ""]


def test_url_encoding_escapes_unsafe_characters() -> None:
    kg = KeyGenerator(("id",), ("path",), url_encode=True)
    t = pa.table({"id": [1], "path": ["a/b c:d=e%f"]})
    (encoded,) = kg.partition_paths(t).to_pylist()
    assert "/" not in encoded and ":" not in encoded and "=" not in encoded
    assert encoded == "a%2Fb c%3Ad%3De%25f"
    assert unescape_partition_value(encoded) == "a/b c:d=e%f"
    assert escape_partition_value("plain-value_1") == "plain-value_1"


def test_timestamp_partitioning_from_epoch_millis_and_timestamps() -> None:
    moment = dt.datetime(2024, 3, 9, 23, 30, tzinfo=dt.UTC)
    millis = int(moment.timestamp() * 1000)
    ts = TimestampPartitioning("EPOCHMILLISECONDS", "yyyy/MM/dd")
    kg = KeyGenerator(("id",), ("ts",), key_type=KeyGeneratorType.TIMESTAMP, timestamp=ts)
    assert kg.partition_paths(pa.table({"id": [1], "ts": [millis]})).to_pylist() == ["2024/03/09"]
    # a time zone east of UTC moves the same instant to the next day
    tokyo = KeyGenerator(
        ("id",),
        ("ts",),
        key_type=KeyGeneratorType.TIMESTAMP,
        timestamp=TimestampPartitioning("EPOCHMILLISECONDS", "yyyy/MM/dd", timezone="Asia/Tokyo"),
    )
    assert tokyo.partition_paths(pa.table({"id": [1], "ts": [millis]})).to_pylist() == ["2024/03/10"]
    col = pa.array([moment], pa.timestamp("us", tz="UTC"))
    hourly = KeyGenerator(
        ("id",),
        ("ts",),
        key_type=KeyGeneratorType.TIMESTAMP,
        timestamp=TimestampPartitioning("SCALAR", "yyyy-MM-dd-HH"),
    )
    assert hourly.partition_paths(pa.table({"id": [1], "ts": col})).to_pylist() == ["2024-03-09-23"]


def test_date_string_partitioning_and_bad_values() -> None:
    ts = TimestampPartitioning("DATE_STRING", "yyyyMMdd", input_format="yyyy-MM-dd HH:mm:ss")
    kg = KeyGenerator(("id",), ("d",), key_type=KeyGeneratorType.TIMESTAMP, timestamp=ts)
    assert kg.partition_paths(pa.table({"id": [1], "d": ["2023-12-31 10:00:00"]})).to_pylist() == ["20231231"]
    with pytest.raises(InvalidInputError, match="does not match date format"):
        kg.partition_paths(pa.table({"id": [1], "d": ["31/12/2023"]}))


def test_java_date_format_translation() -> None:
    assert java_date_format_to_strftime("yyyy/MM/dd HH:mm:ss") == "%Y/%m/%d %H:%M:%S"
    assert java_date_format_to_strftime("yyyy-MM-dd'T'HH") == "%Y-%m-%dT%H"
