"""Writer fixtures: a real coordinator on a real PostgreSQL, the session's real Kafka broker, a lake
under ``tmp_path``, and writers run in-process (a thread) or as ``inlet writer run`` subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from inlet.services.coordinator.server import RunningServer
from inlet.services.stack import TEST_CONSUMER_SETTINGS
from inlet.services.writer.service import Writer, WriterConfig

INLET_BIN = str(Path(sys.executable).parent / "inlet")


@pytest.fixture
def prefix() -> str:
    """A source name unique to the test, so its topics and consumer group are its own."""
    return "db" + uuid.uuid4().hex[:10]


@dataclass
class Running:
    writer: Writer
    thread: threading.Thread
    stop_event: threading.Event
    errors: list[BaseException] = field(default_factory=list)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "writer did not stop"


def kafka_settings() -> dict[str, Any]:
    # a member that died unannounced (a crashed or SIGKILLed writer) holds its partitions for a full
    # session timeout: a short session (the test broker allows 1 s and up) hands them on in ~2 s
    quick_group = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500}
    return {k: v for k, v in {**TEST_CONSUMER_SETTINGS, **quick_group}.items() if k != "auto.offset.reset"}


@pytest.fixture
def start_writer(
    kafka_bootstrap: str, coordinator: RunningServer, lake: Path, prefix: str
) -> Iterator[Callable[..., Running]]:
    running: list[Running] = []

    def start(**overrides: Any) -> Running:
        values: dict[str, Any] = {
            "bootstrap": kafka_bootstrap,
            "coordinator": coordinator.address,
            "lake_root": str(lake),
            "topic_pattern": rf"^inlet\.changes\.{prefix}\..*",
            "group": f"writer-{prefix}",
            "batch_interval_ms": 300,
            "kafka": kafka_settings(),
            "retry_backoff_ms": 200,
            "error_retry_s": 1.0,
        }
        values.update(overrides)
        writer = Writer(WriterConfig(**values))
        stop = threading.Event()
        r = Running(writer, threading.Thread(target=lambda: None), stop)

        def target() -> None:
            try:
                writer.run(stop)
            except BaseException as e:  # surfaced by the test through r.errors
                r.errors.append(e)
                raise

        r.thread = threading.Thread(target=target, name="writer", daemon=True)
        r.thread.start()
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop_event.set()
    for r in running:
        r.thread.join(timeout=60)


@dataclass
class WriterProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def spawn_writer(
    kafka_bootstrap: str, coordinator: RunningServer, lake: Path, prefix: str, tmp_path: Path
) -> Iterator[Callable[..., WriterProcess]]:
    procs: list[WriterProcess] = []

    def spawn(*extra: str, env: dict[str, str] | None = None) -> WriterProcess:
        args = [
            INLET_BIN,
            "--log-level",
            "INFO",
            "--log-format",
            "json",
            "writer",
            "run",
            "--kafka-bootstrap",
            kafka_bootstrap,
            "--coordinator",
            coordinator.address,
            "--lake-root",
            str(lake),
            "--topic-pattern",
            rf"^inlet\.changes\.{prefix}\..*",
            "--group",
            f"writer-{prefix}",
            "--batch-interval-ms",
            "300",
            "--retry-backoff-ms",
            "200",
            "--metrics-listen",
            "127.0.0.1:0",
        ]
        for k, v in kafka_settings().items():
            args += ["--kafka-option", f"{k}={v}"]
        args += list(extra)
        log_path = tmp_path / f"writer-{len(procs)}.log"
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        wp = WriterProcess(proc, log_path)
        procs.append(wp)
        return wp

    yield spawn
    for wp in procs:
        if wp.proc.poll() is None:
            os.killpg(wp.proc.pid, signal.SIGKILL)
            wp.proc.wait(timeout=30)


def log_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out
