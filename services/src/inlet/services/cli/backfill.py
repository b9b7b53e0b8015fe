"""``inlet backfill TABLE...``: an online backfill by Debezium's incremental snapshot (see :mod:`inlet.services.backfill`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from inlet.services.cdc_consumer.settings import DEFAULT_SIGNAL_TABLE
from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.options import parse_key_values
from inlet.services.cli.parsing import ArgumentParser, add_command
from inlet.services.runtime import Setting, SettingsError, add_arguments, resolve

ENV_PREFIX = "INLET_BACKFILL_"

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "dir",
        "--dir",
        "a running `inlet stack`'s directory: its source, broker and topic prefix are used",
        metavar="DIR",
    ),
    Setting("source", "--source", "the source PostgreSQL (libpq URL), without --dir", metavar="URL"),
    Setting(
        "kafka_bootstrap",
        "--kafka-bootstrap",
        "Kafka bootstrap servers where Debezium's notifications go, without --dir",
        metavar="HOST:PORT[,...]",
    ),
    Setting(
        "kafka",
        "--kafka-option",
        "librdkafka setting KEY=VALUE of the notification consumer (security, for one); repeatable",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="KAFKA_OPTIONS",
    ),
    Setting("topic_prefix", "--topic-prefix", "Debezium's topic.prefix, without --dir", metavar="PREFIX"),
    Setting(
        "signal_table",
        "--signal-table",
        "the connector's signal.data.collection",
        default=DEFAULT_SIGNAL_TABLE,
        metavar="SCHEMA.TABLE",
    ),
    Setting(
        "timeout",
        "--timeout",
        "seconds to wait for Debezium to report the backfill COMPLETED (it goes on after that)",
        kind="float",
        default=3600.0,
        metavar="S",
    ),
    Setting(
        "wait",
        "--wait",
        "follow the backfill until it completes (--no-wait: send the signal, print its id, return)",
        kind="bool",
        default=True,
    ),
)

DESCRIPTION = """\
Load tables again while their changes keep streaming, on the connector's own replication slot.

Inserts Debezium's execute-snapshot signal (incremental) into the signal table of the source.
Debezium then reads each table in primary-key chunks between a low and a high watermark, drops from
a chunk every key changed while it was read, and emits the rest as snapshot reads (op r) in the
stream; the writer stores them below every streamed change of their key, so a row changed during the
backfill keeps its newer value. Other tables go on streaming meanwhile.

Progress comes from Debezium's notifications (topic __debezium-notification.<prefix>): one line per
chunk on stderr, one line per table with the rows read, and the exit status once Debezium reports
the snapshot COMPLETED (0) or ABORTED / a table it could not read (1). The tables must exist in the
source, be captured by the connector (table.include.list) and have a primary key.

A backfill fills the lake; it does not remove rows the source no longer has: to resynchronise a
lake that drifted, use inlet verify --repair.
"""

EPILOG = """\
examples:
  inlet backfill --dir /tmp/stack public.orders public.customers
  inlet backfill --source postgresql://inlet@pg/app --kafka-bootstrap kafka:9092 --topic-prefix app public.orders
"""


class BackfillFailed(CliError):
    """Debezium reported the backfill failed or did not report it done in time."""


def add_backfill_commands(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "backfill",
        cmd_backfill,
        "load tables again while their changes keep streaming (Debezium incremental snapshot)",
        DESCRIPTION,
    )
    p.epilog = EPILOG
    p.add_argument("tables", nargs="+", metavar="SCHEMA.TABLE", help="the tables to backfill")
    add_arguments(p, SETTINGS, ENV_PREFIX)


def _from_stack(directory: Path, tables: list[str]) -> tuple[str, str, str]:
    """(source URL, Kafka bootstrap, topic prefix) of the running stack in ``directory``, which
    replicates every one of ``tables``."""
    import fnmatch

    from inlet.services.stack.supervisor import STATE_FILE, StackConfig

    config = StackConfig.load(directory)
    if config is None:
        raise UsageError(f"--dir {directory}: no stack there (no config.json)")
    try:
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {}
    if state.get("state") != "running":
        raise UsageError(f"--dir {directory}: the stack is not running (inlet stack up --dir {directory})")
    addresses = state.get("addresses", {})
    bootstrap = addresses.get("kafka", {}).get("bootstrap")
    url = config.source or addresses.get("postgres", {}).get("url")
    if not bootstrap or not url:
        raise UsageError(f"--dir {directory}: stack.json lacks the broker or source address")
    for table in tables:
        if not any(fnmatch.fnmatchcase(table, g) for g in config.tables):
            raise UsageError(
                f"{table} does not replicate in the stack at {directory} (--tables {','.join(config.tables)})"
            )
    return str(url), str(bootstrap), config.database


def cmd_backfill(args: argparse.Namespace) -> int:
    import psycopg

    from inlet.services import backfill

    try:
        v = resolve(args, SETTINGS, ENV_PREFIX)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    if v["dir"]:
        if v["source"] or v["kafka_bootstrap"] or v["topic_prefix"]:
            raise UsageError("give --dir, or --source, --kafka-bootstrap and --topic-prefix, not both")
        url, bootstrap, prefix = _from_stack(Path(v["dir"]).resolve(), list(args.tables))
    else:
        missing = [
            f"--{n.replace('_', '-')}" for n in ("source", "kafka_bootstrap", "topic_prefix") if not v[n]
        ]
        if missing:
            raise UsageError(f"give --dir of a running stack, or {', '.join(missing)}")
        url, bootstrap, prefix = v["source"], v["kafka_bootstrap"], v["topic_prefix"]
    if v["timeout"] <= 0:
        raise UsageError("--timeout must be more than 0")
    tables = list(args.tables)
    started = time.monotonic()
    reader = (
        backfill.NotificationReader(
            bootstrap,
            backfill.notification_topic(prefix),
            dict(parse_key_values(v["kafka"], "--kafka-option")),
        )
        if v["wait"]
        else None
    )
    try:
        if reader is not None:
            try:
                reader.check()
            except backfill.BackfillError as e:
                raise BackfillFailed(str(e)) from None
        try:
            signal_id = backfill.send_signal(url, tables, v["signal_table"])
        except backfill.BackfillError as e:
            raise UsageError(str(e)) from None
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BackfillFailed(f"cannot signal the source: {first}") from None
        sys.stderr.write(f"backfill {signal_id}: signal sent for {', '.join(tables)}\n")
        if reader is None:
            sys.stdout.write(json.dumps({"signal_id": signal_id, "tables": tables}) + "\n")
            return 0
        rows: dict[str, int] = {}
        try:
            for n in backfill.follow(reader, signal_id, v["timeout"]):
                sys.stderr.write(f"backfill {signal_id}: {n.describe()}\n")
                if n.type == "TABLE_SCAN_COMPLETED":
                    rows[n.data.get("scanned_collection", "")] = int(n.data.get("total_rows_scanned") or 0)
        except backfill.BackfillError as e:
            raise BackfillFailed(str(e)) from None
        doc = {
            "signal_id": signal_id,
            "tables": tables,
            "rows_read": rows,
            "seconds": round(time.monotonic() - started, 3),
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    finally:
        if reader is not None:
            reader.close()
