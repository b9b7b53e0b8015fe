"""The initial load split into CTID ranges, against a real PostgreSQL and coordinator: each range
read on its own connection in the slot's exported snapshot, one commit per range, a load killed
midway resumed from the ranges left, and memory bounded by the range, not the table.

Tables here take a few dozen pages and ``pages_per_range`` is small, so they split into many ranges.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from support.loads import lake_rows, load

from inlet.core import HudiTable
from inlet.core.faults import CRASH_EXIT_CODE
from inlet.services.coordinator.server import RunningServer
from inlet.services.writer import initial_load
from inlet.services.writer.load_ranges import PageRange, covers_all, read_progress, table_pages


def _fill(url: str, table: str, rows: int, pad: int = 3) -> int:
    """``table`` (id, v, pad) with ``rows`` rows in id order, ``pad`` md5 texts (32 bytes each,
    incompressible, stored in the row) each; its size in bytes."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, pad text)")
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'v' || g, (SELECT string_agg(md5(g || '-' || i), '') "
            f"FROM generate_series(1, {pad}) i) FROM generate_series(1, {rows}) g"
        )
        [(size,)] = conn.execute(f"SELECT pg_relation_size('{table}')").fetchall()
        assert size > 20 * 8192  # several ranges of 2 pages
        return int(size)


def _dbname(url: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(url)["dbname"]  # type: ignore[return-value]


def _load(
    url: str,
    coordinator: RunningServer,
    lake: Path,
    slot: str,
    resume: bool = False,
    progress_path: Path | None = None,
    **options: Any,
) -> initial_load.LoadSummary:
    return load(
        url,
        coordinator.address,
        lake,
        slot,
        resume=resume,
        options=initial_load.LoadOptions(**options),
        progress_path=progress_path,
    )


def _load_commits(path: Path) -> list[tuple[dict[str, str], int]]:
    """Each load commit's extraMetadata and the records it wrote, in timeline order."""
    table = HudiTable.open(str(path))
    out = []
    for inst in table.timeline.completed_writes():
        md = table.timeline.commit_metadata(inst)
        if initial_load.LOAD_LSN_KEY in md.extra_metadata:
            out.append((md.extra_metadata, sum(s.num_writes for s in md.write_stats())))
    return out


def test_a_table_split_into_ranges_loads_each_row_once(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    _fill(pg_url, "src_split", 3000)
    dbname = _dbname(pg_url)
    progress = lake.parent / "progress.json"
    summary = _load(pg_url, coordinator, lake, slot, workers=2, pages_per_range=2, progress_path=progress)
    [result] = summary.loaded
    assert result.rows == 3000 and result.ranges > 5
    # the progress file (what `stack status` and the writer's metrics show) says the table is done
    done = read_progress(progress)["srv.public.src_split"]
    assert (done["state"], done["rows"], done["eta_s"]) == ("loaded", 3000, 0.0)
    assert done["pages_done"] == done["pages"] > 20
    path = lake / dbname / "public" / "src_split"
    assert lake_rows(path) == {i: f"v{i}" for i in range(1, 3001)}
    commits = _load_commits(path)
    # one commit per range with rows, every record written once, ranges disjoint and covering the table
    assert sum(written for _, written in commits) == 3000
    assert all(extra[initial_load.LOAD_LSN_KEY] == str(summary.lsn) for extra, _ in commits)
    ranges = sorted(PageRange.parse(extra[initial_load.LOAD_RANGE_KEY]) for extra, _ in commits)
    assert len(ranges) == len(commits) > 5
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))


