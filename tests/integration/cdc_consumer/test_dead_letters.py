"""Records the decoder cannot read go, byte for byte, to the dead-letter topic; the stream goes on."""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import pytest
from cdc_helpers import (
    VENV_INLET,
    committed,
    make_config,
    metric_value,
    produce,
    read_all,
    recorded,
    running,
    unique_prefix,
    wait_for,
)
from confluent_kafka import KafkaError, Producer
from support.cli import run_inlet

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import service as service_module
from inlet.services.cdc_consumer.decode import Decoder
from inlet.services.stack import EmbeddedKafka

BUG_MARKER = b'{"trigger":"decoder bug"}'


class BuggyDecoder(Decoder):
    """The real decoder, plus a bug a real record cannot trigger: an unexpected exception on one marker."""

    def decode_encoded(  # what the service calls
        self, topic: str, partition: int, offset: int, key: Any, value: Any, headers: Any = None
    ) -> Any:
        if value == BUG_MARKER:
            raise RuntimeError("boom")
        return super().decode_encoded(topic, partition, offset, key, value, headers)


_inlet = run_inlet


def test_bad_records_go_to_the_dead_letters_with_their_reason(
    kafka_server: EmbeddedKafka, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = unique_prefix()
    topic = f"{prefix}.public.customers"
    kafka_server.create_topic(topic, partitions=1)
    recs = recorded(prefix)
    good = [r for r in recs if r.topic == topic and r.value is not None and r.key is not None]
    assert len(good) >= 6
    sample = good[2]  # an insert (op c)
    wrong = json.loads(sample.value or b"")
    wrong["payload"]["after"]["id"] = "abc"  # int32 column holding a string
    wrong_bytes = json.dumps(wrong, separators=(",", ":")).encode()
    truncated = (sample.value or b"")[: len(sample.value or b"") // 2]
    garbled = bytes(b ^ 0x5A for b in (sample.value or b"")[:64]) + (sample.value or b"")[64:]
    malformed = b'{"schema": {"type": "struct", '
    orig_headers = [("traceparent", b"00-abc-01"), ("source-app", b"debezium")]
    bad = [
        (topic, sample.key, malformed, orig_headers),
        (topic, sample.key, truncated),
        (topic, b"\xff\xfe not a key", garbled),
        (topic, sample.key, wrong_bytes),
        (topic, sample.key, BUG_MARKER),
    ]
    # good, bad, good, bad, ...: offsets 0,2,4,6,8,10 are good; 1,3,5,7,9 bad
    records: list[Any] = []
    for i, b in enumerate(bad):
        records.append(good[i])
        records.append(b)
    records.append(good[5])
    produce(kafka_server.bootstrap, records)

    config = make_config(kafka_server.bootstrap, prefix, topics=(topic,), topic_pattern=None)
    dlq = config.dlq_topic
    with running(config, decoder=BuggyDecoder(value_format="auto")) as service:
        both = read_all(kafka_server.bootstrap, [f"inlet.changes.{topic}", dlq], min_count=6 + 5)
        out = [o for o in both if o.topic != dlq]
        dead = [o for o in both if o.topic == dlq]
        import urllib.request

        metrics = (
            urllib.request.urlopen(f"http://{service.metrics_address}/metrics", timeout=5).read().decode()
        )

    # the good records around the bad ones still came out, in order
    assert sorted(o.source[2] for o in out) == [0, 2, 4, 6, 8, 10]
    for o in out:
        assert pb.ChangeRecord.FromString(o.value or b"").change.table_id == topic
    # one dead letter per bad record: the original key, value and headers, plus the reason
    assert len(dead) == 5
    by_offset = {int(d.headers["inlet-dlq-offset"]): d for d in dead}
    assert sorted(by_offset) == [1, 3, 5, 7, 9]
    for off, b in zip([1, 3, 5, 7, 9], bad, strict=True):
        d = by_offset[off]
        assert d.key == b[1] and d.value == b[2]
        assert d.headers["inlet-dlq-topic"] == topic.encode()
        assert d.headers["inlet-dlq-partition"] == b"0"
        assert int(d.headers["inlet-dlq-timestamp"]) > 1_600_000_000_000
        assert d.headers["inlet-dlq-reason"]
    assert by_offset[1].header_list[:2] == orig_headers  # the original headers first, unchanged
    assert b"not JSON" in by_offset[1].headers["inlet-dlq-reason"]
    assert b"not JSON" in by_offset[3].headers["inlet-dlq-reason"]
    assert b"not JSON" in by_offset[5].headers["inlet-dlq-reason"]
    assert b"expected int32" in by_offset[7].headers["inlet-dlq-reason"]
    assert by_offset[7].headers["inlet-dlq-error-class"] == b"DecodeError"
    assert by_offset[9].headers["inlet-dlq-error-class"] == b"RuntimeError"
    assert b"boom" in by_offset[9].headers["inlet-dlq-reason"]
    assert metric_value(metrics, "inlet_cdc_dead_letters_total", error_class="DecodeError") == 4
    assert metric_value(metrics, "inlet_cdc_dead_letters_total", error_class="RuntimeError") == 1

    # inlet dlq show lists them: text (the real executable), then JSON with the full original bytes
    # and a missing topic (the same CLI code, in this process)
    text = subprocess.run(
        [
            str(VENV_INLET),
            "dlq",
            "show",
            "--kafka-bootstrap",
            kafka_server.bootstrap,
            "--topic",
            dlq,
            "--idle-ms",
            "1000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 0, text.stderr
    assert "5 dead letters" in text.stdout
    assert f"{topic}[0]@7  DecodeError: column 'id': expected int32" in text.stdout
    assert '{\\"schema\\": {\\"type\\": \\"struct\\", ' in text.stdout  # the preview of the malformed value
    code, stdout, stderr = _inlet(
        capsys,
        "dlq",
        "show",
        "--kafka-bootstrap",
        kafka_server.bootstrap,
        "--topic",
        dlq,
        "--json",
        "--idle-ms",
        "1000",
        "--limit",
        "4",
        "--kafka-option",  # reaches the consumer (a secured cluster's settings go this way)
        "fetch.wait.max.ms=50",
    )
    assert code == 0, stderr
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert len(rows) == 4
    for row in rows:
        original = {1: bad[0], 3: bad[1], 5: bad[2], 7: bad[3], 9: bad[4]}[row["source_offset"]]
        assert base64.b64decode(row["value"]) == original[2]
        assert row["source_topic"] == topic and row["source_partition"] == 0
    code, _, stderr = _inlet(
        capsys, "dlq", "show", "--kafka-bootstrap", kafka_server.bootstrap, "--topic", dlq + ".none"
    )
    assert code == 1 and "no dead-letter topic" in stderr
    code, _, stderr = _inlet(
        capsys,
        "dlq",
        "show",
        "--kafka-bootstrap",
        kafka_server.bootstrap,
        "--kafka-option",
        "sasl.mechansim=PLAIN",
    )
    assert code == 2 and "--kafka-option" in stderr and "sasl.mechansim" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_an_output_the_producer_refuses_is_a_dead_letter_not_a_crash(kafka_server: EmbeddedKafka) -> None:
    """A change too large for ``message.max.bytes`` (librdkafka refuses it: MSG_SIZE_TOO_LARGE)
    sends its source record to the dead letters and the stream goes on, offsets past it."""
    prefix = unique_prefix()
    topic = f"{prefix}.public.customers"
    kafka_server.create_topic(topic, partitions=1)
    good = [r for r in recorded(prefix) if r.topic == topic and r.value is not None and r.key is not None]
    big = json.loads(good[2].value or b"")
    big["payload"]["after"]["bio"] = "x" * 300_000  # its output is ~300 kB: over the limit below
    big_bytes = json.dumps(big, separators=(",", ":")).encode()
    produce(kafka_server.bootstrap, [good[0], (topic, good[2].key, big_bytes), good[1]])

    config = make_config(
        kafka_server.bootstrap,
        prefix,
        topics=(topic,),
        topic_pattern=None,
        producer_options=["message.max.bytes=150000"],  # the other outputs are < 60 kB
    )
    dlq = config.dlq_topic
    with running(config) as service:
        both = read_all(kafka_server.bootstrap, [f"inlet.changes.{topic}", dlq], min_count=3)
        wait_for(lambda: committed(kafka_server.bootstrap, config.group, topic) == [3])
        ok, health = service.health()
    out = [o for o in both if o.topic != dlq]
    letters = [o for o in both if o.topic == dlq]
    [letter] = letters
    assert sorted(o.source[2] for o in out) == [0, 2]  # the records around it came out
    h = letter.headers
    assert (h["inlet-dlq-topic"], h["inlet-dlq-partition"], h["inlet-dlq-offset"]) == (
        topic.encode(),
        b"0",
        b"1",
    )
    assert h["inlet-dlq-error-class"] == b"ProduceError"
    assert (
        b"MSG_SIZE_TOO_LARGE" in h["inlet-dlq-reason"]
        and f"inlet.changes.{topic}".encode() in h["inlet-dlq-reason"]
    )
    # the source record is larger than the limit too: its letter names its size instead of holding it
    assert letter.value is None and int(h["inlet-dlq-value-bytes"]) == len(big_bytes)
    assert letter.key == good[2].key
    assert ok and "error" not in health


class RefusingProducer(Producer):
    """The real producer, whose delivery report for one marked output says what a broker enforcing
    ``max.message.bytes`` answers (RECORD_LIST_TOO_LARGE): Tansu enforces no size limit, so the
    refusal is injected; the record itself still travels the real broker."""

    MARKER = b"refuse-me"

    def produce(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> None:  # type: ignore[override]
        on_delivery = kw.get("on_delivery")
        if on_delivery is not None and topic.startswith("inlet.changes.") and self.MARKER in (value or b""):
            refusal = KafkaError(
                KafkaError.RECORD_LIST_TOO_LARGE,
                "Broker: Message batch larger than configured server segment size",
            )

            def refused(_err: Any, msg: Any) -> None:
                on_delivery(refusal, msg)

            kw["on_delivery"] = refused
        super().produce(topic, value, key, **kw)


def test_an_output_the_broker_refuses_sends_its_source_record_to_the_dead_letters(
    kafka_server: EmbeddedKafka, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = unique_prefix()
    topic = f"{prefix}.public.customers"
    kafka_server.create_topic(topic, partitions=1)
    good = [r for r in recorded(prefix) if r.topic == topic and r.value is not None and r.key is not None]
    marked = json.loads(good[2].value or b"")
    marked["payload"]["after"]["bio"] = RefusingProducer.MARKER.decode()
    marked_bytes = json.dumps(marked, separators=(",", ":")).encode()
    produce(
        kafka_server.bootstrap, [good[0], (topic, good[2].key, marked_bytes, [("trace", b"t1")]), good[1]]
    )
    monkeypatch.setattr(service_module, "Producer", RefusingProducer)

    config = make_config(kafka_server.bootstrap, prefix, topics=(topic,), topic_pattern=None)
    dlq = config.dlq_topic
    with running(config) as service:
        wait_for(lambda: committed(kafka_server.bootstrap, config.group, topic) == [3])
        [letter] = read_all(kafka_server.bootstrap, [dlq], min_count=1, idle_s=0.5)
        assert service.health()[0]
    # the source record, byte for byte with its headers, and the broker's reason
    assert letter.value == marked_bytes and letter.key == good[2].key
    assert letter.header_list[0] == ("trace", b"t1")
    h = letter.headers
    assert (h["inlet-dlq-topic"], h["inlet-dlq-offset"], h["inlet-dlq-error-class"]) == (
        topic.encode(),
        b"1",
        b"ProduceError",
    )
    assert b"RECORD_LIST_TOO_LARGE" in h["inlet-dlq-reason"]
