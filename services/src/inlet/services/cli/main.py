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
from inlet.services.cli.backfill import add_backfill_commands
from inlet.services.cli.catalog import add_catalog_commands
from inlet.services.cli.cdc import add_cdc_commands
from inlet.services.cli.clean import add_clean_commands
from inlet.services.cli.clustering import add_clustering_commands
from inlet.services.cli.commit import add_coordinator_options
from inlet.services.cli.compaction import add_compaction_commands
from inlet.services.cli.coordinator import add_coordinator_commands
from inlet.services.cli.dataio import INPUT_FORMATS
from inlet.services.cli.dlq import add_dlq_commands
from inlet.services.cli.engine import add_engine_options
from inlet.services.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError, UsageError
from inlet.services.cli.options import (
    TABLE_PATH_ENV,
    choice,
    choices_metavar,
    env_choice,
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
from inlet.services.cli.s3_options import apply_s3_options
from inlet.services.cli.savepoint import add_savepoint_commands
from inlet.services.cli.stack import add_stack_commands
from inlet.services.cli.table import add_table_commands
from inlet.services.cli.table_services import add_table_services_commands
from inlet.services.cli.tables import add_tables_command
from inlet.services.cli.timeline import add_timeline_commands
from inlet.services.cli.verify import add_verify_commands
from inlet.services.cli.writer import add_writer_commands
from inlet.services.runtime import add_deprecated_alias

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
        "--input-format",
        type=choice(INPUT_FORMATS),
        metavar=choices_metavar(INPUT_FORMATS),
        default=env_choice("INLET_INPUT_FORMAT", INPUT_FORMATS),
        help=with_env(
            "input format (default: from the extension .parquet/.jsonl/.json/.csv, optionally .gz)",
            "INLET_INPUT_FORMAT",
        ),
    )
    add_deprecated_alias(p, "--format", "--input-format", "input_format", type=choice(INPUT_FORMATS))
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
        choices=("snapshot", "read_optimized", "incremental", "cdc", "min_delta", "append_only"),
        default="snapshot",
        help="snapshot merges Merge-on-Read log files; read_optimized reads base files only "
        "(default snapshot; the same for Copy-on-Write tables); incremental: the latest state of the "
        "records written by the commits completed in (--begin, --end]; cdc: every change of each of "
        "those commits (Hudi's op, ts_ms, before, after); min_delta: per key the net change of that "
        "window (op i/u/d, before and after images); append_only: every record it inserted, with the "
        "values it was inserted with (updated or deleted later or not)",
    )
    p.add_argument(
        "--begin",
        metavar="T",
        help="change queries (incremental, cdc, min_delta, append_only): completion time after which commits count "
        "(exclusive); the 'resume_from' of the previous query",
    )
    p.add_argument(
        "--end", metavar="T", help="change queries: last completion time that counts (default: latest)"
    )
    p.add_argument(
        "--instant",
        metavar="T",
        help="change queries: what this one completed instant changed (a commit event's "
        "instant.instant_time), instead of --begin/--end",
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


# ------------------------------------------------------------------------------ compaction


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        parents=[common_options(suppress=False)],
        formatter_class=formatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_table_commands(subparsers)
    _add_write(subparsers)
    _add_read(subparsers)
    add_timeline_commands(subparsers)
    add_compaction_commands(subparsers)
    add_clustering_commands(subparsers)
    add_clean_commands(subparsers)
    add_archive_commands(subparsers)
    add_savepoint_commands(subparsers)
    add_coordinator_commands(subparsers)
    add_catalog_commands(subparsers)
    add_dlq_commands(subparsers)
    add_cdc_commands(subparsers)
    add_writer_commands(subparsers)
    add_stack_commands(subparsers)
    add_tables_command(subparsers)
    add_table_services_commands(subparsers)
    add_verify_commands(subparsers)
    add_backfill_commands(subparsers)
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
    apply_s3_options(args)
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
