"""Requests on S3 (SeaweedFS, embedded) per commit as a table ages, per snapshot read and per
table-services run, and wall time per commit against a local lake.

Run ``.venv/bin/python benchmarks/s3_requests.py --help``.

One table per store (``--table-type``; ``--partitions`` partitions, each commit upserting 4 rows into
one of them in turn; the local commit protocol, whose lock is an S3 object) takes ``--commits``
commits in a row; every ``--services-every`` commits compaction (MOR), clean and archive run, as the
table services would (archive keeps the active timeline short, as Apache Hudi's does). At each
checkpoint in ``--at`` (default 10,100,1000) the report shows:

- ``commit``: the requests and wall time of the ``--window`` commits just before it, averaged;
- ``snapshot read``: opening the table afresh and reading all of it;
- ``compaction`` (MOR), ``clean``, ``archive``: one run of each, right then.

Requests by kind as counted by the storage layer (:mod:`inlet.core.storage_requests`), the table
lock's conditional PUT and DELETE included: a LIST per 1,000 keys listed, a file opened for reading
one GET (pyarrow may read a large Parquet file in a few ranges more). The local lake's column is
wall time only (no requests). Prints a table, then one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.s3 import S3Options
from inlet.core.storage_requests import KINDS, RequestCounts
from inlet.services.stack.s3 import EmbeddedS3

SERVICES = {"hoodie.compact.inline.max.delta.commits": "5", "hoodie.clean.commits.retained": "10"}
ARCHIVE = {"hoodie.keep.min.commits": "20", "hoodie.keep.max.commits": "30"}


def _batch(i: int, partitions: int) -> pa.Table:
    ids = [(i * 4 + k) % 64 for k in range(4)]
    return pa.table({"id": ids, "ts": [i] * 4, "name": [f"v{i}"] * 4, "part": [f"p{i % partitions:03d}"] * 4})


class _Meter:
    def __init__(self, counts: RequestCounts | None) -> None:
        self.counts = counts

    def measure(self, action: Callable[[], object], times: int = 1) -> dict[str, Any]:
        before = self.counts.snapshot() if self.counts else {}
        t0 = time.perf_counter()
        action()
        row: dict[str, Any] = {"wall_ms": 1000 * (time.perf_counter() - t0) / times}
        if self.counts is not None:
            diff = RequestCounts.diff(self.counts.snapshot(), before)
            row.update({k: diff[k] / times for k in KINDS})
            row["total"] = sum(diff.values()) / times
        return row


def _services(table: HudiTable, table_type: str) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {}
    if table_type == "MERGE_ON_READ":
        out["compaction"] = lambda: table.compact(SERVICES)
    out["clean"] = lambda: table.clean(SERVICES)
    out["archive"] = lambda: table.archive(ARCHIVE)
    return out


def _run(uri: str, args: argparse.Namespace, at: list[int]) -> dict[int, dict[str, dict[str, Any]]]:
    partition_by = "part" if args.partitions > 1 else None
    table = HudiTable.create(
        uri,
        name="bench",
        record_key="id",
        ordering_field="ts",
        table_type=args.table_type,
        partition_by=partition_by,
    )
    meter = _Meter(table.storage.requests)
    out: dict[int, dict[str, dict[str, Any]]] = {}
    done = 0
    for checkpoint in at:
        # the commits up to the window before this checkpoint, with services every --services-every
        while done < checkpoint - args.window:
            done += 1
            table.write(_batch(done, args.partitions), operation="upsert")
            if args.services_every and done % args.services_every == 0:
                for run in _services(table, args.table_type).values():
                    run()
        first = done + 1

        def window(first: int = first) -> None:
            for i in range(first, first + args.window):
                table.write(_batch(i, args.partitions), operation="upsert")

        rows = {"commit": meter.measure(window, args.window)}
        done += args.window
        rows["snapshot read"] = meter.measure(lambda: HudiTable.open(uri).read())
        for name, run in _services(table, args.table_type).items():
            rows[name] = meter.measure(run)
        out[checkpoint] = rows
        print(f"  {uri}: {checkpoint} commits", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=1000, help="commits in all (default 1000)")
    ap.add_argument("--at", default="10,100,1000", help="checkpoints (commit counts), comma-separated")
    ap.add_argument("--window", type=int, default=5, help="commits averaged before each checkpoint")
    ap.add_argument("--table-type", default="COPY_ON_WRITE", choices=["COPY_ON_WRITE", "MERGE_ON_READ"])
    ap.add_argument(
        "--partitions", type=int, default=8, help="partitions, written in turn (1: non-partitioned)"
    )
    ap.add_argument(
        "--services-every",
        type=int,
        default=10,
        help="run compaction (MOR), clean and archive every N commits between the measured windows "
        "(0: never, so the active timeline and the file versions grow with every commit)",
    )
    args = ap.parse_args()
    at = sorted(int(a) for a in args.at.split(","))
    if at[-1] > args.commits or at[0] < args.window:
        ap.error("every checkpoint must be between --window and --commits")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedS3() as s3:
        s3.create_bucket("lake")
        opts = S3Options(s3.endpoint, s3.region, s3.access_key, s3.secret_key)
        os.environ.update(opts.to_env())
        s3_rows = _run("s3://lake/bench", args, at)
        local_rows = _run(f"{tmp}/bench", args, at)
    kinds = list(KINDS)
    header = (
        f"{'commits':>7} {'operation':<14}| "
        + " ".join(f"{k:>6}" for k in kinds)
        + f" | {'total':>6} | {'s3 ms':>7} | {'local ms':>8}"
    )
    print(header)
    print("-" * len(header))
    for a in at:
        for op, r in s3_rows[a].items():
            lo = local_rows[a][op]
            print(
                f"{a:>7} {op:<14}| "
                + " ".join(f"{r[k]:>6.1f}" for k in kinds)
                + f" | {r['total']:>6.1f} | {r['wall_ms']:>7.1f} | {lo['wall_ms']:>8.1f}"
            )
    print(json.dumps({**vars(args), "s3": s3_rows, "local": local_rows}))


if __name__ == "__main__":
    main()
