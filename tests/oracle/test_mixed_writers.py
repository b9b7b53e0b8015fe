"""Mixed writers: Apache Hudi writes a version-8 table as its users do, Inlet reads and continues
it, Apache Hudi reads that and writes again on top, and Inlet (and hudi-rs) read the result.

Apache Hudi writes with its defaults (the metadata table on: ``files``, ``column_stats``,
``partition_stats``), Merge-on-Read with inline compaction every two deltacommits. Inlet's first
commit turns the metadata table off (docs/table-format.md, "Apache Hudi's metadata table"):
without that, Apache Hudi lists files through a metadata table that lacks Inlet's and its reads
miss Inlet's commits. Apache Hudi's next write builds the metadata table again; Inlet's commit
after that turns it off again.

Every comparison is over every completed instant (time travel), the snapshot, and an incremental
window over Inlet's commits. Two tables: Apache Hudi 1.0.2 Merge-on-Read partitioned (hive style),
Apache Hudi 1.2.0 (``hoodie.write.table.version=8``) Copy-on-Write unpartitioned.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support import hudi_rs
from support.apache_hudi import ApacheHudi, ApacheHudiPool

from inlet.core import HudiTable
from inlet.core.table import metadata_table

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("fare", pa.float64())])
META = ["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path"]
COLUMNS = [*META, "id", "city", "ts", "fare"]
CITIES = ("sf", "nyc", "la")


def batch(ids: Sequence[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": list(ids),
            "city": [CITIES[i % len(CITIES)] for i in ids],
            "ts": [ts] * len(ids),
            "fare": [i * 1.5 + ts for i in ids],
        },
        schema=SCHEMA,
    )


def hudi_options(table_type: str, partitioned: bool) -> dict[str, str]:
    opts = {
        "hoodie.table.name": "trips",
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.table.version": "8",
        "hoodie.write.auto.upgrade": "false",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        # speed only (one small task per stage, no timeline server per write): the table is the same
        "hoodie.insert.shuffle.parallelism": "1",
        "hoodie.upsert.shuffle.parallelism": "1",
        "hoodie.delete.shuffle.parallelism": "1",
        "hoodie.embed.timeline.server": "false",
    }
    if partitioned:
        opts["hoodie.datasource.write.partitionpath.field"] = "city"
    else:
        opts["hoodie.datasource.write.partitionpath.field"] = ""
        opts["hoodie.datasource.write.keygenerator.class"] = (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        )
    if table_type == "MERGE_ON_READ":
        opts["hoodie.compact.inline"] = "true"
        opts["hoodie.compact.inline.max.delta.commits"] = "2"
    return opts


def hudi_write(oracle: ApacheHudi, path: Path, opts: dict[str, str], data: pa.Table, operation: str) -> None:
    oracle.write(path, data, {**opts, "hoodie.datasource.write.operation": operation})


def rows(table: pa.Table | None) -> list[tuple[Any, ...]]:
    if table is None or table.num_rows == 0:
        return []
    cols = {c: table.column(c).to_pylist() for c in COLUMNS}
    return sorted(tuple(cols[c][i] for c in COLUMNS) for i in range(table.num_rows))


def completed(t: HudiTable) -> list[Any]:
    """Completed instants that change what a read returns (writes and compactions), oldest first."""
    return [
        i
        for i in HudiTable.open(t.base_path).instants()
        if i.state.name == "COMPLETED" and i.action in ("commit", "deltacommit", "replacecommit")
    ]


def inlet_reads(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Inlet's snapshot and its time travel to every completed instant."""
    t = HudiTable.open(str(path))
    out = {"snapshot": rows(t.read())}
    for i in completed(t):
        out[i.time] = rows(t.read(as_of=i.time))
    return out


