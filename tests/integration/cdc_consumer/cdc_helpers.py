"""Helpers of the CDC consumer service tests: real recorded Debezium bytes in, the service's topics out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from inlet.services.cdc_consumer.service import CdcConsumerService
from inlet.services.cdc_consumer.settings import CdcConfig
from inlet.services.stack import TEST_CONSUMER_SETTINGS

RECORDED = (
    Path(__file__).resolve().parents[3]
    / ".."
    / "shared"
    / "testdata"
    / "debezium"
    / "real_schemas_true.jsonl"
)
if not RECORDED.is_file():  # the shared test data sits beside the repository
    RECORDED = Path("/work/shared/testdata/debezium/real_schemas_true.jsonl")

RECORDED_PREFIX = "dbserver1"
VENV_INLET = Path(sys.executable).parent / "inlet"
# a member that died unannounced (SIGKILL) holds its partitions for a full session timeout: a short
# session (the test broker allows 1 s and up) lets the next member take over in ~2 s
QUICK_GROUP = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500}
FAST_CONSUMER = [
    f"{k}={v}" for k, v in {**TEST_CONSUMER_SETTINGS, **QUICK_GROUP}.items() if k != "auto.offset.reset"
]


@dataclass(frozen=True)
class InRecord:
    topic: str
    key: bytes | None
    value: bytes | None


def _bytes(obj: Any) -> bytes | None:
    # Kafka Connect's JsonConverter writes compact JSON
    return None if obj is None else json.dumps(obj, separators=(",", ":")).encode()


def recorded(prefix: str) -> list[InRecord]:
    """The real Debezium output (schemas enabled), with topic prefix ``dbserver1`` renamed to ``prefix``."""
    out = []
    for line in RECORDED.read_text().splitlines():
        r = json.loads(line)
        topic = r["topic"].replace(RECORDED_PREFIX, prefix, 1)
        out.append(InRecord(topic, _bytes(r["key"]), _bytes(r["value"])))
    return out


def unique_prefix() -> str:
    return "s" + uuid.uuid4().hex[:10]


def source_topics(prefix: str) -> list[str]:
    return [
        f"{prefix}.public.customers",
        f"{prefix}.public.orders",
        f"{prefix}.public.events_nopk",
        f"{prefix}.transaction",
        f"{prefix}.message",
        f"__debezium-heartbeat.{prefix}",
    ]


def produce(bootstrap: str, records: Iterable[InRecord | tuple[Any, ...]]) -> dict[str, int]:
    """Produce records (partition 0 of each topic), in order; returns how many per topic.

    A record is an :class:`InRecord` or ``(topic, key, value[, headers])``.
    """
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "max.in.flight.requests.per.connection": 1,
        }
    )
    counts: dict[str, int] = {}
    errors: list[Any] = []
    for i, r in enumerate(records):
        topic, key, value, *rest = (r.topic, r.key, r.value) if isinstance(r, InRecord) else r
        p.produce(
            topic,
            value,
            key,
            partition=0,
            headers=rest[0] if rest else None,
            on_delivery=lambda e, _m: errors.append(e) if e else None,
        )
        counts[topic] = counts.get(topic, 0) + 1
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert not errors, errors
    return counts


@dataclass
class OutRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict)
    header_list: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def source(self) -> tuple[str, int, int]:
        h = self.headers
        return (
            h["inlet-source-topic"].decode(),
            int(h["inlet-source-partition"]),
            int(h["inlet-source-offset"]),
        )


def read_all(
    bootstrap: str,
    topics: Iterable[str],
    *,
    idle_s: float = 2.0,
    min_count: int = 0,
    timeout_s: float = 60.0,
    require_all_topics: bool = True,
) -> list[OutRecord]:
    """Every record of ``topics`` from the start; returns once ``min_count`` are read and none came for ``idle_s``.

    With ``require_all_topics=False`` a topic that does not exist after a short wait is read as empty
    (e.g. a table whose first change was never relayed before a stop)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
        }
    )
    wanted = list(topics)
    deadline = time.monotonic() + timeout_s
    tps: list[TopicPartition] = []
    topic_deadline = deadline if require_all_topics else time.monotonic() + min(10.0, timeout_s)
    while time.monotonic() < topic_deadline:  # wait until every topic exists
        meta = c.list_topics(timeout=10)
        found = [meta.topics.get(t) for t in wanted]
        if all(tm is not None and tm.error is None and tm.partitions for tm in found):
            break
        time.sleep(0.2)
    present = [
        t for t in wanted if (tm := meta.topics.get(t)) is not None and tm.error is None and tm.partitions
    ]
    if require_all_topics and len(present) < len(wanted):
        present = []
    tps = [TopicPartition(t, p, 0) for t in present for p in meta.topics[t].partitions]
    out: list[OutRecord] = []
    try:
        if not tps:
            return out
        c.assign(tps)
        last = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.2)
            for m in msgs:
                if m.error():
                    continue
                hl = list(m.headers() or [])
                out.append(OutRecord(m.topic(), m.partition(), m.offset(), m.key(), m.value(), dict(hl), hl))
            if msgs:
                last = time.monotonic()
            elif len(out) >= min_count and time.monotonic() - last >= idle_s:
                break
    finally:
        c.close()
    return out


