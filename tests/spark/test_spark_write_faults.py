"""Task failures and the driver's share of a Spark write, in a Spark session of their own.

One subprocess runs a SparkSession with ``local[2,3]`` (2 threads, ``spark.task.maxFailures`` 3:
failed tasks are retried, as on a cluster) and ``spark.driver.maxResultSize=1m``:

- **a task killed mid-write and retried**: writes run with ``hoodie.inlet.spark.crash.at =
  after_data_files``; the first attempt of task 0 dies (``os._exit``, the core's fault injection)
  after writing its data file, as a killed executor would. Spark retries it; the table must read
  back (hudi-rs, both file group readers) exactly as expected, with no file of the failed attempt
  left and no marker directory;
- **nothing proportional to the data passes the driver**: the session refuses to collect more
  than 1 MiB of task results (checked: collecting the input fails), yet writes of a ~8 MB
  DataFrame of hashes (task results are compressed, so the values must not compress) generated
  on the executors (bulk insert, a simple-index upsert joining every key, a bucket-index
  Merge-on-Read upsert) succeed. Collecting or broadcasting the data would fail.

Before its own session, the same process runs ``inlet write`` (the CLI's ``main``) with no Spark
session yet: **the CLI starts a session of its own** from ``INLET_ENGINE`` / ``INLET_SPARK_MASTER``
/ ``INLET_SPARK_CONF``, writes, and stops it (moved here from tests/spark/test_cli_engine.py so the
two share one JVM start; the JVM keeps the CLI's ``spark.driver.memory``, hence 2g there).

The job's writes run 2 tasks per stage (2 shuffle and default-parallelism partitions, was 4): the
first attempt of every writing task dies and each death costs a Python worker restart, so fewer
tasks prove the same thing faster (still two dying per write, on both threads at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import HudiTable, faults
from inlet.core.file_group.view import BaseFile, LogFile, list_data_files

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

JOB = """
import contextlib, io, json, logging, os, sys
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # tests/spark (conftest), tests (support)
base = sys.argv[2]
out = {}

# ---- the CLI with no session in the process: it starts one from the environment and stops it
from pyspark import SparkContext
from inlet.services.cli.main import main as cli

cli_table = base + "/cli"
assert cli(["table", "create", cli_table, "--name", "t", "--record-key", "id"]) == 0
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    code = cli(["write", cli_table, "--op", "insert", "--input", sys.argv[3]])
out["cli"] = {
    "code": code,
    "stdout": printed.getvalue(),
    "stopped": SparkContext._active_spark_context is None,
}

logging.basicConfig(stream=sys.stderr, format="%(name)s %(message)s", force=True)
logging.getLogger("inlet.core").setLevel(logging.INFO)
from conftest import spark_builder

spark = (
    spark_builder(master="local[2,3]", app="inlet-faults")
    .config("spark.driver.maxResultSize", "1m")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.default.parallelism", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("WARN")  # the CLI left its ERROR level on the JVM
from pyspark.sql import functions as F
from inlet.core import spark as inlet_spark


def rows(start, n, version):
    return [(f"k{i:05d}", f"p{i % 3}", version, f"v{version}-{i}") for i in range(start, start + n)]


schema = "key string, part string, ver long, val string"
crash = {"hoodie.inlet.spark.crash.at": "after_data_files"}


def opts(name, **extra):
    return {
        "hoodie.table.name": name,
        "hoodie.datasource.write.recordkey.field": "key",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ver",
        **crash,
        **extra,
    }


def commit(result):
    return {"instant": result.instant_time, "files": sorted(result.files_written)}


# ---- retried tasks: COW simple index (bulk insert path, then the per-file-group path)
cow = base + "/cow"
out["cow"] = [
    commit(inlet_spark.write(spark.createDataFrame(rows(0, 2000, 1), schema), cow,
                             opts("cow", **{"hoodie.datasource.write.operation": "bulk_insert"}))),
    commit(inlet_spark.write(spark.createDataFrame(rows(1500, 1000, 2), schema), cow, opts("cow"))),
]
# ---- retried tasks: MOR bucket index (log files)
mor = base + "/mor"
mor_opts = {"hoodie.datasource.write.table.type": "MERGE_ON_READ", "hoodie.index.type": "BUCKET",
            "hoodie.bucket.index.num.buckets": "4"}
out["mor"] = [
    commit(inlet_spark.write(spark.createDataFrame(rows(0, 1000, 1), schema), mor,
                             opts("mor", **mor_opts, **{"hoodie.datasource.write.operation": "insert"}))),
    commit(inlet_spark.write(spark.createDataFrame(rows(500, 1000, 2), schema), mor, opts("mor", **mor_opts))),
]

# ---- the driver: 1 MiB of results at most
big = (
    spark.range(0, 100_000, numPartitions=4)
    .select(
        F.format_string("b%07d", "id").alias("key"),
        F.concat(F.lit("p"), (F.col("id") % 4).cast("string")).alias("part"),
        F.lit(1).cast("long").alias("ver"),
        F.sha2(F.col("id").cast("string"), 256).alias("val"),
    )
)
try:
    big.collect()
    out["collect_refused"] = False
except Exception as e:
    out["collect_refused"] = "maxResultSize" in str(e)
no_crash = {"hoodie.inlet.spark.crash.at": ""}
big_path = base + "/big"
inlet_spark.write(big, big_path, opts("big", **no_crash, **{"hoodie.datasource.write.operation": "bulk_insert"}))
updated = big.withColumn("ver", F.lit(2).cast("long")).withColumn("val", F.lit("updated"))
out["big_upsert"] = commit(inlet_spark.write(updated, big_path, opts("big", **no_crash)))
big_mor = base + "/big_mor"
inlet_spark.write(big, big_mor, opts("big_mor", **no_crash, **mor_opts, **{"hoodie.datasource.write.operation": "insert"}))
out["big_mor_upsert"] = commit(inlet_spark.write(updated, big_mor, opts("big_mor", **no_crash, **mor_opts)))
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    base = tmp_path_factory.mktemp("faults")
    cli_input = base / "cli-input.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}), cli_input)
    env = {k: v for k, v in os.environ.items() if k not in ("INLET_CRASH_AT", "INLET_SPARK_CONF")}
    # the CLI's session: spark engine and master from the environment (no flags)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        INLET_ENGINE="spark",
        INLET_SPARK_MASTER="local[1]",
        INLET_SPARK_CONF="spark.driver.memory=2g",
    )
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(JOB), str(HERE), str(base), str(cli_input)],
        cwd=str(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-6000:]
    return base, json.loads(lines[-1][len("RESULT ") :]), proc.stderr


