"""The local stack: the whole replication pipeline as supervised processes under one directory.

``inlet stack up`` starts a supervisor in the background (``inlet stack supervise``), which starts,
in order: PostgreSQL (``wal_level=logical``; the source database and the coordinator's - with
``--source`` it is the coordinator's store only and the user's server is the source), the S3
store (with ``--lake s3``), Apache Kafka (one KRaft node, its data under ``DIR/kafka``), a Hive Metastore 4
(its catalog a database of that PostgreSQL), the commit coordinator, Debezium (Kafka Connect standalone with
the PostgreSQL connector), the CDC consumer, the writer, the table-services service (compaction and clean
after commits, so the writer never compacts inline) and catalog sync. Every one binds 127.0.0.1. The
supervisor writes ``stack.json`` (addresses, pids, health) every second,
restarts a component whose process died (saying so in ``logs/supervisor.log``), and on SIGTERM
stops them in reverse order. State and logs stay in the directory, and the ports it chose are kept
in ``ports.json``, so ``down`` then ``up`` resumes where the pipeline was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from inlet.core.s3 import S3Options
from inlet.services import kafka_topics, source_tables
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.logs import log_event
from inlet.services.runtime import StopSignal
from inlet.services.stack import heartbeat, source
from inlet.services.stack.components import CommandComponent, Component, ServerComponent
from inlet.services.stack.debezium import STACK_CONNECTOR_SETTINGS, STACK_SCHEMAS_ENABLE
from inlet.services.stack.kafka import EmbeddedKafka
from inlet.services.stack.postgres import EmbeddedPostgres
from inlet.services.stack.processes import StackError, free_port
from inlet.services.writer.tables import load_rules

if TYPE_CHECKING:
    from inlet.services.stack.debezium import EmbeddedDebezium

_log = logging.getLogger("inlet.stack")

STATE_FILE = "stack.json"
PORTS_FILE = "ports.json"
CONFIG_FILE = "config.json"
PID_FILE = "supervisor.pid"
INITIAL_LOAD_FILE = "initial_load.json"
# each table's progress while (and after) the initial load runs: `inlet stack status`, writer metrics
LOAD_PROGRESS_FILE = "initial_load_progress.json"
BACKFILLS_FILE = "backfills.json"  # the tables replicated at Debezium's last start (_backfill_new_tables)
COORDINATOR_DB = "inlet_coordinator"
METASTORE_DB = "inlet_metastore"  # the Hive Metastore's catalog, in the stack's PostgreSQL
LAKE_BUCKET = "lake"  # the embedded SeaweedFS's bucket of a `--lake s3` stack
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
STABLE_AFTER_S = 60.0  # a component that ran this long before dying is restarted without backoff
# One broker on loopback: a short session timeout and a frequent metadata refresh, so a table created
# in PostgreSQL reaches the lake in seconds (its Debezium and change topics are found by pattern
# subscriptions) and a consumer that died hands its partitions on quickly.
LOCAL_CONSUMER_OPTIONS = (
    "session.timeout.ms=6000",
    "heartbeat.interval.ms=1000",
    "topic.metadata.refresh.interval.ms=2000",
    "fetch.wait.max.ms=100",
)
KAFKA_DIR = "kafka"  # under --dir: the broker's log directory, cluster id and ports (kept across down/up)
# ignored keys of a config.json an older Inlet wrote (the stand-in broker's storage and retention service)
_RETIRED_CONFIG_KEYS = ("persistent_kafka", "kafka_retention", "kafka_retention_interval_s")


@dataclass(frozen=True)
class StackConfig:
    """What ``inlet stack up`` was asked for; saved in the directory so a later ``up`` repeats it."""

    dir: str
    database: str = "app"  # the source database; also Debezium's topic prefix
    tables: tuple[str, ...] = ("public.*",)  # globs of <schema>.<table> that replicate
    # the engine of the writer, the initial load and the table services' compactions: local | spark
    engine: str = "local"
    spark_master: str = "local[2]"  # with engine spark: local[N] or spark://HOST:PORT
    buckets: int = 4
    batch_interval_ms: int = 1000
    catalog: bool = True  # a Hive Metastore kept in step with every commit (inlet catalog run)
    # compaction and clean by inlet table-services run (the writer then never compacts inline)
    table_services: bool = True
    # the rows already in the tables on the first start: copy (inlet.services.writer.initial_load) or
    # debezium (Debezium's initial snapshot)
    initial_load: str = "copy"
    # JSON with inline schemas between Debezium and the CDC consumer; off: values only, column types
    # from the source catalog (~1/6 of the bytes, not safe across ALTER COLUMN TYPE: debezium.py)
    debezium_schemas: bool = STACK_SCHEMAS_ENABLE
    # the user's PostgreSQL (postgresql://user:pass@host:port/db); None: the stack runs its own
    source: str | None = None
    # where the lake lives: local (DIR/lake), s3 (bucket LAKE_BUCKET of the stack's own SeaweedFS) or
    # an s3://bucket/prefix URI of an external store (endpoint and credentials from the AWS_* env)
    lake: str = "local"
    # Kafka's retention of the stack's topics (inlet.kafka_topics): the broker's defaults (Debezium's
    # topics), and what the CDC consumer and the coordinator give the topics they create
    topic_retention_ms: int = kafka_topics.DEFAULT_RETENTION_MS
    topic_retention_bytes: int = kafka_topics.DEFAULT_RETENTION_BYTES
    topic_cleanup_policy: str = kafka_topics.DEFAULT_CLEANUP_POLICY

    @property
    def retention(self) -> kafka_topics.TopicRetention:
        return kafka_topics.TopicRetention(
            self.topic_retention_ms, self.topic_retention_bytes, self.topic_cleanup_policy
        )

    def retention_flags(self) -> tuple[str, ...]:
        """The retention as the ``--topic-*`` flags of ``cdc run`` and ``coordinator serve``."""
        return (
            "--topic-retention-ms",
            str(self.topic_retention_ms),
            "--topic-retention-bytes",
            str(self.topic_retention_bytes),
            "--topic-cleanup-policy",
            self.topic_cleanup_policy,
        )

    @property
    def root(self) -> Path:
        return Path(self.dir)

    @property
    def lake_root(self) -> str:
        """The lake root the writer, the coordinator and the readers use: a directory or an s3:// URI."""
        if self.lake == "local":
            return str(self.root / "lake")
        if self.lake == "s3":
            return f"s3://{LAKE_BUCKET}"
        return self.lake

    @property
    def embedded_s3(self) -> bool:
        """Whether the stack runs its own SeaweedFS (the lake of ``--lake s3``)."""
        return self.lake == "s3"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def replication_name(self) -> str | None:
        """The slot and publication of a ``--source`` stack (see :func:`source.replication_name`)."""
        return source.replication_name(self.root) if self.source else None

    def save(self) -> None:
        """Write ``config.json``, readable by its owner only (the source URL may hold a password)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / CONFIG_FILE
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, directory: Path) -> StackConfig | None:
        path = directory / CONFIG_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["tables"] = tuple(data.get("tables", ()))
        for key in _RETIRED_CONFIG_KEYS:
            data.pop(key, None)
        return cls(**data)


@dataclass
class Ports:
    """The stack's ports, chosen once and kept in ``ports.json`` (a taken one is chosen anew)."""

    path: Path
    ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Ports:
        ports = json.loads(path.read_text()) if path.exists() else {}
        return cls(path, {k: int(v) for k, v in ports.items()})

    def get(self, name: str) -> int:
        from inlet.services.stack.processes import port_is_open

        port = self.ports.get(name)
        if port is None or port_is_open("127.0.0.1", port):
            port = free_port()
            self.ports[name] = port
            self.path.write_text(json.dumps(self.ports, indent=2))
        return port