def test_ranges_read_the_exported_snapshot_not_changes_made_while_loading(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows inserted, updated (moved to other pages) and deleted on another connection after the
    first range is read are not in the load: every range sees exactly the snapshot's rows."""
    _fill(pg_url, "src_moving", 3000)
    dbname = _dbname(pg_url)
    real = initial_load.stream_copy
    calls = []

    def changes_after_the_first_range(*args: Any) -> Iterator[pa.RecordBatch]:
        calls.append(1)
        if len(calls) == 2:
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("INSERT INTO src_moving SELECT g, 'new', '' FROM generate_series(5001, 5100) g")
                # new versions land in later pages (ranges not read yet) and the old ones stay
                other.execute("UPDATE src_moving SET v = 'changed' WHERE id <= 300 OR id > 2900")
                other.execute("DELETE FROM src_moving WHERE id BETWEEN 1500 AND 1600")
        return real(*args)

    monkeypatch.setattr(initial_load, "stream_copy", changes_after_the_first_range)
    summary = _load(pg_url, coordinator, lake, slot, workers=1, pages_per_range=2)
    assert len(calls) > 5
    assert summary.loaded[0].rows == 3000
    assert lake_rows(lake / dbname / "public" / "src_moving") == {i: f"v{i}" for i in range(1, 3001)}


def test_a_load_killed_midway_resumes_from_the_ranges_left(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    _fill(pg_url, "src_resume", 3000)
    dbname = _dbname(pg_url)
    argv = [sys.executable, "-m", "inlet.services.cli.main", "writer", "load", "--database-url", pg_url]
    argv += ["--tables", "public.src_*", "--coordinator", coordinator.address, "--lake-root", str(lake)]
    argv += ["--topic-prefix", "srv", "--slot", slot, "--publication", slot + "_pub"]
    argv += ["--load-workers", "1", "--pages-per-range", "4"]
    # dies like SIGKILL once the first range is committed
    env = {**os.environ, "INLET_CRASH_AT": initial_load.AFTER_RANGE}
    died = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert died.returncode == CRASH_EXIT_CODE, died.stderr
    path = lake / dbname / "public" / "src_resume"
    [(first, first_rows)] = _load_commits(path)
    assert first[initial_load.LOAD_RANGE_KEY] == "0:4"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        [(flushed,)] = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchall()
        assert str(initial_load.parse_lsn(flushed)) == first[initial_load.LOAD_LSN_KEY]
        # after the crash, before the rerun: a row of a range left deleted, one of the range done
        # updated (its new version lands in a range left); streaming from the slot replays both
        conn.execute("DELETE FROM src_resume WHERE id = 2900")
        conn.execute("UPDATE src_resume SET v = 'changed' WHERE id = 1")

    resumed = _load(pg_url, coordinator, lake, slot, resume=True, workers=1, pages_per_range=4)
    assert str(resumed.lsn) == first[initial_load.LOAD_LSN_KEY]  # the slot kept, streaming starts there
    [result] = resumed.loaded
    assert result.ranges_done_before == 1
    commits = _load_commits(path)
    # the first range is not read again: the rerun wrote every other row once (and row 1's new version)
    assert sum(written for _, written in commits[1:]) == 3000 - first_rows - 1 + 1
    assert covers_all(PageRange.parse(extra[initial_load.LOAD_RANGE_KEY]) for extra, _ in commits)
    expected = {i: f"v{i}" for i in range(1, 3001) if i != 2900} | {1: "changed"}
    assert lake_rows(path) == expected  # each key once; row 1's two copies merged, the newer wins

    again = _load(pg_url, coordinator, lake, slot, resume=True, workers=1, pages_per_range=4)
    assert [(r.rows, r.ranges) for r in again.loaded] == [(0, 0)]  # all done: nothing read again
    assert len(_load_commits(path)) == len(commits)


_POOLS: list[pa.MemoryPool] = []


def test_memory_is_bounded_by_the_range_not_the_table(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    """Arrow's allocations peak at a few ranges' worth, far below the table (the load before
    ranges held the whole table as one Arrow table)."""
    size = _fill(pg_url, "src_big", 30_000, pad=30)  # ~1 KB rows, ~30 MB
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    # kept for the life of the worker: a buffer another thread of this process allocated through it
    # while it was the default may be freed after the test (a freed pool there crashed a CI worker)
    _POOLS.append(pool)
    before = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        summary = _load(pg_url, coordinator, lake, slot, workers=2, pages_per_range=128)  # 1 MiB ranges
    finally:
        pa.set_memory_pool(before)
    assert summary.loaded[0].rows == 30_000
    assert 0 < pool.max_memory() < size / 5, (pool.max_memory(), size)


def test_a_value_refused_in_a_later_range_clears_the_ranges_committed_and_leaves_the_table(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    _fill(pg_url, "src_late_bad", 3000)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE src_late_bad ADD COLUMN ts timestamp")
        conn.execute("UPDATE src_late_bad SET ts = '294276-12-31 23:59:59' WHERE id = 3000")  # last page
    summary = _load(pg_url, coordinator, lake, slot, workers=2, pages_per_range=2)
    assert list(summary.skipped) == ["public.src_late_bad"] and summary.loaded == []
    assert "column ts = 294276-12-31 23:59:59" in summary.skipped["public.src_late_bad"]
    path = lake / _dbname(pg_url) / "public" / "src_late_bad"
    commits = _load_commits(path)
    assert len(commits) > 1  # ranges were committed before the refusal...
    assert lake_rows(path) == {}  # ...and cleared: Debezium's snapshot loads the table


def test_a_partitioned_table_splits_by_its_largest_partition(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_parted (id int, v text, PRIMARY KEY (id)) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE src_parted_a PARTITION OF src_parted FOR VALUES FROM (1) TO (1001)")
        conn.execute("CREATE TABLE src_parted_b PARTITION OF src_parted FOR VALUES FROM (1001) TO (4001)")
        conn.execute("INSERT INTO src_parted SELECT g, 'v' || g FROM generate_series(1, 4000) g")
    summary = _load(pg_url, coordinator, lake, slot, workers=2, pages_per_range=4)
    [result] = summary.loaded
    assert result.rows == 4000 and result.ranges > 3  # pages of the larger partition
    path = lake / _dbname(pg_url) / "public" / "src_parted"
    assert lake_rows(path) == {i: f"v{i}" for i in range(1, 4001)}
    # the identity a resumed load compares with its commits': it changes when a partition is
    # rewritten, attached or detached (rows moved: the ranges recorded as done no longer hold)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        first = table_pages(conn, "public", "src_parted")
        [recorded] = {e[initial_load.LOAD_RELFILENODE_KEY] for e, _ in _load_commits(path)}
        assert recorded == str(first[1])
        assert table_pages(conn, "public", "src_parted") == first
        seen = {first[1]}
        for change in (
            "VACUUM FULL src_parted_a",
            "CREATE TABLE src_parted_c PARTITION OF src_parted FOR VALUES FROM (4001) TO (5001)",
            "ALTER TABLE src_parted DETACH PARTITION src_parted_b",
        ):
            conn.execute(change)
            identity = table_pages(conn, "public", "src_parted")[1]
            assert identity not in seen, change
            seen.add(identity)
