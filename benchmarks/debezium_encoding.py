"""Bytes and CPU per change event for each way Debezium can hand events to the CDC consumer (issue #23).

    .venv/bin/python benchmarks/debezium_encoding.py [--changes 20000] [--variants all]

A script that prints a table (not a test). One embedded PostgreSQL and one Apache Kafka broker
(KRaft, as ``inlet stack up`` runs it); for
each variant a fresh Debezium connector (its own slot and topic prefix, no snapshot) streams the same
load: ``--changes`` changes on the 20-column table of ``benchmarks/replication.py`` (inserts, updates,
deletes 30/50/20 in transactions of 20 changes, as fast as one connection commits them). Measured:

- **bytes/event**: key + value bytes of the table's records as the consumer gets them (uncompressed),
  and the bytes the consumer fetched from the broker for them (librdkafka's ``rxbytes``: the batches
  as the producer compressed them, plus the fetch protocol's overhead);
- **Debezium ms CPU / 1,000 events**: the Connect JVM's CPU from the first commit until the topic
  holds every event (the JVM idles in between: its idle CPU is included);
- **broker ms CPU / 1,000 events**: Apache Kafka's over the same window;
- **decode µs CPU / event**: :class:`inlet.services.cdc_consumer.Decoder` on every record, in this
  process (JSON without schemas takes its column types from :class:`PostgresCatalog`, as ``inlet cdc run
  --database-url`` does; the catalog is read once per table, outside the loop);
- **PG commit -> topic**: seconds from the last commit until the topic held every event.

Avro is not measured: it needs a schema registry (Confluent's or Apicurio) and none runs on this
machine; the CDC consumer decodes Avro from recorded registry subjects only (benchmarks/cdc_consumer.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _procs
import psycopg
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from inlet.services.cdc_consumer import Decoder, PostgresCatalog
from inlet.services.stack import EmbeddedDebezium, EmbeddedKafka, EmbeddedPostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replication import COLUMNS_DDL, ROW_EXPR_PARAM

TABLE = "bench"
TX_SIZE = 20


@dataclass
class Variant:
    name: str
    schemas: bool
    worker: dict[str, str] = field(default_factory=dict)
    connector: dict[str, str] = field(default_factory=dict)
    jvm: tuple[str, ...] = ()


VARIANTS = {
    "schemas-lz4": Variant("JSON + schemas, lz4 (the old default)", True),
    "schemas-zstd": Variant("JSON + schemas, zstd", True, {"producer.compression.type": "zstd"}),
    "plain-none": Variant("JSON no schemas, uncompressed", False, {"producer.compression.type": "none"}),
    "plain-lz4": Variant("JSON no schemas, lz4", False),
    "plain-zstd": Variant("JSON no schemas, zstd", False, {"producer.compression.type": "zstd"}),
    "plain-snappy": Variant("JSON no schemas, snappy", False, {"producer.compression.type": "snappy"}),
    "plain-gzip": Variant("JSON no schemas, gzip", False, {"producer.compression.type": "gzip"}),
    "plain-lz4-c2": Variant(
        "JSON no schemas, lz4, JVM with C2 (-XX:TieredStopAtLevel=4)", False, jvm=("-XX:TieredStopAtLevel=4",)
    ),
    "schemas-lz4-poll100": Variant(
        "JSON + schemas, lz4, poll.interval.ms 100", True, {}, {"poll.interval.ms": "100"}
    ),
    "plain-lz4-tuned": Variant(
        "JSON no schemas, lz4, linger 20 ms, Debezium batches 8192 / queue 32768 / poll 100 ms",
        False,
        {"producer.linger.ms": "20"},
        {"max.batch.size": "8192", "max.queue.size": "32768", "poll.interval.ms": "100"},
    ),
}


def run_load(url: str, changes: int, first_id: int) -> tuple[float, int]:
    """Commit about ``changes`` changes (30% inserts, 50% updates, 20% deletes, after a first insert-only
    transaction); returns (the last commit's time, the records Debezium writes: a tombstone per delete)."""
    rng = random.Random(7)
    live: list[int] = []
    next_id = first_id
    done = deletes = 0
    seq = 0
    with psycopg.connect(url) as conn:
        while done < changes:
            seq += 1
            n_ins, n_upd, n_del = 6, 10, 4
            if len(live) < n_upd + n_del:
                n_ins, n_upd, n_del = TX_SIZE, 0, 0
            ins = list(range(next_id, next_id + n_ins))
            next_id += n_ins
            rng.shuffle(live)
            upd, dels = live[:n_upd], live[n_upd : n_upd + n_del]
            live = live[n_upd + n_del :]
            with conn.pipeline():
                conn.execute(
                    f"INSERT INTO {TABLE} SELECT i, %s, {ROW_EXPR_PARAM} FROM unnest(%s::bigint[]) AS i",
                    (seq, ins),
                )
                if upd:
                    conn.execute(
                        f"UPDATE {TABLE} SET seq = %s, score = random(), updated_at = now(), "
                        "qty = (qty + 1) %% 30000, version = version + 1, note = md5(random()::text) "
                        "WHERE id = ANY(%s)",
                        (seq, upd),
                    )
                if dels:
                    conn.execute(f"DELETE FROM {TABLE} WHERE id = ANY(%s)", (dels,))
                conn.commit()
            live += ins + upd
            done += n_ins + n_upd + n_del
            deletes += n_del
    return time.time(), done + deletes


class Reader:
    """Reads a topic from the start; counts records and bytes, and librdkafka's fetched bytes."""

    def __init__(self, bootstrap: str) -> None:
        self.rx = 0
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"enc-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "statistics.interval.ms": 200,
                "stats_cb": self._stats,
                "fetch.wait.max.ms": 50,
            }
        )

    def _stats(self, text: str) -> None:
        stats = json.loads(text)
        self.rx = sum(int(b.get("rxbytes", 0)) for b in stats.get("brokers", {}).values())

    def read(self, topic: str, want: int, timeout_s: float) -> tuple[list[Any], float]:
        """(messages, wire bytes) once ``want`` records are read (or timeout)."""
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[Any] = []
        rx0 = self.rx
        deadline = time.time() + timeout_s
        while len(out) < want and time.time() < deadline:
            for m in self.consumer.consume(2000, timeout=0.5):
                if m.error() is None:
                    out.append(m)
        time.sleep(0.5)
        self.consumer.poll(0.5)  # a last statistics callback
        return out, self.rx - rx0

    def close(self) -> None:
        self.consumer.close()


