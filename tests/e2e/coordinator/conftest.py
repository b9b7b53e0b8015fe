"""Multi-process coordinator tests: the coordinator is a real subprocess (``inlet coordinator serve``)
that a test may SIGKILL and restart on the same port; writers are subprocesses (``writer.py``)
that commit through ``GrpcCommitProtocol`` and journal every acknowledgement to a file.

Fixtures:

- ``e2e``: an :class:`E2E` for one test (its lake under ``tmp_path``, its PostgreSQL database
  ``pg_url``): starts coordinators and writers (all killed at the end), reads the coordinator's
  database and the tables' timelines.

Fault injection that SIGKILL cannot aim (a crash between two statements of the coordinator) uses
:data:`CRASH_SHIM`: the same CLI entry point with ``Storage.write_atomic`` or the servicer's
``CompleteInstant`` wrapped to ``os._exit`` at the chosen point (``INLET_E2E_CRASH``).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import HudiTable
from inlet.core.timeline.instant import Instant
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.stack.processes import free_port

HERE = Path(__file__).resolve().parent
WRITER = HERE / "writer.py"
BIN = Path(sys.executable).parent
DATA = ["id", "city", "ts", "fare"]
NBCC_PROPS = {"hoodie.write.concurrency.mode": "NON_BLOCKING_CONCURRENCY_CONTROL"}

# Run the coordinator's CLI with a crash injected at one point (see the module docstring):
#   complete_file  - right after the completed instant file is written, before the transaction commits
#   complete_reply - after CompleteInstant committed, before its response is sent
#   begin_file     - right after a write's .requested file is written, before the transaction commits
# INLET_E2E_CRASH_NTH picks the n-th occurrence (default 1).
CRASH_SHIM = r"""
import os, re, sys
point = os.environ.get("INLET_E2E_CRASH", "")
nth = int(os.environ.get("INLET_E2E_CRASH_NTH", "1"))
seen = [0]
def hit():
    seen[0] += 1
    if seen[0] == nth:
        sys.stderr.write(f"INLET_E2E_CRASH at {point} (occurrence {nth})\n"); sys.stderr.flush()
        os._exit(77)
from inlet.core.storage import Storage
original_write = Storage.write_atomic
def write_atomic(self, path, data):
    original_write(self, path, data)
    name = os.path.basename(str(path))
    if point == "complete_file" and re.fullmatch(r"\d{17}_\d{17}\.(commit|deltacommit)", name):
        hit()
    if point == "begin_file" and re.fullmatch(r"\d{17}\.(commit|deltacommit)\.requested", name):
        hit()
Storage.write_atomic = write_atomic
from inlet.services.coordinator.service import CoordinatorServicer
original_complete = CoordinatorServicer.CompleteInstant
def complete(self, request, context):
    response = original_complete(self, request, context)
    if point == "complete_reply":
        hit()
    return response
