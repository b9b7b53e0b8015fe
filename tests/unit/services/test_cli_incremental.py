"""``inlet read --query-type incremental`` as a user runs it: the rows the window's commits wrote
(latest state), the completion time to resume from, and one-line errors for a window without a
begin or with a begin that is no instant time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from inlet.core import HudiTable

INLET = [sys.executable, "-m", "inlet.services.cli.main"]


def run(*args: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    return subprocess.run([*INLET, *map(str, args)], capture_output=True, text=True, env=env, timeout=120)


def test_incremental_read_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "t"
    HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    done = []
    for step in (1, 2, 3):
        HudiTable.open(str(path)).write(
            pa.table({"id": pa.array([step, 9], pa.int64()), "ts": pa.array([step, step], pa.int64())}),
            "upsert",
        )
        done.append(HudiTable.open(str(path)).timeline.completed_writes()[-1].completion_time)

    window = run(
        "read", path, "--query-type", "incremental", "--begin", done[0], "--end", done[1], "--no-meta"
    )
    assert window.returncode == 0, window.stderr
    assert sorted((r["id"], r["ts"]) for r in map(json.loads, window.stdout.splitlines())) == [(2, 2), (9, 2)]

    out = tmp_path / "changes.parquet"
    latest = run("read", path, "--query-type", "incremental", "--begin", done[1], "--output", out)
    summary = json.loads(latest.stdout)
    assert summary["rows"] == 2 and summary["resume_from"] == done[2]
    assert sorted(pq.read_table(out).column("id").to_pylist()) == [3, 9]

    missing = run("read", path, "--query-type", "incremental")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--begin" in missing.stderr
    bad = run("read", path, "--query-type", "incremental", "--begin", "yesterday")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "yesterday" in bad.stderr


def test_min_delta_and_append_only_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts")
    start = t.write(pa.table({"id": [1, 2], "ts": [1, 1], "v": [10, 20]}), "upsert").completion_time
    t.write(pa.table({"id": [2, 3], "ts": [2, 2], "v": [21, 30]}), "upsert")
    end = t.delete(pa.table({"id": [1]})).completion_time

    delta = run(
        "read", path, "--query-type", "min_delta", "--begin", start, "--end", end, "--columns", "id,v"
    )
    assert delta.returncode == 0, delta.stderr
    got = {
        r["record_key"]: (r["op"], r["before"], r["after"])
        for r in map(json.loads, delta.stdout.splitlines())
    }
    assert got == {
        "1": ("d", {"id": 1, "v": 10}, None),
        "2": ("u", {"id": 2, "v": 20}, {"id": 2, "v": 21}),
        "3": ("i", None, {"id": 3, "v": 30}),
    }
    # append-only: the rows inserted, as inserted (Snowflake's APPEND_ONLY), later updates aside
    t.write(pa.table({"id": [3], "ts": [3], "v": [31]}), "upsert")
    appended = run("read", path, "--query-type", "append_only", "--begin", start, "--no-meta")
    assert [(r["id"], r["v"]) for r in map(json.loads, appended.stdout.splitlines())] == [(3, 30)]
    no_begin = run("read", path, "--query-type", "min_delta")
    assert no_begin.returncode == 2 and "--begin" in no_begin.stderr


def test_changes_of_one_instant_from_the_cli(tmp_path: Path) -> None:
    """--instant T: what a commit event's instant changed, no window arithmetic for the subscriber."""
    path = tmp_path / "t"
    t = HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts")
    t.write(pa.table({"id": [1, 2], "ts": [1, 1], "v": [10, 20]}), "upsert")
    second = t.write(pa.table({"id": [2, 3], "ts": [2, 2], "v": [21, 30]}), "upsert").instant_time
    deleted = t.delete(pa.table({"id": [1]})).instant_time

    delta = run("read", path, "--query-type", "min_delta", "--instant", second, "--columns", "id,v")
    assert delta.returncode == 0, delta.stderr
    got = {r["record_key"]: (r["op"], r["after"]) for r in map(json.loads, delta.stdout.splitlines())}
    assert got == {"2": ("u", {"id": 2, "v": 21}), "3": ("i", {"id": 3, "v": 30})}
    cdc = run("read", path, "--query-type", "cdc", "--instant", second, "--columns", "id,v")
    assert [(r["op"], json.loads(r["after"])) for r in map(json.loads, cdc.stdout.splitlines())] == [
        ("u", {"id": 2, "v": 21}),
        ("i", {"id": 3, "v": 30}),
    ]
    gone = run("read", path, "--query-type", "min_delta", "--instant", deleted, "--columns", "id")
    assert [json.loads(r)["op"] for r in gone.stdout.splitlines()] == ["d"]
    both = run("read", path, "--query-type", "incremental", "--instant", second, "--begin", second)
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "--instant" in both.stderr
    unknown = run("read", path, "--query-type", "incremental", "--instant", "20200101000000000")
    assert unknown.returncode != 0 and "not on the active timeline" in unknown.stderr
