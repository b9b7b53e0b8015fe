"""``inlet compaction schedule|run|show``: Merge-on-Read compaction (see :mod:`inlet.core.actions.compaction_plan`)."""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from inlet.core import HudiTable
from inlet.services.cli import commit, engine, options, render
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.engine import add_engine_options
from inlet.services.cli.errors import EXIT_OK, UsageError
from inlet.services.cli.options import (
    choice,
    choices_metavar,
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

COMPACTION_TRIGGERS = ("num_commits", "time_elapsed", "num_or_time", "num_and_time")


COMPACTION_STRATEGIES = ("log_size", "log_count")


def _add_compaction_plan_options(p: ArgumentParser) -> None:
    """When a compaction is due and what its plan takes (Hudi's compaction options)."""
    g = p.add_argument_group("scheduling")
    g.add_argument(
        "--trigger",
        type=choice(COMPACTION_TRIGGERS),
        metavar=choices_metavar(COMPACTION_TRIGGERS),
        default=env_choice("INLET_COMPACTION_TRIGGER", COMPACTION_TRIGGERS),
        help=with_env(
            "when a compaction is due: after --max-delta-commits delta commits since the last "
            "compaction, after --max-delta-seconds, either or both (default num_commits)",
            "INLET_COMPACTION_TRIGGER",
        ),
    )
    g.add_argument(
        "--max-delta-commits",
        type=int_at_least(0),
        metavar="N",
        default=env_int("INLET_COMPACTION_MAX_DELTA_COMMITS"),
        help=with_env(
            "delta commits that make a compaction due (default 5)", "INLET_COMPACTION_MAX_DELTA_COMMITS"
        ),
    )
    g.add_argument(
        "--max-delta-seconds",
        type=int_at_least(0),
        metavar="S",
        default=env_int("INLET_COMPACTION_MAX_DELTA_SECONDS"),
        help=with_env(
            "seconds since the last compaction that make one due (default 3600)",
            "INLET_COMPACTION_MAX_DELTA_SECONDS",
        ),
    )
    g.add_argument(
        "--strategy",
        type=choice(COMPACTION_STRATEGIES),
        metavar=choices_metavar(COMPACTION_STRATEGIES),
        default=env_choice("INLET_COMPACTION_STRATEGY", COMPACTION_STRATEGIES),
        help=with_env(
            "which file groups go first: largest total log size, or most log files (default log_size)",
            "INLET_COMPACTION_STRATEGY",
        ),
    )
    g.add_argument(
        "--target-io-mb",
        type=int_at_least(0),
        metavar="N",
        default=env_int("INLET_COMPACTION_TARGET_IO_MB"),
        help=with_env(
            "MB one plan may read and write; file groups are taken until it is reached (default 512000)",
            "INLET_COMPACTION_TARGET_IO_MB",
        ),
    )


def _add_compaction_option(p: ArgumentParser) -> None:
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="Hudi option, e.g. hoodie.compaction.logfile.size.threshold=1048576 or "
        "hoodie.metadata.enable=false (repeatable)",
    )


def add_compaction_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compaction",
        help="schedule, run and show Merge-on-Read compactions",
        description="Merge-on-Read compaction: merge file groups' log files into new base files.\n"
        "'schedule' writes a plan (<t>.compaction.requested) if a compaction is due, 'run'\n"
        "executes a pending plan, 'show' lists plans. Writers may keep writing meanwhile.",
        formatter_class=formatter,
    )
    sub = p.add_subparsers(dest="compaction_command", metavar="COMMAND", required=True)
    sched = add_command(
        sub,
        "schedule",
        cmd_compaction_schedule,
        "write a compaction plan if a compaction is due",
        "Schedule a compaction if one is due: pick the file groups with log files (largest first,\n"
        "up to --target-io-mb) and write their plan; prints the instant (null if none) as JSON.\n"
        "Only log files of delta commits completed before the plan's instant are taken.\n\n"
        "example:\n  inlet compaction schedule /lake/trips --max-delta-commits 1",
    )
    add_path(sched)
    _add_compaction_plan_options(sched)
    _add_compaction_option(sched)
    add_coordinator_options(sched)
    run = add_command(
        sub,
        "run",
        cmd_compaction_run,
        "run a pending compaction plan",
        "Run the earliest pending compaction plan (or --instant T; with --schedule, schedule one\n"
        "first and run it); prints the commit summary as JSON ('instant' null if none is pending).\n"
        "A run that crashed earlier is rolled back first once its heartbeat has expired.\n\n"
        "example:\n  inlet compaction run /lake/trips --schedule --max-delta-commits 1",
    )
    add_path(run)
    run.add_argument("--instant", metavar="T", help="the pending compaction to run (default the earliest)")
    run.add_argument("--schedule", action="store_true", help="schedule a compaction first (if due)")
    run.add_argument(
        "--force",
        action="store_true",
        help="take over an inflight compaction even if its heartbeat is alive (its process is gone)",
    )
    _add_compaction_plan_options(run)
    _add_compaction_option(run)
    add_engine_options(run)
    add_coordinator_options(run)
    show = add_command(
        sub,
        "show",
        cmd_compaction_show,
        "list compaction plans, pending and completed",
        "List the compactions on the active timeline: instant, state, completion time and the\n"
        "size of each plan; --json prints one object per compaction with its operations.",
    )
    add_path(show)
    show.add_argument("--json", action="store_true", help="one JSON object per compaction (with operations)")


