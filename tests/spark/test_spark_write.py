"""``inlet.core.spark.write``: Apache Hudi's options, validation before writing, the bucket index's
ids, bulk-insert sort modes, commit protocols and save modes.

Tables are read back with the independent ``hudi`` reader (hudi-rs 0.5.0); expected values are
written by hand or computed by tests/model.py (Apache Hudi's rules, independent of Inlet).
"""

from __future__ import annotations

import datetime as dt
import itertools
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from inlet.core import HudiTable
from inlet.core import spark as inlet_spark
from inlet.core.commit import markers
from inlet.core.commit.protocol import LocalCommitProtocol
from inlet.core.errors import InvalidConfigError, InvalidInputError, SchemaError, TableExistsError
from inlet.core.file_group.view import BaseFile, list_data_files
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant
from inlet.core.write import run as write_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.model import hudi_bucket

TRIPS = "uuid string, city string, ts long, fare double"


def hudi_options(**extra: str) -> dict[str, str]:
    """The options of Apache Hudi's PySpark quick start."""
    return {
        "hoodie.table.name": "trips",
        "hoodie.datasource.write.recordkey.field": "uuid",
        "hoodie.datasource.write.partitionpath.field": "city",
        "hoodie.datasource.write.precombine.field": "ts",
        **extra,
    }


def hudi_rows(path: str, columns: list[str] | None = None) -> list[dict[str, Any]]:
    """Snapshot rows read by hudi-rs (file group reader v2), sorted."""
    builder = HudiTableBuilder.from_base_uri(path).with_hudi_option(
        "hoodie.read.file.group.reader.version", "2"
    )
    batches = builder.build().read(HudiReadOptions())
    if not batches:
        return []
    rows = pa.Table.from_batches(batches).to_pylist()
    if columns is not None:
        rows = [{c: r[c] for c in columns} for r in rows]
    return sorted(rows, key=repr)


