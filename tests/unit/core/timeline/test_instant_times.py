"""Instant times: unique, strictly increasing, ``yyyyMMddHHmmssSSS``, across threads and processes."""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from inlet.core import HudiTable
from inlet.core.commit.protocol import LocalCommitProtocol, next_instant_time
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant, State, format_instant_time, parse_instant_time

TIME_RE = re.compile(r"^\d{17}$")

BEGIN_MANY = """
import sys
from inlet.core.commit.protocol import LocalCommitProtocol
from inlet.core.storage import Storage

proto = LocalCommitProtocol(Storage(sys.argv[1]))
sys.stdin.readline()  # start together
for _ in range(int(sys.argv[2])):
    proto.begin("commit")
"""


def _requested_times(table: HudiTable) -> list[str]:
    tdir = Path(table.storage.full(table.timeline.dir))
    names = [p.name for p in tdir.iterdir() if p.name.endswith(".commit.requested")]
    return [n.split(".")[0] for n in names]


def _assert_valid(times: list[str]) -> None:
    for t in times:
        assert TIME_RE.match(t), t
        parsed = parse_instant_time(t)  # a real calendar moment, not an invented counter
        assert abs((parsed - dt.datetime.now(dt.UTC)).total_seconds()) < 600
    assert len(set(times)) == len(times), "duplicate instant times"


def test_begin_is_unique_and_increasing_across_threads(trips_table: Any) -> None:
    table = trips_table()
    proto = table.commit_protocol
    per_thread: dict[int, list[str]] = {}
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            per_thread[n] = [proto.begin(Action.COMMIT).time for _ in range(20)]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    issued = [t for ts in per_thread.values() for t in ts]
    assert len(issued) == 160
    _assert_valid(issued)
    for ts in per_thread.values():  # each thread sees its own times increase
        assert ts == sorted(ts) and len(set(ts)) == len(ts)
    on_disk = _requested_times(table)
    assert sorted(on_disk) == sorted(issued)


def test_begin_is_unique_across_processes(trips_table: Any, kit: Any) -> None:
    import subprocess
    import sys
    import textwrap

    table = trips_table()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(BEGIN_MANY), table.base_path, "10"],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(kit.REPO_ROOT),
        )
        for _ in range(4)
    ]
    for p in procs:  # all four are importing by now; release them together
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    times = _requested_times(table)
    assert len(times) == 40
    _assert_valid(times)
    # Timeline agrees with the files
    assert [i.time for i in table.timeline.pending()] == sorted(times)


def test_completion_times_exceed_requested_and_are_unique(trips_table: Any, kit: Any) -> None:
    table = trips_table()
    for n in range(4):
        table.write(kit.trips([n, n + 10], ["sf", "nyc"], n, f"w{n}"), "upsert")
    proto = table.commit_protocol
    # interleaved begins and completes: completion times still above everything before them
    a = proto.begin(Action.COMMIT)
    b = proto.begin(Action.COMMIT)
    done_b = proto.complete(b, CommitMetadata(operation_type="UPSERT"))
    done_a = proto.complete(a, CommitMetadata(operation_type="UPSERT"))
    assert done_a.completion_time is not None and done_b.completion_time is not None
    assert done_b.completion_time > b.time > a.time
    assert done_a.completion_time > done_b.completion_time
    completed = table.timeline.completed()
    assert len(completed) == 6
    completions = [i.completion_time for i in completed]
    assert all(c is not None and TIME_RE.match(c) for c in completions)
    assert len(set(completions)) == len(completions)
    for inst in completed:
        assert inst.completion_time is not None and inst.completion_time > inst.time
    # every time on the timeline (requested or completion) is distinct
    every = [i.time for i in completed] + [c for c in completions if c]
    assert len(set(every)) == len(every)


def test_next_instant_time_is_after_the_given_time() -> None:
    now = format_instant_time(dt.datetime.now(dt.UTC).replace(tzinfo=None))
    t = next_instant_time(now)
    assert TIME_RE.match(t) and t > now
    assert next_instant_time(None) >= now


def test_begin_does_not_stall_behind_a_timeline_ahead_of_the_clock(tmp_path: Path) -> None:
    """A table written by a writer whose clock (or timeline time zone) runs an hour ahead."""
    storage = Storage(str(tmp_path / "t"))
    ahead = format_instant_time((dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).replace(tzinfo=None))
    proto = LocalCommitProtocol(storage)
    storage.write_atomic(proto.timeline().path_of(Instant(ahead, Action.COMMIT, State.REQUESTED)), b"")
    result: list[str] = []
    th = threading.Thread(target=lambda: result.append(proto.begin(Action.COMMIT).time), daemon=True)
    started = time.monotonic()
    th.start()
    th.join(10)
    assert result, "begin() waited for the wall clock to pass an instant an hour in the future"
    assert time.monotonic() - started < 10
    assert TIME_RE.match(result[0]) and result[0] > ahead


@pytest.mark.parametrize(
    "moment",
    [dt.datetime(2024, 1, 2, 3, 4, 5, 678000), dt.datetime(1999, 12, 31, 23, 59, 59, 999999)],
)
def test_instant_time_format_is_millisecond_precision(moment: dt.datetime) -> None:
    t = format_instant_time(moment)
    assert TIME_RE.match(t)
    assert t == moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def test_table_lock_is_reentrant_across_spellings_of_one_table(tmp_path: Path) -> None:
    """``/t`` and ``file:///t`` are one table: nesting their locks in one thread must not deadlock."""
    from inlet.core.commit.locks import table_lock

    path = tmp_path / "t"
    path.mkdir()
    plain, uri = Storage(str(path)), Storage(path.as_uri())
    assert plain.base_uri != uri.base_uri
    done: list[bool] = []

    def nested() -> None:
        with table_lock(plain), table_lock(uri), table_lock(plain):
            done.append(True)

    th = threading.Thread(target=nested, daemon=True)
    th.start()
    th.join(10)
    assert done == [True], "nested table locks on two spellings of one table deadlocked"
    # and the lock is free again for another thread
    other = threading.Thread(target=nested, daemon=True)
    other.start()
    other.join(10)
    assert done == [True, True]


def test_table_lock_excludes_other_threads(tmp_path: Path) -> None:
    from inlet.core.commit.locks import table_lock

    storage = Storage(str(tmp_path / "t"))
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def holder() -> None:
        with table_lock(storage):
            inside.set()
            release.wait(10)
            order.append("holder")

    def waiter() -> None:
        with table_lock(Storage(str(tmp_path / "t"))):
            order.append("waiter")

    h = threading.Thread(target=holder)
    h.start()
    assert inside.wait(10)
    w = threading.Thread(target=waiter)
    w.start()
    time.sleep(0.2)
    assert order == []  # the waiter is blocked
    release.set()
    h.join(10)
    w.join(10)
    assert order == ["holder", "waiter"]
