"""Spark reads of Inlet-written tables (``spark.read.format("hudi")``) equal the ``hudi`` reader's rows.

The independent reader is hudi-rs 0.5.0 (``hudi``), with file group reader version 1 and 2. Each
table is written through the core (``HudiTable.write``), then read by Spark and by hudi-rs:
snapshot, read-optimized, as of every completed instant, projected and filtered. Pruning is
proven by the number of Spark input partitions (one per file slice the read touches), not by
timing; column projection by the columns the per-slice read plan asks the files for.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from inlet.core import HudiTable
from inlet.core.read.options import ReadOptions
from inlet.core.schema import META_COLUMNS
from inlet.core.spark import datasource
from inlet.core.spark.datasource import HudiPushdownReader, SlicePartition, SparkRead, register

READER_VERSIONS = ("1", "2")
# meta columns every reader agrees on (file names and seqnos of merged records may differ by reader)
COMPARED_META = ("_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path")


# ---------------------------------------------------------------------- helpers (shared with the other Spark tests)


def hudi_rows(
    path: str | Path, version: str, as_of: str | None = None, **options: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, column names) as hudi-rs reads the table (batch by batch: files may differ in schema)."""
    builder = HudiTableBuilder.from_base_uri(str(path)).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    for k, v in options.items():
        builder = builder.with_hudi_option(k, v)
    opts = HudiReadOptions()
    if as_of is not None:
        opts = opts.with_as_of_timestamp(as_of)
    batches = list(builder.build().read(opts))
    names = list(batches[0].schema.names) if batches else []
    return [r for b in batches for r in b.to_pylist()], names


def spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    return df.toArrow().to_pylist()  # type: ignore[no-any-return]


def normalize(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)  # naive ones are Avro local-timestamps (TimestampNTZ)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


def canon(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    out = [{c: normalize(r.get(c)) for c in columns} for r in rows]
    return sorted(out, key=repr)


def assert_same_rows(
    got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]], columns: Sequence[str], label: str
) -> None:
    a, e = canon(got, columns), canon(want, columns)
    if a != e:
        extra = [r for r in a if r not in e][:5]
        missing = [r for r in e if r not in a][:5]
        raise AssertionError(f"{label}: {len(a)} rows vs {len(e)}\n  unexpected {extra}\n  missing {missing}")


def compared_columns(spark_columns: Sequence[str], hudi_columns: Sequence[str]) -> list[str]:
    """Data columns both readers return, plus the meta columns every reader agrees on."""
    data = [c for c in spark_columns if c not in META_COLUMNS]
    missing = [c for c in data if c not in hudi_columns]
    assert not missing, f"hudi-rs lacks {missing}"
    return [*(c for c in COMPARED_META if c in spark_columns and c in hudi_columns), *data]


def check_equals_hudi(
    spark: SparkSession, path: str | Path, label: str, as_of: str | None = None, **hudi_options: str
) -> list[dict[str, Any]]:
    """Spark's read of ``path`` (as of ``as_of``) equals hudi-rs's, with both reader versions."""
    reader = spark.read.format("hudi")
    if as_of is not None:
        reader = reader.option("as.of.instant", as_of)
    if hudi_options.get("hoodie.read.use.read_optimized.mode") == "true":
        reader = reader.option("hoodie.datasource.query.type", "read_optimized")
    df = reader.load(str(path))
    got = spark_rows(df)
    for version in READER_VERSIONS:
        want, names = hudi_rows(path, version, as_of, **hudi_options)
        if not want:
            assert got == [], f"{label}: hudi-rs v{version} reads nothing, Spark {len(got)} rows"
            continue
        assert_same_rows(got, want, compared_columns(df.columns, names), f"{label} (hudi-rs v{version})")
    return got


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def hudi_spark(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _batch(ids: Sequence[int], city: Sequence[str], ts: int, fare: float) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(city),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "fare": pa.array([fare + i for i in ids], pa.float64()),
        }
    )


