"""Archive (``inlet.core.actions.archive`` + ``inlet.core.timeline.archived``): after an archive the
active timeline holds exactly what Apache Hudi's ``TimelineArchiverV2`` rules keep (derived here
from the rules and the instant times, not from the planner), the LSM archived timeline returns
the other instants with their completion times and instant-file bytes unchanged, every reader
(Inlet, both hudi-rs file-group readers) reads the table as before, pending instants stop the
archive, an archive killed at any step leaves a readable table that the next run finishes without
archiving anything twice, and full LSM layers are compacted into the next layer."""

from __future__ import annotations

import json
import os
import posixpath
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from support.tables import all_reads, run_python, trips

from inlet.core import HudiTable
from inlet.core.actions.archive import ArchiveResult, archive
from inlet.core.errors import InvalidOptionError, UnsupportedError
from inlet.core.timeline.archived import ArchivedTimeline, LSMTimeline
from inlet.core.timeline.instant import Action, Instant, State

TIMELINE = Path(".hoodie") / "timeline"
HISTORY = TIMELINE / "history"


def run_archive(path: Path, options: dict[str, str]) -> ArchiveResult:
    t = HudiTable.open(str(path))
    return archive(t.storage, t.layout_version, t.timeline_path, options)


def timeline_files(path: Path) -> dict[str, dict[str, Any]]:
    """Instant time -> action, completion time and bytes of each state file, from the directory."""
    out: dict[str, dict[str, Any]] = {}
    for name in os.listdir(path / TIMELINE):
        inst = Instant.parse_file_name(name)
        if inst is None:
            continue
        doc = out.setdefault(inst.time, {"states": {}})
        doc["states"][inst.state] = (inst.action, (path / TIMELINE / name).read_bytes())
        if inst.state is State.COMPLETED:
            doc["action"], doc["completion"] = inst.action, inst.completion_time
    return out


def completed_of(files: dict[str, dict[str, Any]], actions: set[str]) -> list[str]:
    return sorted(t for t, d in files.items() if d.get("action") in actions)


def city(key: int) -> str:
    return "sf" if key % 2 else "la"  # a key keeps its partition


def write_history(
    path: Path, table_type: str, writes: int, clean_every: int = 5, compact_every: int = 0
) -> list[str]:
    """``writes`` small upserts, a clean (3 commits retained) every ``clean_every`` writes and on
    merge-on-read a compaction every ``compact_every``; returns the last clean's earliest commit
    to retain."""
    HudiTable.create(
        str(path), name="t", record_key="id", partition_by="city", ordering_field="ts", table_type=table_type
    )
    earliest = ""
    for i in range(writes):
        ids = [i % 7, (i * 3) % 11 + 7]
        cities = [city(k) for k in ids]
        if i == 0:  # a partition written once: its only file's commit gets archived
            ids, cities = [*ids, 100], [*cities, "ny"]
        HudiTable.open(str(path)).write(trips(ids, cities, i, f"w{i}"), "upsert")
        if compact_every and (i + 1) % compact_every == 0:
            assert HudiTable.open(str(path)).compact({"hoodie.compact.inline.max.delta.commits": "1"})
        if clean_every and (i + 1) % clean_every == 0:
            res = HudiTable.open(str(path)).clean({"hoodie.clean.commits.retained": "3"})
            earliest = res.earliest_to_retain or earliest
    return earliest


def expected_split(
    files: dict[str, dict[str, Any]], lo: int, hi: int, cleaner_retained: int, bound: str | None
) -> list[str]:
    """The instants Hudi's rules archive, from instant times alone: ``ArchivalUtils`` raises min to
    (commits after the cleaner's earliest commit to retain) + 2 = retained + 1; nothing unless more
    than max commits; then the oldest (count - min) commits that are before ``bound``; then the
    completed cleans and rollbacks older than the last of them."""
    commits = completed_of(files, set(Action.WRITE_ACTIONS))
    if len(commits) > cleaner_retained and lo < cleaner_retained + 1:
        lo, hi = cleaner_retained + 1, cleaner_retained + 1 + hi - lo
    if len(commits) <= hi:
        return []
    chosen = [c for c in commits if bound is None or c < bound][: len(commits) - lo]
    others = completed_of(files, {Action.CLEAN, Action.ROLLBACK})
    return sorted(chosen + [c for c in others if c < chosen[-1]])


