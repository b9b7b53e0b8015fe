"""The writer service with its lake root on S3 (a real SeaweedFS server): tables created, written and
checkpointed under ``s3://``, read back by Inlet and hudi-rs (with storage options)."""

from __future__ import annotations

import pytest
from support import hudi_rs
from writer_helpers import Source, arrow_rows, commits, produce, read_rows, wait_for

from inlet.core.s3 import S3Options
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, parse_checkpoint

COLS = ["id", "name", "note", "amount"]


@pytest.fixture
def lake(s3_lake: str) -> str:
    """The lake root of the coordinator and the writer: on S3 here."""
    return s3_lake


def test_writer_replicates_into_an_s3_lake(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix, s3_options: S3Options
):
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    changes = [
        src.insert(id=1, name="ann", note="n1", amount=10),
        src.insert(id=2, name="bob", note="n2", amount=20),
        src.update(id=2, name="bobby", note="n2", amount=21),
        src.insert(id=3, name="cy", note="n3", amount=30),
        src.delete(id=3, name="cy", note="n3", amount=30),
    ]
    produce(kafka_bootstrap, src.topic, changes)
    start_writer()
    path = f"{lake}/{src.database}/{src.db_schema}/{src.table}"
    want = src.expected(COLS)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == want, what="the changes in the S3 lake")
    assert [r["id"] for r in want] == [1, 2]
    cks = [parse_checkpoint(extra[CHECKPOINT_KEY]) for _, _, extra in commits(path)]
    assert cks and cks[-1] == (src.topic, {0: len(changes)})
    got = hudi_rs.read(path, "2", storage_options=s3_options.hudi_rs_options())
    assert arrow_rows(got, COLS, ["id"]) == want
