"""The core tests' small partitioned table, its independent reads, and a fresh-interpreter runner
(for crash points)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.file_group.view import BaseFile, list_data_files
from support import hudi_rs

DATA_COLUMNS = ["id", "city", "ts", "fare", "name"]
REPO_ROOT = Path(__file__).resolve().parents[2]


def trips(ids: list[int], cities: list[str], ts: int, tag: str) -> pa.Table:
    """Rows of the test table: ``name`` is ``<tag>-<id>`` so every write's rows are recognisable."""
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(cities, pa.string()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "fare": pa.array([float(i) * 1.5 for i in ids], pa.float64()),
            "name": pa.array([f"{tag}-{i}" for i in ids], pa.string()),
        }
    )


def rows(table: pa.Table) -> list[dict[str, Any]]:
    """Commit time and data columns of a read, as dicts sorted by id (readers return file order)."""
    cols = [c for c in ("_hoodie_commit_time", *DATA_COLUMNS) if c in table.column_names]
    return sorted(table.select(cols).to_pylist(), key=lambda r: r["id"])


def read_hudi(path: str, reader_version: str) -> pa.Table:
    """A snapshot read by the independent ``hudi`` (hudi-rs) reader."""
    return hudi_rs.read_table(path, reader_version)


def all_reads(path: str) -> dict[str, list[dict[str, Any]]]:
    """The table's rows as Inlet and both hudi-rs file-group readers see them."""
    out = {"inlet": rows(HudiTable.open(path).read())}
    for v in hudi_rs.READER_VERSIONS:
        out[f"hudi-v{v}"] = rows(read_hudi(path, v))
    return out


def data_files_of(path: str, instant_time: str) -> list[str]:
    """Data files (outside ``.hoodie``) written by ``instant_time``."""
    table = HudiTable.open(path)
    out = []
    for info in list_data_files(table.storage):
        bf = BaseFile.parse(info.path)
        if bf is not None and bf.instant_time == instant_time:
            out.append(info.path)
    return out


def run_python(code: str, *args: str, crash_at: str | None = None, timeout: float = 120) -> int:
    """Run ``code`` in a fresh interpreter (``sys.argv[1:]`` = args); returns its exit code."""
    env = {k: v for k, v in os.environ.items() if k != "INLET_CRASH_AT"}
    if crash_at is not None:
        env["INLET_CRASH_AT"] = crash_at
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )
    if proc.returncode not in (0, 77):
        sys.stderr.write(proc.stderr)
    return proc.returncode
