"""The Spark engine checks write options before anything happens, as the local engine does
(tests/unit/core/test_write_options.py): a malformed value raises ``InvalidOptionError`` (an
``InvalidInputError``) naming key and value, and the table is left as it was: no new instant (no
requested/inflight/rollback file), no heartbeat, no data file, the same rows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from inlet.core import HudiTable
from inlet.core import spark as inlet_spark
from inlet.core.errors import InvalidInputError, InvalidOptionError
from inlet.core.timeline.instant import State

HEARTBEAT = "hoodie.client.heartbeat.interval_in_ms"
TRIPS = "uuid string, city string, ts long, fare double"
OPTIONS = {
    "hoodie.table.name": "trips",
    "hoodie.datasource.write.recordkey.field": "uuid",
    "hoodie.datasource.write.partitionpath.field": "city",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
}


def table_files(path: str) -> dict[str, bytes]:
    root = Path(path)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_rows(path: str) -> list[dict[str, Any]]:
    return sorted(HudiTable.open(path).read(columns=["uuid", "city", "ts", "fare"]).to_pylist(), key=repr)


def refused(key: str, value: str) -> Any:
    return pytest.raises(InvalidInputError, match=rf"{re.escape(key)}='{re.escape(value)}'")


def test_bad_options_are_refused_before_the_spark_write_begins(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")
    df = spark.createDataFrame([("a", "sf", 1, 1.0), ("b", "nyc", 1, 2.0)], TRIPS)
    # a first write with a bad option creates no table either
    with refused(HEARTBEAT, "soon"):
        inlet_spark.write(df, path, {**OPTIONS, HEARTBEAT: "soon"})
    assert not Path(path).exists()
    inlet_spark.write(df, path, OPTIONS)
    before, data = table_files(path), read_rows(path)
    update = spark.createDataFrame([("a", "sf", 2, 9.0), ("c", "la", 2, 3.0)], TRIPS)
    for key, value in [
        (HEARTBEAT, "soon"),
        (HEARTBEAT, "0"),
        ("hoodie.parquet.max.file.size", "big"),
        ("hoodie.parquet.compression.codec", "fastest"),
        ("hoodie.upsert.shuffle.parallelism", "many"),  # Spark knobs, parsed while planning before
        ("hoodie.write.tagged.record.storage.level", "ON_TAPE"),
    ]:
        with refused(key, value) as e:
            inlet_spark.write(update, path, {**OPTIONS, key: value})
        assert isinstance(e.value, InvalidOptionError)
        assert table_files(path) == before, f"{key}={value} left something behind"
        assert read_rows(path) == data

    # the data source (df.write.format("hudi")) checks them before its instant begins too
    from inlet.core.spark.datasource import register

    register(spark)
    insert = spark.createDataFrame([("z", "sf", 5, 7.0)], TRIPS)
    with pytest.raises(Exception, match=rf"{re.escape(HEARTBEAT)}='soon'"):
        (
            insert.write.format("hudi")
            .option("hoodie.datasource.write.operation", "insert")
            .option("hoodie.combine.before.insert", "false")
            .option(HEARTBEAT, "soon")
            .mode("append")
            .save(path)
        )
    assert table_files(path) == before
    assert read_rows(path) == data

    # a Spark compaction run with a bad option leaves its plan requested
    inlet_spark.write(update, path, OPTIONS)
    planned = HudiTable.open(path).schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    assert planned is not None
    scheduled = table_files(path)
    with refused(HEARTBEAT, "soon"):
        inlet_spark.run_compaction(spark, path, planned, {HEARTBEAT: "soon"})
    assert table_files(path) == scheduled
    assert [i.state for i in HudiTable.open(path).instants() if i.time == planned] == [State.REQUESTED]
    done = inlet_spark.run_compaction(spark, path, planned, {HEARTBEAT: "5000"})
    assert done is not None
    assert sorted((r["uuid"], r["fare"]) for r in read_rows(path)) == [("a", 9.0), ("b", 2.0), ("c", 3.0)]
