"""A real Spark standalone cluster from the installed PySpark: one master and one worker, each a
``java`` process started through ``pyspark/bin/spark-class``, bound to 127.0.0.1 on free ports.

>>> with StandaloneCluster(tmp_dir) as cluster:
...     cluster.master_url   # spark://127.0.0.1:<port>

``SPARK_LOCAL_IP=127.0.0.1`` makes every server of both processes (RPC, web UIs) bind loopback;
the web UIs get free ports, the master's REST submission server is off. ``default_cores`` is the
master's ``spark.deploy.defaultCores``: the cores an application gets unless it sets
``spark.cores.max`` (several applications at once, as a stack's writer and table services, each
take that many instead of one taking them all). :meth:`applications` reads the master's JSON
status page. Both processes are stopped (SIGTERM, then SIGKILL) on exit, with the executors the
worker started (the worker's process group).

Used by the stack test of the Spark engine (tests/e2e/replication/test_initial_load.py): the load,
the writer and the table services run their jobs on it, proving nothing assumes ``local[*]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s:\n{log.read_text()[-3000:]}")


class StandaloneCluster:
    def __init__(
        self, work_dir: Path, cores: int = 2, memory: str = "1g", default_cores: int | None = None
    ) -> None:
        self.work_dir = work_dir
        self.cores = cores
        self.memory = memory
        self.default_cores = default_cores
        self.port = free_port()
        self.webui_port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(self.work_dir / "local"),
            SPARK_WORKER_DIR=str(self.work_dir / "worker"),
            SPARK_LOG_DIR=str(self.work_dir / "logs"),
            PYSPARK_PYTHON=sys.executable,
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"
            + (f" -Dspark.deploy.defaultCores={self.default_cores}" if self.default_cores else ""),
            SPARK_DAEMON_MEMORY="512m",
        )
        return env

    def _start(self, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work_dir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=self._env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: the executors it starts go with it
            )
        self.procs.append(proc)
        return proc, log

    def start(self) -> StandaloneCluster:
        for d in ("local", "worker", "logs"):
            (self.work_dir / d).mkdir(parents=True, exist_ok=True)
        master, log = self._start(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
            ],
        )
        _wait_port(self.port, master, log)
        worker_port = free_port()
        worker, wlog = self._start(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(worker_port),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(self.work_dir / "worker"),
                self.master_url,
            ],
        )
        _wait_port(worker_port, worker, wlog)
        deadline = time.monotonic() + 60
        while "Successfully registered with master" not in wlog.read_text():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"the worker did not register:\n{wlog.read_text()[-3000:]}")
            time.sleep(0.3)
        return self

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has seen (running and completed), as its JSON status page
        lists them: ``name``, ``state``, ``cores``, ``starttime``, ``duration``..."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as resp:
            status = json.loads(resp.read())
        apps: list[dict[str, Any]] = [*status.get("activeapps", ()), *status.get("completedapps", ())]
        return apps

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # executors left in the group, if any
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
