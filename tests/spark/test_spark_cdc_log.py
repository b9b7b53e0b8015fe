"""The Spark engine writes a CDC-enabled table's CDC log files as the local engine does: Apache Hudi's
table options create the table with CDC on, every Copy-on-Write merge logs its changes in a ``.cdc``
file listed in ``cdcStats``, and the CDC query over the Spark-written table returns the changes a
model derives from the writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from inlet.core import HudiTable
from inlet.core import spark as inlet_spark
from inlet.core.errors import InvalidConfigError
from inlet.core.table.properties import read_properties

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
OPTIONS = {
    "hoodie.table.name": "t",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "part",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.table.cdc.enabled": "true",
    "hoodie.table.cdc.supplemental.logging.mode": "data_before",  # Hudi 0.13's lower-case names parse too
}


def test_spark_engine_writes_cdc_log_files(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    steps: list[tuple[str, list[dict[str, Any]]]] = [
        ("upsert", [{"id": i, "part": f"p{i % 2}", "ts": 1, "v": i} for i in range(6)]),
        ("upsert", [{"id": 1, "part": "p1", "ts": 2, "v": 10}, {"id": 2, "part": "p0", "ts": 2, "v": 20}]),
        ("delete", [{"id": 4, "part": "p0", "ts": 3, "v": 0}]),
        ("upsert", [{"id": 6, "part": "p0", "ts": 4, "v": 6}, {"id": 1, "part": "p1", "ts": 4, "v": 11}]),
    ]
    state: dict[int, dict[str, Any]] = {}
    want: list[tuple[int, str, Any, Any]] = []
    results = []
    for n, (op, rows) in enumerate(steps):
        df = spark.createDataFrame(pa.Table.from_pylist(rows, schema=SCHEMA).to_pandas())
        results.append(inlet_spark.write(df, path, {**OPTIONS, "hoodie.datasource.write.operation": op}))
        for r in sorted(rows, key=lambda r: str(r["id"])):
            if op == "delete":
                want.append((n, "d", state.pop(r["id"]), None))
            else:
                want.append((n, "u" if r["id"] in state else "i", state.get(r["id"]), r))
                state[r["id"]] = r
    props = read_properties(HudiTable.open(path).storage)
    assert (props["hoodie.table.cdc.enabled"], props["hoodie.table.cdc.supplemental.logging.mode"]) == (
        "true",
        "DATA_BEFORE",
    )
    for res in results[1:]:  # every later commit rewrote stored base files: each logged its changes
        assert res is not None
        for s in res.metadata.write_stats():
            assert s.cdc_stats and all(p.endswith(".cdc") and size > 0 for p, size in s.cdc_stats.items())
            assert all((tmp_path / "t" / p).stat().st_size == size for p, size in s.cdc_stats.items())
    index = {r.instant_time: n for n, r in enumerate(results) if r is not None}
    got = HudiTable.open(path).read_changes("000", columns=SCHEMA.names, format="cdc").table.to_pylist()
    decoded = [
        (index[r["ts_ms"]], r["op"], json.loads(r["before"]) if r["before"] else None, json.loads(r["after"]) if r["after"] else None)
        for r in got
    ]  # fmt: skip
    assert decoded == want
    with pytest.raises(InvalidConfigError, match="contradicts"):
        df = spark.createDataFrame(pa.Table.from_pylist(steps[0][1], schema=SCHEMA).to_pandas())
        inlet_spark.write(df, path, {**OPTIONS, "hoodie.table.cdc.supplemental.logging.mode": "OP_KEY_ONLY"})
