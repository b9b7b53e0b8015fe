"""Apache Kafka for tests and the local stack: one KRaft node (broker + controller) from Maven Central.

:class:`EmbeddedKafka` runs ``kafka.Kafka`` (the ``kafka`` part of the pinned ``pom.xml``, resolved by
``make install``) in a JVM of its own on ``127.0.0.1``: a broker listener (free port unless given) and a
controller listener, both loopback, and waits until an ``AdminClient`` sees the broker in its metadata::

    with EmbeddedKafka() as kafka:
        kafka.create_topic("inlet.commits", partitions=1)
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, **PRODUCER_SAFETY})

Data: a temporary directory removed on stop (the default), so a new ``EmbeddedKafka(port=old.port)`` is an
empty broker at the old address - how tests simulate an outage that loses the broker's data. With
``data_dir`` (the stack's ``DIR/kafka``) the log directory, the cluster id and the ports survive ``stop`` and
``start``: a broker started again on it has every topic, record and committed offset it acknowledged.

Formatting: a KRaft log directory must hold ``meta.properties`` (cluster id, node id, directory id) and the
bootstrap metadata (feature levels) before the first start. ``kafka.tools.StorageTool format`` runs once per
machine and Kafka version (a JVM start of 2-4 s on these machines) into a cached template; each new log
directory gets the template's ``bootstrap.checkpoint`` and a ``meta.properties`` of its own, written
exactly as the tool writes it. So a broker on a fresh directory starts as fast as one on an old directory.

Start-up is what tests wait for most, so the JVM is tuned for it (``fast_start``, the default: C1 only,
serial GC, a small heap; about 3 s to ready on an idle 2-core machine). The stack runs with
``fast_start=False`` (full JIT) since its broker carries load for hours. Stop is SIGTERM (a controlled
shutdown: logs flushed, clean-shutdown marker written), SIGKILL after ``stop_grace_s``.

``$INLET_TEST_KAFKA_BOOTSTRAP`` makes :meth:`EmbeddedKafka.from_env` use a running broker instead.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from inlet.services.kafka_topics import TopicSpec, ensure_topics
from inlet.services.stack import maven
from inlet.services.stack.java import cache_root, java_tool
from inlet.services.stack.processes import (
    LOOPBACK,
    StackError,
    free_port,
    log_since,
    log_tail,
    port_is_open,
    stop_process_group,
)

_log = logging.getLogger(__name__)

KAFKA_BOOTSTRAP_ENV = "INLET_TEST_KAFKA_BOOTSTRAP"
NODE_ID = 1
_PORTS_FILE = "inlet-ports.json"  # in a persistent data_dir: the ports to take again
_TEMPLATE_CLUSTER = "AAAAAAAAAAAAAAAAAAAAAQ"  # the template's cluster id; every real directory gets its own

#: Consumer settings for tests: a new group reads from the start, and a fetch returns quickly when
#: nothing arrives. A group's first join is immediate (``group.initial.rebalance.delay.ms=0``).
TEST_CONSUMER_SETTINGS: dict[str, str | int | bool] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "fetch.wait.max.ms": 100,
    "auto.offset.reset": "earliest",
}

# Small-test broker settings: one node, so every internal topic has replication factor 1, and few
# partitions (__consumer_offsets' default 50 cost a second or more at the first group join).
_BROKER_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "share.coordinator.state.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    # loopback clients may ask for short sessions (a dead member's partitions move on in ~2 s)
    "group.min.session.timeout.ms": "1000",
    "auto.create.topics.enable": "true",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(
        16 * 1024 * 1024
    ),  # the default 128 MB would be a third of the heap
}

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = WARN
"""