def _accepting(pg: EmbeddedPostgres) -> bool:
    """Healthy: the server accepts connections (not while it starts or recovers from a crash)."""
    try:
        psycopg.connect(pg.url(), connect_timeout=2).close()
    except psycopg.Error:
        return False
    return True


def _ensure_database(pg: EmbeddedPostgres, name: str) -> None:
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


class Stack:
    """Builds the components of a :class:`StackConfig` and supervises them until told to stop."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        config.root.mkdir(parents=True, exist_ok=True)
        config.logs.mkdir(exist_ok=True)
        if config.lake == "local":
            Path(config.lake_root).mkdir(exist_ok=True)
        self.ports = Ports.load(config.root / PORTS_FILE)
        # the S3 settings of the embedded lake bucket, for every process that touches a table (an
        # external s3:// lake's come from the environment `inlet stack up` ran in, inherited)
        self.lake_env: dict[str, str] = {}
        self.components: list[Component] = []
        self.restarts: dict[str, int] = {}
        self.state = "starting"
        self.error: str | None = None

    # -- the components, in start order ------------------------------------------------------------

    @property
    def source_url(self) -> str:
        """The PostgreSQL that replicates: the user's (``--source``) or the embedded one."""
        return self.config.source or self.pg.url(self.config.database)

    def _postgres(self) -> ServerComponent:
        if self.config.source:
            # the user's server is the source; this one only keeps the coordinator's state
            store = EmbeddedPostgres(
                self.config.root / "coordinator_store", port=self.ports.get("coordinator_store")
            )
            self.pg = store
            return ServerComponent(
                "coordinator_store",
                store,
                lambda: {"url": store.url(COORDINATOR_DB)},
                check=lambda: _accepting(store),
                after_start=lambda: _ensure_database(store, COORDINATOR_DB),
            )
        pg = EmbeddedPostgres(self.config.root / "postgres", port=self.ports.get("postgres"))
        self.pg = pg

        def prepare() -> None:
            _ensure_database(pg, self.config.database)
            _ensure_database(pg, COORDINATOR_DB)

        return ServerComponent(
            "postgres",
            pg,
            lambda: {"url": pg.url(self.config.database)},
            check=lambda: _accepting(pg),
            after_start=prepare,
        )

    def _check_source(self) -> source.SourceCheck | None:
        """Preflight the ``--source`` server again (``inlet stack up`` did before starting us)."""
        if not self.config.source:
            return None
        name = self.config.replication_name
        assert name is not None
        check = source.preflight(self.config.source, self.config.tables, name)
        if check.problems:
            raise StackError(check.problems[0])
        for warning in check.warnings:
            log_event(_log, logging.WARNING, "source", warning=warning)
        return check

    @property
    def consumer_options(self) -> tuple[str, ...]:
        return LOCAL_CONSUMER_OPTIONS

    def _kafka(self) -> list[Component]:
        out: list[Component] = []
        if self.config.embedded_s3:
            from inlet.services.stack import s3 as s3_module

            s3 = s3_module.EmbeddedS3(self.config.root / "s3", port=self.ports.get("s3"))
            # with the lake there too: what a user needs to read the tables (AWS_* for HudiTable,
            # hudi-rs storage options)
            lake_s3: dict[str, Any] = {}
            after_start: Callable[[], None] | None = None
            if self.config.lake == "s3":
                lake_s3 = {
                    "access_key": s3.access_key,
                    "secret_key": s3.secret_key,
                    "region": s3.region,
                    "bucket": LAKE_BUCKET,
                }
                self.lake_env = S3Options(
                    endpoint=s3.endpoint,
                    region=s3.region,
                    access_key=s3.access_key,
                    secret_key=s3.secret_key,
                    path_style=True,
                ).to_env()

                def after_start() -> None:
                    s3.create_bucket(LAKE_BUCKET)
                    # the supervisor itself writes tables too (the initial COPY load)
                    os.environ.update(self.lake_env)

            out.append(
                ServerComponent(
                    "s3", s3, lambda: {"endpoint": s3.endpoint, **lake_s3}, after_start=after_start
                )
            )
        # Apache Kafka with its data under DIR/kafka: `down` + `up` resumes with every topic, record and
        # committed offset; full JIT (fast_start=False): this broker carries the stack's load for hours
        kafka = EmbeddedKafka(
            port=self.ports.get("kafka"),
            controller_port=self.ports.get("kafka_controller"),
            data_dir=self.config.root / KAFKA_DIR,
            log_path=self.config.logs / "kafka.log",
            fast_start=False,
            heap_mb=512,
            broker_settings=self.config.retention.broker_defaults(),
        )
        self.kafka = kafka
        out.append(
            ServerComponent(
                "kafka",
                kafka,
                lambda: {
                    "bootstrap": kafka.bootstrap,
                    "data": str(kafka.data_dir),
                    "cluster_id": kafka.cluster_id,
                },
            )
        )
        return out

    def _metastore(self) -> list[Component]:
        if not self.config.catalog:
            return []
        from inlet.services.stack.metastore import EmbeddedMetastore

        # its catalog is a database of the stack's own PostgreSQL (the coordinator's store with --source)
        hms = EmbeddedMetastore(
            self.config.root / "metastore",
            database_url=self.pg.url(METASTORE_DB),
            port=self.ports.get("metastore"),
        )
        self.metastore = hms
        return [ServerComponent("metastore", hms, lambda: {"uri": hms.uri})]

    def _catalog(self) -> list[Component]:
        if not self.config.catalog:
            return []
        port = self.ports.get("catalog_metrics")
        argv = CommandComponent.inlet(
            "catalog",
            "run",
            "--kafka-bootstrap",
            self.kafka.bootstrap,
            "--metastore",
            self.metastore.uri,
            "--metrics-listen",
            f"127.0.0.1:{port}",
            *(a for opt in self.consumer_options for a in ("--kafka-option", opt)),
        )
        return [
            CommandComponent(
                "catalog_sync",
                argv,
                self.config.logs / "catalog_sync.log",
                f"http://127.0.0.1:{port}/healthz",
                env=dict(self.lake_env),
            )
        ]

    def _table_services(self) -> list[Component]:
        if not self.config.table_services:
            return []
        port = self.ports.get("table_services_metrics")
        argv = CommandComponent.inlet(
            "table-services",
            "run",
            "--kafka-bootstrap",
            self.kafka.bootstrap,
            "--coordinator",
            self.coordinator_address,
            "--metrics-listen",
            f"127.0.0.1:{port}",
            # compactions on the writer's engine: Spark jobs on the same master with --engine spark
            "--engine",
            self.config.engine,
            "--spark-master",
            self.config.spark_master,
            *(a for opt in self.consumer_options for a in ("--kafka-option", opt)),
        )
        return [
            CommandComponent(
                "table_services",
                argv,
                self.config.logs / "table_services.log",
                f"http://127.0.0.1:{port}/healthz",
                env=dict(self.lake_env),
            )
        ]

    def _coordinator(self) -> CommandComponent:
        port = self.ports.get("coordinator")
        metrics_port = self.ports.get("coordinator_metrics")
        self.coordinator_address = f"127.0.0.1:{port}"
        argv = CommandComponent.inlet(
            "coordinator",
            "serve",
            "--insecure",
            "--listen",
            self.coordinator_address,
            "--database-url",
            self.pg.url(COORDINATOR_DB),
            "--kafka-bootstrap",
            self.kafka.bootstrap,
            "--lake-root",
            self.config.lake_root,
            "--metrics-listen",
            f"127.0.0.1:{metrics_port}",
            *self.config.retention_flags(),
        )
        return CommandComponent(
            "coordinator",
            argv,
            self.config.logs / "coordinator.log",
            f"http://127.0.0.1:{metrics_port}/healthz",  # served once gRPC serves
            port=port,
            extra={"address": self.coordinator_address},
            env=dict(self.lake_env),
        )

    def _debezium(self) -> ServerComponent:
        from inlet.services.stack.debezium import EmbeddedDebezium

        check = self._check_source()
        with psycopg.connect(self.source_url, connect_timeout=10) as conn:  # partitions left out
            tables = source_tables.debezium_include_list(conn, self.config.tables)
        dbz = EmbeddedDebezium(
            self.source_url,
            self.kafka.bootstrap,
            self.config.database,
            data_dir=self.config.root / "debezium",
            table_include_list=tables,
            slot_name=self.config.replication_name,
            publication_name=self.config.replication_name,
            rest_port=self.ports.get("debezium"),
            schemas_enable=self.config.debezium_schemas,
            # a publication FOR ALL TABLES: tables created after the stack started replicate too
            # (a filtered publication is fixed when the connector first starts); the include list
            # still decides which tables Debezium emits. A --source role that is no superuser
            # gets a filtered one, or uses the one a DBA made (source.publication_mode).
            extra_config={
                **STACK_CONNECTOR_SETTINGS,
                **{f"topic.creation.default.{k}": v for k, v in self.config.retention.configs().items()},
                "publication.autocreate.mode": source.publication_mode(check) if check else "all_tables",
                "publish.via.partition.root": str(check is None or check.via_root).lower(),
            },
        )
        dbz.extra_config.update(self._signals())
        dbz.extra_config.update(self._initial_load(dbz, check))
        # the heartbeat table, in the publication, keeps the slot moving while the tables are idle
        if not self.config.source:
            heartbeat.create_table(self.source_url)  # the stack's own database
        dbz.extra_config.update(
            heartbeat.connector_settings(
                self.source_url, dbz.publication_name, dbz.extra_config["publication.autocreate.mode"]
            )
        )

        def running() -> bool:
            status = dbz.status()
            tasks = status.get("tasks") or []
            return bool(status.get("connector", {}).get("state") == "RUNNING") and all(
                t.get("state") == "RUNNING" for t in tasks
            )

        return ServerComponent(
            "debezium",
            dbz,
            lambda: {"rest": dbz.rest_url},
            check=running,
            after_start=self._backfill_new_tables,
        )

    def _backfill_new_tables(self) -> None:
        """Once Debezium runs: backfill the tables that replicate now but did not at its previous start.

        A table added to ``--tables``, or created while the stack was down (or, with a filtered
        publication, while it ran: Debezium adds it to the publication at its next start), has rows
        that never streamed; an incremental snapshot (``inlet backfill``) loads them without stopping
        the others. The tables of each start are kept in ``backfills.json``; the first start only
        records them (the initial load covers them). Tables without a primary key cannot be
        backfilled (logged). A failure is logged with the command to run by hand; it never stops
        the stack.
        """
        from inlet.services import backfill
        from inlet.services.source_tables import matching_tables

        path = self.config.root / BACKFILLS_FILE
        try:
            with psycopg.connect(self.source_url, connect_timeout=10) as conn:
                now = [
                    f"{s}.{t}"
                    for s, t in matching_tables(conn, self.config.tables)
                    if f"{s}.{t}" != backfill.DEFAULT_SIGNAL_TABLE
                ]
                keyed = {
                    name
                    for (name,) in conn.execute(
                        """SELECT n.nspname || '.' || c.relname FROM pg_index i
                           JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE i.indisprimary"""
                    ).fetchall()
                }
            known = set(json.loads(path.read_text())["tables"]) if path.exists() else None
            new = [t for t in now if known is not None and t not in known]
            if new:
                keyless = [t for t in new if t not in keyed]
                if keyless:
                    log_event(
                        _log,
                        logging.WARNING,
                        "backfill",
                        warning=f"no backfill of {', '.join(keyless)}: no primary key (rows before "
                        "this start do not replicate; inlet verify --repair fills them)",
                    )
                todo = [t for t in new if t in keyed]
                if todo:
                    signal_id = backfill.send_signal(self.source_url, todo)
                    log_event(_log, logging.INFO, "backfill started", tables=todo, signal_id=signal_id)
            path.write_text(json.dumps({"tables": sorted(now)}, indent=2))
        except (psycopg.Error, backfill.BackfillError, OSError, ValueError, KeyError) as e:
            log_event(
                _log,
                logging.WARNING,
                "backfill",
                warning=f"cannot backfill the tables new since the last start ({e}); run "
                f"inlet backfill --dir {self.config.root} TABLE...",
            )

    def _signals(self) -> dict[str, str]:
        """Create the signal table in the source; the connector settings for ``inlet backfill``.

        Before the connector starts, so a filtered publication gets the table (Debezium adds it to
        the captured tables). A ``--source`` role that may not create it only loses backfills: the
        stack runs, with a warning naming the fix.
        """
        from inlet.services import backfill

        try:
            backfill.ensure_signal_table(self.source_url)
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log_event(
                _log,
                logging.WARNING,
                "source",
                warning=f"cannot create the signal table {backfill.DEFAULT_SIGNAL_TABLE} ({first}): "
                "inlet backfill will not work until a role that may creates it (docs/backfill.md)",
            )
        return backfill.connector_settings(self.config.database)

    def _initial_load(self, dbz: EmbeddedDebezium, check: source.SourceCheck | None) -> dict[str, str]:
        """Load the tables by COPY before Debezium first starts; the snapshot settings that follow.

        Runs once: its outcome is kept in ``initial_load.json``, and a stack whose Debezium already
        ran (it has offsets) keeps Debezium's own snapshot. A load that stopped before Debezium
        started is resumed on its slot: the ranges it committed stay, the rest are loaded.
        """
        from inlet.services.writer import initial_load

        state = self.config.root / INITIAL_LOAD_FILE
        if self.config.initial_load != "copy" or (dbz.offsets_path.exists() and not state.exists()):
            return {}
        if state.exists():
            summary = json.loads(state.read_text())
        else:
            # a load that stopped midway left its slot (and publication): it is kept and the load
            # resumes from the ranges its commits do not record as done (initial_load: Resume)
            if check is not None:  # on the user's server: their publication stays
                assert self.config.source is not None
                source.ensure_publication(self.config.source, dbz.publication_name, check)
            client = CoordinatorClient(self.coordinator_address)
            spark = None
            if self.config.engine == "spark":  # each range a Spark task; the session ends with the load
                from inlet.services.writer import spark_load

                spark = spark_load.spark_session(self.config.spark_master, {}, "inlet initial load")
            try:
                summary = initial_load.load(
                    self.source_url,
                    self.config.tables,
                    client=client,
                    lake_root=self.config.lake_root,
                    topic_prefix=self.config.database,
                    slot=dbz.slot_name,
                    publication=dbz.publication_name,
                    rules=load_rules(str(self._table_config())),
                    resume=True,
                    replace_slot=True,  # one that cannot be resumed (another plugin)
                    progress_path=self.config.root / LOAD_PROGRESS_FILE,
                    spark=spark,
                ).as_json()
            finally:
                client.close()
                if spark is not None:
                    spark_load.stop_session(spark)
            state.write_text(json.dumps(summary, indent=2))
        return initial_load.debezium_snapshot_config(summary["skipped"])

    def _cdc(self) -> CommandComponent:
        port = self.ports.get("cdc_metrics")
        prefix = self.config.database
        argv = CommandComponent.inlet(
            "cdc",
            "run",
            "--kafka-bootstrap",
            self.kafka.bootstrap,
            "--topic-pattern",
            f"^{prefix}\\.",
            "--topic-prefix",
            prefix,
            "--metrics-listen",
            f"127.0.0.1:{port}",
            *(a for opt in self.consumer_options for a in ("--consumer-option", opt)),
            *self.config.retention_flags(),
        )
        return CommandComponent(
            "cdc_consumer",
            argv,
            self.config.logs / "cdc_consumer.log",
            f"http://127.0.0.1:{port}/healthz",
            # by environment, not argv: a --source URL's password stays out of `ps` and stack.json
            env={"INLET_CDC_DATABASE_URL": self.source_url},
        )

    def _table_config(self) -> Path:
        """The writer's table rules: every table of the stack with ``--buckets`` buckets."""
        path = self.config.root / "tables.json"
        path.write_text(json.dumps([{"match": "*", "buckets": self.config.buckets}], indent=2))
        return path

    def _writer(self) -> CommandComponent:
        port = self.ports.get("writer_metrics")
        argv = CommandComponent.inlet(
            "writer",
            "run",
            "--kafka-bootstrap",
            self.kafka.bootstrap,
            "--coordinator",
            self.coordinator_address,
            "--lake-root",
            self.config.lake_root,
            "--engine",
            self.config.engine,
            "--spark-master",
            self.config.spark_master,
            "--batch-interval-ms",
            str(self.config.batch_interval_ms),
            "--metrics-listen",
            f"127.0.0.1:{port}",
            "--table-config",
            str(self._table_config()),
            "--load-progress-file",
            str(self.config.root / LOAD_PROGRESS_FILE),
            *(("--no-compaction",) if self.config.table_services else ()),
            *(a for opt in self.consumer_options for a in ("--kafka-option", opt)),
        )
        return CommandComponent(
            "writer",
            argv,
            self.config.logs / "writer.log",
            f"http://127.0.0.1:{port}/healthz",
            env=dict(self.lake_env),
        )

    # -- supervision ------------------------------------------------------------------------------

    def addresses(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dir": str(self.config.root), "lake": self.config.lake_root}
        if self.config.source:
            out["source"] = {"url": source.mask_url(self.config.source), "slot": self.config.replication_name}
        for c in self.components:
            out[c.name] = {k: v for k, v in c.describe().items() if k not in ("name", "pid", "log")}
        return out

    def write_state(self) -> None:
        state = {
            "state": self.state,
            "error": self.error,
            "supervisor_pid": os.getpid(),
            "updated_at": time.time(),
            "addresses": self.addresses(),
            # every service's Prometheus endpoint, by component (docs/metrics.md)
            "metrics": {c.name: m for c in self.components if (m := c.describe().get("metrics"))},
            "components": [
                {
                    **c.describe(),
                    "alive": c.alive(),
                    "healthy": c.healthy(),
                    "restarts": self.restarts.get(c.name, 0),
                }
                for c in self.components
            ],
        }
        path = self.config.root / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)

    def _start(self, component: Component, stop: StopSignal, timeout_s: float = 180.0) -> None:
        log_event(_log, logging.INFO, "starting", component=component.name)
        component.start()
        deadline = time.monotonic() + timeout_s
        while not component.healthy():
            if not component.alive():
                raise StackError(f"{component.name} exited while starting (see {self.config.logs})")
            if time.monotonic() > deadline:
                raise StackError(f"{component.name} did not become healthy in {timeout_s:.0f} s")
            if stop.wait(0.5):
                return
        log_event(_log, logging.INFO, "healthy", component=component.name, pid=component.pid)

    def run(self, stop: StopSignal) -> int:
        """Start everything, supervise until ``stop``, then stop everything; 0 unless start failed."""
        builders: list[Callable[[], list[Component]]] = [
            lambda: [self._postgres()],
            self._kafka,
            self._metastore,
            lambda: [self._coordinator()],
            lambda: [self._debezium()],
            lambda: [self._cdc()],
            lambda: [self._writer()],
            self._table_services,
            self._catalog,
        ]
        try:
            for build in builders:
                for component in build():
                    self.components.append(component)
                    self.write_state()
                    self._start(component, stop)
                    if stop.stopping:
                        break
                if stop.stopping:
                    break
            else:
                self.state = "running"
                self.write_state()
                self._supervise(stop)
            return 0
        except Exception as e:
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self.state, self.error = "failed", first_line[:500]
            log_event(_log, logging.ERROR, "stack failed", error=str(e))
            return 1
        finally:
            if self.state != "failed":
                self.state = "stopping"
            with contextlib.suppress(Exception):
                self.write_state()
            self._stop_all()
            if self.state != "failed":
                self.state = "stopped"
            self.write_state()

    def _supervise(self, stop: StopSignal) -> None:
        next_try: dict[str, float] = {}
        quick_deaths: dict[str, int] = {}  # deaths in a row, each soon after its restart: the backoff step
        restarted_at: dict[str, float] = {}
        while not stop.wait(1.0):
            for c in self.components:
                if c.alive():
                    continue
                now = time.monotonic()
                if now < next_try.get(c.name, 0.0):
                    continue
                n = self.restarts.get(c.name, 0)
                log_event(
                    _log, logging.WARNING, "component died; restarting", component=c.name, restarts=n + 1
                )
                self.restarts[c.name] = n + 1
                ran = now - restarted_at.get(c.name, float("-inf"))
                step = 0 if ran >= STABLE_AFTER_S else quick_deaths.get(c.name, 0) + 1
                quick_deaths[c.name] = step
                restarted_at[c.name] = now
                next_try[c.name] = now + RESTART_BACKOFF_S[min(step, len(RESTART_BACKOFF_S) - 1)]
                try:
                    c.stop()  # reap what is left of it
                    c.start()
                except Exception as e:
                    log_event(_log, logging.ERROR, "restart failed", component=c.name, error=str(e))
            self.write_state()

    def _stop_all(self) -> None:
        for c in reversed(self.components):
            log_event(_log, logging.INFO, "stopping", component=c.name)
            try:
                c.stop()
            except Exception as e:
                log_event(_log, logging.ERROR, "stop failed", component=c.name, error=str(e))
