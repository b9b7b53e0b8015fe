"""``inlet writer run``: the writer service (``inlet.changes.<table>`` topics -> Hudi tables);
``inlet writer load``: the initial load by COPY (:mod:`inlet.services.writer.initial_load`).

Every flag also comes from an ``INLET_WRITER_*`` environment variable (named in ``--help``); a flag
wins over its variable. On start it prints one JSON line on stdout (``{"event": "serving", ...}``);
logs go to stderr. SIGTERM/SIGINT finish the batch in progress, then the process exits 0.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from inlet.services.cli.commit import CONNECTION_SETTINGS, coordinator_token, read_ca
from inlet.services.cli.engine import check_engine, engine_settings
from inlet.services.cli.errors import UsageError
from inlet.services.cli.options import parse_key_values
from inlet.services.cli.s3_options import add_s3_options
from inlet.services.extras import require
from inlet.services.runtime import (
    Setting,
    SettingsError,
    StopSignal,
    add_arguments,
    announce,
    resolve,
    serve_http,
)
from inlet.services.writer import DEFAULT_GROUP as WRITER_GROUP

ENV_PREFIX = "INLET_WRITER_"

ENGINE_SETTINGS = engine_settings(
    "local: write in this process; spark: a Spark job per batch (run) or per wave of ranges (load)"
)

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "bootstrap",
        "--kafka-bootstrap",
        "Kafka bootstrap servers (HOST:PORT[,...])",
        required=True,
        metavar="HOST:PORT",
        env_name="KAFKA_BOOTSTRAP",
        aliases=("--bootstrap",),
        env_aliases=("BOOTSTRAP",),
    ),
    *CONNECTION_SETTINGS,
    Setting(
        "lake_root",
        "--lake-root",
        "root of the tables, a directory or s3://BUCKET/PREFIX: <root>/<database>/<schema>/<table>",
        required=True,
        metavar="DIR",
    ),
    Setting(
        "topic_pattern",
        "--topic-pattern",
        "regular expression of the change topics",
        default=r"^inlet\.changes\..*",
        metavar="REGEX",
    ),
    Setting(
        "group",
        "--group",
        "Kafka consumer group (committed after each lake commit, for lag monitoring; the writer "
        "resumes from the lake's checkpoint)",
        default=WRITER_GROUP,
        metavar="NAME",
    ),
    *ENGINE_SETTINGS,
    Setting(
        "load_progress",
        "--load-progress-file",
        "the progress file of an initial load (inlet writer load --progress-file; the stack's "
        "initial_load_progress.json), exported as inlet_writer_initial_load_* metrics per table",
        metavar="FILE",
    ),
    Setting(
        "table_config",
        "--table-config",
        'JSON list of per-table settings: [{"match": GLOB, "table_type": MERGE_ON_READ|COPY_ON_WRITE, '
        '"buckets": N, "index": bucket|simple, "partition_by": [...], "options": {...}}]',
        metavar="FILE",
    ),
    Setting(
        "batch_max_records",
        "--batch-max-records",
        "records per batch (per table)",
        kind="int",
        default=10000,
        metavar="N",
    ),
    Setting(
        "batch_max_bytes",
        "--batch-max-bytes",
        "message bytes per batch (per table)",
        kind="int",
        default=64 * 1024 * 1024,
        metavar="BYTES",
    ),
    Setting(
        "batch_interval_ms",
        "--batch-interval-ms",
        "commit a table's records at least this often",
        kind="int",
        default=1000,
        metavar="MS",
    ),
    Setting(
        "transaction_hold_ms",
        "--transaction-hold-ms",
        "longest wait for an incomplete source transaction before committing part of it",
        kind="int",
        default=10000,
        metavar="MS",
    ),
    Setting(
        "lease_ms",
        "--lease-ms",
        "lease of the coordinator's writer lock that each batch of a one-writer (OCC) table holds",
        kind="int",
        default=30000,
        metavar="MS",
    ),
    Setting(
        "lease_wait_ms",
        "--lease-wait-ms",
        "how long a batch of an OCC table waits for another worker's writer lease",
        kind="int",
        default=10000,
        metavar="MS",
    ),
    Setting(
        "liveness_timeout_s",
        "--liveness-timeout-s",
        "/livez fails once the main loop has not turned for this long (a hung writer: the liveness "
        "probe restarts it); longer than the slowest batch write",
        kind="float",
        default=600.0,
        metavar="S",
    ),
    Setting(
        "retry_backoff_ms",
        "--retry-backoff-ms",
        "first backoff after a failed batch (doubles)",
        kind="int",
        default=1000,
        metavar="MS",
    ),
    Setting(
        "error_retry_s",
        "--error-retry-s",
        "retry interval of a table paused by an incompatible schema change",
        kind="float",
        default=30.0,
        metavar="S",
    ),
    Setting(
        "on_offset_gap",
        "--on-offset-gap",
        "a table checkpoint outside its partition's available offsets (retention, recreated topic): "
        "fail stops the table, earliest resumes from the earliest available offset with a warning",
        default="fail",
        metavar="fail|earliest",
    ),
    Setting(
        "on_bad_row",
        "--on-bad-row",
        "a row that cannot be converted (or an undecodable record): stop = its table stops (nothing of "
        "the batch committed; resumes when the writer restarts), dead-letter = the batch commits "
        "without it; both send the record with the reason to --dlq-topic",
        default="stop",
        metavar="{stop,dead-letter}",
    ),
    Setting(
        "dlq_topic",
        "--dlq-topic",
        "dead-letter topic of the bad records (the CDC consumer's by default; inlet dlq show lists it)",
        default="inlet.dlq",
        metavar="TOPIC",
    ),
    Setting(
        "option",
        "--option",
        "Hudi write option KEY=VALUE for every table (repeatable)",
        kind="pairs",
        metavar="KEY=VALUE",
    ),
    Setting(
        "kafka",
        "--kafka-option",
        "librdkafka setting KEY=VALUE of every Kafka client (consumer, dead-letter producer; repeatable)",
        kind="pairs",
        metavar="KEY=VALUE",
        env_name="KAFKA_OPTIONS",
        aliases=("--kafka",),
        env_aliases=("KAFKA",),
    ),
    Setting(
        "compaction",
        "--compaction",
        "schedule and run Merge-on-Read compactions between batches",
        kind="bool",
        default=True,
    ),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "HOST:PORT of /metrics, /healthz and /readyz (503 while a table is stopped) (port 0: any free port)",
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
    ),
)

DESCRIPTION = """\
The writer service: consume typed change events from the Kafka topics inlet.changes.<table_id>
(written by the CDC consumer) and upsert them into Apache Hudi tables, committing through the
commit coordinator, exactly once.