def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding (what ``random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _jvm_flags(heap_mb: int, fast_start: bool) -> list[str]:
    flags = [f"-Xmx{heap_mb}m", "-Xms64m", "-XX:+UseSerialGC", "-Xshare:auto", "-XX:-UsePerfData"]
    if fast_start:
        flags.append("-XX:TieredStopAtLevel=1")  # C1 only: a JVM that is ready sooner, not faster later
    # IPv4 sockets: a listener on 127.0.0.1 is then an AF_INET socket, not a v4-mapped IPv6 one
    return [
        *flags,
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        "-Djava.net.preferIPv4Stack=true",
    ]


def _cds_archive(java: Path) -> Path:
    """Where the class-data-sharing archive of this JVM and the pinned Kafka is kept.

    The JVM maps the classes it loaded last time from this file instead of parsing the jars again,
    which cuts a broker's start by a third or more; the first broker on a machine writes it when it
    stops (``-XX:ArchiveClassesAtExit``). A JVM that cannot use it (another build) ignores it.
    """
    digest = hashlib.sha256(f"{java.resolve()}:{maven.classpath_file('kafka').name}".encode()).hexdigest()[
        :16
    ]
    return cache_root() / "kafka-cds" / f"{digest}.jsa"


def _format_template(java: Path, classpath: str) -> Path:
    """The cached output of ``StorageTool format`` for the pinned Kafka: its ``bootstrap.checkpoint``."""
    digest = maven.classpath_file("kafka").stem.rsplit("-", 1)[-1]
    target = cache_root() / "kafka-format" / digest
    if (target / "bootstrap.checkpoint").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="format-", dir=target.parent))
    try:
        props = work / "server.properties"
        props.write_text(
            _server_properties(work / "logs", free_port(), free_port(), {}) + "\n", encoding="utf-8"
        )
        format_args = ["format", "-t", _TEMPLATE_CLUSTER, "-c", str(props)]
        done = subprocess.run(
            [str(java), *_jvm_flags(128, True), "-cp", classpath, "kafka.tools.StorageTool", *format_args],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not (work / "logs" / "bootstrap.checkpoint").is_file():
            raise StackError(
                f"kafka-storage format failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
            )
        try:
            (work / "logs").rename(target)  # atomic; a concurrent format that won the race is as good
        except OSError:
            if not (target / "bootstrap.checkpoint").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _format(log_dir: Path, template: Path, cluster_id: str) -> None:
    """Make ``log_dir`` a formatted KRaft log directory of ``cluster_id`` (as ``StorageTool format`` does)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template / "bootstrap.checkpoint", log_dir / "bootstrap.checkpoint")
    directory_id = new_cluster_id()  # a random Uuid, the same encoding
    meta = f"#\nnode.id={NODE_ID}\ndirectory.id={directory_id}\nversion=1\ncluster.id={cluster_id}\n"
    tmp = log_dir / "meta.properties.tmp"
    tmp.write_text(meta, encoding="utf-8")
    tmp.replace(log_dir / "meta.properties")  # last: its presence means "formatted"


def _read_cluster_id(log_dir: Path) -> str | None:
    meta = log_dir / "meta.properties"
    if not meta.is_file():
        return None
    for line in meta.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    return None


def _server_properties(log_dir: Path, port: int, controller_port: int, extra: Mapping[str, str]) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        **_BROKER_SETTINGS,
        **extra,
    }
    return "\n".join(f"{k}={v}" for k, v in settings.items())


class EmbeddedKafka:
    """An Apache Kafka node on ``127.0.0.1``, or an external broker given by bootstrap address.

    ``data_dir=None`` keeps the broker's data in a temporary directory removed on :meth:`stop`; a given
    ``data_dir`` is kept (with the cluster id and the ports). ``broker_settings`` add to or override
    ``server.properties`` (e.g. ``log.retention.ms`` for topics others create).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        data_dir: Path | str | None = None,
        log_path: Path | str | None = None,
        external_bootstrap: str | None = None,
        startup_timeout_s: float = 90.0,
        stop_grace_s: float = 15.0,
        heap_mb: int = 384,
        fast_start: bool = True,
        broker_settings: Mapping[str, str] | None = None,
    ) -> None:
        self._given_dir = Path(data_dir) if data_dir is not None else None
        saved = self._saved_ports()
        self._port = port if port is not None else saved.get("port")
        self._controller_port = controller_port if controller_port is not None else saved.get("controller")
        self._fixed_port = port is not None
        self._given_log = Path(log_path) if log_path is not None else None
        self._log_path: Path | None = self._given_log
        self.external_bootstrap = external_bootstrap
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.heap_mb = heap_mb
        self.fast_start = fast_start
        self.broker_settings = dict(broker_settings or {})
        self._dir: Path | None = self._given_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None
        self._archive_at_exit: Path | None = None
        #: seconds the last :meth:`start` took until the broker answered metadata (None: not started)
        self.startup_seconds: float | None = None

    @classmethod
    def from_env(cls, **kwargs: object) -> EmbeddedKafka:
        """An external broker when ``$INLET_TEST_KAFKA_BOOTSTRAP`` is set, else an embedded Apache Kafka."""
        bootstrap = os.environ.get(KAFKA_BOOTSTRAP_ENV, "").strip()
        if bootstrap:
            return cls(external_bootstrap=bootstrap)
        return cls(**kwargs)  # type: ignore[arg-type]

    @property
    def is_external(self) -> bool:
        return self.external_bootstrap is not None

    @property
    def port(self) -> int:
        if self.external_bootstrap is not None:
            return int(self.external_bootstrap.split(",")[0].rsplit(":", 1)[1])
        if self._port is None:
            raise StackError("Kafka has not been started yet (no port)")
        return self._port

    @property
    def controller_port(self) -> int | None:
        return self._controller_port

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` (the value for ``bootstrap.servers``)."""
        if self.external_bootstrap is not None:
            return self.external_bootstrap
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.is_external or self.pid is not None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def data_dir(self) -> Path | None:
        """Where the broker keeps its data: the given directory, or the temporary one while running."""
        return self._dir

    @property
    def persistent(self) -> bool:
        return self._given_dir is not None

    @property
    def cluster_id(self) -> str | None:
        return _read_cluster_id(self._dir / "logs") if self._dir is not None else None

    def start(self) -> EmbeddedKafka:
        """Start the node (or check the external broker); on failure nothing is left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmbeddedKafka:
        if self.external_bootstrap is not None:
            self._wait_metadata(self.startup_timeout_s)
            return self
        if self._proc is not None and self._proc.poll() is None:
            return self
        began = time.monotonic()
        java = java_tool("java")
        classpath = maven.classpath_arg("kafka")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="inlet-kafka-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        log_dir = self._dir / "logs"
        if _read_cluster_id(log_dir) is None:
            _format(log_dir, _format_template(java, classpath), new_cluster_id())
        (self._dir / "log4j2.properties").write_text(_LOG4J2, encoding="utf-8")
        if self._given_log is None:
            self._log_path = self._dir / "kafka.log"
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port()
            if self._controller_port is None or attempt > 0:
                self._controller_port = free_port()
            if self._launch(java, classpath, began):
                break
            if self._fixed_port:
                raise StackError(
                    f"Kafka cannot listen on {LOOPBACK}:{self._port}:\n{log_tail(self._log_path)}"
                )
        else:
            raise StackError(f"Kafka found no free port after 5 tries:\n{log_tail(self._log_path)}")
        if self.persistent:
            (self._dir / _PORTS_FILE).write_text(
                json.dumps({"port": self._port, "controller": self._controller_port}), encoding="utf-8"
            )
        atexit.register(self.stop)
        self.startup_seconds = time.monotonic() - began
        _log.info(
            "Apache Kafka running at %s (pid %s, data %s, ready in %.1fs)",
            self.bootstrap,
            self.pid,
            self._dir,
            self.startup_seconds,
        )
        return self

    def stop(self) -> None:
        """Stop the node: SIGTERM (a controlled shutdown), SIGKILL after ``stop_grace_s``.

        A temporary data directory is removed with everything in it; a given ``data_dir`` is kept.
        """
        atexit.unregister(self.stop)
        if self._proc is not None:
            proc = self._proc
            stop_process_group(proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None
            self._keep_archive(killed=proc.returncode == -signal.SIGKILL)
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        if self._given_dir is None and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            if self._given_log is None:
                self._log_path = None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        exist_ok: bool = True,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1) and topic ``config``."""
        if not name or partitions < 1:
            raise ValueError(f"bad topic {name!r} / partitions {partitions}: need a name and partitions >= 1")
        spec = TopicSpec(name, partitions, replication_factor=1, config=dict(config or {}))
        try:
            created = ensure_topics(self.admin(), [spec], timeout_s=30.0)
        except KafkaException as exc:
            raise StackError(f"cannot create topic {name!r} on {self.bootstrap}: {exc}") from exc
        if not exist_ok and name not in created:
            raise StackError(f"topic {name!r} already exists on {self.bootstrap}")

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count, as the broker reports them (internal topics left out)."""
        metadata = self.admin().list_topics(timeout=10)
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if not name.startswith("__")
        }

    # -- internals --------------------------------------------------------------------------------

    def _saved_ports(self) -> dict[str, int]:
        path = self._given_dir / _PORTS_FILE if self._given_dir is not None else None
        if path is None or not path.is_file():
            return {}
        try:
            return {k: int(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
        except (ValueError, AttributeError):
            return {}

    def _launch(self, java: Path, classpath: str, began: float) -> bool:
        assert self._dir is not None and self._log_path is not None
        assert self._port is not None and self._controller_port is not None
        if port_is_open(LOOPBACK, self._port, timeout_s=0.2) or port_is_open(
            LOOPBACK, self._controller_port, timeout_s=0.2
        ):
            return False  # someone else listens there
        props = self._dir / "server.properties"
        props.write_text(
            _server_properties(self._dir / "logs", self._port, self._controller_port, self.broker_settings)
            + "\n",
            encoding="utf-8",
        )
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = self._log_path.stat().st_size
        archive = _cds_archive(java)
        if archive.is_file():
            sharing = [f"-XX:SharedArchiveFile={archive}"]
            self._archive_at_exit = None
        else:
            archive.parent.mkdir(parents=True, exist_ok=True)
            self._archive_at_exit = archive.with_name(f"{archive.stem}.{os.getpid()}.{self._port}.tmp")
            sharing = [f"-XX:ArchiveClassesAtExit={self._archive_at_exit}"]
        cmd = [
            str(java),
            *_jvm_flags(self.heap_mb, self.fast_start),
            *sharing,
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self._dir}",
            "-cp",
            classpath,
            "kafka.Kafka",
            str(props),
        ]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self._dir,
        )
        self._proc = proc
        deadline = began + self.startup_timeout_s
        while time.monotonic() < deadline:  # the port first: librdkafka logs every refused connection
            if proc.poll() is not None:
                self._proc = None
                new_log = log_since(self._log_path, log_start)
                if "Address already in use" in new_log or "BindException" in new_log:
                    return False
                raise StackError(f"Kafka exited with code {proc.returncode} at start:\n{new_log[-3000:]}")
            if port_is_open(LOOPBACK, self._port):
                break
            time.sleep(0.05)
        else:
            self._abort_start(proc)
        try:
            self._wait_metadata(max(1.0, deadline - time.monotonic()))
        except StackError:
            self._abort_start(proc)
        if proc.poll() is not None:
            self._abort_start(proc)
        return True

    def _keep_archive(self, *, killed: bool) -> None:
        """Publish the class-data archive the JVM wrote at a clean exit (a killed one may be partial)."""
        tmp, self._archive_at_exit = self._archive_at_exit, None
        if tmp is None or not tmp.is_file():
            return
        if killed or tmp.stat().st_size == 0:
            tmp.unlink(missing_ok=True)
            return
        tmp.replace(tmp.with_name(tmp.name.split(".", 1)[0] + ".jsa"))

    def _abort_start(self, proc: subprocess.Popen[bytes]) -> None:
        stop_process_group(proc, signal.SIGTERM, grace_s=2.0)
        self._proc = None
        self._keep_archive(killed=True)
        raise StackError(
            f"Kafka not ready on {self.bootstrap} after {self.startup_timeout_s:.0f}s:\n"
            + log_tail(self._log_path)
        )

    def _wait_metadata(self, timeout_s: float) -> None:
        """Wait until the broker answers a metadata request listing a broker (it registered and runs)."""
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic()))).brokers:
                    return
            except KafkaException as exc:
                error = exc
            time.sleep(0.05)
        raise StackError(f"Kafka at {self.bootstrap} does not answer metadata requests: {error}")