CoordinatorServicer.CompleteInstant = complete
from inlet.services.cli.coordinator import main
sys.exit(main(sys.argv[1:]))
"""


def _inlet_has_coordinator() -> bool:
    """Whether ``inlet coordinator serve`` is wired into the main CLI (else its module is run)."""
    probe = subprocess.run(
        [str(BIN / "inlet"), "coordinator", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    return probe.returncode == 0


_SERVE_CMD: list[str] | None = None


def serve_command() -> list[str]:
    global _SERVE_CMD
    if _SERVE_CMD is None:
        if _inlet_has_coordinator():
            _SERVE_CMD = [str(BIN / "inlet"), "coordinator", "serve"]
        else:  # the same CLI code, run as its module
            _SERVE_CMD = [sys.executable, "-m", "inlet.services.cli.coordinator", "serve"]
    return list(_SERVE_CMD)


class CoordinatorProcess:
    """``inlet coordinator serve`` as a subprocess on a fixed loopback port (kept across restarts)."""

    def __init__(
        self,
        database_url: str,
        lake: Path,
        log_path: Path,
        *,
        kafka_bootstrap: str | None = None,
        topic: str | None = None,
        heartbeat_timeout_ms: int | None = None,
        janitor_interval_ms: int = 200,
        max_workers: int = 16,
    ) -> None:
        self.database_url = database_url
        self.lake = lake
        self.log_path = log_path
        self.kafka_bootstrap = kafka_bootstrap
        self.topic = topic
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.janitor_interval_ms = janitor_interval_ms
        self.max_workers = max_workers
        self.port = free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        args = [
            "--listen",
            self.address,
            "--database-url",
            self.database_url,
            "--lake-root",
            str(self.lake),
            "--insecure",
            "--janitor-interval-ms",
            str(self.janitor_interval_ms),
            "--max-workers",
            str(self.max_workers),
            "--db-pool-size",
            "8",
        ]
        if self.heartbeat_timeout_ms is not None:
            args += ["--heartbeat-timeout-ms", str(self.heartbeat_timeout_ms)]
        if self.kafka_bootstrap:
            args += ["--kafka-bootstrap", self.kafka_bootstrap]
        if self.topic:
            args += ["--topic", self.topic]
        return args

    def start(self, crash_at: str | None = None, crash_nth: int = 1, timeout_s: float = 60.0) -> None:
        """Start (or restart) it and wait for its ``{"event": "serving"}`` line."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {**os.environ, "INLET_LOG_LEVEL": "INFO"}
        if crash_at:
            cmd = [sys.executable, "-c", CRASH_SHIM, "serve", *self.args()]
            env |= {"INLET_E2E_CRASH": crash_at, "INLET_E2E_CRASH_NTH": str(crash_nth)}
        else:
            cmd = [*serve_command(), *self.args()]
        self.starts += 1
        log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 - handed to the child
        log.write(
            f"\n===== start {self.starts} {cmd[0] if crash_at else ' '.join(cmd[:3])} crash_at={crash_at}\n"
        )
        log.flush()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
        )
        log.close()
        lines: queue.Queue[str] = queue.Queue()
        stdout = self.proc.stdout
        assert stdout is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"coordinator exited with {self.proc.returncode}:\n{self.log_tail()}"
                    ) from None
                continue
            event = json.loads(line)
            if event.get("event") == "serving":
                assert event["address"] == self.address, event
                return
        self.kill()
        raise RuntimeError(f"coordinator did not start within {timeout_s} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL (no cleanup, no graceful stop), and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (graceful), SIGKILL after 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def wait_exit(self, timeout_s: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


@dataclass
class WriterProcess:
    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    log: Path

    def journal(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]

    def acked(self) -> list[dict[str, Any]]:
        return [e for e in self.journal() if e["event"] == "acked"]

    def failed(self) -> list[dict[str, Any]]:
        return [e for e in self.journal() if e["event"] == "failed"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@dataclass(frozen=True)
class InstantRecord:
    """An ``instants`` row of the coordinator's database."""

    instant_time: str
    action: str
    state: str
    completion_time: str | None
    writer_id: str
    rolled_back_by: str | None
    rollback_target: str | None
    created_at: Any


@dataclass(frozen=True)
class OutboxRecord:
    id: int
    event_id: str
    sequence: int
    payload: bytes
    published: bool
    attempts: int
    last_error: str | None


def rows(ids: Sequence[int], city: str, ts: int, fare: float) -> list[dict[str, Any]]:
    return [{"id": i, "city": city, "ts": ts, "fare": fare + i / 100} for i in ids]


def hudi_rows(path: Path, version: str) -> list[dict[str, Any]]:
    """The snapshot as the independent hudi-rs reader (0.5.0) sees it, with file group reader
    ``version``: data columns and ``_hoodie_commit_time``, sorted by id."""
    table = (
        HudiTableBuilder.from_base_uri(str(path))
        .with_hudi_option("hoodie.read.file.group.reader.version", version)
        .build()
    )
    batches = table.read(HudiReadOptions())
    if not batches:
        return []
    data = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
    out: list[dict[str, Any]] = data.select(DATA).sort_by("id").to_pylist()
    return out


def inlet_rows(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = HudiTable.open(str(path)).read().select(DATA).sort_by("id").to_pylist()
    return out


class E2E:
    """One test's processes, lake and database (and the helpers tests need: ``rows``,
    ``hudi_rows``, ``inlet_rows``; a conftest cannot be imported by name)."""

    def __init__(self, tmp_path: Path, pg_url: str) -> None:
        self.tmp = tmp_path
        self.pg_url = pg_url
        self.lake = tmp_path / "lake"
        self.lake.mkdir()
        self.gates = tmp_path / "gates"
        self.gates.mkdir()
        self.coordinators: list[CoordinatorProcess] = []
        self.writers: list[WriterProcess] = []

    rows = staticmethod(rows)
    hudi_rows = staticmethod(hudi_rows)
    inlet_rows = staticmethod(inlet_rows)

    # ------------------------------------------------------------------ processes

    def coordinator(
        self, crash_at: str | None = None, crash_nth: int = 1, **settings: Any
    ) -> CoordinatorProcess:
        """A started coordinator subprocess (see :class:`CoordinatorProcess` for the settings;
        ``crash_at`` injects a crash for this first run, see :data:`CRASH_SHIM`)."""
        c = CoordinatorProcess(
            self.pg_url, self.lake, self.tmp / f"coordinator-{len(self.coordinators)}.log", **settings
        )
        self.coordinators.append(c)
        c.start(crash_at=crash_at, crash_nth=crash_nth)
        return c

    def writer(
        self,
        coordinator: CoordinatorProcess,
        table_id: str,
        path: Path,
        name: str,
        writes: Sequence[dict[str, Any]],
        env: dict[str, str] | None = None,
        **job: Any,
    ) -> WriterProcess:
        """Start ``writer.py`` for one job (see its docstring); it runs until its writes are done."""
        out = self.tmp / f"writer-{name}.jsonl"
        log = self.tmp / f"writer-{name}.log"
        spec = {
            "target": coordinator.address,
            "table_id": table_id,
            "path": str(path),
            "name": name,
            "out": str(out),
            "writes": list(writes),
            "gate_dir": str(self.gates),
            **job,
        }
        job_file = self.tmp / f"writer-{name}.json"
        job_file.write_text(json.dumps(spec))
        with open(log, "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, str(WRITER), str(job_file)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        w = WriterProcess(name, proc, out, log)
        self.writers.append(w)
        return w

    def wait_writers(self, writers: Sequence[WriterProcess], timeout_s: float = 180.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        codes = []
        for w in writers:
            try:
                codes.append(w.proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"writer {w.name} still running:\n{w.log.read_text()[-3000:]}") from None
        return codes

    def close(self) -> None:
        for w in self.writers:
            w.kill()
        for c in self.coordinators:
            c.kill()

    def client(self, coordinator: CoordinatorProcess) -> CoordinatorClient:
        return CoordinatorClient(coordinator.address, timeout_s=30, retries=10, max_backoff_s=1.0)

    # ------------------------------------------------------------------ tables

    def cow_table(self, name: str, **kwargs: Any) -> Path:
        path = self.lake / name
        HudiTable.create(
            str(path), name=name, record_key="id", partition_by="city", ordering_field="ts", **kwargs
        )
        return path

    def nbcc_table(self, name: str, buckets: int = 2, merge_mode: str = "EVENT_TIME_ORDERING") -> Path:
        path = self.lake / name
        HudiTable.create(
            str(path),
            name=name,
            record_key="id",
            partition_by="city",
            ordering_field="ts",
            merge_mode=merge_mode,
            table_type="MERGE_ON_READ",
            index="bucket",
            buckets=buckets,
            extra_properties=NBCC_PROPS,
        )
        return path

    # ------------------------------------------------------------------ what is on disk / in the database

    @staticmethod
    def timeline(path: Path) -> list[Instant]:
        return list(HudiTable.open(str(path)).timeline.instants)

    def db_instants(self, table_id: str) -> list[InstantRecord]:
        with psycopg.connect(self.pg_url) as conn:
            got = conn.execute(
                "SELECT instant_time, action, state, completion_time, writer_id, rolled_back_by, "
                "rollback_target, created_at FROM instants WHERE table_id = %s ORDER BY created_at, instant_time",
                (table_id,),
            ).fetchall()
        return [InstantRecord(*r) for r in got]

    def db_outbox(self, table_id: str) -> list[OutboxRecord]:
        with psycopg.connect(self.pg_url) as conn:
            got = conn.execute(
                "SELECT id, event_id, sequence, payload, published_at IS NOT NULL, attempts, last_error "
                "FROM outbox WHERE table_id = %s ORDER BY id",
                (table_id,),
            ).fetchall()
        return [OutboxRecord(r[0], r[1], r[2], bytes(r[3]), r[4], r[5], r[6]) for r in got]

    def check_times(self, path: Path, table_id: str) -> list[Instant]:
        """No instant or completion time reused or out of order, on the timeline and in the database.

        - every time the coordinator issued (instant times and completion times together) is unique;
        - every completion time is after its instant time;
        - the database issued instant times in increasing order (rows ordered by insertion), and it
          agrees with the timeline on every completed instant's completion time;
        - the outbox numbers the table's completed instants 1..n in completion-time order.
        Returns the timeline.
        """
        tl = self.timeline(path)
        times = [i.time for i in tl]
        assert len(set(times)) == len(times), f"instant time reused: {sorted(times)}"
        done = [i for i in tl if i.is_completed]
        completions = [i.completion_time for i in done]
        assert all(c for c in completions)
        issued = times + [c for c in completions if c]
        assert len(set(issued)) == len(issued), f"a time was issued twice: {sorted(issued)}"
        for i in done:
            assert i.completion_time is not None and i.completion_time > i.time, i
        db = self.db_instants(table_id)
        db_times = [r.instant_time for r in db]
        assert len(set(db_times)) == len(db_times)
        assert db_times == sorted(db_times), f"instant times issued out of order: {db_times}"
        by_time = {r.instant_time: r for r in db}
        for i in done:
            r = by_time.get(i.time)
            assert r is not None, f"completed instant {i.time} unknown to the coordinator's database"
            assert (r.state, r.completion_time) == ("COMPLETED", i.completion_time), (r, i)
        for r in db:
            if r.state == "COMPLETED":
                assert any(i.time == r.instant_time for i in done), f"{r} completed in the database only"
        outbox = self.db_outbox(table_id)
        assert sorted(o.event_id for o in outbox) == sorted(f"{table_id}/{i.time}" for i in done), (
            "the outbox must hold exactly one row per completed instant"
        )
        by_completion = [f"{table_id}/{i.time}" for i in sorted(done, key=lambda i: i.completion_time or "")]
        assert [o.event_id for o in sorted(outbox, key=lambda o: o.sequence)] == by_completion
        assert [o.sequence for o in sorted(outbox, key=lambda o: o.sequence)] == list(range(1, len(done) + 1))
        return tl


@pytest.fixture
def e2e(tmp_path: Path, pg_url: str) -> Iterator[E2E]:
    env = E2E(tmp_path, pg_url)
    try:
        yield env
    finally:
        env.close()
