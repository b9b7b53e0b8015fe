"""Optimistic concurrency: concurrent writers touching the same file group cannot both commit."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from inlet.core import HudiTable, avro, faults
from inlet.core.actions.rollback import rollback, rollback_failed_writes
from inlet.core.commit import markers
from inlet.core.errors import CommitConflictError, InletError
from inlet.core.file_group.view import base_file_name
from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State


def _md(*groups: tuple[str, str], paths: dict[tuple[str, str], str] | None = None) -> CommitMetadata:
    md = CommitMetadata(operation_type="UPSERT")
    for partition, file_id in groups:
        path = (paths or {}).get((partition, file_id), f"{partition}/{file_id}_0-0-0_x.parquet")
        md.add(WriteStat(file_id=file_id, path=path, partition_path=partition))
    return md


def _seed(kit: Any, table: HudiTable) -> dict[int, tuple[str, str]]:
    """Six rows in sf and nyc; returns id -> (partition, file id)."""
    table.write(kit.trips([1, 2, 3, 4, 5, 6], ["sf", "nyc"] * 3, 1, "v1"), "upsert")
    out = {}
    for r in table.read(columns=["id", "_hoodie_partition_path", "_hoodie_file_name"]).to_pylist():
        out[r["id"]] = (r["_hoodie_partition_path"], r["_hoodie_file_name"].split("_")[0])
    return out


def _fake_base_file(table: HudiTable, partition: str, file_id: str, instant_time: str) -> str:
    """A copy of the group's latest base file as ``instant_time`` would have written it (+ marker)."""
    view = table.file_system_view()
    latest = view.groups[(partition, file_id)].latest
    assert latest is not None
    name = base_file_name(file_id, "0-0-0", instant_time)
    rel = f"{partition}/{name}"
    shutil.copyfile(table.storage.full(latest.path), table.storage.full(rel))
    markers.create_marker(table.storage, instant_time, partition, name, "MERGE")
    return rel


# ------------------------------------------------------------------------------ protocol level


