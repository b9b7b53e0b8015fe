"""``inlet clean run|show`` as a user runs them (subprocesses): a dry run deletes nothing, a run
deletes exactly the slices its plan named and prints what it did, ``show`` lists it, a bad option is
one line on stderr and leaves no instant."""

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


def parquet_files(path: Path) -> set[str]:
    return {f.name for f in path.iterdir() if f.suffix == ".parquet"}


def test_clean_run_and_show(tmp_path: Path) -> None:
    path = tmp_path / "t"
    HudiTable.create(str(path), name="t", record_key="id", ordering_field="ts")
    for ts in range(1, 6):
        HudiTable.open(str(path)).write(
            pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "v": [f"v{ts}"] * 2,
                    "ts": pa.array([ts] * 2, pa.int64()),
                }
            ),
            "upsert",
        )
    before = parquet_files(path)
    assert len(before) == 5  # one file group, one base file per commit

    dry = run("clean", "run", path, "--option", "hoodie.clean.commits.retained=2", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["file_count"] == 2 and parquet_files(path) == before  # the newest 2 and the one before stay

    done = run("clean", "run", path, "--option", "hoodie.clean.commits.retained=2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["files_deleted"] == 2 and result["instant"]
    assert parquet_files(path) == before - set(plan["files"][""])
    assert [r["v"] for r in HudiTable.open(str(path)).read().to_pylist()] == ["v5", "v5"]

    again = run("clean", "run", path, "--option", "hoodie.clean.commits.retained=2")
    assert json.loads(again.stdout)["instant"] is None  # nothing old enough any more

    shown = run("clean", "show", path, "--json")
    docs = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [(d["instant"], d["state"], d["files_deleted"]) for d in docs] == [
        (result["instant"], "COMPLETED", 2)
    ]

    bad = run("clean", "run", path, "--option", "hoodie.clean.policy=KEEP_ALL")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "hoodie.clean.policy" in bad.stderr
    assert len(HudiTable.open(str(path)).cleans()) == 1
