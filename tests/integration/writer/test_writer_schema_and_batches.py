"""Schema evolution, an incompatible change that pauses only its table, transaction-aligned
batches, and compaction between batches."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pyarrow as pa
from writer_helpers import CUSTOMERS, Source, col, commits, produce, read_rows, wait_for

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, RANGES_KEY, parse_checkpoint, parse_ranges


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def cols_of(src: Source) -> list[str]:
    return [c.name for c in src.cols]


def test_schema_evolution_and_incompatible_change_pauses_only_that_table(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    good = Source(prefix, table="good")
    bad = Source(prefix, table="bad")
    for s in (good, bad):
        kafka_server.create_topic(s.topic, partitions=1)
    produce(kafka_bootstrap, good.topic, [good.insert(id=1, name="a", note="x", amount=1)])
    produce(kafka_bootstrap, bad.topic, [bad.insert(id=1, name="a", note="x", amount=1)])
    w = start_writer()
    gpath, bpath = table_path(lake, good), table_path(lake, bad)
    wait_for(lambda: read_rows(gpath, cols_of(good), ["id"]) == good.expected(), what="good v1")
    wait_for(lambda: read_rows(bpath, cols_of(bad), ["id"]) == bad.expected(), what="bad v1")

    # good: a new column, then amount int -> bigint
    good.cols = [*CUSTOMERS, col("email", pb.COLUMN_TYPE_STRING)]
    produce(kafka_bootstrap, good.topic, [good.insert(id=2, name="b", note="y", amount=2, email="b@x")])
    wait_for(lambda: read_rows(gpath, cols_of(good), ["id"]) == good.expected(), what="good with email")
    good.cols = [c if c.name != "amount" else col("amount", pb.COLUMN_TYPE_INT64) for c in good.cols]
    produce(kafka_bootstrap, good.topic, [good.insert(id=3, name="c", note="z", amount=2**40, email=None)])
    wait_for(lambda: read_rows(gpath, cols_of(good), ["id"]) == good.expected(), what="good with bigint")
    schema = HudiTable.open(gpath).schema()
    assert schema is not None
    assert schema.field("amount").type == pa.int64() and schema.field("email").type == pa.string()

    # bad: amount becomes a string column -> incompatible; bad pauses, good goes on
    bad_before = bad.expected()
    bad_commits = len(commits(bpath))
    bad.cols = [c if c.name != "amount" else col("amount", pb.COLUMN_TYPE_STRING) for c in bad.cols]
    produce(kafka_bootstrap, bad.topic, [bad.insert(id=2, name="b", note="y", amount="lots")])
    wait_for(
        lambda: (w.writer.health()[1]["tables"].get(bad.table_id) or {}).get("error"),
        what="bad table error in health",
    )

    def bad_retries() -> float:
        sample = w.writer.metrics.registry.get_sample_value(
            "inlet_writer_retries_total", {"table": bad.table_id}
        )
        return sample or 0.0

    retries = bad_retries()
    assert retries
    ok, details = w.writer.health()
    assert ok and details["degraded"]
    assert "amount" in details["tables"][bad.table_id]["error"]
    assert details["tables"][bad.table_id]["state"] == "paused"
    produce(kafka_bootstrap, good.topic, [good.update(id=1, name="a2", note="x", amount=5, email="a@x")])
    wait_for(lambda: read_rows(gpath, cols_of(good), ["id"]) == good.expected(), what="good keeps going")
    # the bad table retries (error_retry_s=1) and stays paused; nothing is committed or skipped
    wait_for(lambda: bad_retries() > retries, what="the bad table to be retried")
    assert len(commits(bpath)) == bad_commits
    assert read_rows(bpath, ["id", "name", "note", "amount"], ["id"]) == bad_before
    assert parse_checkpoint(commits(bpath)[-1][2][CHECKPOINT_KEY]) == (bad.topic, {0: 1})
    assert w.writer.health()[1]["tables"][bad.table_id]["error"]
    # the consumer lag of every assigned partition, under the name all consuming services share
    wait_for(
        lambda: (
            w.writer.metrics.registry.get_sample_value(
                "inlet_kafka_consumer_lag_records",
                {"consumer": "writer", "topic": good.topic, "partition": "0"},
            )
            is not None
        ),
        what="the writer's consumer lag",
    )


def test_batches_never_split_a_source_transaction(start_writer, kafka_server, kafka_bootstrap, lake, prefix):
    src = Source(prefix)
    parts = 2
    kafka_server.create_topic(src.topic, partitions=parts)
    w = start_writer(batch_interval_ms=200, transaction_hold_ms=60000)
    path = table_path(lake, src)
    # a first, complete transaction creates the table
    produce(
        kafka_bootstrap,
        src.topic,
        [
            src.change(
                pb.OPERATION_CREATE, after={"id": 100, "name": "t0", "note": "", "amount": 0}, tx="t0"
            ),
            src.end("t0", 1),
        ],
        partitions=parts,
    )
    wait_for(lambda: read_rows(path, ["id"], ["id"]) == [{"id": 100}], what="t0")
    n0 = len(commits(path))
    # t1: four changes over both partitions, END sent before the last change arrives on partition 1
    first = [
        src.change(pb.OPERATION_CREATE, after={"id": i, "name": "t1", "note": "", "amount": i}, tx="t1")
        for i in range(3)
    ]
    produce(kafka_bootstrap, src.topic, first, partitions=parts)
    produce(kafka_bootstrap, src.topic, [src.end("t1", 4)], partitions=parts)
    # the writer holds t1's three changes, and for many batch intervals commits nothing of them
    buffered = w.writer.metrics.registry.get_sample_value
    wait_for(
        lambda: buffered("inlet_writer_buffered_records", {"table": src.table_id}) == 3,
        what="t1's changes consumed and held",
    )
    time.sleep(1.0)  # five batch intervals
    assert len(commits(path)) == n0
    assert read_rows(path, ["id"], ["id"]) == [{"id": 100}]
    last = src.change(pb.OPERATION_CREATE, after={"id": 3, "name": "t1", "note": "", "amount": 3}, tx="t1")
    produce(kafka_bootstrap, src.topic, [last], partitions=parts)
    wait_for(lambda: len(read_rows(path, ["id"], ["id"])) == 5, what="t1")
    new = commits(path)[n0:]
    data = [c for c in new if RANGES_KEY in c[2]]
    assert len(data) == 1, "t1 must land in one commit"
    got = sorted(read_rows(path, ["id", "name"], ["id"]), key=lambda r: r["id"])
    assert got == [{"id": i, "name": "t1"} for i in range(4)] + [{"id": 100, "name": "t0"}]


def test_incomplete_transaction_is_held_for_a_bounded_time(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    """Another worker owns some of the transaction's partitions: this one never sees all
    ``table_event_count`` changes, so it commits after --transaction-hold-ms."""
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    recs = [
        src.change(pb.OPERATION_CREATE, after={"id": i, "name": "x", "note": "", "amount": i}, tx="big")
        for i in range(3)
    ]
    produce(kafka_bootstrap, src.topic, [*recs, src.end("big", 10)], partitions=1)
    started = time.monotonic()
    start_writer(batch_interval_ms=200, transaction_hold_ms=2500)
    path = table_path(lake, src)
    wait_for(lambda: len(read_rows(path, ["id"], ["id"])) == 3, what="held rows")
    assert time.monotonic() - started >= 2.5


def test_compaction_between_batches(start_writer, kafka_server, kafka_bootstrap, lake, prefix):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    w = start_writer(batch_interval_ms=100, write_options={"hoodie.compact.inline.max.delta.commits": "3"})
    path = table_path(lake, src)
    for round_ in range(7):
        produce(
            kafka_bootstrap,
            src.topic,
            [src.update(id=i, name=f"r{round_}", note="n" * 50, amount=round_) for i in range(50)],
        )
        wait_for(
            lambda: read_rows(path, ["id", "name", "note", "amount"], ["id"]) == src.expected(), what="round"
        )
    t = HudiTable.open(path)
    compactions = [i for i in t.timeline.completed(("commit",))]
    assert compactions, "a compaction ran"
    assert read_rows(path, ["id", "name", "note", "amount"], ["id"]) == src.expected()
    hist = w.writer.metrics.compaction_seconds.labels(src.table_id)
    samples = {
        s.name: s.value
        for s in w.writer.metrics.registry.collect()
        for s in s.samples
        if s.name.startswith("inlet_writer_compaction_seconds") and s.labels.get("table") == src.table_id
    }
    assert samples["inlet_writer_compaction_seconds_count"] >= 1
    print(
        f"\ncompaction blocked ingestion {samples['inlet_writer_compaction_seconds_sum']:.3f}s over "
        f"{samples['inlet_writer_compaction_seconds_count']:.0f} compactions (50-row table)"
    )
    del hist
    # a checkpoint is still found past the compaction commit (which has none)
    assert (
        parse_checkpoint(commits(path)[-1][2].get(CHECKPOINT_KEY) or commits(path)[-2][2][CHECKPOINT_KEY])[0]
        == src.topic
    )
    ranges = [parse_ranges(c[2][RANGES_KEY])[1][0] for c in commits(path) if RANGES_KEY in c[2]]
    assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
