"""``inlet``: create, write, read and inspect Apache Hudi (table version 8) Copy-on-Write and Merge-on-Read tables.

Every command prints its result on stdout (JSON lines where a program will read it) and logs
on stderr. Any failure prints one line ``inlet: error: <problem>`` on stderr and exits 1
(2 for bad arguments); a failed write leaves the table as it was.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import pyarrow as pa

from inlet.core import InletError
from inlet.services import logs
from inlet.services.cli import commands
from inlet.services.cli.archive import add_archive_commands
from inlet.services.cli.catalog import add_catalog_commands
from inlet.services.cli.cdc import add_cdc_commands
from inlet.services.cli.clean import add_clean_commands
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.coordinator import add_coordinator_commands
from inlet.services.cli.dataio import INPUT_FORMATS
from inlet.services.cli.dlq import add_dlq_commands
from inlet.services.cli.engine import add_engine_options
from inlet.services.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError, UsageError
from inlet.services.cli.options import (
    TABLE_PATH_ENV,
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
    Handler,
    add_command,
    add_path,
    common_options,
    formatter,
)
from inlet.services.cli.stack import add_stack_commands
from inlet.services.cli.table_services import add_table_services_commands
from inlet.services.cli.writer import add_writer_commands

log = logging.getLogger("inlet.cli")

PROG = "inlet"
OPERATIONS = (
    "insert",
    "upsert",
    "delete",
    "bulk_insert",
    "insert_overwrite",
    "insert_overwrite_table",
    "delete_partition",
)
SORT_MODES = ("NONE", "GLOBAL_SORT", "PARTITION_SORT")
TABLE_TYPES = ("cow", "mor")
MERGE_MODES = ("event_time_ordering", "commit_time_ordering")
KEY_GENERATORS = ("simple", "complex", "timestamp", "non_partition")
TIMESTAMP_TYPES = ("EPOCHMILLISECONDS", "UNIX_TIMESTAMP", "EPOCHMICROSECONDS", "DATE_STRING")
INDEXES = ("simple", "bucket")
COMPACTION_TRIGGERS = ("num_commits", "time_elapsed", "num_or_time", "num_and_time")
COMPACTION_STRATEGIES = ("log_size", "log_count")

DESCRIPTION = """\
Create, write, read and inspect Apache Hudi (table version 8) Copy-on-Write and Merge-on-Read tables.

Results go to stdout (JSON lines where a program will read them), logs to stderr. A failure
prints one line 'inlet: error: <problem>' on stderr; a failed write leaves the table as it was.
"""

EPILOG = f"""\
environment:
  {logs.LOG_LEVEL_ENV}    log level on stderr (DEBUG, INFO, WARNING, ERROR; default WARNING)
  {logs.LOG_FORMAT_ENV}   log format on stderr: text or json (default text)
  {TABLE_PATH_ENV}   table path used when PATH is not given
  (options of each command name their own variables in its --help)

