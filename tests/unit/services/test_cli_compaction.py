"""``inlet compaction schedule|run|show`` against Merge-on-Read tables in tmp_path.

One flow runs the real CLI as subprocesses; the rest call ``main()`` in-process (same stdout,
stderr and exit status). Tables are written with ``inlet.core``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.services.cli.main import main

INLET = [sys.executable, "-m", "inlet.services.cli.main"]
Result = subprocess.CompletedProcess[str]


def run(*args: Any, env: dict[str, str] | None = None) -> Result:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    clean.update(env or {})
    return subprocess.run([*INLET, *map(str, args)], capture_output=True, text=True, env=clean, timeout=120)


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("INLET_")]:
        del os.environ[key]
    os.environ.update(env or {})
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        root.handlers[:] = handlers
        root.setLevel(level)


def call(*args: Any, env: dict[str, str] | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    argv = [str(a) for a in args]
    with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # --help
            code = int(e.code or 0)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def ok(result: Result) -> str:
    assert result.returncode == 0, f"{result.args} failed: {result.stderr}"
    return result.stdout


def doc(result: Result) -> dict[str, Any]:
    [line] = ok(result).splitlines()
    parsed: dict[str, Any] = json.loads(line)
    return parsed


def one_error(result: Result, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inlet: error:"), result.stderr
    for w in words:
        assert w.lower() in lines[0].lower(), lines[0]
    assert result.stdout == ""


def rides(path: Path, table_type: str = "MERGE_ON_READ", **kwargs: Any) -> HudiTable:
    """A table with two partitions, each with a base file and a log file (3 delta commits)."""
    t = HudiTable.create(
        str(path),
        name="rides",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        **kwargs,
    )
    opts = {"hoodie.parquet.small.file.limit": "0"}

    def rows(ids: list[int], ts: int, tag: str) -> pa.Table:
        return pa.table(
            {
                "id": ids,
                "city": [("sf", "ny")[i % 2] for i in ids],
                "ts": [ts] * len(ids),
                "v": [tag] * len(ids),
            }
        )

    t.write(rows([1, 2, 3, 4], 1, "a"), "insert", opts)
    t.write(rows([1, 2], 2, "b"), "upsert", opts)
    t.write(rows([2, 3], 3, "c"), "upsert", opts)
    return t


def snapshot(path: Path) -> list[tuple[Any, ...]]:
    got = HudiTable.open(str(path)).read()
    return sorted((r["id"], r["v"], r["_hoodie_commit_time"]) for r in got.to_pylist())


def test_schedule_show_run_show(tmp_path: Path) -> None:
    path = tmp_path / "rides"
    rides(path)
    before = snapshot(path)
    assert doc(run("compaction", "schedule", path))["instant"] is None  # 3 delta commits, 5 needed
    plan = doc(run("compaction", "schedule", path, "--max-delta-commits", "3"))
    assert plan["instant"] and (plan["file_groups"], plan["log_files"]) == (2, 4) and plan["log_size"] > 0
    text = ok(run("compaction", "show", path))
    header, _rule, line = text.splitlines()
    assert header.split() == ["instant", "state", "completion_time", "file_groups", "log_files", "log_size"]
    assert line.split()[:5] == [plan["instant"], "REQUESTED", "-", "2", "4"]
    summary = doc(run("compaction", "run", path, "-v"))
    assert summary["instant"] == plan["instant"] and summary["completion_time"] > plan["instant"]
    assert (summary["action"], summary["operation"]) == ("commit", "COMPACT")
    assert (summary["files"], summary["log_files_compacted"], summary["records_written"]) == (2, 4, 4)
    assert (summary["inserts"], summary["updates"], summary["deletes"]) == (0, 3, 0)
    [shown] = [json.loads(x) for x in ok(run("compaction", "show", path, "--json")).splitlines()]
    assert shown["state"] == "COMPLETED" and shown["completion_time"] == summary["completion_time"]
    assert len(shown["operations"]) == 2 and shown["result"]["records_written"] == 4
    assert all(op["log_files"] and op["base_file"] for op in shown["operations"])
    assert snapshot(path) == before
    assert doc(run("compaction", "run", path))["instant"] is None  # nothing pending any more


def test_run_with_schedule_options_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "rides"
    t = rides(path)
    before = snapshot(path)
    # environment variables stand in for PATH and the plan options
    env = {"INLET_TABLE_PATH": str(path), "INLET_COMPACTION_MAX_DELTA_COMMITS": "1"}
    summary = doc(
        call("compaction", "run", "--schedule", "--strategy", "log_count", "--target-io-mb", "0", env=env)
    )
    assert summary["files"] == 1  # a target of 0 MB still takes the first file group
    [done] = t.compactions()
    assert done.plan.operations[0].partition in ("sf", "ny")
    second = doc(
        call("compaction", "schedule", "--trigger", "num_or_time", "--max-delta-seconds", "0", env=env)
    )
    assert second["instant"] and second["file_groups"] == 1  # the other partition
    assert (
        doc(call("compaction", "run", path, "--instant", second["instant"]))["instant"] == second["instant"]
    )
    assert snapshot(path) == before
    assert HudiTable.open(str(path)).read(query_type="read_optimized").num_rows == len(before)


@pytest.mark.parametrize(
    ("args", "env", "code", "words"),
    [
        (["run", "--schedule", "--instant", "20240101000000000"], {}, 2, ["--schedule", "--instant"]),
        (["run", "--max-delta-commits", "1"], {}, 2, ["--max-delta-commits", "--schedule"]),
        (["schedule", "--trigger", "sometimes"], {}, 2, ["--trigger", "sometimes"]),
        (["schedule", "--max-delta-commits", "-1"], {}, 2, ["--max-delta-commits"]),
        (["schedule", "--option", "novalue"], {}, 2, ["--option", "novalue"]),
        (
            ["schedule", "--strategy", "log_size", "--option", "hoodie.compaction.strategy=LOG_COUNT"],
            {},
            2,
            ["--strategy", "contradicts"],
        ),
        (
            ["schedule", "--option", "hoodie.compaction.target.io=lots"],
            {},
            1,
            ["hoodie.compaction.target.io"],
        ),
        (["schedule"], {"INLET_COMPACTION_STRATEGY": "biggest"}, 2, ["INLET_COMPACTION_STRATEGY"]),
        (["run", "--instant", "20240101000000000"], {}, 1, ["20240101000000000", "not on the timeline"]),
        (["run", "--instant", "soon"], {}, 1, ["soon"]),
    ],
)
def test_errors_are_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], code: int, words: list[str]
) -> None:
    path = tmp_path / "rides"
    rides(path)
    one_error(call("compaction", args[0], path, *args[1:], env=env), code, *words)


def test_errors_on_tables_it_cannot_compact(tmp_path: Path) -> None:
    cow = tmp_path / "cow"
    rides(cow, table_type="COPY_ON_WRITE")
    one_error(call("compaction", "schedule", cow, "--max-delta-commits", "1"), 1, "Merge-on-Read")
    one_error(call("compaction", "schedule"), 2, "INLET_TABLE_PATH")
    one_error(call("compaction", "show", tmp_path / "nothing"), 1, "no hudi table")
    # a metadata table Inlet cannot update: asking for it is refused
    path = tmp_path / "md"
    rides(path)
    assert doc(call("compaction", "schedule", path, "--max-delta-commits", "1"))["instant"]
    one_error(call("compaction", "run", path, "--option", "hoodie.metadata.enable=true"), 1, "metadata table")
    summary = doc(call("compaction", "run", path))
    assert summary["files"] == 2


def test_help() -> None:
    top = ok(call("--help"))
    assert "compaction" in top
    for sub in ("schedule", "run", "show"):
        text = ok(call("compaction", sub, "--help"))
        assert "PATH" in text and "INLET_TABLE_PATH" in text
    sched = ok(call("compaction", "schedule", "--help"))
    for name in (
        "--trigger",
        "num_commits",
        "time_elapsed",
        "num_or_time",
        "num_and_time",
        "--max-delta-commits",
        "--max-delta-seconds",
        "--strategy",
        "log_size",
        "log_count",
        "--target-io-mb",
        "INLET_COMPACTION_TRIGGER",
        "INLET_COMPACTION_MAX_DELTA_COMMITS",
        "INLET_COMPACTION_MAX_DELTA_SECONDS",
        "INLET_COMPACTION_STRATEGY",
        "INLET_COMPACTION_TARGET_IO_MB",
    ):
        assert name in sched, name
    runs = ok(call("compaction", "run", "--help"))
    assert "--instant" in runs and "--schedule" in runs and "--force" in runs
