"""The catalog sync service: commits through a real coordinator publish CommitEvents on a real broker (Apache Kafka);
the service follows them into a real Hive Metastore, coalesces bursts and rides out a metastore outage."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from catalog_sync_helpers import columns, metastore_database, partitions, table_params
from confluent_kafka import Producer

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.proto.events.v1 import events_pb2
from inlet.services.catalog_sync import MetastoreClient, sync_table
from inlet.services.catalog_sync.service import CatalogSyncService, ServiceConfig
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.stack import EmbeddedPostgres
from inlet.services.stack.kafka import TEST_CONSUMER_SETTINGS
from inlet.services.stack.metastore import EmbeddedMetastore

# a member that died unannounced (SIGKILL) holds its partitions for a full session timeout: a short
# session (the test broker allows 1 s and up) lets the next member take over in ~2 s
QUICK_GROUP = {"session.timeout.ms": 2000, "heartbeat.interval.ms": 500}


@pytest.fixture
def coordinator(events_coordinator: RunningServer) -> RunningServer:
    return events_coordinator


def rows(ids: list[int], city: str, ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [city] * len(ids),
            "ts": pa.array([ts] * len(ids), pa.int64()),
        }
    )


def wait_for(check: Callable[[], Any], timeout_s: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the metastore may be down or the table not there yet
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def test_service_follows_commits_and_survives_a_metastore_outage(
    tmp_path: Path,
    coordinator: RunningServer,
    kafka_bootstrap: str,
    kafka_topic: str,
    postgres_server: EmbeddedPostgres,
) -> None:
    catalog_db = metastore_database(postgres_server)
    hms = EmbeddedMetastore(tmp_path / "hms", database_url=catalog_db)
    hms.start()
    port = hms.port
    service: CatalogSyncService | None = None
    stop = threading.Event()
    thread: threading.Thread | None = None
    protocol: GrpcCommitProtocol | None = None
    try:
        path = tmp_path / "trips"
        HudiTable.create(str(path), name="trips", record_key="id", partition_by="city", ordering_field="ts")
        with CoordinatorClient(coordinator.address, timeout_s=30, retries=3) as client:
            client.register_table("sales.trips", str(path))
            protocol = GrpcCommitProtocol(client, "sales.trips", Storage(str(path)))
            table = HudiTable.open(str(path), commit_protocol=protocol)
            table.write(rows([1, 2], "sf", 1), "insert")

            config = ServiceConfig(
                bootstrap=kafka_bootstrap,
                metastore=hms.uri,
                topic=kafka_topic,
                group=f"catalog-{kafka_topic}",
                coalesce_s=1.0,
                retry_initial_s=0.5,
                retry_max_s=2.0,
                metastore_timeout_s=10.0,
                kafka={**TEST_CONSUMER_SETTINGS, **QUICK_GROUP},
            )
            service = CatalogSyncService(config)
            thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
            thread.start()

            def catalog() -> tuple[set[tuple[str, ...]], str | None]:
                with MetastoreClient(hms.uri, timeout_s=10) as c:
                    tbl = c.get_table("sales", "trips")
                    return set(partitions(c, "sales", "trips")), table_params(tbl).get(
                        "last_commit_time_sync"
                    )

            def latest() -> str:
                return HudiTable.open(str(path)).timeline.completed_writes()[-1].time

            # 1. the first commit registers the table (database from the table id "sales.trips")
            wait_for(lambda: catalog() == ({("sf",)}, latest()), what="the first sync")

            # 2. a burst of commits to one table: coalesced into fewer syncs than events
            syncs_before = service.sync_count
            for i, city in enumerate(["la", "nyc", "sf"]):
                table.write(rows([10 + i], city, 2), "upsert")
            wait_for(lambda: catalog() == ({("sf",), ("la",), ("nyc",)}, latest()), what="the burst")
            assert service.sync_count - syncs_before < 3

            # 3. the metastore goes down while commits keep coming
            hms.stop()
            table.write(rows([20], "sea", 3), "insert")
            table.write(None, "delete_partition", partitions=["la"])
            wait_for(lambda: not service.health()[0], what="the service to notice the outage")
            assert service.pending
            # ... and comes back on the same port with the same catalog database: nothing is skipped
            hms = EmbeddedMetastore(tmp_path / "hms", database_url=catalog_db, port=port)
            hms.start()
            wait_for(
                lambda: catalog() == ({("sf",), ("nyc",), ("sea",)}, latest()),
                timeout_s=90,
                what="catching up after the outage",
            )
            assert service.health()[0]
            failures = service.metrics.registry.get_sample_value(
                "inlet_catalog_syncs_total", {"result": "unavailable"}
            )
            assert failures is not None and failures >= 1

            # the catalog equals a fresh full sync of the table
            with MetastoreClient(hms.uri) as c:
                sync_table(str(path), c, database="fresh")
                ours, fresh = c.get_table("sales", "trips"), c.get_table("fresh", "trips")
                assert columns(ours.sd.cols) == columns(fresh.sd.cols)
                assert table_params(ours) == table_params(fresh)
                assert partitions(c, "fresh", "trips") == partitions(c, "sales", "trips")
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=30)
        if protocol is not None:
            protocol.close()
        hms.stop()
    assert thread is not None and not thread.is_alive()


def test_catalog_run_cli_serves_metrics_and_health(
    tmp_path: Path, metastore: EmbeddedMetastore, kafka_bootstrap: str, kafka_topic: str
) -> None:
    path = tmp_path / "clitrips"
    t = HudiTable.create(
        str(path), name="clitrips", record_key="id", partition_by="city", ordering_field="ts"
    )
    res = t.write(rows([1], "sf", 1), "insert")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inlet.services.cli.main",
            "catalog",
            "run",
            "--kafka-bootstrap",
            kafka_bootstrap,
            "--metastore",
            metastore.uri,
            "--topic",
            kafka_topic,
            "--group",
            f"cli-{kafka_topic}",
            "--database",
            "cli_run",
            "--coalesce",
            "0.2",
            "--kafka-option",
            f"session.timeout.ms={QUICK_GROUP['session.timeout.ms']}",
            "--kafka-option",
            f"heartbeat.interval.ms={QUICK_GROUP['heartbeat.interval.ms']}",
            "--kafka-option",
            "fetch.wait.max.ms=100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        assert hello["event"] == "serving" and hello["service"] == "catalog-sync"
        metrics_url = f"http://{hello['metrics']}"
        event = events_pb2.CommitEvent(table_id="x.clitrips", base_path=str(path), table_type="COPY_ON_WRITE")
        event.instant.instant_time = res.instant_time
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(kafka_topic, key=b"x.clitrips", value=event.SerializeToString())
        producer.produce(kafka_topic, key=b"junk", value=b"\xff not a protobuf")
        producer.flush(10)

        def synced() -> bool:
            with MetastoreClient(metastore.uri, timeout_s=10) as c:
                tbl = c.get_table("cli_run", "clitrips")
                return table_params(tbl).get("last_commit_time_sync") == res.instant_time

        wait_for(synced, what="inlet catalog run to sync the table")
        with urllib.request.urlopen(f"{metrics_url}/healthz", timeout=10) as r:
            health = json.loads(r.read())
        assert health["status"] == "ok" and health["pending_tables"] == 0
        with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'inlet_catalog_syncs_total{result="ok"} 1.0' in text
        assert "inlet_catalog_bad_events_total 1.0" in text
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def _run_service(
    metastore: EmbeddedMetastore, kafka_bootstrap: str, topic: str, db: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inlet.services.cli.main",
            "catalog",
            "run",
            "--kafka-bootstrap",
            kafka_bootstrap,
            "--metastore",
            metastore.uri,
            "--topic",
            topic,
            "--group",
            f"kill-{topic}",
            "--database",
            db,
            "--coalesce",
            "0",
            "--metrics-listen",
            "",
            "--option",
            "hoodie.datasource.hive_sync.batch_num=1",  # one partition per call: a long sync
            "--kafka-option",
            f"session.timeout.ms={QUICK_GROUP['session.timeout.ms']}",
            "--kafka-option",
            f"heartbeat.interval.ms={QUICK_GROUP['heartbeat.interval.ms']}",
            "--kafka-option",
            "fetch.wait.max.ms=100",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_service_killed_mid_sync_resumes_from_the_unacknowledged_event(
    tmp_path: Path, metastore: EmbeddedMetastore, kafka_bootstrap: str, kafka_topic: str
) -> None:
    path = tmp_path / "many"
    t = HudiTable.create(str(path), name="many", record_key="id", partition_by="p", ordering_field="ts")
    n = 200
    res = t.write(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "p": [f"p{i:03d}" for i in range(n)],
                "ts": pa.array([1] * n, pa.int64()),
            }
        ),
        "insert",
    )
    event = events_pb2.CommitEvent(table_id="k.many", base_path=str(path), table_type="COPY_ON_WRITE")
    event.instant.instant_time = res.instant_time
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(kafka_topic, key=b"k.many", value=event.SerializeToString())
    producer.flush(10)

    def count() -> int:
        with MetastoreClient(metastore.uri, timeout_s=10) as c:
            return len(c.call("get_partition_names", "killed", "many", -1))

    proc = _run_service(metastore, kafka_bootstrap, kafka_topic, "killed")
    try:
        added = wait_for(lambda: count() >= 5, what="the sync to be under way")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        mid = count()
        assert added and mid < n, f"the sync finished ({mid} partitions) before the kill"
        with MetastoreClient(metastore.uri) as c:
            assert "last_commit_time_sync" not in table_params(c.get_table("killed", "many"))
        # a new service instance of the same group gets the event again (its offset was never committed)
        proc = _run_service(metastore, kafka_bootstrap, kafka_topic, "killed")
        wait_for(lambda: count() == n, timeout_s=120, what="the restarted service to finish the sync")

        def synced() -> bool:
            with MetastoreClient(metastore.uri, timeout_s=10) as c:
                return (
                    table_params(c.get_table("killed", "many")).get("last_commit_time_sync")
                    == res.instant_time
                )

        wait_for(synced, what="last_commit_time_sync")
        with MetastoreClient(metastore.uri) as c:
            sync_table(str(path), c, database="killed_fresh")
            ours, fresh = c.get_table("killed", "many"), c.get_table("killed_fresh", "many")
            assert table_params(ours) == table_params(fresh)
            assert partitions(c, "killed", "many") == partitions(c, "killed_fresh", "many")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
