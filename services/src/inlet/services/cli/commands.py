"""``inlet write`` and ``inlet read``: write Arrow input with a Hudi write operation, read a table (snapshot, read-optimized, time travel, incremental)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.read.options import ChangeFormat
from inlet.services.cli import commit, dataio, engine, filters, options
from inlet.services.cli.errors import EXIT_OK, UsageError
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")

# --query-type values that read what a window of commits changed, and their change format
CHANGE_QUERIES = {
    "incremental": ChangeFormat.LATEST_STATE,
    "cdc": ChangeFormat.CDC,
    "min_delta": ChangeFormat.MIN_DELTA,
    "append_only": ChangeFormat.APPEND_ONLY,
}

SORT_MODE_OPTION = "hoodie.bulkinsert.sort.mode"


# ------------------------------------------------------------------------------ table create


# ------------------------------------------------------------------------------ table describe


# ------------------------------------------------------------------------------ write


def _write_options(args: argparse.Namespace) -> dict[str, str]:
    opts = options.parse_key_values(args.option)
    if args.sort_mode:
        if SORT_MODE_OPTION in opts and opts[SORT_MODE_OPTION].upper() != args.sort_mode:
            raise UsageError(f"--sort-mode {args.sort_mode} contradicts --option {SORT_MODE_OPTION}")
        opts[SORT_MODE_OPTION] = args.sort_mode
    return opts


def _check_write_args(args: argparse.Namespace) -> None:
    if args.partition and args.op != "delete_partition":
        raise UsageError("--partition applies only to --op delete_partition")
    if args.input is None and not (args.op == "delete_partition" and args.partition):
        needs = " (or --partition for delete_partition)" if args.op == "delete_partition" else ""
        raise UsageError(f"--op {args.op} needs --input FILE{needs}")


# with no records these still change the table (insert_overwrite_table empties it)
_EMPTY_INPUT_OPS = engine.EMPTY_INPUT_OPS


def _skipped_summary(operation: str) -> dict[str, Any]:
    """What ``write`` prints when there was nothing to commit (same keys as a commit summary)."""
    return {
        "instant": None,
        "completion_time": None,
        "action": None,
        "operation": operation.upper(),
        "inserts": 0,
        "updates": 0,
        "deletes": 0,
        "files": 0,
        "replaced_file_groups": 0,
    }


def cmd_write(args: argparse.Namespace) -> int:
    _check_write_args(args)
    opts = _write_options(args)
    path = options.table_path(args.path)
    with commit.open_table(args, path) as table:
        if args.engine == "spark":
            return _write_with_spark(args, table, opts)
        return _write_locally(args, table, opts)


def _write_locally(args: argparse.Namespace, table: HudiTable, opts: dict[str, str]) -> int:
    data: pa.Table | None = None
    if args.input is not None:
        data = dataio.read_input(args.input, args.input_format, table.schema())
    rows = data.num_rows if data is not None else 0
    if data is not None and rows == 0 and args.op not in _EMPTY_INPUT_OPS:
        log_event(log, logging.WARNING, "input holds no records; nothing written", input=args.input)
        print_json(_skipped_summary(args.op))
        return EXIT_OK
    log_event(
        log,
        logging.INFO,
        "write started",
        table=table.base_path,
        operation=args.op,
        input=args.input,
        rows=rows,
    )
    started = time.monotonic()
    # data is None only for delete_partition by --partition, which the core accepts
    result = table.write(data, operation=args.op, options=opts, partitions=args.partition)
    summary = result.summary()
    elapsed = round(time.monotonic() - started, 3)
    log_event(log, logging.INFO, "write finished", table=table.base_path, elapsed_s=elapsed, **summary)
    print_json(summary)
    return EXIT_OK


def _write_with_spark(args: argparse.Namespace, table: HudiTable, opts: dict[str, str]) -> int:
    log_event(log, logging.INFO, "write started", table=table.base_path, operation=args.op, engine="spark")
    started = time.monotonic()
    result = engine.write(args, table.base_path, table.schema(), opts, table.commit_protocol)
    summary = result.summary() if result is not None else _skipped_summary(args.op)
    elapsed = round(time.monotonic() - started, 3)
    log_event(
        log,
        logging.INFO,
        "write finished",
        table=table.base_path,
        engine="spark",
        elapsed_s=elapsed,
        **summary,
    )
    print_json(summary)
    return EXIT_OK


# ------------------------------------------------------------------------------ read


def cmd_read(args: argparse.Namespace) -> int:
    table = HudiTable.open(options.table_path(args.path))
    started = time.monotonic()
    columns = options.split_list(args.columns, "--columns")
    row_filters = filters.parse_filters(args.filter)
    change_query = args.query_type in CHANGE_QUERIES
    one_window = bool(args.begin) != bool(args.instant) and not (args.end and not args.begin)
    if (change_query and not one_window) or (not change_query and (args.begin or args.end or args.instant)):
        raise UsageError(
            "--query-type incremental, cdc, min_delta and append_only need --begin (and --end) or --instant, "
            "which go with them only"
        )
    resume_from = None
    if change_query:
        if args.engine == "spark" or args.as_of:
            raise UsageError(
                f"--query-type {args.query_type} reads with the local engine and takes no --as-of"
            )
        changes = table.read_changes(
            args.begin,
            args.end,
            instant=args.instant,
            columns=columns,
            filters=row_filters,
            meta_columns=not args.no_meta,
            format=CHANGE_QUERIES[args.query_type],
        )
        result, resume_from = changes.table, changes.resume_from
        if args.limit is not None:
            result = result.slice(0, args.limit)
    elif args.engine == "spark":
        result = engine.read(args, table.base_path, columns, row_filters)
    else:
        result = table.read(
            as_of=args.as_of,
            query_type=args.query_type,
            columns=columns,
            filters=row_filters,
            meta_columns=not args.no_meta,
        )
        if args.limit is not None:
            result = result.slice(0, args.limit)
    elapsed = round(time.monotonic() - started, 3)
    log_event(
        log,
        logging.INFO,
        "read finished",
        table=table.base_path,
        rows=result.num_rows,
        elapsed_s=elapsed,
        **({"resume_from": resume_from} if resume_from else {}),
    )
    if args.output:
        dataio.write_parquet(result, args.output)
        summary = {"output": args.output, "rows": result.num_rows, "columns": result.column_names}
        print_json({**summary, **({"resume_from": resume_from} if resume_from else {})})
    else:
        dataio.write_json_lines(result, sys.stdout)
    return EXIT_OK


# ------------------------------------------------------------------------------ timeline


# ------------------------------------------------------------------------------ rollback


# ------------------------------------------------------------------------------ compaction
