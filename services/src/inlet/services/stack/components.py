"""The parts of the local stack as supervised components: one interface over embedded servers and commands.

A :class:`Component` can be started, stopped, asked whether its process lives and whether it is
healthy. :class:`ServerComponent` wraps the embedded launchers (PostgreSQL, S3, Kafka, Debezium);
:class:`CommandComponent` runs an ``inlet`` service as a child process in its own process group,
its output appended to a log file, and checks its ``/healthz`` endpoint (or a TCP port).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from inlet.services.stack.processes import port_is_open, stop_process_group


class Component(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def pid(self) -> int | None: ...

    def alive(self) -> bool: ...

    def healthy(self) -> bool: ...

    def describe(self) -> dict[str, Any]: ...


class _Server(Protocol):
    def start(self) -> Any: ...

    def stop(self) -> None: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def is_running(self) -> bool: ...


@dataclass
class ServerComponent:
    """An embedded server launcher (``start``/``stop``/``pid``/``is_running``) as a component."""

    name: str
    server: _Server
    address: Callable[[], dict[str, Any]]
    check: Callable[[], bool] | None = None
    after_start: Callable[[], None] | None = None  # e.g. create databases once the server runs

    def start(self) -> None:
        self.server.start()
        if self.after_start is not None:
            self.after_start()

    def stop(self) -> None:
        self.server.stop()

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def alive(self) -> bool:
        return bool(self.server.is_running)

    def healthy(self) -> bool:
        if not self.alive():
            return False
        try:
            return self.check() if self.check is not None else True
        except Exception:
            return False

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, **self.address()}


@dataclass
class CommandComponent:
    """An ``inlet`` service run as a child process (its own process group), output to ``log_path``."""

    name: str
    argv: Sequence[str]
    log_path: Path
    health_url: str | None = None  # http://127.0.0.1:PORT/healthz
    port: int | None = None  # checked when there is no health URL
    extra: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    stop_grace_s: float = 20.0
    _proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def inlet(*args: str) -> list[str]:
        """The argv of an ``inlet`` CLI command run by this interpreter."""
        return [sys.executable, "-m", "inlet.services.cli.main", *args]

    def start(self) -> None:
        if self.alive():
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "INLET_LOG_FORMAT": "json", "INLET_LOG_LEVEL": "INFO", **self.env},
            )

    def stop(self) -> None:
        if self._proc is not None:
            stop_process_group(self._proc, signal.SIGTERM, grace_s=self.stop_grace_s)
            self._proc = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.alive() and self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def healthy(self) -> bool:
        if not self.alive():
            return False
        if self.health_url is not None:
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as resp:
                    return bool(resp.status == 200 and json.loads(resp.read()).get("status") == "ok")
            except (urllib.error.URLError, OSError, ValueError):
                return False
        if self.port is not None:
            return port_is_open("127.0.0.1", self.port)
        return True

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "pid": self.pid, "log": str(self.log_path)}
        if self.health_url:
            out["health"] = self.health_url
            out["metrics"] = self.health_url.replace("/healthz", "/metrics")
        return {**out, **self.extra}


def stopped_tables(health_url: str, timeout_s: float = 2.0) -> dict[str, str] | None:
    """The tables a service reports stopped on its ``/readyz`` (next to ``health_url``), each with
    its reason; None when the endpoint cannot be read."""
    url = health_url.replace("/healthz", "/readyz")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:  # 503: not ready, the body says why
        body = e.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        stopped = json.loads(body).get("stopped") or {}
    except (ValueError, AttributeError):
        return None
    return {str(k): str(v) for k, v in stopped.items()} if isinstance(stopped, dict) else None


def health_details(health_url: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The JSON a service's ``/healthz`` answers (healthy or not); None when it cannot be read."""
    try:
        with urllib.request.urlopen(health_url, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as e:  # 503: unhealthy, the body says why
        body = e.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
