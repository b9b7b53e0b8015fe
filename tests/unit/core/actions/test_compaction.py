"""Merge-on-Read compaction: scheduling (triggers, strategy, I/O cap), the plan's bytes, running a
plan (merged like a read, Hudi's commit metadata), writes while a compaction is pending, failures
and crashes. Readers here are Inlet's; tests/interop checks the same tables with hudi-rs."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inlet.core import HudiTable
from inlet.core.actions import compaction_run
from inlet.core.actions.compaction_plan import (
    AFTER_SCHEDULED,
    CompactionOperation,
    compaction_trigger,
    pending_compactions,
    read_plan,
    select_operations,
)
from inlet.core.actions.compaction_run import (
    AFTER_DATA_FILES,
    AFTER_FIRST_FILE,
    AFTER_INFLIGHT,
    BEFORE_COMPLETE,
    compact_operation,
    roll_back_attempt,
)
from inlet.core.commit import heartbeat, markers
from inlet.core.commit.protocol import LocalCommitProtocol, find_conflicts
from inlet.core.config import CompactionConfig, CompactionStrategy, CompactionTrigger
from inlet.core.errors import (
    CommitConflictError,
    InstantNotFoundError,
    InvalidConfigError,
    InvalidInputError,
    UnsupportedError,
)
from inlet.core.file_group.view import BaseFile, FileSystemView, LogFile, list_data_files
from inlet.core.timeline.instant import Action, Instant, State, format_instant_time, parse_instant_time

REPO_ROOT = Path(__file__).resolve().parents[4]
PLAN_SCHEMA = REPO_ROOT / "core/src/inlet/core/avro/HoodieCompactionPlan.avsc"
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path")

RUNNER = """
import sys
from inlet.core import HudiTable
t = HudiTable.open(sys.argv[1])
if sys.argv[2] == "schedule":
    t.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
else:
    t.run_compaction()
