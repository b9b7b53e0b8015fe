"""A write and a read on a real Spark standalone cluster (a master and a worker process from the
installed PySpark, 127.0.0.1 only), proving nothing assumes ``local[*]``: executors are separate
JVMs started by the worker, with their own Python workers.

The driver runs in a subprocess (``cluster.py``): this test process already holds the
``local[2]`` SparkContext of the other Spark tests, and a process has one SparkContext.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.spark_cluster import StandaloneCluster
from test_spark_read import assert_same_rows, hudi_rows

from inlet.core import HudiTable


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_write_and_read_on_a_standalone_cluster(tmp_path: Path) -> None:
    table_path = tmp_path / "trips"
    out = tmp_path / "result.json"
    cluster = StandaloneCluster(tmp_path / "cluster", cores=2, memory="1g")
    with cluster:
        pids = [p.pid for p in cluster.procs]
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        driver = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("cluster.py")),
                cluster.master_url,
                str(table_path),
                str(out),
            ],
            cwd=str(Path(__file__).parent),
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
            capture_output=True,
            timeout=480,
        )
        assert driver.returncode == 0, driver.stderr.decode()[-5000:]
        worker_log = (tmp_path / "cluster" / "worker.log").read_text()
        assert "Launch command" in worker_log or "Asked to launch executor" in worker_log, (
            "no executor launched"
        )
    assert not any(_alive(p) for p in pids), "master or worker still running"

    result = json.loads(out.read_text())
    assert result["master"] == cluster.master_url
    table = HudiTable.open(str(table_path))
    assert result["input_partitions"] == len(table.file_system_view().latest_file_slices())
    # hand-derived: 300 inserts; the upsert rewrote every 7th id with fare * 10 at ts 2; the data
    # source inserted ids 1000..1029 with fare -1
    fares = {r["id"]: r["fare"] for r in result["rows"]}
    assert len(result["rows"]) == 330 and sorted(fares) == [*range(300), *range(1000, 1030)]
    assert all(fares[i] == (i * 10.0 if i % 7 == 0 else float(i)) for i in range(300))
    assert all(fares[i] == -1.0 for i in range(1000, 1030))
    assert result["sf_rows"] == 110
    assert [i.action for i in table.timeline.completed_writes()] == ["deltacommit"] * 3
    for version in ("1", "2"):
        want, _ = hudi_rows(table_path, version)
        assert_same_rows(
            result["rows"], want, ["id", "city", "ts", "fare", "_hoodie_record_key"], f"v{version}"
        )
