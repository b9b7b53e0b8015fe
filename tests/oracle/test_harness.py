"""The oracle harness itself: Apache Hudi writes and reads a table, and a Spark error is an exception."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import LINES
from support.apache_hudi import ApacheHudiError, ApacheHudiPool


@pytest.mark.parametrize("line", LINES)
def test_apache_hudi_writes_and_reads_back(apache_hudi: ApacheHudiPool, line: str, tmp_path: Path) -> None:
    oracle = apache_hudi(line)
    assert oracle.ready["spark"].startswith("3.5.")
    assert oracle.ready["hudi_jar"] == f"hudi-spark3.5-bundle_2.12-{oracle.version}.jar"
    path = tmp_path / "t"
    data = pa.table({"id": [1, 2], "city": ["sf", "nyc"], "ts": [1, 1], "fare": [9.5, 20.0]})
    options = {
        "hoodie.table.name": "smoke",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.table.version": "8",
        # the smoke test proves the protocol, not Apache Hudi's writer: its cheapest write
        "hoodie.metadata.enable": "false",
        "hoodie.embed.timeline.server": "false",
        "hoodie.datasource.write.operation": "bulk_insert",
    }
    oracle.write(path, data, options, mode="overwrite")
    got = oracle.read(path)
    assert got.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    assert sorted(got.select(["id", "city", "fare"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "city": "sf", "fare": 9.5},
        {"id": 2, "city": "nyc", "fare": 20.0},
    ]
    assert (path / ".hoodie" / "hoodie.properties").read_text().count("hoodie.table.version=8") == 1
    changes = oracle.sql(f"SELECT id FROM hudi_table_changes('{path}', 'latest_state', 'earliest')")
    assert sorted(changes.column("id").to_pylist()) == [1, 2]


def test_a_spark_error_is_an_exception_with_sparks_text(apache_hudi: ApacheHudiPool, tmp_path: Path) -> None:
    oracle = apache_hudi("1.0")
    with pytest.raises(ApacheHudiError, match=r"(?i)no_such_column|cannot be resolved|cannot resolve"):
        oracle.sql("SELECT no_such_column FROM range(1)")
    # the process goes on serving
    assert oracle.sql("SELECT 41 + 1 AS answer").to_pylist() == [{"answer": 42}]