def hudi_reads(oracle: ApacheHudi, path: Path, times: Sequence[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Apache Hudi's snapshot and time travel to ``times``, in one round trip."""
    queries: list[tuple[str | Path, dict[str, str] | None]] = [(path, None)]
    queries += [(path, {"as.of.instant": t}) for t in times]
    answers = oracle.reads(queries)
    return dict(zip(["snapshot", *times], (rows(a) for a in answers), strict=True))


def assert_same(label: str, got: dict[str, list[Any]], want: dict[str, list[Any]]) -> None:
    wrong = [k for k in want if got.get(k) != want[k]]
    assert not wrong, "\n".join(
        f"{label} {k}: only theirs {sorted(set(got.get(k, [])) - set(want[k]))[:3]}, "
        f"only Inlet's {sorted(set(want[k]) - set(got.get(k, [])))[:3]}"
        for k in wrong
    )


def assert_hudi_rs_agrees(path: Path, want: dict[str, list[tuple[Any, ...]]]) -> None:
    for version in hudi_rs.READER_VERSIONS:
        got = {k: rows(hudi_rs.read(str(path), version, as_of=None if k == "snapshot" else k)) for k in want}
        assert_same(f"hudi-rs (file-group reader {version})", got, want)


def assert_metadata_table(path: Path, on: bool) -> None:
    props = HudiTable.open(str(path)).props
    assert metadata_table.is_on(props) is on, props.get(metadata_table.PARTITIONS_KEY)
    assert (path / ".hoodie" / "metadata").exists() is on
    if on:
        assert "files" in metadata_table.partitions(props)


CASES = [
    pytest.param("1.0", "MERGE_ON_READ", True, id="hudi-1.0-mor-partitioned"),
    pytest.param("1.2", "COPY_ON_WRITE", False, id="hudi-1.2-cow-unpartitioned"),
]


@pytest.mark.parametrize(("line", "table_type", "partitioned"), CASES)
def test_mixed_writers(
    apache_hudi: ApacheHudiPool, tmp_path: Path, line: str, table_type: str, partitioned: bool
) -> None:
    oracle = apache_hudi(line)
    path = tmp_path / "trips"
    opts = hudi_options(table_type, partitioned)

    # 1. Apache Hudi writes as its users do: inserts, upserts, deletes; the metadata table on
    hudi_write(oracle, path, opts, batch(range(9), 1), "insert")
    hudi_write(oracle, path, opts, batch([0, 1, 2, 9, 10], 2), "upsert")
    hudi_write(oracle, path, opts, batch([3, 4], 3), "delete")
    assert_metadata_table(path, on=True)
    table = HudiTable.open(str(path))
    actions = {i.action for i in completed(table)}
    assert actions == ({"deltacommit", "commit"} if table_type == "MERGE_ON_READ" else {"commit"})

    # 2. Inlet reads every instant as Apache Hudi does
    mine = inlet_reads(path)
    assert {r[3] for r in mine["snapshot"]} == {0, 1, 2, 5, 6, 7, 8, 9, 10}
    assert_same("Apache Hudi before Inlet's writes", hudi_reads(oracle, path, list(mine)[1:]), mine)

    # 3. Inlet writes into the same table: its first commit turns the metadata table off
    first = table.write(batch([1, 5, 20], 5), operation="upsert")
    table.delete(batch([2, 9], 0).select(["id", "city"]))
    last = table.write(batch([21, 22], 6), operation="insert")
    mine = inlet_reads(path)
    assert {r[3] for r in mine["snapshot"]} == {0, 1, 5, 6, 7, 8, 10, 20, 21, 22}

    # 4. Apache Hudi reads it as Inlet does: snapshot, every instant, Inlet's commits incrementally
    assert_same("Apache Hudi after Inlet's writes", hudi_reads(oracle, path, list(mine)[1:]), mine)
    assert_metadata_table(path, on=False)
    window = {
        "hoodie.datasource.query.type": "incremental",
        "hoodie.datasource.read.begin.instanttime": first.instant_time,  # before its completion
        "hoodie.datasource.read.end.instanttime": last.completion_time,
    }
    [theirs] = oracle.reads([(path, window)])
    changes = HudiTable.open(str(path)).read_changes(begin=first.instant_time, end=last.completion_time)
    assert rows(theirs) == rows(changes.table) != []

    # 5. Apache Hudi writes again on top, updating records in Inlet's files too (its simple index
    # reads their keys) and building its metadata table again; Inlet reads that
    before = {i.time for i in completed(table)}
    hudi_write(oracle, path, opts, batch([0, 20, 21, 30], 7), "upsert")
    assert_metadata_table(path, on=True)
    mine = inlet_reads(path)
    assert {r[3] for r in mine["snapshot"]} == {0, 1, 5, 6, 7, 8, 10, 20, 21, 22, 30}
    assert {r[3]: r[0] for r in mine["snapshot"]}[20] not in before  # updated in place, not duplicated
    assert_same("Apache Hudi on top of Inlet", hudi_reads(oracle, path, list(mine)[1:]), mine)
    assert_hudi_rs_agrees(path, mine)

    # 6. Inlet's next commit checks again and turns the rebuilt metadata table off
    HudiTable.open(str(path)).write(batch([7, 40], 9), operation="upsert")
    assert_metadata_table(path, on=False)
    mine = inlet_reads(path)
    assert_same("Apache Hudi after Inlet's last write", hudi_reads(oracle, path, list(mine)[1:]), mine)
