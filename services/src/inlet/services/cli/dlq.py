"""``inlet dlq show``: list the dead letters of the CDC consumer and the writer (reason, where they
came from, a preview).

It reads the dead-letter topic from the beginning without a consumer group (nothing is committed) and
stops at its end: the partitions' reported ends (high watermarks) are reached and no record arrived
for ``--idle-ms`` after the last one (a letter written while it reads is shown too).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from inlet.services.cli.errors import CliError, UsageError
from inlet.services.cli.options import env, env_int, int_at_least, parse_key_values, with_env
from inlet.services.runtime import SettingsError, add_deprecated_alias, env_with_aliases, parse_pairs

DEFAULT_TOPIC = "inlet.dlq"
PREVIEW_BYTES = 120

DESCRIPTION = """\
List the dead letters, oldest first per partition -- the records the CDC consumer could not decode
or relay, and the writer's bad rows (its --dlq-topic is the same by default): the reason, the
error class, the source topic/partition/offset and timestamp, and a preview of the original value
(text when it is UTF-8, else hex). --json prints one object per dead letter with the full value
(base64) and every header.

The topic is read from the beginning and the command exits at its end (no record for --idle-ms).
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=34)


def add_dlq_commands(subparsers: Any) -> None:
    """Add ``dlq show`` and ``dlq replay`` to the ``inlet`` command's subparsers."""
    from inlet.services.cli.dlq_replay import add_replay_command

    p = subparsers.add_parser(
        "dlq",
        help="inspect and replay the dead-letter topic (the CDC consumer's and the writer's)",
        description="The dead letters of the CDC consumer and the writer.",
        formatter_class=_formatter,
    )
    sub = p.add_subparsers(dest="dlq_command", metavar="COMMAND", required=True)
    show = sub.add_parser(
        "show",
        help="list dead letters with their reason and source",
        description=DESCRIPTION,
        epilog="example:\n  inlet dlq show --kafka-bootstrap kafka:9092 --limit 20",
        formatter_class=_formatter,
    )
    add_kafka_arguments(show)
    show.add_argument("--limit", type=int_at_least(1), metavar="N", help="show at most N dead letters")
    show.add_argument(
        "--json", action="store_true", help="one JSON object per dead letter (full value, base64)"
    )
    show.set_defaults(handler=cmd_show)
    add_replay_command(sub, _formatter, add_kafka_arguments)


def add_kafka_arguments(p: argparse.ArgumentParser) -> None:
    """The options every ``dlq`` command shares: the cluster, the topic, its end, librdkafka settings."""
    p.add_argument(
        "--kafka-bootstrap",
        metavar="HOST:PORT",
        help=with_env(
            "Kafka bootstrap servers", "INLET_CDC_OUTPUT_KAFKA_BOOTSTRAP or INLET_CDC_KAFKA_BOOTSTRAP"
        ),
    )
    add_deprecated_alias(p, "--bootstrap", "--kafka-bootstrap", "kafka_bootstrap")
    p.add_argument(
        "--topic",
        default=env("INLET_CDC_DLQ_TOPIC", DEFAULT_TOPIC),
        metavar="TOPIC",
        help=with_env(f"dead-letter topic (default {DEFAULT_TOPIC})", "INLET_CDC_DLQ_TOPIC"),
    )
    p.add_argument(
        "--idle-ms",
        type=int_at_least(100),
        default=env_int("INLET_DLQ_IDLE_MS", minimum=100) or 2000,
        metavar="MS",
        help=with_env("the topic's end: no record for this long (default 2000)", "INLET_DLQ_IDLE_MS"),
    )
    p.add_argument(
        "--kafka-option",
        action="append",
        metavar="KEY=VALUE",
        help=with_env(
            "librdkafka setting of every Kafka client, e.g. security.protocol=SASL_SSL (repeatable; the "
            "variable takes one per line or a JSON object)",
            "INLET_DLQ_KAFKA_OPTIONS",
        ),
    )


