"""A real Hive Metastore for tests and the local stack: Hive 2.3's metastore from PySpark's own jars, on Derby.

:class:`EmbeddedMetastore` runs Hive Metastore 2.3 (``hive-metastore-2.3.x.jar`` and its DataNucleus, Derby
and Thrift jars, all inside ``pyspark/jars``) in a JVM of its own (own process group), with an embedded Derby
database and the warehouse directory under ``data_dir``, serving the metastore Thrift API on ``127.0.0.1``::

    with EmbeddedMetastore("/tmp/hms") as hms:      # data_dir=None: a temporary directory, removed on stop
        hms.uri                                     # thrift://127.0.0.1:PORT
        with hms.client() as c:                     # an hmsclient.HMSClient, opened
            c.get_all_databases()                   # ['default']

:meth:`start` returns once a Thrift client can call ``get_all_databases`` (the first start creates the
Derby schema: ``datanucleus.schema.autoCreateAll=true``, ``hive.metastore.schema.verification=false``;
about 10 s). :meth:`stop` sends SIGTERM, then kills what is left of the process group. Data under a given
``data_dir`` survive a restart (Derby recovers its log after a kill).

Hive 2.3's ``HiveMetaStore.main`` listens on every interface and has no bind-host setting, so the JVM runs
``InletHiveMetastore`` (beside this file; compiled once with ``javac`` into the cache directory), which
serves the same handler from a socket bound to ``127.0.0.1``. Java 17 runs it as is (no ``--add-opens``
is needed for the metastore and Derby). Logging: log4j2 at WARN to ``<data_dir>/metastore.log``; Derby's
own log to ``<data_dir>/derby.log``.

``$JAVA_HOME`` selects the JDK (else ``java``/``javac`` on PATH); ``$INLET_HIVE_JARS`` points at another
directory of Hive 2.3 metastore jars; ``$INLET_TEST_METASTORE_URI`` makes :meth:`from_env` use a running
metastore (``thrift://host:port``) instead.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
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

HIVE_JARS_ENV = "INLET_HIVE_JARS"
METASTORE_URI_ENV = "INLET_TEST_METASTORE_URI"
LAUNCHER_CLASS = "InletHiveMetastore"
_LAUNCHER_SOURCE = Path(__file__).with_name(f"{LAUNCHER_CLASS}.java")
_SERVING_MARK = "INLET-HMS-SERVING"

_LOG4J2 = """\
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=stdout
appender.console.type=Console
appender.console.name=stdout
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d %p %m (%c)%n
# one warning per start about BoneCP/Derby defaults is noise
logger.datanucleus.name=DataNucleus
logger.datanucleus.level=ERROR
"""


def hive_jars() -> Path:
    """The directory of Hive 2.3 metastore jars: ``$INLET_HIVE_JARS``, else ``pyspark/jars``."""
    configured = os.environ.get(HIVE_JARS_ENV)
    if configured:
        path = Path(configured)
    else:
        spec = importlib.util.find_spec("pyspark")  # locate without importing
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise StackError(f"Hive jars not found: install pyspark (4.x) or set {HIVE_JARS_ENV}")
        path = Path(locations[0]) / "jars"
    if not any(path.glob("hive-metastore-*.jar")) or not any(path.glob("derby-*.jar")):
        raise StackError(f"{path} lacks hive-metastore / derby jars")
    return path


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
    """Hive Metastore 2.3 (Derby) in its own JVM on ``127.0.0.1``, or an external one given by URI."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        *,
        port: int | None = None,
        host: str = LOOPBACK,
        external_uri: str | None = None,
        heap: str = "384m",
        conf: Mapping[str, str] | None = None,
        security: MetastoreSecurity | None = None,
        jvm_options: Sequence[str] = (),
        startup_timeout_s: float = 120.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        self._given_dir = Path(data_dir) if data_dir is not None else None
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
        jars = hive_jars()
        launcher = compiled_launcher(_LAUNCHER_SOURCE, jars, "metastore-launcher")
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="inlet-hms-"))
        self._data_dir.mkdir(parents=True, exist_ok=True)
        conf_dir = self._write_conf()
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port(self.host)
            if self._launch(jars, launcher, conf_dir):
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
        data = self.data_dir.resolve()
        conf_dir = data / "conf"
        conf_dir.mkdir(exist_ok=True)
        (data / "warehouse").mkdir(exist_ok=True)
        values = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={data / 'metastore_db'};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            "datanucleus.schema.autoCreateAll": "true",
            "datanucleus.connectionPoolingType": "DBCP",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": (data / "warehouse").as_uri(),
            # Hive's default log setup switches log4j2 to async loggers, whose LMAX disruptor jar
            # PySpark does not ship (NoClassDefFoundError: com/lmax/disruptor/EventTranslatorVararg)
            "hive.async.log.enabled": "false",
            "hive.metastore.server.min.threads": "4",
            "hive.metastore.server.max.threads": "64",
            # s3a:// table locations are recorded without a store behind them (no hadoop-aws here)
            "fs.s3a.impl": f"{LAUNCHER_CLASS}$CatalogOnlyFileSystem",
        }
        values.update(self.extra_conf)
        (conf_dir / "hive-site.xml").write_text(hive_site(values))
        (conf_dir / "log4j2.properties").write_text(_LOG4J2)
        return conf_dir

    def _launch(self, jars: Path, launcher: Path, conf_dir: Path) -> bool:
        assert self._port is not None and self.log_path is not None
        if port_is_open(self.host, self._port, timeout_s=0.2):
            return False
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = self.log_path.stat().st_size
        cmd = [
            str(java_tool("java")),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            *self.jvm_options,
            f"-Dlog4j.configurationFile={conf_dir / 'log4j2.properties'}",
            f"-Dderby.stream.error.file={self.data_dir.resolve() / 'derby.log'}",
            "-cp",
            os.pathsep.join([str(conf_dir), str(launcher), f"{jars}/*"]),
            LAUNCHER_CLASS,
            self.host,
            str(self._port),
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("HIVE_CONF_DIR", "HADOOP_CONF_DIR")}
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
            if _SERVING_MARK in log_since(self.log_path, log_start):
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
