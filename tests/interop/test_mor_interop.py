"""Inlet's Merge-on-Read writes read back by the independent hudi-rs reader, against a model.

Every write goes to an Inlet MOR table and to :class:`MorModel`, a dict model of what a merged
(snapshot) read of a Hudi MOR table returns. hudi-rs (file group reader v2, and v1 where it can
read the table) must return exactly the model's rows for the snapshot and as of every completed
deltacommit; hudi-rs's file slices must be Inlet's.

The model keeps *tombstones*: on MOR a delete is a log record, not a removed row, so until a
compaction it takes part in merging. A ``_hoodie_is_deleted`` record keeps its ordering value
(under EVENT_TIME_ORDERING a later upsert with a lower ordering value loses to it); a delete of the
``delete`` operation carries Hudi's default ordering value and deletes whatever was written before
it. (A record written after such a delete with an ordering value *lower* than an earlier version
of the key is ambiguous across Hudi readers; the model refuses to model it.)

Known hudi-rs 0.5 reader-v1 limitations, checked as such: it cannot read log-only file groups (the
bucket index writes them, as Apache Hudi does) and it merges by the ordering field whatever the
merge mode (so COMMIT_TIME_ORDERING tables are compared with reader v2 only).
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from support.model import (
    COMMIT_TIME,
    COMMIT_TIME_ORDERING,
    EVENT_TIME,
    IS_DELETED,
    PARTITION_PATH,
    RECORD_KEY,
    CowModel,
    ModelConfig,
    hudi_bucket,
)

from inlet.core import CommitResult, HudiTable, avro, faults
from inlet.core.file_group.view import LogFile, list_data_files
from inlet.core.timeline.instant import Instant, State

META = (COMMIT_TIME, RECORD_KEY, PARTITION_PATH)
SEQNO = "_hoodie_commit_seqno"
FILE_NAME = "_hoodie_file_name"
ALL_META = (COMMIT_TIME, SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
REPLACE_OPS = {"insert_overwrite", "insert_overwrite_table", "delete_partition"}
REPO_ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC


# ================================================================================ the model


@dataclass
class Entry:
    """One stored record of the model: a live row or a tombstone (``tomb``: "event" or "commit")."""

    key: str
    part: str
    commit: str
    row: dict[str, Any]
    ordering: tuple[bool, Any]
    max_ordering: tuple[bool, Any]
    tomb: str | None = None


@dataclass
class MorModel:
    config: ModelConfig
    bucket: bool = False
    entries: list[Entry] = field(default_factory=list)
    base_rows: list[Entry] = field(default_factory=list)  # read-optimized view (small files off)
    history: list[tuple[str, list[Entry], list[Entry], list[str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cow = CowModel(self.config)  # keys, partition paths, batch combining, columns

    @property
    def columns(self) -> list[str]:
        return self.cow.columns

    def _ord(self, row: Mapping[str, Any]) -> tuple[bool, Any]:
        f = self.config.ordering_field
        v = row.get(f) if f else None
        return (v is not None, v)

    def _wins(self, rec: Mapping[str, Any], e: Entry) -> bool:
        if self.config.merge_mode == COMMIT_TIME_ORDERING:
            return True
        if e.tomb == "commit":
            assert self._ord(rec) >= e.max_ordering, (
                f"ambiguous test: {e.key} rewritten after a delete with a lower ordering value than "
                "an earlier version"
            )
            return True
        return self._ord(rec) >= e.ordering

    def _entry(self, rec: Mapping[str, Any], instant: str, tomb: str | None = None) -> Entry:
        row = {c: rec.get(c) for c in self.columns}
        o = self._ord(rec)
        return Entry(rec[RECORD_KEY], rec[PARTITION_PATH], instant, row, o, o, tomb)

    def upsert(self, rows: Sequence[Mapping[str, Any]], instant: str) -> None:
        self.cow._evolve(rows)
        for rec in self.cow._combine(rows):
            deleted = bool(rec.get(IS_DELETED))
            matched = [e for e in self.entries if (e.key, e.part) == (rec[RECORD_KEY], rec[PARTITION_PATH])]
            if not matched:
                if not deleted:
                    self.entries.append(self._entry(rec, instant))
                    self.base_rows.append(self._entry(rec, instant))
                continue
            for i, e in enumerate(self.entries):
                if (e.key, e.part) == (rec[RECORD_KEY], rec[PARTITION_PATH]) and self._wins(rec, e):
                    new = self._entry(rec, instant, "event" if deleted else None)
                    new.max_ordering = max(e.max_ordering, new.ordering)
                    self.entries[i] = new
        self._commit(instant)

    def delete(self, rows: Sequence[Mapping[str, Any]], instant: str) -> None:
        idents = {(self.cow.record_key(r), self.cow.partition_path(r)) for r in rows}
        for e in self.entries:
            if (e.key, e.part) in idents:
                e.tomb, e.commit = "commit", instant
        self._commit(instant)

    def insert(self, rows: Sequence[Mapping[str, Any]], instant: str) -> None:
        if self.bucket:  # the bucket index sends a key to its file group, where readers merge it
            self.upsert(rows, instant)
            return
        self.cow._evolve(rows)
        for rec in self.cow._combine(rows):
            assert not any(e.key == rec[RECORD_KEY] for e in self.entries), "MOR duplicates are not modelled"
            if not rec.get(IS_DELETED):
                self.entries.append(self._entry(rec, instant))
                self.base_rows.append(self._entry(rec, instant))
        self._commit(instant)

    def replace(
        self, op: str, rows: Sequence[Mapping[str, Any]], instant: str, partitions: Sequence[str]
    ) -> None:
        self.cow._evolve(rows)
        combined = self.cow._combine(rows)
        if op == "insert_overwrite_table":
            gone = {e.part for e in self.entries} | {e.part for e in self.base_rows}
        else:
            gone = {r[PARTITION_PATH] for r in combined} | set(partitions)
        self.entries = [e for e in self.entries if e.part not in gone]
        self.base_rows = [e for e in self.base_rows if e.part not in gone]
        if op != "delete_partition":
            fresh = [self._entry(r, instant) for r in combined if not r.get(IS_DELETED)]
            self.entries.extend(fresh)
            self.base_rows.extend(copy.deepcopy(fresh))
        self._commit(instant)

    def _commit(self, instant: str) -> None:
        assert not self.history or instant > self.history[-1][0]
        self.history.append(
            (instant, copy.deepcopy(self.entries), copy.deepcopy(self.base_rows), list(self.columns))
        )

    @property
    def instants(self) -> list[str]:
        return [h[0] for h in self.history]

    def rows(
        self, as_of: str | None = None, read_optimized: bool = False
    ) -> tuple[list[dict[str, Any]], list[str]]:
        visible = [h for h in self.history if as_of is None or h[0] <= as_of]
        if not visible:
            return [], []
        _, entries, base_rows, columns = visible[-1]
        chosen = base_rows if read_optimized else [e for e in entries if e.tomb is None]
        out = [{COMMIT_TIME: e.commit, RECORD_KEY: e.key, PARTITION_PATH: e.part, **e.row} for e in chosen]
        return out, columns


# ================================================================================ the harness


def normalize(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        assert value.tzinfo is not None, f"timestamps are UTC instants, got {value!r}"
        return value.astimezone(UTC)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def canonical(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    out = [{c: normalize(r.get(c)) for c in columns} for r in rows]
    return sorted(out, key=lambda r: (r[RECORD_KEY], r[PARTITION_PATH], r[COMMIT_TIME], repr(r)))


def hudi_table(path: str, version: str, read_optimized: bool = False) -> Any:
    b = HudiTableBuilder.from_base_uri(path).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    if read_optimized:
        b = b.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    return b.build()


def hudi_read(
    path: str, version: str, as_of: str | None = None, read_optimized: bool = False
) -> pa.Table | None:
    options = HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = hudi_table(path, version, read_optimized).read(options)
    if not batches:
        return None
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")


def _diff(label: str, actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> str:
    a, e = {repr(r) for r in actual}, {repr(r) for r in expected}
    extra = [r for r in actual if repr(r) not in e][:5]
    missing = [r for r in expected if repr(r) not in a][:5]
    return f"{label}: {len(actual)} rows vs {len(expected)}\n  unexpected: {extra}\n  missing:    {missing}"


class MorHarness:
    def __init__(
        self,
        path: Path,
        *,
        partitioned: bool = True,
        merge_mode: str = EVENT_TIME,
        index: str = "simple",
        buckets: int = 3,
        block_format: str = "avro",
        small_files: bool = True,
        schema: pa.Schema | None = None,
    ) -> None:
        self.path = str(path)
        parts = ("p",) if partitioned else ()
        self.table = HudiTable.create(
            self.path,
            name="mor",
            record_key="id",
            partition_by=list(parts) or None,
            ordering_field="ts",
            merge_mode=merge_mode,
            table_type="MERGE_ON_READ",
            index=index,
            buckets=buckets,
        )
        cfg = ModelConfig(record_key=("id",), partition_by=parts, merge_mode=merge_mode, ordering_field="ts")
        self.model = MorModel(cfg, bucket=index == "bucket")
        self.bucketed = index == "bucket"
        self.buckets = buckets
        self.schema = schema
        self.options = {"hoodie.logfile.data.block.format": block_format}
        if not small_files:
            self.options["hoodie.parquet.small.file.limit"] = "0"
        self.actions: dict[str, str] = {}
        self.results: list[CommitResult] = []
        # hudi-rs 0.5 reader v1 failures that are its own limitations, not the table's
        self.v1_known_errors: tuple[str, ...] = ()
        self.compare_v1 = True
        if self.bucketed:  # log-only file groups: v1 takes the schema from a base file
            self.v1_known_errors += ('Unable to get field named "ts"',)

    def write(
        self,
        op: str,
        rows: Sequence[Mapping[str, Any]] | None,
        partitions: Sequence[str] | None = None,
    ) -> CommitResult:
        data = (
            None
            if rows is None
            else pa.Table.from_pylist(list(rows), schema=self.schema if op != "delete" else None)
        )
        result = self.table.write(data, op, options=self.options, partitions=partitions)
        want = "replacecommit" if op in REPLACE_OPS else "deltacommit"
        assert result.action == want, (op, result.action)
        rows = list(rows or [])
        if op in REPLACE_OPS:
            self.model.replace(op, rows, result.instant_time, list(partitions or []))
        elif op in ("insert", "bulk_insert"):
            self.model.insert(rows, result.instant_time)
        else:
            getattr(self.model, op)(rows, result.instant_time)
        self.actions[result.instant_time] = result.action
        self.results.append(result)
        return result

    # ------------------------------------------------------------------ checks

    def check(self, read_optimized: bool = False) -> None:
        self._check_timeline()
        self._check_file_slices()
        for as_of in [None, *self.model.instants]:
            expected, columns = self.model.rows(as_of, read_optimized)
            want = canonical(expected, [*META, *columns])
            for version in ("2", "1"):
                label = f"hudi-rs v{version} {'RO ' if read_optimized else ''}as of {as_of or 'latest'}"
                if version == "1" and not read_optimized and not self._v1_can_read():
                    continue
                try:
                    got = hudi_read(self.path, version, as_of, read_optimized)
                except Exception as e:
                    if version == "1" and any(k in str(e) for k in self.v1_known_errors):
                        continue
                    raise
                self._compare(label, got, want, columns)
            # Inlet's own merged reader must give the same rows
            query = "read_optimized" if read_optimized else "snapshot"
            mine = HudiTable.open(str(self.path)).read(as_of=as_of, query_type=query)
            self._compare(f"inlet {query} as of {as_of or 'latest'}", mine, want, columns)

    def _v1_can_read(self) -> bool:
        # hudi-rs reader v1 merges logs by the ordering field whatever the merge mode
        return self.compare_v1 and self.model.config.merge_mode == EVENT_TIME

    def _compare(
        self, label: str, got: pa.Table | None, want: list[dict[str, Any]], columns: list[str]
    ) -> None:
        if got is None:
            assert want == [], _diff(label, [], want)
            return
        for missing in (c for c in columns if c not in got.column_names):
            assert all(r[missing] is None for r in want), f"{label}: column {missing} missing"
            got = got.append_column(missing, pa.nulls(got.num_rows))
        for extra in (c for c in got.column_names if c not in columns and c not in ALL_META):
            assert got.column(extra).null_count == got.num_rows, f"{label}: unexpected column {extra}"
        rows = got.to_pylist()
        seen: set[str] = set()
        for r in rows:
            assert r[SEQNO].startswith(f"{r[COMMIT_TIME]}_"), f"{label}: seqno {r[SEQNO]}"
            assert r[SEQNO] not in seen, f"{label}: duplicate seqno {r[SEQNO]}"
            seen.add(r[SEQNO])
            if self.bucketed:
                bucket = hudi_bucket([str(r["id"])], self.buckets)
                assert r[FILE_NAME][:8] == f"{bucket:08d}", f"{label}: bucket of {r[RECORD_KEY]}"
        actual = canonical(rows, [*META, *columns])
        assert actual == want, _diff(label, actual, want)

    def _check_timeline(self) -> None:
        tl = self.table.timeline
        assert [i.time for i in tl.completed_writes()] == self.model.instants
        assert not tl.pending()
        deltas = sorted(t for t, a in self.actions.items() if a == "deltacommit")
        replaces = sorted(t for t, a in self.actions.items() if a == "replacecommit")
        hudi_tl = hudi_table(self.path, "2").get_timeline()
        assert sorted(i.timestamp for i in hudi_tl.get_completed_deltacommits()) == deltas
        assert sorted(i.timestamp for i in hudi_tl.get_completed_replacecommits()) == replaces
        assert list(hudi_tl.get_completed_commits()) == []

    def _check_file_slices(self) -> None:
        """hudi-rs's latest file slices are the ones Inlet's writer sees (base file and log files)."""
        mine = {
            (
                s.partition,
                s.file_id,
                s.base_file.name if s.base_file else "",
                tuple(lf.name for lf in s.log_files),
            )
            for s in self.table.file_system_view().latest_file_slices()
        }
        theirs = {
            (s.partition_path, s.file_id, s.base_file_name, tuple(s.log_file_names))
            for s in hudi_table(self.path, "2").get_file_slices()
        }
        assert mine == theirs


@pytest.fixture
def mor(tmp_path: Path) -> Any:
    count = 0

    def make(**kwargs: Any) -> MorHarness:
        nonlocal count
        count += 1
        return MorHarness(tmp_path / f"t{count}", **kwargs)

    return make


def row(
    i: int, ts: int | None, tag: str, p: str | None = None, deleted: bool | None = None
) -> dict[str, Any]:
    r: dict[str, Any] = {"id": i, "ts": ts, "v": f"{tag}{i}"}
    if p is not None:
        r["p"] = p
    if deleted is not None:
        r[IS_DELETED] = deleted
    return r


def _p(partitioned: bool, i: int) -> str | None:
    return ("x", "y")[i % 2] if partitioned else None


def run_event_time_story(h: MorHarness, partitioned: bool) -> None:
    """Updates (in and out of order), duplicate keys, deletes of both kinds, re-inserts, inserts."""
    p = lambda i: _p(partitioned, i)  # noqa: E731
    h.write("insert", [row(i, 10, "a", p(i), False) for i in range(1, 9)])
    h.write(
        "upsert",
        [
            row(1, 11, "b", p(1), False),  # newer: wins
            row(2, 9, "b", p(2), False),  # older ordering value: the stored record stays
            row(3, 12, "b", p(3), False),  # a duplicate key in the batch: the larger value wins
            row(3, 11, "c", p(3), False),
            row(4, 10, "b", p(4), False),  # equal ordering value: the later write wins
            row(9, 10, "b", p(9), False),  # a new key
        ],
    )
    h.write("delete", [{"id": i, **({"p": p(i)} if partitioned else {})} for i in (5, 6, 99)])
    h.write(
        "upsert",
        [
            row(7, 15, "d", p(7), True),  # soft delete with a newer ordering value: deletes
            row(8, 5, "d", p(8), True),  # soft delete with an older one: loses
            row(1, 11, "d", p(1), True),  # equal: the later delete wins
            row(3, 13, "d", p(3), False),
            row(2, 12, "d", p(2), False),
        ],
    )
    h.write(
        "upsert",
        [
            row(5, 20, "e", p(5), False),  # back after the delete operation
            row(7, 14, "e", p(7), False),  # loses to the soft delete's ordering value 15
            row(8, 16, "e", p(8), False),
            row(10, 1, "e", p(10), False),
        ],
    )
    h.write("delete", [{"id": i, **({"p": p(i)} if partitioned else {})} for i in (3, 10)])
    h.write("insert", [row(i, 1, "f", p(i), False) for i in (11, 12)])
    h.write("upsert", [row(7, 16, "g", p(7), False), row(11, 2, "g", p(11), False)])


# ================================================================================ tests


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "non-partitioned"])
def test_event_time_ordering(mor: Any, block_format: str, partitioned: bool) -> None:
    h = mor(partitioned=partitioned, block_format=block_format)
    run_event_time_story(h, partitioned)
    # updates went to log files: both data block kinds and delete blocks were written
    logs = [s for r in h.results for s in r.metadata.write_stats() if LogFile.parse(s.path)]
    assert logs and all(s.log_files == [LogFile.parse(s.path).name] for s in logs)  # type: ignore[union-attr]
    assert any(s.num_deletes for s in logs) and any(s.num_update_writes for s in logs)
    h.check()


def test_commit_time_ordering(mor: Any) -> None:
    h = mor(merge_mode=COMMIT_TIME_ORDERING, small_files=False)
    p = lambda i: _p(True, i)  # noqa: E731
    h.write("upsert", [row(i, 10, "a", p(i), False) for i in range(1, 7)])
    h.write(
        "upsert", [row(1, 5, "b", p(1), False), row(2, 50, "b", p(2), False), row(2, 1, "c", p(2), False)]
    )
    h.write("upsert", [row(3, 1, "d", p(3), True), row(1, 99, "d", p(1), False)])
    h.write("delete", [{"id": 4, "p": p(4)}])
    h.write("upsert", [row(4, 0, "e", p(4), False), row(3, 0, "e", p(3), False), row(5, 1, "e", p(5), True)])
    h.check()


@pytest.mark.parametrize(
    ("merge_mode", "block_format"), [(EVENT_TIME, "avro"), (COMMIT_TIME_ORDERING, "parquet")]
)
def test_bucket_index_appends_to_log_only_file_groups(mor: Any, merge_mode: str, block_format: str) -> None:
    h = mor(index="bucket", buckets=3, merge_mode=merge_mode, block_format=block_format)
    p = lambda i: _p(True, i)  # noqa: E731
    first = h.write("insert", [row(i, 10, "a", p(i), False) for i in range(1, 10)])
    assert all(s.base_file == "" and LogFile.parse(s.path) for s in first.metadata.write_stats())
    assert sum(s.num_inserts for s in first.metadata.write_stats()) == 9
    h.write(
        "upsert", [row(1, 11, "b", p(1), False), row(2, 12, "b", p(2), False), row(20, 1, "b", p(20), False)]
    )
    h.write("delete", [{"id": 3, "p": p(3)}, {"id": 4, "p": p(4)}])
    h.write(
        "upsert", [row(5, 30, "c", p(5), True), row(6, 31, "c", p(6), False), row(3, 40, "c", p(3), False)]
    )
    h.write("insert", [row(7, 50, "d", p(7), False), row(21, 1, "d", p(21), False)])
    slices = h.table.file_system_view().latest_file_slices()
    assert slices and all(s.base_file is None for s in slices)
    assert {int(s.file_id[:8]) for s in slices} <= set(range(3))
    h.check()


def test_bucket_index_bulk_insert_writes_base_files(mor: Any) -> None:
    """Apache Hudi's bucket bulk insert writes a new bucket's records as a base file (its row
    create handle), also on Merge-on-Read; later upserts append logs to those file groups, and a
    bulk insert into buckets that exist appends there too."""
    h = mor(index="bucket", buckets=3)
    p = lambda i: _p(True, i)  # noqa: E731
    first = h.write("bulk_insert", [row(i, 10, "a", p(i), False) for i in range(1, 13)])
    stats = first.metadata.write_stats()
    assert stats and all(s.path.endswith(".parquet") and not s.log_files for s in stats)
    assert sum(s.num_inserts for s in stats) == 12
    with_base = {s.file_id for s in stats}
    h.write(
        "upsert", [row(1, 11, "b", p(1), False), row(2, 12, "b", p(2), True), row(30, 1, "b", p(30), False)]
    )
    h.write("bulk_insert", [row(i, 20, "c", p(i), False) for i in (40, 41, 42)])
    slices = h.table.file_system_view().latest_file_slices()
    assert with_base <= {s.file_id for s in slices if s.base_file is not None}
    h.check()


@pytest.mark.parametrize("index", ["simple", "bucket"])
def test_replace_operations_replace_file_groups_with_logs(mor: Any, index: str) -> None:
    h = mor(index=index, small_files=False)
    p = lambda i: ("x", "y", "z")[i % 3]  # noqa: E731
    h.write("upsert", [row(i, 10, "a", p(i), False) for i in range(1, 10)])
    h.write("upsert", [row(i, 11, "b", p(i), False) for i in (1, 2, 3)])
    h.write("insert_overwrite", [row(i, 1, "c", "y", False) for i in (31, 32)])
    h.write("upsert", [row(i, 12, "d", p(i), False) for i in (3, 31, 6)])
    h.write("delete_partition", None, partitions=["z"])
    h.write("upsert", [row(4, 13, "e", "x", False), row(40, 1, "e", "z", False)])
    h.write("insert_overwrite_table", [row(i, 1, "f", p(i), False) for i in (50, 51)])
    h.write("upsert", [row(50, 2, "g", p(50), False)])
    h.check()


def test_read_optimized_reads_base_files_only(mor: Any) -> None:
    h = mor(small_files=False)
    p = lambda i: _p(True, i)  # noqa: E731
    h.write("insert", [row(i, 10, "a", p(i), False) for i in range(1, 7)])
    h.write("upsert", [row(1, 11, "b", p(1), False), row(7, 1, "b", p(7), False)])
    h.write("delete", [{"id": 2, "p": p(2)}])
    h.write("upsert", [row(3, 12, "c", p(3), True), row(8, 1, "c", p(8), False)])
    h.write("bulk_insert", [row(i, 1, "d", p(i), False) for i in (20, 21, 22)])
    h.check(read_optimized=True)
    h.check()


def test_small_file_groups_without_logs_take_inserts(mor: Any) -> None:
    """Inserts fill small file groups without log files (rewritten as a new base file, with the
    updates routed to them); file groups with log files are never taken as small files."""
    h = mor()
    h.write("insert", [row(i, 10, "a", "x", False) for i in (1, 2)])
    second = h.write("upsert", [row(1, 11, "b", "x", False), row(3, 1, "b", "x", False)])
    [stat] = second.metadata.write_stats()
    assert stat.path.endswith(".parquet") and stat.prev_commit == h.results[0].instant_time
    assert (stat.num_update_writes, stat.num_inserts) == (1, 1)
    h.write("delete", [{"id": 2, "p": "x"}])  # now the file group has a log file
    fourth = h.write("upsert", [row(4, 1, "c", "x", False), row(1, 12, "c", "x", False)])
    kinds = sorted(
        ("log" if LogFile.parse(s.path) else "base", s.num_inserts) for s in fourth.metadata.write_stats()
    )
    assert kinds == [("base", 1), ("log", 0)]
    h.check()


def test_all_types_through_log_blocks(mor: Any) -> None:
    fields = [
        pa.field("id", pa.int64()),
        pa.field("p", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
        pa.field("flag", pa.bool_()),
        pa.field("n", pa.int32()),
        pa.field("f", pa.float32()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("price", pa.decimal128(12, 3)),
        pa.field("blob", pa.binary()),
        pa.field("info", pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])),
        pa.field("tags", pa.list_(pa.string())),
        pa.field(IS_DELETED, pa.bool_()),
    ]

    def full(i: int, ts: int, tag: str) -> dict[str, Any]:
        return {
            **row(i, ts, tag, ("x", "y")[i % 2], False),
            "flag": i % 2 == 0,
            "n": i * 7,
            "f": 0.5 * i,
            "day": dt.date(2024, 1, i),
            "at": dt.datetime(2024, 1, i, 12, 30, 15, 123456, tzinfo=UTC),
            "price": decimal.Decimal(f"{i}.125"),
            "blob": bytes([i, 0, 255]),
            "info": {"a": i, "b": None if i % 3 == 0 else f"b{i}"},
            "tags": [f"t{i}", None] if i % 2 else [],
        }

    for block_format in ("avro", "parquet"):
        h = mor(schema=pa.schema(fields), block_format=block_format, small_files=False)
        if block_format == "avro":  # v1 decodes Avro lists as list<item>, base files hold list<element>
            h.v1_known_errors += ("not possible to concatenate arrays of different data types",)
        h.write("insert", [full(i, 1, "a") for i in range(1, 7)])
        h.write("upsert", [full(i, 2, "b") for i in (1, 2, 3)])
        h.write("upsert", [{**full(4, 3, "c"), "price": None, "info": None, "tags": None, "at": None}])
        h.check()


def test_crashed_deltacommit_is_rolled_back(mor: Any) -> None:
    """A writer killed after writing its log and base files: readers never see them, and the next
    writer rolls the deltacommit back by deleting them (no rollback blocks on table version 8)."""
    h = mor(small_files=False)
    h.write("insert", [row(i, 10, "a", _p(True, i), False) for i in range(1, 7)])
    h.write("upsert", [row(1, 11, "b", _p(True, 1), False)])
    crashed = pa.Table.from_pylist(
        [row(2, 20, "x", _p(True, 2), False), row(3, 20, "x", _p(True, 3), True), row(9, 1, "x", "x", False)]
    )
    data = Path(h.path).parent / "crashed.parquet"
    pq.write_table(crashed, data)
    code = """
    import sys
    import pyarrow.parquet as pq
    from inlet.core import HudiTable
    HudiTable.open(sys.argv[1]).write(pq.read_table(sys.argv[2]), "upsert",
                                      options={"hoodie.parquet.small.file.limit": "0"})
    """
    env = {**os.environ, "INLET_CRASH_AT": faults.AFTER_DATA_FILES}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), h.path, str(data)],
        env=env,
        cwd=str(REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == faults.CRASH_EXIT_CODE, proc.stderr
    [pending] = h.table.timeline.pending()
    assert pending.action == "deltacommit"
    left = [f.path for f in list_data_files(h.table.storage) if pending.time in f.path.rsplit("/", 1)[-1]]
    assert any(LogFile.parse(f) for f in left) and any(f.endswith(".parquet") for f in left)
    for version in ("1", "2"):  # the pending deltacommit is invisible
        want = canonical(h.model.rows()[0], [*META, *h.model.columns])
        h._compare(
            f"v{version} with a pending deltacommit", hudi_read(h.path, version), want, h.model.columns
        )

    h.write("upsert", [row(4, 12, "c", _p(True, 4), False)])  # rolls the crashed deltacommit back first
    tl = h.table.timeline
    [rb] = tl.completed(["rollback"])
    meta = avro.decode(tl.read_bytes(rb), "rollback")
    plan = avro.decode(tl.read_bytes(Instant(rb.time, "rollback", State.REQUESTED)), "plan")
    assert meta["commitsRollback"] == [pending.time]
    assert meta["instantsRollback"] == [{"commitTime": pending.time, "action": "deltacommit"}]
    deleted = sorted(f for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"])
    assert deleted == sorted(left)
    assert all(pm["rollbackLogFiles"] == {} for pm in meta["partitionMetadata"].values())
    assert sorted(f for r in plan["RollbackRequests"] for f in r["filesToBeDeleted"]) == sorted(left)
    assert all(r["logBlocksToBeDeleted"] == {} for r in plan["RollbackRequests"])
    remaining = {f.path for f in list_data_files(h.table.storage)}
    assert not remaining & set(left)
    # no rollback command block was appended anywhere
    for f in remaining:
        if LogFile.parse(f):
            assert b"#HUDI#" in (Path(h.path) / f).read_bytes()
            assert pending.time.encode() not in (Path(h.path) / f).read_bytes()
    h.check()


def test_model_semantics_by_hand() -> None:
    """The model on its own, so that a wrong model cannot make the tests above pass by agreeing."""
    m = MorModel(ModelConfig(record_key=("id",), merge_mode=EVENT_TIME, ordering_field="ts"))
    m.insert([{"id": 1, "ts": 5, "v": "a"}, {"id": 2, "ts": 5, "v": "a"}], "001")
    m.upsert([{"id": 1, "ts": 4, "v": "b"}, {"id": 2, "ts": 7, IS_DELETED: True}], "002")
    assert [(r[RECORD_KEY], r["v"]) for r in m.rows()[0]] == [("1", "a")]
    m.upsert([{"id": 2, "ts": 6, "v": "c"}], "003")  # loses to the soft delete's 7
    assert [r[RECORD_KEY] for r in m.rows()[0]] == ["1"]
    m.delete([{"id": 1}], "004")
    m.upsert([{"id": 1, "ts": 5, "v": "d"}, {"id": 2, "ts": 7, "v": "d"}], "005")  # ties win
    assert sorted((r[RECORD_KEY], r["v"], r[COMMIT_TIME]) for r in m.rows()[0]) == [
        ("1", "d", "005"),
        ("2", "d", "005"),
    ]
    with pytest.raises(AssertionError, match="ambiguous"):
        m.delete([{"id": 1}], "006")
        m.upsert([{"id": 1, "ts": 1, "v": "e"}], "007")
    assert [r[RECORD_KEY] for r in m.rows("001")[0]] == ["1", "2"]


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_schema_evolution_in_log_blocks(mor: Any, block_format: str) -> None:
    """A column added by an upsert: the log block carries the wider schema, older records read null."""
    h = mor(block_format=block_format, small_files=False)
    h.compare_v1 = False  # hudi-rs reader v1 projects log records onto the base file's schema
    h.write("insert", [row(i, 10, "a", _p(True, i), False) for i in range(1, 5)])
    h.write(
        "upsert", [{**row(1, 11, "b", _p(True, 1), False), "extra": 7}, row(5, 1, "b", _p(True, 5), False)]
    )
    h.write("upsert", [row(2, 12, "c", _p(True, 2), False)])
    h.check()


ORDERING_TYPES = [
    (pa.int32(), [1, 2, 3]),
    (pa.int64(), [-(2**40), 2, 2**40]),
    (pa.float64(), [1.5, 2.5, 3.5]),
    (pa.string(), ["a", "b", "c"]),
    (pa.date32(), [dt.date(2024, 1, d) for d in (1, 2, 3)]),
    (pa.timestamp("us", tz="UTC"), [dt.datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2, 3)]),
    (pa.decimal128(10, 2), [decimal.Decimal(x) for x in ("1.25", "2.25", "3.25")]),
]


@pytest.mark.parametrize(("typ", "values"), ORDERING_TYPES, ids=[str(t) for t, _ in ORDERING_TYPES])
def test_soft_deletes_carry_ordering_values_of_every_type(
    tmp_path: Path, typ: pa.DataType, values: list[Any]
) -> None:
    """The delete block's ordering value is wrapped like the ordering field's type, so readers
    compare it with the stored record's: a higher value deletes, a lower one loses."""
    path = str(tmp_path / "t")
    t = HudiTable.create(path, name="t", record_key="id", ordering_field="o", table_type="MERGE_ON_READ")
    low, mid, high = values
    t.write(pa.table({"id": [1, 2, 3], "o": pa.array([mid, mid, mid], typ)}))
    t.write(
        pa.table({"id": [1, 2], "o": pa.array([high, low], typ), IS_DELETED: [True, True]}),
        options={"hoodie.parquet.small.file.limit": "0"},
    )
    for version in ("1", "2"):
        got = hudi_read(path, version)
        assert got is not None
        assert sorted(got.column("id").to_pylist()) == [2, 3], f"hudi-rs v{version}"
