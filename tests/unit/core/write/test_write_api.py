"""Write-path behaviour seen through the public API: schema on write, commit metadata, file sizing."""

from __future__ import annotations

import json
import pathlib

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable, InvalidInputError, SchemaError
from inlet.core.file_group.view import BaseFile
from inlet.core.index.simple import locate_keys


def _table(tmp_path: pathlib.Path, **kw: object) -> HudiTable:
    args: dict[str, object] = {"name": "t", "record_key": "id", "partition_by": "p", "ordering_field": "ts"}
    args.update(kw)
    return HudiTable.create(str(tmp_path / "t"), **args)  # type: ignore[arg-type]


def _snapshot(path: pathlib.Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}


def _data_files(path: pathlib.Path) -> set[str]:
    return {str(f.relative_to(path)) for f in path.rglob("*.parquet")}


def test_schema_evolution_adds_columns_and_promotes_types(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    t.write(pa.table({"id": [1, 2], "p": ["a", "b"], "ts": pa.array([1, 1], pa.int32()), "v": [1.5, 2.5]}))
    t.write(
        pa.table(
            {
                "id": [2, 3],
                "p": ["b", "a"],
                "ts": pa.array([2, 2], pa.int64()),  # int -> long
                "v": pa.array([9.0, 3.0], pa.float64()),
                "extra": ["x", "y"],  # new column
            }
        )
    )
    schema = t.schema()
    assert schema is not None
    assert schema.field("ts").type == pa.int64()
    assert schema.names[-1] == "extra"
    rows = {r["id"]: r for r in t.read(meta_columns=False).to_pylist()}
    assert rows[1]["extra"] is None and rows[1]["ts"] == 1
    assert rows[2]["extra"] == "x" and rows[2]["v"] == 9.0
    assert rows[3]["extra"] == "y"
    # narrower input after promotion is widened, not refused
    t.write(pa.table({"id": [1], "p": ["a"], "ts": pa.array([5], pa.int32()), "v": [0.5]}))
    assert {r["id"]: r["ts"] for r in t.read().to_pylist()}[1] == 5


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (pa.table({"id": [1], "p": ["a"], "ts": ["not-a-number"], "v": [1.0]}), "column 'ts'"),
        (pa.table({"p": ["a"], "ts": [1], "v": [1.0]}), "'id'"),
        (pa.table({"id": [1], "ts": [1], "v": [1.0]}), "'p'"),
        (
            pa.table(
                {"id": [None], "p": ["a"], "ts": [1], "v": [1.0]},
                schema=pa.schema(
                    [("id", pa.int64()), ("p", pa.string()), ("ts", pa.int64()), ("v", pa.float64())]
                ),
            ),
            "null or empty",
        ),
    ],
)
def test_incompatible_input_is_refused_before_anything_is_written(
    tmp_path: pathlib.Path, bad: pa.Table, message: str
) -> None:
    t = _table(tmp_path)
    t.write(pa.table({"id": [1], "p": ["a"], "ts": [1], "v": [1.0]}))
    before = _snapshot(tmp_path / "t")
    with pytest.raises((SchemaError, InvalidInputError), match=message):
        t.write(bad)
    after = _snapshot(tmp_path / "t")
    assert {k: v for k, v in after.items() if "/.aux/" not in k} == {
        k: v for k, v in before.items() if "/.aux/" not in k
    }


