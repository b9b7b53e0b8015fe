"""Apache Hudi itself, as a test oracle: its Spark bundle in a long-lived PySpark 3.5 process per line.

Apache Hudi's Spark bundles need Spark 3.5 (no bundle supports the project's PySpark 4.3), so each runs
in a process of its own, on the interpreter of the oracle's virtualenv (``.tools/hudi-oracle/``, made
by ``make install`` from ``tests/oracle/requirements.txt``), serving ``tests/oracle/oracle_server.py``'s
JSON-lines protocol; results come back as Arrow tables. The bundles are the pom's parts ``hudi-1.0``
(Apache Hudi 1.0.2) and ``hudi-1.2`` (1.2.0), both on Spark 3.5.

The API (stable: other test layers build on it)::

    oracle = ApacheHudi("1.0", conf={"spark.hadoop.hive.metastore.uris": ...})   # or the fixture
    oracle.start()                       # lazily by the first call too; ~15 s of JVM start
    oracle.read(path, {"hoodie.datasource.query.type": "read_optimized"}) -> pa.Table
    oracle.reads([(path, options), ...]) -> list[pa.Table]        # many queries, one round trip
    oracle.sql("SELECT ...") -> pa.Table
    oracle.write(path, arrow_table, {"hoodie.table.name": ..., ...}, mode="append")
    oracle.stop()                        # also a context manager; no process is left

Every read and SQL result is all of Spark's columns (the ``_hoodie_*`` meta columns included) as Arrow
(timestamps ``timestamp[us, tz=UTC]``: the session time zone is UTC). A failure in the JVM raises
:class:`ApacheHudiError` with Spark's error text; the process goes on serving.

Fixture: ``apache_hudi`` (session scope, tests/oracle/conftest.py) is an :class:`ApacheHudiPool`:
``apache_hudi("1.0")`` starts the line's process on first use and returns it; every process it started
is stopped at the end of the session. ``apache_hudi("1.0", conf={...})`` is another process with extra
Spark confs (e.g. a Hive metastore), shared by every caller asking for the same line and confs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from inlet.services.stack import maven

REPO = Path(__file__).resolve().parents[2]
ORACLE_VENV = Path(os.environ.get("INLET_HUDI_ORACLE_VENV", REPO / ".tools" / "hudi-oracle"))
SERVER = REPO / "tests" / "oracle" / "oracle_server.py"
#: Apache Hudi line -> the pom part holding its Spark 3.5 bundle.
LINES = {"1.0": "hudi-1.0", "1.2": "hudi-1.2"}
#: Apache Hudi's version of each line (the pom's pins).
VERSIONS = {"1.0": "1.0.2", "1.2": "1.2.0"}
START_TIMEOUT = 240.0
CALL_TIMEOUT = 600.0
# Variables of the project's own Spark that must not reach Spark 3.5
_DROP_ENV = (
    "SPARK_HOME",
    "PYSPARK_PYTHON",
    "PYSPARK_DRIVER_PYTHON",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
)

Options = Mapping[str, Any]


class ApacheHudiError(RuntimeError):
    """Apache Hudi (Spark) failed a request: the message is Spark's error text."""


def python() -> Path:
    """The oracle venv's interpreter; a clear error when ``make install`` has not made it."""
    exe = ORACLE_VENV / "bin" / "python"
    if not exe.is_file():
        raise ApacheHudiError(
            f"the Apache Hudi oracle's virtualenv is missing ({ORACLE_VENV}): run `make install`"
        )
    return exe


