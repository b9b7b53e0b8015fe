"""Upsert benchmark: Inlet (Hudi MOR and COW) side by side with delta-rs, PyIceberg and a Parquet floor.

Run ``.venv/bin/python benchmarks/mor_upsert.py --help`` (or ``make bench BENCH_ARGS='...'``).

Every engine runs in its own child process (this script re-invoked with ``--child``), so one
engine's memory high-water mark, imports and caches do not leak into another's. The child
regenerates the same deterministic workload from the seed, times the engine, measures the table
directory after every step and writes its results to a JSON file; the parent checks the snapshot
read against its own bookkeeping of the workload and prints the tables. An engine that raises
is reported as ``error: <one line>`` and the run goes on with the next engine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import _procs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SPARK_ENGINES = ("spark-mor-bucket", "spark-mor-simple", "spark-cow-bucket", "spark-cow-simple")
ENGINES = ("inlet-mor", "inlet-cow", *SPARK_ENGINES, "delta", "iceberg", "floor")
DEFAULT_ENGINES = (
    "inlet-mor",
    "inlet-cow",
    "spark-mor-bucket",
    "spark-cow-bucket",
    "delta",
    "iceberg",
    "floor",
)
DEFAULT_SIZES = (1_000_000, 10_000_000)
DELETE_FLAG = "_delete"  # the batch's delete marker; each engine maps it to its own convention
HUDI_IS_DELETED = "_hoodie_is_deleted"
EPOCH_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z: updated_at = EPOCH + the row's sequence number
CITIES = (
    *("amsterdam", "berlin", "chicago", "delhi", "lagos", "lima", "madrid", "mumbai", "nairobi"),
    *("osaka", "paris", "quito", "rome", "seoul", "sydney", "tokyo", "toronto", "vienna"),
)
WORDS = ("late", "fragile", "gift", "express", "return", "signed", "door", "call", "backorder", "priority")

HELP = f"""\
Workload (identical for every engine, deterministic for a seed):
  A non-partitioned table of N rows: id int64 (record key, 0..N-1), ts int64 (ordering field:
  0 at load, b for batch b), name/city/note strings, amount/score doubles, updated_at timestamp
  (UTC, microseconds; encodes each row version's sequence number, used to verify the read).
  Then --batches batches of --batch-size changes each: 85% updates (keys drawn uniformly over the
  whole live table), 10% inserts (new keys), 5% deletes; 2% of the rows are duplicates -- later
  updates of a key already earlier in the same batch -- counted among the updates. The later
  duplicate wins. ts is the batch number, so duplicates tie on ts and arrival order decides.

Engines ({", ".join(ENGINES)}):
  inlet-mor  Inlet HudiTable MERGE_ON_READ: load with bulk_insert, each batch one upsert with a
             _hoodie_is_deleted flag for the deletes, read with read(meta_columns=False)
  inlet-cow  the same on a COPY_ON_WRITE table (--index and --buckets apply to both Inlet engines)
  spark-<mor|cow>-<bucket|simple>
             Inlet's Spark engine (inlet.core.spark.write, local[--spark-cores] session, Hudi's
             option names) on a MERGE_ON_READ or COPY_ON_WRITE table with that index (--buckets
             buckets): the same load and upserts from a DataFrame made of the Arrow batch; read with
             inlet.core.spark.read(...).toArrow(). The Spark session starts before the load, untimed
  delta      deltalake: write_deltalake, then per batch (deduplicated, later wins) one MERGE:
             when matched and deleted -> delete, when matched -> update all, when not matched and
             not deleted -> insert all; read with DeltaTable.to_pyarrow_table()
  iceberg    PyIceberg SqlCatalog (sqlite) + file warehouse: append, then per batch (deduplicated)
             one transaction: delete(In('id', deleted keys)) and upsert(join_cols=['id']);
             read with scan().to_arrow()
  floor      the physical floor: each batch's changed rows as one Parquet file (no merge, no
             index); the read returns every row ever written (checked against that count)

