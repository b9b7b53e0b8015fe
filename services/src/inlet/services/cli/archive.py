"""``inlet archive run``: move old instants into the LSM archived timeline (see
:mod:`inlet.core.actions.archive`); ``inlet timeline PATH --archived`` lists them."""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

from inlet.core import HudiTable
from inlet.services.cli import options
from inlet.services.cli.commit import add_coordinator_options, coordinator_session
from inlet.services.cli.errors import EXIT_OK, CliError
from inlet.services.cli.parsing import add_command, add_path, formatter
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")
SERVICES_LOCK = "services"  # the lock 'inlet table-services run' holds while it works on a table


def add_archive_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "archive",
        help="move old completed instants into the archived (LSM) timeline",
        description="Archive: move completed instants older than the retained window out of the active\n"
        "timeline into Hudi 1.x's LSM archived timeline (.hoodie/timeline/history/), as Apache Hudi's\n"
        "archiver does. Keeps hoodie.keep.min.commits (default 20) once there are more than\n"
        "hoodie.keep.max.commits (default 30); never archives past a pending instant, a savepoint,\n"
        "or what clean and compaction still need. 'inlet timeline PATH --archived' lists the archive.",
        formatter_class=formatter,
    )
    sub = p.add_subparsers(dest="archive_command", metavar="COMMAND", required=True)
    run = add_command(
        sub,
        "run",
        cmd_archive_run,
        "archive what is old enough (finishing an interrupted archive first)",
        "Finish an interrupted archive, archive the instants Hudi's rules allow, then compact the LSM\n"
        "timeline's layers if one is full; prints what was done as JSON.\n\n"
        "With --coordinator, the run holds the table's 'services' lock there (as 'inlet table-services\n"
        "run' does), so it never archives at the same time as the table services.\n\n"
        "example:\n  inlet archive run /lake/trips --option hoodie.keep.min.commits=10 "
        "--option hoodie.keep.max.commits=15",
    )
    add_path(run)
    run.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="Hudi archive option, e.g. hoodie.keep.max.commits=40 (repeatable)",
    )
    add_coordinator_options(run)


def cmd_archive_run(args: argparse.Namespace) -> int:
    opts = options.parse_key_values(args.option)
    started = time.monotonic()
    path = options.table_path(args.path)
    with coordinator_session(args, path) as session:
        if session is None:
            summary = HudiTable.open(path).archive(opts).to_dict()
        else:
            from inlet.services.coordinator_client.locks import hold_lease

            client, table_id, protocol = session
            with hold_lease(client, table_id, SERVICES_LOCK, f"inlet-archive-{os.getpid()}") as lease:
                summary = HudiTable.open(path, commit_protocol=protocol).archive(opts).to_dict()
                if lease.lost.is_set():
                    raise CliError("the table's services lock at the coordinator was lost during the archive")
    table_path = path
    log_event(
        log,
        logging.INFO,
        "archive finished",
        table=table_path,
        elapsed_s=round(time.monotonic() - started, 3),
        **summary,
    )
    print_json(summary)
    return EXIT_OK
