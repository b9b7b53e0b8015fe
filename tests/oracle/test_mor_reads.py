"""Apache Hudi reads Merge-on-Read tables Inlet wrote (log files, compaction, savepoint and restore).

One partitioned table with a complex key (two record key fields, non-hive partition paths) takes
inserts, upserts and deletes as log files, an added column, a compaction and more log files on the new
file slices; Apache Hudi 1.0.2 and 1.2.0 answer the snapshot, the read-optimized query (base files
only), a time travel to every completed instant and the incremental windows, each compared with
Inlet's answer to the same query. Then a savepoint, more writes and a restore to the savepoint.
An unpartitioned table (Parquet log blocks, commit-time ordering) is read the same way.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from compare import Query, assert_same, completed_writes, incremental, snapshot
from conftest import LINES, incremental_begin
from support.apache_hudi import ApacheHudi, ApacheHudiPool

from inlet.core import HudiTable

SCHEMA = pa.schema(
    [
        ("region", pa.string()),
        ("id", pa.int32()),
        ("day", pa.string()),
        ("ts", pa.int64()),
        ("qty", pa.int64()),
    ]
)
WIDER = SCHEMA.append(pa.field("price", pa.float64()))


def _rows(ids: list[int], ts: int, wide: bool = False) -> pa.Table:
    data: dict[str, Any] = {
        "region": ["eu" if i % 2 else "us" for i in ids],
        "id": ids,
        "day": ["2026-01-0" + str(1 + i % 2) for i in ids],
        "ts": [ts] * len(ids),
        "qty": [i * 10 + ts for i in ids],
    }
    if wide:
        data["price"] = [i + ts / 10 for i in ids]
    return pa.table(data, schema=WIDER if wide else SCHEMA)


# table -> (instant, completion, the next compaction's completion, rows) of a write whose records
# lose the event-time merge
_LATE: dict[str, tuple[str, str, str, pa.Table]] = {}


def _with_late_records(q: Query, t: HudiTable, begin: str, end: str) -> Query:
    """Apache Hudi's incremental query on Merge-on-Read returns the records a window's log files hold,
    merged only with each other: a record that lost the event-time merge to an earlier write comes
    back, unless the window also holds the compaction that merged it away (docs/table-format.md,
    "Apache Hudi reads it"). Inlet returns the table's state."""
    late = _LATE.get(t.base_path)
    if late is None or not begin < late[1] <= end or late[2] <= end:
        return q
    instant, _, _, rows = late
    n = rows.num_rows
    keys = [
        f"region:{r},id:{i}" for r, i in zip(rows["region"].to_pylist(), rows["id"].to_pylist(), strict=True)
    ]
    meta = pa.table(
        {
            "_hoodie_commit_time": [instant] * n,
            "_hoodie_record_key": keys,
            "_hoodie_partition_path": rows["day"].to_pylist(),
        }
    )
    extra = pa.Table.from_arrays(
        [*meta.columns, *rows.columns], names=[*meta.column_names, *rows.column_names]
    )
    q.inlet = pa.concat_tables([q.inlet.select(extra.column_names), extra], promote_options="permissive")
    return q


def _all_queries(oracle: ApacheHudi, t: HudiTable, read_optimized: bool = True) -> list[Query]:
    writes = completed_writes(t)
    queries = [snapshot(t)]
    if read_optimized:
        queries.append(snapshot(t, read_optimized=True))
    queries += [snapshot(t, as_of=i.time) for i in writes]
    completions = [i.completion_time for i in writes]
    for begin, end in zip(["000", *completions[:-1]], completions, strict=True):
        inlet_begin = incremental_begin(oracle, t, begin)
        queries.append(
            _with_late_records(incremental(t, begin, end, inlet_begin=inlet_begin), t, inlet_begin, end)
        )
    return queries


@pytest.fixture(scope="module")
def mor(tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    path = tmp_path_factory.mktemp("oracle-mor") / "orders"
    t = HudiTable.create(
        str(path),
        name="orders",
        record_key=["region", "id"],
        partition_by="day",
        table_type="MERGE_ON_READ",
        ordering_field="ts",
    )
    t.write(_rows(list(range(10)), 1), "insert")
    t.write(_rows([0, 1, 2, 3, 11], 2), "upsert")  # log files
    t.write(_rows([4, 5], 0).select(["region", "id", "day", "ts"]), "delete")  # delete blocks
    t.write(_rows([1, 6, 12], 3, wide=True), "upsert")  # a column added
    late = _rows([0, 2], 1, wide=True)
    done = t.write(late, "upsert")  # older ordering values: the stored records stay
    compacted = t.compact({"hoodie.compact.inline.max.delta.commits": "1"})
    assert compacted is not None and compacted.completion_time is not None
    _LATE[t.base_path] = (done.instant_time, done.completion_time, compacted.completion_time, late)
    t.write(_rows([3, 7, 13], 4, wide=True), "upsert")  # logs on the compacted slices
    return t


@pytest.mark.parametrize("line", LINES)
def test_every_instant_and_window_reads_the_same(
    apache_hudi: ApacheHudiPool, mor: HudiTable, line: str
) -> None:
    oracle = apache_hudi(line)
    assert [i.action for i in completed_writes(mor)].count("commit") == 1  # the compaction
    assert_same(oracle, mor.base_path, _all_queries(oracle, mor))


def test_savepoint_and_restore(apache_hudi: ApacheHudiPool, mor: HudiTable) -> None:
    saved = completed_writes(mor)[-1].time
    mor.savepoint(saved)
    mor.write(_rows([8, 9, 14], 5, wide=True), "upsert")
    mor.write(_rows([20, 21], 6, wide=True), "insert")
    mor.restore(saved)
    assert completed_writes(mor)[-1].time == saved
    for line in LINES:
        oracle = apache_hudi(line)
        assert_same(oracle, mor.base_path, [snapshot(mor), snapshot(mor, read_optimized=True)])
    mor.write(_rows([8, 22], 7, wide=True), "upsert")  # writing on after the restore
    for line in LINES:
        oracle = apache_hudi(line)
        assert_same(oracle, mor.base_path, [snapshot(mor), snapshot(mor, read_optimized=True)])


def test_unpartitioned_with_parquet_log_blocks(
    apache_hudi: ApacheHudiPool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("oracle-mor-flat") / "events"
    t = HudiTable.create(str(path), name="events", record_key="id", table_type="MERGE_ON_READ")
    parquet_logs = {"hoodie.logfile.data.block.format": "parquet"}
    t.write(_rows(list(range(6)), 1), "bulk_insert")
    t.write(_rows([0, 1, 7], 2), "upsert", options=parquet_logs)
    t.write(_rows([2], 0).select(["region", "id", "day", "ts"]), "delete", options=parquet_logs)
    t.write(_rows([1, 3], 0), "upsert", options=parquet_logs)  # commit time ordering: the later write wins
    for line in LINES:
        oracle = apache_hudi(line)
        assert_same(oracle, t.base_path, _all_queries(oracle, t))
