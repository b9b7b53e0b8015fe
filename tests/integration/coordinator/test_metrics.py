"""The coordinator's /metrics, /livez and /readyz (issue #22 item 4): a commit observes its latency
from begin to completion, a conflict counts, an unpublished commit event shows as outbox backlog
with its age, and a janitor rollback counts."""

from __future__ import annotations

import json
import posixpath
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from support.metrics import sample, scrape

from inlet.core import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.services.coordinator.config import ConfigError, CoordinatorConfig
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import ConflictError, CoordinatorClient

LATENCY = "inlet_coordinator_commit_latency_seconds"
CONFLICTS = "inlet_coordinator_conflicts_total"
PENDING = "inlet_coordinator_outbox_pending_events"
AGE = "inlet_coordinator_outbox_oldest_event_age_seconds"
ROLLBACKS = "inlet_coordinator_janitor_rollbacks_total"
Start = Callable[..., RunningServer]


def _md(file_id: str) -> CommitMetadata:
    md = CommitMetadata(operation_type="UPSERT")
    md.add(WriteStat(file_id, posixpath.join("", f"{file_id}_0-0-0_1.parquet"), ""))
    return md


def _probe(address: str, path: str) -> tuple[int, dict[str, object]]:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as resp:
        return resp.status, json.loads(resp.read())


def test_commit_latency_conflicts_and_outbox_backlog(start_coordinator: Start, lake: Path) -> None:
    # no Kafka: every commit event stays in the outbox, so the backlog is exactly the commits
    server = start_coordinator(metrics_listen="127.0.0.1:0")
    address = server.metrics_address
    assert address is not None and address.startswith("127.0.0.1:")
    assert _probe(address, "/livez")[0] == 200
    status, body = _probe(address, "/readyz")
    assert status == 200 and body["database"] == "ok"
    path = lake / "m"
    HudiTable.create(str(path), name="m", record_key="id")
    with CoordinatorClient(server.address, timeout_s=30) as client:
        client.register_table("obs.m", str(path))
        text = scrape(address)
        assert sample(text, PENDING, table="obs.m") == 0 and sample(text, AGE, table="obs.m") == 0
        assert sample(text, CONFLICTS, table="obs.m") is None

        a = client.begin_instant("obs.m", "commit").instant.instant_time
        begun = time.monotonic()
        b = client.begin_instant("obs.m", "commit").instant.instant_time
        completing = time.monotonic()
        client.complete_instant("obs.m", b, "commit", metadata=_md("g1"))
        completed = time.monotonic()
        text = scrape(address)
        assert sample(text, LATENCY + "_count", table="obs.m", action="commit") == 1
        latency = sample(text, LATENCY + "_sum", table="obs.m", action="commit")
        # b's latency runs from its begin (after a's) to its completion
        assert latency is not None and 0 < latency <= completed - begun + 0.05
        assert sample(text, PENDING, table="obs.m") == 1
        age = sample(text, AGE, table="obs.m")
        assert age is not None and 0 < age <= time.monotonic() - completing + 0.05

        # a touched the same file group: OCC refuses it, and it counts
        with pytest.raises(ConflictError):
            client.complete_instant("obs.m", a, "commit", metadata=_md("g1"))
        text = scrape(address)
        assert sample(text, CONFLICTS, table="obs.m", mode="OPTIMISTIC", against="completed") == 1
        assert sample(text, LATENCY + "_count", table="obs.m", action="commit") == 1  # no commit
        # a later commit waited from its begin: at least as long as the calls in between took
        c = client.begin_instant("obs.m", "commit").instant.instant_time
        c_begun = time.monotonic()
        before = sample(scrape(address), LATENCY + "_sum", table="obs.m", action="commit") or 0.0
        waited = time.monotonic() - c_begun
        client.complete_instant("obs.m", c, "commit", metadata=_md("g2"))
        text = scrape(address)
        assert sample(text, LATENCY + "_count", table="obs.m", action="commit") == 2
        assert (sample(text, LATENCY + "_sum", table="obs.m", action="commit") or 0.0) - before >= waited
        assert sample(text, PENDING, table="obs.m") == 2


def test_janitor_rollbacks_count(start_coordinator: Start, lake: Path) -> None:
    server = start_coordinator(metrics_listen="127.0.0.1:0", heartbeat_timeout_ms=300)
    address = server.metrics_address
    assert address is not None
    path = lake / "j"
    HudiTable.create(str(path), name="j", record_key="id")
    with CoordinatorClient(server.address, timeout_s=30) as client:
        client.register_table("obs.j", str(path), heartbeat_timeout_ms=300)
        client.begin_instant("obs.j", "commit", writer_id="silent")  # never beats
        deadline = time.monotonic() + 20
        while sample(scrape(address), ROLLBACKS, table="obs.j") != 1:
            assert time.monotonic() < deadline, "the janitor's rollback was not counted"
            time.sleep(0.1)
        # the rollback instant itself completed through the coordinator: its latency is observed
        assert (sample(scrape(address), LATENCY + "_count", table="obs.j", action="rollback") or 0) >= 1


def test_metrics_listen_is_checked() -> None:
    config = CoordinatorConfig(
        database_url="postgresql://x", lake_roots=("/lake",), insecure=True, metrics_listen="nowhere"
    )
    with pytest.raises(ConfigError, match="--metrics-listen: invalid listen address 'nowhere'"):
        config.validate()