class ApacheHudi:
    """One Apache Hudi line (``"1.0"`` or ``"1.2"``) in a Spark 3.5 process of its own."""

    def __init__(self, line: str, conf: Mapping[str, str] | None = None) -> None:
        if line not in LINES:
            raise ValueError(f"unknown Apache Hudi line {line!r}: one of {', '.join(LINES)}")
        self.line = line
        self.version = VERSIONS[line]
        self.conf = dict(conf or {})
        self.ready: dict[str, str] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._work: Path | None = None
        self._lock = threading.Lock()
        self._stderr: IO[str] | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ApacheHudi:
        """Start the process (no-op when running) and wait until its Spark session is up."""
        with self._lock:
            if self.running:
                return self
            jars = ",".join(str(jar) for jar in maven.classpath(LINES[self.line]))
            self._work = Path(tempfile.mkdtemp(prefix=f"hudi-oracle-{self.line}-"))
            cmd = [str(python()), str(SERVER), "--jars", jars, "--work", str(self._work)]
            for key, value in self.conf.items():
                cmd += ["--conf", f"{key}={value}"]
            env = {k: v for k, v in os.environ.items() if k not in _DROP_ENV}
            env["PYSPARK_PYTHON"] = str(python())
            env["SPARK_LOCAL_IP"] = "127.0.0.1"
            env["SPARK_LOCAL_DIRS"] = str(self._work / "local")
            self._stderr = open(self._work / "server.log", "w+", encoding="utf-8")  # noqa: SIM115
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                text=True,
                cwd=self._work,
                env=env,
                start_new_session=True,
            )
            answer = self._receive(START_TIMEOUT, "start")
            self.ready = answer["ready"]
            return self

    def stop(self) -> None:
        """Stop the Spark session and the process (killed if it does not exit); remove its files."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                if proc.poll() is None:
                    with contextlib.suppress(OSError, ValueError):
                        assert proc.stdin is not None
                        proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                        proc.stdin.close()
                    try:
                        proc.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, 9)
                        proc.wait(timeout=30)
                # the JVM is the python's child in the same session: nothing of it may outlive it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, 9)
                if proc.stdout is not None:
                    proc.stdout.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
            if self._work is not None:
                shutil.rmtree(self._work, ignore_errors=True)
                self._work = None

    def __enter__(self) -> ApacheHudi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ calls

    def read(
        self, path: str | Path, options: Options | None = None, columns: Sequence[str] | None = None
    ) -> pa.Table:
        """``spark.read.format("hudi").options(options).load(path)`` (``columns`` selected) as Arrow."""
        return self._tables({"op": "read", **_read_spec(path, options, columns)})[0]

    def reads(self, queries: Sequence[tuple[str | Path, Options | None]]) -> list[pa.Table]:
        """Many :meth:`read` queries in one round trip, answers in order."""
        return self._tables({"op": "reads", "reads": [_read_spec(p, o, None) for p, o in queries]})

    def sql(self, text: str) -> pa.Table:
        """``spark.sql(text)`` as Arrow."""
        return self._tables({"op": "sql", "text": text})[0]

    def write(
        self, path: str | Path, data: pa.Table, options: Options | None = None, mode: str = "append"
    ) -> None:
        """``df.write.format("hudi").options(options).mode(mode).save(path)`` with ``data`` as the DataFrame."""
        self.start()
        assert self._work is not None
        fd, staged = tempfile.mkstemp(prefix="data-", suffix=".arrow", dir=self._work)
        os.close(fd)
        try:
            with pa.OSFile(staged, "wb") as sink, pa.ipc.new_file(sink, data.schema) as writer:
                writer.write_table(data)
            self._call(
                {
                    "op": "write",
                    "path": str(path),
                    "data": staged,
                    "options": {k: str(v) for k, v in (options or {}).items()},
                    "mode": mode,
                }
            )
        finally:
            os.unlink(staged)

    # ------------------------------------------------------------------ protocol

    def _tables(self, request: dict[str, Any]) -> list[pa.Table]:
        tables = []
        for name in self._call(request)["files"]:
            with pa.memory_map(name) as source:
                tables.append(pa.ipc.open_file(source).read_all())
            os.unlink(name)
        return tables

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        self.start()
        with self._lock:
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            except OSError as exc:
                raise ApacheHudiError(
                    f"Apache Hudi {self.version} is gone ({exc}):\n{self._log_tail()}"
                ) from exc
            return self._receive(CALL_TIMEOUT, request["op"])

    def _receive(self, timeout: float, what: str) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        line = _readline(proc.stdout, timeout)
        if line is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            raise ApacheHudiError(
                f"Apache Hudi {self.version}: no answer to {what} in {timeout:.0f} s:\n{self._log_tail()}"
            )
        if not line:
            raise ApacheHudiError(
                f"Apache Hudi {self.version} exited (code {proc.wait()}) during {what}:\n{self._log_tail()}"
            )
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise ApacheHudiError(f"Apache Hudi {self.version} ({what}): {answer.get('error')}")
        return answer

    def _log_tail(self, lines: int = 30) -> str:
        if self._work is None or not (self._work / "server.log").is_file():
            return ""
        return "\n".join((self._work / "server.log").read_text(errors="replace").splitlines()[-lines:])


def _read_spec(path: str | Path, options: Options | None, columns: Sequence[str] | None) -> dict[str, Any]:
    return {
        "path": str(path),
        "options": {k: str(v) for k, v in (options or {}).items()},
        "columns": list(columns) if columns else None,
    }


def _readline(stream: IO[str], timeout: float) -> str | None:
    """One line from ``stream`` within ``timeout`` seconds ('' at its end, None on a timeout)."""
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else None


class ApacheHudiPool:
    """The processes of one test session: one per (line, extra confs), started on first use."""

    def __init__(self) -> None:
        self._started: dict[tuple[str, tuple[tuple[str, str], ...]], ApacheHudi] = {}
        self._lock = threading.Lock()

    def __call__(self, line: str, conf: Mapping[str, str] | None = None) -> ApacheHudi:
        key = (line, tuple(sorted((conf or {}).items())))
        with self._lock:
            oracle = self._started.get(key)
            if oracle is None:
                oracle = self._started[key] = ApacheHudi(line, conf)
        return oracle.start()

    def stop(self) -> None:
        with self._lock:
            oracles, self._started = list(self._started.values()), {}
        for oracle in oracles:
            oracle.stop()


@contextlib.contextmanager
def pool() -> Iterator[ApacheHudiPool]:
    """An :class:`ApacheHudiPool` whose processes are all stopped on exit."""
    started = ApacheHudiPool()
    try:
        yield started
    finally:
        started.stop()
