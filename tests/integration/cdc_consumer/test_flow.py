"""The CDC consumer service on a real broker with real recorded Debezium bytes: what comes out where."""

from __future__ import annotations

import json
import urllib.request
from collections import defaultdict

import pytest
from cdc_helpers import (
    make_config,
    metric_value,
    produce,
    read_all,
    recorded,
    running,
    scrape,
    source_topics,
    topics_with_prefix,
    unique_prefix,
    wait_for,
)

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.stack import EmbeddedKafka


def _prepare(kafka: EmbeddedKafka, prefix: str) -> None:
    for t in source_topics(prefix):
        kafka.create_topic(t, partitions=1)


def test_every_change_reaches_its_table_topic_in_order(kafka_server: EmbeddedKafka) -> None:
    prefix = unique_prefix()
    _prepare(kafka_server, prefix)
    records = recorded(prefix)
    produce(kafka_server.bootstrap, records)
    # what the recording holds, by source (topic, offset)
    offsets: dict[str, int] = defaultdict(int)
    expected_changes: dict[tuple[str, int], tuple[str, str, int]] = {}  # source -> (table, key, op)
    tx_ends: dict[str, list[int]] = defaultdict(list)  # table -> source offsets of its ENDs
    nothing: list[tuple[str, int]] = []
    for r in records:
        off = offsets[r.topic]
        offsets[r.topic] += 1
        if r.value is None or r.topic.startswith("__debezium-heartbeat."):
            nothing.append((r.topic, off))
            continue
        v = json.loads(r.value)["payload"]
        if r.topic.endswith(".transaction"):
            if v["status"] == "END":
                for c in v["data_collections"]:
                    if c["data_collection"].startswith("io.debezium."):
                        continue  # Debezium's pseudo collection for a logical decoding message
                    tx_ends[f"{prefix}.{c['data_collection']}"].append(off)
            else:
                nothing.append((r.topic, off))
            continue
        if (v.get("op") in ("c", "u", "d", "r", "t") and r.key is not None) or v.get("op") == "t":
            key = "" if r.key is None else str(next(iter(json.loads(r.key)["payload"].values())))
            expected_changes[(r.topic, off)] = (
                f"{prefix}.{v['source']['schema']}.{v['source']['table']}",
                key,
                v["op"],
            )

    config = make_config(kafka_server.bootstrap, prefix)
    with running(config) as service:
        # events_nopk has no primary key: its changes are skipped (no catalog shows its REPLICA IDENTITY), so nothing (not even an END,
        # which goes only where its changes went) reaches a topic of its own
        out_topics = [f"inlet.changes.{prefix}.public.{t}" for t in ("customers", "orders")]
        # at least: each change once and each END once (a TRUNCATE and an END go to several partitions)
        expected_total = len(expected_changes) + sum(len(v) for v in tx_ends.values())
        out = read_all(kafka_server.bootstrap, out_topics, min_count=expected_total)
        address = service.metrics_address
        assert address is not None
        customers = f"{prefix}.public.customers"
        # consumer lag per partition: caught up
        wait_for(
            lambda: (
                metric_value(
                    scrape(address),
                    "inlet_kafka_consumer_lag_records",
                    consumer="cdc_consumer",
                    topic=customers,
                )
                == 0
            ),
            timeout_s=15,
        )
        metrics = scrape(address)
        health = urllib.request.urlopen(f"http://{service.metrics_address}/healthz", timeout=5)
        assert health.status == 200 and json.loads(health.read())["status"] == "ok"

    assert topics_with_prefix(kafka_server.bootstrap, f"inlet.changes.{prefix}.") == sorted(out_topics)
    changes = [o for o in out if o.headers["inlet-kind"] == b"change"]
    txs = [o for o in out if o.headers["inlet-kind"] == b"transaction"]

    # every data change, once, on its table's topic, keyed by record key
    non_truncate = {s: e for s, e in expected_changes.items() if e[2] != "t"}
    seen: dict[tuple[str, int], int] = defaultdict(int)
    for o in changes:
        rec = pb.ChangeRecord.FromString(o.value)
        src = o.source[0], o.source[2]
        assert rec.WhichOneof("record") == "change"
        assert o.topic == f"inlet.changes.{rec.change.table_id}"
        assert rec.change.source.kafka_offset == src[1]
        if rec.change.op == pb.OPERATION_TRUNCATE:
            assert "inlet-schema-version" not in o.headers  # a truncate carries no row schema
            continue
        assert o.headers["inlet-schema-version"] == rec.change.schema_version.encode() != b""
        table, key, _op = non_truncate[src]
        assert rec.change.table_id == table
        assert o.key == key.encode() == rec.change.record_key.encode()
        seen[src] += 1
    assert dict(seen) == dict.fromkeys(non_truncate, 1)
    # a TRUNCATE reaches every partition of its table
    truncates = [o for o in changes if pb.ChangeRecord.FromString(o.value).change.op == pb.OPERATION_TRUNCATE]
    # (to every partition its topic has. A known bug: a change topic whose first record is a change,
    # not a TRUNCATE, is auto-created by Apache Kafka with the broker's one partition instead of
    # --output-partitions; creating it before the first change broke the output-outage test, whose
    # broker comes back empty, and was backed out)
    parts = kafka_server.admin().list_topics(timeout=10).topics[truncates[0].topic].partitions
    assert sorted(o.partition for o in truncates) == sorted(parts)

    # per key: in source order, and all in one partition
    by_key: dict[tuple[str, bytes | None], list[tuple[int, int]]] = defaultdict(list)
    for o in sorted(changes, key=lambda o: (o.topic, o.partition, o.offset)):
        if o.key:
            by_key[(o.topic, o.key)].append((o.partition, o.source[2]))
    assert by_key[(out_topics[0], b"1")]  # customer 1 changed several times
    for (_t, _k), seq in by_key.items():
        assert len({p for p, _ in seq}) == 1
        assert [s for _, s in seq] == sorted(s for _, s in seq)

    # every transaction END reaches each partition holding changes of that transaction and table,
    # after them, with every such partition's count
    tx_changes: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    tx_truncates: dict[tuple[str, str], int] = defaultdict(int)  # one event, a copy in every partition
    for o in changes:
        ch = pb.ChangeRecord.FromString(o.value).change
        if ch.transaction.id:
            tx_changes[(ch.table_id, ch.transaction.id)][o.partition].append(o.offset)
            if ch.op == pb.OPERATION_TRUNCATE and o.partition == 0:
                tx_truncates[(ch.table_id, ch.transaction.id)] += 1
    got_tx: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for o in txs:
        rec = pb.ChangeRecord.FromString(o.value).transaction
        assert rec.status == pb.TransactionEvent.STATUS_END
        assert o.topic == f"inlet.changes.{rec.table_id}"
        got_tx[rec.table_id][o.source[2]].append(o.partition)
        held = tx_changes[(rec.table_id, rec.id)]
        assert dict(rec.partition_event_counts) == {p: len(offs) for p, offs in held.items()}
        truncated = tx_truncates[(rec.table_id, rec.id)]
        copies = sum(rec.partition_event_counts.values())
        assert copies - truncated * (len(held) - 1) == rec.table_event_count
        assert o.partition in held and o.offset > max(held[o.partition])
    no_key = f"{prefix}.public.events_nopk"  # skipped changes: its ENDs go nowhere
    assert {t: sorted(ids) for t, ids in got_tx.items()} == {
        t: sorted(ids) for t, ids in tx_ends.items() if t != no_key
    }
    for ids in got_tx.values():
        for parts in ids.values():
            assert len(parts) == len(set(parts))  # one copy per partition

    # tombstones, heartbeats and BEGINs produce nothing
    sources = {(o.source[0], o.source[2]) for o in out}
    assert not sources & set(nothing)

    # the metrics saw it
    n_in = metric_value(metrics, "inlet_cdc_events_in_total", topic=f"{prefix}.public.customers")
    assert n_in == sum(1 for r in records if r.topic == f"{prefix}.public.customers")
    assert metric_value(metrics, "inlet_cdc_changes_out_total", table=f"{prefix}.public.customers") == sum(
        1 for e in expected_changes.values() if e[0] == f"{prefix}.public.customers"
    )
    assert (metric_value(metrics, "inlet_cdc_decode_seconds_count") or 0) >= len(records) - 10
    assert (metric_value(metrics, "inlet_cdc_last_source_timestamp_seconds") or 0) > 1.7e9