def check_archived(path: Path, before: dict[str, dict[str, Any]], expected: list[str]) -> None:
    """Active timeline = before minus ``expected``; the archived timeline holds ``expected`` with the
    completion times, completed-file bytes and plans they had on the active timeline."""
    after = timeline_files(path)
    assert sorted(after) == sorted(set(before) - set(expected))
    for t in after:
        assert after[t] == before[t]
    archived = ArchivedTimeline.load(HudiTable.open(str(path)).storage)
    assert [i.time for i in archived.instants] == expected
    for inst in archived.instants:
        doc = before[inst.time]
        assert (inst.action, inst.completion_time, inst.state) == (
            doc["action"],
            doc["completion"],
            State.COMPLETED,
        )
        assert archived.metadata_bytes(inst) == (doc["states"][State.COMPLETED][1] or None)
        requested = doc["states"].get(State.REQUESTED)
        plan = archived.plan_bytes(inst)
        if inst.action == Action.CLEAN or (requested and requested[0] == Action.COMPACTION):
            assert requested is not None and plan == requested[1]
        elif inst.action in (Action.COMMIT, Action.DELTA_COMMIT):
            assert plan is None
    # each archived instant is in exactly one file of the latest manifest
    lsm = LSMTimeline(HudiTable.open(str(path)).storage, str(HISTORY))
    seen = [r.instant_time for f in lsm.manifest().file_names for r in lsm.read_file(f)]
    assert sorted(seen) == expected


def test_archive_copy_on_write_keeps_hudis_window(tmp_path: Path) -> None:
    path = tmp_path / "t"
    clean_earliest = write_history(path, "COPY_ON_WRITE", 40)
    before = timeline_files(path)
    reads = all_reads(str(path))
    opts = {
        "hoodie.keep.min.commits": "5",
        "hoodie.keep.max.commits": "8",
        "hoodie.clean.commits.retained": "3",
    }
    result = run_archive(path, opts)
    # the last clean retains the 3 newest commits: it binds no earlier than the 5 kept ones
    expected = expected_split(before, 5, 8, 3, clean_earliest)
    assert len([t for t in expected if before[t]["action"] == Action.COMMIT]) == 35
    assert list(result.archived) == expected and result.file is not None
    check_archived(path, before, expected)
    assert all_reads(str(path)) == reads
    assert all(any(r["city"] == "ny" for r in got) for got in reads.values())
    # a second run has nothing to archive (5 commits left) and changes nothing
    again = run_archive(path, opts)
    assert again.archived == () and again.repaired == ()
    check_archived(path, before, expected)