def _build(path: Path, table_type: str, partitioned: bool) -> HudiTable:
    """insert 12 rows in 3 partitions, upsert (updates + inserts), delete, upsert again."""
    t = HudiTable.create(
        str(path),
        name="trips",
        record_key="id",
        partition_by="city" if partitioned else None,
        ordering_field="ts",
        table_type=table_type,
    )
    cities = ["sf", "nyc", "la"]
    t.write(_batch(range(12), [cities[i % 3] for i in range(12)], 1, 10.0), operation="insert")
    t.write(_batch([0, 1, 2, 20, 21], ["sf", "nyc", "la", "sf", "nyc"], 2, 100.0), operation="upsert")
    t.delete(pa.table({"id": pa.array([3, 4], pa.int64()), "city": ["sf", "nyc"]}))
    t.write(_batch([1, 5, 22], ["nyc", "la", "la"], 3, 1000.0), operation="upsert")
    return t


TABLE_SHAPES = [
    ("COPY_ON_WRITE", True),
    ("COPY_ON_WRITE", False),
    ("MERGE_ON_READ", True),
    ("MERGE_ON_READ", False),
]


@pytest.fixture(
    scope="module", params=TABLE_SHAPES, ids=lambda p: f"{p[0].lower()}-{'part' if p[1] else 'nopart'}"
)
def table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    table_type, partitioned = request.param
    return _build(tmp_path_factory.mktemp("read") / "trips", table_type, partitioned)


# ---------------------------------------------------------------------- tests


def test_snapshot_equals_hudi_reader_one_partition_per_file_slice(
    hudi_spark: SparkSession, table: HudiTable
) -> None:
    got = check_equals_hudi(hudi_spark, table.base_path, "snapshot")
    # hand-derived: ids 0..11 + 20, 21, 22, minus 3 and 4; id 1 at ts 3
    assert sorted(r["id"] for r in got) == [0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 20, 21, 22]
    assert {r["id"]: r["fare"] for r in got}[1] == 1001.0
    df = hudi_spark.read.format("hudi").load(table.base_path)
    assert df.columns[:5] == list(META_COLUMNS), "meta columns first, as Hudi's Spark reader shows them"
    slices = table.file_system_view().latest_file_slices()
    assert df.rdd.getNumPartitions() == len(slices)
    if table.table_type.value == "MERGE_ON_READ":
        assert any(s.log_files for s in slices), "the MOR table must have log files to merge"


def test_time_travel_equals_hudi_reader_at_every_instant(hudi_spark: SparkSession, table: HudiTable) -> None:
    instants = [i.time for i in table.timeline.completed_writes()]
    assert len(instants) == 4
    counts = [len(check_equals_hudi(hudi_spark, table.base_path, f"as of {t}", as_of=t)) for t in instants]
    assert counts == [12, 14, 12, 13]  # hand-derived from _build


def test_read_optimized_equals_hudi_reader(hudi_spark: SparkSession, table: HudiTable) -> None:
    got = check_equals_hudi(
        hudi_spark, table.base_path, "read_optimized", **{"hoodie.read.use.read_optimized.mode": "true"}
    )
    snapshot = spark_rows(hudi_spark.read.format("hudi").load(table.base_path))
    if any(s.log_files for s in table.file_system_view().latest_file_slices()):
        assert canon(got, ["id", "fare"]) != canon(snapshot, ["id", "fare"]), "read-optimized skips log files"
    else:
        assert canon(got, ["id", "fare"]) == canon(snapshot, ["id", "fare"])


def test_partition_filter_prunes_input_partitions(hudi_spark: SparkSession, table: HudiTable) -> None:
    df = (
        hudi_spark.read.format("hudi")
        .option("inlet.read.filters", json.dumps([["city", "=", "sf"], ["id", "<", 21]]))
        .load(table.base_path)
    )
    got = spark_rows(df)
    want, _ = hudi_rows(table.base_path, "2")
    want = [r for r in want if r["city"] == "sf" and r["id"] < 21]
    assert_same_rows(got, want, ["id", "city", "fare"], "city = sf and id < 21")
    assert {r["id"] for r in got} == {0, 6, 9, 20}
    slices = table.file_system_view().latest_file_slices()
    if table.partition_fields:
        assert df.rdd.getNumPartitions() == len([s for s in slices if s.partition == "sf"]) < len(slices)
    else:
        assert df.rdd.getNumPartitions() == len(slices)  # nothing to prune by path; rows still filtered


