"""``--engine local|spark``: where ``write``, ``read`` and ``compaction run`` do their work.

``local`` runs the core in this process (pyarrow). ``spark`` runs the same operation as a Spark
job through :mod:`inlet.core.spark` on the master given by ``--spark-master`` (default
``local[2]``; ``spark://host:7077`` for a standalone cluster), with ``--spark-conf`` settings.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from inlet.services.cli import dataio
from inlet.services.cli.errors import CliError, InputFileError
from inlet.services.cli.options import choice, choices_metavar, env, env_choice, parse_key_values, with_env

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from inlet.core.table import CommitResult

log = logging.getLogger("inlet.cli")

ENGINES = ("local", "spark")
DEFAULT_MASTER = "local[2]"
# settings of every CLI session unless --spark-conf says otherwise: a CLI job needs no UI, and a
# local session binds the loopback interface only
_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # progress goes to the structured log instead
    "spark.sql.shuffle.partitions": "8",  # Spark's 200 is sized for clusters, not a CLI job
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}
_LOCAL_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def add_engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument(
        "--engine",
        type=choice(ENGINES),
        metavar=choices_metavar(ENGINES),
        default=env_choice("INLET_ENGINE", ENGINES, "local"),
        help=with_env("local: this process (default); spark: a Spark job (inlet.core.spark)", "INLET_ENGINE"),
    )
    g.add_argument(
        "--spark-master",
        metavar="URL",
        default=env("INLET_SPARK_MASTER", DEFAULT_MASTER),
        help=with_env(
            f"Spark master with --engine spark: local[N] or spark://HOST:PORT (default {DEFAULT_MASTER})",
            "INLET_SPARK_MASTER",
        ),
    )
    g.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        help=with_env(
            "Spark setting, e.g. spark.executor.memory=2g or spark.sql.shuffle.partitions=8 (repeatable; "
            "the variable takes a comma-separated list)",
            "INLET_SPARK_CONF",
        ),
    )


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    from_env = [c for c in (env("INLET_SPARK_CONF") or "").split(",") if c.strip()]
    conf = {**_DEFAULT_CONF, **(_LOCAL_CONF if args.spark_master.startswith("local") else {})}
    conf.update(parse_key_values(from_env, "INLET_SPARK_CONF"))
    conf.update(parse_key_values(args.spark_conf, "--spark-conf"))
    return conf


@contextlib.contextmanager
def spark_session(args: argparse.Namespace) -> Iterator[SparkSession]:
    """A Spark session for one CLI command, stopped at the end. When this process already runs an
    active session (the CLI called from a Spark application), that one is used and left running."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CliError("--engine spark needs PySpark: install inlet-core[spark]") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        log.info("using the active Spark session (master %s)", active.sparkContext.master)
        yield active
        return
    # executors' Python workers must import the same inlet as this process
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(args.spark_master).appName(f"inlet {args.command}")
    for key, value in spark_conf(args).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as e:  # no Java, a bad master URL, an unreachable cluster...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CliError(f"could not start Spark (master {args.spark_master}): {first}") from e
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def _input_frame(spark: SparkSession, args: argparse.Namespace, schema: pa.Schema | None) -> DataFrame:
    """Parquet is read by Spark itself; JSON lines and CSV are parsed as the local engine parses
    them (the table's column types), then handed to Spark."""
    fmt = args.format or dataio.detect_format(args.input)
    if fmt == "parquet":
        if not os.path.exists(args.input):
            raise InputFileError(f"input file not found: {args.input}")
        return spark.read.parquet(os.path.abspath(args.input))
    return spark.createDataFrame(dataio.read_input(args.input, fmt, schema))


def write(
    args: argparse.Namespace, path: str, schema: pa.Schema | None, opts: dict[str, str]
) -> CommitResult | None:
    import inlet.core.spark as inlet_spark

    with spark_session(args) as spark:
        df = _input_frame(spark, args, schema) if args.input is not None else None
        options = {**opts, "hoodie.datasource.write.operation": args.op}
        return inlet_spark.write(df, path, options, partitions=args.partition)


def read(
    args: argparse.Namespace,
    path: str,
    columns: Sequence[str] | None,
    filters: Sequence[tuple[str, str, Any]],
) -> pa.Table:
    import inlet.core.spark as inlet_spark

    options = {
        "hoodie.datasource.query.type": args.query_type,
        "inlet.read.meta.columns": str(not args.no_meta).lower(),
    }
    if args.as_of:
        from inlet.core.instant import normalize_instant_time

        options["as.of.instant"] = normalize_instant_time(args.as_of)
    if columns:
        options["inlet.read.columns"] = ",".join(columns)
    if filters:
        options["inlet.read.filters"] = json.dumps([list(f) for f in filters], default=str)
    with spark_session(args) as spark:
        df = inlet_spark.read(spark, path, options)
        if columns:
            df = df.select(*columns)
        if args.limit is not None:
            df = df.limit(args.limit)
        return df.toArrow()


def run_compaction(
    args: argparse.Namespace, path: str, instant: str | None, opts: dict[str, str]
) -> CommitResult | None:
    import inlet.core.spark as inlet_spark

    with spark_session(args) as spark:
        return inlet_spark.run_compaction(spark, path, instant, opts, force=args.force)
