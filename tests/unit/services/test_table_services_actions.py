"""The table services' compaction rule for plans others requested: a fresh plan is its scheduler's
(left alone), one requested long ago and never started is abandoned (run); an inflight one is its
runner's while that runner lives, and rolled back and run again once it died; then a new plan is
scheduled when Hudi's trigger says so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from support import hudi_rs

from inlet.core import HudiTable
from inlet.core.timeline.instant import State
from inlet.services.table_services.actions import COMPACTION, run_services

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}


def _mor_table_with_a_compaction_plan(tmp_path: Path) -> tuple[str, str]:
    """A Merge-on-Read table with two upserts and a compaction plan requested: (path, its instant)."""
    path = str(tmp_path / "t")
    HudiTable.create(path, name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    for ts in (1, 2):
        HudiTable.open(path).write(
            pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([ts, ts], pa.int64())}), "upsert"
        )
    planned = HudiTable.open(path).schedule_compaction(DUE)
    assert planned is not None
    return path, planned


def test_fresh_plans_are_left_to_their_scheduler_and_stale_ones_run(tmp_path: Path) -> None:
    path, planned = _mor_table_with_a_compaction_plan(tmp_path)

    fresh = run_services(HudiTable.open(path), "t", (COMPACTION,), {}, stale_plan_s=3600)
    assert fresh.completed == {} and any(planned in why for why in fresh.skipped)
    states = {c.instant_time: c.state for c in HudiTable.open(path).compactions()}
    assert states == {planned: State.REQUESTED}

    stale = run_services(HudiTable.open(path), "t", (COMPACTION,), {}, stale_plan_s=0)
    assert stale.completed == {COMPACTION: [planned]}
    states = {c.instant_time: c.state for c in HudiTable.open(path).compactions()}
    assert states == {planned: State.COMPLETED}
    assert [r["ts"] for r in HudiTable.open(path).read().to_pylist()] == [2, 2]


# a runner process: runs compaction PLANNED and stops for good once its new base files are written
# (the fault injected where a real runner could be killed), never committing
RUNNER = """
import sys, time
from pathlib import Path
from inlet.core import HudiTable, faults
from inlet.core.actions import compaction_run

path, planned, ready = sys.argv[1:]

def hang(point):
    if point == compaction_run.AFTER_DATA_FILES:
        Path(ready).touch()
        time.sleep(3600)

