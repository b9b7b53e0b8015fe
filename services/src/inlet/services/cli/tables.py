"""``inlet tables``: the replicated tables, each with its freshness, lag, state and last error.

Everything comes from what the services already record; nothing new is kept:

- the lake (``--lake URI``, or the lake of the stack in ``--dir``): every Hudi table at
  ``<root>/<database>/<schema>/<table>`` (as ``inlet verify`` finds them), its last completed
  commit and when it completed (the freshness), and its pending instants;
- the writer of a running stack (``--dir``): its ``/healthz`` (each table's state -- running,
  paused or stopped -- and the error it stopped on) and its ``/metrics`` (``inlet_kafka_consumer_lag_records{consumer="writer"}``:
  the change records not yet committed, summed over the table's partitions), the endpoints
  ``inlet stack status`` lists.

Without a running writer, state and lag are unknown (shown as ``-``); a table the writer knows
but that has no commit yet is listed without a path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inlet.services.cli import render
from inlet.services.cli.errors import EXIT_OK, CliError, UsageError
from inlet.services.cli.parsing import add_command
from inlet.services.runtime import CONSUMER_LAG

CHANGE_TOPIC_PREFIX = "inlet.changes."
COLUMNS = ("table", "state", "last_commit", "freshness_s", "lag", "pending", "error")

DESCRIPTION = """\
List the replicated tables, one line each: its state at the writer (running, paused, stopped),
when its last commit completed and how long ago (freshness_s), the change records the writer has
not committed yet (lag, over the table's Kafka partitions), its pending instants, and the error it
stopped on. --json prints one object per table with its path and the last commit's instant too.

With --dir the tables are those of the stack in STACK_DIR (its lake, its writer's /healthz and
/metrics); with --lake, those of any lake root (then state and lag are unknown: '-').

examples:
  inlet tables --dir /tmp/inlet-stack
  inlet tables --lake s3://lake/tables --json
"""


def add_tables_command(subparsers: Any) -> None:
    p = add_command(
        subparsers,
        "tables",
        cmd_tables,
        "list the replicated tables with freshness, lag, state and last error",
        DESCRIPTION,
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--dir",
        metavar="STACK_DIR",
        help="the directory of an 'inlet stack' (its lake and its running writer) [env: INLET_STACK_DIR]",
    )
    where.add_argument(
        "--lake",
        metavar="URI",
        help="a lake root, a directory or s3://BUCKET/PREFIX: tables at <ROOT>/<database>/<schema>/<table>",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per table")


# ----------------------------------------------------------------------------- the lake


def _completed_at(completion_time: str, timezone: str) -> float:
    """Unix time of an instant time ``yyyyMMddHHmmssSSS`` (the table's timeline timezone)."""
    parsed = dt.datetime.strptime(completion_time[:17].ljust(17, "0"), "%Y%m%d%H%M%S%f")
    if timezone.upper() == "LOCAL":
        return parsed.timestamp()
    return parsed.replace(tzinfo=dt.UTC).timestamp()


def lake_table(path: str, now: float) -> dict[str, Any]:
    """What the lake says of the table at ``path``: last completed commit, its age, pending instants."""
    from inlet.core import HudiTable
    from inlet.core.timeline.instant import Action

    table = HudiTable.open(path)
    instants = table.instants()
    commits = [
        i for i in instants if i.is_completed and i.action in Action.WRITE_ACTIONS and i.completion_time
    ]
    last = max(commits, key=lambda i: i.completion_time or "", default=None)
    row: dict[str, Any] = {"path": path, "last_instant": None, "last_commit": None, "freshness_s": None}
    if last is not None and last.completion_time:
        at = _completed_at(last.completion_time, table.props.get("hoodie.table.timeline.timezone", "UTC"))
        row.update(
            last_instant=last.time,
            last_commit=dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds"),
            freshness_s=round(max(0.0, now - at), 1),
        )
    row["pending"] = sum(1 for i in instants if not i.is_completed)
    return row


def lake_tables(root: str) -> dict[str, str]:
    """``{database.schema.table: path}`` of the Hudi tables under ``root``."""
    import pyarrow.fs as pafs

    from inlet.core.storage import Storage
    from inlet.services.verify.lake import lake_tables as tables_of_database

    try:
        storage = Storage(root)
        if not storage.exists(""):
            raise UsageError(f"--lake {root}: no such directory")
        selector = pafs.FileSelector(storage.root, allow_not_found=True, recursive=False)
        databases = [
            i.path.rsplit("/", 1)[-1]
            for i in storage.fs.get_file_info(selector)
            if i.type == pafs.FileType.Directory
        ]
    except (OSError, ValueError) as e:
        raise UsageError(f"--lake {root}: {e}") from None
    base = root.rstrip("/")
    return {
        f"{db}.{schema}.{name}": f"{base}/{db}/{schema}/{name}"
        for db in sorted(databases)
        for schema, name in tables_of_database(root, db)
    }


# ----------------------------------------------------------------------------- the writer


def _get(url: str, timeout_s: float = 3.0) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as e:  # 503: the body still says why
        return e.read()
    except (urllib.error.URLError, OSError):
        return None


def writer_tables(health_url: str) -> dict[str, dict[str, Any]] | None:
    """Each table's state and error from the writer's ``/healthz``, its lag from ``/metrics``;
    None when the writer does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    body = _get(health_url)
    if body is None:
        return None
    try:
        reported = json.loads(body).get("tables") or {}
    except (ValueError, AttributeError):
        return None
    out: dict[str, dict[str, Any]] = {
        str(tid): {"state": t.get("state"), "error": t.get("error"), "lag": None}
        for tid, t in reported.items()
        if isinstance(t, Mapping)
    }
    metrics = _get(health_url.replace("/healthz", "/metrics"))
    if metrics is not None:
        for family in text_string_to_metric_families(metrics.decode("utf-8", "replace")):
            if family.name != CONSUMER_LAG:
                continue
            for sample in family.samples:
                if sample.labels.get("consumer") != "writer":
                    continue
                topic = sample.labels.get("topic", "")
                tid = topic[len(CHANGE_TOPIC_PREFIX) :] if topic.startswith(CHANGE_TOPIC_PREFIX) else topic
                entry = out.setdefault(tid, {"state": None, "error": None, "lag": None})
                entry["lag"] = int((entry["lag"] or 0) + max(0.0, sample.value))
    return out


# ----------------------------------------------------------------------------- the stack


def _stack(directory: Path) -> tuple[str, str | None]:
    """The stack's lake root and its writer's health URL (None when the stack is not running); the
    stack's own S3 store's address and keys go to the environment for reading its lake."""
    from inlet.services.cli.stack import _existing_stack, _read_state, _supervisor_pid
    from inlet.services.stack.supervisor import StackConfig

    _existing_stack(directory)
    config = StackConfig.load(directory)
    state = _read_state(directory) or {}
    addresses = state.get("addresses") or {}
    lake = addresses.get("lake") or (config.lake_root if config is not None else None)
    if not lake:
        raise CliError(f"the stack in {directory} has no lake yet")
    s3 = addresses.get("s3") or {}
    if lake.startswith("s3://") and s3.get("access_key") and not os.environ.get("AWS_ENDPOINT_URL_S3"):
        from inlet.core.s3 import S3Options

        os.environ.update(
            S3Options(
                endpoint=s3.get("endpoint"),
                region=s3.get("region"),
                access_key=s3.get("access_key"),
                secret_key=s3.get("secret_key"),
                path_style=True,
            ).to_env()
        )
    health = None
    if _supervisor_pid(directory) is not None:
        writer = next((c for c in state.get("components", []) if c.get("name") == "writer"), None)
        health = (writer or {}).get("health")
    return lake, health


def collect(lake: str, health_url: str | None, now: float | None = None) -> list[dict[str, Any]]:
    """One row per table of the lake (and per table only the writer knows yet), sorted by name."""
    now = time.time() if now is None else now
    paths = lake_tables(lake)
    writer = writer_tables(health_url) if health_url else None
    rows = []
    for tid in sorted(set(paths) | set(writer or {})):
        row: dict[str, Any] = {"table": tid}
        if tid in paths:
            row.update(lake_table(paths[tid], now))
        else:
            row.update(path=None, last_instant=None, last_commit=None, freshness_s=None, pending=None)
        at_writer = (writer or {}).get(tid) or {}
        row["state"] = at_writer.get("state") or ("unknown" if writer is None else "idle")
        row["lag"] = at_writer.get("lag")
        row["error"] = at_writer.get("error")
        rows.append(row)
    return rows


def cmd_tables(args: argparse.Namespace) -> int:
    directory = args.dir or (None if args.lake else os.environ.get("INLET_STACK_DIR"))
    if directory:
        lake, health = _stack(Path(directory))
    elif args.lake:
        lake, health = args.lake, None
    else:
        raise UsageError("give --dir STACK_DIR (an inlet stack) or --lake URI (a lake root)")
    rows = collect(lake, health)
    if args.json:
        for row in rows:
            render.print_json(row)
        return EXIT_OK
    if not rows:
        print(f"no tables in {lake}")
        return EXIT_OK
    shown = [{**r, "state": r["state"] if r["state"] != "unknown" else "-"} for r in rows]
    print(render.format_table(shown, list(COLUMNS)))
    return EXIT_OK
