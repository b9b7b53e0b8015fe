"""``inlet dlq replay``: publish dead letters again to the topic they came from, once the cause is fixed.

Each chosen dead letter goes back to its original topic and partition (``inlet-dlq-topic`` /
``inlet-dlq-partition``) with its original key, value and headers (the ``inlet-dlq-*`` ones
removed, ``inlet-replayed-from: <dlq topic>/<partition>/<offset>`` added), so the CDC consumer or
the writer reads it like any new record. A letter sent without its value (too large for the
dead-letter topic) cannot be replayed from here and is reported.

What was replayed is recorded in a topic of its own (``--replayed-topic``, default
``<dead-letter topic>.replayed``): one record per replayed letter, keyed by its position, written
once the broker took the replayed record. A later replay skips what is recorded there, whatever its
filters, so replaying twice does not publish a record twice (a crash between the two writes
replays that one record again at the next run: at least once, never lost).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from inlet.services.cli.errors import EXIT_OK, CliError, UsageError
from inlet.services.cli.options import int_at_least

H_REPLAYED_FROM = "inlet-replayed-from"
DLQ_HEADER_PREFIX = "inlet-dlq-"

DESCRIPTION = """\
Publish dead letters again to the topic and partition they came from (original key, value and
headers), after the cause is fixed: a schema or table change, a bug fixed in a new release.
Choose them with --source-topic, --since/--until (when they were dead-lettered) and
--from-offset/--to-offset (their offsets in the dead-letter topic); --dry-run lists what would go.

Each replayed letter is recorded in --replayed-topic once the broker took it; later replays skip
it, so running the same replay twice publishes nothing twice. A letter without its value (it was
too large for the dead-letter topic) is listed as not replayable: it is still in its original
topic at the position shown while that topic's retention keeps it.
"""
EPILOG = """\
examples:
  inlet dlq replay --kafka-bootstrap kafka:9092 --source-topic app.public.orders --dry-run
  inlet dlq replay --kafka-bootstrap kafka:9092 --since 2024-05-01T10:00:00Z --until 2024-05-01T11:00:00Z
