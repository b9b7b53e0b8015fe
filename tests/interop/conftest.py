"""Interop harness: every write goes to an Inlet table and to the pandas model, then both readers check.

After each commit :meth:`Harness.check` verifies, for the snapshot and for every completed
instant so far (time travel), that

- the independent ``hudi`` reader (hudi-rs) with file group reader version 1 and 2, and
- Inlet's own ``HudiTable.read(as_of=...)``

return exactly the model's rows (data columns, ``_hoodie_record_key``,
``_hoodie_partition_path`` and ``_hoodie_commit_time``, order-insensitive), that
``_hoodie_commit_seqno`` is unique within each commit, and that both timelines list the model's
commits with the right action.

Writes run on an engine (``Harness(engine=...)``, :class:`EngineTable`): ``"local"`` (the default,
``HudiTable.write``) or ``"spark"`` (``inlet.core.spark.write`` on the active SparkSession, the
tests/spark fixture's), so the same scenarios prove either engine.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from inlet.core import CommitResult, HudiTable
from inlet.core.keys import TimestampPartitioning

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.hudi_rs import READER_VERSIONS
from support.hudi_rs import read as hudi_read
from support.model import (
    COMMIT_TIME,
    EVENT_TIME,
    PARTITION_PATH,
    RECORD_KEY,
    CowModel,
    ModelConfig,
    hudi_bucket,
)

SEQNO = "_hoodie_commit_seqno"
FILE_NAME = "_hoodie_file_name"
META = (COMMIT_TIME, RECORD_KEY, PARTITION_PATH)
ALL_META = ("_hoodie_commit_time", SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
REPLACE_OPS = {"insert_overwrite", "insert_overwrite_table", "delete_partition"}

# Java date patterns used by the tests -> strftime, written out by hand (not Inlet's translator)
_JAVA_PATTERNS = {"yyyy/MM/dd": "%Y/%m/%d", "yyyy-MM-dd": "%Y-%m-%d", "yyyyMMdd": "%Y%m%d"}


# ---------------------------------------------------------------------- normalisation


def normalize(value: Any) -> Any:
    """A reader value in a form that compares equal across readers (timestamps in UTC)."""
    if isinstance(value, dt.datetime):
        assert value.tzinfo is not None, f"timestamps are UTC instants, got naive {value!r}"
        return value.astimezone(dt.UTC)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, float) and value != value:
        raise AssertionError("NaN in a reader result")
    return value


def canonical(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows restricted to ``columns``, normalised and sorted by (key, partition, commit, values)."""
    out = [{c: normalize(r.get(c)) for c in columns} for r in rows]
    return sorted(out, key=lambda r: (r[RECORD_KEY], r[PARTITION_PATH], r[COMMIT_TIME], repr(r)))


def hudi_timeline(base_path: str, version: str) -> tuple[list[str], list[str]]:
    table = (
        HudiTableBuilder.from_base_uri(base_path)
        .with_hudi_option("hoodie.read.file.group.reader.version", version)
        .build()
    )
    tl = table.get_timeline()
    commits = sorted(i.timestamp for i in tl.get_completed_commits())
    replaces = sorted(i.timestamp for i in tl.get_completed_replacecommits())
    return commits, replaces


# ---------------------------------------------------------------------- engines

ENGINES = ("local", "spark")


def spark_engine_write(
    table: HudiTable,
    data: pa.Table | None,
    operation: str,
    options: Mapping[str, str] | None,
    partitions: Sequence[str] | None,
) -> CommitResult:
    """One write through the Spark engine: the Arrow batch becomes a DataFrame, the operation and
    options go by Apache Hudi's Spark option names."""
    from pyspark.sql import SparkSession

    from inlet.core import spark as inlet_spark

    session = SparkSession.getActiveSession()
    assert session is not None, "engine='spark' needs an active SparkSession (tests/spark's fixture)"
    df = None if data is None else session.createDataFrame(data)
    opts = {**(options or {}), "hoodie.datasource.write.operation": operation}
    result = inlet_spark.write(
        df, table.base_path, opts, partitions=partitions, commit_protocol=table.commit_protocol
    )
    assert result is not None
    return result


class EngineTable:
    """A :class:`HudiTable` whose writes run on an engine; everything else is the table's own."""

    def __init__(self, table: HudiTable, engine: str = "local") -> None:
        assert engine in ENGINES, engine
        self.hudi_table = table
        self.engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hudi_table, name)

    def write(
        self,
        data: pa.Table | None,
        operation: str = "upsert",
        options: Mapping[str, str] | None = None,
        partitions: Sequence[str] | None = None,
    ) -> CommitResult:
        if self.engine == "spark":
            return spark_engine_write(self.hudi_table, data, operation, options, partitions)
        return self.hudi_table.write(data, operation, options=dict(options or {}), partitions=partitions)