- A table is created from its first event at <lake-root>/<database>/<schema>/<table>: record key =
  the primary key, ordering field _event_lsn (EVENT_TIME_ORDERING: a late, older change never
  overwrites a newer one; snapshot reads ('r') carry 0: every streamed change wins), Merge-on-Read
  with the bucket index (4 buckets) unless --table-config says otherwise; registered with the
  coordinator (NON_BLOCKING for MOR + bucket, else OPTIMISTIC).
- Each commit carries the Kafka offsets it consumed in its extraMetadata, in Apache Hudi Streamer's
  format (deltastreamer.checkpoint.key = topic,partition:next_offset,...). Partitions are always
  positioned from the table's newest checkpoint, never from the consumer group's offsets.
- A commit never holds part of a source transaction (bounded by --transaction-hold-ms).
- Schema changes (new columns, widened types) evolve the table; an incompatible change pauses that
  table only (see /healthz).
- A bad row (a value that does not fit its column, an undecodable record) goes to --dlq-topic with
  the reason and stops its table only (/healthz and /readyz name it; it resumes when the writer
  restarts); with --on-bad-row dead-letter the batch commits without it.
"""

EPILOG = """\
example:
  inlet writer run --kafka-bootstrap kafka:9092 --coordinator coord:50551 --lake-root /lake \\
      --table-config tables.json --metrics-listen 0.0.0.0:9464