def topics_with_prefix(bootstrap: str, prefix: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return sorted(t for t in md.topics if t.startswith(prefix))


def committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in res]
    finally:
        c.close()


def make_config(bootstrap: str, prefix: str, **kw: Any) -> CdcConfig:
    values: dict[str, Any] = {
        "bootstrap": bootstrap,
        "topic_pattern": rf"^({prefix}\.|__debezium-heartbeat\.{prefix}$)",
        "group": "cdc-" + prefix,
        "dlq_topic": f"inlet.dlq.{prefix}",
        "metrics_listen": "127.0.0.1:0",
        "consumer_options": FAST_CONSUMER,
        "shutdown_timeout_s": 10.0,
    }
    values.update(kw)
    return CdcConfig.from_settings(values)


@contextmanager
def running(config: CdcConfig, **kw: Any) -> Iterator[CdcConsumerService]:
    """The service in a thread of this process; stopped (SIGTERM-equivalent) on exit."""
    service = CdcConsumerService(config, **kw)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            service.run(stop)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=target, name="cdc-service", daemon=True)
    t.start()
    assert service.ready.wait(60) or errors, "service did not start"
    if errors and not service.ready.is_set():
        raise errors[0]  # why it did not start, not a later assertion about a service that never ran
    try:
        yield service
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive(), "service did not stop"
    if errors:
        raise errors[0]


def wait_for(pred: Any, timeout_s: float = 60.0, every_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s}s")


def metric_value(text: str, name: str, **labels: str) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def spawn_cli(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``.venv/bin/inlet <args>`` in its own process group; stdout+stderr to ``log_path``."""
    out = open(log_path, "ab")  # noqa: SIM115 -- handed to the child
    return subprocess.Popen(
        [str(VENV_INLET), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def cli_run_args(bootstrap: str, prefix: str, topics: list[str], *extra: str) -> list[str]:
    args = [
        "cdc",
        "run",
        "--kafka-bootstrap",
        bootstrap,
        "--group",
        "cdc-" + prefix,
        "--dlq-topic",
        f"inlet.dlq.{prefix}",
        "--metrics-listen",
        "127.0.0.1:0",
        "--shutdown-timeout",
        "10",
    ]
    for t in topics:
        args += ["--topic", t]
    for o in FAST_CONSUMER:
        args += ["--consumer-option", o]
    return [*args, *extra]


def serving_address(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 60.0) -> str:
    """The metrics address from the service's ``{"event": "serving", ...}`` line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith('{"event": "serving"'):
                return str(json.loads(line)["metrics"])
        if proc.poll() is not None:
            raise AssertionError(f"service exited {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"service did not announce itself:\n{log_path.read_text()[-3000:]}")


def scrape(address: str) -> str:
    import urllib.request

    return urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Kill a leftover service process group (tests leave nothing running)."""
    import signal

    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
