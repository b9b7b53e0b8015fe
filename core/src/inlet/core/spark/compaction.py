"""Merge-on-Read compaction as a Spark job: one task per file-group operation of the plan.

The driver does what :func:`inlet.core.actions.compaction_run.run` does (roll back a crashed run, mark the
plan inflight, heartbeat, commit, roll back on failure); only the per-operation work — merging one
file slice into a new base file, :func:`inlet.core.actions.compaction_run.compact_operation` — runs on the
executors, which return write stats. Files of failed or duplicate task attempts (named by markers,
not by the stats) are deleted before the compaction completes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

from pyspark.sql import SparkSession

from inlet.core import faults
from inlet.core.actions import compaction_run
from inlet.core.actions.compaction_plan import CompactionOperation
from inlet.core.actions.compaction_run import CompactionContext, OperationsRunner, compact_operation
from inlet.core.commit.protocol import CommitProtocol
from inlet.core.commit.result import CommitResult
from inlet.core.s3 import S3Options
from inlet.core.spark.tasks import maybe_crash, run_job, stat_json, stat_of, task_ids
from inlet.core.storage import Storage
from inlet.core.table.facade import HudiTable
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.commit_metadata import WriteStat

CRASH_AT = "hoodie.inlet.spark.crash.at"  # fault injection (tests), as for writes


def compact_one(
    base_uri: str,
    s3: S3Options | None,
    ctx: CompactionContext,
    crash_at: str | None,
    item: tuple[int, CompactionOperation],
) -> str:
    """Executor: compact one operation; its write stat as JSON. ``s3``: the driver's store options
    (the executor's environment is not read)."""
    index, op = item
    _, stage, attempt_id, _ = task_ids()
    stat = compact_operation(Storage(base_uri, s3=s3), ctx, op, index, attempt=attempt_id, stage_id=stage)
    maybe_crash(crash_at, faults.AFTER_DATA_FILES, index == 0)
    return stat_json(stat)


def spark_runner(spark: SparkSession, crash_at: str | None) -> OperationsRunner:
    """A :data:`~inlet.core.actions.compaction_run.OperationsRunner` that runs each operation as a Spark task."""

    def run_operations(
        table: TableHandle,
        ctx: CompactionContext,
        operations: Sequence[CompactionOperation],
    ) -> list[WriteStat]:
        if not operations:
            return []
        items = list(enumerate(operations))
        rdd = spark.sparkContext.parallelize(items, len(items))
        stats = run_job(
            "compacting",
            rdd.map(partial(compact_one, table.base_path, table.storage.s3, ctx, crash_at)).collect,
        )
        return [stat_of(s) for s in stats]

    return run_operations


def run(
    spark: SparkSession,
    path: str,
    instant: str | None = None,
    options: Mapping[str, str] | None = None,
    *,
    commit_protocol: CommitProtocol | None = None,
    force: bool = False,
) -> CommitResult | None:
    """Run a pending compaction (``instant``, or the earliest) of the table at ``path`` as a Spark
    job; None if none is pending. Options as for :func:`inlet.core.actions.compaction_run.run`."""
    table = HudiTable.open(path, commit_protocol=commit_protocol)
    opts = {str(k): str(v) for k, v in (options or {}).items()}
    runner = spark_runner(spark, opts.get(CRASH_AT))
    return compaction_run.run(table, instant, opts, force=force, runner=runner)
