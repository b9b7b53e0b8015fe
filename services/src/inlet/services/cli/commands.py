"""The CLI commands: each takes the parsed arguments, writes its result to stdout and returns an exit code."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable, TimestampPartitioning
from inlet.services.cli import commit, dataio, engine, filters, options, render
from inlet.services.cli.errors import EXIT_OK, UsageError
from inlet.services.cli.render import print_json
from inlet.services.logs import log_event

log = logging.getLogger("inlet.cli")

SORT_MODE_OPTION = "hoodie.bulkinsert.sort.mode"
DEFAULT_TIMESTAMP_OUTPUT_FORMAT = "yyyy/MM/dd"


# ------------------------------------------------------------------------------ table create


def _timestamp_partitioning(args: argparse.Namespace) -> TimestampPartitioning | None:
    extras = {
        "--timestamp-output-format": args.timestamp_output_format,
        "--timestamp-input-format": args.timestamp_input_format,
    }
    if args.timestamp_type is None:
        given = [flag for flag, value in extras.items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} needs --timestamp-type")
        if args.key_generator == "timestamp":
            raise UsageError("--key-generator timestamp needs --timestamp-type")
        return None
    return TimestampPartitioning(
        timestamp_type=args.timestamp_type,
        output_format=args.timestamp_output_format or DEFAULT_TIMESTAMP_OUTPUT_FORMAT,
        input_format=args.timestamp_input_format,
        timezone=args.timestamp_timezone,
    )


def _buckets(args: argparse.Namespace) -> int:
    if args.buckets is not None and args.index != "bucket":
        raise UsageError("--buckets applies only to --index bucket")
    return int(args.buckets) if args.buckets is not None else 4


def cmd_table_create(args: argparse.Namespace) -> int:
    path = options.table_path(args.path)
    table = HudiTable.create(
        path,
        name=args.name,
        record_key=options.split_list(args.record_key, "--record-key") or [],
        partition_by=options.split_list(args.partition_by, "--partition-by"),
        table_type=args.type,
        ordering_field=args.ordering_field,
        merge_mode=args.merge_mode,
        hive_style=args.hive_style,
        url_encode=args.url_encode,
        key_generator=args.key_generator,
        index=args.index,
        buckets=_buckets(args),
        database=args.database,
        timestamp=_timestamp_partitioning(args),
    )
    log_event(log, logging.INFO, "table created", path=table.base_path, name=table.name)
    parts = ",".join(table.partition_fields) or "(none)"
    print(
        f"created {table.table_type.value} table {table.name!r} at {table.base_path} "
        f"(record key: {','.join(table.record_key_fields)}; partitioned by: {parts}; "
        f"key generator: {table.key_generator.key_type.value.lower()})"
    )
    return EXIT_OK


# ------------------------------------------------------------------------------ table describe


def cmd_table_describe(args: argparse.Namespace) -> int:
    info = HudiTable.open(options.table_path(args.path)).describe()
    if args.json:
        print_json(info)
    else:
        print(render.format_mapping(info))
    return EXIT_OK


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
        data = dataio.read_input(args.input, args.format, table.schema())
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
    incremental = args.query_type == "incremental"
    if incremental != bool(args.begin) or (args.end and not incremental):
        raise UsageError("--begin (and --end) go with --query-type incremental, which needs --begin")
    resume_from = None
    if incremental:
        if args.engine == "spark" or args.as_of:
            raise UsageError("--query-type incremental reads with the local engine and takes no --as-of")
        changes = table.read_changes(
            args.begin, args.end, columns=columns, filters=row_filters, meta_columns=not args.no_meta
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


# ------------------------------------------------------------------------------ rollback


def cmd_rollback(args: argparse.Namespace) -> int:
    with commit.open_table(args, options.table_path(args.path)) as table:
        rolled = table.rollback_failed_writes(force=args.force)
    log_event(log, logging.INFO, "rollback finished", table=table.base_path, rolled_back=rolled)
    print_json({"rolled_back": rolled})
    return EXIT_OK


# ------------------------------------------------------------------------------ compaction

_COMPACTION_FLAGS = {
    "trigger": ("--trigger", "hoodie.compact.inline.trigger.strategy"),
    "max_delta_commits": ("--max-delta-commits", "hoodie.compact.inline.max.delta.commits"),
    "max_delta_seconds": ("--max-delta-seconds", "hoodie.compact.inline.max.delta.seconds"),
    "strategy": ("--strategy", "hoodie.compaction.strategy"),
    "target_io_mb": ("--target-io-mb", "hoodie.compaction.target.io"),
}


def _compaction_options(args: argparse.Namespace, with_plan_flags: bool = True) -> dict[str, str]:
    opts = options.parse_key_values(args.option)
    if not with_plan_flags:
        return opts
    for attr, (flag, key) in _COMPACTION_FLAGS.items():
        value = getattr(args, attr, None)
        if value is None:
            continue
        text = str(value).upper() if isinstance(value, str) else str(value)
        if key in opts and opts[key].upper() != text.upper():
            raise UsageError(f"{flag} {value} contradicts --option {key}")
        opts[key] = text
    return opts


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
