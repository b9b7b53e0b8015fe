"""Clustering (Hudi 1.x's size-based plan, sort-and-size run, completed as a replacecommit): the
table reads as the model before and after (Inlet and both hudi-rs readers, snapshot and time
travel), small file groups become fewer sorted ones, a kill at any step is finished by the next run
with readers seeing the old state meanwhile, and a concurrent write on a clustered group wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import hudi_rs
from support.tables import all_reads, rows, run_python, trips

from inlet.core import HudiTable, avro
from inlet.core.errors import CommitConflictError, UnsupportedError
from inlet.core.timeline.instant import Action, State

CITIES = ["sf", "la"]
SORTED = {"hoodie.clustering.plan.strategy.sort.columns": "fare"}


def _build(path: Path, table_type: str) -> tuple[HudiTable, dict[int, dict[str, Any]]]:
    """Six small bulk inserts (a new file group each per city), then an upsert and a delete."""
    t = HudiTable.create(
        str(path), name="t", record_key="id", partition_by="city", ordering_field="ts", table_type=table_type
    )
    model: dict[int, dict[str, Any]] = {}

    def apply(data: pa.Table) -> None:
        for r in data.to_pylist():
            model[r["id"]] = r

    for step in range(6):
        ids = [step * 10 + k for k in range(4)]
        # fares descend with the id, so sorting by fare reorders the rows
        data = trips(ids, [CITIES[i % 2] for i in ids], 1, f"b{step}").set_column(
            3, "fare", pa.array([1000.0 - i for i in ids], pa.float64())
        )
        t.write(data, "bulk_insert")
        apply(data)
    up = trips([1, 12, 23], ["la", "sf", "la"], 2, "u").set_column(3, "fare", pa.array([5.0, 6.0, 7.0]))
    t.write(up, "upsert")
    apply(up)
    t.delete(pa.table({"id": pa.array([30], pa.int64()), "city": ["sf"]}))
    del model[30]
    return t, model


def _expected(model: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in r.items()} for r in model.values()), key=lambda r: r["id"])


def _data(read: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "_hoodie_commit_time"} for r in read]


def _check(path: str, model: dict[int, dict[str, Any]]) -> None:
    for reader, got in all_reads(path).items():
        assert _data(got) == _expected(model), reader


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_clustering_rewrites_small_groups_sorted_and_reads_as_the_model(
    tmp_path: Path, table_type: str
) -> None:
    t, model = _build(tmp_path / "t", table_type)
    before_slices = t.file_system_view().latest_file_slices()
    before_times = {r["id"]: r["_hoodie_commit_time"] for r in rows(t.read())}
    last_write = t.timeline.completed_writes()[-1].time
    # the trigger: 8 writes so far, so a plan is due at 4 (Hudi's default) but not at 9
    assert t.schedule_clustering({**SORTED, "hoodie.clustering.inline.max.commits": "9"}) is None
    t_cluster = t.schedule_clustering(SORTED)
    assert t_cluster is not None
    plan = avro.decode(t.timeline.read_bytes(next(i for i in t.timeline.instants if i.time == t_cluster)))
    assert plan["operationType"] == "CLUSTER" and plan["clusteringPlan"]["preserveHoodieMetadata"] is True
    planned = {
        (s["partitionPath"], s["fileId"]) for g in plan["clusteringPlan"]["inputGroups"] for s in g["slices"]
    }
    assert planned == {(s.partition, s.file_id) for s in before_slices}, "every small group is planned"
    _check(t.base_path, model)  # a pending plan changes no read

    result = HudiTable.open(t.base_path).run_clustering(options=SORTED)
    assert result is not None and result.action == Action.REPLACE_COMMIT
    t = HudiTable.open(t.base_path)
    _check(t.base_path, model)
    after = t.file_system_view().latest_file_slices()
    assert len(after) == len(CITIES) < len(before_slices), "one sorted file group per partition"
    md = t.timeline.commit_metadata(next(i for i in t.timeline.instants if i.time == t_cluster))
    assert md.operation_type == "CLUSTER"
    assert {(p, f) for p, ids in md.partition_to_replace_file_ids.items() for f in ids} == planned
    for fs in after:
        assert fs.base_file is not None and not fs.log_files
        fares = pq.read_table(t.storage.full(fs.base_file.path)).column("fare").to_pylist()
        assert fares == sorted(fares), "rows sorted by the sort column"
    # records keep the commit time of the write that produced them (preserveHoodieMetadata)
    assert {r["id"]: r["_hoodie_commit_time"] for r in rows(t.read())} == before_times
    # time travel to before the clustering still reads the old file groups
    old = rows(t.read(as_of=last_write))
    assert _data(old) == _expected(model)
    for v in hudi_rs.READER_VERSIONS:
        travelled = hudi_rs.read(t.base_path, v, as_of=last_write)
        assert travelled is not None and _data(rows(travelled)) == _expected(model), v
    # once a later write leaves the replacecommit outside the retained window (Hudi's rule), a
    # clean deletes the replaced groups' files; the table still reads as the model
    more = trips([100], ["sf"], 3, "more")
    t.write(more, "upsert")
    model[100] = more.to_pylist()[0]
    t.clean({"hoodie.clean.commits.retained": "1"})
    left = (
        {f.path for f in HudiTable.open(t.base_path).file_system_view().all_base_files()}
        if hasattr(t.file_system_view(), "all_base_files")
        else set()
    )
    del left
    remaining = {p.name for p in (tmp_path / "t").rglob("*.parquet")}
    assert all(s.base_file is None or Path(s.base_file.path).name not in remaining for s in before_slices)
    _check(t.base_path, model)


RUN = """
import sys
from inlet.core import HudiTable
HudiTable.open(sys.argv[1]).run_clustering(options={"hoodie.clustering.plan.strategy.sort.columns": "fare"}, force=True)
"""


@pytest.mark.parametrize("point", ["clustering_after_first_group", "clustering_before_complete"])
def test_a_killed_clustering_reads_as_before_and_the_next_run_finishes_it(tmp_path: Path, point: str) -> None:
    t, model = _build(tmp_path / "t", "MERGE_ON_READ")
    t_cluster = t.schedule_clustering(SORTED, force=True)
    assert run_python(RUN, t.base_path, crash_at=point) == 77
    pending = HudiTable.open(t.base_path).timeline.pending([Action.CLUSTERING])
    assert [(i.time, i.state) for i in pending] == [(t_cluster, State.INFLIGHT)]
    _check(t.base_path, model)  # the crashed run's files belong to no completed instant
    assert run_python(RUN, t.base_path) == 0
    t = HudiTable.open(t.base_path)
    assert not t.timeline.pending([Action.CLUSTERING])
    assert len(t.file_system_view().latest_file_slices()) == len(CITIES)
    _check(t.base_path, model)
    written = {p.name for p in (tmp_path / "t").rglob(f"*_{t_cluster}.parquet")}
    assert len(written) == len(CITIES), "the crashed attempt's files were rolled back"


def test_a_write_on_a_clustered_group_wins_over_the_clustering(tmp_path: Path) -> None:
    t, model = _build(tmp_path / "t", "COPY_ON_WRITE")
    t_cluster = t.schedule_clustering(SORTED, force=True)
    up = trips([2], ["sf"], 9, "late")
    HudiTable.open(t.base_path).write(up, "upsert")
    model[2] = up.to_pylist()[0]
    with pytest.raises(CommitConflictError):
        HudiTable.open(t.base_path).run_clustering(options=SORTED)
    t = HudiTable.open(t.base_path)
    assert all(i.time != t_cluster for i in t.timeline.instants), "the clustering and its plan are gone"
    assert not list((tmp_path / "t").rglob(f"*_{t_cluster}.parquet"))
    _check(t.base_path, model)


def test_clustering_refuses_bucket_index_tables(tmp_path: Path) -> None:
    t = HudiTable.create(
        str(tmp_path / "b"),
        name="b",
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        index="bucket",
    )
    with pytest.raises(UnsupportedError, match="bucket-index"):
        t.schedule_clustering(force=True)
