"""Core commit types <-> proto messages (lossless round trip), commit events, and request validation.

Pure Python: no database or server needed."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inlet.core import HudiTable
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Instant, State
from inlet.proto.events.v1 import events_pb2
from inlet.proto.hudi.v1 import commit_pb2
from inlet.services.coordinator import validation
from inlet.services.coordinator.errors import InvalidArgument, PermissionDenied
from inlet.services.coordinator.events import TableInfo, commit_event
from inlet.services.coordinator_client import convert

names = st.text(alphabet="abcdefghij0123456789-_=/", min_size=1, max_size=20)
counts = st.integers(min_value=0, max_value=2**62)
maybe_int = st.none() | st.integers(min_value=-(2**62), max_value=2**62)


@st.composite
def write_stats(draw: st.DrawFn, partition: str) -> WriteStat:
    return WriteStat(
        file_id=draw(names),
        path=draw(names),
        partition_path=partition,
        prev_commit=draw(st.sampled_from(["null", "20240101000000000"])),
        num_writes=draw(counts),
        num_deletes=draw(counts),
        num_update_writes=draw(counts),
        num_inserts=draw(counts),
        total_write_bytes=draw(counts),
        total_write_errors=draw(counts),
        file_size_in_bytes=draw(counts),
        prev_base_file=draw(st.none() | names),
        base_file=draw(st.none() | names),
        log_files=draw(st.none() | st.lists(names, min_size=1, max_size=3)),
        total_log_records=draw(counts),
        total_log_blocks=draw(counts),
        total_log_files_compacted=draw(counts),
        total_log_size_compacted=draw(counts),
        total_updated_records_compacted=draw(counts),
        total_rollback_blocks=draw(counts),
        total_corrupt_log_block=draw(counts),
        log_version=draw(st.none() | st.integers(min_value=0, max_value=2**31 - 1)),
        log_offset=draw(maybe_int),
        min_event_time=draw(maybe_int),
        max_event_time=draw(maybe_int),
        runtime_stats=draw(st.none() | st.dictionaries(names, counts, min_size=1, max_size=3)),
        cdc_stats=draw(st.none() | st.dictionaries(names, counts, min_size=1, max_size=2)),
    )


@st.composite
def metadata(draw: st.DrawFn) -> tuple[str, CommitMetadata]:
    action = draw(st.sampled_from(["commit", "deltacommit", "replacecommit"]))
    partitions = draw(st.lists(st.sampled_from(["", "a", "city=sf", "2024/01/02"]), unique=True, max_size=3))
    md = CommitMetadata(
        extra_metadata=draw(st.dictionaries(names, st.text(max_size=30), max_size=3)),
        operation_type=draw(st.none() | st.sampled_from(["UPSERT", "INSERT", "BULK_INSERT", "COMPACT"])),
        compacted=draw(st.booleans()),
    )
    for p in partitions:
        md.partition_to_write_stats[p] = draw(st.lists(write_stats(p), max_size=3))
    if action == "replacecommit":
        md.partition_to_replace_file_ids = {p: draw(st.lists(names, max_size=3)) for p in partitions}
    return action, md


@settings(max_examples=150, deadline=None)
@given(metadata())
def test_metadata_round_trip_is_lossless(case: tuple[str, CommitMetadata]) -> None:
    action, md = case
    msg = convert.metadata_to_proto(md)
    wire = commit_pb2.CommitMetadata.FromString(msg.SerializeToString())
    back = convert.metadata_from_proto(wire, action)
    assert back == md
    assert back.is_replace == (action == "replacecommit")


def test_round_trip_of_metadata_written_by_core(tmp_path: Path) -> None:
    """What core's writers really record (COW base files, MOR log files with runtime stats, a replace)
    survives the trip, and re-encodes to the same Avro records."""
    cow = HudiTable.create(str(tmp_path / "cow"), name="cow", record_key="id", partition_by="city", cdc=True)
    mor = HudiTable.create(
        str(tmp_path / "mor"),
        name="mor",
        record_key="id",
        partition_by="city",
        table_type="MERGE_ON_READ",
        index="bucket",
        buckets=2,
    )
    data = pa.table({"id": [1, 2, 3], "city": ["sf", "sf", "la"], "v": [1.0, 2.0, 3.0]})
    results = [
        cow.write(data, "insert"),
        cow.write(data.slice(0, 1), "upsert"),
        cow.write(data.slice(2, 1), "insert_overwrite"),
        mor.write(data, "upsert"),
        mor.write(data.slice(0, 2), "upsert"),
    ]
    for res in results:
        back = convert.metadata_from_proto(convert.metadata_to_proto(res.metadata), res.action)
        assert back == res.metadata, res.action
        assert back.to_avro_record() == res.metadata.to_avro_record()
    assert results[2].metadata.is_replace and results[2].action == "replacecommit"
    assert any(s.log_files for s in results[4].metadata.write_stats())
    assert any(s.cdc_stats for s in results[1].metadata.write_stats())  # the CDC table's merge


def test_instant_round_trip() -> None:
    for inst in (
        Instant("20240101000000000", "commit", State.REQUESTED),
        Instant("20240101000000000", "deltacommit", State.INFLIGHT),
        Instant("20240101000000000", "commit", State.COMPLETED, "20240101000000123"),
    ):
        assert convert.instant_from_proto(convert.instant_to_proto(inst)) == inst


def test_commit_event_counts_and_ids() -> None:
    md = CommitMetadata(operation_type="UPSERT")
    md.add(WriteStat("f1", "sf/f1_0-0-0_1.parquet", "sf", num_inserts=5, num_update_writes=2, num_deletes=1))
    md.add(WriteStat("f2", "la/.f2_1.log.1_0-0-0", "la", num_inserts=0, num_update_writes=7, num_deletes=3))
    done = Instant("20240102030405678", "commit", State.COMPLETED, "20240102030406000")
    event = commit_event(TableInfo("sales.orders", "orders", "/lake/orders", "COPY_ON_WRITE"), done, md, 42)
    wire = events_pb2.CommitEvent.FromString(event.SerializeToString())
    assert wire.event_id == "sales.orders/20240102030405678"
    assert (wire.num_inserts, wire.num_updates, wire.num_deletes, wire.num_files) == (5, 9, 4, 2)
    assert wire.sequence == 42
    assert wire.instant.completion_time == "20240102030406000"
    assert wire.committed_at.ToDatetime(tzinfo=dt.UTC) == dt.datetime(2024, 1, 2, 3, 4, 6, tzinfo=dt.UTC)
    assert convert.metadata_from_proto(wire.metadata, "commit") == md
    with pytest.raises(ValueError, match="not completed"):
        commit_event(
            TableInfo("t", "t", "/t", "COPY_ON_WRITE"),
            Instant("20240101000000000", "commit", State.INFLIGHT),
            None,
            1,
        )


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize("good", ["sales.orders", "a", "A-b_c.9", "x" * 200])
def test_valid_table_ids(good: str) -> None:
    assert validation.table_id(good) == good


@pytest.mark.parametrize("bad", ["", "x" * 201, "sales/orders", "a b", "../etc", "t*", "é"])
def test_invalid_table_ids(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="invalid table id"):
        validation.table_id(bad)


@pytest.mark.parametrize(
    "bad", ["2024010100000", "202401010000000000", "2024010100000a0", "20241301000000000", ""]
)
def test_invalid_instant_times(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="instant time"):
        validation.instant_time(bad)


def test_paths_confined_to_lake_roots(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    (root / "db" / "t").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, root / "link")
    roots = validation.lake_roots([str(root), "s3://bucket/lake"])
    real_root = os.path.realpath(root)
    assert validation.confine(str(root / "db" / "t"), roots) == os.path.join(real_root, "db", "t")
    assert validation.confine(f"file://{root}/db/t", roots) == os.path.join(real_root, "db", "t")
    assert validation.confine(str(root / "db" / ".." / "db" / "t"), roots) == os.path.join(
        real_root, "db", "t"
    )
    assert validation.confine("s3://bucket/lake/db/t", roots) == "s3://bucket/lake/db/t"
    for escape in (
        str(root / ".." / "elsewhere"),  # '..' out of the root
        str(root / "link" / "t"),  # a symbolic link out of the root
        str(tmp_path / "lake2" / "t"),  # a sibling sharing the root's name as prefix
        str(root),  # the root itself
        "s3://bucket/lake/../secret/t",
        "s3://other/lake/t",
        "gs://bucket/lake/t",  # another scheme
        "/etc/passwd",
    ):
        with pytest.raises(PermissionDenied):
            validation.confine(escape, roots)
    for malformed in ("", "relative/path", "file://host/x", "a\x00b"):
        with pytest.raises(InvalidArgument):
            validation.confine(malformed, roots)


@pytest.mark.parametrize("bad", ["/abs/file.parquet", "../x.parquet", "a/../../x", "s3://b/x", "a\\b"])
def test_write_stat_paths_must_stay_in_the_table(bad: str) -> None:
    with pytest.raises(InvalidArgument):
        validation.relative_path(bad, "write stat path")