"""


# ------------------------------------------------------------------------------ helpers


def batch(rows: list[tuple[Any, ...]], deleted: bool = False) -> pa.Table:
    """Rows of (id, city, ts, v); ``deleted`` adds ``_hoodie_is_deleted``."""
    cols: dict[str, Any] = {
        "id": pa.array([r[0] for r in rows], pa.int64()),
        "city": pa.array([r[1] for r in rows], pa.string()),
        "ts": pa.array([r[2] for r in rows], pa.int64()),
        "v": pa.array([r[3] for r in rows], pa.string()),
    }
    if deleted:
        cols["_hoodie_is_deleted"] = pa.array([bool(r[4]) if len(r) > 4 else False for r in rows])
    return pa.table(cols)


def keys(*pairs: tuple[int, str]) -> pa.Table:
    return pa.table({"id": pa.array([p[0] for p in pairs], pa.int64()), "city": [p[1] for p in pairs]})


def snapshot(table: HudiTable, query_type: str = "snapshot") -> list[dict[str, Any]]:
    got = HudiTable.open(table.base_path).read(query_type=query_type)
    cols = [*META, "id", "city", "ts", "v"]
    return sorted(got.select(cols).to_pylist(), key=lambda r: (r["city"], r["id"]))


def mor(tmp_path: Path, name: str = "t", **kwargs: Any) -> HudiTable:
    opts: dict[str, Any] = {
        "record_key": "id",
        "partition_by": "city",
        "ordering_field": "ts",
        "table_type": "MERGE_ON_READ",
    }
    opts.update(kwargs)
    return HudiTable.create(str(tmp_path / name), name=name, **opts)


NO_SMALL_FILES = {"hoodie.parquet.small.file.limit": "0"}


def story(table: HudiTable, block_format: str = "avro") -> None:
    """Inserts, updates (in and out of order, duplicate keys), both kinds of deletes, re-inserts."""
    opts = {**NO_SMALL_FILES, "hoodie.logfile.data.block.format": block_format}
    table.write(batch([(i, ("sf", "la")[i % 2], 10, "a") for i in range(1, 9)], True), "insert", opts)
    table.write(
        batch(
            [(1, "la", 11, "b"), (2, "sf", 9, "b"), (3, "la", 12, "b"), (3, "la", 11, "c"), (9, "la", 1, "b")]
        ),
        "upsert",
        opts,
    )
    table.write(keys((5, "la"), (6, "sf")), "delete", opts)
    table.write(
        batch([(7, "la", 15, "d", True), (8, "sf", 5, "d", True), (5, "la", 20, "d")], True), "upsert", opts
    )


def latest_slices(table: HudiTable) -> dict[tuple[str, str], Any]:
    view = FileSystemView(table.timeline, None, list_data_files(table.storage))
    return {(s.partition, s.file_id): s for s in view.latest_file_slices()}


def instant_files(table: HudiTable, instant: str) -> list[str]:
    return sorted(f.path for f in list_data_files(table.storage) if f.path.endswith(f"_{instant}.parquet"))


# ------------------------------------------------------------------------------ the plan


def test_plan_is_hudis_avro_and_names_the_latest_logs(tmp_path: Path) -> None:
    t = mor(tmp_path)
    story(t)
    slices = latest_slices(t)
    expected = {k: s for k, s in slices.items() if s.log_files}
    assert len(expected) == 2  # one file group per partition, both with log files
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    tl = t.timeline
    [pending] = tl.pending()
    assert (pending.time, pending.action, pending.state) == (instant, "compaction", State.REQUESTED)
    raw = (Path(t.base_path) / ".hoodie/timeline" / f"{instant}.compaction.requested").read_bytes()
    schema = fastavro.parse_schema(json.loads(PLAN_SCHEMA.read_text()))
    [plan] = list(fastavro.reader(io.BytesIO(raw), reader_schema=schema))
    assert plan["version"] == 2 and plan["extraMetadata"] == {} and plan["strategy"] is None
    assert plan["preserveHoodieMetadata"] is False and plan["missingSchedulePartitions"] == []
    ops = {(op["partitionPath"], op["fileId"]): op for op in plan["operations"]}
    assert set(ops) == set(expected)
    for key, s in expected.items():
        op = ops[key]
        assert op["deltaFilePaths"] == [lf.name for lf in s.log_files]  # names, in slice order
        assert op["dataFilePath"] == (s.base_file.name if s.base_file else None)
        assert op["baseInstantTime"] == s.base_instant and op["bootstrapFilePath"] is None
        size = sum(lf.size for lf in s.log_files)
        assert list(op["metrics"]) == [
            "TOTAL_LOG_FILES",
            "TOTAL_IO_MB",
            "TOTAL_IO_READ_MB",
            "TOTAL_LOG_FILES_SIZE",
            "TOTAL_IO_WRITE_MB",
        ]
        assert op["metrics"]["TOTAL_LOG_FILES"] == len(s.log_files)
        assert op["metrics"]["TOTAL_LOG_FILES_SIZE"] == size
        assert op["metrics"]["TOTAL_IO_MB"] == 0  # small files: whole MB, as Hudi counts
    # ordered by total log size, largest first (Hudi's LogFileSizeBasedCompactionStrategy)
    sizes = [op["metrics"]["TOTAL_LOG_FILES_SIZE"] for op in plan["operations"]]
    assert sizes == sorted(sizes, reverse=True)
    assert [i.to_dict()["operations"] for i in t.compactions()] == [
        [CompactionOperation.from_avro(op).to_dict() for op in plan["operations"]]
    ]


def test_trigger_strategies(tmp_path: Path) -> None:
    t = mor(tmp_path)
    for n in range(4):
        t.write(batch([(1, "sf", n, f"v{n}")]), "upsert")
    assert t.schedule_compaction() is None  # NUM_COMMITS, 5 by default: 4 delta commits
    t.write(batch([(1, "sf", 9, "v9")]), "upsert")
    tl = t.timeline
    first = tl.completed_writes()[0].time
    now = format_instant_time(parse_instant_time(first) + dt.timedelta(hours=2))

    def due(**opts: str) -> bool:
        return compaction_trigger(tl, opts, now).due

    assert due() and not due(**{"hoodie.compact.inline.max.delta.commits": "6"})
    time_opts = {"hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED"}
    assert due(**time_opts)  # two hours since the first delta commit, one needed
    assert not due(**time_opts, **{"hoodie.compact.inline.max.delta.seconds": str(3 * 3600)})
    few, late = (
        {"hoodie.compact.inline.max.delta.commits": "6"},
        {"hoodie.compact.inline.max.delta.seconds": "9000"},
    )
    assert due(**{"hoodie.compact.inline.trigger.strategy": "num_or_time"}, **few)
    assert not due(**{"hoodie.compact.inline.trigger.strategy": "num_or_time"}, **few, **late)
    assert due(**{"hoodie.compact.inline.trigger.strategy": "NUM_AND_TIME"})
    assert not due(**{"hoodie.compact.inline.trigger.strategy": "NUM_AND_TIME"}, **late)
    assert not due(**{"hoodie.compact.inline.trigger.strategy": "NUM_AND_TIME"}, **few)
    with pytest.raises(InvalidConfigError, match=r"trigger\.strategy"):
        due(**{"hoodie.compact.inline.trigger.strategy": "SOMETIMES"})
    # end to end, the real clock: elapsed seconds decide
    assert t.schedule_compaction({**time_opts, "hoodie.compact.inline.max.delta.seconds": "3600"}) is None
    instant = t.schedule_compaction()  # five delta commits: due
    assert instant is not None
    t.run_compaction(instant)
    # after a compaction delta commits count from it
    t.write(batch([(1, "sf", 10, "v10")]), "upsert")
    trig = compaction_trigger(t.timeline, {})
    assert (trig.due, trig.delta_commits) == (False, 1)
    assert t.schedule_compaction(DUE) is not None


def op(fid: str, size: int, logs: int, io: int) -> CompactionOperation:
    return CompactionOperation(
        "p",
        fid,
        "1",
        None,
        tuple(f"l{i}" for i in range(logs)),
        {"TOTAL_LOG_FILES_SIZE": size, "TOTAL_IO_MB": io},
    )


def test_strategies_and_the_io_cap() -> None:
    ops = [op("a", 10, 1, 100), op("b", 30, 2, 100), op("c", 20, 5, 100), op("d", 5, 3, 100)]

    def pick(**opts: str) -> list[str]:
        return [o.file_id for o in select_operations(ops, opts)]

    assert pick() == ["b", "c", "a", "d"]  # largest total log size first
    assert pick(**{"hoodie.compaction.strategy": "log_count"}) == ["c", "d", "b", "a"]
    full_name = "org.apache.hudi.table.action.compact.strategy.LogFileNumBasedCompactionStrategy"
    assert pick(**{"hoodie.compaction.strategy": full_name}) == ["c", "d", "b", "a"]
    assert CompactionStrategy.parse(CompactionStrategy.LOG_SIZE.class_name) is CompactionStrategy.LOG_SIZE
    assert pick(**{"hoodie.compaction.logfile.size.threshold": "20"}) == ["b", "c"]
    assert pick(
        **{"hoodie.compaction.strategy": "LOG_COUNT", "hoodie.compaction.logfile.num.threshold": "3"}
    ) == [
        "c",
        "d",
    ]
    # the I/O cap: operations are taken until the target is reached, the one reaching it included
    assert pick(**{"hoodie.compaction.target.io": "200"}) == ["b", "c"]
    assert pick(**{"hoodie.compaction.target.io": "201"}) == ["b", "c", "a"]
    assert pick(**{"hoodie.compaction.target.io": "0"}) == ["b"]
    assert CompactionConfig.TARGET_IO_MB.default == 500 * 1024
    assert CompactionTrigger.parse("num-or-time") is CompactionTrigger.NUM_OR_TIME


# ------------------------------------------------------------------------------ running


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_run_merges_as_reads_do_and_records_hudis_metadata(tmp_path: Path, block_format: str) -> None:
    t = mor(tmp_path)
    story(t, block_format)
    before = snapshot(t)
    slices = latest_slices(t)
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    plan = read_plan(t.timeline, instant)
    result = t.run_compaction()
    assert result is not None and result.instant_time == instant
    assert (result.action, result.operation) == ("commit", "COMPACT")
    # nothing a reader sees changes (commit times and sequence numbers of the records included)
    assert snapshot(t) == before
    assert snapshot(t, "read_optimized") == before  # every log was compacted
    tl = t.timeline
    done = tl.find(instant)
    assert (done.action, done.state, done.completion_time) == (
        "commit",
        State.COMPLETED,
        result.completion_time,
    )
    timeline_dir = Path(t.base_path) / ".hoodie/timeline"
    assert (timeline_dir / f"{instant}.compaction.inflight").read_bytes() == b""
    assert (timeline_dir / f"{instant}.compaction.requested").exists()
    assert (timeline_dir / f"{instant}_{done.completion_time}.commit").exists()
    md = tl.commit_metadata(done)
    assert md.compacted and md.operation_type == "COMPACT" and md.schema == t.avro_schema()
    assert not (Path(t.base_path) / ".hoodie/.temp" / instant).exists()
    assert not (Path(t.base_path) / ".hoodie/.heartbeat" / instant).exists()
    stats = {(s.partition_path, s.file_id): s for s in md.write_stats()}
    assert set(stats) == plan.file_groups()
    after_slices = latest_slices(t)
    for o in plan.operations:
        s, old = stats[(o.partition, o.file_id)], slices[(o.partition, o.file_id)]
        bf = BaseFile.parse(s.path)
        assert bf is not None and (bf.file_id, bf.instant_time) == (o.file_id, instant)
        assert s.prev_commit == old.base_instant and s.prev_base_file == (
            old.base_file.name if old.base_file else None
        )
        assert s.total_log_files_compacted == len(old.log_files)
        assert s.total_log_size_compacted == sum(lf.size for lf in old.log_files)
        assert (
            s.total_log_blocks >= len(old.log_files)
            and s.total_log_records >= s.total_updated_records_compacted
        )
        assert s.base_file is None and s.log_files is None
        assert s.file_size_in_bytes == s.total_write_bytes == (Path(t.base_path) / s.path).stat().st_size
        new = after_slices[(o.partition, o.file_id)]
        assert new.base_file is not None and new.base_file.path == s.path and not new.log_files
        pf = pq.ParquetFile(Path(t.base_path) / s.path)
        data = pf.read()
        assert s.num_writes == data.num_rows and s.num_inserts + s.num_update_writes <= data.num_rows
        assert set(data.column("_hoodie_file_name").to_pylist()) <= {bf.name}
        kv = pf.metadata.metadata  # the footer's key-value metadata, where Hudi looks
        avro_fields = [f["name"] for f in json.loads(kv[b"parquet.avro.schema"])["fields"]]
        assert avro_fields[:5] == [*META, "_hoodie_file_name"]
        if data.num_rows:
            assert kv[b"hoodie_min_record_key"].decode() == min(data.column("_hoodie_record_key").to_pylist())
            assert kv[b"hoodie_max_record_key"].decode() == max(data.column("_hoodie_record_key").to_pylist())
    assert sum(s.num_deletes for s in stats.values()) >= 2  # the deleted ids 6 and 7 left their base files


def test_duplicate_keys_of_a_base_file_compact_as_they_read(tmp_path: Path) -> None:
    """Inserts without combining keep duplicate keys in one base file; the merged slice (and so the
    compacted base file) is whatever a read returns, duplicates included."""
    t = mor(tmp_path, partition_by=None)
    no_combine = {**NO_SMALL_FILES, "hoodie.combine.before.insert": "false"}
    t.write(batch([(1, "sf", 5, "a"), (1, "sf", 3, "b"), (2, "sf", 1, "a")]), "insert", no_combine)
    t.write(batch([(1, "sf", 4, "c"), (2, "sf", 2, "c"), (3, "sf", 1, "c")]), "upsert", NO_SMALL_FILES)
    before = snapshot(t)
    assert [r["id"] for r in before].count(1) == 2
    assert t.compact(DUE) is not None
    assert snapshot(t) == before == snapshot(t, "read_optimized")


def test_file_groups_under_a_pending_compaction_are_not_planned_again(tmp_path: Path) -> None:
    t = mor(tmp_path)
    story(t)
    first = t.schedule_compaction(DUE)
    assert first is not None
    assert t.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "0"}) is None
    t.write(batch([(20, "ny", 1, "n")]), "insert", NO_SMALL_FILES)  # a new file group ...
    t.write(batch([(20, "ny", 2, "n")]), "upsert", NO_SMALL_FILES)  # ... with a log file
    second = t.schedule_compaction(DUE)
    assert second is not None
    [o] = read_plan(t.timeline, second).operations
    assert o.partition == "ny"
    assert not read_plan(t.timeline, first).file_groups() & {(o.partition, o.file_id)}
    assert pending_compactions(t) == [first, second]
    assert t.run_compaction() is not None and pending_compactions(t) == [second]  # the earliest first


def test_writes_while_a_compaction_is_pending_land_in_the_new_slice(tmp_path: Path) -> None:
    t = mor(tmp_path)
    story(t)
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    plan = read_plan(t.timeline, instant)
    planned_logs = {name for o in plan.operations for name in o.log_files}
    # an update of a file group under compaction and an insert, written after the plan
    late = t.write(batch([(2, "sf", 30, "late"), (40, "sf", 1, "late")]), "upsert", NO_SMALL_FILES)
    late_logs = {s.path.rsplit("/", 1)[-1] for s in late.metadata.write_stats() if LogFile.parse(s.path)}
    assert late_logs and not late_logs & planned_logs
    before = snapshot(t)
    assert {(r["id"], r["v"]) for r in before} >= {(2, "late"), (40, "late")}
    t.run_compaction(instant)
    assert snapshot(t) == before  # nothing lost, nothing resurrected
    # the late log starts the slice of the compacted base file; the next plan takes it
    sf = [s for s in latest_slices(t).values() if any(lf.name in late_logs for lf in s.log_files)]
    assert len(sf) == 1 and sf[0].base_file is not None and sf[0].base_file.instant_time == instant
    nxt = t.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "1"})
    assert nxt is not None
    assert {n for o in read_plan(t.timeline, nxt).operations for n in o.log_files} == late_logs
    t.run_compaction(nxt)
    assert snapshot(t) == snapshot(t, "read_optimized") == before


def test_a_write_completing_between_plan_and_instant_is_planned_again(tmp_path: Path) -> None:
    """With a commit protocol that does not share the table lock, a write could complete after the
    plan was made and before the compaction's instant time was issued: its logs would stay behind
    the new base file. The plan is then taken back and made again."""
    t = mor(tmp_path)
    story(t)

    class Racing(LocalCommitProtocol):
        raced = False

        def begin(self, action: str, requested_content: bytes = b"") -> Instant:
            if action == Action.COMPACTION and not Racing.raced:
                Racing.raced = True
                t.write(batch([(1, "la", 50, "race")]), "upsert")
            return super().begin(action, requested_content)

    t.commit_protocol = Racing(t.storage, t.layout_version, t.timeline_path)
    instant = t.schedule_compaction(DUE)
    assert instant is not None and Racing.raced
    [pending] = t.timeline.pending()
    assert pending.time == instant  # the first plan was taken back
    race = t.timeline.completed_writes()[-1]
    logs = {n for o in read_plan(t.timeline, instant).operations for n in o.log_files}
    assert any(f"_{race.time}.log." in n for n in logs)
    t.run_compaction(instant)
    assert (1, "race") in {(r["id"], r["v"]) for r in snapshot(t)}


def test_a_deltacommit_begun_before_a_compaction_completes_does_not_conflict(tmp_path: Path) -> None:
    t = mor(tmp_path)
    t.write(batch([(1, "sf", 1, "a"), (2, "sf", 1, "a")]), "insert")
    update = t.write(batch([(1, "sf", 2, "b")]), "upsert")
    writer = t.commit_protocol.begin(Action.DELTA_COMMIT)  # a writer that began earlier
    assert t.compact(DUE) is not None
    assert find_conflicts(t.timeline, writer, update.metadata) == []


def test_log_only_file_group_whose_records_are_all_deleted(tmp_path: Path) -> None:
    """Bucket index: file groups without a base file. One whose every key was deleted is compacted
    into an empty base file, so its logs are not planned again."""
    t = mor(tmp_path, partition_by=None, index="bucket", buckets=2)
    t.write(batch([(i, "sf", 1, "a") for i in range(1, 7)]), "insert")
    slices = latest_slices(t)
    assert all(s.base_file is None for s in slices.values())
    doomed = t.read(columns=["id", "_hoodie_file_name"]).to_pylist()
    bucket0 = [r["id"] for r in doomed if r["_hoodie_file_name"].startswith("00000000")]
    assert bucket0
    t.delete(pa.table({"id": pa.array(bucket0, pa.int64()), "city": ["sf"] * len(bucket0)}))
    before = snapshot(t)
    result = t.compact(DUE)
    assert result is not None
    empty = [s for s in result.metadata.write_stats() if s.num_writes == 0]
    assert len(empty) == 1 and empty[0].num_deletes == 0 and empty[0].prev_base_file is None
    assert pq.read_table(Path(t.base_path) / empty[0].path).num_rows == 0
    assert snapshot(t) == before == snapshot(t, "read_optimized")
    assert t.schedule_compaction({"hoodie.compact.inline.max.delta.commits": "0"}) is None


# ------------------------------------------------------------------------------ failures


def test_a_failed_run_is_rolled_back_and_its_plan_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = mor(tmp_path)
    story(t)
    before = snapshot(t)
    instant = t.schedule_compaction(DUE)
    assert instant is not None and len(read_plan(t.timeline, instant).operations) == 2
    real = compact_operation
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(compaction_run, "compact_operation", failing)
    with pytest.raises(OSError, match="disk full"):
        t.run_compaction()
    [pending] = t.timeline.pending()
    assert (pending.time, pending.state) == (instant, State.REQUESTED)
    assert not (Path(t.base_path) / ".hoodie/timeline" / f"{instant}.compaction.inflight").exists()
    assert instant_files(t, instant) == []
    assert markers.marked_files(t.storage, instant) == []
    assert not (Path(t.base_path) / ".hoodie/.heartbeat" / instant).exists()
    assert snapshot(t) == before
    monkeypatch.setattr(compaction_run, "compact_operation", real)
    assert t.run_compaction() is not None
    assert snapshot(t) == before == snapshot(t, "read_optimized")


@pytest.mark.parametrize(
    "point",
    [AFTER_INFLIGHT, AFTER_FIRST_FILE, AFTER_DATA_FILES, BEFORE_COMPLETE],
)
def test_a_crashed_run_reads_as_before_and_runs_again(tmp_path: Path, kit: Any, point: str) -> None:
    t = mor(tmp_path)
    story(t)
    before = snapshot(t)
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    assert kit.run_python(RUNNER, t.base_path, "run", crash_at=point) == 77
    [pending] = t.timeline.pending()
    assert (pending.time, pending.state) == (instant, State.INFLIGHT)
    left = instant_files(t, instant)
    assert len(left) == {AFTER_INFLIGHT: 0, AFTER_FIRST_FILE: 1}.get(point, 2)
    assert snapshot(t) == before and snapshot(t, "read_optimized") != before
    # the dead writer's heartbeat names a process that is gone: the next run takes over
    result = t.run_compaction()
    assert result is not None and result.instant_time == instant
    assert snapshot(t) == before == snapshot(t, "read_optimized")
    assert sorted(s.path for s in result.metadata.write_stats()) == sorted(instant_files(t, instant))


def test_a_crash_after_scheduling_leaves_a_plan_to_run(tmp_path: Path, kit: Any) -> None:
    t = mor(tmp_path)
    story(t)
    before = snapshot(t)
    assert kit.run_python(RUNNER, t.base_path, "schedule", crash_at=AFTER_SCHEDULED) == 77
    [pending] = t.timeline.pending()
    assert pending.state is State.REQUESTED and snapshot(t) == before
    assert t.run_compaction() is not None and snapshot(t) == before


def test_a_running_compaction_is_not_taken_over(tmp_path: Path) -> None:
    t = mor(tmp_path)
    story(t)
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    t.commit_protocol.set_inflight(Instant(instant, Action.COMPACTION, State.REQUESTED))
    beat = heartbeat.Heartbeat(t.storage, instant, 60_000).start()  # alive, in this process
    try:
        with pytest.raises(CommitConflictError, match="running in another process"):
            t.run_compaction()
    finally:
        beat.stop(delete=False)
    # its thread is gone now: the heartbeat names this process but no live beat
    assert t.run_compaction() is not None


def test_errors(tmp_path: Path) -> None:
    cow = HudiTable.create(str(tmp_path / "cow"), name="cow", record_key="id", ordering_field="ts")
    with pytest.raises(UnsupportedError, match="Merge-on-Read"):
        cow.schedule_compaction()
    t = mor(tmp_path)
    assert t.schedule_compaction(DUE) is None  # no delta commit yet
    assert t.run_compaction() is None  # nothing pending
    w = t.write(batch([(1, "sf", 1, "a")]), "insert")
    t.write(batch([(1, "sf", 2, "b")]), "upsert")
    with pytest.raises(InstantNotFoundError):
        t.run_compaction("20000101000000000")
    with pytest.raises(InvalidInputError, match="not a compaction"):
        t.run_compaction(w.instant_time)
    with pytest.raises(InvalidInputError, match="instant time"):
        t.run_compaction("yesterday")
    done = t.compact(DUE)
    assert done is not None
    with pytest.raises(InvalidInputError, match="already completed"):
        t.run_compaction(done.instant_time)
    with pytest.raises(InvalidConfigError):
        t.schedule_compaction({"hoodie.compaction.strategy": "biggest"})


def test_a_table_with_a_metadata_table(tmp_path: Path) -> None:
    """Inlet cannot update a metadata table: the compaction's completion turns it off, as every
    commit does (``hoodie.metadata.enable=true`` is refused)."""
    t = mor(tmp_path)
    t.write(batch([(1, "sf", 1, "a")]), "insert")
    t.write(batch([(1, "sf", 2, "b")]), "upsert")
    props = Path(t.base_path) / ".hoodie/hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.metadata.partitions=files\n")
    (Path(t.base_path) / ".hoodie/metadata/.hoodie").mkdir(parents=True)
    t = HudiTable.open(t.base_path)
    checksum = t.props["hoodie.table.checksum"]
    instant = t.schedule_compaction(DUE)
    assert instant is not None
    assert HudiTable.open(t.base_path).props["hoodie.table.metadata.partitions"] == "files"
    with pytest.raises(UnsupportedError, match="metadata table"):
        t.run_compaction(options={"hoodie.metadata.enable": "true"})
    assert t.timeline.find(instant).state is State.REQUESTED
    t.run_compaction()
    reopened = HudiTable.open(t.base_path)
    assert reopened.props["hoodie.table.metadata.partitions"] == ""
    assert reopened.props["hoodie.table.checksum"] == checksum
    assert not (Path(t.base_path) / ".hoodie/metadata").exists()
    assert [(r["id"], r["v"]) for r in snapshot(reopened)] == [(1, "b")]


def test_show_lists_pending_and_completed_compactions(tmp_path: Path) -> None:
    t = mor(tmp_path)
    story(t)
    first = t.compact(DUE)
    assert first is not None
    t.write(batch([(1, "la", 30, "z")]), "upsert")
    second = t.schedule_compaction(DUE)
    infos = t.compactions()
    assert [(i.instant_time, i.state) for i in infos] == [
        (first.instant_time, State.COMPLETED),
        (second, State.REQUESTED),
    ]
    done, pending = (i.to_dict() for i in infos)
    assert done["completion_time"] == first.completion_time and done["result"]["files"] == first.files_written
    assert pending["completion_time"] is None and "result" not in pending
    assert pending["file_groups"] == 1 and pending["log_files"] == 1
    assert pending["operations"][0]["log_files"][0].startswith(".")


def test_a_completed_compaction_is_never_rolled_back(tmp_path: Path) -> None:
    """A run taken over by force while the first one was alive may find the compaction completed
    by the other: its failure handling must not delete the committed files (same names)."""
    t = mor(tmp_path)
    story(t)
    result = t.compact(DUE)
    assert result is not None
    files = instant_files(t, result.instant_time)
    assert roll_back_attempt(t, Instant(result.instant_time, "compaction", State.INFLIGHT)) == []
    assert instant_files(t, result.instant_time) == files
    assert (Path(t.base_path) / ".hoodie/timeline" / f"{result.instant_time}.compaction.inflight").exists()