_COMPACTION_FLAGS = {
    "trigger": ("--trigger", "hoodie.compact.inline.trigger.strategy"),
    "max_delta_commits": ("--max-delta-commits", "hoodie.compact.inline.max.delta.commits"),
    "max_delta_seconds": ("--max-delta-seconds", "hoodie.compact.inline.max.delta.seconds"),
    "strategy": ("--strategy", "hoodie.compaction.strategy"),
    "target_io_mb": ("--target-io-mb", "hoodie.compaction.target.io"),
}


def _compaction_options(args: argparse.Namespace) -> dict[str, str]:
    return options.options_with_flags(args, _COMPACTION_FLAGS, upper=True)


def _plan_summary(table: HudiTable, instant: str | None) -> dict[str, Any]:
    info = next((c for c in table.compactions() if c.instant_time == instant), None)
    ops = info.plan.operations if info is not None else ()
    return {
        "instant": instant,
        "file_groups": len(ops),
        "log_files": sum(len(op.log_files) for op in ops),
        "log_size": sum(op.log_size for op in ops),
    }


def cmd_compaction_schedule(args: argparse.Namespace) -> int:
    with commit.open_table(args, options.table_path(args.path)) as table:
        instant = table.schedule_compaction(_compaction_options(args))
    summary = _plan_summary(table, instant)
    log_event(log, logging.INFO, "compaction scheduled" if instant else "no compaction due", **summary)
    print_json(summary)
    return EXIT_OK


def cmd_compaction_run(args: argparse.Namespace) -> int:
    if args.schedule and args.instant:
        raise UsageError("--schedule and --instant exclude each other (the scheduled plan is run)")
    plan_flags = [flag for attr, (flag, _) in _COMPACTION_FLAGS.items() if getattr(args, attr) is not None]
    if plan_flags and not args.schedule:
        raise UsageError(f"{', '.join(plan_flags)} applies only with --schedule")
    opts = _compaction_options(args)
    started = time.monotonic()
    with commit.open_table(args, options.table_path(args.path)) as table:
        instant = args.instant
        if args.schedule:
            instant = table.schedule_compaction(opts)
        if args.engine == "spark":
            result = engine.run_compaction(args, table.base_path, instant, opts, table.commit_protocol)
        else:
            result = table.run_compaction(instant, opts, force=args.force)
    if result is None:
        log_event(log, logging.INFO, "no pending compaction", table=table.base_path)
        print_json({"instant": None, "completion_time": None, "action": None, "operation": "COMPACT"})
        return EXIT_OK
    stats = result.metadata.write_stats()
    summary = {
        **result.summary(),
        "log_files_compacted": sum(s.total_log_files_compacted for s in stats),
        "records_written": sum(s.num_writes for s in stats),
    }
    summary.pop("replaced_file_groups", None)
    elapsed = round(time.monotonic() - started, 3)
    log_event(log, logging.INFO, "compaction finished", table=table.base_path, elapsed_s=elapsed, **summary)
    print_json(summary)
    return EXIT_OK


def cmd_compaction_show(args: argparse.Namespace) -> int:
    table = HudiTable.open(options.table_path(args.path))
    docs = [c.to_dict() for c in table.compactions()]
    if args.json:
        for doc in docs:
            print_json(doc)
        return EXIT_OK
    rows = [
        {
            "instant": d["instant"],
            "state": d["state"],
            "completion_time": d["completion_time"] or "-",
            "file_groups": d["file_groups"],
            "log_files": d["log_files"],
            "log_size": d["log_size"],
        }
        for d in docs
    ]
    print(
        render.format_table(
            rows, ["instant", "state", "completion_time", "file_groups", "log_files", "log_size"]
        )
    )
    return EXIT_OK