def wait_count(bootstrap: str, topic: str, want: int, timeout_s: float) -> float | None:
    """The time the topic first held ``want`` records (counted by reading), None on timeout."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cnt-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 20,
        }
    )
    n = 0
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline:
            try:
                c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                break
            except Exception:
                time.sleep(0.2)
        while n < want and time.time() < deadline:
            n += sum(1 for m in c.consume(5000, timeout=0.2) if m.error() is None)
        return time.time() if n >= want else None
    finally:
        c.close()


def paced_latency(url: str, bootstrap: str, topic: str, first_id: int, schemas: bool) -> list[float]:
    """Seconds from each COMMIT to its event on the topic, for 100 single-row inserts at 20/s (a quiet
    source: Debezium's own batching, not throughput, decides the wait)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    seen: dict[int, float] = {}
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            for m in consumer.consume(500, timeout=0.05):
                if m.error() is None and m.value():
                    doc = json.loads(m.value())
                    after = (doc["payload"] if schemas else doc).get("after") or {}
                    if after.get("seq", 0) < 0:
                        seen.setdefault(-after["seq"], time.time())

    consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
    consumer.consume(1, timeout=1.0)  # the assignment takes effect
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    committed: dict[int, float] = {}
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.monotonic()
            for i in range(1, 101):
                time.sleep(max(0.0, start + i / 20 - time.monotonic()))
                conn.execute(
                    f"INSERT INTO {TABLE} SELECT i, %s, {ROW_EXPR_PARAM} FROM unnest(%s::bigint[]) AS i",
                    (-i, [first_id + i]),
                )
                committed[i] = time.time()
        deadline = time.time() + 30
        while len(seen) < len(committed) and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        listener.join(5)
        consumer.close()
    return sorted(seen[i] - committed[i] for i in committed if i in seen)


def measure(
    variant: Variant,
    pg: EmbeddedPostgres,
    url: str,
    kafka: EmbeddedKafka,
    broker_pids: list[int],
    changes: int,
) -> dict[str, Any]:
    prefix = "enc" + uuid.uuid4().hex[:6]
    topic = f"{prefix}.public.{TABLE}"
    dbz = EmbeddedDebezium(
        url,
        kafka.bootstrap,
        prefix,
        table_include_list=[f"public.{TABLE}"],
        schemas_enable=variant.schemas,
        snapshot_mode="no_data",
        extra_config=variant.connector,
        worker_config=variant.worker,
        jvm_options=variant.jvm,
    )
    dbz.start()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            first_id = int(conn.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {TABLE}").fetchone()[0])  # type: ignore[index]
        time.sleep(2)  # let the JVM settle after start (JIT, topic creation) before counting its CPU
        assert dbz.pid is not None
        d0, b0 = _procs.tree_cpu([dbz.pid]), _procs.tree_cpu(broker_pids)
        started = time.time()
        last_commit, want = run_load(url, changes, first_id)
        load_s = last_commit - started
        full_at = wait_count(kafka.bootstrap, topic, want, timeout_s=600)
        d1, b1 = _procs.tree_cpu([dbz.pid]), _procs.tree_cpu(broker_pids)
        failed = dbz.status()
        latency = paced_latency(url, kafka.bootstrap, topic, first_id + 10 * changes, variant.schemas)
    finally:
        dbz.stop()
        dbz.drop_slot()
    reader = Reader(kafka.bootstrap)
    try:
        msgs, wire = reader.read(topic, want, timeout_s=120)
        msgs = msgs[:want]  # the paced latency inserts follow (their bytes stay in the wire count)
    finally:
        reader.close()
    raw = sum(len(m.key() or b"") + len(m.value() or b"") for m in msgs)
    catalog = PostgresCatalog(url) if not variant.schemas else None
    decoder = Decoder(catalog=catalog)
    data = [m for m in msgs if m.value()]
    decoder.decode(topic, 0, data[0].offset(), data[0].key(), data[0].value(), data[0].headers())  # the plan
    c0 = time.process_time()
    for m in data:
        decoder.decode(topic, 0, m.offset(), m.key(), m.value(), m.headers())
    decode_s = time.process_time() - c0
    if catalog is not None:
        catalog.close()
    n = len(msgs)
    return {
        "variant": variant.name,
        "events": n,
        "expected": want,
        "complete": full_at is not None,
        "status": failed.get("tasks", [{}])[0].get("state"),
        "value_bytes": sum(len(m.value() or b"") for m in data) / max(1, len(data)),
        "raw_bytes_per_event": raw / max(1, n),
        "wire_bytes_per_event": wire / max(1, n),
        "debezium_ms_per_1k": (d1 - d0) * 1e6 / max(1, n),
        "broker_ms_per_1k": (b1 - b0) * 1e6 / max(1, n),
        "decode_us_per_event": decode_s * 1e6 / max(1, len(data)),
        "load_s": load_s,
        "commit_to_topic_s": (full_at - last_commit) if full_at else None,
        "paced_latency_p50_s": latency[len(latency) // 2] if latency else None,
        "paced_latency_p99_s": latency[int(len(latency) * 0.99) - 1] if latency else None,
        "paced_latency_seen": len(latency),
        "window_s": (full_at or time.time()) - started,
    }


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--changes", type=int, default=20_000, help="changes per variant")
    p.add_argument("--variants", default="all", help=f"comma-separated: {', '.join(VARIANTS)} (default all)")
    p.add_argument("--json", type=Path, help="also write the results as JSON")
    args = p.parse_args(argv)
    names = list(VARIANTS) if args.variants == "all" else [v.strip() for v in args.variants.split(",")]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant {unknown[0]!r}: use {', '.join(VARIANTS)}")
    results = []
    load0 = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="inlet-enc-") as tmp,
        EmbeddedPostgres() as pg,
        EmbeddedKafka(data_dir=Path(tmp) / "kafka") as kafka,
    ):
        url = pg.create_database("enc")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {TABLE} ({COLUMNS_DDL})")
        broker = [pid for pid in (kafka.pid,) if pid]
        for name in names:
            print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
            try:
                r = measure(VARIANTS[name], pg, url, kafka, broker, args.changes)
            except Exception as e:  # e.g. a codec the broker refuses
                r = {"variant": VARIANTS[name].name, "error": f"{type(e).__name__}: {e}"[:300]}
            r["key"] = name
            print(json.dumps(r), file=sys.stderr, flush=True)
            results.append(r)
    load1 = os.getloadavg()
    print(f"# Debezium -> CDC consumer encodings ({args.changes:,} changes each, broker Apache Kafka)\n")
    print(
        "| variant | events | value B/event | key+value B/event | fetched B/event | Debezium ms CPU/1k "
        "| broker ms CPU/1k | decode µs CPU/event | load s | last commit -> topic s | 20 tx/s: commit -> topic p50 / p99 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['variant']} | ERROR {r['error']} |||||||||")
            continue
        c2t = r["commit_to_topic_s"]
        print(
            f"| {r['variant']} | {r['events']:,}{'' if r['complete'] else ' (incomplete)'} | "
            f"{r['value_bytes']:,.0f} | {r['raw_bytes_per_event']:,.0f} | {r['wire_bytes_per_event']:,.0f} | "
            f"{r['debezium_ms_per_1k']:,.0f} | {r['broker_ms_per_1k']:,.0f} | {r['decode_us_per_event']:,.1f} | "
            f"{r['load_s']:.1f} | {'-' if c2t is None else f'{c2t:.1f}'} | "
            f"{_s(r['paced_latency_p50_s'])} / {_s(r['paced_latency_p99_s'])} ({r['paced_latency_seen']}/100) |"
        )
    print(f"\nload average at start {load0[0]:.2f} {load0[1]:.2f}, at end {load1[0]:.2f} {load1[1]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