def test_first_write_creates_the_table_from_hudi_options(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")
    df = spark.createDataFrame([("a", "sf", 1, 10.0), ("b", "nyc", 1, 20.0), ("a", "sf", 2, 11.0)], TRIPS)
    options = hudi_options(
        **{
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "hoodie.index.type": "BUCKET",
            "hoodie.bucket.index.num.buckets": "3",
            "hoodie.datasource.write.operation": "upsert",
            "_kafka.offsets": "topic:0:42",  # commit metadata by Hudi's default key prefix "_"
        }
    )
    result = inlet_spark.write(df, path, options)
    assert result is not None and result.action == "deltacommit"
    assert result.metadata.extra_metadata["_kafka.offsets"] == "topic:0:42"
    props = HudiTable.open(path).props
    assert props["hoodie.table.name"] == "trips"
    assert props["hoodie.table.type"] == "MERGE_ON_READ"
    assert props["hoodie.table.recordkey.fields"] == "uuid"
    assert props["hoodie.table.partition.fields"] == "city"
    assert props["hoodie.table.precombine.field"] == "ts"
    assert props["hoodie.datasource.write.hive_style_partitioning"] == "true"
    assert props["hoodie.index.type"] == "BUCKET"
    assert props["hoodie.bucket.index.num.buckets"] == "3"
    assert hudi_rows(path, ["uuid", "city", "ts", "fare", "_hoodie_partition_path"]) == [
        {"uuid": "a", "city": "sf", "ts": 2, "fare": 11.0, "_hoodie_partition_path": "city=sf"},
        {"uuid": "b", "city": "nyc", "ts": 1, "fare": 20.0, "_hoodie_partition_path": "city=nyc"},
    ]
    # the same options again: no contradiction; the default operation is upsert
    again = spark.createDataFrame([("b", "nyc", 0, 99.0)], TRIPS)
    assert inlet_spark.write(again, path, {k: v for k, v in options.items() if "operation" not in k})
    assert [r["fare"] for r in hudi_rows(path, ["fare"])] == [11.0, 20.0]  # ts 0 < 1: the stored record stays


def test_options_contradicting_the_table_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")
    df = spark.createDataFrame([("a", "sf", 1, 10.0)], TRIPS)
    inlet_spark.write(df, path, hudi_options())
    before = [i.file_name() for i in HudiTable.open(path).instants()]
    cases = [
        ("hoodie.datasource.write.recordkey.field", "city", "hoodie.table.recordkey.fields=uuid"),
        ("hoodie.datasource.write.table.type", "MERGE_ON_READ", "hoodie.table.type=COPY_ON_WRITE"),
        ("hoodie.datasource.write.precombine.field", "fare", "hoodie.table.precombine.field=ts"),
        ("hoodie.index.type", "BUCKET", "hoodie.index.type=SIMPLE"),
    ]
    for key, value, stored in cases:
        with pytest.raises(InvalidConfigError) as e:
            inlet_spark.write(df, path, hudi_options(**{key: value}))
        assert f"{key}={value}" in str(e.value) and stored in str(e.value)
    with pytest.raises(InvalidConfigError, match=r"hoodie\.datasource\.write\.operation"):
        inlet_spark.write(df, path, hudi_options(**{"hoodie.datasource.write.operation": "merge"}))
    assert [i.file_name() for i in HudiTable.open(path).instants()] == before
    with pytest.raises(InvalidConfigError, match=r"hoodie\.table\.name"):
        inlet_spark.write(df, str(tmp_path / "new"), {"hoodie.datasource.write.recordkey.field": "uuid"})


def test_write_options_reach_the_core_writer(spark: SparkSession, tmp_path: Path) -> None:
    """hoodie.* options Inlet does not map itself (file sizing, compression) are write options."""
    path = str(tmp_path / "trips")
    rows = [(f"k{i:04d}", "sf" if i % 2 else "nyc", 1, float(i)) for i in range(400)]
    small = {
        "hoodie.datasource.write.operation": "bulk_insert",
        "hoodie.parquet.max.file.size": "20000",
        "hoodie.copyonwrite.record.size.estimate": "200",  # 100 records per file
        "hoodie.parquet.compression.codec": "gzip",
    }
    result = inlet_spark.write(spark.createDataFrame(rows, TRIPS), path, hudi_options(**small))
    assert result is not None
    per_partition: dict[str, int] = {}
    for s in result.metadata.write_stats():
        per_partition[s.partition_path] = per_partition.get(s.partition_path, 0) + 1
        assert s.num_inserts <= 100
        meta = pq.ParquetFile(str(Path(path) / s.path)).metadata
        assert meta.row_group(0).column(0).compression == "GZIP"
    # bulk_insert (sort mode NONE) writes each task's rows of a partition into files of at most
    # 100 records, as Apache Hudi's bulk insert does: at least two files per partition
    assert set(per_partition) == {"sf", "nyc"} and min(per_partition.values()) >= 2
    assert sum(s.num_inserts for s in result.metadata.write_stats()) == 400
    assert len(hudi_rows(path)) == 400


def test_bucket_ids_are_apache_hudis(spark: SparkSession, tmp_path: Path) -> None:
    """Every record lands in the file group of Apache Hudi's bucket for its key (Java's
    List#hashCode of the key values, computed by tests/model.py), non-ASCII and complex keys too."""
    path = str(tmp_path / "t")
    names = ["plain", "ünïcödé", "日本語", "a,b", "", "x" * 40, "emoji 🙂"]
    rows = [(i, names[i % len(names)], "p" if i % 3 else "q", i) for i in range(60)]
    df = spark.createDataFrame(rows, "id int, name string, part string, ts long")
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id,name",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.index.type": "BUCKET",
        "hoodie.bucket.index.num.buckets": "7",
    }
    inlet_spark.write(df, path, options)
    got = hudi_rows(path, ["id", "name", "_hoodie_file_name"])
    assert len(got) == 60
    for r in got:  # Hudi hashes the key's values (an empty one as "", not its __empty__ placeholder)
        assert r["_hoodie_file_name"][:8] == f"{hudi_bucket([str(r['id']), r['name']], 7):08d}", r


