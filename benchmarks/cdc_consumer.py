"""CDC consumer throughput: Debezium events/s through ``inlet cdc run``'s loop vs parsing the same bytes alone.

    .venv/bin/python benchmarks/cdc_consumer.py [--events 30000] [--avro-events 30000]

What runs, on this machine, in one process (the broker is an Apache Kafka JVM subprocess, temporary data):

- ``parse floor``: ``orjson.loads`` of every value (JSON), ``fastavro.schemaless_reader`` of every body
  (Avro) -- the least any consumer must do with these bytes;
- ``decode only``: :class:`inlet.services.cdc_consumer.Decoder` on every record, no Kafka;
- ``service``: :class:`CdcConsumerService` consuming the pre-loaded topic and producing every change
  (acks=all) until the broker acknowledged the last one; events/s over wall time and per CPU second
  of this process (librdkafka's threads included, the broker's excluded).

JSON events: Debezium JsonConverter with schemas, a 20-column table (ints, bigints, text, numeric,
double, boolean, date, timestamp, timestamptz, jsonb, uuid, text[], smallint, real, bytea), inserts
and updates with the real Debezium 3.6 envelope and source block; the same events again as
``schemas.enable=false`` writes them (payloads only), the column types from an in-memory copy of
the source catalog (what ``PostgresCatalog`` reads, once per table). Avro events: the real recorded
Confluent Avro records of ``../shared/testdata/debezium`` (an 8-column table), cycled, with their
registry subjects served from memory.
"""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import json
import random
import resource
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro
import orjson
from confluent_kafka import Producer

from inlet.services.cdc_consumer.catalog import CatalogColumn
from inlet.services.cdc_consumer.decode import Decoder
from inlet.services.cdc_consumer.service import CdcConsumerService
from inlet.services.cdc_consumer.settings import CdcConfig
from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka

TESTDATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "testdata" / "debezium"
if not TESTDATA.is_dir():
    TESTDATA = Path("/work/shared/testdata/debezium")


# ---------------------------------------------------------------------- JSON events, 20 columns


def _f(field: str, type_: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "optional": optional, "field": field, **extra}


COLUMNS = [
    _f("id", "int32", False),
    _f("account_id", "int64"),
    _f("name", "string", False),
    _f("email", "string"),
    _f("city", "string"),
    _f("country", "string"),
    _f(
        "balance",
        "bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "2", "connect.decimal.precision": "12"},
    ),
    _f("score", "double"),
    _f("active", "boolean"),
    _f("born", "int32", name="io.debezium.time.Date", version=1),
    _f("created_at", "int64", name="io.debezium.time.MicroTimestamp", version=1),
    _f("updated_at", "string", name="io.debezium.time.ZonedTimestamp", version=1),
    _f("doc", "string", name="io.debezium.data.Json", version=1),
    _f("uid", "string", name="io.debezium.data.Uuid", version=1),
    {"type": "array", "items": {"type": "string", "optional": True}, "optional": True, "field": "tags"},
    _f("qty", "int16"),
    _f("ratio", "float"),
    _f("note", "string"),
    _f("version", "int64"),
    _f("photo", "bytes"),
]


def _row(i: int, rnd: random.Random) -> dict[str, Any]:
    cents = rnd.randint(-(10**9), 10**9)
    return {
        "id": i % 5000,
        "account_id": 10**12 + i,
        "name": f"customer {i}",
        "email": f"user{i}@example.com",
        "city": rnd.choice(["Berlin", "Lisbon", "Oslo", "Quito"]),
        "country": rnd.choice(["DE", "PT", "NO", "EC"]),
        "balance": base64.b64encode(
            cents.to_bytes(8, "big", signed=True).lstrip(b"\x00") or b"\x00"
        ).decode(),
        "score": rnd.random() * 100,
        "active": bool(i % 2),
        "born": 7000 + i % 9000,
        "created_at": 1_700_000_000_000_000 + i,
        "updated_at": "2024-01-02T01:04:05.1234Z",
        "doc": json.dumps({"n": i, "tags": ["a", "b"]}),
        "uid": str(uuid.UUID(int=i)),
        "tags": ["x", f"t{i % 7}"],
        "qty": i % 30000,
        "ratio": 0.5,
        "note": "lorem ipsum dolor sit amet" if i % 3 else None,
        "version": i,
        "photo": base64.b64encode(bytes([i % 256]) * 16).decode(),
    }


