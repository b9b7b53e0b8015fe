"""``inlet dlq replay`` on a real broker: dead letters go back to their original topic and partition
with their original key, value and headers; filters choose them, --dry-run publishes nothing, and a
second replay publishes nothing twice (what was replayed is recorded in a topic)."""

from __future__ import annotations

import json
import time

import pytest
from cdc_helpers import unique_prefix
from support.cli import run_inlet

from inlet.services import dead_letters
from inlet.services.cli.dlq import read_dead_letters
from inlet.services.stack import EmbeddedKafka

IDLE = ("--idle-ms", "800")


def inlet(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict], str]:
    code, out, err = run_inlet(capsys, *args)
    return code, [json.loads(line) for line in out.splitlines()], err


def records(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None, dict[str, bytes]]]:
    """(partition, key, value, headers) of every record of ``topic``."""
    return sorted(
        (m.partition(), m.key(), m.value(), dict(m.headers() or []))
        for m in read_dead_letters(bootstrap, topic, idle_s=0.8, missing_ok=True)
    )


def test_replay_publishes_each_chosen_letter_once_to_its_origin(
    kafka_server: EmbeddedKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = kafka_server.bootstrap
    prefix = unique_prefix()
    orders, customers, dlq = f"{prefix}.public.orders", f"{prefix}.public.customers", f"{prefix}.dlq"
    kafka_server.create_topic(orders, partitions=2)
    kafka_server.create_topic(customers, partitions=1)
    sink = dead_letters.DeadLetterSink({"bootstrap.servers": bootstrap}, dlq)
    now_ms = int(time.time() * 1000)

    def letter(topic: str, partition: int, offset: int, value: bytes) -> tuple[bytes, bytes, list]:
        original = [("traceparent", b"t-" + value)]
        hdrs = dead_letters.headers(original, (topic, partition, offset), now_ms, "bad column", "DecodeError")
        return (b"k-" + value, value, hdrs)

    too_large = letter(orders, 0, 9, b"")
    sink.send(
        [
            letter(orders, 1, 5, b"o5"),  # dlq offset 0
            letter(orders, 1, 6, b"o6"),  # 1
            letter(customers, 0, 3, b"c3"),  # 2
            (too_large[0], None, dead_letters.without_value(too_large[2], 5_000_000)),  # 3
        ]
    )
    sink.close()
    via = ("--kafka-bootstrap", bootstrap, "--topic", dlq, *IDLE, "--json")

    # --dry-run: what would go, nothing published, nothing recorded
    code, out, err = inlet(capsys, "dlq", "replay", *via, "--source-topic", orders, "--dry-run")
    assert code == 0, err
    assert [(d["dlq_offset"], d["result"]) for d in out[:-1]] == [
        (0, "would replay"),
        (1, "would replay"),
        (3, "not replayable: sent without its value (too large); it is still at its source position"),
    ]
    assert records(bootstrap, orders) == [] and records(bootstrap, f"{dlq}.replayed") == []

    # an offset range: only the first letter, to its original partition, as it was
    code, out, err = inlet(capsys, "dlq", "replay", *via, "--source-topic", orders, "--to-offset", "0")
    assert code == 0, err
    assert [(d["dlq_offset"], d["result"], d["partition"]) for d in out[:-1]] == [(0, "replayed", 1)]
    assert records(bootstrap, orders) == [
        (1, b"k-o5", b"o5", {"traceparent": b"t-o5", "inlet-replayed-from": f"{dlq}/0/0".encode()})
    ]

    # a time range that excludes every letter replays nothing
    code, out, err = inlet(capsys, "dlq", "replay", *via, "--until", str(now_ms - 60_000))
    assert code == 0 and out[-1]["summary"]["replayed"] == 0 and out[-1]["summary"]["not_chosen"] == 4, out

    # no filter: the rest, never the first again; the letter without its value is reported
    code, out, err = inlet(capsys, "dlq", "replay", *via, "--since", str(now_ms - 60_000))
    assert code == 0, err
    assert [(d["dlq_offset"], d["result"].split(":")[0]) for d in out[:-1]] == [
        (0, "already replayed"),
        (1, "replayed"),
        (2, "replayed"),
        (3, "not replayable"),
    ]
    assert [r[1] for r in records(bootstrap, orders)] == [b"k-o5", b"k-o6"]
    assert [r[:3] for r in records(bootstrap, customers)] == [(0, b"k-c3", b"c3")]

    # a second replay publishes nothing twice
    code, out, err = inlet(capsys, "dlq", "replay", *via)
    assert code == 0, err
    assert out[-1]["summary"] == {
        "dry_run": False,
        "replayed_topic": f"{dlq}.replayed",
        "replayed": 0,
        "already_replayed": 3,
        "not_replayable": 1,
        "not_chosen": 0,
    }
    assert len(records(bootstrap, orders)) == 2 and len(records(bootstrap, customers)) == 1


def test_replay_bad_input_is_one_line(
    kafka_server: EmbeddedKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    via = ("--kafka-bootstrap", kafka_server.bootstrap, "--topic", unique_prefix() + ".dlq", *IDLE)
    code, _, err = inlet(
        capsys, "dlq", "replay", *via, "--since", "2024-05-01T11:00:00Z", "--until", "2024-05-01"
    )
    assert code == 2 and err.strip().splitlines() == ["inlet: error: --until must be later than --since"]
    code, _, err = inlet(capsys, "dlq", "replay", *via, "--since", "yesterday")
    assert code == 2 and "not a time: 'yesterday'" in err and len(err.strip().splitlines()) == 1
    code, _, err = inlet(capsys, "dlq", "replay", *via)
    assert code == 1 and err.strip().splitlines() == [
        f"inlet: error: no dead-letter topic {via[3]!r} on {kafka_server.bootstrap}"
    ]