def test_pushed_down_where_prunes_input_partitions(hudi_spark: SparkSession, table: HudiTable) -> None:
    def load() -> DataFrame:
        return (
            hudi_spark.read.format("hudi").option("inlet.read.filter.pushdown", "true").load(table.base_path)
        )

    df = load().where(F.col("city") == "sf")
    assert {r["id"] for r in spark_rows(df)} == {0, 6, 9, 20}
    slices = table.file_system_view().latest_file_slices()
    if table.partition_fields:
        assert load().where(F.col("city") == "sf").rdd.getNumPartitions() == len(
            [s for s in slices if s.partition == "sf"]
        )


CONDITIONS = (
    "id >= 5 AND id < 21",
    "city IN ('la', 'nyc') AND ts <> 1",
    "NOT (city IN ('la'))",
    "fare > 100",
    "_hoodie_record_key = '22'",
    "city = 'sf' OR id = 1",
    "id IS NULL OR city = 'la'",
)


@pytest.mark.parametrize("pushdown", [False, True], ids=["default", "pushdown"])
def test_where_clauses_match_spark_semantics(
    hudi_spark: SparkSession, table: HudiTable, pushdown: bool
) -> None:
    """Spark ``where`` on the data source gives what Spark computes on the same rows in memory.

    By default one DataFrame serves every query (the PySpark 4.3 read-plan cache cannot leak
    filters when nothing is pushed); with pushdown each query loads its own DataFrame.
    """
    base = hudi_spark.read.format("hudi").load(table.base_path)
    local = hudi_spark.createDataFrame(base.toPandas())  # the same rows, filtered by Spark alone
    for cond in CONDITIONS:
        df = (
            hudi_spark.read.format("hudi").option("inlet.read.filter.pushdown", "true").load(table.base_path)
            if pushdown
            else base
        )
        got = spark_rows(df.where(cond))
        want = spark_rows(local.where(cond))
        assert_same_rows(got, want, ["id", "city", "ts", "fare"], cond)


def test_projection_reads_only_the_asked_columns(hudi_spark: SparkSession, table: HudiTable) -> None:
    want, _ = hudi_rows(table.base_path, "1")
    by_option = hudi_spark.read.format("hudi").option("inlet.read.columns", "id,fare").load(table.base_path)
    by_schema = hudi_spark.read.format("hudi").schema("fare double, id long").load(table.base_path)
    assert by_option.columns == ["id", "fare"] and by_schema.columns == ["fare", "id"]
    for df in (by_option, by_schema):
        assert_same_rows(spark_rows(df), want, ["id", "fare"], f"projection {df.columns}")
    # the plan each task receives asks the files for these columns only
    reader = HudiPushdownReader(SparkRead(table.base_path, ReadOptions()), by_schema.schema)
    parts = reader.partitions()
    assert parts and all(isinstance(p, SlicePartition) for p in parts)
    assert {tuple(p.plan.read_schema.names) for p in parts} == {("fare", "id")}


def test_projection_of_unknown_column_is_refused(hudi_spark: SparkSession, table: HudiTable) -> None:
    with pytest.raises(Exception, match="unknown column"):
        hudi_spark.read.format("hudi").option("inlet.read.columns", "id,nope").load(table.base_path).collect()


# ---------------------------------------------------------------------- types and options


def test_types_round_trip(hudi_spark: SparkSession, tmp_path: Path) -> None:
    """decimal, timestamp (UTC), date, binary, array, map and struct read with Spark's types and
    equal hudi-rs's values; filters on them are pushed down and stay exact."""
    t = HudiTable.create(str(tmp_path / "types"), name="types", record_key="id", partition_by="day")
    ts = [
        dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC),
        dt.datetime(2024, 6, 30, 23, 59, 59, 123456, tzinfo=dt.UTC),
    ]
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 6, 30)]),
            "amount": pa.array([decimal.Decimal("12.34"), decimal.Decimal("-0.01")], pa.decimal128(10, 2)),
            "at": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "blob": pa.array([b"\x00\x01", b""], pa.binary()),
            "tags": pa.array([[1, 2], []], pa.list_(pa.int64())),
            "attrs": pa.array([[("a", 1)], [("b", 2), ("c", 3)]], pa.map_(pa.string(), pa.int64())),
            "point": pa.array([{"x": 1, "label": "p"}, {"x": None, "label": None}]),
        }
    )
    t.write(data, operation="insert")
    df = hudi_spark.read.format("hudi").option("inlet.read.filter.pushdown", "true").load(t.base_path)
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types["amount"] == DecimalType(10, 2)
    assert types["at"] == TimestampType()
    assert types["day"] == StringType() or types["day"] == DateType()  # partition column keeps its type
    assert types["blob"] == BinaryType()
    assert types["tags"] == ArrayType(LongType(), True)
    assert types["attrs"] == MapType(StringType(), LongType(), True)
    assert types["point"] == StructType(
        [StructField("x", LongType(), True), StructField("label", StringType(), True)]
    )
    got = check_equals_hudi(hudi_spark, t.base_path, "types")
    assert sorted(normalize(r["at"]) for r in got) == ts
    # filters on these types are pushed down (exact values, zoned literals)
    hudi_spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        late = df.where("at > timestamp'2024-01-01 04:00:00'")  # 12:00 UTC, in LA time
        assert [r["id"] for r in spark_rows(late)] == [2]
    finally:
        hudi_spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert [r["id"] for r in spark_rows(df.where("amount < 0"))] == [2]
    assert [r["id"] for r in spark_rows(df.where("amount = 12.34"))] == [1]
    assert [r["id"] for r in spark_rows(df.where(F.col("day") == dt.date(2024, 6, 30)))] == [2]
    assert df.where(F.col("day") == dt.date(2024, 6, 30)).rdd.getNumPartitions() == 1


