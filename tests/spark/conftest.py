"""One local Spark session for the Spark-engine tests: ``local[2]``, loopback only, UI off; and
the integration tests' ``lake``, ``coordinator`` and ``slot`` (:mod:`support.lake_fixtures`).

Executors' Python workers run this interpreter (``PYSPARK_PYTHON``), so they import the same
``inlet.core`` as the driver.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from support.lake_fixtures import coordinator, lake, slot  # noqa: E402, F401 (fixtures)


def spark_builder(master: str = "local[2]", app: str = "inlet-tests") -> SparkSession.Builder:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
    )


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    with contextlib.suppress(ConnectionError):  # its JVM is gone already: nothing to stop
        session.stop()