Reported per size and engine: load seconds, seconds per batch and their mean, snapshot-read
seconds (full table to Arrow), rows read and a check against the expected state (row count,
distinct keys, key sum and row-version checksum), peak RSS of the engine's process (VmHWM; it
includes the generated input data, so the floor is the baseline), bytes on disk after the load,
bytes written per batch (growth of the table directory) and, with several sizes, the growth
ratio of the mean batch time from the smallest to the largest size. A read that does not match
is printed loudly and makes the exit status 1; engine errors are reported and do not.
Timed: what an engine needs to apply a batch (including the dedupe for delta and iceberg); not
timed: generating the data, measuring the directory, verifying the read.

Examples:
  .venv/bin/python benchmarks/mor_upsert.py --sizes 100000 --batch-size 10000      # quick
  .venv/bin/python benchmarks/mor_upsert.py --sizes 1000000 --engines inlet-cow,delta,floor
  make bench BENCH_ARGS='--sizes 1000000,10000000 --index bucket --buckets 16'
"""
NOTES = """\
notes:
  check      the snapshot read against the script's own bookkeeping: row count, distinct ids, id sum and
             an updated_at checksum (catches a stale version winning); floor is checked against every
             row it wrote, since it does not merge
  start RSS  the engine process's memory high-water mark after imports and building the load input
  peak RSS   the high-water mark over the whole run (VmHWM); floor is the baseline for the input data;
             for Spark engines the sum of the Python driver's, the JVM's and live Python workers' marks
  written    growth of the table directory per batch (no engine cleans old file versions in the run)"""

# ---------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class WorkloadSpec:
    size: int
    batches: int
    batch_size: int
    seed: int

    @property
    def inserts(self) -> int:
        return round(self.batch_size * 0.10)

    @property
    def deletes(self) -> int:
        return round(self.batch_size * 0.05)

    @property
    def duplicates(self) -> int:
        return round(self.batch_size * 0.02)

    @property
    def unique_updates(self) -> int:
        """Updates of distinct keys; the duplicates make up the rest of the 85% updates."""
        return self.batch_size - self.inserts - self.deletes - self.duplicates


@dataclass(frozen=True)
class BatchPlan:
    """The keys of one batch in arrival order, with their delete flags and row sequence numbers."""

    number: int  # 1-based; also the batch's ts value
    keys: np.ndarray
    deleted: np.ndarray
    seq: np.ndarray


@dataclass(frozen=True)
class Expectation:
    rows: int
    id_sum: int
    seq_sum: int  # sum over the rows of (updated_at - EPOCH) in microseconds


class Workload:
    """Draws the batches' keys and keeps the bookkeeping of which keys are live.

    Key drawing depends only on the seed and the live set, never on the payload, so the parent
    (which only tracks keys) and every child (which also builds the rows) see the same batches.
    """

    def __init__(self, spec: WorkloadSpec, track_versions: bool = False) -> None:
        self.spec = spec
        capacity = spec.size + spec.batches * spec.inserts
        self.alive = np.zeros(capacity, dtype=bool)
        self.alive[: spec.size] = True
        self.next_key = spec.size
        self.next_seq = spec.size  # the load's rows have seq == id
        self.batch_no = 0
        # seq of each key's winning version (parent only: verifies the read)
        self.version: np.ndarray | None = np.arange(capacity, dtype=np.int64) if track_versions else None
        self.raw = Expectation(spec.size, _arange_sum(spec.size), _arange_sum(spec.size))

    def next_batch(self) -> BatchPlan:
        s = self.spec
        self.batch_no += 1
        rng = np.random.default_rng([s.seed, 1, self.batch_no])
        live = np.flatnonzero(self.alive[: self.next_key])
        drawn = rng.choice(live, s.unique_updates + s.deletes, replace=False)
        inserted = np.arange(self.next_key, self.next_key + s.inserts, dtype=np.int64)
        self.next_key += s.inserts
        keys = np.concatenate([drawn[: s.unique_updates], inserted, drawn[s.unique_updates :]])
        deleted = np.zeros(len(keys), dtype=bool)
        deleted[s.unique_updates + s.inserts :] = True
        order = rng.permutation(len(keys))
        keys, deleted = keys[order], deleted[order]
        # duplicates: later versions of upserted keys, each placed after its original
        n = len(keys)
        originals = rng.choice(np.flatnonzero(~deleted), s.duplicates, replace=False)
        position = np.concatenate(
            [np.arange(n, dtype=np.float64), originals + (1.0 - rng.random(len(originals))) * (n - originals)]
        )
        arrival = np.argsort(position, kind="stable")
        keys = np.concatenate([keys, keys[originals]])[arrival]
        deleted = np.concatenate([deleted, np.zeros(len(originals), dtype=bool)])[arrival]
        seq = np.arange(self.next_seq, self.next_seq + len(keys), dtype=np.int64)
        self.next_seq += len(keys)
        # bookkeeping: the last occurrence of each key wins
        _, first_from_end = np.unique(keys[::-1], return_index=True)
        last = len(keys) - 1 - first_from_end
        self.alive[keys[last]] = ~deleted[last]
        if self.version is not None:
            self.version[keys[last]] = seq[last]
        self.raw = Expectation(
            self.raw.rows + len(keys), self.raw.id_sum + int(keys.sum()), self.raw.seq_sum + int(seq.sum())
        )
        return BatchPlan(self.batch_no, keys, deleted, seq)

    def expected(self) -> Expectation:
        """The merged table's state after the batches drawn so far."""
        if self.version is None:
            raise RuntimeError("the workload was created without version tracking")
        live = np.flatnonzero(self.alive)
        return Expectation(len(live), int(live.sum()), int(self.version[live].sum()))