def test_cli_rejects_bad_settings_naming_flag_and_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inlet cdc run`` refuses bad settings with exit 2 and names the flag and the variable.

    One case runs the real ``inlet`` executable (exit status and stderr of the process); the others go
    through the same ``main`` (parser, settings resolution, error reporting) in this process, which
    saves a second of interpreter start and imports per case.
    """
    import logging
    import os
    import subprocess

    from cdc_helpers import VENV_INLET

    from inlet.services.cli.main import main

    clean = {k: v for k, v in os.environ.items() if not k.startswith("INLET_CDC_")}
    r = subprocess.run(
        [str(VENV_INLET), "cdc", "run", "--topic", "a"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean,
    )
    assert (
        r.returncode == 2 and "--kafka-bootstrap is required (or set INLET_CDC_KAFKA_BOOTSTRAP)" in r.stderr
    )

    for k in os.environ:
        if k.startswith("INLET_CDC_"):
            monkeypatch.delenv(k)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def run(*args: str, **env: str) -> tuple[int, str]:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            try:
                code = main(["cdc", "run", *args])
            except SystemExit as e:  # argparse's own errors
                code = e.code if isinstance(e.code, int) else 2
            finally:  # main configures the root logger for the command: put the test's back
                root.handlers[:] = handlers
                root.setLevel(level)
        return code, capsys.readouterr().err

    code, err = run("--topic", "a")
    assert code == 2 and "--kafka-bootstrap is required (or set INLET_CDC_KAFKA_BOOTSTRAP)" in err
    code, err = run("--kafka-bootstrap", "127.0.0.1:1")
    assert code == 2 and "--topic" in err and "INLET_CDC_TOPIC_PATTERN" in err
    code, err = run(
        INLET_CDC_KAFKA_BOOTSTRAP="127.0.0.1:1", INLET_CDC_TOPICS="a", INLET_CDC_TOPIC_PATTERN="^b"
    )
    assert code == 2 and "not both" in err
    code, err = run("--kafka-bootstrap", "127.0.0.1:1", "--topic-pattern", "(")
    assert code == 2 and "invalid regular expression" in err
    code, err = run("--kafka-bootstrap", "127.0.0.1:1", "--topic", "a", "--value-format", "avro")
    assert code == 2 and "--schema-registry" in err
    code, err = run("--kafka-bootstrap", "127.0.0.1:1", "--topic", "a", "--output-partitions", "0")
    assert code == 2 and "--output-partitions must be at least 1" in err
    code, err = run(
        "--kafka-bootstrap", "127.0.0.1:1", "--topic", "a", INLET_CDC_TOPIC_REPLICATION_FACTOR="0"
    )
    assert code == 2 and "--topic-replication-factor: -1 (the broker's default) or at least 1, not 0" in err
    code, err = run("--kafka-bootstrap", "127.0.0.1:1", "--topic", "a", "--consumer-option", "nokeyvalue")
    assert code == 2 and "KEY=VALUE" in err


def test_a_replication_factor_the_broker_cannot_grant_stops_the_service_saying_why(
    kafka_server: EmbeddedKafka,
) -> None:
    """The topics the service creates take --topic-replication-factor; a one-node broker refuses 2, and
    the service stops at once naming the topic and the broker's reason (no retrying forever)."""
    import threading

    from inlet.services.cdc_consumer.service import CdcConsumerService, CdcServiceError

    config = make_config(kafka_server.bootstrap, unique_prefix(), topic_replication_factor=2)
    with pytest.raises(CdcServiceError) as refused:
        CdcConsumerService(config).run(threading.Event())
    assert config.dlq_topic in str(refused.value) and "INVALID_REPLICATION_FACTOR" in str(refused.value)
    assert config.dlq_topic not in kafka_server.admin().list_topics(timeout=10).topics


def test_stop_while_no_broker_answers_returns_promptly() -> None:
    import threading
    import time

    from inlet.services.cdc_consumer.service import CdcConsumerService
    from inlet.services.stack import free_port

    config = make_config(f"127.0.0.1:{free_port()}", unique_prefix())  # nothing listens there
    service = CdcConsumerService(config)
    stop = threading.Event()
    t = threading.Thread(target=service.run, args=(stop,), daemon=True)
    t.start()
    time.sleep(2.0)
    assert t.is_alive() and not service.ready.is_set()  # waiting for a broker, not crashed
    began = time.monotonic()
    stop.set()
    t.join(15)
    assert not t.is_alive() and time.monotonic() - began < 10