def test_same_file_group_second_completion_conflicts(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    where = _seed(kit, table)
    before = kit.rows(table.read())
    proto = table.commit_protocol
    group = where[1]

    a = proto.begin(Action.COMMIT)
    b = proto.begin(Action.COMMIT)
    proto.set_inflight(a, _md(group).to_bytes())
    proto.set_inflight(b, _md(group).to_bytes())
    winner_file = _fake_base_file(table, group[0], group[1], a.time)
    loser_file = _fake_base_file(table, group[0], group[1], b.time)
    winner = proto.complete(a, _md(group, paths={group: winner_file}))
    assert winner.is_completed and winner.completion_time is not None

    with pytest.raises(CommitConflictError) as err:
        proto.complete(b, _md(group, paths={group: loser_file}))
    msg = str(err.value)
    assert a.time in msg and b.time in msg and group[1] in msg
    assert err.value.retryable
    # the loser is not completed, still pending until rolled back
    tl = table.timeline
    assert [i.time for i in tl.completed([Action.COMMIT])][-1] == a.time
    assert b.time in [i.time for i in tl.pending()]

    rb = rollback(table, Instant(b.time, Action.COMMIT, State.INFLIGHT))
    assert rb > b.time
    assert not table.storage.exists(loser_file)
    assert b.time not in [i.time for i in table.timeline.instants]
    # the winner rewrote its file group unchanged (a copy): the table reads as before
    assert table.storage.exists(winner_file)
    assert kit.rows(table.read()) == before
    for v in ("1", "2"):
        assert kit.rows(kit.read_hudi(table.base_path, v)) == before


def test_different_file_groups_both_commit(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    where = _seed(kit, table)
    proto = table.commit_protocol
    a = proto.begin(Action.COMMIT)
    b = proto.begin(Action.COMMIT)
    assert where[1] != where[2]
    done_a = proto.complete(a, _md(where[1]))
    done_b = proto.complete(b, _md(where[2]))
    assert done_a.is_completed and done_b.is_completed
    assert done_b.completion_time is not None and done_a.completion_time is not None
    assert done_b.completion_time > done_a.completion_time


def test_only_commits_completed_after_my_start_conflict(kit: Any, trips_table: Any) -> None:
    """An instant that completed before mine began is history, not a conflict."""
    table = trips_table()
    where = _seed(kit, table)
    proto = table.commit_protocol
    a = proto.begin(Action.COMMIT)
    proto.complete(a, _md(where[1]))
    b = proto.begin(Action.COMMIT)
    assert proto.complete(b, _md(where[1])).is_completed


def test_replaced_file_group_conflicts_with_update(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    where = _seed(kit, table)
    proto = table.commit_protocol
    a = proto.begin(Action.REPLACE_COMMIT)
    b = proto.begin(Action.COMMIT)
    replace = CommitMetadata(
        operation_type="INSERT_OVERWRITE", partition_to_replace_file_ids={"sf": [where[1][1]]}
    )
    proto.complete(a, replace)
    with pytest.raises(CommitConflictError, match=a.time):
        proto.complete(b, _md(where[1]))


def test_complete_refuses_an_instant_that_was_rolled_back(kit: Any, trips_table: Any) -> None:
    """A writer taken for dead whose instant was rolled back must not complete it afterwards."""
    table = trips_table()
    where = _seed(kit, table)
    proto = table.commit_protocol
    a = proto.begin(Action.COMMIT)
    proto.set_inflight(a)
    assert rollback_failed_writes(table, force=True) == [a.time]
    with pytest.raises(InletError, match=a.time):
        proto.complete(a, _md(where[1]))
    assert table.timeline.completed([Action.COMMIT])[-1].time != a.time
    assert not [i for i in table.timeline.instants if i.time == a.time]


def test_complete_refuses_an_instant_with_a_pending_rollback(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    where = _seed(kit, table)
    proto = table.commit_protocol
    a = proto.begin(Action.COMMIT)
    proto.set_inflight(a)
    plan = {
        "instantToRollback": {"commitTime": a.time, "action": "commit"},
        "RollbackRequests": [],
        "version": 1,
    }
    proto.begin(Action.ROLLBACK, avro.encode("HoodieRollbackPlan", plan))
    with pytest.raises(InletError, match="roll"):
        proto.complete(a, _md(where[1]))
    assert a.time in [i.time for i in table.timeline.pending()]


def test_rollback_refuses_a_completed_instant(kit: Any, trips_table: Any) -> None:
    table = trips_table()
    _seed(kit, table)
    done = table.timeline.completed([Action.COMMIT])[-1]
    files = kit.data_files_of(table.base_path, done.time)
    with pytest.raises(InletError, match="completed"):
        rollback(table, Instant(done.time, Action.COMMIT, State.INFLIGHT))
    assert kit.data_files_of(table.base_path, done.time) == files
    assert table.timeline.pending() == []


def test_finish_is_idempotent(kit: Any, trips_table: Any) -> None:
    """Two processes finishing the same interrupted rollback leave one completed instant."""
    table = trips_table()
    proto = table.commit_protocol
    rb = proto.begin(Action.ROLLBACK)
    first = proto.finish(rb, b"x")
    second = proto.finish(rb, b"y")
    assert second == first
    assert len([i for i in table.timeline.instants if i.time == rb.time]) == 1
    names = [n for n in (table.storage.list_files(table.timeline.dir)) if n.path.endswith(".rollback")]
    assert len(names) == 1


# ------------------------------------------------------------------------------ end to end


def _pause_before_complete(monkeypatch: pytest.MonkeyPatch, action: Any) -> list[str]:
    """Run ``action`` once, the first time a write reaches BEFORE_COMPLETE."""
    real = faults.crash_point
    ran: list[str] = []

    def hook(name: str) -> None:
        if name == faults.BEFORE_COMPLETE and not ran:
            ran.append(name)
            action()
        real(name)

    monkeypatch.setattr(faults, "crash_point", hook)
    return ran


def test_concurrent_writes_same_key_second_committer_loses(
    kit: Any, trips_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = trips_table()
    _seed(kit, table)
    other = HudiTable.open(table.base_path)
    results: list[Any] = []
    ran = _pause_before_complete(
        monkeypatch, lambda: results.append(other.write(kit.trips([1], ["sf"], 5, "second"), "upsert"))
    )
    with pytest.raises(CommitConflictError) as err:
        table.write(kit.trips([1], ["sf"], 3, "first"), "upsert")
    assert ran and len(results) == 1
    second = results[0]
    assert second.instant_time in str(err.value)
    # the loser (the first writer: it began first, so its instant is the older one) was rolled back
    [rolled] = table.timeline.completed([Action.ROLLBACK])
    md = avro.decode(table.timeline.read_bytes(rolled))
    [loser] = md["commitsRollback"]
    assert loser < second.instant_time and loser in str(err.value)
    assert md["totalFilesDeleted"] == 1
    assert kit.data_files_of(table.base_path, loser) == []
    assert not [i for i in table.timeline.instants if i.time == loser]
    assert table.timeline.pending() == []
    # the table holds the winner's row, never the loser's
    expected = kit.rows(kit.trips([1], ["sf"], 5, "second"))[0]
    for name, got in kit.all_reads(table.base_path).items():
        row = next(r for r in got if r["id"] == 1)
        assert {k: v for k, v in row.items() if k != "_hoodie_commit_time"} == expected, name
        assert row["_hoodie_commit_time"] == second.instant_time
        assert [r["name"] for r in got if r["id"] != 1] == ["v1-2", "v1-3", "v1-4", "v1-5", "v1-6"]


def test_concurrent_writes_different_partitions_both_commit(
    kit: Any, trips_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = trips_table()
    _seed(kit, table)
    other = HudiTable.open(table.base_path)
    results: list[Any] = []
    _pause_before_complete(
        monkeypatch, lambda: results.append(other.write(kit.trips([2], ["nyc"], 5, "second"), "upsert"))
    )
    first = table.write(kit.trips([1], ["sf"], 3, "first"), "upsert")
    second = results[0]
    assert first.instant_time < second.instant_time
    assert first.completion_time > second.completion_time
    names = {r["id"]: r["name"] for r in kit.rows(table.read())}
    assert names == {1: "first-1", 2: "second-2", 3: "v1-3", 4: "v1-4", 5: "v1-5", 6: "v1-6"}
    for v in ("1", "2"):
        assert {r["id"]: r["name"] for r in kit.rows(kit.read_hudi(table.base_path, v))} == names
    assert table.timeline.completed([Action.ROLLBACK]) == []
