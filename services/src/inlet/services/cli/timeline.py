"""``inlet timeline`` and ``inlet rollback``: list a table's instants (active or archived), roll back failed writes."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from inlet.core import HudiTable
from inlet.services.cli import commit, options, render
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.errors import EXIT_OK
from inlet.services.cli.parsing import (
    ArgumentParser,
    add_command,
    add_path,
)
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")


def _add_timeline(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "timeline",
        cmd_timeline,
        "list the table's instants (commits, rollbacks, ...)",
        "List the instants of the active timeline (or, with --archived, of the LSM archived\n"
        "timeline under .hoodie/timeline/history/): requested time, action, state and\n"
        "completion time, oldest first.",
    )
    add_path(p)
    p.add_argument("--json", action="store_true", help="print one JSON object per instant")
    p.add_argument("--archived", action="store_true", help="list the archived instants instead")


def _add_rollback(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "rollback",
        cmd_rollback,
        "roll back failed (pending) writes",
        "Roll back pending writes whose writer is gone (expired heartbeat) and finish\n"
        "interrupted rollbacks; prints the rolled-back instants as JSON.",
    )
    add_path(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="roll back every pending write, even one whose writer may still be running",
    )
    add_coordinator_options(p)


def cmd_timeline(args: argparse.Namespace) -> int:
    table = HudiTable.open(options.table_path(args.path))
    instants = table.archived_timeline().instants if args.archived else table.instants()
    rows = [
        {
            "instant": i.time,
            "action": i.action,
            "state": i.state.value,
            "completion_time": i.completion_time,
        }
        for i in instants
    ]
    if args.json:
        for row in rows:
            print_json(row)
    else:
        shown = [{**row, "completion_time": row["completion_time"] or "-"} for row in rows]
        print(render.format_table(shown, ["instant", "action", "state", "completion_time"]))
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    with commit.open_table(args, options.table_path(args.path)) as table:
        rolled = table.rollback_failed_writes(force=args.force)
    log_event(log, logging.INFO, "rollback finished", table=table.base_path, rolled_back=rolled)
    print_json({"rolled_back": rolled})
    return EXIT_OK


def add_timeline_commands(subparsers: Any) -> None:
    _add_timeline(subparsers)
    _add_rollback(subparsers)
