"""``inlet clustering schedule|run|show``: rewrite small file groups into fewer sorted ones (see
:mod:`inlet.core.actions.clustering`)."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from inlet.core import HudiTable
from inlet.core.actions.clustering import read_clustering_plan
from inlet.core.timeline.instant import Action
from inlet.services.cli import commit, options, render
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.errors import EXIT_OK, UsageError
from inlet.services.cli.options import int_at_least
from inlet.services.cli.parsing import ArgumentParser, add_command, add_path, formatter
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")

_FLAGS = {
    "sort_columns": ("--sort-columns", "hoodie.clustering.plan.strategy.sort.columns"),
    "small_file_limit": ("--small-file-limit", "hoodie.clustering.plan.strategy.small.file.limit"),
    "target_file_size": ("--target-file-size", "hoodie.clustering.plan.strategy.target.file.max.bytes"),
    "max_commits": ("--max-commits", "hoodie.clustering.inline.max.commits"),
}


def _add_plan_options(p: ArgumentParser) -> None:
    g = p.add_argument_group("planning (Hudi's hoodie.clustering.* options)")
    g.add_argument(
        "--sort-columns", metavar="a,b", help="columns the new files are sorted by (default the record key)"
    )
    g.add_argument(
        "--small-file-limit",
        type=int_at_least(1),
        metavar="BYTES",
        help="base files below this are clustered (300 MB)",
    )
    g.add_argument(
        "--target-file-size", type=int_at_least(1), metavar="BYTES", help="size of a new file (1 GB)"
    )
    g.add_argument(
        "--max-commits",
        type=int_at_least(1),
        metavar="N",
        help="writes since the last clustering that make one due (4)",
    )
    g.add_argument("--force", action="store_true", help="plan now, whatever the trigger says")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="Hudi option (repeatable)")


def add_clustering_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "clustering",
        help="schedule, run and show clustering (small files into sorted ones)",
        description="Clustering: rewrite small file groups into fewer, sorted ones, completed as a\n"
        "replacecommit. 'schedule' writes a plan (<t>.clustering.requested) when one is due, 'run'\n"
        "executes a pending plan, 'show' lists plans. Not for bucket-index tables.",
        formatter_class=formatter,
    )
    sub = p.add_subparsers(dest="clustering_command", metavar="COMMAND", required=True)
    sched = add_command(
        sub,
        "schedule",
        cmd_clustering_schedule,
        "write a clustering plan if one is due",
        "Plan a clustering: small base files grouped per partition; prints the plan as JSON\n"
        "('instant' null when none is due or nothing is small).\n\n"
        "example:\n  inlet clustering schedule /lake/trips --sort-columns city,ts --force",
    )
    add_path(sched)
    _add_plan_options(sched)
    add_coordinator_options(sched)
    run = add_command(
        sub,
        "run",
        cmd_clustering_run,
        "run a pending clustering plan",
        "Run the earliest pending clustering (or --instant T; with --schedule, plan one first);\n"
        "prints the commit summary as JSON. A crashed run is rolled back first; a write that\n"
        "completed meanwhile on a planned file group wins (the clustering fails, its plan dropped).\n\n"
        "example:\n  inlet clustering run /lake/trips --schedule --force --sort-columns ts",
    )
    add_path(run)
    run.add_argument("--instant", metavar="T", help="the pending clustering to run (default the earliest)")
    run.add_argument("--schedule", action="store_true", help="plan a clustering first (if due, or --force)")
    _add_plan_options(run)
    add_coordinator_options(run)
    show = add_command(
        sub,
        "show",
        cmd_clustering_show,
        "list clustering plans",
        "Pending and completed clusterings, one per line.",
    )
    add_path(show)
    show.add_argument("--json", action="store_true", help="one JSON object per clustering")


def _options(args: argparse.Namespace) -> dict[str, str]:
    return options.options_with_flags(args, _FLAGS)


def _plan_summary(table: HudiTable, instant: str | None) -> dict[str, Any]:
    if instant is None:
        return {"instant": None, "groups": 0, "file_groups": 0}
    plan = read_clustering_plan(table.load_timeline(), instant)
    return {
        "instant": instant,
        "groups": len(plan.groups),
        "file_groups": len(plan.file_groups()),
        "sort_columns": list(plan.sort_columns),
    }


def cmd_clustering_schedule(args: argparse.Namespace) -> int:
    with commit.open_table(args, options.table_path(args.path)) as table:
        instant = table.schedule_clustering(_options(args), force=args.force)
        summary = _plan_summary(table, instant)
    log_event(log, logging.INFO, "clustering scheduled" if instant else "no clustering due", **summary)
    print_json(summary)
    return EXIT_OK


def cmd_clustering_run(args: argparse.Namespace) -> int:
    if args.schedule and args.instant:
        raise UsageError("--schedule and --instant exclude each other (the scheduled plan is run)")
    opts = _options(args)
    started = time.monotonic()
    with commit.open_table(args, options.table_path(args.path)) as table:
        instant = args.instant
        if args.schedule:
            instant = table.schedule_clustering(opts, force=args.force)
            if instant is None:
                print_json({"instant": None, "completion_time": None, "action": None, "operation": "CLUSTER"})
                return EXIT_OK
        result = table.run_clustering(instant, opts, force=args.force)
    if result is None:
        print_json({"instant": None, "completion_time": None, "action": None, "operation": "CLUSTER"})
        return EXIT_OK
    summary = {**result.summary(), "files_written": len(result.metadata.write_stats())}
    log_event(
        log, logging.INFO, "clustering finished", elapsed_s=round(time.monotonic() - started, 3), **summary
    )
    print_json(summary)
    return EXIT_OK


def cmd_clustering_show(args: argparse.Namespace) -> int:
    table = HudiTable.open(options.table_path(args.path))
    tl = table.load_timeline()
    docs = []
    for inst in tl.instants:
        if inst.action == Action.CLUSTERING or (
            inst.action == Action.REPLACE_COMMIT
            and inst.is_completed
            and (tl.commit_metadata(inst).operation_type or "").upper() == "CLUSTER"
        ):
            plan = read_clustering_plan(tl, inst.time)
            docs.append(
                {
                    "instant": inst.time,
                    "state": inst.state.name,
                    "completion_time": inst.completion_time,
                    "groups": len(plan.groups),
                    "file_groups": len(plan.file_groups()),
                    "sort_columns": ",".join(plan.sort_columns) or "-",
                }
            )
    if args.json:
        for d in docs:
            print_json(d)
        return EXIT_OK
    print(
        render.format_table(
            docs, ["instant", "state", "completion_time", "groups", "file_groups", "sort_columns"]
        )
    )
    return EXIT_OK
