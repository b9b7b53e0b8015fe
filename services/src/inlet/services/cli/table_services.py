"""``inlet table-services run``: the table-services service (see :mod:`inlet.services.table_services`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from inlet.services.cli.commit import CONNECTION_SETTINGS, coordinator_token, read_ca
from inlet.services.cli.engine import check_engine, engine_settings
from inlet.services.cli.errors import UsageError
from inlet.services.cli.options import parse_key_values
from inlet.services.cli.s3_options import add_s3_options
from inlet.services.commit_events import follower_settings
from inlet.services.extras import require
from inlet.services.runtime import Setting, SettingsError, add_arguments, resolve, run_until_stopped

ENV_PREFIX = "INLET_TABLE_SERVICES_"

SETTINGS: tuple[Setting, ...] = (
    *follower_settings("inlet-table-services", "run", "retries of a table"),
    *CONNECTION_SETTINGS,
    Setting(
        "services",
        "--services",
        "table services to run, in order (comma-separated)",
        kind="list",
        default=("compaction", "clean", "archive"),
        metavar="NAME[,NAME]",
    ),
    Setting(
        "option",
        "--option",
        "Hudi option KEY=VALUE for every table, e.g. hoodie.compact.inline.max.delta.commits=5; repeatable",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="OPTIONS",
    ),
    Setting("lease_ms", "--lease-ms", "lease of a table's services lock (ms)", kind="int", default=30_000),
    *engine_settings(
        "where compaction plans execute: local (this process) or spark (a Spark job of the service's "
        "session, one task per file group); clustering, clean and archive run in this process"
    ),
)

DESCRIPTION = """\
Follow the coordinator's commit events (inlet.commits) and, once a changed table's burst of commits
has settled, run the table services due on it through the coordinator: compaction of Merge-on-Read
tables (requested plans first, then a new plan when Hudi's triggers say one is due), then clean
(the file slices outside the retained window, hoodie.clean.* options), then archive (old instants
into the LSM archived timeline, hoodie.keep.min.commits / hoodie.keep.max.commits). One instance
works on a table at a time (the table's "services" lock lease at the coordinator); a table that fails is
retried with backoff, and its events are acknowledged only once a run handled them. Prints one JSON
line when serving; /metrics and /healthz on --metrics-listen.

With --engine spark, compactions run as Spark jobs (one task per file group) of one session the
service starts at its first compaction and keeps: on local[N], or on a cluster with --spark-master
spark://HOST:PORT (the executors need this Inlet installed and access to the lake). The service is
the driver: plans, heartbeats, commits and rollbacks still go through the coordinator.
"""

EPILOG = """\
example:
  inlet table-services run --kafka-bootstrap kafka:9092 --coordinator coord:50551 \\
      --option hoodie.compact.inline.max.delta.commits=5
  inlet table-services run --kafka-bootstrap kafka:9092 --coordinator coord:50551 \\
      --engine spark --spark-master spark://spark-master:7077 --spark-conf spark.cores.max=2
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_table_services_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "table-services",
        help="run compaction and clean on tables after their commits",
        description="The table-services service.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="table_services_command", metavar="COMMAND", required=True)
    run_p = sub.add_parser(
        "run",
        help="follow inlet.commits and run due table services until SIGTERM/SIGINT",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(run_p, SETTINGS, ENV_PREFIX)
    add_s3_options(run_p, suppress=True)
    run_p.set_defaults(handler=cmd_run)


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> tuple[Any, str]:
    from inlet.services.table_services.actions import SERVICES
    from inlet.services.table_services.service import ServiceConfig

    try:
        v = resolve(args, SETTINGS, ENV_PREFIX, environ)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    unknown = [s for s in v["services"] if s not in SERVICES]
    if unknown or not v["services"]:
        raise UsageError(
            f"--services: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(SERVICES)}"
        )
    check_engine(v["engine"])
    if v["lease_ms"] < 1000:
        raise UsageError("--lease-ms must be at least 1000")
    config = ServiceConfig(
        bootstrap=v["bootstrap"],
        coordinator=v["coordinator"],
        topic=v["topic"],
        group=v["group"],
        services=tuple(v["services"]),
        options=parse_key_values(v["option"], "--option"),
        coalesce_s=v["coalesce"],
        retry_max_s=v["retry_max"],
        lease_ms=v["lease_ms"],
        coordinator_token=coordinator_token(v),
        coordinator_ca=read_ca(v["coordinator_ca"]),
        coordinator_tls=bool(v["coordinator_tls"]),
        kafka=dict(parse_key_values(v["kafka"], "--kafka-option")),
        engine=v["engine"],
        spark_master=v["spark_master"],
        spark_conf=parse_key_values(v["spark_conf"], "--spark-conf"),
    )
    return config, v["metrics_listen"]


def cmd_run(args: argparse.Namespace) -> int:
    from inlet.services.table_services.service import TableServicesService

    config, listen = config_from_args(args)
    if config.engine == "spark":
        require("spark", "inlet table-services run --engine spark")
    service = TableServicesService(config)
    return run_until_stopped(
        service.run,
        listen,
        service.metrics.registry,
        service.health,
        service="table-services",
        topic=config.topic,
        services=list(config.services),
        engine=config.engine,
    )
