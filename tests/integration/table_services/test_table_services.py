"""The table-services service against a real coordinator and broker: Merge-on-Read tables written
through the coordinator are compacted after their commits (Hudi's delta-commit trigger) and cleaned, plans
requested by others are executed, one instance per table at a time (the services lease), and every
result reads the same by Inlet and both hudi-rs file-group readers as the model of the writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support import hudi_rs

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.core.timeline.instant import Action
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.stack.kafka import TEST_CONSUMER_SETTINGS
from inlet.services.table_services.service import LOCK_NAME, ServiceConfig, TableServicesService

TRIGGER = {"hoodie.compact.inline.max.delta.commits": "3", "hoodie.clean.commits.retained": "2"}


@pytest.fixture
def coordinator(events_coordinator: RunningServer) -> RunningServer:
    return events_coordinator


def wait_for(
    check: Callable[[], Any],
    timeout_s: float = 90.0,
    what: str = "condition",
    service: TableServicesService | None = None,
) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    why = f" (the service's last error: {service.last_error})" if service is not None else ""
    raise AssertionError(f"timed out waiting for {what}: {last!r}{why}")


class Model:
    """The expected table: the last write of each key (ordering by ``ts``, all writes increasing)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def batch(self, ids: list[int], ts: int) -> pa.Table:
        for i in ids:
            self.rows[i] = {"id": i, "name": f"n{i}-{ts}", "ts": ts}
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "name": [f"n{i}-{ts}" for i in ids],
                "ts": pa.array([ts] * len(ids), pa.int64()),
            }
        )


def read_inlet(path: Path) -> dict[int, dict[str, Any]]:
    got = HudiTable.open(str(path)).read().select(["id", "name", "ts"]).to_pylist()
    return {r["id"]: r for r in got}


def read_hudi_rs(path: Path, version: str) -> dict[int, dict[str, Any]]:
    got = hudi_rs.read_table(str(path), version).select(["id", "name", "ts"]).to_pylist()
    return {r["id"]: r for r in got}


def completed_compactions(path: Path) -> list[str]:
    tl = HudiTable.open(str(path)).timeline
    return [i.time for i in tl.completed() if i.action == Action.COMMIT]


def cleans(path: Path) -> list[str]:
    return [i.time for i in HudiTable.open(str(path)).timeline.completed([Action.CLEAN])]


def logs_in_latest_slices(path: Path) -> int:
    view = HudiTable.open(str(path)).file_system_view()
    return sum(len(s.log_files) for s in view.latest_file_slices())


@pytest.fixture
def service(
    coordinator: RunningServer, kafka_bootstrap: str, kafka_topic: str
) -> Iterator[TableServicesService]:
    svc = TableServicesService(
        ServiceConfig(
            bootstrap=kafka_bootstrap,
            coordinator=coordinator.address,
            topic=kafka_topic,
            group=f"ts-{kafka_topic}",
            options=dict(TRIGGER),
            coalesce_s=0.5,
            retry_initial_s=0.5,
            retry_max_s=1.0,
            lease_ms=5_000,
            stale_plan_s=0.0,  # a plan requested by another process is run at once
            # a short session: a member that died hands its partitions on in ~2 s
            kafka={**TEST_CONSUMER_SETTINGS, "session.timeout.ms": 2000, "heartbeat.interval.ms": 500},
        )
    )
    stop = threading.Event()
    thread = threading.Thread(target=svc.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield svc
    finally:
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_service_compacts_after_commits_and_runs_requested_plans(
    tmp_path: Path, coordinator: RunningServer, service: TableServicesService
) -> None:
    path = tmp_path / "users"
    HudiTable.create(
        str(path),
        name="users",
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=2,
    )
    model = Model()
    with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as client:
        client.register_table("app.users", str(path))
        protocol = GrpcCommitProtocol(client, "app.users", Storage(str(path)))
        try:
            table = HudiTable.open(str(path), commit_protocol=protocol)
            table.write(model.batch(list(range(20)), 1), "upsert")
            for ts in (2, 3):
                table.write(model.batch(list(range(0, 20, ts)), ts), "upsert")
            # three delta commits: the trigger is reached, the service schedules and runs a compaction
            first = wait_for(lambda: completed_compactions(path), what="a compaction", service=service)
            wait_for(
                lambda: first[0] in service.completed.get("app.users", {}).get("compaction", []),
                what="the service to report its compaction",
            )
            assert logs_in_latest_slices(path) == 0
            for reader in (read_inlet(path), read_hudi_rs(path, "1"), read_hudi_rs(path, "2")):
                assert reader == model.rows

            # a plan requested by someone else (here: scheduled without running) is run by the service
            table = HudiTable.open(str(path), commit_protocol=protocol)
            table.write(model.batch([1, 2, 3, 40], 4), "upsert")
            requested = HudiTable.open(str(path), commit_protocol=protocol).schedule_compaction(
                {"hoodie.compact.inline.max.delta.commits": "1"}
            )
            assert requested is not None
            table.write(model.batch([5, 41], 5), "upsert")  # a commit event brings the table back
            wait_for(lambda: requested in completed_compactions(path), what="the requested plan to run")
            assert read_inlet(path) == model.rows == read_hudi_rs(path, "2")
            # and the slices the compactions replaced are cleaned (2 commits retained)
            wait_for(lambda: cleans(path), what="a clean", service=service)
            assert read_inlet(path) == model.rows == read_hudi_rs(path, "1") == read_hudi_rs(path, "2")
        finally:
            protocol.close()


def test_a_table_held_by_another_instance_waits_for_its_lease(
    tmp_path: Path, coordinator: RunningServer, service: TableServicesService
) -> None:
    path = tmp_path / "orders"
    HudiTable.create(
        str(path),
        name="orders",
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=1,
    )
    model = Model()
    with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as client:
        client.register_table("app.orders", str(path))
        other = client.acquire_lock("app.orders", "another-instance", lease_ms=60_000, lock_name=LOCK_NAME)
        protocol = GrpcCommitProtocol(client, "app.orders", Storage(str(path)))
        try:
            table = HudiTable.open(str(path), commit_protocol=protocol)
            for ts in (1, 2, 3, 4):
                table.write(model.batch(list(range(10)), ts), "upsert")
            # the service sees the commits but the table is another instance's: nothing is run
            wait_for(lambda: service.metrics.runs.labels("retry")._value.get() >= 2, what="refused runs")
            assert completed_compactions(path) == [] and "app.orders" in service.events.pending
            client.release_lock("app.orders", other.lock_id)
            wait_for(lambda: completed_compactions(path), what="the compaction after the release")
            assert read_inlet(path) == model.rows == read_hudi_rs(path, "1")
        finally:
            protocol.close()


def test_cli_serves_health_and_stops_on_sigterm(coordinator: RunningServer, kafka_bootstrap: str) -> None:
    env = {**os.environ, "INLET_TABLE_SERVICES_COORDINATOR": coordinator.address}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inlet.services.cli.main",
            "table-services",
            "run",
            "--kafka-bootstrap",
            kafka_bootstrap,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        serving = json.loads(line)
        assert serving["service"] == "table-services" and serving["services"] == [
            "compaction",
            "clean",
            "archive",
        ]
        with urllib.request.urlopen(f"http://{serving['metrics']}/healthz", timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["coordinator"] == coordinator.address
        with urllib.request.urlopen(f"http://{serving['metrics']}/metrics", timeout=10) as resp:
            assert b"inlet_table_services_runs_total" in resp.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
