"""Exactly-once: the checkpoint in the commit, restarts that ignore the consumer group's offsets,
and writer subprocesses killed mid-batch and mid-commit."""

from __future__ import annotations

import itertools
import json
import signal
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from conftest import kafka_settings, log_lines
from writer_helpers import Source, commits, produce, read_rows, wait_for

from inlet.core import HudiTable, avro
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, RANGES_KEY, parse_checkpoint, parse_ranges

COLS = ["id", "name", "note", "amount"]


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def assert_exactly_once(path: str, src: Source, partitions: int) -> None:
    """Table == model, no duplicate keys, and the commits' offset ranges tile each partition."""
    assert read_rows(path, COLS, ["id"]) == src.expected(COLS)
    keys = HudiTable.open(path).read(columns=["_hoodie_record_key"]).column(0).to_pylist()
    assert len(keys) == len(set(keys)), "duplicate record keys"
    seen: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    for _, _, extra in commits(path):
        if RANGES_KEY not in extra:
            continue
        topic, ranges = parse_ranges(extra[RANGES_KEY])
        assert topic == src.topic
        for p, r in ranges.items():
            seen[p].append(r)
    for p, spans in seen.items():
        spans.sort()
        for (a1, b1), (a2, b2) in itertools.pairwise(spans):
            assert b1 <= a2, f"partition {p}: offset ranges overlap: {(a1, b1)} {(a2, b2)}"


def test_checkpoint_in_avro_metadata_and_restart_ignores_group_offsets(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    produce(
        kafka_bootstrap, src.topic, [src.insert(id=i, name=f"n{i}", note="x", amount=i) for i in range(5)]
    )
    w = start_writer()
    path = table_path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="first rows")
    w.stop()

    # the completed deltacommit's Avro HoodieCommitMetadata holds Hudi Streamer's checkpoint
    t = HudiTable.open(path)
    done = [i for i in t.timeline.completed(("deltacommit",))]
    assert done
    raw = t.timeline.read_bytes(done[-1])
    record = avro.decode(raw, "commit metadata")
    assert record["extraMetadata"][CHECKPOINT_KEY] == f"{src.topic},0:5"
    assert record["extraMetadata"][RANGES_KEY] == f"{src.topic},0:0-5"

    # a bogus group offset far ahead (it would skip the next records if the writer used it)
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"writer-{prefix}", **kafka_settings()})
    c.commit(offsets=[TopicPartition(src.topic, 0, 7)], asynchronous=False)
    c.close()
    produce(
        kafka_bootstrap, src.topic, [src.insert(id=i, name=f"m{i}", note="y", amount=i) for i in range(5, 8)]
    )
    start_writer()
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="rows after restart")
    last = commits(path)[-1][2]
    assert parse_checkpoint(last[CHECKPOINT_KEY]) == (src.topic, {0: 8})
    assert parse_ranges(last[RANGES_KEY]) == (src.topic, {0: (5, 8)})
    assert_exactly_once(path, src, 1)


def test_kill_mid_batch_and_mid_commit(spawn_writer, kafka_server, kafka_bootstrap, lake, prefix):
    """A writer subprocess dies (INLET_CRASH_AT, like SIGKILL) after writing data files, just
    before completing the instant, and right after the commit landed; then one is SIGKILLed
    while a stream of changes flows. The next writer leaves table == model, exactly once."""
    src = Source(prefix)
    parts = 2
    kafka_server.create_topic(src.topic, partitions=parts)
    path = table_path(lake, src)
    next_id = 0

    def burst(n: int) -> None:
        nonlocal next_id
        recs = []
        for _ in range(n):
            recs.append(src.insert(id=next_id, name=f"n{next_id}", note="x", amount=next_id))
            if next_id % 3 == 0 and next_id > 0:
                recs.append(src.update(id=next_id - 1, name="upd", note="y", amount=-next_id))
            next_id += 1
        produce(kafka_bootstrap, src.topic, recs, partitions=parts)

    for point in ("after_data_files", "before_complete", "writer_after_commit"):
        burst(20)
        wp = spawn_writer(env={"INLET_CRASH_AT": point})
        rc = wp.proc.wait(timeout=120)
        assert rc == 77, f"{point}: exit {rc}\n{wp.log()[-3000:]}"

    # SIGKILL in the middle of a stream of batches
    wp = spawn_writer("--batch-max-records", "7")
    burst(30)
    wait_for(lambda: any(m.get("message") == "batch committed" for m in log_lines(wp.log())), what="a commit")
    burst(30)
    time.sleep(0.4)
    wp.proc.send_signal(signal.SIGKILL)
    wp.proc.wait(timeout=30)

    final = spawn_writer()
    burst(5)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), timeout_s=120, what="model")
    assert_exactly_once(path, src, parts)

    # metrics and health of the running writer, then a graceful stop
    serving = wait_for(
        lambda: [m for m in log_lines(final.log()) if m.get("event") == "serving"], what="serving"
    )
    addr = serving[0]["metrics"]
    metrics = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    assert "inlet_writer_records_written_total" in metrics and "inlet_writer_batch_seconds" in metrics
    health = json.loads(urllib.request.urlopen(f"http://{addr}/healthz", timeout=10).read())
    assert health["status"] == "ok" and src.table_id in health["tables"]
    final.proc.send_signal(signal.SIGTERM)
    assert final.proc.wait(timeout=60) == 0
