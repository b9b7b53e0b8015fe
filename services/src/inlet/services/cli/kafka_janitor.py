"""``inlet kafka-janitor run``: retention for Tansu's S3 storage (see :mod:`inlet.services.kafka_janitor`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from inlet.services.cli.errors import EXIT_OK, CliError, UsageError
from inlet.services.cli.options import parse_key_values
from inlet.services.kafka_janitor.janitor import DEFAULT_PROTECT
from inlet.services.runtime import Setting, SettingsError, add_arguments, resolve, run_until_stopped

ENV_PREFIX = "INLET_KAFKA_JANITOR_"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "bootstrap",
        "--kafka-bootstrap",
        "Kafka bootstrap servers (the Tansu broker whose groups' offsets are read)",
        metavar="HOST:PORT",
        required=True,
        env_name="KAFKA_BOOTSTRAP",
    ),
    Setting(
        "s3_endpoint", "--s3-endpoint", "S3 endpoint of the broker's bucket", metavar="URL", required=True
    ),
    Setting("s3_bucket", "--s3-bucket", "the bucket of the broker's s3:// storage engine", required=True),
    Setting("s3_access_key", "--s3-access-key", "S3 access key", required=True),
    Setting("s3_secret_key", "--s3-secret-key", "S3 secret key (prefer the variable)", required=True),
    Setting("s3_region", "--s3-region", "S3 region", default="us-east-1"),
    Setting(
        "cluster", "--cluster-id", "the broker's --cluster-id (first part of every key)", default="inlet"
    ),
    Setting(
        "require",
        "--require",
        "TOPIC_GLOB=GROUP[,GROUP...]: topics matching the glob are cleaned, each partition below the "
        "lowest offset any group committed, and only once every named group committed there; "
        "repeatable. A topic no rule names is never cleaned",
        kind="pairs",
        metavar="TOPIC_GLOB=GROUPS",
        env_name="REQUIRE",
    ),
    Setting(
        "protect",
        "--protect",
        "globs of topics never cleaned, whatever the rules say",
        kind="list",
        default=DEFAULT_PROTECT,
        metavar="GLOB[,GLOB]",
    ),
    Setting(
        "ignore_groups",
        "--ignore-groups",
        "globs of consumer groups whose committed offsets do not hold data back (stale readers)",
        kind="list",
        default=(),
        metavar="GLOB[,GLOB]",
    ),
    Setting(
        "interval", "--interval", "seconds between passes", kind="float", default=60.0, metavar="SECONDS"
    ),
    Setting("once", "--once", "one pass, print its result as JSON, exit", kind="bool", default=False),
    Setting(
        "dry_run", "--dry-run", "count what would be deleted, delete nothing", kind="bool", default=False
    ),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "HOST:PORT of /metrics and /healthz (empty: off)",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
    ),
    Setting(
        "kafka",
        "--kafka-option",
        "librdkafka setting KEY=VALUE of the admin client; repeatable",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="KAFKA_OPTIONS",
    ),
)

DESCRIPTION = """\
Retention for a Tansu broker on S3 storage (Tansu keeps every produced batch as an object, never
deletes one, and lists all of a partition's objects on every fetch: docs/kafka-storage.md). Every
--interval seconds: read each consumer group's committed offsets through the Kafka protocol; for each
partition of a topic a --require rule names, once every group the rule names has committed there,
delete the batch objects whose records all lie below the lowest offset any group committed (the
newest object of a partition always stays). Topics no rule names and --protect-ed ones are never
touched; the partition's watermark object is never written. One log line per pass; /metrics
(inlet_kafka_janitor_*) and /healthz on --metrics-listen.
"""

EPILOG = """\
example (what `inlet stack up` runs on its durable broker):
  INLET_KAFKA_JANITOR_S3_SECRET_KEY=... inlet kafka-janitor run --kafka-bootstrap 127.0.0.1:9092 \\
      --s3-endpoint http://127.0.0.1:8333 --s3-bucket kafka --s3-access-key inlet \\
      --require 'app.*=inlet-cdc' --require 'inlet.changes.*=inlet-writer' \\
      --require 'inlet.commits=inlet-table-services,inlet-catalog-sync'
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_kafka_janitor_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kafka-janitor",
        help="delete Tansu S3 batch objects every consumer group has read",
        description="Retention for Tansu's S3 storage.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="kafka_janitor_command", metavar="COMMAND", required=True)
    run_p = sub.add_parser(
        "run",
        help="delete batch objects below every group's committed offset, every --interval seconds",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(run_p, SETTINGS, ENV_PREFIX)
    run_p.set_defaults(handler=cmd_run)


def config_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> tuple[Any, dict[str, Any]]:
    from inlet.services.kafka_janitor import JanitorConfig, parse_rules
    from inlet.services.stack.s3 import S3Storage

    try:
        v = resolve(args, SETTINGS, ENV_PREFIX, environ)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    try:
        rules = parse_rules(v["require"] or ())
    except ValueError as e:
        raise UsageError(f"--require: {e}") from None
    if not rules:
        raise UsageError(
            f"--require is required (or set {ENV_PREFIX}REQUIRE): without a rule nothing is cleaned"
        )
    if v["interval"] <= 0:
        raise UsageError("--interval must be more than 0 seconds")
    try:
        storage = S3Storage(
            endpoint=v["s3_endpoint"],
            bucket=v["s3_bucket"],
            access_key=v["s3_access_key"],
            secret_key=v["s3_secret_key"],
            region=v["s3_region"],
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    config = JanitorConfig(
        bootstrap=v["bootstrap"],
        storage=storage,
        rules=rules,
        cluster=v["cluster"],
        protect=tuple(v["protect"]),
        ignore_groups=tuple(v["ignore_groups"]),
        interval_s=v["interval"],
        dry_run=bool(v["dry_run"]),
        kafka=parse_key_values(v["kafka"], "--kafka-option"),
    )
    return config, v


def cmd_run(args: argparse.Namespace) -> int:
    from inlet.services.kafka_janitor import JanitorError, KafkaJanitor

    config, v = config_from_args(args)
    janitor = KafkaJanitor(config)
    if v["once"]:
        try:
            result = janitor.run_pass()
        except JanitorError as e:
            raise CliError(str(e)) from None
        print(json.dumps({**result.summary(), "dry_run": config.dry_run}))
        return EXIT_OK
    return run_until_stopped(
        janitor.run,
        v["metrics_listen"],
        janitor.metrics.registry,
        janitor.health,
        service="kafka-janitor",
        bucket=config.storage.bucket,
        interval_s=config.interval_s,
    )
