"""A partitioned target through a running writer (issue #21): ``partition_by`` from the table config,
the default Merge-on-Read + bucket index table with non-blocking concurrency, a change topic of two
partitions. A delete whose ``before`` image holds only the key (REPLICA IDENTITY DEFAULT), an update
that moves a row to another partition and a TRUNCATE leave the lake equal to the source, with no row
in two partitions. (Every case on both table types and indexes, and hudi-rs:
tests/unit/services/test_writer_partitioned.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

from writer_helpers import Source, col, produce, read_rows, wait_for

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb

COLS = [
    col("id", pb.COLUMN_TYPE_INT32, key=1),
    col("region", pb.COLUMN_TYPE_STRING),
    col("name", pb.COLUMN_TYPE_STRING),
]
NAMES = [c.name for c in COLS]


def truncate(src: Source) -> tuple[str, pb.ChangeRecord]:
    src.lsn += 10
    src.model.clear()
    src.model_lsn.clear()
    ev = pb.ChangeEvent(
        table_id=src.table_id,
        op=pb.OPERATION_TRUNCATE,
        source=pb.SourcePosition(connector="postgresql", schema=src.db_schema, table=src.table, lsn=src.lsn),
    )
    return "", pb.ChangeRecord(change=ev)


def test_deletes_by_key_moves_and_truncate_on_a_partitioned_table(
    start_writer, kafka_server, kafka_bootstrap, lake: Path, prefix: str, tmp_path: Path
) -> None:
    rules = tmp_path / "tables.json"
    rules.write_text(json.dumps([{"match": "*", "partition_by": ["region"], "buckets": 2}]))
    src = Source(prefix, table="orders", cols=COLS)
    kafka_server.create_topic(src.topic, partitions=2)
    path = str(lake / src.database / src.db_schema / src.table)

    def lake_equals_source() -> bool:
        return read_rows(path, NAMES, ["id"]) == src.expected(NAMES)

    produce(
        kafka_bootstrap,
        src.topic,
        [src.insert(id=i, region=r, name=f"n{i}") for i, r in ((1, "eu"), (2, "us"), (3, "eu"), (4, "us"))],
        partitions=2,
    )
    start_writer(table_config=str(rules))
    wait_for(lake_equals_source, what="the inserts")
    assert HudiTable.open(path).partition_fields == ("region",)

    produce(
        kafka_bootstrap,
        src.topic,
        [
            src.change(pb.OPERATION_DELETE, before={"id": 1}),  # REPLICA IDENTITY DEFAULT: the key only
            src.update(id=2, region="eu", name="n2 moved"),
            src.update(id=3, region="apac", name="n3 moved"),
            src.change(pb.OPERATION_DELETE, before={"id": 3}),
        ],
        partitions=2,
    )
    wait_for(lake_equals_source, what="the deletes and moves")
    assert src.expected(NAMES) == [
        {"id": 2, "region": "eu", "name": "n2 moved"},
        {"id": 4, "region": "us", "name": "n4"},
    ]

    # a TRUNCATE goes to every partition of the topic, as the CDC consumer sends it
    truncated = truncate(src)
    produce(kafka_bootstrap, src.topic, [truncated], partition=0)
    produce(kafka_bootstrap, src.topic, [truncated, src.insert(id=5, region="us", name="n5")], partition=1)
    wait_for(lake_equals_source, what="the truncate")
    assert src.expected(NAMES) == [{"id": 5, "region": "us", "name": "n5"}]