def json_events(n: int, prefix: str) -> tuple[str, list[tuple[bytes, bytes]]]:
    """``n`` (key, value) pairs of Debezium JSON-with-schema events for ``<prefix>.public.accounts``."""
    recorded = json.loads((TESTDATA / "real_schemas_true.jsonl").read_text().splitlines()[6])  # an insert
    envelope = recorded["value"]
    topic = f"{prefix}.public.accounts"
    row_schema = {"type": "struct", "fields": COLUMNS, "optional": True, "name": f"{topic}.Value"}
    schema = json.loads(json.dumps(envelope["schema"]))
    schema["name"] = f"{topic}.Envelope"
    schema["fields"] = [
        {**row_schema, "field": f["field"]} if f["field"] in ("before", "after") else f
        for f in schema["fields"]
    ]
    key_schema = {
        "type": "struct",
        "fields": [_f("id", "int32", False)],
        "optional": False,
        "name": f"{topic}.Key",
    }
    source = dict(envelope["payload"]["source"], name=prefix, table="accounts", snapshot="false")
    rnd = random.Random(7)
    out = []
    for i in range(n):
        after = _row(i, rnd)
        payload = {
            "before": None,
            "after": after,
            "source": dict(source, lsn=28_000_000 + i, txId=900 + i),
            "transaction": None,
            "op": "c" if i < 5000 else "u",
            "ts_ms": 1_795_237_810_240,
            "ts_us": 1_795_237_810_240_295,
            "ts_ns": 1_795_237_810_240_295_849,
        }
        key = orjson.dumps({"schema": key_schema, "payload": {"id": after["id"]}})
        out.append((key, orjson.dumps({"schema": schema, "payload": payload})))
    return topic, out


# ---------------------------------------------------------------------- JSON without schemas


#: the source catalog of the 20 columns above, as PostgresCatalog reads it (typname, typmod, NOT NULL)
CATALOG_COLUMNS = [
    CatalogColumn("id", "int4", -1, True),
    CatalogColumn("account_id", "int8", -1, False),
    CatalogColumn("name", "text", -1, True),
    CatalogColumn("email", "text", -1, False),
    CatalogColumn("city", "text", -1, False),
    CatalogColumn("country", "text", -1, False),
    CatalogColumn("balance", "numeric", ((12 << 16) | 2) + 4, False),
    CatalogColumn("score", "float8", -1, False),
    CatalogColumn("active", "bool", -1, False),
    CatalogColumn("born", "date", -1, False),
    CatalogColumn("created_at", "timestamp", -1, False),
    CatalogColumn("updated_at", "timestamptz", -1, False),
    CatalogColumn("doc", "jsonb", -1, False),
    CatalogColumn("uid", "uuid", -1, False),
    CatalogColumn("tags", "_text", -1, False, element_type="text"),
    CatalogColumn("qty", "int2", -1, False),
    CatalogColumn("ratio", "float4", -1, False),
    CatalogColumn("note", "text", -1, False),
    CatalogColumn("version", "int8", -1, False),
    CatalogColumn("photo", "bytea", -1, False),
]


class MemoryCatalog:
    """The source catalog of ``accounts``, served from memory (``columns`` like PostgresCatalog)."""

    COLUMNS = {c.name: c for c in CATALOG_COLUMNS}

    def columns(self, schema: str, table: str, refresh: bool = False) -> dict[str, CatalogColumn]:
        return self.COLUMNS