def _arange_sum(n: int) -> int:
    return n * (n - 1) // 2


def _rows(rng: np.random.Generator, ids: np.ndarray, seq: np.ndarray, ts: int) -> pa.Table:
    n = len(ids)
    note_pool = pa.array(
        [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 8)))) for _ in range(512)], pa.string()
    )
    customer = pa.array(rng.integers(0, 10_000_000, size=n)).cast(pa.string())
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array(np.full(n, ts, dtype=np.int64)),
            "name": pc.binary_join_element_wise("customer-", customer, ""),
            "city": pa.array(CITIES, pa.string()).take(pa.array(rng.integers(0, len(CITIES), size=n))),
            "note": note_pool.take(pa.array(rng.integers(0, len(note_pool), size=n))),
            "amount": pa.array(np.round(rng.gamma(2.0, 40.0, size=n), 2)),
            "score": pa.array(rng.random(n)),
            "updated_at": pa.array(EPOCH_US + seq, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def load_table(spec: WorkloadSpec) -> pa.Table:
    ids = np.arange(spec.size, dtype=np.int64)
    return _rows(np.random.default_rng([spec.seed, 2, 0]), ids, ids, ts=0)


def batch_table(spec: WorkloadSpec, plan: BatchPlan) -> pa.Table:
    rows = _rows(np.random.default_rng([spec.seed, 2, plan.number]), plan.keys, plan.seq, ts=plan.number)
    return rows.append_column(DELETE_FLAG, pa.array(plan.deleted, pa.bool_()))


def keep_last(batch: pa.Table) -> pa.Table:
    """One row per id, the last one in arrival order (MERGE and upsert refuse duplicate keys)."""
    keys = batch.column("id").to_numpy()
    _, first_from_end = np.unique(keys[::-1], return_index=True)
    return batch.take(pa.array(np.sort(len(keys) - 1 - first_from_end)))


# ---------------------------------------------------------------------------------- engines


class Engine(Protocol):
    def load(self, data: pa.Table) -> None: ...

    def apply(self, batch: pa.Table) -> None: ...

    def read(self) -> pa.Table: ...


class InletEngine:
    """Inlet's HudiTable; the same code for Copy-on-Write and Merge-on-Read tables."""

    def __init__(
        self, path: Path, table_type: str, index: str, buckets: int, options: dict[str, str]
    ) -> None:
        from inlet.core import HudiTable

        self.path = path
        self.table_type = table_type
        self.index = index
        self.buckets = buckets
        self.options = options  # Hudi write options, e.g. hoodie.parquet.small.file.limit
        self.hudi = HudiTable
        self.table: Any = None

    def load(self, data: pa.Table) -> None:
        self.table = self.hudi.create(
            str(self.path),
            name="bench",
            record_key="id",
            ordering_field="ts",
            table_type=self.table_type,
            index=self.index,
            buckets=self.buckets,
        )
        flag = pa.array(np.zeros(data.num_rows, dtype=bool))
        self.table.write(data.append_column(HUDI_IS_DELETED, flag), "bulk_insert", self.options)

    def apply(self, batch: pa.Table) -> None:
        names = [HUDI_IS_DELETED if c == DELETE_FLAG else c for c in batch.column_names]
        self.table.write(batch.rename_columns(names), "upsert", self.options)

    def read(self) -> pa.Table:
        table: pa.Table = self.hudi.open(str(self.path)).read(meta_columns=False)
        return table


class SparkEngine:
    """Inlet's Spark engine: ``inlet.core.spark.write`` / ``read`` in a local Spark session."""

    def __init__(
        self, path: Path, table_type: str, index: str, buckets: int, options: dict[str, str]
    ) -> None:
        from pyspark.sql import SparkSession

        import inlet.core.spark as inlet_spark

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        cores = int(options.pop("spark.cores", "2"))
        memory = options.pop("spark.driver.memory", "4g")
        self.spark = (
            SparkSession.builder.master(f"local[{cores}]")
            .appName("inlet-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", memory)
            .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        self.inlet_spark = inlet_spark
        self.path = path
        self.options = {
            "hoodie.table.name": "bench",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.datasource.write.table.type": table_type,
            "hoodie.index.type": index.upper(),
            "hoodie.bucket.index.num.buckets": str(buckets),
            **options,
        }

    def _df(self, data: pa.Table) -> Any:
        names = [HUDI_IS_DELETED if c == DELETE_FLAG else c for c in data.column_names]
        return self.spark.createDataFrame(data.rename_columns(names))

    def load(self, data: pa.Table) -> None:
        flag = pa.array(np.zeros(data.num_rows, dtype=bool))
        df = self._df(data.append_column(HUDI_IS_DELETED, flag))
        self.inlet_spark.write(
            df, str(self.path), {**self.options, "hoodie.datasource.write.operation": "bulk_insert"}
        )

    def apply(self, batch: pa.Table) -> None:
        self.inlet_spark.write(
            self._df(batch), str(self.path), {**self.options, "hoodie.datasource.write.operation": "upsert"}
        )

    def read(self) -> pa.Table:
        df = self.inlet_spark.read(self.spark, str(self.path), {})
        table: pa.Table = df.drop(*[c for c in df.columns if c.startswith("_hoodie")]).toArrow()
        return table


class DeltaEngine:
    def __init__(self, path: Path) -> None:
        import deltalake  # imported here: module import time is not part of the load

        self.path = path
        self.deltalake = deltalake
        self.table: Any = None

    def load(self, data: pa.Table) -> None:
        self.deltalake.write_deltalake(str(self.path), data)
        self.table = self.deltalake.DeltaTable(str(self.path))

    def apply(self, batch: pa.Table) -> None:
        source = keep_last(batch)
        (
            self.table.merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_delete(predicate=f"s.{DELETE_FLAG}")
            .when_matched_update_all(except_cols=[DELETE_FLAG])
            .when_not_matched_insert_all(predicate=f"NOT s.{DELETE_FLAG}", except_cols=[DELETE_FLAG])
            .execute()
        )

    def read(self) -> pa.Table:
        table: pa.Table = self.deltalake.DeltaTable(str(self.path)).to_pyarrow_table()
        return table


class IcebergEngine:
    NAME = "bench.rows"

    def __init__(self, path: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.expressions import In

        self.path = path
        self.sql_catalog = SqlCatalog
        self.in_: Any = In
        self.table: Any = None

    def _catalog(self) -> Any:
        return self.sql_catalog(
            "bench", uri=f"sqlite:///{self.path / 'catalog.db'}", warehouse=(self.path / "warehouse").as_uri()
        )

    def load(self, data: pa.Table) -> None:
        self.path.mkdir(parents=True)
        catalog = self._catalog()
        catalog.create_namespace("bench")
        self.table = catalog.create_table(self.NAME, schema=data.schema)
        self.table.append(data)

    def apply(self, batch: pa.Table) -> None:
        source = keep_last(batch)
        flag = source.column(DELETE_FLAG)
        upserts = source.filter(pc.invert(flag)).drop_columns([DELETE_FLAG])
        deleted = source.filter(flag).column("id").to_pylist()
        with self.table.transaction() as tx:
            if deleted:
                tx.delete(self.in_("id", deleted))
            if upserts.num_rows:
                tx.upsert(upserts, join_cols=["id"])

    def read(self) -> pa.Table:
        table: pa.Table = self._catalog().load_table(self.NAME).scan().to_arrow()
        return table


class FloorEngine:
    """Writes each batch's rows as one Parquet file and nothing else: the cost of the bytes alone."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self.pq = pq
        self.files = 0

    def _write(self, data: pa.Table) -> None:
        self.pq.write_table(data, self.path / f"part-{self.files:05d}.parquet")
        self.files += 1

    def load(self, data: pa.Table) -> None:
        self.path.mkdir(parents=True)
        self._write(data.append_column(DELETE_FLAG, pa.array(np.zeros(data.num_rows, dtype=bool))))

    def apply(self, batch: pa.Table) -> None:
        self._write(batch)

    def read(self) -> pa.Table:
        return self.pq.read_table(self.path)


def make_engine(
    name: str,
    path: Path,
    index: str,
    buckets: int,
    inlet_options: dict[str, str],
    spark_options: dict[str, str] | None = None,
) -> Engine:
    spark_options = spark_options or {}
    if name == "inlet-mor":
        return InletEngine(path, "MERGE_ON_READ", index, buckets, inlet_options)
    if name == "inlet-cow":
        return InletEngine(path, "COPY_ON_WRITE", index, buckets, inlet_options)
    if name in SPARK_ENGINES:
        _, table_type, spark_index = name.split("-")
        options = {**inlet_options, **spark_options}
        kind = "MERGE_ON_READ" if table_type == "mor" else "COPY_ON_WRITE"
        return SparkEngine(path, kind, spark_index, buckets, options)
    if name == "delta":
        return DeltaEngine(path)
    if name == "iceberg":
        return IcebergEngine(path)
    if name == "floor":
        return FloorEngine(path)
    raise ValueError(f"unknown engine {name!r}")


# ---------------------------------------------------------------------------------- child process


@dataclass(frozen=True)
class Job:
    engine: str
    size: int
    batches: int
    batch_size: int
    seed: int
    table_dir: str
    result_file: str
    index: str
    buckets: int
    inlet_options: dict[str, str]
    spark_options: dict[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> WorkloadSpec:
        return WorkloadSpec(self.size, self.batches, self.batch_size, self.seed)


@dataclass
class RunResult:
    engine: str
    size: int
    load_s: float | None = None
    load_bytes: int | None = None  # table directory after the load
    batch_s: list[float] = field(default_factory=list)
    batch_bytes: list[int] = field(default_factory=list)  # directory growth per batch
    read_s: float | None = None
    rows: int | None = None
    distinct_ids: int | None = None
    id_sum: int | None = None
    seq_sum: int | None = None
    start_rss: int | None = None  # bytes: high-water mark once the engine is imported and the input built
    peak_rss: int | None = None  # bytes: high-water mark of the whole run
    error: str | None = None
    phase: str = "setup"  # the step under way (what was running if the process died)
    error_phase: str | None = None
    check: str | None = None  # set by the parent: "ok" or what differs

    @property
    def mean_batch_s(self) -> float | None:
        return sum(self.batch_s) / len(self.batch_s) if self.batch_s else None


def peak_rss() -> int:
    """The resident-set high-water mark in bytes of this process plus its live child processes
    (Spark's JVM and its Python workers); on systems without /proc, this process alone."""
    own = _procs.vm_hwm("self")
    if own == 0:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return own + sum(_procs.vm_hwm(pid) for pid in _procs.descendants(os.getpid()))


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a file being replaced right now
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
    return message if len(message) <= 160 else message[:157] + "..."


def run_child(job: Job) -> int:
    result = RunResult(job.engine, job.size)
    path = Path(job.table_dir)
    tag = f"[{job.engine} {job.size:,}]"

    def save() -> None:
        result.peak_rss = peak_rss()
        tmp = job.result_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(result), f)
        os.replace(tmp, job.result_file)

    def log(message: str) -> None:
        print(f"{tag} {message}", file=sys.stderr, flush=True)

    def start(phase: str) -> None:
        result.phase = phase
        save()

    try:
        engine = make_engine(
            job.engine, path, job.index, job.buckets, dict(job.inlet_options), dict(job.spark_options)
        )
        workload = Workload(job.spec)
        data = load_table(job.spec)
        result.start_rss = peak_rss()
        start("load")
        started = time.perf_counter()
        engine.load(data)
        result.load_s = time.perf_counter() - started
        del data
        result.load_bytes = before = dir_size(path)
        save()
        log(f"load {result.load_s:.2f}s, {result.load_bytes / 2**20:.1f} MiB")
        for _ in range(job.batches):
            batch = batch_table(job.spec, workload.next_batch())
            start(f"batch {workload.batch_no}")
            started = time.perf_counter()
            engine.apply(batch)
            result.batch_s.append(time.perf_counter() - started)
            del batch
            after = dir_size(path)
            result.batch_bytes.append(after - before)
            before = after
            save()
            log(f"{result.phase} {result.batch_s[-1]:.2f}s, +{result.batch_bytes[-1] / 2**20:.1f} MiB")
        start("read")
        started = time.perf_counter()
        table = engine.read()
        result.read_s = time.perf_counter() - started
        ids = table.column("id")
        result.rows = table.num_rows
        result.distinct_ids = pc.count_distinct(ids).as_py()
        result.id_sum = int(pc.sum(ids).as_py() or 0)
        stamps = table.column("updated_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        result.seq_sum = sum(int((chunk.to_numpy() - EPOCH_US).sum()) for chunk in stamps.chunks)
        result.phase = "done"
        log(f"read {result.read_s:.2f}s, {result.rows:,} rows")
    except Exception as exc:
        result.error, result.error_phase = one_line(exc), result.phase
        log(f"error in {result.phase}: {result.error}")
        traceback.print_exc(file=sys.stderr)
    save()
    return 0


# ---------------------------------------------------------------------------------- parent


def run_engine(job: Job, timeout: float | None) -> RunResult:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(asdict(job))]
    proc = subprocess.Popen(cmd, stdout=sys.stderr)  # child output is progress, not results
    timed_out = False
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        code = proc.wait()
    try:
        with open(job.result_file, encoding="utf-8") as f:
            result = RunResult(**json.load(f))
    except (OSError, ValueError):
        result = RunResult(job.engine, job.size)
    if timed_out:
        done = f"{len(result.batch_s)} of {job.batches} batches" if result.load_s is not None else "no load"
        result.error, result.error_phase = f"timeout after {timeout:.0f}s ({done} done)", result.phase
    elif code != 0 and result.error is None:
        hint = " (killed: out of memory?)" if code == -9 else ""
        result.error, result.error_phase = f"child process exited with status {code}{hint}", result.phase
    return result


def check(result: RunResult, merged: Expectation, raw: Expectation) -> str | None:
    """None if the read was not done; "ok"; or what differs from the bookkeeping."""
    if result.rows is None:
        return None
    floor = result.engine == "floor"
    want = raw if floor else merged
    problems = []
    if result.rows != want.rows:
        problems.append(f"rows {result.rows:,} != expected {want.rows:,}")
    if not floor and result.distinct_ids != result.rows:
        problems.append(f"{result.distinct_ids:,} distinct ids in {result.rows:,} rows")
    if result.id_sum != want.id_sum:
        problems.append("id sum differs (wrong key set)")
    if result.seq_sum != want.seq_sum:
        problems.append("updated_at checksum differs (a stale row version won)")
    return "ok" if not problems else "MISMATCH: " + "; ".join(problems)


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], text_last: bool = False) -> str:
    """A plain-text table: numbers right-aligned; the first column (and a text last one) left."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            aligned_left = i == 0 or (text_last and i == len(cells) - 1)
            out.append(cell.ljust(width) if aligned_left else cell.rjust(width))
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def size_report(size: int, args: argparse.Namespace, results: Sequence[RunResult], want: Expectation) -> str:
    batch_cols = args.batches <= 10
    headers = ["engine", "load s"]
    headers += [f"b{i + 1} s" for i in range(args.batches)] if batch_cols else ["min b s", "max b s"]
    headers += ["mean b s", "read s", "rows", "check", "start RSS MiB", "peak RSS MiB", "status"]
    timing = []
    for r in results:
        row = [r.engine, _fmt_s(r.load_s)]
        if batch_cols:
            row += [_fmt_s(r.batch_s[i]) if i < len(r.batch_s) else "-" for i in range(args.batches)]
        else:
            row += [_fmt_s(min(r.batch_s, default=None)), _fmt_s(max(r.batch_s, default=None))]
        rows = "-" if r.rows is None else f"{r.rows:,}"
        status = "ok" if r.error is None else f"error: {r.error} [{r.error_phase}]"
        row += [_fmt_s(r.mean_batch_s), _fmt_s(r.read_s), rows, _check_cell(r.check)]
        row += [_fmt_mib(r.start_rss), _fmt_mib(r.peak_rss), status]
        timing.append(row)
    headers_b = ["engine", "after load MiB"]
    headers_b += [f"b{i + 1} MiB" for i in range(args.batches)] if batch_cols else []
    headers_b += ["mean written MiB", "at end MiB"]
    disk = []
    for r in results:
        row = [r.engine, _fmt_mib(r.load_bytes)]
        if batch_cols:
            row += [
                _fmt_mib(r.batch_bytes[i]) if i < len(r.batch_bytes) else "-" for i in range(args.batches)
            ]
        mean = sum(r.batch_bytes) / len(r.batch_bytes) if r.batch_bytes else None
        end = (r.load_bytes + sum(r.batch_bytes)) if r.load_bytes is not None else None
        disk.append([*row, _fmt_mib(mean), _fmt_mib(end)])
    title = (
        f"== {size:,} rows, {args.batches} batches of {args.batch_size:,} changes "
        f"(expected after the batches: {want.rows:,} rows)"
    )
    return "\n".join(
        [
            title,
            "",
            "time (seconds) and memory",
            render(headers, timing, text_last=True),
            "",
            "bytes on disk (MiB; bN = directory growth in batch N)",
            render(headers_b, disk),
        ]
    )


def _check_cell(check_text: str | None) -> str:
    if check_text is None:
        return "-"
    return "ok" if check_text == "ok" else "MISMATCH"


def growth_report(
    sizes: Sequence[int], engines: Sequence[str], results: dict[tuple[int, str], RunResult]
) -> str:
    small, large = min(sizes), max(sizes)
    headers = ["engine", *(f"mean b s @{s:,}" for s in sizes), f"growth {small:,} -> {large:,}"]
    rows = []
    for engine in engines:
        means = [results[(s, engine)].mean_batch_s if (s, engine) in results else None for s in sizes]
        lo = results[(small, engine)].mean_batch_s if (small, engine) in results else None
        hi = results[(large, engine)].mean_batch_s if (large, engine) in results else None
        growth = f"{hi / lo:.1f}x" if lo and hi else "-"
        rows.append([engine, *(_fmt_s(m) for m in means), growth])
    note = f"(table size grows {large / small:.1f}x; a merge whose cost follows the changes stays near 1x)"
    return "\n".join(["== growth of the mean batch time with the table size", render(headers, rows), note])


def environment() -> str:
    versions = []
    for dist in ("pyarrow", "numpy", "pyspark", "deltalake", "pyiceberg", "inlet-core"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist} (not installed)")
    host = f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"
    return f"{host}; {', '.join(versions)}"


def parse_count(text: str) -> int:
    """A positive row count: 100000, 100_000, 100k, 1M, 1.5m."""
    p = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(p[-1:], 1)
    try:
        value = int(float(p[:-1] if scale > 1 else p) * scale)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a row count: {text!r}") from e
    if value <= 0:
        raise argparse.ArgumentTypeError(f"row counts must be positive: {text!r}")
    return value


def parse_sizes(text: str) -> list[int]:
    sizes = [parse_count(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def parse_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def parse_engines(text: str) -> list[str]:
    engines = [e.strip() for e in text.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    return list(dict.fromkeys(engines))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mor_upsert.py",
        description="Upsert benchmark: Inlet (Hudi MOR/COW) vs delta-rs, PyIceberg and a Parquet floor, "
        "side by side in one run.",
        epilog=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated table sizes in rows (1000000, 1M, 100k); default 1000000,10000000",
    )
    parser.add_argument("--batches", type=int, default=5, help="change batches per size (default 5)")
    parser.add_argument(
        "--batch-size", type=parse_count, default=100_000, help="changes per batch (default 100000)"
    )
    parser.add_argument(
        "--engines",
        type=parse_engines,
        default=list(DEFAULT_ENGINES),
        help=f"comma-separated engines to run, in this order, from {', '.join(ENGINES)} "
        f"(default {','.join(DEFAULT_ENGINES)})",
    )
    parser.add_argument(
        "--index", choices=("simple", "bucket"), default="simple", help="Inlet index (default simple)"
    )
    parser.add_argument(
        "--buckets", type=int, default=4, help="buckets of the Inlet bucket index (default 4, as Inlet)"
    )
    parser.add_argument(
        "--inlet-option",
        type=parse_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hudi write option for both Inlet engines (repeatable), e.g. hoodie.parquet.small.file.limit=0",
    )
    parser.add_argument(
        "--spark-cores", type=int, default=2, help="local[N] cores of Spark engines (default 2)"
    )
    parser.add_argument(
        "--spark-driver-memory", default="4g", help="spark.driver.memory of Spark engines (default 4g)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="directory for the tables (kept; each run in a new run-<time> subfolder); "
        "default a temporary directory, removed at the end",
    )
    parser.add_argument("--seed", type=int, default=42, help="workload seed (default 42)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=0,
        help="seconds per engine and size before its process is killed; partial results are "
        "reported (default 0: no limit)",
    )
    parser.add_argument("--json", type=Path, help="also write every result (raw numbers) to this JSON file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.child:
        return run_child(Job(**json.loads(args.child)))
    if args.batches < 1 or args.batch_size < 100:
        parser.error("--batches must be >= 1 and --batch-size >= 100")
    if args.buckets < 1:
        parser.error("--buckets must be >= 1")
    too_small = [s for s in args.sizes if s < args.batch_size]
    if too_small:
        parser.error(f"sizes {too_small} are smaller than --batch-size {args.batch_size}")

    temporary = args.workdir is None
    root = Path(tempfile.mkdtemp(prefix="inlet-bench-")) if temporary else args.workdir.resolve()
    run_dir = root if temporary else root / time.strftime("run-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    print(environment())
    print(f"tables under {run_dir}{' (temporary)' if temporary else ''}; seed {args.seed}", flush=True)

    results: dict[tuple[int, str], RunResult] = {}
    mismatches: list[str] = []
    try:
        for size in args.sizes:
            spec = WorkloadSpec(size, args.batches, args.batch_size, args.seed)
            bookkeeping = Workload(spec, track_versions=True)
            for _ in range(args.batches):
                bookkeeping.next_batch()
            merged, raw = bookkeeping.expected(), bookkeeping.raw
            del bookkeeping
            for engine in args.engines:
                table_dir = run_dir / str(size) / engine
                table_dir.parent.mkdir(parents=True, exist_ok=True)
                job = Job(
                    engine=engine,
                    size=size,
                    batches=args.batches,
                    batch_size=args.batch_size,
                    seed=args.seed,
                    table_dir=str(table_dir),
                    result_file=str(run_dir / f"result-{size}-{engine}.json"),
                    index=args.index,
                    buckets=args.buckets,
                    inlet_options=dict(args.inlet_option),
                    spark_options={
                        "spark.cores": str(args.spark_cores),
                        "spark.driver.memory": args.spark_driver_memory,
                    },
                )
                print(f"-- {engine} @ {size:,} rows", file=sys.stderr, flush=True)
                result = run_engine(job, args.timeout or None)
                result.check = check(result, merged, raw)
                if result.check not in (None, "ok"):
                    mismatches.append(f"{engine} @ {size:,}: {result.check}")
                    print(f"!!! {engine} @ {size:,}: {result.check}", file=sys.stderr, flush=True)
                results[(size, engine)] = result
                if temporary:
                    shutil.rmtree(table_dir, ignore_errors=True)  # bound disk use on long runs
            print()
            print(size_report(size, args, [results[(size, e)] for e in args.engines], merged), flush=True)
        if len(args.sizes) > 1:
            print()
            print(growth_report(args.sizes, args.engines, results))
        print()
        print(NOTES)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results.values()], indent=1), "utf-8")
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    if mismatches:
        banner = "!" * 100
        print("\n".join(["", banner, "READ MISMATCHES:", *(f"  {m}" for m in mismatches), banner]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