"""


def _time_ms(text: str) -> int:
    """An ISO 8601 time (UTC unless it names its offset) or Unix milliseconds."""
    if text.isdigit():
        return int(text)
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601 like 2024-05-01T10:00:00Z, or Unix milliseconds)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)


def add_replay_command(sub: Any, formatter: Any, add_kafka_options: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="publish dead letters again to their original topic",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=formatter,
    )
    add_kafka_options(p)
    p.add_argument(
        "--replayed-topic",
        metavar="TOPIC",
        help="where replayed letters are recorded (default: <dead-letter topic>.replayed)",
    )
    p.add_argument(
        "--source-topic",
        action="append",
        metavar="TOPIC",
        help="only letters that came from this topic (repeatable)",
    )
    p.add_argument(
        "--since", type=_time_ms, metavar="TIME", help="only letters dead-lettered at or after TIME"
    )
    p.add_argument("--until", type=_time_ms, metavar="TIME", help="only letters dead-lettered before TIME")
    p.add_argument(
        "--from-offset",
        type=int_at_least(0),
        metavar="N",
        help="only letters at offset N or later in the dead-letter topic",
    )
    p.add_argument(
        "--to-offset",
        type=int_at_least(0),
        metavar="N",
        help="only letters at offset N or earlier in the dead-letter topic",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be replayed; publish nothing")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per letter considered, then a summary"
    )
    p.set_defaults(handler=cmd_replay)


@dataclass(frozen=True)
class Letter:
    dlq_partition: int
    dlq_offset: int
    timestamp_ms: int
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]  # the original record's
    value_left_out: bool

    @property
    def position(self) -> str:
        return f"{self.dlq_partition}/{self.dlq_offset}"


def letter_of(m: Any) -> Letter:
    raw = [(k, v or b"") for k, v in (m.headers() or [])]
    named = dict(raw)

    def num(name: str) -> int | None:
        try:
            return int(named[name])
        except (KeyError, ValueError):
            return None

    topic = named.get(DLQ_HEADER_PREFIX + "topic")
    return Letter(
        dlq_partition=m.partition() or 0,
        dlq_offset=m.offset() or 0,
        timestamp_ms=m.timestamp()[1],
        source_topic=topic.decode("utf-8", "replace") if topic else None,
        source_partition=num(DLQ_HEADER_PREFIX + "partition"),
        source_offset=num(DLQ_HEADER_PREFIX + "offset"),
        key=m.key(),
        value=m.value(),
        headers=[(k, v) for k, v in raw if not k.startswith(DLQ_HEADER_PREFIX)],
        value_left_out=DLQ_HEADER_PREFIX + "value-bytes" in named,
    )


def chosen(letter: Letter, args: argparse.Namespace) -> bool:
    if args.source_topic and letter.source_topic not in args.source_topic:
        return False
    if args.since is not None and letter.timestamp_ms < args.since:
        return False
    if args.until is not None and letter.timestamp_ms >= args.until:
        return False
    if args.from_offset is not None and letter.dlq_offset < args.from_offset:
        return False
    return args.to_offset is None or letter.dlq_offset <= args.to_offset


def replayed_positions(
    bootstrap: str, topic: str, dlq_topic: str, idle_s: float, options: Mapping[str, str]
) -> set[str]:
    """The positions (``partition/offset`` of ``dlq_topic``) recorded in ``topic`` (none when absent)."""
    from inlet.services.cli.dlq import read_dead_letters

    done: set[str] = set()
    for m in read_dead_letters(bootstrap, topic, idle_s=idle_s, options=options, missing_ok=True):
        try:
            doc = json.loads(m.value() or b"{}")
        except ValueError:
            continue
        if doc.get("dlq_topic") == dlq_topic:
            done.add(f"{doc.get('dlq_partition')}/{doc.get('dlq_offset')}")
    return done


class Publisher:
    """Produces the replayed records and their entries in the replayed topic, waiting for each."""

    def __init__(self, bootstrap: str, options: Mapping[str, str], replayed_topic: str) -> None:
        from confluent_kafka import Producer

        from inlet.services.dead_letters import DeadLetterSink
        from inlet.services.kafka_topics import PRODUCER_SAFETY

        settings = {"bootstrap.servers": bootstrap, **options}
        self.producer = Producer({"linger.ms": 0, **settings, **PRODUCER_SAFETY})
        self.log = DeadLetterSink(settings, replayed_topic)  # creates the topic when it is missing
        self.partitions: dict[str, int] = {}

    def _partitions(self, topic: str) -> int:
        if topic not in self.partitions:
            meta = self.producer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise CliError(
                    f"the original topic {topic!r} does not exist (any more); nothing replayed from it"
                )
            self.partitions[topic] = len(meta.partitions)
        return self.partitions[topic]

    def replay(self, letter: Letter, dlq_topic: str, timeout_s: float = 30.0) -> tuple[int, int]:
        """Publish ``letter`` to its topic; returns its new (partition, offset) once acknowledged."""
        assert letter.source_topic is not None
        count = self._partitions(letter.source_topic)
        partition = letter.source_partition if letter.source_partition is not None else -1
        if partition >= count:
            partition = -1  # the topic has fewer partitions now: the partitioner picks by key
        origin = f"{dlq_topic}/{letter.position}".encode()
        result: dict[str, Any] = {}

        def delivered(err: Any, m: Any) -> None:
            result["err"], result["at"] = err, (m.partition(), m.offset())

        kwargs: dict[str, Any] = {"partition": partition} if partition >= 0 else {}
        self.producer.produce(
            letter.source_topic,
            value=letter.value,
            key=letter.key,
            headers=[*letter.headers, (H_REPLAYED_FROM, origin)],
            on_delivery=delivered,
            **kwargs,
        )
        self.producer.flush(timeout_s)
        if "err" not in result:
            raise CliError(
                f"Kafka did not acknowledge the replay of {dlq_topic} {letter.position} in {timeout_s:.0f} s"
            )
        if result["err"] is not None:
            raise CliError(
                f"replaying {dlq_topic} {letter.position} to {letter.source_topic} failed: {result['err']}"
            )
        at: tuple[int, int] = result["at"]
        entry = {
            "dlq_topic": dlq_topic,
            "dlq_partition": letter.dlq_partition,
            "dlq_offset": letter.dlq_offset,
            "topic": letter.source_topic,
            "partition": at[0],
            "offset": at[1],
            "replayed_at_ms": int(time.time() * 1000),
        }
        self.log.send([(f"{dlq_topic}/{letter.position}".encode(), json.dumps(entry).encode(), [])])
        return at

    def close(self) -> None:
        self.producer.flush(10)
        self.log.close()


def _letters(args: argparse.Namespace, bootstrap: str, options: Mapping[str, str]) -> Iterator[Any]:
    from inlet.services.cli.dlq import read_dead_letters

    yield from read_dead_letters(bootstrap, args.topic, idle_s=args.idle_ms / 1000.0, options=options)


def cmd_replay(args: argparse.Namespace) -> int:
    from inlet.services.cli.dlq import kafka_bootstrap, kafka_options

    bootstrap = kafka_bootstrap(args)
    if not bootstrap:
        raise UsageError("--kafka-bootstrap is required (or set INLET_CDC_KAFKA_BOOTSTRAP)")
    if args.since is not None and args.until is not None and args.until <= args.since:
        raise UsageError("--until must be later than --since")
    if args.from_offset is not None and args.to_offset is not None and args.to_offset < args.from_offset:
        raise UsageError("--to-offset must not be below --from-offset")
    options = kafka_options(args)
    replayed_topic = args.replayed_topic or f"{args.topic}.replayed"
    if replayed_topic == args.topic:
        raise UsageError("--replayed-topic must differ from the dead-letter topic")
    done = replayed_positions(bootstrap, replayed_topic, args.topic, args.idle_ms / 1000.0, options)
    counts = {"replayed": 0, "already_replayed": 0, "not_replayable": 0, "not_chosen": 0}
    publisher = None if args.dry_run else Publisher(bootstrap, options, replayed_topic)
    out = sys.stdout
    try:
        for m in _letters(args, bootstrap, options):
            letter = letter_of(m)
            if not chosen(letter, args):
                counts["not_chosen"] += 1
                continue
            doc: dict[str, Any] = {
                "dlq_partition": letter.dlq_partition,
                "dlq_offset": letter.dlq_offset,
                "source_topic": letter.source_topic,
                "source_partition": letter.source_partition,
                "source_offset": letter.source_offset,
            }
            if letter.position in done:
                doc["result"] = "already replayed"
                counts["already_replayed"] += 1
            elif letter.value_left_out or letter.source_topic is None:
                doc["result"] = (
                    "not replayable: sent without its value (too large); it is still at its source position"
                    if letter.value_left_out
                    else "not replayable: no inlet-dlq-topic header"
                )
                counts["not_replayable"] += 1
            elif publisher is None:
                doc["result"] = "would replay"
                counts["replayed"] += 1
            else:
                partition, offset = publisher.replay(letter, args.topic)
                doc.update(result="replayed", partition=partition, offset=offset)
                done.add(letter.position)
                counts["replayed"] += 1
            if args.json:
                out.write(json.dumps(doc) + "\n")
            else:
                src = f"{letter.source_topic}[{letter.source_partition}]@{letter.source_offset}"
                where = f" -> [{doc['partition']}]@{doc['offset']}" if "offset" in doc else ""
                out.write(f"{args.topic} {letter.position}  {src}  {doc['result']}{where}\n")
            out.flush()
    finally:
        if publisher is not None:
            publisher.close()
    summary = {"dry_run": bool(args.dry_run), "replayed_topic": replayed_topic, **counts}
    if args.json:
        out.write(json.dumps({"summary": summary}) + "\n")
    else:
        verb = "would replay" if args.dry_run else "replayed"
        out.write(
            f"{verb} {counts['replayed']}, already replayed {counts['already_replayed']}, "
            f"not replayable {counts['not_replayable']} (recorded in {replayed_topic})\n"
        )
    out.flush()
    return EXIT_OK