faults.crash_point = hang
HudiTable.open(path).run_compaction(planned, {"hoodie.compact.inline.max.delta.commits": "1"})
"""


def test_an_inflight_compaction_is_its_runners_until_that_one_dies_then_it_is_run_again(
    tmp_path: Path,
) -> None:
    path, planned = _mor_table_with_a_compaction_plan(tmp_path)
    ready = tmp_path / "ready"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, path, planned, str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert runner.poll() is None and time.monotonic() < deadline, "the runner never wrote its files"
            time.sleep(0.05)
        attempt = {p.name for p in Path(path).rglob(f"*_{planned}.parquet")}
        assert attempt

        alive = run_services(HudiTable.open(path), "t", (COMPACTION,), DUE, stale_plan_s=0)
        assert alive.completed == {} and any(planned in why for why in alive.skipped)
        states = {c.instant_time: c.state for c in HudiTable.open(path).compactions()}
        assert states == {planned: State.INFLIGHT}
    finally:
        runner.kill()  # SIGKILL
        runner.wait()

    dead = run_services(HudiTable.open(path), "t", (COMPACTION,), DUE, stale_plan_s=0)
    assert dead.completed == {COMPACTION: [planned]}
    info = next(c for c in HudiTable.open(path).compactions() if c.instant_time == planned)
    assert info.state is State.COMPLETED and info.metadata is not None
    # the dead runner's files were rolled back: only the completed run's are left
    written = {Path(s.path).name for s in info.metadata.write_stats()}
    assert {p.name for p in Path(path).rglob(f"*_{planned}.parquet")} == written
    assert [r["ts"] for r in HudiTable.open(path).read().to_pylist()] == [2, 2]


def test_the_services_keep_a_long_lived_table_bounded_and_readable(tmp_path: Path) -> None:
    """Compaction, clean and archive after every commit of a long run of small MOR upserts: the
    data files and the active timeline stay bounded (derived from the options, not the code), and
    every read equals the model, by Inlet and by both hudi-rs readers."""
    path = str(tmp_path / "t")
    HudiTable.create(path, name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    opts = {
        "hoodie.compact.inline.max.delta.commits": "3",
        "hoodie.clean.commits.retained": "2",
        "hoodie.keep.min.commits": "4",
        "hoodie.keep.max.commits": "6",
    }
    model: dict[int, int] = {}
    for ts in range(1, 61):
        ids = [ts % 7, (ts * 3) % 11]
        HudiTable.open(path).write(
            pa.table({"id": pa.array(ids, pa.int64()), "ts": pa.array([ts, ts], pa.int64())}), "upsert"
        )
        model.update({i: ts for i in ids})
        run_services(HudiTable.open(path), "t", ("compaction", "clean", "archive"), opts, stale_plan_s=0)
        t = HudiTable.open(path)
        assert {r["id"]: r["ts"] for r in t.read(columns=["id", "ts"]).to_pylist()} == model
    t = HudiTable.open(path)
    # keep.max.commits bounds the completed writes on the active timeline; the services' own
    # instants (compactions, cleans) come on top, a few per window
    writes = t.timeline.completed_writes()
    assert len(writes) <= int(opts["hoodie.keep.max.commits"]) + 3
    assert len(t.archived_timeline().instants) >= 60 - len(t.timeline.instants)
    data_files = [p for p in Path(path).rglob("*") if p.is_file() and ".hoodie" not in p.parts]
    assert len(data_files) < 40  # 60 commits without services leave >= 60 log files
    for reader in hudi_rs.READER_VERSIONS:
        rows = hudi_rs.read_table(path, reader).select(["id", "ts"])
        assert {r["id"]: r["ts"] for r in rows.to_pylist()} == model, reader


def test_clustering_clean_and_archive_keep_many_small_inserts_in_few_files(tmp_path: Path) -> None:
    """Each of 40 commits bulk-inserts into a new small file group of a Copy-on-Write table; with
    clustering (every 5 writes), clean and archive after each commit the file groups and files stay
    few, the readers (Inlet after every commit, both hudi-rs readers at the end) equal the model."""
    path = str(tmp_path / "t")
    HudiTable.create(path, name="t", record_key="id", ordering_field="ts")
    opts = {
        "hoodie.clustering.inline.max.commits": "5",
        "hoodie.clean.commits.retained": "2",
        "hoodie.keep.min.commits": "4",
        "hoodie.keep.max.commits": "6",
    }
    model: dict[int, int] = {}
    clustered = 0
    for ts in range(1, 41):
        ids = [2 * ts, 2 * ts + 1]
        HudiTable.open(path).write(
            pa.table({"id": pa.array(ids, pa.int64()), "ts": pa.array([ts, ts], pa.int64())}), "bulk_insert"
        )
        model.update({i: ts for i in ids})
        done = run_services(
            HudiTable.open(path), "t", ("clustering", "clean", "archive"), opts, stale_plan_s=0
        )
        clustered += len(done.completed.get("clustering", []))
        t = HudiTable.open(path)
        assert {r["id"]: r["ts"] for r in t.read(columns=["id", "ts"]).to_pylist()} == model
    t = HudiTable.open(path)
    assert clustered >= 40 // 5 - 1
    # without clustering there would be 40 file groups; a clustering leaves one, and at most the
    # writes since the last one (< 5 + the clustering's own) add more
    assert len(t.file_system_view().latest_file_slices()) <= 6
    data_files = [p for p in Path(path).rglob("*.parquet") if ".hoodie" not in p.parts]
    assert len(data_files) < 20
    for reader in hudi_rs.READER_VERSIONS:
        rows = hudi_rs.read_table(path, reader).select(["id", "ts"])
        assert {r["id"]: r["ts"] for r in rows.to_pylist()} == model, reader
