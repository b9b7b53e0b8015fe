"""The initial load's ranges as Spark tasks (``inlet writer load --engine spark``, ``inlet stack up
--engine spark``): a cluster reads and writes a table's ranges in parallel across its executors.

The driver (the load's process) holds the exported snapshot open and splits each table into CTID
ranges as the local engine does (:mod:`~inlet.services.writer.load_ranges`). The ranges are cut into
*waves* of ``spark.default.parallelism`` ranges; each wave is one Spark write and one commit. In
its first stage every task takes one range (a one-row partition ``(start, end)``), opens its own
connection, imports the snapshot (``SET TRANSACTION SNAPSHOT``), streams the range's ``COPY`` as
Arrow batches (:func:`read_ranges`, a picklable function with a plain-value :class:`RangeRead`)
straight into the Spark writer's key stage, in the same Python worker (an
:class:`inlet.core.spark.ArrowSource`: the rows cross into the JVM once, keyed); the writer then
shuffles by bucket and writes the files on the executors (:mod:`inlet.core.spark.writer`). The commit records the wave's ranges
(``inlet.initial_load.range`` = ``a:b,b:c,...``), so a load that died resumes from the ranges of
the waves not committed, as the local engine's does. The executors need network access to the
source PostgreSQL and the lake, and ``inlet-services`` installed (they import this module).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from inlet.core.spark import types as spark_types
from inlet.services.writer.load_ranges import PageRange, snapshot_connection, stream_copy
from inlet.services.writer.rows import SNAPSHOT_ORDERING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from inlet.core.commit.protocol import CommitProtocol
    from inlet.core.spark import ArrowSource
    from inlet.services.writer.initial_load import TablePlan

OPERATION = "hoodie.datasource.write.operation"


@dataclasses.dataclass(frozen=True)
class RangeRead:
    """What a task needs to read its range (plain values, pickled to the executors)."""

    conninfo: str
    snapshot: str  # the exported snapshot's name
    plan: TablePlan
    shard: str | None  # the rows' Debezium topic prefix (``_event_shard``)
    schema: pa.Schema  # the Arrow schema Spark exchanges for the rows

    @classmethod
    def of(
        cls, conninfo: str, snapshot: str, plan: TablePlan, shard: str | None
    ) -> tuple[RangeRead, pa.Schema]:
        """The spec, and the Arrow schema of the rows as the local engine writes them."""
        from inlet.services.writer.initial_load import with_event_columns

        empty = pa.schema([pa.field(c.name, c.target) for c in plan.columns]).empty_table()
        arrow = with_event_columns(empty, SNAPSHOT_ORDERING, shard).schema
        exchange = spark_types.to_arrow_schema(spark_types.from_arrow_schema(arrow))
        return cls(conninfo, snapshot, plan, shard, exchange), arrow


def read_ranges(spec: RangeRead, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: each input row ``(start, end)`` names a range; yield its rows as of the
    snapshot, typed as the writer types them, with the snapshot-read event columns."""
    from inlet.services.writer.initial_load import csv_options, typed, with_event_columns

    options = csv_options(spec.plan, block_size=4 << 20)
    for batch in batches:
        for start, end in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            where = PageRange(int(start), None if end is None else int(end)).where()
            with snapshot_connection(spec.conninfo, spec.snapshot) as conn:
                for part in stream_copy(conn, spec.plan.copy_statement(where), options):
                    rows = with_event_columns(typed(spec.plan, part), SNAPSHOT_ORDERING, spec.shard)
                    yield from spark_types.conform(rows, spec.schema).to_batches()


def ranges_source(spark: SparkSession, spec: RangeRead, ranges: Sequence[PageRange]) -> ArrowSource:
    """The rows of ``ranges``, made by tasks that each read one range (and key its rows: the
    writer's key stage runs in the same Python worker, :class:`inlet.core.spark.ArrowSource`).
    The ranges' bounds come from ``spark.range`` (one row per partition) and literals, not from a
    Python RDD, whose own stage of Python workers (another daemon, another import of everything)
    the seed rows do not need."""
    from pyspark.sql import functions as F

    from inlet.core.spark import ArrowSource

    def bound(values: list[int | None]) -> Any:
        return F.element_at(F.array(*[F.lit(v).cast("long") for v in values]), (F.col("id") + 1).cast("int"))

    seed = spark.range(0, len(ranges), 1, len(ranges)).select(
        bound([r.start for r in ranges]).alias("start"), bound([r.end for r in ranges]).alias("end")
    )
    return ArrowSource(seed, partial(read_ranges, spec), spark_types.from_arrow_schema(spec.schema))


def write_wave(
    spark: SparkSession,
    spec: RangeRead,
    input_schema: pa.Schema,
    ranges: Sequence[PageRange],
    path: str,
    operation: str,
    options: Mapping[str, str],
    commit_protocol: CommitProtocol,
    extra_metadata: Mapping[str, str],
) -> int:
    """Read ``ranges`` on the executors and commit them as one ``operation``; the rows written."""
    import inlet.core.spark as inlet_spark

    result = inlet_spark.write(
        ranges_source(spark, spec, ranges),
        path,
        {**options, OPERATION: operation},
        commit_protocol=commit_protocol,
        extra_metadata=extra_metadata,
        input_schema=input_schema,
    )
    assert result is not None
    return sum(s.num_writes for s in result.metadata.write_stats())


def spark_session(master: str, conf: Mapping[str, str], app: str) -> SparkSession:
    """A Spark session for a service (the writer, a load): no UI, UTC, Arrow exchange, loopback for
    a ``local[N]`` master, Python workers forked with Inlet's modules imported
    (:mod:`~inlet.services.writer.spark_daemon`); ``conf`` wins. Executors' Python workers run this
    interpreter."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # the Python workers fork with Inlet's modules imported (spark_daemon's doc)
        "spark.python.daemon.module": "inlet.services.writer.spark_daemon",
    }
    if master.startswith("local"):
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf)
    builder = SparkSession.builder.master(master).appName(app)
    for k, v in settings.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def stop_session(spark: SparkSession) -> None:
    """Stop ``spark`` and end its gateway JVM (PySpark keeps it for the life of the process
    otherwise): for a long-lived process that needed Spark for a while, the stack's supervisor."""
    import contextlib

    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()  # type: ignore[union-attr]
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None and proc.stdin is not None:
        proc.stdin.close()  # PySpark's JVM exits when its stdin closes
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()


def refused(error: BaseException) -> str | None:
    """The reason of a range's COPY that a value refusal failed on an executor (Spark reports the
    task's traceback text), or None for another failure."""
    found = re.findall(r'"inlet: ([^"\n]*)"', str(error))
    return found[-1] if found else None
