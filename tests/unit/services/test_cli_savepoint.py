"""``inlet savepoint create|list|delete`` and ``inlet restore`` as a user runs them (subprocesses): JSON
out, the table restored to the savepoint's rows, bad input one ``inlet: error:`` line and no change."""

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


def test_cli_savepoint_and_restore(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    HudiTable.create(path, name="t", record_key="id", ordering_field="ts")
    times = []
    for ts in range(1, 4):
        batch = pa.table({"id": pa.array([1, ts], pa.int64()), "v": [f"v{ts}"] * 2, "ts": pa.array([ts] * 2)})
        times.append(HudiTable.open(path).write(batch, "upsert").instant_time)

    made = run("savepoint", "create", path, "--instant", times[1], "--comment", "good state")
    assert made.returncode == 0, made.stderr
    doc = json.loads(made.stdout)
    assert doc["instant"] == times[1] and doc["comment"] == "good state" and doc["files"] == 1
    listed = run("savepoint", "list", path, "--json")
    assert [json.loads(line)["instant"] for line in listed.stdout.splitlines()] == [times[1]]
    assert times[1] in run("savepoint", "list", path).stdout

    bad = run("restore", path, "--to", times[0])
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        f"inlet: error: cannot restore to {times[0]}: it is not a savepoint (create one with savepoint first)"
    ]
    assert run("savepoint", "delete", path, "--instant", times[2]).stderr.startswith(
        "inlet: error: no savepoint"
    )

    done = run("restore", path, "--to", times[1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rolled_back"] == [times[2]]
    got = sorted(HudiTable.open(path).read().select(["id", "v"]).to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "v": "v2"}, {"id": 2, "v": "v2"}]  # the rows as of the second write

    assert run("savepoint", "delete", path, "--instant", times[1]).returncode == 0
    assert run("savepoint", "list", path, "--json").stdout == ""
    for cmd in (["savepoint", "--help"], ["savepoint", "create", "--help"], ["restore", "--help"]):
        assert run(*cmd).returncode == 0
