"""``inlet.core.spark``: Spark as the engine behind Inlet's table operations (needs the ``spark`` extra).

>>> from inlet.core import spark as inlet_spark
>>> inlet_spark.write(df, "/lake/trips", {
...     "hoodie.table.name": "trips",
...     "hoodie.datasource.write.recordkey.field": "uuid",
...     "hoodie.datasource.write.partitionpath.field": "city",
...     "hoodie.datasource.write.precombine.field": "ts",
...     "hoodie.datasource.write.operation": "upsert",
... })
>>> inlet_spark.read(spark, "/lake/trips", {"hoodie.datasource.query.type": "snapshot"})
>>> inlet_spark.run_compaction(spark, "/lake/trips")

- :func:`write` — every write operation of the core on COW and MOR tables as a Spark job (driver
  plans from metadata, executors write, driver commits); Apache Hudi's option names
  (:mod:`inlet.core.spark.options`). See :mod:`inlet.core.spark.writer`.
- :func:`read` — a DataFrame of the table through the ``hudi`` Python data source
  (:mod:`inlet.core.spark.datasource`).
- :func:`run_compaction` — a scheduled Merge-on-Read compaction as a Spark job, one task per file
  group (:mod:`inlet.core.spark.compaction`).

``import inlet.core`` does not import this package (nor pyspark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from inlet.core.commit.protocol import CommitProtocol
from inlet.core.commit.result import CommitResult
from inlet.core.spark import compaction as spark_compaction
from inlet.core.spark import datasource
from inlet.core.spark.options import read_options
from inlet.core.spark.writer import ArrowSource
from inlet.core.spark.writer import write as _write

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession


def write(
    df: DataFrame | ArrowSource | None,
    path: str,
    options: Mapping[str, object] | None = None,
    *,
    commit_protocol: CommitProtocol | None = None,
    partitions: Sequence[str] | None = None,
    extra_metadata: Mapping[str, str] | None = None,
    mode: str = "append",
    input_schema: pa.Schema | None = None,
) -> CommitResult | None:
    """Write ``df`` to the Hudi table at ``path`` (created on the first write), as Apache Hudi's
    ``df.write.format("hudi").options(**options).mode(mode).save(path)`` does; returns the commit.

    ``options`` take Apache Hudi's names (``hoodie.datasource.write.operation`` = upsert | insert |
    bulk_insert | delete | insert_overwrite | insert_overwrite_table | delete_partition, ...).
    ``commit_protocol``: complete the commit through it (e.g. the gRPC coordinator's) instead of
    the in-process lock. ``partitions``: for delete_partition without data (or
    ``hoodie.datasource.write.partitions.to.delete``). ``mode``: ``append`` (default),
    ``overwrite`` (an existing table is overwritten with ``insert_overwrite_table``), ``error`` /
    ``errorifexists`` or ``ignore`` when the table exists. ``input_schema``: the Arrow schema
    ``df`` was made from (``spark.createDataFrame(arrow_table)``); second/millisecond timestamps
    are then stored as ``timestamp-millis`` as the local engine stores them (Spark's own type has
    microseconds only). ``df`` may be an :class:`ArrowSource`: rows made on the executors by a
    ``mapInArrow`` body, keyed in the same Python worker (one Arrow exchange with the JVM less).
    """
    return _write(
        df,
        path,
        options,
        commit_protocol=commit_protocol,
        partitions=partitions,
        extra_metadata=extra_metadata,
        mode=mode,
        input_schema=input_schema,
    )


def read(spark: SparkSession, path: str, options: Mapping[str, object] | None = None) -> DataFrame:
    """The table at ``path`` as a DataFrame (``hoodie.datasource.query.type`` = snapshot |
    read_optimized, ``as.of.instant``, ...), through the ``hudi`` Python data source."""

    return datasource.read(spark, path, read_options(options))


def run_compaction(
    spark: SparkSession,
    path: str,
    instant: str | None = None,
    options: Mapping[str, str] | None = None,
    *,
    commit_protocol: CommitProtocol | None = None,
    force: bool = False,
) -> CommitResult | None:
    """Run a pending compaction of the Merge-on-Read table at ``path`` as a Spark job; None if no
    compaction is pending. See :func:`inlet.core.spark.compaction.run`."""

    return spark_compaction.run(spark, path, instant, options, commit_protocol=commit_protocol, force=force)


__all__ = ["ArrowSource", "read", "run_compaction", "write"]
