"""Timeline file names (layout 2, table version 8, and layout 1) and their parsing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from inlet.core import HudiTable, avro, faults
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State

T = "20240102030405678"
C = "20240102030406789"


def _names(table: HudiTable) -> list[str]:
    tdir = Path(table.storage.full(table.timeline.dir))
    return sorted(p.name for p in tdir.iterdir() if p.is_file())


def _snapshot_at_before_complete(monkeypatch: pytest.MonkeyPatch, table: HudiTable) -> list[list[str]]:
    seen: list[list[str]] = []
    real = faults.crash_point

    def hook(name: str) -> None:
        if name == faults.BEFORE_COMPLETE:
            seen.append(_names(table))
        real(name)

    monkeypatch.setattr(faults, "crash_point", hook)
    return seen


def test_commit_files_through_a_write(kit: Any, trips_table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    table = trips_table()
    seen = _snapshot_at_before_complete(monkeypatch, table)
    result = table.write(kit.trips([1, 2], ["sf", "nyc"], 1, "v1"), "upsert")
    t, c = result.instant_time, result.completion_time
    assert seen == [[f"{t}.commit.requested", f"{t}.inflight"]]
    assert _names(table) == [f"{t}.commit.requested", f"{t}.inflight", f"{t}_{c}.commit"]
    assert re.fullmatch(r"\d{17}_\d{17}\.commit", f"{t}_{c}.commit") and c > t
    assert table.storage.exists(f".hoodie/timeline/{t}_{c}.commit")
    assert table.timeline.dir == ".hoodie/timeline"
    # the completed file holds the HoodieCommitMetadata (Avro) of the write
    md = CommitMetadata.from_bytes(table.timeline.read_bytes(table.timeline.find(t)))
    assert md.operation_type == "UPSERT" and len(md.write_stats()) == 2


def test_replacecommit_files_through_insert_overwrite(
    kit: Any, trips_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = trips_table()
    first = table.write(kit.trips([1, 2], ["sf", "nyc"], 1, "v1"), "upsert")
    seen = _snapshot_at_before_complete(monkeypatch, table)
    result = table.write(kit.trips([3], ["sf"], 2, "v2"), "insert_overwrite")
    t, c = result.instant_time, result.completion_time
    assert result.action == Action.REPLACE_COMMIT
    pending = [n for n in seen[0] if n.startswith(t)]
    assert pending == [f"{t}.replacecommit.inflight", f"{t}.replacecommit.requested"]
    names = _names(table)
    assert f"{t}_{c}.replacecommit" in names
    assert f"{first.instant_time}_{first.completion_time}.commit" in names
    requested = avro.decode(table.storage.read_bytes(f".hoodie/timeline/{t}.replacecommit.requested"))
    assert requested["operationType"] == "INSERT_OVERWRITE"
    md = CommitMetadata.from_bytes(table.timeline.read_bytes(table.timeline.find(t)))
    assert md.is_replace and list(md.partition_to_replace_file_ids or {}) == ["sf"]


@pytest.mark.parametrize(
    ("instant", "name2", "name1"),
    [
        (Instant(T, Action.COMMIT, State.REQUESTED), f"{T}.commit.requested", f"{T}.commit.requested"),
        (Instant(T, Action.COMMIT, State.INFLIGHT), f"{T}.inflight", f"{T}.inflight"),
        (Instant(T, Action.COMMIT, State.COMPLETED, C), f"{T}_{C}.commit", f"{T}.commit"),
        (
            Instant(T, Action.REPLACE_COMMIT, State.REQUESTED),
            f"{T}.replacecommit.requested",
            f"{T}.replacecommit.requested",
        ),
        (
            Instant(T, Action.REPLACE_COMMIT, State.INFLIGHT),
            f"{T}.replacecommit.inflight",
            f"{T}.replacecommit.inflight",
        ),
        (
            Instant(T, Action.REPLACE_COMMIT, State.COMPLETED, C),
            f"{T}_{C}.replacecommit",
            f"{T}.replacecommit",
        ),
        (
            Instant(T, Action.DELTA_COMMIT, State.INFLIGHT),
            f"{T}.deltacommit.inflight",
            f"{T}.deltacommit.inflight",
        ),
        (Instant(T, Action.DELTA_COMMIT, State.COMPLETED, C), f"{T}_{C}.deltacommit", f"{T}.deltacommit"),
        (Instant(T, Action.ROLLBACK, State.REQUESTED), f"{T}.rollback.requested", f"{T}.rollback.requested"),
        (Instant(T, Action.ROLLBACK, State.INFLIGHT), f"{T}.rollback.inflight", f"{T}.rollback.inflight"),
        (Instant(T, Action.ROLLBACK, State.COMPLETED, C), f"{T}_{C}.rollback", f"{T}.rollback"),
        (Instant(T, Action.CLEAN, State.COMPLETED, C), f"{T}_{C}.clean", f"{T}.clean"),
        (
            Instant(T, Action.COMPACTION, State.REQUESTED),
            f"{T}.compaction.requested",
            f"{T}.compaction.requested",
        ),
        (
            Instant(T, Action.CLUSTERING, State.INFLIGHT),
            f"{T}.clustering.inflight",
            f"{T}.clustering.inflight",
        ),
    ],
)
def test_file_names_round_trip(instant: Instant, name2: str, name1: str) -> None:
    assert instant.file_name() == name2
    assert instant.file_name(2) == name2
    assert instant.file_name(1) == name1
    assert Instant.parse_file_name(name2) == instant
    parsed1 = Instant.parse_file_name(name1)
    if instant.is_completed:
        # layout 1 names carry no completion time
        assert parsed1 == Instant(T, instant.action, State.COMPLETED, None)
        assert parsed1 is not None and parsed1.file_name(1) == name1
    else:
        assert parsed1 == instant


def test_layout1_completion_time_comes_from_modification_time() -> None:
    # 2024-01-02T03:04:06.789Z in ms
    import datetime as dt

    ms = int(dt.datetime(2024, 1, 2, 3, 4, 6, 789000, tzinfo=dt.UTC).timestamp() * 1000)
    parsed = Instant.parse_file_name(f"{T}.commit", mtime_ms=ms)
    assert parsed == Instant(T, Action.COMMIT, State.COMPLETED, C)
    # a clock behind the instant time never yields a completion before the request
    early = Instant.parse_file_name(f"{T}.commit", mtime_ms=ms - 10_000)
    assert early is not None and early.completion_time == T
    # layout 2 names keep their own completion time whatever the file's mtime
    assert Instant.parse_file_name(f"{T}_{C}.commit", mtime_ms=0) == Instant(
        T, Action.COMMIT, State.COMPLETED, C
    )


def test_completing_a_pending_compaction_or_clustering_renames_the_action() -> None:
    assert Instant(T, Action.COMPACTION, State.INFLIGHT).with_state(State.COMPLETED, C).file_name() == (
        f"{T}_{C}.commit"
    )
    assert Instant(T, Action.CLUSTERING, State.INFLIGHT).with_state(State.COMPLETED, C).file_name() == (
        f"{T}_{C}.replacecommit"
    )


@pytest.mark.parametrize(
    "name",
    [
        "hoodie.properties",
        "history",
        ".aux",
        f".{T}.commit.requested.0123abcd.tmp",  # a write_atomic temp file
        f"{T}.commit.requested.crc",
        f"{T}",
        f"{T}.",
        "2024010203040.commit",  # 13 digits
        f"{T}_123.commit",
        f"{T}_{C}.commit.requested.extra",
        f"x{T}.commit",
    ],
)
def test_non_instant_names_are_ignored(name: str) -> None:
    assert Instant.parse_file_name(name) is None


def test_timeline_reads_every_state(trips_table: Any) -> None:
    table = trips_table()
    tdir = Path(table.storage.full(table.timeline.dir))
    t1, t2, t3 = "20240101000000001", "20240101000000002", "20240101000000003"
    c1 = "20240101000000004"
    for name in (
        f"{t1}.commit.requested",
        f"{t1}.inflight",
        f"{t1}_{c1}.commit",
        f"{t2}.replacecommit.requested",
        f"{t2}.replacecommit.inflight",
        f"{t3}.commit.requested",
        "hoodie.properties.backup",
    ):
        (tdir / name).write_bytes(b"")
    tl = table.timeline
    assert tl.instants == [
        Instant(t1, Action.COMMIT, State.COMPLETED, c1),
        Instant(t2, Action.REPLACE_COMMIT, State.INFLIGHT),
        Instant(t3, Action.COMMIT, State.REQUESTED),
    ]
    assert tl.max_instant_time() == c1
    assert tl.path_of(tl.instants[0]) == f".hoodie/timeline/{t1}_{c1}.commit"
    assert tl.path_of(tl.instants[1]) == f".hoodie/timeline/{t2}.replacecommit.inflight"


def test_layout1_timeline_lives_in_dot_hoodie(tmp_path: Path) -> None:
    from inlet.core.storage import Storage
    from inlet.core.timeline.active import Timeline

    storage = Storage(str(tmp_path / "v6"))
    storage.write_bytes(f".hoodie/{T}.commit.requested", b"")
    storage.write_bytes(f".hoodie/{T}.inflight", b"")
    storage.write_bytes(f".hoodie/{T}.commit", b"")
    tl = Timeline.load(storage, 1)
    assert tl.dir == ".hoodie"
    [inst] = tl.instants
    assert inst.action == Action.COMMIT and inst.is_completed
    assert inst.completion_time is not None and inst.completion_time >= T
    assert tl.path_of(inst) == f".hoodie/{T}.commit"


def test_malformed_and_legacy_instant_names() -> None:
    # an empty completion time is not a completed instant
    assert Instant.parse_file_name("20240102030405678_.commit") is None
    # Hudi before 0.10 wrote second-precision instant times (layout 1)
    legacy = Instant.parse_file_name("20240102030405.commit", mtime_ms=1_704_164_645_000)
    assert legacy is not None and legacy.time == "20240102030405" and legacy.is_completed
    assert Instant.parse_file_name("2024010203040.commit") is None
