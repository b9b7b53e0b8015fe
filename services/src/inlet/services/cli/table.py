"""``inlet table create|describe``: create a Hudi table, show its configuration."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from inlet.core import HudiTable, TimestampPartitioning
from inlet.services.cli import options, render
from inlet.services.cli.errors import EXIT_OK, UsageError
from inlet.services.cli.options import (
    choice,
    choices_metavar,
    env,
    env_choice,
    env_int,
    int_at_least,
    with_env,
)
from inlet.services.cli.parsing import (
    ArgumentParser,
    add_command,
    add_path,
    formatter,
)
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")
DEFAULT_TIMESTAMP_OUTPUT_FORMAT = "yyyy/MM/dd"

TABLE_TYPES = ("cow", "mor")


MERGE_MODES = ("event_time_ordering", "commit_time_ordering")


KEY_GENERATORS = ("simple", "complex", "timestamp", "non_partition")


TIMESTAMP_TYPES = ("EPOCHMILLISECONDS", "UNIX_TIMESTAMP", "EPOCHMICROSECONDS", "DATE_STRING")


INDEXES = ("simple", "bucket")


def _add_table_create(tables: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        tables,
        "create",
        cmd_table_create,
        "create an empty Hudi table",
        "Create an empty Hudi table (version 8): write .hoodie/hoodie.properties with the table's\n"
        "keys, partitioning, merge mode and index. Fails if a table already exists at PATH.\n\n"
        "example:\n  inlet table create /lake/trips --name trips --record-key id --partition-by city "
        "--ordering-field ts",
    )
    add_path(p, "where to create the table")
    p.add_argument("--name", required=True, help="table name (letters, digits, underscores)")
    p.add_argument(
        "--type",
        type=choice(TABLE_TYPES),
        metavar=choices_metavar(TABLE_TYPES),
        default="cow",
        help="cow = Copy-on-Write, mor = Merge-on-Read (default cow)",
    )
    p.add_argument("--record-key", required=True, metavar="K[,K2]", help="record key field(s)")
    p.add_argument("--partition-by", metavar="P[,P2]", help="partition field(s); none = unpartitioned")
    p.add_argument(
        "--ordering-field",
        metavar="F",
        help="field whose larger value wins when two versions of a record meet (precombine field)",
    )
    p.add_argument(
        "--merge-mode",
        type=choice(MERGE_MODES),
        metavar=choices_metavar(MERGE_MODES),
        help="how versions of a record merge; default event_time_ordering with --ordering-field, "
        "else commit_time_ordering (the latest write wins)",
    )
    p.add_argument("--hive-style", action="store_true", help="partition paths as field=value")
    p.add_argument("--url-encode", action="store_true", help="URL-encode partition path values")
    p.add_argument(
        "--key-generator",
        type=choice(KEY_GENERATORS),
        metavar=choices_metavar(KEY_GENERATORS),
        help="key generator; default chosen from the key and partition fields "
        "(timestamp when --timestamp-type is given)",
    )
    _add_timestamp_options(p)
    _add_index_options(p)
    _add_cdc_options(p)
    p.add_argument(
        "--database",
        default=env("INLET_DATABASE"),
        help=with_env("database name recorded in the table config", "INLET_DATABASE"),
    )


def _add_timestamp_options(p: ArgumentParser) -> None:
    g = p.add_argument_group("timestamp partitioning (key generator 'timestamp')")
    g.add_argument(
        "--timestamp-type",
        type=choice(TIMESTAMP_TYPES),
        metavar=choices_metavar(TIMESTAMP_TYPES),
        help="how the partition field holds time: epoch seconds/millis/micros or a date string",
    )
    g.add_argument(
        "--timestamp-output-format",
        metavar="FMT",
        help="Java date pattern of the partition path, e.g. yyyy/MM/dd (default yyyy/MM/dd)",
    )
    g.add_argument(
        "--timestamp-input-format",
        metavar="FMT",
        help="Java date pattern of DATE_STRING values (default yyyy-MM-dd HH:mm:ss)",
    )
    g.add_argument(
        "--timestamp-timezone",
        metavar="TZ",
        default=env("INLET_TIMESTAMP_TIMEZONE", "UTC"),
        help=with_env("time zone of the partition path (default UTC)", "INLET_TIMESTAMP_TIMEZONE"),
    )


def _add_index_options(p: ArgumentParser) -> None:
    g = p.add_argument_group("index")
    g.add_argument(
        "--index",
        type=choice(INDEXES),
        metavar=choices_metavar(INDEXES),
        default=env_choice("INLET_INDEX", INDEXES, "simple"),
        help=with_env("how writes find existing records (default simple)", "INLET_INDEX"),
    )
    g.add_argument(
        "--buckets",
        type=int_at_least(1),
        metavar="N",
        default=env_int("INLET_BUCKETS", minimum=1),
        help=with_env("number of buckets per partition for --index bucket (default 4)", "INLET_BUCKETS"),
    )


CDC_MODES = ("OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER")


def _add_cdc_options(p: ArgumentParser) -> None:
    g = p.add_argument_group("change data capture")
    g.add_argument(
        "--cdc",
        action="store_true",
        help="write Hudi's CDC log files on Copy-on-Write merges (hoodie.table.cdc.enabled=true)",
    )
    g.add_argument(
        "--cdc-logging-mode",
        type=str.upper,
        choices=CDC_MODES,
        metavar="|".join(CDC_MODES),
        help="what a CDC record keeps (hoodie.table.cdc.supplemental.logging.mode; default DATA_BEFORE_AFTER)",
    )


def _add_table_describe(tables: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        tables,
        "describe",
        cmd_table_describe,
        "show a table's configuration, schema and timeline summary",
        "Show a table's name, type, keys, partitioning, merge mode, index, latest commit,\n"
        "schema and hoodie.properties.",
    )
    add_path(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def add_table_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "table",
        help="create or describe a table",
        description="Create or describe a Hudi table.",
        formatter_class=formatter,
    )
    tables = p.add_subparsers(dest="table_command", metavar="COMMAND", required=True)
    _add_table_create(tables)
    _add_table_describe(tables)


def _timestamp_partitioning(args: argparse.Namespace) -> TimestampPartitioning | None:
    extras = {
        "--timestamp-output-format": args.timestamp_output_format,
        "--timestamp-input-format": args.timestamp_input_format,
    }
    if args.timestamp_type is None:
        given = [flag for flag, value in extras.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} needs --timestamp-type")
        if args.key_generator == "timestamp":
            raise UsageError("--key-generator timestamp needs --timestamp-type")
        return None
    return TimestampPartitioning(
        timestamp_type=args.timestamp_type,
        output_format=args.timestamp_output_format or DEFAULT_TIMESTAMP_OUTPUT_FORMAT,
        input_format=args.timestamp_input_format,
        timezone=args.timestamp_timezone,
    )


def _buckets(args: argparse.Namespace) -> int:
    if args.buckets is not None and args.index != "bucket":
        raise UsageError("--buckets applies only to --index bucket")
    return int(args.buckets) if args.buckets is not None else 4


def _cdc_mode(args: argparse.Namespace) -> str | None:
    if args.cdc_logging_mode is not None and not args.cdc:
        raise UsageError("--cdc-logging-mode needs --cdc")
    return str(args.cdc_logging_mode) if args.cdc_logging_mode is not None else None


def cmd_table_create(args: argparse.Namespace) -> int:
    path = options.table_path(args.path)
    table = HudiTable.create(
        path,
        name=args.name,
        record_key=options.split_list(args.record_key, "--record-key") or [],
        partition_by=options.split_list(args.partition_by, "--partition-by"),
        table_type=args.type,
        ordering_field=args.ordering_field,
        merge_mode=args.merge_mode,
        hive_style=args.hive_style,
        url_encode=args.url_encode,
        key_generator=args.key_generator,
        index=args.index,
        buckets=_buckets(args),
        database=args.database,
        timestamp=_timestamp_partitioning(args),
        cdc=args.cdc,
        cdc_logging_mode=_cdc_mode(args),
    )
    log_event(log, logging.INFO, "table created", path=table.base_path, name=table.name)
    parts = ",".join(table.partition_fields) or "(none)"
    print(
        f"created {table.table_type.value} table {table.name!r} at {table.base_path} "
        f"(record key: {','.join(table.record_key_fields)}; partitioned by: {parts}; "
        f"key generator: {table.key_generator.key_type.value.lower()})"
    )
    return EXIT_OK


def cmd_table_describe(args: argparse.Namespace) -> int:
    info = HudiTable.open(options.table_path(args.path)).describe()
    if args.json:
        print_json(info)
    else:
        print(render.format_mapping(info))
    return EXIT_OK
