"""A real Hive Metastore for tests and the local stack: Apache Hive's standalone metastore 4, on PostgreSQL.

:class:`EmbeddedMetastore` runs Apache Hive's own server (``org.apache.hadoop.hive.metastore.HiveMetaStore``
of ``org.apache.hive:hive-standalone-metastore-server``, the jars of the pom's ``metastore`` part, which
``make install`` resolves from Maven Central) in a JVM of its own (own process group), serving the
metastore Thrift API on ``127.0.0.1`` (``metastore.thrift.bind.host``), its catalog in a PostgreSQL
database and its warehouse directory under ``data_dir``::

    with EmbeddedMetastore("/tmp/hms", database_url=pg.url("hms")) as hms:  # the database is created if missing
        hms.uri                                     # thrift://127.0.0.1:PORT
        with hms.client() as c:                     # an hmsclient.HMSClient, opened
            c.get_all_databases()                   # ['default']

The schema is made by DataNucleus on the first start (``datanucleus.schema.autoCreateAll``,
``metastore.schema.verification=false``): Hive's schema tool needs the SQL scripts of Hive's binary
distribution, which no jar on Maven Central holds (only the 78 MB ``-bin.tar.gz``), and would cost a JVM
start of its own. Tables of Hive's ACID transactions (``TXNS``, ...) come only from those scripts, so
this metastore serves no transactional tables; Inlet registers EXTERNAL tables only, as Apache Hudi's
sync does.

:meth:`start` returns once a Thrift client can call ``get_all_databases``. :meth:`stop` sends SIGTERM,
then kills what is left of the process group. The catalog lives in PostgreSQL, so it survives a restart
as long as the database does. Logging: log4j2 at WARN to ``<data_dir>/metastore.log``.

TLS, SASL PLAIN and Kerberos are Hive's own settings, passed in ``conf`` (``metastore.use.SSL`` with
``metastore.keystore.path``/``.password``; ``metastore.authentication=CONFIG`` with
``metastore.authentication.config.username``/``.password``; ``metastore.sasl.enabled`` with
``metastore.kerberos.principal``/``.keytab.file``, the JVM then needs ``-Djava.security.krb5.conf``).

``$JAVA_HOME`` selects the JDK (else ``java``/``javac`` on PATH); ``$INLET_TEST_METASTORE_URI`` makes
:meth:`from_env` use a running metastore (``thrift://host:port``) instead.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from inlet.services.stack import maven
from inlet.services.stack.java import compiled_launcher, java_tool
from inlet.services.stack.processes import (
    LOOPBACK,
    StackError,
    free_port,
    log_since,
    log_tail,
    port_is_open,
    stop_process_group,
)

if TYPE_CHECKING:
    from hmsclient.hmsclient import HMSClient

    from inlet.services.catalog_sync.transport import MetastoreSecurity

_log = logging.getLogger(__name__)

METASTORE_URI_ENV = "INLET_TEST_METASTORE_URI"
MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
LAUNCHER_CLASS = "InletHiveMetastore"
_LAUNCHER_SOURCE = Path(__file__).with_name(f"{LAUNCHER_CLASS}.java")
# Hive 4.0 is built for Java 8. Java 17 closes the JDK's internals that Hadoop's libraries reach by
# reflection (its Kerberos utilities read sun.security.krb5's configuration; its reflection helpers
# and serializers touch java.lang/java.util/java.nio): opened as Hadoop does for Java 17. The tests
# (TLS, SASL PLAIN, Kerberos with a real KDC) run with them; they were not tried without them.
JAVA17_OPENS = (
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
)
# environment variables through which Hive or Hadoop would read a configuration of the machine's
_FOREIGN_CONF_ENV = ("HIVE_CONF_DIR", "HADOOP_CONF_DIR", "METASTORE_HOME", "HIVE_HOME", "HADOOP_HOME")

_LOG4J2 = """\
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=stdout
appender.console.type=Console
appender.console.name=stdout
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d %p %m (%c)%n
# DataNucleus warns about its own metadata at every start; Hive about compactors it is told not to run
logger.datanucleus.name=DataNucleus
logger.datanucleus.level=ERROR
logger.hms.name=org.apache.hadoop.hive.metastore.HiveMetaStore
logger.hms.level=ERROR
logger.hikari.name=com.zaxxer.hikari
logger.hikari.level=ERROR
logger.native.name=org.apache.hadoop.util.NativeCodeLoader
logger.native.level=ERROR
"""


def jdbc_of(database_url: str) -> tuple[str, str, str]:
    """``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`` -> (JDBC URL, user, password)."""
    parts = urllib.parse.urlsplit(database_url)
    dbname = urllib.parse.unquote(parts.path.lstrip("/"))
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not dbname:
        raise StackError(
            f"bad metastore database URL {database_url!r}: expected postgresql://USER@HOST:PORT/DB"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    query = f"?{parts.query}" if parts.query else ""
    jdbc = f"jdbc:postgresql://{host}:{parts.port or 5432}/{urllib.parse.quote(dbname)}{query}"
    return jdbc, urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")


def ensure_database(database_url: str) -> None:
    """Create the database of ``database_url`` when it does not exist (through the server's ``postgres``)."""
    import psycopg
    from psycopg import sql

    parts = urllib.parse.urlsplit(database_url)
    name = urllib.parse.unquote(parts.path.lstrip("/"))
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.errors.DuplicateDatabase:
        pass  # created meanwhile by another process
    except psycopg.Error as e:
        raise StackError(f"the metastore's database {name!r} cannot be created: {e}".strip()) from e


def hive_site(values: Mapping[str, str]) -> str:
    """``hive-site.xml`` text for ``values``."""
    props = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in values.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n'


def parse_uri(uri: str) -> tuple[str, int]:
    """``thrift://host:port`` (or ``host:port``) -> (host, port)."""
    text = uri if "://" in uri else f"thrift://{uri}"
    parsed = urllib.parse.urlparse(text)
    if parsed.scheme != "thrift" or not parsed.hostname or parsed.port is None:
        raise ValueError(f"bad metastore URI {uri!r}: expected thrift://HOST:PORT")
    return parsed.hostname, parsed.port


def open_client(
    host: str, port: int, timeout_s: float = 30.0, security: MetastoreSecurity | None = None
) -> HMSClient:
    """An opened ``hmsclient.HMSClient`` with a socket timeout (raises ``thrift`` transport errors);
    TLS and SASL as ``security`` says (default: plaintext)."""
    from hmsclient.hmsclient import HMSClient
    from thrift.protocol import TBinaryProtocol

    from inlet.services.catalog_sync.transport import MetastoreSecurity, open_transport

    transport = open_transport(host, port, timeout_s, security or MetastoreSecurity())
    client = HMSClient(iprot=TBinaryProtocol.TBinaryProtocol(transport))
    return client  # already open: HMSClient.open would open the transport again


class EmbeddedMetastore:
    """Hive Metastore 4 (PostgreSQL) in its own JVM on ``127.0.0.1``, or an external one given by URI."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        database_url: str | None = None,
        port: int | None = None,
        host: str = LOOPBACK,
        external_uri: str | None = None,
        heap: str = "320m",
        conf: Mapping[str, str] | None = None,
        security: MetastoreSecurity | None = None,
        jvm_options: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self.database_url = database_url  # postgresql://...: the catalog (created if missing)
        self._data_dir: Path | None = self._given_dir
        self._port = port
        self._fixed_port = port is not None
        self.host = host
        self.external_uri = external_uri
        self.heap = heap
        self.extra_conf = dict(conf or {})
        self.security = security  # how a client reaches it (TLS/SASL of ``conf``): readiness, client()
        self.jvm_options = list(jvm_options)  # e.g. -Djava.security.krb5.conf=... for Kerberos
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None

    @classmethod
    def from_env(cls, data_dir: Path | str | None = None, **kwargs: Any) -> EmbeddedMetastore:
        """An external metastore when ``$INLET_TEST_METASTORE_URI`` is set, else an embedded one."""
        uri = os.environ.get(METASTORE_URI_ENV, "").strip()
        if uri:
            return cls(external_uri=uri)
        return cls(data_dir, **kwargs)

    # -- properties -----------------------------------------------------------------------------

    @property
    def is_external(self) -> bool:
        return self.external_uri is not None

    @property
    def port(self) -> int:
        if self.external_uri is not None:
            return parse_uri(self.external_uri)[1]
        if self._port is None:
            raise StackError("the metastore has not been started yet (no port)")
        return self._port

    @property
    def address(self) -> str:
        """``HOST:PORT``."""
        if self.external_uri is not None:
            h, p = parse_uri(self.external_uri)
            return f"{h}:{p}"
        return f"{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        """``thrift://HOST:PORT`` (Hive's ``hive.metastore.uris``)."""
        return f"thrift://{self.address}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise StackError("the metastore has no data directory (external, or not started)")
        return self._data_dir

    @property
    def warehouse_dir(self) -> Path:
        return self.data_dir / "warehouse"

    @property
    def log_path(self) -> Path | None:
        return self._data_dir / "metastore.log" if self._data_dir is not None else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.is_external or self.pid is not None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> EmbeddedMetastore:
        """Start the metastore (or check the external one); on failure nothing is left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmbeddedMetastore:
        if self.external_uri is not None:
            h, p = parse_uri(self.external_uri)
            self._wait_ready(h, p, self.startup_timeout_s)
            return self
        if self._proc is not None and self._proc.poll() is None:
            return self
        if not self.database_url:
            raise StackError(
                "the embedded metastore needs a PostgreSQL database for its catalog (database_url)"
            )
        jars = maven.classpath("metastore")
        launcher = compiled_launcher(_LAUNCHER_SOURCE, jars, "metastore-launcher")
        ensure_database(self.database_url)
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="inlet-hms-"))
        self._data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port(self.host)
            if self._launch(jars, launcher):
                break
            if self._fixed_port:
                raise StackError(f"the metastore cannot listen on {self.address}:\n{log_tail(self.log_path)}")
        else:
            raise StackError(f"the metastore found no free port after 5 tries:\n{log_tail(self.log_path)}")
        atexit.register(self.stop)
        _log.info("Hive Metastore running at %s (pid %s, data %s)", self.uri, self.pid, self._data_dir)
        return self

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL of its process group); a temporary data_dir is removed."""
        atexit.unregister(self.stop)
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        if self._given_dir is None and self._data_dir is not None and not self.is_external:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def kill(self) -> None:
        """SIGKILL the metastore at once (fault tests); data in a given data_dir stay."""
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGKILL, grace_s=0.0)
            self._proc = None

    def __enter__(self) -> EmbeddedMetastore:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @contextlib.contextmanager
    def client(self, timeout_s: float = 30.0) -> Iterator[HMSClient]:
        """An opened Thrift client (``hmsclient.HMSClient``), closed on exit."""
        h, p = parse_uri(self.uri)
        c = open_client(h, p, timeout_s, self.security)
        try:
            yield c
        finally:
            c.close()

    # -- internals ------------------------------------------------------------------------------

    def _write_conf(self) -> Path:
        assert self.database_url is not None and self._port is not None
        data = self.data_dir.resolve()
        conf_dir = data / "conf"
        conf_dir.mkdir(exist_ok=True)
        (data / "warehouse").mkdir(exist_ok=True)
        jdbc, user, password = jdbc_of(self.database_url)
        values = {
            "javax.jdo.option.ConnectionURL": jdbc,
            "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
            "javax.jdo.option.ConnectionUserName": user,
            "javax.jdo.option.ConnectionPassword": password,
            "datanucleus.schema.autoCreateAll": "true",
            "metastore.schema.verification": "false",
            # two pools (Hikari) of this size; PostgreSQL's connections are shared with the rest
            "datanucleus.connectionPool.maxPoolSize": "4",
            "metastore.thrift.bind.host": self.host,
            "metastore.thrift.port": str(self._port),
            "metastore.warehouse.dir": (data / "warehouse").as_uri(),
            "metastore.warehouse.external.dir": (data / "warehouse").as_uri(),
            "metastore.server.min.threads": "4",  # Hive's default starts 200
            "metastore.server.max.threads": "64",
            # Hive's housekeeping threads serve ACID tables and Hive's query history (classes of
            # hive-exec, not on this classpath): only the notification log's cleaner runs
            "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
            "metastore.task.threads.remote": "",
            # s3a:// table locations are recorded without a store behind them (no hadoop-aws here)
            "fs.s3a.impl": f"{LAUNCHER_CLASS}$CatalogOnlyFileSystem",
        }
        values.update(self.extra_conf)
        site = conf_dir / "metastore-site.xml"
        site.touch(mode=0o600)  # it holds the database password, if any
        site.write_text(hive_site(values))
        (conf_dir / "hive-site.xml").unlink(missing_ok=True)  # a Hive 2.3 data directory's
        # Hadoop's own settings (hadoop.security.authentication=kerberos: the server's keytab login)
        # are read by Hadoop from core-site.xml on the classpath, not from the metastore's file
        hadoop = {k: v for k, v in values.items() if k.startswith(("hadoop.", "fs."))}
        (conf_dir / "core-site.xml").write_text(hive_site(hadoop))
        (conf_dir / "log4j2.properties").write_text(_LOG4J2)
        return conf_dir

    def _launch(self, jars: Sequence[Path], launcher: Path) -> bool:
        assert self._port is not None and self.log_path is not None
        if port_is_open(self.host, self._port, timeout_s=0.2):
            return False
        conf_dir = self._write_conf()
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = self.log_path.stat().st_size
        cmd = [
            str(java_tool("java")),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xss512k",
            "-Djava.awt.headless=true",
            "-Djava.net.preferIPv4Stack=true",
            *JAVA17_OPENS,
            *self.jvm_options,
            f"-Dlog4j.configurationFile={conf_dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join([str(conf_dir), str(launcher), *(str(j) for j in jars)]),
            MAIN_CLASS,
        ]
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_CONF_ENV}
        env["METASTORE_CONF_DIR"] = str(conf_dir)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.data_dir),
            env=env,
        )
        self._proc = proc
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                new_log = log_since(self.log_path, log_start)
                if "Address already in use" in new_log or "BindException" in new_log:
                    return False
                raise StackError(
                    f"the metastore exited with code {proc.returncode} at start:\n{new_log[-3000:]}"
                )
            if port_is_open(self.host, self._port, timeout_s=0.2):
                break
            time.sleep(0.1)
        else:
            self._abort_start(proc)
        try:
            self._wait_ready(self.host, self._port, max(1.0, deadline - time.monotonic()))
        except StackError:
            self._abort_start(proc)
        return True

    def _abort_start(self, proc: subprocess.Popen[bytes]) -> None:
        stop_process_group(proc, signal.SIGTERM, grace_s=2.0)
        self._proc = None
        raise StackError(
            f"the metastore was not ready on {self.address} after {self.startup_timeout_s:.0f}s:\n"
            + log_tail(self.log_path)
        )

    def _wait_ready(self, host: str, port: int, timeout_s: float) -> None:
        """Wait until a Thrift client can call ``get_all_databases``."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise StackError(f"the metastore exited with code {self._proc.returncode}")
            try:
                c = open_client(host, port, timeout_s=10.0, security=self.security)
                try:
                    c.get_all_databases()
                    return
                finally:
                    c.close()
            except Exception as exc:  # thrift raises transport and application errors
                last = exc
                time.sleep(0.2)
        raise StackError(f"the metastore at {host}:{port} does not answer get_all_databases: {last}")
