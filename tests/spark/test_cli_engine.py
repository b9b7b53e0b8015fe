"""``inlet write|read|compaction run --engine spark``: the CLI's operations as Spark jobs.

In-process runs use the session fixture's active Spark session (the CLI leaves an active session
running). That a CLI process starts and stops a session of its own from the environment is proven
in test_spark_write_faults.py (its subprocess runs the CLI first, sharing the JVM start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import HudiTable
from inlet.services.cli.main import main

INLET = str(Path(sys.executable).with_name("inlet"))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    code = main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _hudi_rows(path: str, version: str) -> dict[int, tuple[str, float]]:
    """The independent hudi-rs reader's snapshot (file-group reader ``version``)."""
    table = (
        HudiTableBuilder.from_base_uri(path)
        .with_hudi_option("hoodie.read.file.group.reader.version", version)
        .build()
    )
    batches = table.read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return {r["id"]: (r["city"], r["fare"]) for r in rows}


def test_write_read_compact_with_the_spark_engine(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "trips")
    first = tmp_path / "first.parquet"
    pq.write_table(
        pa.table({"id": [1, 2, 3], "city": ["sf", "nyc", "sf"], "ts": [1, 1, 1], "fare": [1.5, 2.5, 3.5]}),
        first,
    )
    changes = tmp_path / "changes.jsonl"
    changes.write_text(
        '{"id": 1, "city": "sf", "ts": 2, "fare": 9.0}\n{"id": 4, "city": "la", "ts": 2, "fare": 4.0}\n'
    )
    assert main(["table", "create", path, "--name", "trips", "--record-key", "id", "--partition-by", "city",
         "--ordering-field", "ts", "--type", "mor"]) == 0  # fmt: skip
    capsys.readouterr()

    [inserted] = _run(capsys, "write", path, "--op", "insert", "--input", str(first), "--engine", "spark")
    assert (inserted["action"], inserted["inserts"]) == ("deltacommit", 3)
    [upserted] = _run(capsys, "write", path, "--op", "upsert", "--input", str(changes), "--engine", "spark")
    assert (upserted["inserts"], upserted["updates"]) == (1, 1)

    want = {1: ("sf", 9.0), 2: ("nyc", 2.5), 3: ("sf", 3.5), 4: ("la", 4.0)}
    for version in ("1", "2"):
        assert _hudi_rows(path, version) == want
    rows = _run(capsys, "read", path, "--engine", "spark", "--no-meta", "--filter", "city == sf",
                "--columns", "id,fare")  # fmt: skip
    assert sorted((r["id"], r["fare"]) for r in rows) == [(1, 9.0), (3, 3.5)]
    assert _run(capsys, "read", path, "--engine", "spark", "--no-meta", "--limit", "2").__len__() == 2
    as_of = _run(capsys, "read", path, "--engine", "spark", "--as-of", inserted["instant"], "--no-meta",
                 "--columns", "id,fare")  # fmt: skip
    assert sorted((r["id"], r["fare"]) for r in as_of) == [(1, 1.5), (2, 2.5), (3, 3.5)]

    [compacted] = _run(capsys, "compaction", "run", path, "--schedule", "--max-delta-commits", "1",
                       "--engine", "spark")  # fmt: skip
    assert (compacted["action"], compacted["operation"]) == ("commit", "COMPACT")
    ro = _run(capsys, "read", path, "--engine", "spark", "--no-meta", "--query-type", "read_optimized")
    assert {r["id"]: (r["city"], r["fare"]) for r in ro} == want  # compaction folded the logs in
    for version in ("1", "2"):
        assert _hudi_rows(path, version) == want
    local = HudiTable.open(path).read(meta_columns=False).to_pylist()
    assert {r["id"]: (r["city"], r["fare"]) for r in local} == want


def test_cli_process_refuses_a_bad_spark_conf(tmp_path: Path) -> None:
    """The ``inlet`` executable: a malformed --spark-conf is a one-line usage error (exit 2).

    That a CLI process starts a session of its own from INLET_ENGINE / INLET_SPARK_MASTER, writes
    and stops it is proven in tests/spark/test_spark_write_faults.py, whose subprocess runs the CLI
    before its own session (one JVM start for both)."""
    path = str(tmp_path / "t")
    subprocess.run([INLET, "table", "create", path, "--name", "t", "--record-key", "id"], check=True)
    env_master = {
        **os.environ,
        "INLET_SPARK_MASTER": "local[1]",
        "INLET_ENGINE": "spark",
    }
    bad = subprocess.run(
        [INLET, "read", path, "--engine", "spark", "--spark-conf", "not-a-pair"],
        capture_output=True, text=True, env=env_master, timeout=120,
    )  # fmt: skip
    assert (
        bad.returncode == 2
        and "--spark-conf 'not-a-pair' is not key=value" in bad.stderr
        and len(bad.stderr.strip().splitlines()) == 1
    )
