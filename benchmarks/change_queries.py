"""Benchmark: an incremental query over the last commit against what a user has without one.

Run ``.venv/bin/python benchmarks/change_queries.py --help``.

For Copy-on-Write and Merge-on-Read (simple index, ``--partitions`` partitions) a table of ``--rows``
rows is loaded in one bulk insert, then ``--commits`` upserts of ``--batch`` random existing rows
follow (``--spread one``: each changes rows of one partition, as time-partitioned CDC tables mostly
see; ``all``: random rows anywhere, so every file group is touched). Timed, each ``--repeat`` times (median):

- ``incremental``: ``read_changes`` over the last commit (Hudi's latest-state incremental query);
- ``snapshot + filter``: a full snapshot read keeping rows whose ``_hoodie_commit_time`` is the last
  commit (the floor without incremental queries);
- ``floor``: reading the Parquet base files the last commit wrote with pyarrow alone (no merge, no
  Hudi logic: the least I/O any reader of that commit's changes can do on COW).

Both Inlet reads must return the same rows (checked). Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from inlet.core import HudiTable


def _rows(ids: list[int], parts: int, step: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": [f"p{i % parts}" for i in ids],
            "ts": pa.array([step] * len(ids), pa.int64()),
            "payload": [f"v{step}-{i:012d}" for i in ids],
        }
    )


def _median(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def run(table_type: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    path = str(root / table_type.lower())
    table = HudiTable.create(
        path, name="bench", record_key="id", partition_by="part", ordering_field="ts", table_type=table_type
    )
    started = time.perf_counter()
    table.write(_rows(list(range(args.rows)), args.partitions, 0), "bulk_insert")
    load_s = time.perf_counter() - started
    rng = random.Random(1)
    for step in range(1, args.commits + 1):
        if args.spread == "all":
            ids = rng.sample(range(args.rows), args.batch)
        else:  # one partition per commit, as time-partitioned CDC tables mostly see
            ids = rng.sample(range(step % args.partitions, args.rows, args.partitions), args.batch)
        HudiTable.open(path).write(_rows(ids, args.partitions, step), "upsert")
    t = HudiTable.open(path)
    writes = t.timeline.completed_writes()
    last, before = writes[-1], writes[-2]
    assert before.completion_time is not None

    inc_s, inc = _median(lambda: HudiTable.open(path).read_changes(before.completion_time).table, args.repeat)

    def snapshot_filter() -> pa.Table:
        snap = HudiTable.open(path).read()
        return snap.filter(pc.equal(snap["_hoodie_commit_time"], last.time))

    snap_s, snap = _median(snapshot_filter, args.repeat)
    key = "_hoodie_record_key"
    assert sorted(inc.column(key).to_pylist()) == sorted(snap.column(key).to_pylist()), "results differ"
    md = t.timeline.commit_metadata(last)
    written = [s.path for s in md.write_stats() if s.path and s.path.endswith(".parquet")]
    floor_s, _ = (
        _median(lambda: [pq.read_table(Path(path) / p) for p in written], args.repeat)
        if written
        else (0.0, None)
    )
    return {
        "table": table_type,
        "spread": args.spread,
        "rows": args.rows,
        "load_s": round(load_s, 2),
        "changed_rows": inc.num_rows,
        "incremental_s": round(inc_s, 4),
        "snapshot_filter_s": round(snap_s, 4),
        "floor_s": round(floor_s, 4) if written else None,
        "speedup": round(snap_s / inc_s, 1) if inc_s else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="rows loaded (the issue's size: 1000000)")
    parser.add_argument("--commits", type=int, default=50, help="upserts after the load")
    parser.add_argument("--batch", type=int, default=200, help="rows per upsert")
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--spread",
        choices=("one", "all"),
        default="one",
        help="which keys an upsert changes: those of one partition (default) or random ones anywhere",
    )
    parser.add_argument("--types", default="COPY_ON_WRITE,MERGE_ON_READ")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="inlet-bench-changes-") as tmp:
        results = [run(tt.strip(), args, Path(tmp)) for tt in args.types.split(",")]
    cols = [
        "table",
        "spread",
        "rows",
        "changed_rows",
        "incremental_s",
        "snapshot_filter_s",
        "floor_s",
        "speedup",
    ]
    print("  ".join(f"{c:>17}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>17}" for c in cols))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