def test_unknown_operation_is_refused(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    with pytest.raises(ValueError, match="unknown write operation 'merge'"):
        t.write(pa.table({"id": [1], "p": ["a"], "ts": [1]}), operation="merge")


def test_commit_metadata_is_hudi_avro_with_schema_and_stats(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    res = t.write(pa.table({"id": [1, 2, 3], "p": ["a", "a", "b"], "ts": [1, 1, 1], "v": ["x", "y", "z"]}))
    timeline = tmp_path / "t" / ".hoodie" / "timeline"
    completed = timeline / f"{res.instant_time}_{res.completion_time}.commit"
    assert completed.exists()
    with completed.open("rb") as fh:
        reader = fastavro.reader(fh)
        assert reader.writer_schema["name"] == "org.apache.hudi.avro.model.HoodieCommitMetadata"
        (record,) = list(reader)
    assert record["operationType"] == "UPSERT"
    avro_schema = json.loads(record["extraMetadata"]["schema"])
    assert [f["name"] for f in avro_schema["fields"]] == ["id", "p", "ts", "v"]
    stats = record["partitionToWriteStats"]
    assert set(stats) == {"a", "b"}
    total = 0
    for partition, lst in stats.items():
        for s in lst:
            path = tmp_path / "t" / s["path"]
            assert path.exists() and path.stat().st_size == s["fileSizeInBytes"] == s["totalWriteBytes"]
            assert s["partitionPath"] == partition and s["prevCommit"] == "null"
            assert pq.read_metadata(path).num_rows == s["numWrites"] == s["numInserts"]
            bf = BaseFile.parse(s["path"])
            assert bf is not None and bf.file_id == s["fileId"] and bf.instant_time == res.instant_time
            total += s["numWrites"]
    assert total == 3
    assert (timeline / f"{res.instant_time}.commit.requested").exists()
    assert (timeline / f"{res.instant_time}.inflight").exists()
    assert res.completion_time > res.instant_time


def test_base_files_have_meta_columns_first_and_unique_seqnos(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    t.write(pa.table({"id": list(range(50)), "p": ["a"] * 50, "ts": [1] * 50, "v": ["x"] * 50}))
    res = t.write(pa.table({"id": list(range(25, 75)), "p": ["a"] * 50, "ts": [2] * 50, "v": ["y"] * 50}))
    (path,) = res.files_written
    f = pq.read_table(tmp_path / "t" / path)
    assert f.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    rows = f.to_pylist()
    assert {r["_hoodie_file_name"] for r in rows} == {path.split("/")[-1]}
    new = [r for r in rows if r["_hoodie_commit_time"] == res.instant_time]
    old = [r for r in rows if r["_hoodie_commit_time"] != res.instant_time]
    assert len(new) == 50 and len(old) == 25  # keys 0..24 untouched keep their commit time
    seqnos = [r["_hoodie_commit_seqno"] for r in new]
    assert len(set(seqnos)) == len(seqnos)
    assert all(s.startswith(res.instant_time + "_") for s in seqnos)
    md = pq.read_metadata(tmp_path / "t" / path).metadata
    assert md[b"hoodie_min_record_key"] == b"0" and md[b"hoodie_max_record_key"] == b"9"


def test_small_files_are_filled_before_new_file_groups(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    opts = {"hoodie.parquet.max.file.size": str(200_000), "hoodie.parquet.small.file.limit": str(150_000)}
    first = t.write(pa.table({"id": [1, 2], "p": ["a", "a"], "ts": [1, 1], "v": ["x", "y"]}), "insert", opts)
    (fid,) = {s.file_id for s in first.metadata.write_stats()}
    second = t.write(pa.table({"id": [3, 4], "p": ["a", "a"], "ts": [1, 1], "v": ["x", "y"]}), "insert", opts)
    assert {s.file_id for s in second.metadata.write_stats()} == {fid}
    assert second.metadata.write_stats()[0].num_writes == 4
    # with no small-file limit, inserts open a new file group
    third = t.write(
        pa.table({"id": [5], "p": ["a"], "ts": [1], "v": ["z"]}),
        "insert",
        {"hoodie.parquet.small.file.limit": "0"},
    )
    assert {s.file_id for s in third.metadata.write_stats()} != {fid}
    assert t.read().num_rows == 5


def test_max_file_size_splits_inserts_into_several_file_groups(tmp_path: pathlib.Path) -> None:
    t = _table(tmp_path)
    n = 1000
    opts = {"hoodie.parquet.max.file.size": str(100 * 250), "hoodie.copyonwrite.record.size.estimate": "100"}
    res = t.write(
        pa.table({"id": list(range(n)), "p": ["a"] * n, "ts": [1] * n, "v": ["x"] * n}), "insert", opts
    )
    stats = res.metadata.write_stats()
    assert len(stats) == 4 and all(s.num_writes == 250 for s in stats)
    assert len({s.file_id for s in stats}) == 4


@pytest.mark.parametrize("mode", ["GLOBAL_SORT", "PARTITION_SORT", "NONE"])
def test_bulk_insert_sort_modes(tmp_path: pathlib.Path, mode: str) -> None:
    t = _table(tmp_path)
    ids = [5, 3, 9, 1, 7]
    res = t.write(
        pa.table({"id": ids, "p": ["a"] * 5, "ts": [1] * 5, "v": ["x"] * 5}),
        "bulk_insert",
        {"hoodie.bulkinsert.sort.mode": mode},
    )
    (path,) = res.files_written
    keys = pq.read_table(tmp_path / "t" / path).column("_hoodie_record_key").to_pylist()
    if mode == "NONE":
        assert keys == [str(i) for i in ids]
    else:
        assert keys == sorted(str(i) for i in ids)


def test_bucket_index_hashes_the_configured_hash_field(tmp_path: pathlib.Path) -> None:
    # Apache Hudi may hash a subset of the record key (hoodie.bucket.index.hash.field)
    t = HudiTable.create(
        str(tmp_path / "b"),
        name="b",
        record_key="id,name",
        index="bucket",
        buckets=8,
        extra_properties={"hoodie.bucket.index.hash.field": "id"},
    )
    ids = list(range(40))
    t.write(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}))
    for row in t.read(columns=["id", "_hoodie_file_name"]).to_pylist():
        # List.hashCode of the single value str(id): 31 * 1 + String.hashCode
        h = 31 + sum(ord(c) * 31 ** (len(str(row["id"])) - 1 - i) for i, c in enumerate(str(row["id"])))
        assert int(row["_hoodie_file_name"][:8]) == (h & 0x7FFFFFFF) % 8


def test_locate_keys_joins_incoming_with_stored_keys() -> None:
    """The simple index's join: every file group holding a key gets every incoming record of it."""
    incoming = pa.chunked_array([pa.array(["a", "b"]), pa.array(["c", "a", "z"])])
    stored = [
        ("f2", pa.array(["c", "x", "c"])),
        ("f1", pa.array(["a", "b", "y"])),
        ("f3", pa.array([], pa.string())),
        ("f4", pa.array(["q"])),
        ("f2", pa.array(["b"])),
    ]
    located = locate_keys(incoming, stored)
    assert list(located) == ["f1", "f2"]
    assert located["f1"].tolist() == [0, 1, 3]
    assert located["f2"].tolist() == [1, 2]
    assert locate_keys(incoming, []) == {}
    assert locate_keys(pa.array([], pa.string()), stored) == {}