def test_archive_widens_the_kept_window_to_the_cleaner(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_history(path, "COPY_ON_WRITE", 40)  # the last clean retains 3 commits
    before = timeline_files(path)
    commits = completed_of(before, set(Action.WRITE_ACTIONS))
    # cleaner default (10 retained) raises min 5 -> 11 (and max 8 -> 14): 29 archived
    result = run_archive(path, {"hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "8"})
    expected = expected_split(before, 5, 8, 10, commits[-3])
    assert [t for t in expected if t in commits] == commits[:29]
    assert list(result.archived) == expected
    check_archived(path, before, expected)


def test_archive_merge_on_read_keeps_delta_commits_for_compaction(tmp_path: Path) -> None:
    path = tmp_path / "t"
    clean_earliest = write_history(path, "MERGE_ON_READ", 44, clean_every=7, compact_every=9)
    before = timeline_files(path)
    reads = all_reads(str(path))
    # Hudi's NUM_COMMITS compaction guard with 7 delta commits per compaction: 8 deltacommits
    # follow the last compaction, so the 2nd of them (leaving 6 after it) and later stay active
    compactions = completed_of(before, {Action.COMMIT})
    deltas = [t for t in completed_of(before, {Action.DELTA_COMMIT}) if t > compactions[-1]]
    assert len(compactions) == 4 and len(deltas) == 8
    bound = deltas[len(deltas) - 7]
    assert bound < clean_earliest  # the compaction guard binds, not the last clean's plan
    opts = {
        "hoodie.keep.min.commits": "5",
        "hoodie.keep.max.commits": "8",
        "hoodie.clean.commits.retained": "3",
        "hoodie.compact.inline.max.delta.commits": "7",
    }
    result = run_archive(path, opts)
    expected = expected_split(before, 5, 8, 3, bound)
    assert expected[-1] < bound and compactions[-1] in expected
    assert list(result.archived) == expected
    check_archived(path, before, expected)
    assert all_reads(str(path)) == reads


CLEAN = """
import sys
from inlet.core import HudiTable
HudiTable.open(sys.argv[1]).clean(
    {"hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.clean.fileversions.retained": "1"}
)
"""


@pytest.mark.parametrize("what", ["compaction", "clean"])
def test_archive_stops_before_a_pending_instant(tmp_path: Path, what: str) -> None:
    path = tmp_path / "t"
    if what == "compaction":  # a pending compaction is a pending write on Hudi's write timeline
        write_history(path, "MERGE_ON_READ", 10, clean_every=0)
        assert HudiTable.open(str(path)).schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    else:  # a clean killed after its plan stays pending
        write_history(path, "COPY_ON_WRITE", 10, clean_every=0)
        assert run_python(CLEAN, str(path), crash_at="clean_after_plan") == 77
    write_history_more(path, 20)
    before = timeline_files(path)
    pending = [t for t, d in before.items() if "action" not in d]
    assert len(pending) == 1
    commits = completed_of(before, set(Action.WRITE_ACTIONS))
    reads = all_reads(str(path))
    # KEEP_LATEST_FILE_VERSIONS: the cleaner widens nothing; min 3 / max 5 alone would archive 27
    opts = {
        "hoodie.keep.min.commits": "3",
        "hoodie.keep.max.commits": "5",
        "hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS",
    }
    result = run_archive(path, opts)
    if what == "compaction":
        # Hudi: the last completed commit before the earliest pending write stays too
        expected = [c for c in commits if c < pending[0]][:-1]
    else:
        # Inlet: nothing at or after an instant that stays active (the pending clean)
        expected = [c for c in commits if c < pending[0]]
    assert list(result.archived) == expected and len(expected) >= 8
    check_archived(path, before, expected)
    assert all_reads(str(path)) == reads


def write_history_more(path: Path, writes: int) -> None:
    for i in range(writes):
        ids = [i % 5, i % 5 + 5]
        HudiTable.open(str(path)).write(trips(ids, [city(k) for k in ids], 100 + i, f"m{i}"), "upsert")


ARCHIVE = """
import sys
from inlet.core import HudiTable
from inlet.core.actions.archive import archive
t = HudiTable.open(sys.argv[1])
archive(t.storage, t.layout_version, t.timeline_path, {
    "hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "8",
    "hoodie.clean.commits.retained": "3", "hoodie.timeline.compaction.batch.size": "2"})
"""
SECOND = {
    "hoodie.keep.min.commits": "5",
    "hoodie.keep.max.commits": "8",
    "hoodie.clean.commits.retained": "3",
    "hoodie.timeline.compaction.batch.size": "2",
}


@pytest.mark.parametrize(
    "point",
    [
        "archive_after_data_file",
        "archive_after_manifest",
        "archive_after_write",
        "archive_mid_delete",
        "archive_after_compacted_file",
    ],
)
def test_a_killed_archive_is_finished_by_the_next(tmp_path: Path, point: str) -> None:
    path = tmp_path / "t"
    clean_earliest = write_history(path, "COPY_ON_WRITE", 30)
    before = timeline_files(path)
    reads = all_reads(str(path))
    first = run_archive(path, {"hoodie.keep.min.commits": "20", "hoodie.keep.max.commits": "25"})
    assert len([t for t in first.archived if before[t]["action"] == Action.COMMIT]) == 10
    assert run_python(ARCHIVE, str(path), crash_at=point) == 77
    # whatever the step, every reader reads what it read before
    assert all_reads(str(path)) == reads
    assert HudiTable.open(str(path)).read().num_rows == len(reads["inlet"])
    result = run_archive(path, SECOND)
    expected = expected_split(before, 5, 8, 3, clean_earliest)
    check_archived(path, before, expected)
    assert all_reads(str(path)) == reads
    if point in ("archive_after_write", "archive_mid_delete"):
        assert result.repaired and not result.archived
    # both layer-0 files were merged into one layer-1 file spanning them
    lsm = LSMTimeline(HudiTable.open(str(path)).storage, str(HISTORY))
    names = lsm.manifest().file_names
    assert len(names) == 1 and names[0] == f"{expected[0]}_{expected[-1]}_1.parquet"


def test_archive_compacts_full_layers_and_cleans_old_files(tmp_path: Path) -> None:
    path = tmp_path / "t"
    HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts")
    opts = {
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.clean.commits.retained": "1",
        "hoodie.timeline.compaction.batch.size": "3",
    }
    history = path / HISTORY
    layer0: list[str] = []
    all_archived: list[str] = []
    write_history_more(path, 2)
    for round_ in range(6):
        write_history_more(path, 4)
        reads = all_reads(str(path))
        result = run_archive(path, opts)
        assert len(result.archived) == 4 and result.file is not None
        layer0.append(result.file)
        all_archived += result.archived
        assert all_reads(str(path)) == reads
        lsm = LSMTimeline(HudiTable.open(str(path)).storage, str(HISTORY))
        manifest = lsm.manifest().file_names
        if round_ == 2:
            # three layer-0 files (the batch size) became one layer-1 file
            l1 = f"{all_archived[0]}_{all_archived[-1]}_1.parquet"
            assert result.compacted == (l1,) and manifest == [l1]
        if round_ == 5:
            l1b = f"{all_archived[12]}_{all_archived[-1]}_1.parquet"
            assert result.compacted == (l1b,) and sorted(manifest) == sorted([l1, l1b])
            # 3 + 1 (compacted layers) manifests stay; the first layer-0 files are no longer named
            versions = sorted(int(n.split("_")[1]) for n in os.listdir(history) if n.startswith("manifest_"))
            assert versions == [5, 6, 7, 8] and (history / "_version_").read_text() == "8"
            assert {n for n in os.listdir(history) if n.endswith(".parquet")} == {l1, l1b, *layer0[3:]}
        archived = ArchivedTimeline.load(HudiTable.open(str(path)).storage)
        assert [i.time for i in archived.instants] == all_archived
    # data skipping by file name: a time range reads the files that overlap it
    window = ArchivedTimeline.load(
        HudiTable.open(str(path)).storage, start=all_archived[13], end=all_archived[14]
    )
    assert [i.time for i in window.instants] == all_archived[13:15]


def test_archived_files_are_hudis_format(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_history(path, "COPY_ON_WRITE", 12, clean_every=0)
    result = run_archive(
        path,
        {
            "hoodie.keep.min.commits": "2",
            "hoodie.keep.max.commits": "3",
            "hoodie.clean.commits.retained": "1",
        },
    )
    history = path / HISTORY
    assert sorted(os.listdir(history)) == sorted([result.file, "manifest_1", "_version_"])
    assert (history / "_version_").read_bytes() == b"1"
    size = (history / str(result.file)).stat().st_size
    # Jackson's default pretty printer, as HoodieLSMTimelineManifest.toJsonString writes it
    assert (history / "manifest_1").read_text() == (
        '{\n  "files" : [ {\n    "fileName" : "'
        + str(result.file)
        + f'",\n    "fileLen" : {size}\n'
        + "  } ]\n}"
    )
    pf = pq.ParquetFile(history / str(result.file))
    schema = pf.schema
    assert [schema.column(i).name for i in range(len(schema))] == [
        "instantTime", "completionTime", "action", "metadata", "plan", "version"
    ]  # fmt: skip
    assert [str(schema.column(i).logical_type) for i in range(3)] == ["String"] * 3
    assert schema.column(5).physical_type == "INT32" and schema.column(5).max_definition_level == 0
    footer = pf.metadata.metadata
    avro_schema = json.loads(footer[b"parquet.avro.schema"])
    assert (
        avro_schema["name"] == "HoodieLSMTimelineInstant"
        and avro_schema["namespace"] == "org.apache.hudi.avro.model"
    )
    assert b"ARROW:schema" not in footer
    rows = pf.read().to_pylist()
    assert [r["instantTime"] for r in rows] == list(result.archived) and {r["version"] for r in rows} == {1}
    # a reader falls back to listing the manifests when the version file is missing (Hudi's rule)
    os.remove(history / "_version_")
    archived = ArchivedTimeline.load(HudiTable.open(str(path)).storage)
    assert [i.time for i in archived.instants] == list(result.archived)
    assert posixpath.basename(str(result.file)).endswith("_0.parquet")


def test_archive_nothing_below_max_and_bad_options(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_history(path, "COPY_ON_WRITE", 6, clean_every=0)
    before = timeline_files(path)
    assert run_archive(path, {}).archived == ()  # 6 commits, 30 allowed
    assert timeline_files(path) == before and not (path / HISTORY / "_version_").exists()
    with pytest.raises(InvalidOptionError, match=r"hoodie\.keep\.max\.commits"):
        run_archive(path, {"hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "5"})
    with pytest.raises(InvalidOptionError, match=r"hoodie\.keep\.min\.commits"):
        run_archive(path, {"hoodie.keep.min.commits": "zero"})
    with pytest.raises(UnsupportedError, match=r"hoodie\.archive\.beyond\.savepoint"):
        run_archive(path, {"hoodie.archive.beyond.savepoint": "true"})
    assert timeline_files(path) == before
