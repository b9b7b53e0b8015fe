"""Merge-on-Read compaction as a Spark job equals the local engine's compaction.

A MOR table is written with the Spark engine (updates, both kinds of deletes, inserts), a
compaction is scheduled, and the table is copied: the local engine runs the plan on one copy,
Spark (one task per file group) on the other. Both must read back identically through hudi-rs
(snapshot and read-optimized, meta columns included, the file names aside) and their commits must
carry the same per-file-group counts. A run whose task dies fails, leaves the plan pending and
nothing visible, and runs again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from pyspark.sql import SparkSession

from inlet.core import HudiTable
from inlet.core import spark as inlet_spark
from inlet.core.file_group.view import BaseFile, list_data_files
from inlet.core.timeline.instant import State

SCHEMA = "id long, p string, ts long, v string, _hoodie_is_deleted boolean"


def hudi_read(path: Path, read_optimized: bool = False) -> list[dict[str, Any]]:
    builder = HudiTableBuilder.from_base_uri(str(path)).with_hudi_option(
        "hoodie.read.file.group.reader.version", "2"
    )
    if read_optimized:
        builder = builder.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    batches = builder.build().read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return sorted(({k: v for k, v in r.items() if k != "_hoodie_file_name"} for r in rows), key=repr)


def write_story(spark: SparkSession, path: str, index: str) -> None:
    options = {
        "hoodie.table.name": "events",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "p",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.index.type": index,
        "hoodie.bucket.index.num.buckets": "2",
    }

    def rows(items: list[tuple[int, int, str, bool]]) -> Any:
        return spark.createDataFrame(
            [(i, "ab"[i % 2], ts, f"{tag}{i}", d) for i, ts, tag, d in items], SCHEMA
        )

    inlet_spark.write(
        rows([(i, 1, "a", False) for i in range(12)]),
        path,
        {**options, "hoodie.datasource.write.operation": "insert"},
    )
    inlet_spark.write(
        rows([(i, 2, "b", False) for i in range(0, 12, 2)] + [(20, 1, "b", False)]), path, options
    )
    inlet_spark.write(
        spark.createDataFrame([(3, "b"), (5, "b")], "id long, p string"),
        path,
        {**options, "hoodie.datasource.write.operation": "delete"},
    )
    inlet_spark.write(rows([(4, 9, "c", True), (6, 1, "c", True), (7, 3, "c", False)]), path, options)


@pytest.mark.parametrize("index", ["SIMPLE", "BUCKET"])
def test_spark_compaction_equals_local_compaction(spark: SparkSession, tmp_path: Path, index: str) -> None:
    source = tmp_path / "source"
    write_story(spark, str(source), index)
    instant = HudiTable.open(str(source)).schedule_compaction(
        {"hoodie.compact.inline.max.delta.commits": "1"}
    )
    assert instant is not None
    before = hudi_read(source)
    local_path, spark_path = tmp_path / "local", tmp_path / "spark"
    shutil.copytree(source, local_path)
    shutil.copytree(source, spark_path)

    local = HudiTable.open(str(local_path)).run_compaction(instant)
    spark.sparkContext.setJobGroup(f"compaction-{index}", "compaction test")
    distributed = inlet_spark.run_compaction(spark, str(spark_path), instant)
    assert local is not None and distributed is not None
    assert distributed.instant_time == instant and distributed.action == "commit"

    # one Spark task per operation of the plan
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(f"compaction-{index}")
    tasks = sum(
        stage.numTasks
        for job in jobs
        for stage_id in (tracker.getJobInfo(job).stageIds if tracker.getJobInfo(job) else [])
        if (stage := tracker.getStageInfo(stage_id)) is not None
    )
    operations = len(HudiTable.open(str(spark_path)).compactions()[-1].plan.operations)
    assert operations > 1 and tasks == operations

    def counts(result: Any) -> list[tuple[Any, ...]]:
        return sorted(
            (
                s.partition_path,
                s.file_id,
                s.prev_commit,
                s.num_writes,
                s.num_update_writes,
                s.num_deletes,
                s.num_inserts,
                s.total_log_files_compacted,
                s.total_log_records,
            )
            for s in result.metadata.write_stats()
        )

    assert counts(distributed) == counts(local)
    assert hudi_read(spark_path) == hudi_read(local_path) == before
    assert hudi_read(spark_path, read_optimized=True) == hudi_read(local_path, read_optimized=True) == before
    # exactly the planned base files were written (none of another attempt)
    table = HudiTable.open(str(spark_path))
    compacted = {
        f.path
        for f in list_data_files(table.storage)
        if (b := BaseFile.parse(f.path)) and b.instant_time == instant
    }
    assert compacted == {s.path for s in distributed.metadata.write_stats()}


def test_failed_spark_compaction_leaves_the_plan_pending(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_story(spark, str(path), "SIMPLE")
    table = HudiTable.open(str(path))
    instant = table.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    assert instant is not None
    before = hudi_read(path)
    with pytest.raises(Exception, match=r"(?i)python worker|crash|exited"):
        inlet_spark.run_compaction(
            spark, str(path), instant, {"hoodie.inlet.spark.crash.at": "after_data_files"}
        )
    [pending] = HudiTable.open(str(path)).timeline.pending()
    assert (pending.time, pending.state) == (instant, State.REQUESTED)
    assert not [f for f in list_data_files(table.storage) if instant in f.path]
    assert hudi_read(path) == before
    done = inlet_spark.run_compaction(spark, str(path), instant)
    assert done is not None and not HudiTable.open(str(path)).timeline.pending()
    assert hudi_read(path, read_optimized=True) == before