# ---------------------------------------------------------------------- the harness


class Harness:
    """One Inlet table and its model; write through :meth:`write` (or the per-operation helpers)."""

    def __init__(
        self,
        path: Path,
        *,
        record_key: str | Sequence[str],
        partition_by: str | Sequence[str] | None = None,
        hive_style: bool = False,
        ordering_field: str | None = None,
        merge_mode: str | None = None,
        index: str = "simple",
        buckets: int = 4,
        timestamp_format: str | None = None,
        schema: pa.Schema | None = None,
        time_travel: bool = True,
        name: str = "interop",
        engine: str = "local",
    ) -> None:
        self.path = str(path)
        keys = (record_key,) if isinstance(record_key, str) else tuple(record_key)
        parts: tuple[str, ...] = (
            ()
            if partition_by is None
            else (partition_by,)
            if isinstance(partition_by, str)
            else tuple(partition_by)
        )
        self.table: Any = EngineTable(
            HudiTable.create(
                self.path,
                name=name,
                record_key=list(keys),
                partition_by=list(parts) or None,
                hive_style=hive_style,
                ordering_field=ordering_field,
                merge_mode=merge_mode,
                index=index,
                buckets=buckets,
                timestamp=TimestampPartitioning("EPOCHMILLISECONDS", timestamp_format)
                if timestamp_format
                else None,
            ),
            engine,
        )
        mode = merge_mode or ("EVENT_TIME_ORDERING" if ordering_field else "COMMIT_TIME_ORDERING")
        self.model = CowModel(
            ModelConfig(
                record_key=keys,
                partition_by=parts,
                hive_style=hive_style,
                merge_mode=mode,
                ordering_field=ordering_field,
                timestamp_strftime=_JAVA_PATTERNS[timestamp_format] if timestamp_format else None,
            )
        )
        self.bucketed = index == "bucket"
        self.buckets = buckets
        self.schema = schema
        self.time_travel = time_travel
        self.operations: dict[str, str] = {}  # instant -> operation
        self.checks = 0

    @property
    def event_time(self) -> bool:
        return self.model.config.merge_mode == EVENT_TIME

    # ------------------------------------------------------------------ writing

    def batch(self, rows: Sequence[Mapping[str, Any]], schema: pa.Schema | None = None) -> pa.Table:
        schema = schema or self.schema
        if schema is None:
            return pa.Table.from_pylist(list(rows))
        return pa.Table.from_pylist(list(rows), schema=schema)

    def write(
        self,
        operation: str,
        rows: Sequence[Mapping[str, Any]] | pa.Table | None,
        *,
        schema: pa.Schema | None = None,
        partitions: Sequence[str] | None = None,
        options: dict[str, str] | None = None,
        check: bool = True,
    ) -> CommitResult:
        data = rows if isinstance(rows, pa.Table) or rows is None else self.batch(rows, schema)
        result = self.table.write(data, operation, options=options, partitions=partitions)
        expected_action = "replacecommit" if operation in REPLACE_OPS else "commit"
        assert result.action == expected_action, (operation, result.action)
        combine = (options or {}).get("hoodie.combine.before.insert", "true").lower() != "false"
        rows_in = data.to_pylist() if data is not None else []
        self.model.apply(operation, rows_in, result.instant_time, partitions, combine_before_insert=combine)
        self.operations[result.instant_time] = operation
        if check:
            self.check()
        return result

    def upsert(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("upsert", rows, **kw)

    def insert(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("insert", rows, **kw)

    def bulk_insert(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("bulk_insert", rows, **kw)

    def delete(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("delete", rows, **kw)

    def insert_overwrite(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("insert_overwrite", rows, **kw)

    def insert_overwrite_table(self, rows: Sequence[Mapping[str, Any]], **kw: Any) -> CommitResult:
        return self.write("insert_overwrite_table", rows, **kw)

    def delete_partition(
        self,
        partitions: Sequence[str] | None = None,
        rows: Sequence[Mapping[str, Any]] | None = None,
        **kw: Any,
    ) -> CommitResult:
        return self.write("delete_partition", rows, partitions=partitions, **kw)

    # ------------------------------------------------------------------ checking

    def expected(self, as_of: str | None = None) -> list[dict[str, Any]]:
        return canonical(self.model.rows(as_of), [*META, *self.model.columns_at(as_of)])

    def check(self) -> None:
        """Every reader, snapshot and as of every completed instant, equals the model."""
        self.checks += 1
        self._check_timeline()
        points: list[str | None] = [None]
        if self.time_travel:
            points += self.model.instants
        else:
            points += self.model.instants[-1:]
        for as_of in points:
            expected = self.expected(as_of)
            columns = self.model.columns_at(as_of)
            where = f"as of {as_of}" if as_of else "snapshot"
            self._check_inlet(as_of, expected, columns, where)
            for version in READER_VERSIONS:
                self._check_hudi(version, as_of, expected, columns, where)

    def _check_timeline(self) -> None:
        completed = [i for i in self.table.timeline.completed_writes()]
        assert [i.time for i in completed] == self.model.instants
        for inst in completed:
            want = "replacecommit" if self.operations[inst.time] in REPLACE_OPS else "commit"
            assert inst.action == want, (inst, self.operations[inst.time])
        want_commits = [i for i in self.model.instants if self.operations[i] not in REPLACE_OPS]
        want_replaces = [i for i in self.model.instants if self.operations[i] in REPLACE_OPS]
        for version in READER_VERSIONS:
            assert hudi_timeline(self.path, version) == (want_commits, want_replaces), f"hudi-rs v{version}"

    def _check_inlet(
        self, as_of: str | None, expected: list[dict[str, Any]], columns: list[str], where: str
    ) -> None:
        got = self.table.read(as_of=as_of)
        assert [c for c in got.column_names if c not in ALL_META] == columns, f"inlet columns, {where}"
        rows = got.to_pylist()
        _check_meta(rows, f"inlet {where}")
        if self.bucketed:
            self._check_buckets(rows, where)
        actual = canonical(rows, [*META, *columns])
        assert actual == expected, _diff(f"inlet reader, {where}", actual, expected)

    def _check_hudi(
        self, version: str, as_of: str | None, expected: list[dict[str, Any]], columns: list[str], where: str
    ) -> None:
        got = hudi_read(self.path, version, as_of)
        label = f"hudi-rs reader v{version}, {where}"
        if got is None:
            assert expected == [], _diff(label, [], expected)
            return
        for missing in (c for c in columns if c not in got.column_names):
            # hudi-rs returns the columns of the files it reads, not the table schema: a column whose
            # every value is null may be absent when no visible file was written with it
            assert all(r[missing] is None for r in expected), f"{label}: column {missing} missing"
            got = got.append_column(missing, pa.nulls(got.num_rows))
        for extra in (c for c in got.column_names if c not in columns and c not in ALL_META):
            # time travel with a later schema may show later columns; they must be empty then
            assert got.column(extra).null_count == got.num_rows, f"{label}: unexpected column {extra}"
        rows = got.to_pylist()
        _check_meta(rows, label)
        # likewise, time travel may show struct fields added later: null, and then left out
        for col, fields in self.model.struct_fields_at(as_of).items():
            for r in rows:
                value = r.get(col)
                if isinstance(value, dict):
                    extra = {k: v for k, v in value.items() if k not in fields}
                    assert all(v is None for v in extra.values()), f"{label}: {col} has {extra}"
                    r[col] = {k: v for k, v in value.items() if k in fields}
        actual = canonical(rows, [*META, *columns])
        assert actual == expected, _diff(label, actual, expected)

    def _check_buckets(self, rows: list[dict[str, Any]], where: str) -> None:
        keys = self.model.config.record_key
        for r in rows:
            values = [_key_text(r[k]) for k in keys]
            bucket = hudi_bucket(values, self.buckets)
            assert r[FILE_NAME][:8] == f"{bucket:08d}", f"bucket of {r[RECORD_KEY]} ({where})"


def _key_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_meta(rows: list[dict[str, Any]], label: str) -> None:
    seen: dict[str, set[str]] = {}
    for r in rows:
        commit, seqno = r[COMMIT_TIME], r[SEQNO]
        assert seqno.startswith(f"{commit}_"), f"{label}: seqno {seqno} of commit {commit}"
        assert seqno not in seen.setdefault(commit, set()), f"{label}: duplicate seqno {seqno}"
        seen[commit].add(seqno)
        assert r[FILE_NAME] and r[FILE_NAME].endswith(".parquet"), f"{label}: file name {r[FILE_NAME]}"


def _diff(label: str, actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> str:
    def ident(r: dict[str, Any]) -> str:
        return repr(r)

    a = {ident(r) for r in actual}
    e = {ident(r) for r in expected}
    extra = [r for r in actual if ident(r) not in e][:5]
    missing = [r for r in expected if ident(r) not in a][:5]
    return (
        f"{label}: {len(actual)} rows vs {len(expected)} expected\n"
        f"  unexpected: {extra}\n  missing:    {missing}"
    )


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """Factory: ``harness(record_key="id", partition_by="p", ...)`` -> a :class:`Harness` on a new table.

    Each call makes a new table directory, so the factory may be called many times in one test
    (e.g. once per Hypothesis example).
    """
    count = 0

    def make(**kwargs: Any) -> Harness:
        nonlocal count
        count += 1
        return Harness(tmp_path / f"table{count}", **kwargs)

    yield make