@pytest.mark.parametrize(
    ("given", "ok"),
    [
        ("yyyy-MM-dd HH:mm:ss", True),
        ("yyyy-MM-dd HH:mm:ss.SSS", True),
        ("yyyyMMddHHmmssSSS", True),
        ("yyyyMMddHHmmss", True),
        ("yyyy-MM-dd", True),
        ("yesterday", False),
    ],
)
def test_as_of_instant_formats(hudi_spark: SparkSession, tmp_path: Path, given: str, ok: bool) -> None:
    """Hudi's as.of.instant formats; a time between two commits shows the earlier one."""
    t = HudiTable.create(str(tmp_path / "tt"), name="tt", record_key="id")
    first = t.write(_batch([1], ["sf"], 1, 0.0), operation="insert").instant_time
    second = t.write(_batch([2], ["sf"], 1, 0.0), operation="insert").instant_time
    moment = dt.datetime.strptime(first, "%Y%m%d%H%M%S%f")
    cut = first  # the instant the text stands for (hand-computed, 17 digits)
    if given == "yyyy-MM-dd HH:mm:ss.SSS":
        text = moment.strftime("%Y-%m-%d %H:%M:%S") + f".{first[14:]}"
    elif given == "yyyyMMddHHmmssSSS":
        text = first
    elif given in ("yyyy-MM-dd HH:mm:ss", "yyyyMMddHHmmss"):
        later = moment.replace(microsecond=0) + dt.timedelta(seconds=1)  # the second after the first commit
        text = later.strftime("%Y-%m-%d %H:%M:%S" if "-" in given else "%Y%m%d%H%M%S")
        cut = later.strftime("%Y%m%d%H%M%S") + "000"
    elif given == "yyyy-MM-dd":
        later = moment + dt.timedelta(days=1)  # midnight after both commits
        text = later.strftime("%Y-%m-%d")
        cut = later.strftime("%Y%m%d") + "000000000"
    else:
        text = given
    reader = hudi_spark.read.format("hudi").option("as.of.instant", text)
    if not ok:
        with pytest.raises(Exception, match=r"invalid as\.of\.instant"):
            reader.load(t.base_path).collect()
        return
    ids = sorted(r["id"] for r in spark_rows(reader.load(t.base_path)))
    assert ids == [i for i, time in ((1, first), (2, second)) if time <= cut]
    assert ids[:1] == [1]


def _incremental(
    spark: SparkSession, path: str, begin: str, end: str | None = None, **options: str
) -> DataFrame:
    reader = (
        spark.read.format("hudi")
        .option("hoodie.datasource.query.type", "incremental")
        .option("hoodie.datasource.read.begin.instanttime", begin)
    )
    if end is not None:
        reader = reader.option("hoodie.datasource.read.end.instanttime", end)
    return reader.options(**options).load(path)


def _hudi_rs_incremental(path: str, begin: str, end: str | None, columns: list[str]) -> list[dict[str, Any]]:
    from hudi import HudiQueryType

    options = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(begin)
    if end is not None:
        options = options.with_end_timestamp(end)
    batches = HudiTableBuilder.from_base_uri(path).build().read(options)
    return canon(pa.Table.from_batches(batches).to_pylist() if batches else [], columns)