def test_global_sort_bulk_insert_writes_sorted_disjoint_files(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    rows = [(f"k{(i * 7919) % 1000:04d}", "sf" if i % 2 else "nyc", 1, 1.0) for i in range(1000)]
    df = spark.createDataFrame(rows, TRIPS).repartition(3)
    options = hudi_options(
        **{
            "hoodie.datasource.write.operation": "bulk_insert",
            "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT",
            "hoodie.parquet.max.file.size": "40000",
            "hoodie.copyonwrite.record.size.estimate": "200",  # 200 records per file
        }
    )
    result = inlet_spark.write(df, path, options)
    assert result is not None
    ranges: dict[str, list[tuple[str, str]]] = {}
    for s in result.metadata.write_stats():
        keys = pq.read_table(str(Path(path) / s.path), columns=["_hoodie_record_key"]).column(0).to_pylist()
        assert keys == sorted(keys), f"{s.path} is not sorted by key"
        ranges.setdefault(s.partition_path, []).append((keys[0], keys[-1]))
    for partition, spans in ranges.items():
        spans.sort()
        assert len(spans) >= 3, partition
        for (_, hi), (lo, _) in itertools.pairwise(spans):
            assert hi < lo, f"overlapping key ranges in {partition}: {spans}"
    assert len(hudi_rows(path)) == 1000


def test_bad_input_is_refused_before_anything_is_written(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")
    inlet_spark.write(spark.createDataFrame([("a", "sf", 1, 10.0)], TRIPS), path, hudi_options())
    table = HudiTable.open(path)
    before = (
        [i.file_name() for i in table.instants()],
        sorted(f.path for f in list_data_files(table.storage)),
    )

    ntz = spark.createDataFrame(
        [("b", "sf", 1, dt.datetime(2024, 1, 1))], "uuid string, city string, ts long, at timestamp_ntz"
    )
    with pytest.raises(SchemaError, match=r"'at'.*timestamp_ntz"):
        inlet_spark.write(ntz, path, hudi_options())
    interval = spark.createDataFrame([("b", "sf", 1)], "uuid string, city string, ts long").withColumn(
        "gap", F.expr("INTERVAL '1' DAY")
    )
    with pytest.raises(SchemaError, match="'gap'"):
        inlet_spark.write(interval, path, hudi_options())
    with pytest.raises(SchemaError, match="'ts'"):  # the ordering field is required
        inlet_spark.write(
            spark.createDataFrame([("b", "sf")], "uuid string, city string"), path, hudi_options()
        )
    with pytest.raises(SchemaError, match="fare"):  # string into a double column
        inlet_spark.write(
            spark.createDataFrame([("b", "sf", 1, "x")], "uuid string, city string, ts long, fare string"),
            path,
            hudi_options(),
        )
    table = HudiTable.open(path)
    assert (
        [i.file_name() for i in table.instants()],
        sorted(f.path for f in list_data_files(table.storage)),
    ) == before

    # a null key is found by the executors while the write is planned, after its instant began
    # (planning must follow the begin, for optimistic concurrency): the instant is rolled back
    null_key = spark.createDataFrame([("c", "sf", 1, 1.0), (None, "sf", 1, 2.0)], TRIPS)
    with pytest.raises(InvalidInputError, match="null or empty"):
        inlet_spark.write(null_key, path, hudi_options())
    table = HudiTable.open(path)
    instants = table.instants()
    assert [i.file_name() for i in instants if i.action != "rollback"] == before[0]
    [rb] = [i for i in instants if i.action == "rollback"]
    assert rb.is_completed
    assert sorted(f.path for f in list_data_files(table.storage)) == before[1]


def test_commit_goes_through_the_given_protocol(spark: SparkSession, tmp_path: Path) -> None:
    """A caller's commit protocol (e.g. the gRPC coordinator's) begins and completes the instant."""
    path = str(tmp_path / "trips")
    inlet_spark.write(spark.createDataFrame([("a", "sf", 1, 10.0)], TRIPS), path, hudi_options())
    calls: list[str] = []

    class Recording(LocalCommitProtocol):
        def begin(self, action: str, requested_content: bytes = b"") -> Instant:
            calls.append(f"begin {action}")
            return super().begin(action, requested_content)

        def set_inflight(self, instant: Instant, content: bytes = b"") -> Instant:
            calls.append("inflight")
            return super().set_inflight(instant, content)

        def complete(self, instant: Instant, metadata: CommitMetadata) -> Instant:
            calls.append(f"complete {len(metadata.write_stats())} file(s)")
            return super().complete(instant, metadata)

    protocol = Recording(Storage(path))
    df = spark.createDataFrame([("a", "sf", 2, 12.0), ("z", "la", 1, 1.0)], TRIPS)
    result = inlet_spark.write(df, path, hudi_options(), commit_protocol=protocol)
    assert result is not None
    assert calls == ["begin commit", "inflight", "complete 2 file(s)"]
    assert HudiTable.open(path).timeline.latest_completed_write().time == result.instant_time  # type: ignore[union-attr]


def test_save_modes_and_partitions_to_delete(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "trips")
    df = spark.createDataFrame([("a", "sf", 1, 10.0), ("b", "nyc", 1, 20.0), ("c", "la", 1, 30.0)], TRIPS)
    inlet_spark.write(df, path, hudi_options(), mode="error")  # creates
    with pytest.raises(TableExistsError):
        inlet_spark.write(df, path, hudi_options(), mode="errorifexists")
    assert inlet_spark.write(df, path, hudi_options(), mode="ignore") is None
    assert len(HudiTable.open(path).timeline.completed_writes()) == 1
    dropped = inlet_spark.write(
        None,
        path,
        hudi_options(
            **{
                "hoodie.datasource.write.operation": "delete_partition",
                "hoodie.datasource.write.partitions.to.delete": "la,nyc",
            }
        ),
    )
    assert dropped is not None and dropped.action == "replacecommit"
    assert [r["uuid"] for r in hudi_rows(path, ["uuid"])] == ["a"]
    replaced = inlet_spark.write(
        spark.createDataFrame([("z", "sea", 1, 1.0)], TRIPS), path, hudi_options(), mode="overwrite"
    )
    assert replaced is not None and replaced.operation == "INSERT_OVERWRITE_TABLE"
    assert hudi_rows(path, ["uuid", "city"]) == [{"uuid": "z", "city": "sea"}]


def test_stray_attempt_files_are_deleted_before_completing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files a failed or duplicate attempt left (marked, not in the stats) never become visible:
    a base file copied under another write token, as a speculative attempt would write it."""
    path = str(tmp_path / "trips")
    inlet_spark.write(spark.createDataFrame([("a", "sf", 1, 10.0)], TRIPS), path, hudi_options())

    real = write_run.write_file_group
    strays: list[str] = []

    def with_duplicate(storage: Storage, ctx: Any, fg: Any, task_id: int, *args: Any, **kw: Any) -> Any:
        stat = real(storage, ctx, fg, task_id, *args, **kw)
        bf = BaseFile.parse(stat.path)
        assert bf is not None
        dup = bf.name.replace(f"_{bf.write_token}_", "_99-9-9_")
        markers.create_marker(storage, ctx.instant_time, fg.partition, dup, "CREATE")
        storage.write_bytes(f"{fg.partition}/{dup}", storage.read_bytes(stat.path))
        strays.append(f"{fg.partition}/{dup}")
        return stat

    # the shared commit step (write.run.run_write) is what removes them; the local engine drives it here
    monkeypatch.setattr(write_run, "write_file_group", with_duplicate)
    HudiTable.open(path).write(pa.table({"uuid": ["b"], "city": ["sf"], "ts": [1], "fare": [2.0]}), "upsert")
    assert strays and not any(Path(path, s).exists() for s in strays)
    assert sorted(r["uuid"] for r in hudi_rows(path, ["uuid"])) == ["a", "b"]


def test_read_returns_what_write_wrote(spark: SparkSession, tmp_path: Path) -> None:
    """``inlet.core.spark.read`` (the ``hudi`` data source) with Hudi's read option names."""
    path = str(tmp_path / "trips")
    first = inlet_spark.write(spark.createDataFrame([("a", "sf", 1, 10.0)], TRIPS), path, hudi_options())
    inlet_spark.write(
        spark.createDataFrame([("a", "sf", 2, 12.0), ("b", "la", 1, 5.0)], TRIPS), path, hudi_options()
    )
    assert first is not None
    now = inlet_spark.read(spark, path, {"hoodie.datasource.query.type": "snapshot"})
    assert sorted((r.uuid, r.fare) for r in now.select("uuid", "fare").collect()) == [("a", 12.0), ("b", 5.0)]
    then = inlet_spark.read(spark, path, {"as.of.instant": first.instant_time})
    assert [(r.uuid, r.fare) for r in then.select("uuid", "fare").collect()] == [("a", 10.0)]


def test_an_arrow_source_is_keyed_in_the_python_worker_that_makes_its_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Rows made on the executors (an ArrowSource: each seed row names trips to make) are written
    as the DataFrame of the same rows would be, and cross into the JVM once: the source and the
    key stage are one Python node of the plan, not two."""
    from pyspark.sql import types as T

    from inlet.core.config import WriteOperation
    from inlet.core.spark import writer

    def make(batches: Any) -> Any:  # a closure: pickled by value to the workers
        for batch in batches:
            for lo, hi in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                ids = list(range(lo, hi))
                yield pa.RecordBatch.from_pydict(
                    {
                        "uuid": [f"u{i}" for i in ids],
                        "city": ["sf" if i % 2 else "nyc" for i in ids],
                        "ts": ids,
                        "fare": [i * 1.5 for i in ids],
                    }
                )

    seed = spark.createDataFrame(spark.sparkContext.parallelize([(0, 3), (3, 7)], 2), "lo long, hi long")
    schema = T.StructType.fromDDL(TRIPS)
    source = inlet_spark.ArrowSource(seed, make, schema)
    options = hudi_options(
        **{
            "hoodie.datasource.write.table.type": "MERGE_ON_READ",
            "hoodie.index.type": "BUCKET",
            "hoodie.bucket.index.num.buckets": "2",
            "hoodie.datasource.write.operation": "insert",
        }
    )
    columns = ["uuid", "city", "ts", "fare", "_hoodie_partition_path"]
    by_source, by_frame = str(tmp_path / "source"), str(tmp_path / "frame")
    assert inlet_spark.write(source, by_source, options) is not None
    assert inlet_spark.write(source.frame(), by_frame, options) is not None
    expected = sorted(
        ({"uuid": f"u{i}", "city": "sf" if i % 2 else "nyc", "ts": i, "fare": i * 1.5} for i in range(7)),
        key=repr,
    )
    assert [{c: r[c] for c in columns[:4]} for r in hudi_rows(by_source, columns)] == expected
    assert hudi_rows(by_source, columns) == hudi_rows(by_frame, columns)

    def python_nodes(given: Any) -> int:
        prepared = writer._prepare(given, HudiTable.open(by_source), WriteOperation.INSERT, {})
        assert prepared.keyed is not None
        return str(prepared.keyed._jdf.queryExecution().executedPlan().toString()).count("MapInArrow")

    assert python_nodes(source.frame()) == 2
    assert python_nodes(source) == 1
