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
import pyarrow.dataset as pads

from inlet.core.commit.protocol import CommitProtocol
from inlet.core.errors import SchemaError
from inlet.core.schema import cast_to, normalize_schema, normalize_type
from inlet.services.cli import dataio
from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.options import choice, choices_metavar, env, env_choice, parse_key_values, with_env
from inlet.services.runtime import Setting, SettingsError, parse_pairs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from inlet.core import CommitResult

log = logging.getLogger("inlet.cli")

ENGINES = ("local", "spark")
# operations an input without records still means something to (the local engine runs them too)
EMPTY_INPUT_OPS = ("insert_overwrite_table", "delete_partition")
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


def engine_settings(engine_help: str) -> tuple[Setting, ...]:
    """``--engine``, ``--spark-master`` and ``--spark-conf`` of a service (flags and environment
    variables under the service's prefix); ``engine_help`` says what each engine does there."""
    return (
        Setting("engine", "--engine", engine_help, default="local", metavar="{local,spark}"),
        Setting(
            "spark_master",
            "--spark-master",
            "Spark master with --engine spark: local[N] or spark://HOST:PORT",
            default=DEFAULT_MASTER,
            metavar="URL",
        ),
        Setting(
            "spark_conf",
            "--spark-conf",
            "Spark setting KEY=VALUE, e.g. spark.executor.memory=2g or spark.cores.max=2 (repeatable)",
            kind="pairs",
            metavar="KEY=VALUE",
        ),
    )


def check_engine(engine: str) -> None:
    """A service's ``--engine`` value is one Inlet knows (one line naming the flag otherwise)."""
    if engine not in ENGINES:
        raise UsageError(f"--engine must be local or spark, not {engine!r}")


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
            "Spark setting, e.g. spark.executor.memory=2g or spark.sql.shuffle.partitions=8 (repeatable, "
            "never split at commas; the variable takes one per line or a JSON object)",
            "INLET_SPARK_CONF",
        ),
    )


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    try:
        from_env = parse_pairs(env("INLET_SPARK_CONF") or "", "INLET_SPARK_CONF")
    except SettingsError as e:
        raise UsageError(str(e)) from None
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
        raise CliError(
            "--engine spark needs inlet-services[spark]: pip install 'inlet-services[spark]'"
        ) from None
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


def _spark_ready_parquet(path: str) -> bool:
    """Whether Spark may read the Parquet input itself: its schema (footers only) holds only types
    the local engine stores unchanged, so Spark's reader yields the same values. Nanosecond or
    zone-less timestamps, unsigned integers, dictionaries, large strings... go through pyarrow."""
    try:
        schema = pads.dataset(path, format="parquet").schema
    except (pa.ArrowException, OSError, ValueError):
        return False  # read_input names the problem as the local engine does
    try:
        return all(
            normalize_type(f.type).equals(f.type)
            and not (pa.types.is_timestamp(f.type) and f.type.tz is None)
            for f in schema
        )
    except SchemaError:
        return False


def _spark_input(data: pa.Table) -> pa.Table:
    """``data`` with the storage types the local engine's writer gives it (:func:`normalize_schema`,
    :func:`cast_to`: nanoseconds to microseconds, zone-less timestamps taken as UTC, unsigned to
    wider signed integers, dictionaries decoded, large strings/binaries, date64...). Spark's own
    conversion would refuse or change several of them; an input both engines refuse fails here
    with the local engine's error."""
    return cast_to(data, normalize_schema(data.schema))


def _input_frame(
    spark: SparkSession, args: argparse.Namespace, schema: pa.Schema | None
) -> tuple[DataFrame | None, bool, pa.Schema | None]:
    """The input as the local engine reads it, whether it holds no records, and its Arrow schema
    (Spark keeps its timestamp units, see ``inlet.core.spark.write``). JSON lines, CSV (parsed with
    the table's column types) and Parquet are read by pyarrow (:func:`dataio.read_input`) and
    normalised as the local engine normalises them, then handed to Spark; Parquet whose types need
    no normalisation is read by Spark itself (in parallel, not through this process). An input
    without columns has no frame (None)."""
    fmt = args.input_format or dataio.detect_format(args.input)
    if fmt == "parquet" and os.path.exists(args.input) and _spark_ready_parquet(args.input):
        dataset = pads.dataset(args.input, format="parquet")
        return spark.read.parquet(os.path.abspath(args.input)), dataset.count_rows() == 0, dataset.schema
    data = dataio.read_input(args.input, fmt, schema)
    if data.num_columns == 0:
        return None, True, None
    normalized = _spark_input(data)
    # pyspark slices the table into one partition per Arrow batch (10,000 rows): coalesced to the
    # cluster's parallelism, a 2M-row input is 2-8 tasks instead of 200
    df = spark.createDataFrame(normalized).coalesce(max(1, spark.sparkContext.defaultParallelism))
    return df, data.num_rows == 0, normalized.schema


def write(
    args: argparse.Namespace,
    path: str,
    schema: pa.Schema | None,
    opts: dict[str, str],
    commit_protocol: CommitProtocol | None = None,
) -> CommitResult | None:
    """Run the write as a Spark job; None when the input holds no records and the operation has
    nothing to do without them (nothing written, as with the local engine)."""
    import inlet.core.spark as inlet_spark

    with spark_session(args) as spark:
        df, input_schema = None, None
        if args.input is not None:
            df, empty, input_schema = _input_frame(spark, args, schema)
            if empty and args.op not in EMPTY_INPUT_OPS:
                log.warning("input holds no records; nothing written")
                return None
        options = {**opts, "hoodie.datasource.write.operation": args.op}
        return inlet_spark.write(
            df,
            path,
            options,
            partitions=args.partition,
            input_schema=input_schema,
            commit_protocol=commit_protocol,
        )


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
        from inlet.core.timeline.instant import normalize_instant_time

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
    args: argparse.Namespace,
    path: str,
    instant: str | None,
    opts: dict[str, str],
    commit_protocol: CommitProtocol | None = None,
) -> CommitResult | None:
    import inlet.core.spark as inlet_spark

    with spark_session(args) as spark:
        return inlet_spark.run_compaction(
            spark, path, instant, opts, force=args.force, commit_protocol=commit_protocol
        )