"""


LOAD_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "database_url",
        "--database-url",
        "the source PostgreSQL (libpq URL), as the connector's user: it creates the replication slot",
        required=True,
        metavar="URL",
    ),
    Setting(
        "tables",
        "--tables",
        "source tables to load, globs of SCHEMA.TABLE (repeatable or comma-separated)",
        kind="list",
        default=("public.*",),
        metavar="GLOB",
    ),
    *CONNECTION_SETTINGS,
    Setting(
        "lake_root",
        "--lake-root",
        "root directory of the tables (as the writer's)",
        required=True,
        metavar="DIR",
    ),
    Setting(
        "topic_prefix",
        "--topic-prefix",
        "Debezium's topic.prefix: the table ids are <prefix>.<schema>.<table>",
        required=True,
        metavar="PREFIX",
    ),
    Setting("slot", "--slot", "the connector's slot.name (created here)", required=True, metavar="NAME"),
    Setting(
        "publication",
        "--publication",
        "the connector's publication.name (created FOR ALL TABLES WITH (publish_via_partition_root = "
        "true) unless it exists)",
        required=True,
        metavar="NAME",
    ),
    Setting(
        "table_config",
        "--table-config",
        "the writer's per-table configuration (JSON), so tables are created as it would",
        metavar="FILE",
    ),
    Setting(
        "replace_slot",
        "--replace-slot",
        "drop the slot if it exists (one a load that died midway left; refused while in use) and load "
        "again: the tables it wrote are overwritten. Never once Debezium has streamed from the slot",
        kind="bool",
        default=False,
    ),
    Setting(
        "resume",
        "--resume",
        "keep the slot a load that died midway left and load only what it had not committed: the "
        "ranges its commits record as done at the slot's position are skipped, the rest read in a "
        "new snapshot (Merge-on-Read bucket-index tables; other tables are loaded again whole)",
        kind="bool",
        default=False,
    ),
    Setting(
        "load_workers",
        "--load-workers",
        "connections reading a table's ranges at once (each imports the load's snapshot)",
        kind="int",
        default=2,
        metavar="N",
    ),
    Setting(
        "pages_per_range",
        "--pages-per-range",
        "heap pages (8 KiB each) per range: one range is one COPY and one commit, and what a worker "
        "holds in memory (about the range's size)",
        kind="int",
        default=4096,
        metavar="N",
    ),
    *ENGINE_SETTINGS,
    Setting(
        "progress_file",
        "--progress-file",
        "keep every table's progress (rows, rows/s, ETA) in this JSON file, replaced at each report "
        "(inlet writer run --load-progress-file exports it as metrics)",
        metavar="FILE",
    ),
)

LOAD_DESCRIPTION = """Load the rows already in PostgreSQL into the Hudi tables in bulk, before Debezium first starts, so
they do not travel through Kafka one event each: create the connector's logical replication slot
exporting its snapshot, COPY every matching table in that snapshot (split into ranges of heap pages
read in parallel, each on its own connection importing the snapshot, streamed into Arrow), commit
each range through the coordinator into the table the writer would create (Debezium 'r' rows with
_event_lsn 0, so every streamed change wins over them; the slot's LSN and the range are kept in
the commit; progress with rows/s and ETA is logged every 5 s), and print a
JSON summary on stdout whose "debezium" entry is the connector configuration to start it with
(snapshot.mode=no_data, or a snapshot of the tables COPY cannot load exactly). `inlet stack up` does
this itself (--initial-load copy).
"""

LOAD_EPILOG = """example:
  inlet writer load --database-url postgresql://dbz@pg/app --topic-prefix app --slot inlet_app \
      --publication inlet_app --coordinator coord:50551 --lake-root /lake --tables 'public.*'
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_writer_commands(subparsers: Any) -> None:
    """Add ``writer run`` to the ``inlet`` command's subparsers."""
    p = subparsers.add_parser(
        "writer",
        help="run the writer service (change topics -> Hudi tables)",
        description="The writer service.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="writer_command", metavar="COMMAND", required=True)
    run_p = sub.add_parser(
        "run",
        help="consume change topics and commit to Hudi tables until SIGTERM/SIGINT",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(run_p, SETTINGS, ENV_PREFIX)
    add_s3_options(run_p, suppress=True)
    run_p.set_defaults(handler=cmd_run)
    load_p = sub.add_parser(
        "load",
        help="load existing rows by COPY at a new replication slot's snapshot (before Debezium starts)",
        description=LOAD_DESCRIPTION,
        epilog=LOAD_EPILOG,
        formatter_class=_formatter,
    )
    add_arguments(load_p, LOAD_SETTINGS, ENV_PREFIX)
    add_s3_options(load_p, suppress=True)
    load_p.set_defaults(handler=cmd_load)


def config_from_args(args: argparse.Namespace | None, environ: Any = None) -> Any:
    from inlet.services.cdc_consumer.settings import valid_topic_name
    from inlet.services.writer.service import ON_BAD_ROW, WriterConfig

    try:
        v = resolve(args, SETTINGS, ENV_PREFIX, environ)
    except SettingsError as e:
        raise UsageError(str(e)) from None
    check_engine(v["engine"])
    if v["on_offset_gap"] not in ("fail", "earliest"):
        raise UsageError(f"--on-offset-gap must be fail or earliest, not {v['on_offset_gap']!r}")
    if v["on_bad_row"] not in ON_BAD_ROW:
        raise UsageError(f"--on-bad-row must be stop or dead-letter, not {v['on_bad_row']!r}")
    if not valid_topic_name(v["dlq_topic"]):
        raise UsageError(f"--dlq-topic: not a Kafka topic name: {v['dlq_topic']!r}")
    for name in ("batch_max_records", "batch_max_bytes", "batch_interval_ms"):
        if v[name] < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    kafka: dict[str, Any] = dict(parse_key_values(v["kafka"], "--kafka-option"))
    return WriterConfig(
        bootstrap=v["bootstrap"],
        coordinator=v["coordinator"],
        lake_root=v["lake_root"],
        topic_pattern=v["topic_pattern"],
        group=v["group"],
        engine=v["engine"],
        spark_master=v["spark_master"],
        spark_conf=parse_key_values(v["spark_conf"], "--spark-conf"),
        batch_max_records=v["batch_max_records"],
        batch_max_bytes=v["batch_max_bytes"],
        batch_interval_ms=v["batch_interval_ms"],
        transaction_hold_ms=v["transaction_hold_ms"],
        retry_backoff_ms=v["retry_backoff_ms"],
        lease_ms=v["lease_ms"],
        lease_wait_ms=v["lease_wait_ms"],
        liveness_timeout_s=v["liveness_timeout_s"],
        error_retry_s=v["error_retry_s"],
        on_offset_gap=v["on_offset_gap"],
        table_config=v["table_config"],
        coordinator_token=coordinator_token(v),
        coordinator_ca=read_ca(v["coordinator_ca"]),
        coordinator_tls=bool(v["coordinator_tls"]),
        kafka=kafka,
        write_options=parse_key_values(v["option"], "--option"),
        compaction=bool(v["compaction"]),
        on_bad_row=v["on_bad_row"],
        dlq_topic=v["dlq_topic"],
        load_progress=v["load_progress"],
    ), v["metrics_listen"]


def cmd_run(args: argparse.Namespace) -> int:
    from inlet.services.writer.service import Writer
    from inlet.services.writer.tables import TableConfigError

    config, listen = config_from_args(args)
    if config.engine == "spark":
        require("spark", "inlet writer run --engine spark")
    try:
        writer = Writer(config)
    except TableConfigError as e:
        raise UsageError(str(e)) from None
    endpoint = serve_http(
        listen, writer.metrics.registry, writer.health, ready=writer.readiness, live=writer.liveness
    )
    with StopSignal() as stop:
        announce(metrics=endpoint.address, group=config.group, engine=config.engine)
        try:
            return writer.run(stop.event)
        finally:
            endpoint.stop()


def cmd_load(args: argparse.Namespace) -> int:
    from inlet.services.writer import initial_load
    from inlet.services.writer.tables import TableConfigError, load_rules

    try:
        v = resolve(args, LOAD_SETTINGS, ENV_PREFIX)
        rules = load_rules(v["table_config"])
        options = initial_load.LoadOptions(workers=v["load_workers"], pages_per_range=v["pages_per_range"])
        check_engine(v["engine"])
    except (SettingsError, TableConfigError, initial_load.LoadError) as e:
        raise UsageError(str(e)) from None
    spark = None
    if v["engine"] == "spark":
        require("spark", "inlet writer load --engine spark")
        from inlet.services.writer.spark_load import spark_session

        spark = spark_session(
            v["spark_master"], parse_key_values(v["spark_conf"], "--spark-conf"), "inlet load"
        )
    try:
        return _load(v, rules, options, spark)
    finally:
        if spark is not None:
            spark.stop()


def _load(v: dict[str, Any], rules: Any, options: Any, spark: Any) -> int:
    from inlet.services.coordinator_client.client import CoordinatorClient
    from inlet.services.writer import initial_load

    with CoordinatorClient(
        v["coordinator"],
        root_certificates=read_ca(v["coordinator_ca"]),
        token=coordinator_token(v),
        tls=bool(v["coordinator_tls"]),
    ) as client:
        try:
            summary = initial_load.load(
                v["database_url"],
                v["tables"],
                client=client,
                lake_root=v["lake_root"],
                topic_prefix=v["topic_prefix"],
                slot=v["slot"],
                publication=v["publication"],
                rules=rules,
                replace_slot=bool(v["replace_slot"]),
                resume=bool(v["resume"]),
                options=options,
                progress_path=Path(v["progress_file"]) if v["progress_file"] else None,
                spark=spark,
            )
        except initial_load.LoadError as e:
            raise UsageError(str(e)) from None
    print(json.dumps(summary.as_json()))
    return 0


def main(argv: Any = None) -> int:  # pragma: no cover - `python -m inlet.services.cli.writer`
    from inlet.services.cli.main import main as inlet_main

    return inlet_main(["writer", *(argv or [])])


__all__ = ["LOAD_SETTINGS", "SETTINGS", "add_writer_commands", "cmd_load", "cmd_run", "config_from_args"]
