"""One writer at a time on an OCC table: each batch holds the coordinator's ``writer`` lease of its
table (and completes under its fencing token); NBCC tables take several writers and no lease."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from writer_helpers import Source, produce, read_rows, wait_for

from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.writer.service import WRITER_LOCK

COLS = ["id", "name", "note", "amount"]


def _path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_occ_batches_wait_for_the_writer_lease_nbcc_ones_do_not(
    start_writer, kafka_server, kafka_bootstrap, coordinator, lake, prefix, tmp_path, table_type
):
    src = Source(prefix, table="leased")
    kafka_server.create_topic(src.topic, partitions=1)
    cfg = tmp_path / "tables.json"
    index = "simple" if table_type == "COPY_ON_WRITE" else "bucket"  # MOR + bucket = NBCC
    cfg.write_text(f'[{{"match": "{prefix}.*", "table_type": "{table_type}", "index": "{index}"}}]')
    produce(kafka_bootstrap, src.topic, [src.insert(id=i, name="a", note="x", amount=i) for i in range(3)])
    started = time.time()
    w = start_writer(table_config=str(cfg), lease_wait_ms=200)
    path = _path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="first batch")
    # when the table last committed (what a stalled-table alert compares with now)
    last = w.writer.metrics.registry.get_sample_value(
        "inlet_writer_last_commit_timestamp_seconds", {"table": src.table_id}
    )
    assert last is not None and started <= last <= time.time()

    client = CoordinatorClient(coordinator.address)
    try:  # another worker holds the table's writer lease
        other = client.acquire_lock(src.table_id, "other-worker", lease_ms=60_000, lock_name=WRITER_LOCK)

        def tries_refused() -> float:
            labels = {"table": src.table_id}
            return w.writer.metrics.registry.get_sample_value("inlet_writer_retries_total", labels) or 0.0

        refused_before = tries_refused()
        before = src.expected(COLS)
        produce(
            kafka_bootstrap, src.topic, [src.insert(id=i, name="b", note="y", amount=i) for i in range(3, 6)]
        )
        if table_type == "MERGE_ON_READ":  # NBCC: writers do not exclude each other
            wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="NBCC batch")
            return
        # several tries of the batch, each refused the lease
        wait_for(lambda: tries_refused() >= refused_before + 3, what="three refused tries")
        assert read_rows(path, COLS, ["id"]) == before, "an OCC batch was written without the lease"
        client.release_lock(src.table_id, other.lock_id)
        wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="batch after release")
        # the writer released its lease after the batch: the other worker gets it at once
        again = client.acquire_lock(src.table_id, "other-worker", wait_ms=5_000, lock_name=WRITER_LOCK)
        assert again.fencing_token > other.fencing_token
    finally:
        client.close()
