"""Benchmark: a table written by many small commits, with and without table services.

Run ``.venv/bin/python benchmarks/table_services.py --help``.

A Merge-on-Read table (simple index, ``--partitions`` partitions, ``--rows`` rows loaded first) takes
``--commits`` upserts of ``--batch`` rows each. ``without``: nothing else runs. ``with``: after every
commit the table services run as ``inlet table-services`` runs them (compaction when Hudi's trigger
says so, ``hoodie.compact.inline.max.delta.commits`` = 5, then clean, 10 commits retained, then archive
with Hudi's defaults: 20 to 30 commits active). Reported per run: data files and active-timeline files
at the end, the snapshot read time at the end, the time the commits took, and the median / max cost
of one services run. Both final reads must be equal (checked).
Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.services.table_services.actions import ALL_SERVICES, run_services


def _rows(ids: list[int], parts: int, step: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": [f"p{i % parts}" for i in ids],
            "ts": pa.array([step] * len(ids), pa.int64()),
            "payload": [f"v{step}-{i:012d}" for i in ids],
        }
    )


def _count_files(path: Path) -> tuple[int, int]:
    data = timeline = 0
    for root, _dirs, files in os.walk(path):
        if "/.hoodie" in root:
            timeline += len(files) if root.endswith("timeline") else 0
        else:
            data += sum(1 for f in files if not f.startswith(".hoodie_partition_metadata"))
    return data, timeline


def run(services: bool, args: argparse.Namespace, root: Path) -> tuple[dict[str, Any], pa.Table]:
    path = root / ("with" if services else "without")
    HudiTable.create(
        str(path),
        name="bench",
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    HudiTable.open(str(path)).write(_rows(list(range(args.rows)), args.partitions, 0), "bulk_insert")
    rng = random.Random(3)
    write_s, service_runs = 0.0, []
    options = {"hoodie.compact.inline.max.delta.commits": "5", "hoodie.clean.commits.retained": "10"}
    for step in range(1, args.commits + 1):
        started = time.perf_counter()
        HudiTable.open(str(path)).write(
            _rows(rng.sample(range(args.rows), args.batch), args.partitions, step), "upsert"
        )
        write_s += time.perf_counter() - started
        if services:
            started = time.perf_counter()
            run_services(HudiTable.open(str(path)), "bench", ALL_SERVICES, options)
            service_runs.append(time.perf_counter() - started)
        if step % max(1, args.commits // 10) == 0:
            print(f"  {'with' if services else 'without'}: {step}/{args.commits} commits", flush=True)
    started = time.perf_counter()
    final = HudiTable.open(str(path)).read(meta_columns=False)
    read_s = time.perf_counter() - started
    data, timeline = _count_files(path)
    return (
        {
            "services": "with" if services else "without",
            "commits": args.commits,
            "data_files": data,
            "timeline_files": timeline,
            "read_s": round(read_s, 3),
            "writes_s": round(write_s, 2),
            "service_run_median_s": round(statistics.median(service_runs), 4) if service_runs else None,
            "service_run_max_s": round(max(service_runs), 4) if service_runs else None,
        },
        final.sort_by("id"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=200, help="small upserts (the issue's size: 1000)")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inlet-bench-services-") as tmp:
        (a, ra), (b, rb) = run(False, args, Path(tmp)), run(True, args, Path(tmp))
    assert ra.equals(rb), "the tables read differently"
    cols = list(a)
    print("  ".join(f"{c:>20}" for c in cols))
    for r in (a, b):
        print("  ".join(f"{r[c]!s:>20}" for c in cols))
    print(json.dumps([a, b]))


if __name__ == "__main__":
    main()
