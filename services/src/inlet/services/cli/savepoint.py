"""``inlet savepoint create|list|delete`` and ``inlet restore``: Hudi's savepoints and restore to a
savepoint (see :mod:`inlet.core.actions.savepoint` and :mod:`inlet.core.actions.restore`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from inlet.core import HudiTable
from inlet.services.cli import options, render
from inlet.services.cli.commit import add_coordinator_options, coordinator_session
from inlet.services.cli.errors import EXIT_OK, CliError
from inlet.services.cli.parsing import add_command, add_path, formatter
from inlet.services.cli.render import print_json


def add_savepoint_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "savepoint",
        help="create, list and delete savepoints",
        description="Savepoints: a completed commit whose files clean and archive keep, and that\n"
        "'inlet restore' can return the table to (Apache Hudi's savepoint action).",
        formatter_class=formatter,
    )
    sub = p.add_subparsers(dest="savepoint_command", metavar="COMMAND", required=True)
    create = add_command(
        sub,
        "create",
        cmd_savepoint_create,
        "savepoint a completed commit",
        "Savepoint the completed commit, deltacommit or replacecommit requested at --instant; prints\n"
        "the savepoint as JSON.\n\nexample:\n  inlet savepoint create /lake/trips --instant 20240102030405678",
    )
    add_path(create)
    add_coordinator_options(create)
    create.add_argument("--instant", required=True, help="the commit's instant time (yyyyMMddHHmmssSSS)")
    create.add_argument("--user", help="who savepoints (default: this user)")
    create.add_argument("--comment", default="", help="why (stored in the savepoint)")
    listing = add_command(
        sub,
        "list",
        cmd_savepoint_list,
        "list the savepoints",
        "List the completed savepoints, oldest first; --json prints one object per savepoint.",
    )
    add_path(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per savepoint")
    delete = add_command(
        sub,
        "delete",
        cmd_savepoint_delete,
        "delete a savepoint",
        "Delete the savepoint at --instant (its commit may then be cleaned, archived or restored past).",
    )
    add_path(delete)
    add_coordinator_options(delete)
    delete.add_argument("--instant", required=True, help="the savepoint's instant time")

    r = add_command(
        subparsers,
        "restore",
        cmd_restore,
        "restore the table to a savepoint",
        "Roll back, newest first, every write after the savepoint --to (a restore instant, as\n"
        "Apache Hudi's restore to savepoint), or finish a restore to it that was interrupted. No other\n"
        "writer may run meanwhile. Prints what was rolled back as JSON.\n\n"
        "example:\n  inlet restore /lake/trips --to 20240102030405678",
    )
    add_path(r)
    r.add_argument("--to", required=True, help="the savepoint's instant time")
    add_coordinator_options(r)


def _table(args: argparse.Namespace) -> HudiTable:
    return HudiTable.open(options.table_path(args.path))


@contextlib.contextmanager
def _under_writer_lock(args: argparse.Namespace, path: str) -> Iterator[HudiTable]:
    """The table, with ``--coordinator``: while this command holds the table's writers' lock there.

    A savepoint takes the time of the commit it keeps, a time the coordinator has completed
    already, and a restore rolls back completed commits, which the coordinator refuses (it rolls
    back failed writes only); so neither is an instant the coordinator begins. Holding its lock
    keeps writers and services that commit through the coordinator out meanwhile (the coordinator
    reads the timeline from the table, so it sees the result)."""
    with coordinator_session(args, path) as session:
        if session is None:
            yield HudiTable.open(path)
            return
        from inlet.services.coordinator_client.locks import hold_lease

        client, table_id, _ = session
        with hold_lease(client, table_id, "", f"inlet-savepoint-{os.getpid()}") as lease:
            yield HudiTable.open(path)
            if lease.lost.is_set():
                raise CliError("the table's lock at the coordinator was lost meanwhile")


def cmd_savepoint_create(args: argparse.Namespace) -> int:
    with _under_writer_lock(args, options.table_path(args.path)) as table:
        info = table.savepoint(args.instant, user=args.user, comment=args.comment)
    print_json(info.to_dict())
    return EXIT_OK


def cmd_savepoint_list(args: argparse.Namespace) -> int:
    infos = _table(args).savepoints()
    if args.json:
        for info in infos:
            print_json(info.to_dict())
        return EXIT_OK
    cols = ["instant", "completion_time", "savepointed_by", "comment", "files"]
    print(render.format_table([{c: info.to_dict()[c] for c in cols} for info in infos], cols))
    return EXIT_OK


def cmd_savepoint_delete(args: argparse.Namespace) -> int:
    with _under_writer_lock(args, options.table_path(args.path)) as table:
        table.delete_savepoint(args.instant)
    print_json({"deleted": args.instant})
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    with _under_writer_lock(args, options.table_path(args.path)) as table:
        print_json(table.restore(args.to).to_dict())
    return EXIT_OK
