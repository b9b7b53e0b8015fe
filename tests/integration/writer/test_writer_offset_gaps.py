"""Issue #21: a table checkpoint outside its partition's available offsets (retention deleted
records the table never saw, or the topic was recreated) stops the table with an error naming the
gap, never skipped silently; ``on_offset_gap="earliest"`` resumes from the earliest offset; a
durable broker's restart is no gap."""

from __future__ import annotations

from pathlib import Path

from writer_helpers import Source, commits, produce, read_rows, wait_for

from inlet.services.stack import EmbeddedKafka
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, RESET_KEY, parse_checkpoint


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def ids(path: str) -> list[int]:
    return sorted(r["id"] for r in read_rows(path, ["id"], ["id"]))


def stopped_with(w, src: Source) -> str:
    def error() -> str | None:
        t = w.writer.health()[1]["tables"].get(src.table_id) or {}
        return t.get("error") if t.get("state") == "paused" else None

    return wait_for(error, timeout_s=20, what="the table stopped on the offset gap")


def first_batch(start_writer, kafka_bootstrap: str, lake: Path, src: Source) -> str:
    produce(kafka_bootstrap, src.topic, [src.insert(id=i, name="a", note="", amount=i) for i in (1, 2, 3)])
    w = start_writer()
    path = table_path(lake, src)
    wait_for(lambda: ids(path) == [1, 2, 3], what="first batch")
    w.stop()
    assert parse_checkpoint(commits(path)[-1][2][CHECKPOINT_KEY]) == (src.topic, {0: 3})
    return path


def test_checkpoint_above_latest_after_topic_recreated(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    path = first_batch(start_writer, kafka_bootstrap, lake, src)
    # the topic is recreated behind the writer: its offsets restart at 0
    admin = kafka_server.admin()
    for f in admin.delete_topics([src.topic]).values():
        f.result(30)
    wait_for(lambda: src.topic not in kafka_server.topics(), what="topic deleted")
    kafka_server.create_topic(src.topic, partitions=1)
    produce(kafka_bootstrap, src.topic, [src.insert(id=10, name="b", note="", amount=10)])
    n = len(commits(path))

    w = start_writer()
    err = stopped_with(w, src)
    for part in (
        src.table_id,
        src.topic,
        "partition 0",
        "offset 3",
        "above the latest",
        "earliest 0",
        "latest 1",
    ):
        assert part in err, (part, err)
    assert w.writer.health()[1]["degraded"]

    def gap_failures() -> float:
        value = w.writer.metrics.registry.get_sample_value(
            "inlet_writer_failures_total", {"table": src.table_id, "kind": "offset_gap"}
        )
        return value or 0.0

    # a retry (error_retry_s=1) finds the same gap: still stopped, nothing written
    wait_for(lambda: gap_failures() >= 2, timeout_s=20, what="a retry finding the gap again")
    assert w.writer.health()[1]["tables"][src.table_id]["state"] == "paused"
    assert len(commits(path)) == n and ids(path) == [1, 2, 3]
    w.stop()

    w = start_writer(on_offset_gap="earliest")
    wait_for(lambda: ids(path) == [1, 2, 3, 10], timeout_s=20, what="resumed from the earliest offset")
    assert parse_checkpoint(commits(path)[-1][2][CHECKPOINT_KEY]) == (src.topic, {0: 1})
    assert commits(path)[-1][2][RESET_KEY] == "true"  # moved back on purpose: not fenced
    assert not w.writer.health()[1]["tables"][src.table_id]["error"]


def test_a_durable_broker_restart_is_no_gap(start_writer, lake, prefix, tmp_path):
    """Apache Kafka on a persistent directory, stopped and started again on it with the table's
    checkpoint at the end of both partitions: no gap is reported (ListOffsets answers the true end
    after the restart), and changes produced after the restart reach the table."""
    src = Source(prefix)
    path = table_path(lake, src)
    broker = EmbeddedKafka(data_dir=tmp_path / "kafka")
    try:
        broker.start()
        broker.create_topic(src.topic, partitions=2)
        for partition, first in ((0, 1), (1, 4)):
            rows = [src.insert(id=i, name="a", note="", amount=i) for i in range(first, first + 3)]
            produce(broker.bootstrap, src.topic, rows, partition=partition)
        w = start_writer(bootstrap=broker.bootstrap)
        wait_for(lambda: ids(path) == [1, 2, 3, 4, 5, 6], what="first batches")
        wait_for(
            lambda: parse_checkpoint(commits(path)[-1][2][CHECKPOINT_KEY]) == (src.topic, {0: 3, 1: 3}),
            what="both partitions checkpointed",
        )
        w.stop()
    finally:
        broker.stop()

    with EmbeddedKafka(data_dir=tmp_path / "kafka") as again:
        w = start_writer(bootstrap=again.bootstrap)
        # only partition 0 gets new records: partition 1 stays at its checkpoint
        produce(again.bootstrap, src.topic, [src.insert(id=7, name="b", note="", amount=7)], partition=0)

        def caught_up_or_stopped() -> str | None:
            table = w.writer.health()[1]["tables"].get(src.table_id) or {}
            if table.get("error"):
                return f"stopped: {table['error']}"
            return "caught up" if ids(path) == [1, 2, 3, 4, 5, 6, 7] else None

        assert (
            wait_for(caught_up_or_stopped, timeout_s=30, what="the change after the restart") == "caught up"
        )
        failures = w.writer.metrics.registry.get_sample_value(
            "inlet_writer_failures_total", {"table": src.table_id, "kind": "offset_gap"}
        )
        assert not failures, failures
        assert parse_checkpoint(commits(path)[-1][2][CHECKPOINT_KEY]) == (src.topic, {0: 4, 1: 3})
        w.stop()