def read_dead_letters(
    bootstrap: str,
    topic: str,
    *,
    limit: int | None = None,
    idle_s: float = 2.0,
    timeout_s: float = 10.0,
    options: Mapping[str, str] | None = None,
    missing_ok: bool = False,
) -> Iterator[Any]:
    """Yield the records of ``topic`` from the start until none arrives for ``idle_s``; ``options``:
    more librdkafka settings (security, for one). A missing topic is an error, or (``missing_ok``)
    a topic without records."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"inlet-dlq-show-{uuid.uuid4().hex}",  # never committed: assign(), no subscribe
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "enable.partition.eof": False,
                **(options or {}),
            }
        )
    except KafkaException as e:
        raise UsageError(f"--kafka-option: {e}") from None
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as e:
            raise CliError(f"cannot reach Kafka at {bootstrap}: {e}") from None
        if meta is None or meta.error is not None or not meta.partitions:
            if missing_ok:
                return
            raise CliError(f"no dead-letter topic {topic!r} on {bootstrap}")
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])  # offset 0 = the beginning
        shown = 0
        last = time.monotonic()
        while limit is None or shown < limit:
            msgs = consumer.consume(500, 0.2)
            if not msgs:
                if time.monotonic() - last >= idle_s:
                    return
                continue
            last = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    continue
                yield m
                shown += 1
                if limit is not None and shown >= limit:
                    return
    finally:
        consumer.close()


def _headers(m: Any) -> dict[str, bytes]:
    return {k: (v or b"") for k, v in (m.headers() or [])}


def _text(b: bytes | None) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


def preview(value: bytes | None, size: int = PREVIEW_BYTES) -> str:
    if value is None:
        return "<null>"
    head = value[:size]
    try:
        text = head.decode("utf-8")
        shown = json.dumps(text)[1:-1]  # escapes control characters, keeps one line
    except UnicodeDecodeError:
        shown = "hex:" + head.hex()
    return shown + (f"... ({len(value)} bytes)" if len(value) > size else "")


def describe(m: Any) -> dict[str, Any]:
    import base64

    h = _headers(m)

    def num(name: str) -> int | None:
        try:
            return int(h[name])
        except (KeyError, ValueError):
            return None

    return {
        "dlq_partition": m.partition(),
        "dlq_offset": m.offset(),
        "reason": _text(h.get("inlet-dlq-reason")),
        "error_class": _text(h.get("inlet-dlq-error-class")),
        "source_topic": _text(h.get("inlet-dlq-topic")),
        "source_partition": num("inlet-dlq-partition"),
        "source_offset": num("inlet-dlq-offset"),
        "source_timestamp_ms": num("inlet-dlq-timestamp"),
        "key": None if m.key() is None else base64.b64encode(m.key()).decode(),
        "value": None if m.value() is None else base64.b64encode(m.value()).decode(),
        "value_bytes": None if m.value() is None else len(m.value()),
        "headers": {k: base64.b64encode(v).decode() for k, v in (m.headers() or []) if v is not None},
    }


def kafka_bootstrap(args: argparse.Namespace) -> str | None:
    """``--kafka-bootstrap``, else the CDC consumer's output cluster, else its input cluster (the
    dead letters are where the CDC consumer writes them)."""
    return (
        args.kafka_bootstrap
        or env_with_aliases("INLET_CDC_OUTPUT_KAFKA_BOOTSTRAP", ("INLET_CDC_OUTPUT_BOOTSTRAP",))
        or env_with_aliases("INLET_CDC_KAFKA_BOOTSTRAP", ("INLET_CDC_BOOTSTRAP",))
    )


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka-option``s over ``INLET_DLQ_KAFKA_OPTIONS``: the librdkafka settings of every client."""
    try:
        from_env = parse_pairs(env("INLET_DLQ_KAFKA_OPTIONS") or "", "INLET_DLQ_KAFKA_OPTIONS")
    except SettingsError as e:
        raise UsageError(str(e)) from None
    return {
        **parse_key_values(from_env, "INLET_DLQ_KAFKA_OPTIONS"),
        **parse_key_values(args.kafka_option, "--kafka-option"),
    }


def cmd_show(args: argparse.Namespace) -> int:
    bootstrap = kafka_bootstrap(args)
    if not bootstrap:
        raise UsageError("--kafka-bootstrap is required (or set INLET_CDC_KAFKA_BOOTSTRAP)")
    out = sys.stdout
    count = 0
    options = kafka_options(args)
    idle_s = args.idle_ms / 1000.0
    for m in read_dead_letters(bootstrap, args.topic, limit=args.limit, idle_s=idle_s, options=options):
        d = describe(m)
        count += 1
        if args.json:
            out.write(json.dumps(d) + "\n")
            continue
        src = f"{d['source_topic']}[{d['source_partition']}]@{d['source_offset']}"
        out.write(f"{src}  {d['error_class']}: {d['reason']}\n    value: {preview(m.value())}\n")
    if not args.json:
        out.write(f"{count} dead letter{'s' if count != 1 else ''} in {args.topic}\n")
    out.flush()
    return 0