def test_incremental_latest_state_equals_hudi_rs_on_every_window(
    hudi_spark: SparkSession, table: HudiTable
) -> None:
    """Hudi's option names; each window reads only the file slices its commits touched."""
    done = [i.completion_time or i.time for i in table.timeline.completed_writes()]
    columns = ["_hoodie_commit_time", "id", "city", "ts", "fare"]
    bounds = ["000", *done]
    for k, begin in enumerate(bounds):
        for end in [*bounds[k + 1 :], None]:
            df = _incremental(hudi_spark, table.base_path, begin, end)
            got = canon(spark_rows(df), columns)
            assert got == _hudi_rs_incremental(table.base_path, begin, end, columns), (begin, end)
    # the last commit (an upsert of 1, 5, 22) touched fewer file slices than the table has
    df = _incremental(hudi_spark, table.base_path, done[-2])
    assert sorted(r["id"] for r in spark_rows(df)) == [1, 5, 22]
    if table.partition_fields:
        assert df.rdd.getNumPartitions() < len(table.file_system_view().latest_file_slices())


def test_incremental_net_change_formats_through_spark(hudi_spark: SparkSession, table: HudiTable) -> None:
    """min_delta and append_only after the first commit, derived from _build by hand: 0, 1, 2 and 5
    updated, 20, 21 and 22 inserted, 3 and 4 deleted; append_only from the start: every insert."""
    first = table.timeline.completed_writes()[0]
    begin = first.completion_time or first.time
    fmt = "hoodie.datasource.query.incremental.format"
    delta = spark_rows(_incremental(hudi_spark, table.base_path, begin, **{fmt: "min_delta"}))
    ops = {op: sorted(int(r["record_key"]) for r in delta if r["op"] == op) for op in "iud"}
    assert ops == {"i": [20, 21, 22], "u": [0, 1, 2, 5], "d": [3, 4]}
    one = next(r for r in delta if r["record_key"] == "1")
    assert (one["before"]["fare"], one["after"]["fare"]) == (11.0, 1001.0)
    appended = _incremental(
        hudi_spark, table.base_path, begin, **{fmt: "append_only", "inlet.read.columns": "id,fare"}
    )
    assert appended.columns == ["id", "fare"]
    assert sorted(r["id"] for r in spark_rows(appended)) == [20, 21, 22]
    # from the start: every row ever inserted, as inserted (3 and 4 deleted, 0, 1, 2, 5 updated since)
    everything = _incremental(
        hudi_spark, table.base_path, "000", **{fmt: "append_only", "inlet.read.columns": "id,fare"}
    )
    assert sorted((r["id"], r["fare"]) for r in spark_rows(everything)) == [
        *((i, 10.0 + i) for i in range(12)),
        (20, 120.0),
        (21, 121.0),
        (22, 1022.0),
    ]
    # Hudi's CDC rows: every change of every commit (id 1, updated twice, counts twice)
    cdc = _incremental(hudi_spark, table.base_path, begin, **{fmt: "cdc"})
    assert cdc.columns == ["op", "ts_ms", "before", "after"]
    changes = [(r["op"], json.loads(r["after"] or r["before"])["id"]) for r in spark_rows(cdc)]
    assert sorted(changes) == sorted(
        [
            ("u", 0),
            ("u", 1),
            ("u", 2),
            ("i", 20),
            ("i", 21),
            ("d", 3),
            ("d", 4),
            ("u", 1),
            ("u", 5),
            ("i", 22),
        ]
    )


def test_incremental_query_mistakes_are_refused_clearly(hudi_spark: SparkSession, table: HudiTable) -> None:
    with pytest.raises(Exception, match=r"needs hoodie\.datasource\.read\.begin\.instanttime"):
        hudi_spark.read.format("hudi").option("hoodie.datasource.query.type", "incremental").load(
            table.base_path
        ).collect()
    with pytest.raises(Exception, match="unknown change format 'full'"):
        _incremental(
            hudi_spark, table.base_path, "000", **{"hoodie.datasource.query.incremental.format": "full"}
        )
    with pytest.raises(Exception, match="apply to incremental queries"):
        hudi_spark.read.format("hudi").option("hoodie.datasource.read.begin.instanttime", "000").load(
            table.base_path
        ).collect()


