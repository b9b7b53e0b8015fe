"""``inlet clean run|show``: Hudi's cleaner on a table (see :mod:`inlet.core.actions.clean`)."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from inlet.core import HudiTable
from inlet.services.cli import commit, options, render
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.errors import EXIT_OK
from inlet.services.cli.parsing import add_command, add_path, formatter
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")


def add_clean_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "clean",
        help="delete file slices outside the retained window, and show cleans",
        description="Clean: delete the file slices no reader of the retained window needs, as Apache\n"
        "Hudi's cleaner does (a clean instant with its plan and metadata). Policies: KEEP_LATEST_COMMITS\n"
        "(hoodie.clean.commits.retained, default 10), KEEP_LATEST_BY_HOURS, KEEP_LATEST_FILE_VERSIONS.",
        formatter_class=formatter,
    )
    sub = p.add_subparsers(dest="clean_command", metavar="COMMAND", required=True)
    run = add_command(
        sub,
        "run",
        cmd_clean_run,
        "finish interrupted cleans, then clean if anything is old enough",
        "Finish interrupted cleans, roll back failed writes, then delete the file slices outside the\n"
        "retained window; prints what was done as JSON ('instant' null when nothing was old enough).\n"
        "--dry-run prints the plan instead and changes nothing.\n\n"
        "example:\n  inlet clean run /lake/trips --option hoodie.clean.commits.retained=5",
    )
    add_path(run)
    run.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="Hudi clean option, e.g. hoodie.clean.policy=KEEP_LATEST_FILE_VERSIONS (repeatable)",
    )
    run.add_argument("--dry-run", action="store_true", help="print the plan; delete and write nothing")
    add_coordinator_options(run)
    show = add_command(
        sub,
        "show",
        cmd_clean_show,
        "list the cleans on the active timeline",
        "List the clean instants: state, policy, the earliest commit they retained and the files\n"
        "they deleted (or will); --json prints one object per clean.",
    )
    add_path(show)
    show.add_argument("--json", action="store_true", help="one JSON object per clean")


def cmd_clean_run(args: argparse.Namespace) -> int:
    opts = options.parse_key_values(args.option)
    started = time.monotonic()
    with commit.open_table(args, options.table_path(args.path)) as table:
        if args.dry_run:
            plan = table.plan_clean(opts)
            e = plan.earliest_to_retain
            print_json(
                {
                    "policy": plan.policy.value,
                    "earliest_commit_to_retain": e.time if e else None,
                    "files": {p or "": list(fs) for p, fs in plan.files.items()},
                    "file_count": plan.file_count,
                }
            )
            return EXIT_OK
        result = table.clean(opts)
    summary = result.to_dict()
    log_event(
        log,
        logging.INFO,
        "clean finished",
        table=table.base_path,
        elapsed_s=round(time.monotonic() - started, 3),
        **summary,
    )
    print_json(summary)
    return EXIT_OK


def cmd_clean_show(args: argparse.Namespace) -> int:
    docs = HudiTable.open(options.table_path(args.path)).cleans()
    if args.json:
        for doc in docs:
            print_json(doc)
        return EXIT_OK
    cols = ["instant", "state", "completion_time", "policy", "earliest_commit_to_retain", "files"]
    rows = [
        {
            "instant": d["instant"],
            "state": d["state"],
            "completion_time": d["completion_time"] or "-",
            "policy": d.get("policy") or "-",
            "earliest_commit_to_retain": d.get("earliest_commit_to_retain") or "-",
            "files": d.get("files_deleted", d.get("files_to_delete")),
        }
        for d in docs
    ]
    print(render.format_table(rows, cols))
    return EXIT_OK