def schemaless(pairs: list[tuple[bytes, bytes]]) -> list[tuple[bytes | None, bytes]]:
    """The same events as JsonConverter writes them with ``schemas.enable=false``: payloads only."""
    return [
        (orjson.dumps(orjson.loads(k)["payload"]), orjson.dumps(orjson.loads(v)["payload"])) for k, v in pairs
    ]


# ---------------------------------------------------------------------- Avro events (recorded)


class MemoryRegistry:
    """The recorded registry subjects, served from memory (``get_schema`` like SchemaRegistryClient)."""

    def __init__(self) -> None:
        from confluent_kafka.schema_registry import Schema

        subjects = json.loads((TESTDATA / "avro_registry_subjects.json").read_text())
        self._by_id = {
            v["id"]: Schema(json.dumps(v["schema"]), "AVRO")
            for versions in subjects.values()
            for v in versions
        }

    def get_schema(self, schema_id: int) -> Any:
        return self._by_id[schema_id]


def avro_events(n: int, prefix: str) -> tuple[str, list[tuple[bytes | None, bytes]]]:
    recs = [json.loads(line) for line in (TESTDATA / "avro_records_hex.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r.get("value_hex") and r["topic"].startswith("dbserver1.public.")]
    topic = recs[0]["topic"].replace("dbserver1", prefix, 1)
    pairs = [
        (bytes.fromhex(r["key_hex"]) if r.get("key_hex") else None, bytes.fromhex(r["value_hex"]))
        for r in recs
        if r["topic"] == recs[0]["topic"]
    ]
    return topic, list(itertools.islice(itertools.cycle(pairs), n))


# ---------------------------------------------------------------------- measurements


def floor_json(values: list[bytes]) -> float:
    """Events/s per CPU second of orjson.loads alone."""
    c0 = time.process_time()
    for v in values:
        orjson.loads(v)
    return len(values) / (time.process_time() - c0)


def floor_avro(values: list[bytes], registry: MemoryRegistry) -> float:
    schema_id = int.from_bytes(values[0][1:5], "big")
    parsed = fastavro.parse_schema(json.loads(registry.get_schema(schema_id).schema_str))
    c0 = time.process_time()
    for v in values:
        fastavro.schemaless_reader(io.BytesIO(v[5:]), parsed, None)
    return len(values) / (time.process_time() - c0)


def decode_only(decoder: Decoder, topic: str, pairs: list[tuple[bytes | None, bytes]]) -> tuple[float, float]:
    """(events/s wall, events/s per CPU second) of the decoder alone."""
    decoder.decode(topic, 0, 0, pairs[0][0], pairs[0][1])  # plan built outside the timing
    t0, c0 = time.perf_counter(), time.process_time()
    for i, (k, v) in enumerate(pairs):
        decoder.decode(topic, 0, i, k, v)
    return len(pairs) / (time.perf_counter() - t0), len(pairs) / (time.process_time() - c0)


def load(bootstrap: str, topic: str, pairs: list[tuple[bytes | None, bytes]]) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "acks": "all",
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i, (k, v) in enumerate(pairs):
        while True:
            try:
                p.produce(topic, v, k, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def through_service(
    kafka: EmbeddedKafka, topic: str, pairs: list[tuple[bytes | None, bytes]], decoder: Decoder
) -> tuple[float, float, float]:
    """(events/s wall, events/s per CPU second, seconds) through the service loop."""
    kafka.create_topic(topic, partitions=1)
    load(kafka.bootstrap, topic, pairs)
    n = len(pairs)
    config = CdcConfig.from_settings(
        {
            "bootstrap": kafka.bootstrap,
            "topics": (topic,),
            "group": "bench-" + uuid.uuid4().hex[:8],
            "dlq_topic": "bench.dlq",
            "metrics_listen": "127.0.0.1:0",
            "consumer_options": [f"{k}={v}" for k, v in TEST_CONSUMER_SETTINGS.items()],
        }
    )
    service = CdcConsumerService(config, decoder=decoder)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    counter = service.metrics.events_in.labels(topic)
    t_first = cpu_first = None
    while True:
        got = counter._value.get()
        now = time.perf_counter()
        if t_first is None and got > 0:
            t_first, cpu_first, first_count = now, _cpu(), got
        if got >= n and service.metrics.pending._value.get() == 0:
            break
        time.sleep(0.005)
    wall, cpu = now - t_first, _cpu() - cpu_first  # type: ignore[operator]
    stop.set()
    thread.join(60)
    done = n - first_count
    return done / wall, done / cpu, wall


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=30_000, help="JSON events (default 30000)")
    ap.add_argument("--avro-events", type=int, default=30_000, help="Avro events (default 30000; 0 = skip)")
    args = ap.parse_args(argv)
    rows: list[tuple[str, float, float | None, str]] = []  # name, per CPU second, wall, note
    with EmbeddedKafka() as kafka:
        prefix = "bench" + uuid.uuid4().hex[:6]
        topic, pairs = json_events(args.events, prefix)
        size = sum(len(v) for _, v in pairs) / len(pairs)
        floor = floor_json([v for _, v in pairs])
        rows.append(
            (f"JSON+schema, 20 columns ({size:,.0f} B/event): parse floor (orjson.loads)", floor, None, "")
        )
        dw, dc = decode_only(Decoder(), topic, pairs)
        rows.append(("  decode only (Decoder.decode, no Kafka)", dc, dw, ""))
        wall, per_cpu, secs = through_service(kafka, topic, pairs, Decoder())
        rows.append(("  service: Kafka in -> decode -> Kafka out, acks=all", per_cpu, wall, f"{secs:.2f} s"))
        json_service = per_cpu
        plain = schemaless(pairs)
        psize = sum(len(v) for _, v in plain) / len(plain)
        ptopic = topic + "_plain"
        rows.append(
            (
                f"JSON no schemas, same events ({psize:,.0f} B/event): parse floor (orjson.loads)",
                floor_json([v for _, v in plain]),
                None,
                "",
            )
        )
        dw, dc = decode_only(Decoder(catalog=MemoryCatalog()), ptopic, plain)
        rows.append(("  decode only (column types from the catalog)", dc, dw, ""))
        wall, per_cpu, secs = through_service(kafka, ptopic, plain, Decoder(catalog=MemoryCatalog()))
        rows.append(("  service: Kafka in -> decode -> Kafka out, acks=all", per_cpu, wall, f"{secs:.2f} s"))
        if args.avro_events:
            registry = MemoryRegistry()
            atopic, apairs = avro_events(args.avro_events, prefix)
            asize = sum(len(v) for _, v in apairs) / len(apairs)
            rows.append(
                (
                    f"Avro (recorded, 8 columns, {asize:,.0f} B/event): parse floor (fastavro)",
                    floor_avro([v for _, v in apairs], registry),
                    None,
                    "",
                )
            )
            dw, dc = decode_only(Decoder(schema_registry=registry), atopic, apairs)
            rows.append(("  decode only", dc, dw, ""))
            wall, per_cpu, secs = through_service(kafka, atopic, apairs, Decoder(schema_registry=registry))
            rows.append(("  service", per_cpu, wall, f"{secs:.2f} s"))
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}  {'ev/s/CPU-s':>10}  {'ev/s wall':>10}  note")
    for name, rate, wall_rate, note in rows:
        shown = f"{wall_rate:>10,.0f}" if wall_rate is not None else f"{'':>10}"
        print(f"{name:<{width}}  {rate:>10,.0f}  {shown}  {note}")
    print(
        f"\nJSON: the service needs {floor / json_service:.1f}x the CPU of the orjson parse floor per event "
        f"(target <= 3x); {json_service:,.0f} events per CPU second (target >= 20,000)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
