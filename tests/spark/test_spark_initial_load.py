"""The initial load's CTID ranges as Spark tasks (``--engine spark``), on ``local[2]`` against a real
PostgreSQL and coordinator: each task imports the slot's exported snapshot and streams its range,
each wave of ranges is one commit that records them, and a load that failed after a wave resumes
from the ranges left."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from support.loads import lake_rows, load, table_path

from inlet.core import HudiTable
from inlet.services.coordinator.server import RunningServer
from inlet.services.writer import initial_load, spark_load
from inlet.services.writer.load_ranges import PageRange, read_progress


def _fill(url: str, table: str, rows: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v text, pad text)")
        conn.execute(
            f"INSERT INTO {table} SELECT g, 'v' || g, (SELECT string_agg(md5(g || '-' || i), '') "
            f"FROM generate_series(1, 3) i) FROM generate_series(1, {rows}) g"
        )


def _load(
    spark: SparkSession, url: str, coordinator: RunningServer, lake: Path, slot: str, **kw: Any
) -> initial_load.LoadSummary:
    options = initial_load.LoadOptions(pages_per_range=8)
    return load(url, coordinator.address, lake, slot, options=options, spark=spark, **kw)


def _committed_ranges(path: Path) -> list[list[PageRange]]:
    """The ranges each load commit records, in timeline order."""
    table = HudiTable.open(str(path))
    out = []
    for inst in table.timeline.completed_writes():
        extra = table.timeline.commit_metadata(inst).extra_metadata
        if initial_load.LOAD_RANGE_KEY in extra:
            out.append([PageRange.parse(t) for t in extra[initial_load.LOAD_RANGE_KEY].split(",")])
    return out


def test_ranges_are_spark_tasks_in_the_snapshot_and_each_wave_commits_its_ranges(
    spark: SparkSession,
    pg_url: str,
    coordinator: RunningServer,
    lake: Path,
    slot: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows inserted, updated (moved to later pages) and deleted after the first wave committed are
    not in the later waves: every task reads the exported snapshot (the changes stream from the
    slot's position afterwards)."""
    _fill(pg_url, "src_spark", 3000)
    real = spark_load.write_wave
    waves: list[int] = []

    def change_after_the_first_wave(*args: Any, **kwargs: Any) -> int:
        waves.append(1)
        if len(waves) == 2:
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("INSERT INTO src_spark SELECT g, 'new', '' FROM generate_series(5001, 5100) g")
                other.execute("UPDATE src_spark SET v = 'changed' WHERE id <= 300 OR id > 2900")
                other.execute("DELETE FROM src_spark WHERE id BETWEEN 1500 AND 1600")
        return real(*args, **kwargs)

    monkeypatch.setattr(spark_load, "write_wave", change_after_the_first_wave)
    progress = lake.parent / "progress.json"
    summary = _load(spark, pg_url, coordinator, lake, slot, progress_path=progress)
    [result] = summary.loaded
    assert result.rows == 3000 and result.ranges > 4
    path = table_path(pg_url, lake, "src_spark")
    assert lake_rows(path) == {i: f"v{i}" for i in range(1, 3001)}
    commits = _committed_ranges(path)
    # a wave of spark.default.parallelism (4) ranges per commit, disjoint, covering the table
    assert len(waves) == len(commits) >= 2 and all(len(c) <= 4 for c in commits)
    ranges = sorted(r for c in commits for r in c)
    assert len(ranges) == result.ranges and ranges[0].start == 0 and ranges[-1].end is None
    assert all(a.end == b.start for a, b in itertools.pairwise(ranges))
    done = read_progress(progress)["srv.public.src_spark"]
    assert (done["state"], done["rows"]) == ("loaded", 3000)


def test_a_spark_load_that_failed_after_a_wave_resumes_from_the_ranges_left(
    spark: SparkSession,
    pg_url: str,
    coordinator: RunningServer,
    lake: Path,
    slot: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(pg_url, "src_spark_resume", 3000)
    real = spark_load.write_wave
    calls: list[int] = []

    def driver_dies_at_the_second_wave(*args: Any, **kwargs: Any) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the driver died")  # the fault: a load process killed between waves
        return real(*args, **kwargs)

    monkeypatch.setattr(spark_load, "write_wave", driver_dies_at_the_second_wave)
    with pytest.raises(RuntimeError, match="the driver died"):
        _load(spark, pg_url, coordinator, lake, slot)
    path = table_path(pg_url, lake, "src_spark_resume")
    [first] = _committed_ranges(path)
    assert len(first) == 4

    monkeypatch.setattr(spark_load, "write_wave", real)
    summary = _load(spark, pg_url, coordinator, lake, slot, resume=True)
    [result] = summary.loaded
    assert result.ranges_done_before == 4 and result.rows < 3000  # the first wave was not read again
    assert lake_rows(path) == {i: f"v{i}" for i in range(1, 3001)}
    commits = _committed_ranges(path)
    assert commits[0] == first and not set(first) & {r for c in commits[1:] for r in c}