def hudi_rows(path: Path, version: str) -> list[tuple[Any, ...]]:
    table = (
        HudiTableBuilder.from_base_uri(str(path))
        .with_hudi_option("hoodie.read.file.group.reader.version", version)
        .build()
    )
    batches = table.read(HudiReadOptions())
    data = pa.Table.from_batches(batches) if batches else pa.table({})
    got = data.select(["key", "part", "ver", "val"]).to_pylist() if batches else []
    return sorted((r["key"], r["part"], r["ver"], r["val"]) for r in got)


def expected(first: range, second: range) -> list[tuple[Any, ...]]:
    rows = {i: (f"k{i:05d}", f"p{i % 3}", 1, f"v1-{i}") for i in first}
    rows.update({i: (f"k{i:05d}", f"p{i % 3}", 2, f"v2-{i}") for i in second})
    return sorted(rows.values())


def _instant_files(table: HudiTable, instant: str) -> set[str]:
    out = set()
    for info in list_data_files(table.storage):
        parsed: BaseFile | LogFile | None = BaseFile.parse(info.path) or LogFile.parse(info.path)
        if parsed is not None and parsed.instant_time == instant:
            out.add(info.path)
    return out


@pytest.mark.parametrize(
    ("name", "first", "second"),
    [("cow", range(0, 2000), range(1500, 2500)), ("mor", range(0, 1000), range(500, 1500))],
)
def test_a_task_killed_mid_write_and_retried_leaves_a_correct_table(
    job: tuple[Path, dict[str, Any], str], name: str, first: range, second: range
) -> None:
    base, result, stderr = job
    # the first attempts really died (the Python worker exited), and Spark retried them
    assert stderr.count("Python worker exited unexpectedly") >= 4, stderr[-4000:]
    assert f"exit code {faults.CRASH_EXIT_CODE}" in stderr or "crashed" in stderr
    # and the commits deleted the files those attempts had written
    assert stderr.count("of failed or duplicate attempts") >= 4, stderr[-4000:]
    path = base / name
    want = expected(first, second)
    for version in ("1", "2"):
        if name == "mor" and version == "1":
            continue  # hudi-rs reader v1 cannot read log-only file groups (the bucket index's)
        assert hudi_rows(path, version) == want, f"hudi-rs v{version}"
    table = HudiTable.open(str(path))
    assert [i.time for i in table.timeline.completed_writes()] == [c["instant"] for c in result[name]]
    assert not table.timeline.pending()
    for c in result[name]:
        # every file the instant's name is on is one its commit lists: the failed attempt's are gone
        assert _instant_files(table, c["instant"]) == set(c["files"]), c["instant"]
        assert not table.storage.exists(f".hoodie/.temp/{c['instant']}")


def test_nothing_proportional_to_the_data_passes_the_driver(job: tuple[Path, dict[str, Any], str]) -> None:
    base, result, _ = job
    assert result["collect_refused"], "the 1 MiB limit must refuse collecting the input (the check's premise)"
    for name in ("big", "big_mor"):
        table = HudiTable.open(str(base / name))
        data = table.read(columns=["key", "ver", "val"])
        assert data.num_rows == 100_000
        assert set(data.column("ver").to_pylist()) == {2}
        assert set(data.column("val").to_pylist()) == {"updated"}
    assert result["big_upsert"]["files"] and result["big_mor_upsert"]["files"]


def test_the_cli_starts_and_stops_a_spark_session_of_its_own(job: tuple[Path, dict[str, Any], str]) -> None:
    """``inlet write`` in a process without a session (moved from test_cli_engine.py): the engine
    and the master come from INLET_ENGINE / INLET_SPARK_MASTER, and the session is stopped after."""
    base, result, stderr = job
    cli = result["cli"]
    assert cli["code"] == 0, stderr[-4000:]
    summary = json.loads(cli["stdout"])
    assert summary["inserts"] == 2
    assert cli["stopped"], "the CLI left its Spark session running"
    table = HudiTable.open(str(base / "cli"))
    assert sorted(r["id"] for r in table.read().to_pylist()) == [1, 2]
    assert [i.action for i in table.timeline.completed_writes()] == ["commit"]