exit status: 0 success, 1 failure (message on stderr), 2 bad arguments.
"""


# ------------------------------------------------------------------------------ table


def _add_table_create(tables: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        tables,
        "create",
        commands.cmd_table_create,
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


def _add_table_describe(tables: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        tables,
        "describe",
        commands.cmd_table_describe,
        "show a table's configuration, schema and timeline summary",
        "Show a table's name, type, keys, partitioning, merge mode, index, latest commit,\n"
        "schema and hoodie.properties.",
    )
    add_path(p)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")


def _add_table(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "table",
        help="create or describe a table",
        description="Create or describe a Hudi table.",
        formatter_class=formatter,
    )
    tables = p.add_subparsers(dest="table_command", metavar="COMMAND", required=True)
    _add_table_create(tables)
    _add_table_describe(tables)


# ------------------------------------------------------------------------------ write / read


def _add_write(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "write",
        commands.cmd_write,
        "write a Parquet, JSON-lines or CSV file to a table",
        "Write records from a file with a Hudi write operation and commit them atomically;\n"
        "prints the commit summary as one JSON line. A failed write leaves the table unchanged.\n\n"
        "operations: insert, upsert (insert or update by record key), delete (the input needs\n"
        "only the record key and partition columns), bulk_insert, insert_overwrite (replace the\n"
        "partitions in the input), insert_overwrite_table, delete_partition.\n\n"
        "example:\n  inlet write /lake/trips --op upsert --input changes.jsonl",
    )
    add_path(p)
    p.add_argument(
        "--op",
        required=True,
        type=choice(OPERATIONS),
        metavar=choices_metavar(OPERATIONS),
        help="the write operation",
    )
    p.add_argument(
        "--input", metavar="FILE", help="input file (required unless delete_partition --partition)"
    )
    p.add_argument(
        "--format",
        type=choice(INPUT_FORMATS),
        metavar=choices_metavar(INPUT_FORMATS),
        default=env_choice("INLET_INPUT_FORMAT", INPUT_FORMATS),
        help=with_env(
            "input format (default: from the extension .parquet/.jsonl/.json/.csv, optionally .gz)",
            "INLET_INPUT_FORMAT",
        ),
    )
    p.add_argument(
        "--sort-mode",
        type=choice(SORT_MODES),
        metavar=choices_metavar(SORT_MODES),
        default=env_choice("INLET_BULK_INSERT_SORT_MODE", SORT_MODES),
        help=with_env(
            "bulk_insert sort mode (same as --option hoodie.bulkinsert.sort.mode=...; default NONE)",
            "INLET_BULK_INSERT_SORT_MODE",
        ),
    )
    p.add_argument(
        "--partition",
        action="append",
        metavar="P",
        help="partition path to drop with --op delete_partition (repeatable)",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="Hudi write option, e.g. hoodie.parquet.max.file.size=134217728 (repeatable)",
    )
    add_engine_options(p)
    add_coordinator_options(p)


def _add_read(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "read",
        commands.cmd_read,
        "read a table (snapshot or time travel) as JSON lines or Parquet",
        "Read the latest snapshot (or the table as of an instant) and print one JSON object per\n"
        "row: timestamps and dates as ISO-8601 strings, decimals as strings, bytes as base64.\n\n"
        "filters: 'col op value' with op one of == != < <= > >= in ('in' takes comma-separated\n"
        "values); several --filter options must all hold.\n\n"
        "example:\n  inlet read /lake/trips --filter 'city == sf' --filter 'fare >= 10' --columns id,fare\n"
        "  inlet read /lake/trips --query-type incremental --begin 20240501093000000 --output changes.parquet",
    )
    add_path(p)
    p.add_argument(
        "--as-of",
        metavar="T",
        help="time travel: read the table as of instant T (yyyyMMddHHmmssSSS or ISO-8601, UTC)",
    )
    p.add_argument(
        "--query-type",
        choices=("snapshot", "read_optimized", "incremental"),
        default="snapshot",
        help="snapshot merges Merge-on-Read log files; read_optimized reads base files only "
        "(default snapshot; the same for Copy-on-Write tables); incremental: the latest state of the "
        "records written by the commits completed in (--begin, --end]",
    )
    p.add_argument(
        "--begin",
        metavar="T",
        help="incremental: completion time after which commits count (exclusive); the 'resume_from' "
        "of the previous query",
    )
    p.add_argument(
        "--end", metavar="T", help="incremental: last completion time that counts (default: latest)"
    )
    p.add_argument("--columns", metavar="a,b", help="columns to return, in this order (default all)")
    p.add_argument(
        "--filter",
        action="append",
        metavar="'col op value'",
        help="row filter, e.g. 'fare >= 10' or 'city in sf,nyc' (repeatable; all must hold)",
    )
    p.add_argument("--output", metavar="FILE.parquet", help="write a Parquet file instead of JSON lines")
    p.add_argument("--no-meta", action="store_true", help="leave out the _hoodie_* meta columns")
    p.add_argument("--limit", type=int_at_least(0), metavar="N", help="return at most N rows")
    add_engine_options(p)


# ------------------------------------------------------------------------------ timeline / rollback


def _add_timeline(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
    p = add_command(
        subparsers,
        "timeline",
        commands.cmd_timeline,
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
        commands.cmd_rollback,
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


# ------------------------------------------------------------------------------ compaction


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


def _add_compaction(subparsers: argparse._SubParsersAction[ArgumentParser]) -> None:
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
        commands.cmd_compaction_schedule,
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
        commands.cmd_compaction_run,
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
        commands.cmd_compaction_show,
        "list compaction plans, pending and completed",
        "List the compactions on the active timeline: instant, state, completion time and the\n"
        "size of each plan; --json prints one object per compaction with its operations.",
    )
    add_path(show)
    show.add_argument("--json", action="store_true", help="one JSON object per compaction (with operations)")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=[common_options(suppress=False)],
        formatter_class=formatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_table(subparsers)
    _add_write(subparsers)
    _add_read(subparsers)
    _add_timeline(subparsers)
    _add_rollback(subparsers)
    _add_compaction(subparsers)
    add_clean_commands(subparsers)
    add_archive_commands(subparsers)
    add_coordinator_commands(subparsers)
    add_catalog_commands(subparsers)
    add_dlq_commands(subparsers)
    add_cdc_commands(subparsers)
    add_writer_commands(subparsers)
    add_stack_commands(subparsers)
    add_table_services_commands(subparsers)
    return parser


# ------------------------------------------------------------------------------ main


def _configure_logging(args: argparse.Namespace) -> None:
    level = args.log_level
    if level is None and args.verbose:
        level = "DEBUG" if args.verbose > 1 else "INFO"
    try:
        logs.configure(level=level, fmt=args.log_format)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _fail(message: str, code: int) -> int:
    text = " ".join(message.split()) or "unknown error"
    sys.stderr.write(f"{PROG}: error: {text}\n")
    return code


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args)
    handler: Handler = args.handler
    return handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 failure, 2 bad arguments)."""
    try:
        return _run(argv)
    except CliError as e:
        return _fail(str(e), e.exit_code)
    except InletError as e:
        return _fail(str(e), EXIT_FAILURE)
    except pa.ArrowException as e:
        return _fail(f"{type(e).__name__}: {e}", EXIT_FAILURE)
    except BrokenPipeError:
        # stdout's reader went away (e.g. `| head`): stop quietly, and keep the interpreter's
        # final flush of stdout from failing again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except OSError as e:
        return _fail(str(e), EXIT_FAILURE)
    except Exception as e:
        log.debug("unexpected error", exc_info=True)
        return _fail(
            f"unexpected {type(e).__name__}: {e} (run with --log-level DEBUG for a traceback)", EXIT_FAILURE
        )


if __name__ == "__main__":
    sys.exit(main())
