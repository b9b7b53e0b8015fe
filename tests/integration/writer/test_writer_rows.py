"""Inserts, updates, deletes, key changes, TOAST and late changes through a running writer
(real broker, real coordinator on PostgreSQL, real files), checked against a model of the changes
with Inlet's snapshot read and the independent hudi-rs reader (file-group readers 1 and 2)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from writer_helpers import UNCHANGED, Source, arrow_rows, commits, produce, read_rows, wait_for

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, parse_checkpoint

COLS = ["id", "name", "note", "amount"]


def hudi_rs(path: str, version: str) -> pa.Table | None:
    t = (
        HudiTableBuilder.from_base_uri(path)
        .with_hudi_option("hoodie.read.file.group.reader.version", version)
        .build()
    )
    batches = t.read(HudiReadOptions())
    if not batches:
        return None
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def matches(path: str, src: Source) -> bool:
    return read_rows(path, COLS, ["id"]) == src.expected(COLS)


def test_changes_in_one_batch_and_across_batches(start_writer, kafka_server, kafka_bootstrap, lake, prefix):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    batch1 = [
        src.insert(id=1, name="ann", note="n1", amount=10),
        src.insert(id=2, name="bob", note="n2", amount=20),
        src.insert(id=3, name="cy", note="n3", amount=30),
        src.update(id=2, name="bobby", note="n2", amount=21),
        src.delete(id=3, name="cy", note="n3", amount=30),
        src.insert(id=4, name="dee", note="n4", amount=40),  # insert then delete in one batch
        src.delete(id=4, name="dee", note="n4", amount=40),
        src.delete(id=1, name="ann", note="n1", amount=10),  # delete then re-insert in one batch
        src.insert(id=1, name="ann2", note="n1b", amount=11),
    ]
    produce(kafka_bootstrap, src.topic, batch1)
    start_writer()
    path = table_path(lake, src)
    wait_for(lambda: matches(path, src), what="first batch")
    assert {r["id"] for r in src.expected(COLS)} == {1, 2}

    # second round: a key change (update whose before key differs), TOAST-unchanged column, a late
    # older change that must lose, a delete of a row written by an earlier commit
    late_lsn = src.lsn - 5  # older than everything in round one's last changes
    batch2 = [
        src.change(
            pb.OPERATION_UPDATE,
            before={"id": 2, "name": "bobby", "note": "n2", "amount": 21},
            after={"id": 20, "name": "bobby", "note": "n2", "amount": 21},
        ),
        src.update(id=1, name="ann3", note=UNCHANGED, amount=12),
        src.change(
            pb.OPERATION_UPDATE, after={"id": 1, "name": "stale", "note": "stale", "amount": 0}, lsn=late_lsn
        ),
        src.insert(id=5, name="eve", note="n5", amount=50),
    ]
    produce(kafka_bootstrap, src.topic, batch2)
    wait_for(lambda: matches(path, src), what="second batch")
    got = {r["id"]: r for r in read_rows(path, COLS, ["id"])}
    assert got[1] == {"id": 1, "name": "ann3", "note": "n1b", "amount": 12}  # TOAST kept, late lost
    assert 2 not in got and got[20]["name"] == "bobby"

    t = HudiTable.open(path)
    props = t.props
    assert props["hoodie.table.type"] == "MERGE_ON_READ"
    assert props["hoodie.table.recordkey.fields"] == "id"
    assert props["hoodie.table.precombine.field"] == "_event_lsn"
    assert props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    assert props["hoodie.index.type"] == "BUCKET"
    assert props["hoodie.write.concurrency.mode"] == "NON_BLOCKING_CONCURRENCY_CONTROL"
    snapshot = t.read(meta_columns=False)
    for c in (
        "_change_operation_type",
        "_event_lsn",
        "_event_tx_id",
        "_upstream_event_processed_ts_ms",
        "_event_origin_ts_ms",
        "_event_xmin",
        "db_shard_source_partition",
    ):
        assert c in snapshot.column_names
    assert snapshot.schema.field("_event_lsn").type == pa.int64()
    ops = {r["id"]: r["_change_operation_type"] for r in snapshot.to_pylist()}
    assert ops[1] == "u" and ops[5] == "c"

    # every commit carries Hudi Streamer's checkpoint; the last one points past all 13 messages
    cks = [parse_checkpoint(extra[CHECKPOINT_KEY]) for _, _, extra in commits(path)]
    assert cks and cks[-1] == (src.topic, {0: len(batch1) + len(batch2)})

    # hudi-rs reads what Inlet reads (after a compaction, the TOAST placeholder is filled in the
    # base file, which readers without partial-update support also see)
    HudiTable.open(path).compact({"hoodie.compact.inline.max.delta.commits": "1"})
    want = src.expected(COLS)
    assert read_rows(path, COLS, ["id"]) == want
    for version in ("1", "2"):
        assert arrow_rows(hudi_rs(path, version), COLS, ["id"]) == want, f"hudi-rs reader v{version}"


def test_types_map_to_arrow(start_writer, kafka_server, kafka_bootstrap, lake, prefix):
    cols = [
        pb.Column(name="k1", type=pb.COLUMN_TYPE_STRING, key_position=1),
        pb.Column(name="k2", type=pb.COLUMN_TYPE_INT64, key_position=2),
        pb.Column(name="small", type=pb.COLUMN_TYPE_INT16, nullable=True),
        pb.Column(name="price", type=pb.COLUMN_TYPE_DECIMAL, precision=10, scale=2, nullable=True),
        pb.Column(name="num", type=pb.COLUMN_TYPE_DECIMAL, nullable=True),
        pb.Column(name="day", type=pb.COLUMN_TYPE_DATE, nullable=True),
        pb.Column(name="at", type=pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC, nullable=True),
        pb.Column(name="tod", type=pb.COLUMN_TYPE_TIME_MICROS, nullable=True),
        pb.Column(name="blob", type=pb.COLUMN_TYPE_BYTES, nullable=True),
        pb.Column(
            name="tags",
            type=pb.COLUMN_TYPE_LIST,
            nullable=True,
            element=pb.Column(name="element", type=pb.COLUMN_TYPE_STRING, nullable=True),
        ),
        pb.Column(name="f", type=pb.COLUMN_TYPE_FLOAT32, nullable=True),
        pb.Column(name="ok", type=pb.COLUMN_TYPE_BOOLEAN, nullable=True),
    ]
    src = Source(prefix, table="typed", cols=cols)
    kafka_server.create_topic(src.topic, partitions=1)
    produce(
        kafka_bootstrap,
        src.topic,
        [
            src.insert(
                k1="a",
                k2=1,
                small=7,
                price="12.30",
                num="3.14159265358979",
                day=19000,
                at=1_700_000_000_000_000,
                tod=3_600_000_000,
                blob=b"\x00\x01",
                tags=["x", "y"],
                f=1.5,
                ok=True,
            ),
        ],
    )
    start_writer()
    path = str(lake / "inventory" / "public" / "typed")
    wait_for(lambda: HudiTable.open(path).read().num_rows == 1, what="typed row")
    t = HudiTable.open(path)
    schema = t.read(meta_columns=False).schema
    assert schema.field("small").type == pa.int32()
    assert schema.field("price").type == pa.decimal128(10, 2)
    assert schema.field("num").type == pa.string()
    assert schema.field("day").type == pa.date32()
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("tod").type == pa.int64()
    assert schema.field("blob").type == pa.binary()
    assert pa.types.is_list(schema.field("tags").type)
    assert t.props["hoodie.table.recordkey.fields"] == "k1,k2"
    r = t.read(meta_columns=False).to_pylist()[0]
    assert str(r["price"]) == "12.30" and r["num"] == "3.14159265358979" and r["tags"] == ["x", "y"]
    assert t.read().column("_hoodie_record_key").to_pylist() == ["k1:a,k2:1"]


@pytest.mark.parametrize("unused", [0])
def test_copy_on_write_from_table_config(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix, tmp_path, unused
):
    src = Source(prefix, table="orders")
    kafka_server.create_topic(src.topic, partitions=1)
    cfg = tmp_path / "tables.json"
    cfg.write_text(f'[{{"match": "{prefix}.public.ord*", "table_type": "COPY_ON_WRITE", "index": "simple"}}]')
    produce(
        kafka_bootstrap, src.topic, [src.insert(id=i, name=f"n{i}", note="x", amount=i) for i in range(5)]
    )
    start_writer(table_config=str(cfg))
    path = table_path(lake, src)
    wait_for(lambda: matches(path, src), what="cow rows")
    produce(
        kafka_bootstrap,
        src.topic,
        [src.update(id=1, name="u", note="y", amount=100), src.delete(id=2, name="", note="", amount=0)],
    )
    wait_for(lambda: matches(path, src), what="cow updates")
    t = HudiTable.open(path)
    assert t.props["hoodie.table.type"] == "COPY_ON_WRITE"
    assert "hoodie.write.concurrency.mode" not in t.props
    assert {i.action for i in t.instants()} == {"commit"}
