"""``inlet cdc``: the CDC consumer's commands. ``decode`` reads one Debezium record from files and
prints what the consumer would make of it.

The group is built by :func:`add_cdc_commands`, which returns the ``cdc`` subparsers action so more
subcommands (e.g. ``run``) can be added beside ``decode``: ``cdc = add_cdc_commands(subparsers)``
then ``cdc.add_parser("run", ...)``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from inlet.services.cli.cdc_run import add_run_command
from inlet.services.cli.errors import CliError, InputFileError
from inlet.services.cli.options import choice, choices_metavar, env, with_env
from inlet.services.runtime import add_deprecated_alias, env_with_aliases

FORMATS = ("auto", "json", "avro")
KEYLESS = ("reject", "whole_row", "skip", "auto")

DECODE_DESCRIPTION = """\
Decode one Debezium PostgreSQL Kafka record, as the CDC consumer would, and print one JSON line
per change: {"op", "table", "key", "before", "after", "lsn", "tx_id", "source_ts_ms", "snapshot"}
(op c/u/d/r/t; dates, times and timestamps ISO-8601, 'Z' for timestamptz; decimals as strings;
bytes base64; an unchanged TOASTed value as {"unchanged": true}). A transaction END prints one
line per table: {"transaction", "status", "table", "table_event_count", "total_event_count",
"source_ts_ms"}. Tombstones, heartbeats, logical decoding messages and BEGIN print nothing.
A record it cannot decode prints 'inlet: error: <why>' and exits 1.

--value and --key are the record's bytes exactly as on Kafka: JsonConverter text (with or
without schemas) or Confluent Avro (magic byte 0, schema id, Avro body). JSON whose only field is
"payload" ({"payload": {...}}, as several tools store Debezium events) is read as JSON without
schemas (column types from --database-url). Without --topic the table comes from the record's
source block ('<source.name>.<schema>.<table>').
"""

DECODE_EPILOG = """\
examples:
  inlet cdc decode --value value.json --key key.json --topic dbserver1.public.customers
  inlet cdc decode --value value.avro --key key.avro --schema-registry http://registry:8081
  inlet cdc decode --value value.json --database-url postgresql://cdc@db/app   # schemas.enable=false
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_cdc_commands(subparsers: Any) -> Any:
    """Add the ``cdc`` group (with ``decode``) to the ``inlet`` command; returns the group's
    subparsers action so other subcommands can be added to it."""
    p = subparsers.add_parser(
        "cdc",
        help="the CDC consumer: run it, decode Debezium records",
        description="The CDC consumer: Debezium PostgreSQL records -> Inlet's typed change events.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="cdc_command", metavar="COMMAND", required=True)
    add_decode_command(sub)
    add_run_command(sub)
    return sub


def add_decode_command(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "decode",
        help="decode one Debezium record from files and print it as JSON",
        description=DECODE_DESCRIPTION,
        epilog=DECODE_EPILOG,
        formatter_class=_formatter,
    )
    p.add_argument("--value", required=True, metavar="FILE", help="the record's value bytes ('-' = stdin)")
    p.add_argument("--key", metavar="FILE", help="the record's key bytes (needed for the record key)")
    p.add_argument(
        "--value-format",
        type=choice(FORMATS),
        metavar=choices_metavar(FORMATS),
        default="auto",
        help="value format; auto: Confluent magic byte 0 means Avro, else JSON (default auto)",
    )
    add_deprecated_alias(p, "--format", "--value-format", "value_format", type=choice(FORMATS))
    p.add_argument(
        "--schema-registry",
        metavar="URL",
        help=with_env("Confluent schema registry for Avro records", "INLET_CDC_SCHEMA_REGISTRY"),
    )
    p.add_argument(
        "--topic",
        metavar="T",
        help="the Kafka topic the record came from, e.g. dbserver1.public.customers "
        "(default: from the record's source block)",
    )
    p.add_argument(
        "--topic-prefix",
        metavar="P",
        help="Debezium's topic.prefix (default: the first segment of --topic)",
    )
    p.add_argument(
        "--database-url",
        metavar="URL",
        default=env("INLET_CDC_DATABASE_URL"),
        help=with_env(
            "source PostgreSQL, for the column types of JSON records without schemas",
            "INLET_CDC_DATABASE_URL",
        ),
    )
    p.add_argument(
        "--keyless",
        type=choice(KEYLESS),
        metavar=choices_metavar(KEYLESS),
        default="reject",
        help="a table without a primary key: reject its changes (default), key them by the whole row, "
        "skip them, or auto (whole row if REPLICA IDENTITY FULL per --database-url, else skip)",
    )
    p.set_defaults(handler=cmd_cdc_decode)
    return p


def _read(path: str, what: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InputFileError(f"cannot read the {what} file {path}: {e.strerror or e}") from None


def cmd_cdc_decode(args: argparse.Namespace) -> int:
    from inlet.services.cdc_consumer import DecodeError, Decoder, render_change, render_transaction

    value = _read(args.value, "value")
    key = _read(args.key, "key") if args.key else None
    registry = None
    # read at run time, so that the deprecated spelling warns only when it is used
    registry_url = args.schema_registry or env_with_aliases(
        "INLET_CDC_SCHEMA_REGISTRY", ("INLET_SCHEMA_REGISTRY",)
    )
    if registry_url:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        registry = SchemaRegistryClient({"url": registry_url})
    catalog = None
    if args.database_url:
        from inlet.services.cdc_consumer import PostgresCatalog

        catalog = PostgresCatalog(args.database_url)
    try:
        decoder = Decoder(
            topic_prefix=args.topic_prefix,
            value_format=args.value_format,
            schema_registry=registry,
            catalog=catalog,
            keyless=args.keyless,
        )
        records = decoder.decode(args.topic or "", 0, 0, key, value)
    except DecodeError as e:
        raise CliError(e.reason) from None
    finally:
        if catalog is not None:
            catalog.close()
    out = sys.stdout.buffer
    for rec in records:
        doc = render_change(rec.change) if rec.HasField("change") else render_transaction(rec.transaction)
        out.write(orjson.dumps(doc) + b"\n")
    out.flush()
    return 0
