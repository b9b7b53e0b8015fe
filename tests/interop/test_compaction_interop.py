"""Merge-on-Read compaction by Inlet, read back by the independent hudi-rs reader and by Inlet.

Each story writes an Inlet MOR table (and :class:`MorModel`, the dict model of a merged read),
schedules a compaction, keeps writing while it is pending, runs it, compacts again and keeps
writing. At each step hudi-rs (file group readers 2 and 1) and Inlet's reader must return exactly
the model's rows, for the snapshot and as of every instant (deltacommits and compactions); the file
slices hudi-rs sees must be the ones Inlet's writer sees; after a compaction that took every log,
read-optimized reads (base files only) must equal the snapshot.

Compaction never changes what a read returns. What it changes is merging *later*: a tombstone
(a delete in a log file) disappears into the compacted base file, so a key deleted before the
compaction instant comes back as a plain insert, whatever ordering value the delete carried.
The model drops those tombstones when the compaction completes.

Apache Hudi's own table (``sample_table_mor_avro_v9_txns_simple_meta``): Inlet runs the plan that
Apache Hudi scheduled (its compaction undone on a copy), and schedules its own plan on the table as
it was before that compaction. Either way the plan names exactly the file groups and log files
Hudi's did, the compacted base files hold exactly the records of Hudi's (meta columns included,
the file name aside), and hudi-rs reads every instant exactly as it read Hudi's table.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest
from support.hudi_testdata import available, extract
from test_mor_interop import (
    COMMIT_TIME_ORDERING,
    EVENT_TIME,
    META,
    MorHarness,
    canonical,
    hudi_read,
    hudi_table,
    row,
)

from inlet.core import CommitResult, HudiTable, faults
from inlet.core.actions.compaction_plan import CompactionPlan, pending_compactions, read_plan
from inlet.core.actions.compaction_run import AFTER_FIRST_FILE
from inlet.core.file_group.view import BaseFile, FileSystemView, list_data_files
from inlet.core.timeline.commit_metadata import CommitMetadata

REPO_ROOT = Path(__file__).resolve().parents[2]
DUE_NOW = {"hoodie.compact.inline.max.delta.commits": "1"}
TXNS = "sample_table_mor_avro_v9_txns_simple_meta"
HUDI_COMPACTION = "20260307162618152"  # the compaction Apache Hudi ran on that table


class CompactionHarness(MorHarness):
    """A :class:`MorHarness` that also schedules and runs compactions."""

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.completed: list[str] = []  # compaction instants, completed
        self.plans: dict[str, CompactionPlan] = {}
        self.full: dict[str, bool] = {}  # the plan took every file slice with log files

    def schedule(self, **options: str) -> str:
        instant = self.table.schedule_compaction({**DUE_NOW, **options})
        assert instant is not None
        self.plans[instant] = read_plan(self.table.timeline, instant)
        # the plan takes every log the latest file slices hold (nothing else is pending)
        files = list_data_files(self.table.storage)
        view = FileSystemView(self.table.timeline, None, files)
        expected = {
            (s.partition, s.file_id): tuple(lf.name for lf in s.log_files)
            for s in view.latest_file_slices()
            if s.log_files
        }
        planned = {(op.partition, op.file_id): op.log_files for op in self.plans[instant].operations}
        self.full[instant] = planned == expected
        if not options:
            assert planned == expected
        return instant

    def run(self, instant: str) -> CommitResult:
        result = self.table.run_compaction(instant)
        assert result is not None and result.instant_time == instant and result.action == "commit"
        assert result.metadata.compacted and result.metadata.operation_type == "COMPACT"
        self.completed.append(instant)
        # logs before the compaction instant are merged into its base files: their tombstones go
        old_tombs = [e for e in self.model.entries if e.tomb is not None and e.commit < instant]
        if self.full[instant]:
            self.model.entries = [e for e in self.model.entries if e not in old_tombs]
        else:
            assert not old_tombs, "the model cannot tell which file group holds a tombstone"
        return result

    # ------------------------------------------------------------------ checks

    def _check_timeline(self) -> None:
        tl = self.table.timeline
        assert [i.time for i in tl.completed_writes() if i.action != "commit"] == self.model.instants
        assert [i.time for i in tl.completed(["commit"])] == self.completed
        assert all(i.action == "compaction" for i in tl.pending())
        hudi_tl = hudi_table(self.path, "2").get_timeline()
        deltas = sorted(t for t, a in self.actions.items() if a == "deltacommit")
        assert sorted(i.timestamp for i in hudi_tl.get_completed_deltacommits()) == deltas
        assert sorted(i.timestamp for i in hudi_tl.get_completed_commits()) == self.completed

    def check(self, read_optimized: bool = False, time_travel: bool = True) -> None:
        """Every reader equals the model, snapshot and as of every instant (compactions included)."""
        self._check_timeline()
        self._check_file_slices()
        points: list[str | None] = [None]
        if time_travel:
            points += sorted([*self.model.instants, *self.completed])
        for as_of in points:
            expected, columns = self.model.rows(as_of)
            want = canonical(expected, [*META, *columns])
            where = f"as of {as_of or 'latest'}"
            for version in ("2", "1"):
                if version == "1" and not self._v1_can_read():
                    continue
                try:
                    got = hudi_read(self.path, version, as_of)
                except Exception as e:
                    if version == "1" and any(k in str(e) for k in self.v1_known_errors):
                        continue
                    raise
                self._compare(f"hudi-rs v{version} {where}", got, want, columns)
            mine = HudiTable.open(self.path).read(as_of=as_of)
            self._compare(f"inlet {where}", mine, want, columns)
        if read_optimized:  # every log was compacted: base files alone are the snapshot
            expected, columns = self.model.rows()
            want = canonical(expected, [*META, *columns])
            for version in ("2", "1"):
                self._compare(
                    f"hudi-rs v{version} RO", hudi_read(self.path, version, None, True), want, columns
                )
            mine = HudiTable.open(self.path).read(query_type="read_optimized")
            self._compare("inlet RO", mine, want, columns)


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    count = 0

    def make(**kwargs: Any) -> CompactionHarness:
        nonlocal count
        count += 1
        return CompactionHarness(tmp_path / f"t{count}", **kwargs)

    return make


def _p(partitioned: bool, i: int) -> str | None:
    return ("x", "y")[i % 2] if partitioned else None


def _keys(partitioned: bool, *ids: int) -> list[dict[str, Any]]:
    return [{"id": i, **({"p": _p(True, i)} if partitioned else {})} for i in ids]


def run_story(h: CompactionHarness, partitioned: bool) -> None:
    """Writes; a compaction scheduled, writes while it is pending, run; writes; compaction again."""
    p = lambda i: _p(partitioned, i)  # noqa: E731
    h.write("insert", [row(i, 10, "a", p(i), False) for i in range(1, 9)])
    h.write(
        "upsert",
        [
            row(1, 11, "b", p(1), False),  # newer ordering value: wins
            row(2, 9, "b", p(2), False),  # older: the stored record stays
            row(3, 12, "b", p(3), False),  # duplicate keys in the batch: the larger wins
            row(3, 11, "c", p(3), False),
            row(9, 10, "b", p(9), False),  # a new key
        ],
    )
    h.write("delete", _keys(partitioned, 5, 6, 99))
    h.write(
        "upsert",
        [
            row(7, 15, "d", p(7), True),  # soft delete, newer: deletes
            row(8, 5, "d", p(8), True),  # soft delete, older: loses
            row(5, 20, "d", p(5), False),  # back after the delete operation
            row(2, 12, "d", p(2), False),
        ],
    )
    first = h.schedule()
    h.check(time_travel=False)  # a pending compaction changes no read
    # writes while the compaction is pending: they complete after its instant, so they belong to
    # the slices its base files start, and must survive it
    h.write(
        "upsert",
        [
            row(2, 13, "e", p(2), False),  # an update of a compacted file group
            row(9, 9, "e", p(9), False),  # loses to the stored ts 10, before and after the compaction
            row(7, 16, "e", p(7), False),  # beats the soft delete's 15
            row(13, 1, "e", p(13), False),  # a new key
        ],
    )
    h.write("delete", _keys(partitioned, 4))
    h.check()
    h.run(first)
    h.check()
    # tombstones from before the compaction are gone: deleted keys come back as plain inserts,
    # even with ordering values lower than the deleted versions'
    h.write(
        "upsert", [row(6, 0, "f", p(6), False), row(1, 1, "f", p(1), False), row(4, 20, "f", p(4), False)]
    )
    second = h.schedule()
    h.run(second)
    h.check(read_optimized=True, time_travel=False)
    h.write("upsert", [row(8, 17, "g", p(8), False), row(20, 1, "g", p(20), False)])
    h.check()


STORIES = [
    pytest.param("simple", "avro", True, EVENT_TIME, id="simple-avro-partitioned"),
    pytest.param("simple", "parquet", False, EVENT_TIME, id="simple-parquet-unpartitioned"),
    pytest.param("bucket", "avro", False, EVENT_TIME, id="bucket-avro-unpartitioned"),
    pytest.param("bucket", "parquet", True, EVENT_TIME, id="bucket-parquet-partitioned"),
]


@pytest.mark.parametrize(("index", "block_format", "partitioned", "merge_mode"), STORIES)
def test_compaction_story(
    harness: Any, index: str, block_format: str, partitioned: bool, merge_mode: str
) -> None:
    h = harness(
        index=index,
        block_format=block_format,
        partitioned=partitioned,
        merge_mode=merge_mode,
        small_files=False,
    )
    run_story(h, partitioned)
    # each compaction wrote one base file per planned file group, named <fileId>_<token>_<instant>
    for instant, plan in h.plans.items():
        md = h.table.timeline.commit_metadata(next(i for i in h.table.timeline.instants if i.time == instant))
        stats = {(s.partition_path, s.file_id): s for s in md.write_stats()}
        assert set(stats) == plan.file_groups()
        for op in plan.operations:
            stat = stats[(op.partition, op.file_id)]
            bf = BaseFile.parse(stat.path)
            assert bf is not None and bf.instant_time == instant and bf.file_id == op.file_id
            assert stat.prev_commit == op.base_instant and stat.prev_base_file == op.base_file
            assert stat.total_log_files_compacted == len(op.log_files)


def test_commit_time_ordering(harness: Any) -> None:
    h = harness(merge_mode=COMMIT_TIME_ORDERING, block_format="parquet", small_files=False)
    p = lambda i: _p(True, i)  # noqa: E731
    h.write("upsert", [row(i, 10, "a", p(i), False) for i in range(1, 7)])
    h.write(
        "upsert", [row(1, 5, "b", p(1), False), row(2, 50, "b", p(2), False), row(2, 1, "c", p(2), False)]
    )
    h.write("upsert", [row(3, 1, "d", p(3), True), row(1, 99, "d", p(1), False)])
    h.write("delete", _keys(True, 4))
    instant = h.schedule()
    h.write("upsert", [row(1, 0, "e", p(1), False), row(5, 1, "e", p(5), True)])
    h.run(instant)
    h.write("upsert", [row(4, 0, "f", p(4), False), row(3, 0, "f", p(3), False)])
    h.check()


def test_io_cap_limits_the_plan(harness: Any) -> None:
    """Log-only file groups (bucket index) count the maximum file size as their write I/O: with
    10 MB per file group and a 25 MB target, a plan takes three groups (the third crosses it),
    largest logs first; the next plan takes the rest."""
    h = harness(index="bucket", buckets=5, partitioned=False, small_files=False)
    h.write("insert", [row(i, 1, "a", None, False) for i in range(1, 30)])
    h.write("upsert", [row(i, 2, "b", None, False) for i in range(1, 30, 3)])
    files = list_data_files(h.table.storage)
    view = FileSystemView(h.table.timeline, None, files)
    sizes = {s.file_id: sum(lf.size for lf in s.log_files) for s in view.latest_file_slices()}
    assert len(sizes) == 5
    capped = {"hoodie.parquet.max.file.size": str(10 * 1024 * 1024), "hoodie.compaction.target.io": "25"}
    first = h.schedule(**capped)
    ops = h.plans[first].operations
    assert [op.io_mb for op in ops] == [10, 10, 10]
    assert [op.file_id for op in ops] == sorted(sizes, key=lambda f: -sizes[f])[:3]
    h.check(time_travel=False)
    h.run(first)
    # no delta commit since the last compaction: due only with a threshold of 0
    assert h.table.schedule_compaction({**DUE_NOW, **capped}) is None
    second = h.schedule(**capped, **{"hoodie.compact.inline.max.delta.commits": "0"})
    assert {op.file_id for op in h.plans[second].operations} == set(
        sorted(sizes, key=lambda f: -sizes[f])[3:]
    )
    h.run(second)
    h.write("upsert", [row(2, 3, "c", None, False)])
    h.check()


def test_crashed_compaction_reads_as_before_and_reruns(harness: Any) -> None:
    """A compaction killed after its first base file: readers see the table as before; the next
    run rolls the attempt back (its files go, its plan stays) and completes it."""
    h = harness(small_files=False)
    h.write("insert", [row(i, 10, "a", _p(True, i), False) for i in range(1, 9)])
    h.write("upsert", [row(i, 11, "b", _p(True, i), False) for i in (1, 2, 3)])
    h.write("delete", _keys(True, 4, 5))
    instant = h.schedule()
    assert len(h.plans[instant].operations) == 2
    code = "import sys\nfrom inlet.core import HudiTable\nHudiTable.open(sys.argv[1]).run_compaction()\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, h.path],
        env={**os.environ, "INLET_CRASH_AT": AFTER_FIRST_FILE},
        cwd=str(REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == faults.CRASH_EXIT_CODE, proc.stderr
    [pending] = h.table.timeline.pending()
    assert (pending.time, pending.action, pending.state.value) == (instant, "compaction", "INFLIGHT")
    left = [f.path for f in list_data_files(h.table.storage) if f.path.endswith(f"_{instant}.parquet")]
    assert len(left) == 1
    h.check()
    h.run(instant)
    h.check(read_optimized=True)


# ================================================================================ Apache Hudi's table


def _hudi_rows(path: Path, version: str, as_of: str | None = None, read_optimized: bool = False) -> list[Any]:
    """hudi-rs rows (without ``_hoodie_file_name``: a compacted record names its new file)."""
    got = hudi_read(str(path), version, as_of, read_optimized)
    if got is None:
        return []
    rows = got.drop_columns(["_hoodie_file_name"]).to_pylist()
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def _instants(path: Path) -> list[str]:
    return sorted({f.name[:17] for f in (path / ".hoodie" / "timeline").iterdir() if f.name[:1].isdigit()})


def _snapshot_reads(path: Path, instants: list[str]) -> dict[tuple[str, str | None, bool], list[Any]]:
    out = {}
    for version in ("2", "1"):
        for as_of in [None, *instants]:
            out[(version, as_of, False)] = _hudi_rows(path, version, as_of)
        out[(version, None, True)] = _hudi_rows(path, version, None, True)
    return out


def _records(files: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """Records of base files by file id, without the file name column (the write token differs)."""
    out = {}
    for f in files:
        table = pq.read_table(f)
        assert set(table.column("_hoodie_file_name").to_pylist()) <= {f.name}
        rows = table.drop_columns(["_hoodie_file_name"]).to_pylist()
        out[BaseFile.parse(f.name).file_id] = sorted(rows, key=lambda r: r["_hoodie_record_key"])  # type: ignore[union-attr]
    return out


def _plan_record(path: Path, instant: str) -> dict[str, Any]:
    schema = json.loads((REPO_ROOT / "core/src/inlet/core/avro/HoodieCompactionPlan.avsc").read_text())
    with open(path / ".hoodie" / "timeline" / f"{instant}.compaction.requested", "rb") as f:
        [rec] = list(fastavro.reader(f, reader_schema=fastavro.parse_schema(schema)))
    return rec  # type: ignore[no-any-return]


@pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")
def test_runs_apache_hudis_own_plan(tmp_path: Path) -> None:
    """Apache Hudi's compaction undone on a copy (its commit, inflight file and base files gone,
    its plan kept): Inlet runs that plan; the result is Hudi's, and hudi-rs reads it as before."""
    path = extract(TXNS, tmp_path / "txns")
    instants = _instants(path)
    before = _snapshot_reads(path, instants)
    hudi_files = sorted(path.glob(f"*/*_{HUDI_COMPACTION}.parquet"))
    hudi_records = _records(hudi_files)
    assert len(hudi_records) == 2
    [hudi_commit] = (path / ".hoodie" / "timeline").glob(f"{HUDI_COMPACTION}_*.commit")
    hudi_stats = {s.file_id: s for s in CommitMetadata.from_bytes(hudi_commit.read_bytes()).write_stats()}
    for f in [*hudi_files, hudi_commit]:
        f.unlink()
    (path / ".hoodie" / "timeline" / f"{HUDI_COMPACTION}.compaction.inflight").unlink()
    table = HudiTable.open(str(path))
    assert pending_compactions(table) == [HUDI_COMPACTION]
    # the table lists its files through a metadata table Inlet cannot update: the completion turns it off
    result = table.run_compaction()
    assert result is not None and result.instant_time == HUDI_COMPACTION
    assert not (path / ".hoodie" / "metadata").exists()
    assert HudiTable.open(str(path)).props["hoodie.table.metadata.partitions"] == ""
    assert (path / ".hoodie" / "timeline" / f"{HUDI_COMPACTION}.compaction.inflight").stat().st_size == 0
    mine = sorted(path.glob(f"*/*_{HUDI_COMPACTION}.parquet"))
    assert _records(mine) == hudi_records
    counts = (
        "prev_commit",
        "prev_base_file",
        "num_writes",
        "num_deletes",
        "num_update_writes",
        "num_inserts",
        "total_log_records",
        "total_log_blocks",
        "total_updated_records_compacted",
        "total_log_files_compacted",
        "total_log_size_compacted",
    )
    for s in result.metadata.write_stats():  # what Hudi recorded for the same work
        assert {c: getattr(s, c) for c in counts} == {c: getattr(hudi_stats[s.file_id], c) for c in counts}
    after = _snapshot_reads(path, instants)
    assert after == before


@pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")
def test_schedules_the_plan_apache_hudi_scheduled(tmp_path: Path) -> None:
    """The table as it was before Apache Hudi's compaction (later instants and their files gone):
    Inlet's plan names Hudi's file groups, base files and log files, with Hudi's metrics; the
    compacted records are Hudi's; hudi-rs reads every earlier instant as it read Hudi's table."""
    original = extract(TXNS, tmp_path / "original")
    path = extract(TXNS, tmp_path / "rewound")
    hudi_plan = _plan_record(original, HUDI_COMPACTION)
    hudi_records = _records(sorted(original.glob(f"*/*_{HUDI_COMPACTION}.parquet")))
    earlier = [t for t in _instants(path) if t < HUDI_COMPACTION]
    timeline = path / ".hoodie" / "timeline"
    for f in list(timeline.iterdir()):
        if f.name[:1].isdigit() and f.name[:17] >= HUDI_COMPACTION:
            f.unlink()
    for f in list(path.glob("*/*")):
        parsed = BaseFile.parse(f.name)
        if parsed is not None and parsed.instant_time >= HUDI_COMPACTION:
            f.unlink()
    table = HudiTable.open(str(path))
    options = {**DUE_NOW, "hoodie.metadata.enable": "false"}
    instant = table.schedule_compaction(options)
    assert instant is not None
    mine = _plan_record(path, instant)
    key = lambda op: (op["partitionPath"], op["fileId"])  # noqa: E731
    assert sorted(mine["operations"], key=key) == sorted(hudi_plan["operations"], key=key)
    assert {k: mine[k] for k in ("extraMetadata", "version", "strategy", "preserveHoodieMetadata")} == {
        k: hudi_plan[k] for k in ("extraMetadata", "version", "strategy", "preserveHoodieMetadata")
    }
    result = table.run_compaction(instant, options)
    assert result is not None
    assert _records(sorted(path.glob(f"*/*_{instant}.parquet"))) == hudi_records
    for as_of in [None, *earlier]:
        for version in ("2", "1"):
            want = _hudi_rows(original, version, as_of or earlier[-1])
            assert _hudi_rows(path, version, as_of) == want, (version, as_of)
    want_ro = _hudi_rows(original, "2", HUDI_COMPACTION, False)
    assert _hudi_rows(path, "2", None, True) == want_ro  # every log compacted: RO is the snapshot
    shutil.rmtree(tmp_path)
