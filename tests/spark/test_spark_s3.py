"""The Spark engine on an ``s3://`` table whose executors have no AWS environment (issue #25).

Executors on other machines do not share the driver's environment: the store's endpoint, region,
credentials and addressing must travel with the work (the write context, the simple index's slice
spec, the compaction task, the data source's read plan and writer). Here the driver reaches a real
SeaweedFS server through the AWS variables, while the Python workers run with every ``AWS_*``
variable blanked (``SparkContext.environment``, which Spark applies to the workers it starts for the
jobs that follow): a Merge-on-Read table is written (insert, upsert through the simple index, a
data-source insert), compacted and read back by Spark, all on the workers.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from inlet.core import HudiTable
from inlet.core import spark as inlet_spark
from inlet.core.s3 import S3Config, S3Options
from inlet.core.spark import datasource
from inlet.core.timeline.instant import State
from inlet.services.stack import EmbeddedS3

BUCKET = "lake"
SCHEMA = "id long, p string, ts long, v string"
OPTIONS = {
    "hoodie.table.name": "events",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.partitionpath.field": "p",
    "hoodie.datasource.write.precombine.field": "ts",
    "hoodie.datasource.write.table.type": "MERGE_ON_READ",
}
#: every variable an AWS SDK or Inlet reads a store from
AWS_VARIABLES = (
    *(k.key for k in vars(S3Config).values() if hasattr(k, "key")),
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[EmbeddedS3]:
    with EmbeddedS3() as server:
        server.create_bucket(BUCKET)
        yield server


@pytest.fixture
def driver_env(s3_server: EmbeddedS3, monkeypatch: pytest.MonkeyPatch) -> S3Options:
    """The store, reached by the driver (this process) through the AWS environment."""
    options = S3Options(
        endpoint=s3_server.endpoint,
        region=s3_server.region,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
    )
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in options.to_env().items():
        monkeypatch.setenv(name, value)
    return options


@pytest.fixture
def bare_executors(spark: SparkSession) -> Iterator[None]:
    """Python workers (and the data source's planner) without any AWS variable, for this test's jobs."""
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update({name: "" for name in AWS_VARIABLES})
    try:
        yield
    finally:
        env.clear()
        env.update(saved)


def _worker_aws_env(spark: SparkSession) -> list[str]:
    def names(_: Any) -> list[str]:
        return sorted(k for k in AWS_VARIABLES if os.environ.get(k))

    return spark.sparkContext.parallelize([0], 1).map(names).collect()[0]


def test_spark_writes_compacts_and_reads_a_mor_table_on_s3_without_aws_env_on_executors(
    spark: SparkSession, driver_env: S3Options, bare_executors: None
) -> None:
    assert _worker_aws_env(spark) == []  # the executors could not find the store by themselves
    uri = f"s3://{BUCKET}/spark{uuid.uuid4().hex[:10]}"

    def rows(items: list[tuple[int, int, str]]) -> Any:
        return spark.createDataFrame([(i, "ab"[i % 2], ts, f"{tag}{i}") for i, ts, tag in items], SCHEMA)

    inlet_spark.write(
        rows([(i, 1, "a") for i in range(8)]), uri, {**OPTIONS, "hoodie.datasource.write.operation": "insert"}
    )
    # an upsert looks the stored keys up on the executors (simple index) and appends log files there
    inlet_spark.write(rows([(0, 2, "b"), (3, 2, "b"), (8, 1, "b")]), uri, OPTIONS)
    # the data source's writer, with the store given as Hadoop S3A options (its planner has no env)
    datasource.register(spark)
    (
        spark.createDataFrame([(20, "a", 1, "d20")], SCHEMA)
        .write.format("hudi")
        .options(**driver_env.hadoop_options())
        .option("hoodie.datasource.write.operation", "insert")
        .option("hoodie.combine.before.insert", "false")
        .mode("append")
        .save(uri)
    )
    expected = {0: "b0", 1: "a1", 2: "a2", 3: "b3", 4: "a4", 5: "a5", 6: "a6", 7: "a7", 8: "b8", 20: "d20"}

    table = HudiTable.open(uri)
    instant = table.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    assert instant is not None
    assert inlet_spark.run_compaction(spark, uri, instant) is not None
    compacted = HudiTable.open(uri)
    assert compacted.compactions()[-1].state is State.COMPLETED
    # the base files the executors wrote hold every change: a read-optimized read sees them all
    optimized = compacted.read(columns=["id", "v"], query_type="read_optimized").to_pylist()
    assert {r["id"]: r["v"] for r in optimized} == expected

    df = inlet_spark.read(spark, uri)
    assert {r["id"]: r["v"] for r in df.select("id", "v").collect()} == expected
    plan = df._jdf.queryExecution().toString()
    assert driver_env.secret_key is not None and driver_env.secret_key not in plan
