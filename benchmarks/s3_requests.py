"""Requests per commit on S3 (SeaweedFS, embedded) as a table ages, and wall time per commit against
a local lake.

Run ``.venv/bin/python benchmarks/s3_requests.py --help``.

One table per store (``--table-type``, non-partitioned, 4 rows upserted per commit, the local commit
protocol: its lock is an S3 object) takes ``--commits`` commits in a row; with ``--services-every N``
compaction (MOR), clean and archive run every N commits, as the table services would. For each checkpoint in
``--at`` (default 10,100) the row shows the requests and wall time of the commits just before it
(``--window`` commits, averaged): requests by kind as counted by the storage layer, the table lock's
conditional PUT and DELETE included (a LIST per 1,000 entries; a file opened for reading is one GET,
although pyarrow may read a large Parquet file in a few ranges). Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.s3 import S3Options
from inlet.core.storage_requests import KINDS, RequestCounts
from inlet.services.stack.s3 import EmbeddedS3


def _batch(i: int) -> pa.Table:
    ids = [(i * 4 + k) % 64 for k in range(4)]
    return pa.table({"id": ids, "ts": [i] * 4, "name": [f"v{i}"] * 4})


def _run(
    uri: str, table_type: str, commits: int, at: list[int], window: int, services_every: int
) -> dict[int, dict[str, Any]]:
    table = HudiTable.create(uri, name="bench", record_key="id", ordering_field="ts", table_type=table_type)
    counts = table.storage.requests
    out: dict[int, dict[str, Any]] = {}
    marks: dict[int, tuple[dict[str, int], float]] = {}
    for i in range(1, commits + 1):
        if i in {a - window + 1 for a in at}:
            marks[i] = (counts.snapshot() if counts else {}, time.perf_counter())
        table.write(_batch(i), operation="upsert")
        if i in at:
            before, t0 = marks[i - window + 1]
            row: dict[str, Any] = {"wall_ms": 1000 * (time.perf_counter() - t0) / window}
            if counts is not None:
                diff = RequestCounts.diff(counts.snapshot(), before)
                row.update({k: diff[k] / window for k in KINDS})
                row["total"] = sum(diff.values()) / window
            out[i] = row
        if services_every and i % services_every == 0:  # as table services would, between windows
            if table_type == "MERGE_ON_READ":
                table.compact({"hoodie.compact.inline.max.delta.commits": "5"})
            table.clean({"hoodie.clean.commits.retained": "10"})
            table.archive()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--at", default="10,100", help="checkpoints (commit counts), comma-separated")
    ap.add_argument("--window", type=int, default=5, help="commits averaged before each checkpoint")
    ap.add_argument("--table-type", default="COPY_ON_WRITE", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    ap.add_argument(
        "--services-every",
        type=int,
        default=0,
        help="run compaction (MOR), clean and archive every N commits, outside the measured windows "
        "(default 0: never, the timeline and the files grow with every commit)",
    )
    args = ap.parse_args()
    at = sorted(int(a) for a in args.at.split(","))
    if at[-1] > args.commits or at[0] < args.window:
        ap.error("every checkpoint must be between --window and --commits")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedS3() as s3:
        s3.create_bucket("lake")
        opts = S3Options(s3.endpoint, s3.region, s3.access_key, s3.secret_key)
        os.environ.update(opts.to_env())
        run_args = (args.table_type, args.commits, at, args.window, args.services_every)
        s3_rows = _run("s3://lake/bench", *run_args)
        local_rows = _run(f"{tmp}/bench", *run_args)
    kinds = list(KINDS)
    header = (
        f"{'commits':>8} | "
        + " ".join(f"{k:>6}" for k in kinds)
        + f" | {'total':>6} | {'s3 ms':>7} | {'local ms':>8}"
    )
    print(header)
    print("-" * len(header))
    for a in at:
        r, lo = s3_rows[a], local_rows[a]
        print(
            f"{a:>8} | "
            + " ".join(f"{r[k]:>6.1f}" for k in kinds)
            + f" | {r['total']:>6.1f} | {r['wall_ms']:>7.1f} | {lo['wall_ms']:>8.1f}"
        )
    print(json.dumps({**vars(args), "s3": s3_rows, "local": local_rows}))


if __name__ == "__main__":
    main()
