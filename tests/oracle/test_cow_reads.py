"""Apache Hudi reads a Copy-on-Write table Inlet wrote through every write operation, as Inlet does.

One partitioned table (hive style, event-time ordering) goes through insert, upsert, delete,
bulk_insert, an added column, insert_overwrite, delete_partition and insert_overwrite_table; Apache
Hudi 1.0.2 and 1.2.0 then answer the snapshot, a time travel to every completed instant and the
incremental windows between consecutive instants, each compared with Inlet's answer to the same query.
Then clustering, clean and archive run and the table is read again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from compare import assert_same, completed_writes, incremental, snapshot
from conftest import LINES, incremental_begin
from support.apache_hudi import ApacheHudiPool

from inlet.core import HudiTable

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("fare", pa.float64())])
WIDER = SCHEMA.append(pa.field("note", pa.string()))


def _rows(
    ids: list[int], ts: int, cities: tuple[str, ...] = ("sf", "nyc", "la"), note: str | None = None
) -> pa.Table:
    data: dict[str, Any] = {
        "id": ids,
        "city": [cities[i % len(cities)] for i in ids],
        "ts": [ts] * len(ids),
        "fare": [i * 1.5 + ts for i in ids],
    }
    if note is None:
        return pa.table(data, schema=SCHEMA)
    data["note"] = [f"{note}-{i}" for i in ids]
    return pa.table(data, schema=WIDER)


@pytest.fixture(scope="module")
def cow(tmp_path_factory: pytest.TempPathFactory) -> HudiTable:
    path = tmp_path_factory.mktemp("oracle-cow") / "trips"
    t = HudiTable.create(
        str(path), name="trips", record_key="id", partition_by="city", ordering_field="ts", hive_style=True
    )
    t.write(_rows(list(range(12)), 1), "insert")
    t.write(_rows([0, 1, 2, 20, 21], 2), "upsert")
    t.write(_rows([3, 4], 0).select(["id", "city", "ts"]), "delete")
    t.write(_rows([30, 31, 32], 3), "bulk_insert")
    t.write(_rows([5, 6, 40], 4, note="wide"), "upsert")  # a column added
    t.write(_rows([50, 53], 5, cities=("la",), note="over"), "insert_overwrite")
    t.write(None, "delete_partition", partitions=["city=nyc"])
    t.write(_rows([7, 60], 6, note="late"), "upsert")
    return t


@pytest.mark.parametrize("line", LINES)
def test_every_instant_and_window_reads_the_same(
    apache_hudi: ApacheHudiPool, cow: HudiTable, line: str
) -> None:
    oracle = apache_hudi(line)
    writes = completed_writes(cow)
    assert len(writes) == 8
    queries = [snapshot(cow)] + [snapshot(cow, as_of=i.time) for i in writes]
    completions = [i.completion_time for i in writes]
    for begin, end in zip(["000", *completions[:-1]], completions, strict=True):
        queries.append(incremental(cow, begin, end, inlet_begin=incremental_begin(oracle, cow, begin)))
    queries.append(
        incremental(cow, completions[2], None, inlet_begin=incremental_begin(oracle, cow, completions[2]))
    )
    assert_same(oracle, cow.base_path, queries)


def test_after_clustering_clean_and_archive(apache_hudi: ApacheHudiPool, cow: HudiTable) -> None:
    cow.write(_rows([8, 9, 70], 7, note="x"), "insert_overwrite_table")
    cow.write(_rows([71, 72, 73], 8, note="y"), "bulk_insert")  # new file groups beside the small ones
    cow.write(_rows([74, 75, 76], 9, note="z"), "bulk_insert")
    assert cow.cluster({"hoodie.clustering.plan.strategy.sort.columns": "id"}, force=True) is not None
    cow.clean({"hoodie.clean.commits.retained": "2"})
    archived = cow.archive({"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4"})
    assert archived is not None
    writes = completed_writes(cow)
    for line in LINES:
        oracle = apache_hudi(line)
        queries = [snapshot(cow), snapshot(cow, as_of=writes[-1].time)]
        last = writes[-2].completion_time
        queries.append(incremental(cow, last, None, inlet_begin=incremental_begin(oracle, cow, last)))
        assert_same(oracle, cow.base_path, queries)
    assert Path(cow.base_path, ".hoodie", "timeline", "history").is_dir()
