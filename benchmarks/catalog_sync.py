"""Benchmark of catalog sync into a real Hive Metastore (the embedded one: Hive 2.3, Derby, one JVM).

Run ``.venv/bin/python benchmarks/catalog_sync.py --help``.

1. Sync cost for a Copy-on-Write table with ``--partitions`` partitions (default 1,000), one file each:
   - ``first``: the first sync (creates the table, adds every partition);
   - ``full``: a later sync with ``hoodie.meta.sync.incremental=false`` after one commit that touched one old
     and one new partition (lists every partition on storage and in the metastore);
   - ``incremental``: the same change synced incrementally (only the commit's partitions are looked up).
   Each of ``full`` and ``incremental`` runs ``--repeat`` times on fresh changes; medians are reported with
   the metastore calls of one run.
2. Latency from commit to catalog with the service: an in-process ``CatalogSyncService`` (``--coalesce``)
   follows ``inlet.commits`` on an embedded Apache Kafka broker; each of ``--commits`` commits (one row, local commit
   protocol) is announced with a ``CommitEvent`` right after it completes, and the latency is the time until
   the metastore's ``last_commit_time_sync`` names it.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.services.catalog_sync import MetastoreClient, sync_table
from inlet.services.stack.kafka import TEST_CONSUMER_SETTINGS, EmbeddedKafka
from inlet.services.stack.metastore import EmbeddedMetastore
from inlet.services.stack.postgres import EmbeddedPostgres


def _rows(ids: list[int], parts: list[str], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "p": parts,
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": [1.0] * len(ids),
        }
    )


def _timed_sync(path: Path, client: MetastoreClient, db: str, **options: str) -> tuple[float, dict[str, int]]:
    client.reset_counts()
    start = time.perf_counter()
    report = sync_table(str(path), client, database=db, options=options)
    return time.perf_counter() - start, report.metastore_calls


def sync_cost(root: Path, hms: EmbeddedMetastore, partitions: int, repeat: int) -> dict[str, Any]:
    path = root / "wide"
    t = HudiTable.create(str(path), name="wide", record_key="id", partition_by="p", ordering_field="ts")
    t0 = time.perf_counter()
    t.write(_rows(list(range(partitions)), [f"p{i:05d}" for i in range(partitions)], 1), "insert")
    load_s = time.perf_counter() - t0
    out: dict[str, Any] = {"partitions": partitions, "load_s": round(load_s, 2)}
    with MetastoreClient(hms.uri, timeout_s=600) as c:
        first, calls = _timed_sync(path, c, "bench")
        out["first"] = {"seconds": round(first, 3), "calls": calls}
        for kind in ("incremental", "full"):
            times = []
            calls = {}
            for r in range(repeat):
                new_id = partitions + (r + 1) * (1 if kind == "incremental" else 1000)
                t.write(_rows([r, new_id], [f"p{r:05d}", f"n{kind}{r:03d}"], 2 + r), "upsert")
                options = {} if kind == "incremental" else {"hoodie.meta.sync.incremental": "false"}
                seconds, calls = _timed_sync(path, c, "bench", **options)
                times.append(seconds)
            out[kind] = {"median_s": round(statistics.median(times), 3), "runs": len(times), "calls": calls}
    out["full_over_incremental"] = round(out["full"]["median_s"] / out["incremental"]["median_s"], 1)
    return out


def latency(root: Path, hms: EmbeddedMetastore, commits: int, coalesce: float) -> dict[str, Any]:
    from confluent_kafka import Producer
    from google.protobuf.timestamp_pb2 import Timestamp

    from inlet.proto.events.v1 import events_pb2
    from inlet.services.catalog_sync.service import CatalogSyncService, ServiceConfig

    path = root / "fresh"
    t = HudiTable.create(str(path), name="fresh", record_key="id", partition_by="p", ordering_field="ts")
    with EmbeddedKafka() as kafka:
        kafka.create_topic("inlet.commits", partitions=1)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 0})
        service = CatalogSyncService(
            ServiceConfig(
                bootstrap=kafka.bootstrap,
                metastore=hms.uri,
                group="bench",
                coalesce_s=coalesce,
                kafka=dict(TEST_CONSUMER_SETTINGS),
            )
        )
        stop = threading.Event()
        thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
        thread.start()
        samples = []
        try:
            with MetastoreClient(hms.uri) as c:
                for i in range(commits):
                    res = t.write(_rows([i], [f"p{i % 4}"], i), "upsert")
                    done = time.perf_counter()
                    ts = Timestamp()
                    ts.GetCurrentTime()
                    event = events_pb2.CommitEvent(
                        event_id=f"bench.fresh/{res.instant_time}",
                        table_id="bench.fresh",
                        table_name="fresh",
                        base_path=str(path),
                        table_type="COPY_ON_WRITE",
                        sequence=i + 1,
                        committed_at=ts,
                    )
                    event.instant.instant_time = res.instant_time
                    event.instant.completion_time = res.completion_time or ""
                    producer.produce("inlet.commits", key=b"bench.fresh", value=event.SerializeToString())
                    producer.flush(10)
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline:
                        try:
                            tbl = c.get_table("bench", "fresh")
                            if (tbl.parameters or {}).get("last_commit_time_sync") == res.instant_time:
                                break
                        except Exception:
                            pass
                        time.sleep(0.02)
                    samples.append(time.perf_counter() - done)
        finally:
            stop.set()
            thread.join(timeout=30)
            producer.flush(5)
            del producer  # before the broker stops: no reconnect noise
    samples.sort()
    return {
        "commits": commits,
        "coalesce_s": coalesce,
        "p50_s": round(statistics.median(samples), 3),
        "max_s": round(samples[-1], 3),
        "first_s": round(samples[0], 3) if samples else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument(
        "--coalesce", type=float, default=0.0, help="service coalescing window for the latency run"
    )
    args = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="inlet-bench-catalog-") as tmp,
        EmbeddedPostgres() as pg,  # the metastore's catalog
        EmbeddedMetastore(Path(tmp) / "hms", database_url=pg.url("metastore")) as hms,
    ):
        root = Path(tmp)
        result = {
            "sync_cost": sync_cost(root, hms, args.partitions, args.repeat),
            "commit_to_catalog": latency(root, hms, args.commits, args.coalesce),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