def test_empty_table_reads_empty(hudi_spark: SparkSession, tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "empty"), name="empty", record_key="id")
    t.write(_batch([1], ["sf"], 1, 0.0), operation="insert")
    t.delete(pa.table({"id": pa.array([1], pa.int64())}))
    df = hudi_spark.read.format("inlet").load(t.base_path)
    assert df.count() == 0 and "fare" in df.columns


# ---------------------------------------------------------------------- df.write.format("hudi")


def _timeline_files(path: str) -> list[str]:
    return sorted(p.name for p in (Path(path) / ".hoodie" / "timeline").iterdir() if p.is_file())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_datasource_insert_then_hudi_reader(
    hudi_spark: SparkSession, tmp_path: Path, table_type: str
) -> None:
    t = _build(tmp_path / "w", table_type, partitioned=True)
    before = {r["id"]: r for r in spark_rows(hudi_spark.read.format("hudi").load(t.base_path))}
    rows = [(100 + i, ["sf", "nyc", "la", "sd"][i % 4], 9, float(i)) for i in range(40)]
    df = hudi_spark.createDataFrame(rows, "id long, city string, ts long, fare double").repartition(3)
    (
        df.write.format("hudi")
        .option("hoodie.datasource.write.operation", "insert")
        .option("hoodie.combine.before.insert", "false")
        .mode("append")
        .save(t.base_path)
    )
    got = check_equals_hudi(hudi_spark, t.base_path, "after data source insert")
    assert {r["id"] for r in got} == set(before) | {100 + i for i in range(40)}
    new = [r for r in got if r["id"] >= 100]
    assert {r["_hoodie_commit_time"] for r in new} == {t.timeline.completed_writes()[-1].time}
    assert len({r["_hoodie_commit_seqno"] for r in new}) == 40
    assert not list((Path(t.base_path) / ".hoodie" / ".temp").glob("*/**/*.marker.*")), "markers left"
    # no stray data files: every data file on disk belongs to a committed write
    view = t.file_system_view()
    visible = {s.base_file.name for s in view.latest_file_slices() if s.base_file} | {
        lf.name for s in view.latest_file_slices() for lf in s.log_files
    }
    newest = t.timeline.completed_writes()[-1].time
    on_disk = {p.name for p in Path(t.base_path).rglob(f"*_{newest}.parquet")}
    assert on_disk <= visible


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"hoodie.datasource.write.operation": "upsert"}, "inlet.core.spark.write"),
        ({"hoodie.datasource.write.operation": "insert"}, "combine.before.insert"),
        (
            {
                "hoodie.datasource.write.operation": "bulk_insert",
                "hoodie.combine.before.insert": "false",
                "hoodie.bulkinsert.sort.mode": "GLOBAL_SORT",
            },
            "GLOBAL_SORT",
        ),
    ],
)
def test_datasource_refuses_what_it_cannot_do(
    hudi_spark: SparkSession, tmp_path: Path, options: dict[str, str], match: str
) -> None:
    t = _build(tmp_path / "r", "COPY_ON_WRITE", partitioned=True)
    timeline = _timeline_files(t.base_path)
    df = hudi_spark.createDataFrame([(1, "sf", 9, 1.0)], "id long, city string, ts long, fare double")
    with pytest.raises(Exception, match=match):
        df.write.format("hudi").options(**options).mode("append").save(t.base_path)
    assert _timeline_files(t.base_path) == timeline, "a refused write leaves the table as it was"


def test_datasource_refuses_unwritable_types(hudi_spark: SparkSession, tmp_path: Path) -> None:
    t = _build(tmp_path / "u", "COPY_ON_WRITE", partitioned=True)
    timeline = _timeline_files(t.base_path)
    df = hudi_spark.sql("SELECT 7L AS id, 'sf' AS city, 9L AS ts, 1.0D AS fare, INTERVAL '1' DAY AS wait")
    with pytest.raises(Exception, match="'wait' of type interval day"):
        df.write.format("hudi").option("hoodie.datasource.write.operation", "insert").option(
            "hoodie.combine.before.insert", "false"
        ).mode("append").save(t.base_path)
    assert _timeline_files(t.base_path) == timeline


def test_read_helper_registers_and_reads(spark: SparkSession, table: HudiTable) -> None:
    df = datasource.read(spark, table.base_path, {"hoodie.datasource.query.type": "snapshot"})
    assert df.count() == 13
