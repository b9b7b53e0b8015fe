"""``inlet clustering schedule|run|show`` as a user runs them (subprocesses): a plan only when due
(or forced), a run that turns the small file groups into one sorted group per partition and reads
the same, ``show`` listing it, and mistakes as one line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable

INLET = [sys.executable, "-m", "inlet.services.cli.main"]


def run(*args: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    return subprocess.run([*INLET, *map(str, args)], capture_output=True, text=True, env=env, timeout=120)


def test_clustering_schedule_run_show(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts")
    for k in range(3):
        ids = [k * 10 + i for i in range(3)]
        t.write(
            pa.table(
                {"id": pa.array(ids, pa.int64()), "ts": pa.array([1] * 3, pa.int64()), "v": [-i for i in ids]}
            ),
            "bulk_insert",
        )
    before = sorted(HudiTable.open(str(path)).read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"])
    assert len(HudiTable.open(str(path)).file_system_view().latest_file_slices()) == 3

    not_due = run("clustering", "schedule", path)  # 3 writes, 4 make it due
    assert not_due.returncode == 0, not_due.stderr
    assert json.loads(not_due.stdout)["instant"] is None
    done = run("clustering", "run", path, "--schedule", "--force", "--sort-columns", "v")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["action"] == "replacecommit" and summary["files_written"] == 1
    t = HudiTable.open(str(path))
    assert len(t.file_system_view().latest_file_slices()) == 1
    assert sorted(t.read(columns=["id", "v"]).to_pylist(), key=lambda r: r["id"]) == before
    assert t.read(columns=["v"]).column("v").to_pylist() == sorted(r["v"] for r in before)

    shown = run("clustering", "show", path, "--json")
    assert [json.loads(ln)["instant"] for ln in shown.stdout.splitlines()] == [summary["instant"]]
    both = run("clustering", "run", path, "--schedule", "--instant", summary["instant"])
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "exclude each other" in both.stderr


def test_clustering_of_a_bucket_table_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "b"
    HudiTable.create(str(path), name="b", record_key="id", table_type="MERGE_ON_READ", index="bucket")
    refused = run("clustering", "schedule", path, "--force")
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1 and "bucket-index" in refused.stderr
