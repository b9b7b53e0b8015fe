"""``inlet verify`` speed: a table of N rows in PostgreSQL and in the lake, compared.

    .venv/bin/python benchmarks/verify.py [--rows 1000000] [--chunk-rows 100000] [--progress]

What runs, on this machine, in one process (PostgreSQL is an embedded server in a temporary
directory, the commit coordinator runs in-process on it):

1. ``items`` (id bigint primary key, 14 more columns: smallint, int, text, varchar, numeric(12,2),
   numeric, double, boolean, date, timestamp, timestamptz, uuid, jsonb, int[]) gets N rows.
2. The initial load (``inlet writer load``'s path: COPY rendering, bulk_insert through the
   coordinator) writes them into a Merge-on-Read table with the writer's defaults.
3. ``verify`` (the :class:`Verifier` behind ``inlet verify``) runs on: the equal tables; the tables
   after 100 scattered changes made in PostgreSQL only (34 updates, 33 deletes, 33 inserts; no
   replication runs, so ``recheck_wait_s=0``: nothing can catch up); and with ``repair`` on those.

Printed: rows, seconds and rows/s per case (rows/s = table rows / wall seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from inlet.services import logs
from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import serve
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.stack.postgres import EmbeddedPostgres
from inlet.services.verify.verifier import Verifier, VerifyOptions
from inlet.services.writer import initial_load

TABLE_SQL = """
CREATE TABLE items (
    id      bigint PRIMARY KEY,
    small   smallint,
    qty     int,
    name    text,
    code    varchar(16),
    price   numeric(12,2),
    loose   numeric,
    score   double precision,
    active  boolean,
    born    date,
    seen    timestamp,
    at      timestamptz,
    uid     uuid,
    doc     jsonb,
    nums    int[]
)
"""
FILL_SQL = """
INSERT INTO items
SELECT g, (g %% 30000)::smallint, g %% 1000, 'name ' || g, 'c' || (g %% 997), (g * 1.37)::numeric(12,2),
       CASE WHEN g %% 11 = 0 THEN NULL ELSE (g / 7.0)::numeric END, g / 9.0, g %% 2 = 0,
       date '2000-01-01' + (g %% 9000)::int, timestamp '2020-02-29 12:34:56.123456' + g * interval '1 second',
       timestamptz '2021-06-01 00:00:00+02' + g * interval '1 minute', md5(g::text)::uuid,
       jsonb_build_object('g', g), CASE WHEN g %% 4 = 0 THEN NULL ELSE ARRAY[g, g + 1] END
FROM generate_series(%s::bigint, %s::bigint) g
"""


def _changes(url: str, rows: int) -> None:
    """100 scattered changes: 34 updates, 33 deletes, 33 inserts."""
    step = max(1, rows // 100)
    ids = [1 + i * step for i in range(100)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE items SET name = name || ' changed' WHERE id = ANY(%s)", (ids[:34],))
        conn.execute("DELETE FROM items WHERE id = ANY(%s)", (ids[34:67],))
        conn.execute(FILL_SQL, (rows + 1, rows + 33))


def _run(options: VerifyOptions, client: CoordinatorClient | None = None) -> tuple[float, str, int]:
    started = time.monotonic()
    (report,) = Verifier(options, client).run()
    seconds = time.monotonic() - started
    found = sum(report.counts.values())
    return seconds, report.status, found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--progress", action="store_true", help="verify's progress lines on stderr")
    args = ap.parse_args()
    logs.configure(level="WARNING")
    if args.progress:
        logging.getLogger("inlet.verify.progress").setLevel(logging.INFO)
    n = args.rows
    with tempfile.TemporaryDirectory(prefix="inlet-bench-verify-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg")
        pg.start()
        try:
            url = pg.create_database("bench")
            lake = Path(tmp) / "lake"
            lake.mkdir()
            started = time.monotonic()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(TABLE_SQL)  # type: ignore[arg-type]
                for lo in range(1, n + 1, 250_000):
                    conn.execute(FILL_SQL, (lo, min(n, lo + 249_999)))
                conn.execute("VACUUM ANALYZE items")
            fill_s = time.monotonic() - started
            server = serve(
                CoordinatorConfig(
                    listen="127.0.0.1:0",
                    database_url=url,
                    lake_roots=(str(lake),),
                    insecure=True,
                    grace_s=1.0,
                )
            )
            try:
                with CoordinatorClient(server.address) as client:
                    started = time.monotonic()
                    initial_load.load(
                        url,
                        ["public.items"],
                        client=client,
                        lake_root=str(lake),
                        topic_prefix="bench",
                        slot="bench_verify",
                        publication="bench_verify",
                    )
                    load_s = time.monotonic() - started
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("SELECT pg_drop_replication_slot('bench_verify')")
                    print(
                        f"setup: {n} rows inserted in {fill_s:.1f} s, loaded into the lake in {load_s:.1f} s"
                    )
                    options = VerifyOptions(
                        url,
                        str(lake),
                        tables=("public.items",),
                        chunk_rows=args.chunk_rows,
                        recheck_wait_s=0.0,
                    )
                    results = [("equal tables", *_run(options))]
                    _changes(url, n)
                    results.append(("100 scattered differences", *_run(options)))
                    repair = dataclasses.replace(options, repair=True)
                    results.append(("100 differences, --repair", *_run(repair, client)))
                    results.append(("after the repair", *_run(options)))
            finally:
                server.stop(0)
        finally:
            pg.stop()
    print(f"{'case':<28} {'rows':>9} {'seconds':>8} {'rows/s':>10} {'status':>9} {'keys':>5}")
    for case, seconds, status, found in results:
        print(f"{case:<28} {n:>9} {seconds:>8.2f} {n / seconds:>10.0f} {status:>9} {found:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
