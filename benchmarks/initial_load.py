"""Initial load speed and memory: N rows x 20 columns from PostgreSQL into the lake by ``COPY``.

    .venv/bin/python benchmarks/initial_load.py [--rows 1000000] [--paths new,old,spark] [--workers 2]
                                                [--pages-per-range 4096] [--spark-master local[2]]
                                                [--spark-conf K=V ...]

What runs, on this machine: an embedded PostgreSQL in a temporary directory and the commit
coordinator in this process; ``items`` (id bigint primary key and 19 more columns: smallint, int,
bigint, text x2, varchar, numeric(12,2), numeric, double x2, boolean, date, timestamp, timestamptz
x2, uuid, jsonb, int[], bytea) gets N rows; then each path loads it, in its own child process (so
each one's peak RSS is its own), into its own lake:

- ``new``: :func:`inlet.services.writer.initial_load.load` (``inlet writer load``): CTID ranges
  read in the slot's exported snapshot on ``--workers`` connections, COPY streamed into Arrow, one
  ``bulk_insert`` commit per range;
- ``old``: the load before ranges, rebuilt from the same module's parts: the whole table COPYed
  to one CSV file in the snapshot, read into one Arrow table, written in one ``bulk_insert``;
- ``spark``: the same load with ``--engine spark`` (:mod:`inlet.services.writer.spark_load`) on
  ``--spark-master`` (default ``local[2]``): each range a Spark task, a wave of
  ``spark.default.parallelism`` ranges per commit (``--spark-conf K=V``: Spark settings).

Printed per path: rows; wall seconds from the loading process's start to its exit and rows/s
over them (end to end: Python, the JVM's start and stop included), and the same for the load
alone; CPU seconds of the loading processes (the loader, its JVM and the Python workers the JVM
forks, sampled from /proc by :class:`TreeSampler`) and of PostgreSQL (the postmaster, its live
processes and the backends it reaped); rows per CPU-second (both together); the peak RSS of each
process (the largest of each kind: ``VmHWM``); the load average (1 min) at the start, its
largest and at the end. After each path the lake's table is read back (a snapshot read of its
key column) and must hold every id once. The machine's other load counts in the wall time: the
CPU-second and RSS figures are the steadier ones.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import serve
from inlet.services.stack.postgres import EmbeddedPostgres

TABLE_SQL = """
CREATE TABLE items (
    id      bigint PRIMARY KEY,
    small   smallint,
    qty     int,
    big     bigint,
    name    text,
    note    text,
    code    varchar(16),
    price   numeric(12,2),
    loose   numeric,
    score   double precision,
    ratio   double precision,
    active  boolean,
    born    date,
    seen    timestamp,
    at      timestamptz,
    changed timestamptz,
    uid     uuid,
    doc     jsonb,
    nums    int[],
    raw     bytea
)
"""
FILL_SQL = """
INSERT INTO items
SELECT g, (g %% 30000)::smallint, g %% 1000, g * 7919, 'name ' || g, 'a note about row ' || g || ' of the table',
       'c' || (g %% 997), (g * 1.37)::numeric(12,2),
       CASE WHEN g %% 11 = 0 THEN NULL ELSE (g / 7.0)::numeric END, g / 9.0, g * 0.001, g %% 2 = 0,
       date '2000-01-01' + (g %% 9000)::int, timestamp '2020-02-29 12:34:56.123456' + g * interval '1 second',
       timestamptz '2021-06-01 00:00:00+02' + g * interval '1 minute',
       CASE WHEN g %% 3 = 0 THEN NULL ELSE timestamptz '2024-01-01 00:00:00Z' + g * interval '1 ms' END,
       md5(g::text)::uuid, jsonb_build_object('g', g), CASE WHEN g %% 4 = 0 THEN NULL ELSE ARRAY[g, g + 1] END,
       CASE WHEN g %% 5 = 0 THEN NULL ELSE int8send(g) END
FROM generate_series(%s::bigint, %s::bigint) g
"""


def _cpu_of(pid: int) -> float:
    """CPU seconds of a process, its reaped children, and its live children (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(p: int | str) -> list[str]:
        text = Path(f"/proc/{p}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()

    fields = stat(pid)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        try:
            f = stat(child)
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / tick


class TreeSampler(threading.Thread):
    """Samples the process trees under ``roots`` (role -> pid) every ``interval_s`` from /proc: each
    process's own CPU seconds (utime + stime, last seen) and peak RSS (``VmHWM``, the kernel's high
    water mark, so a peak between samples is not missed while the process lives). A process is
    counted in its root's role, except a ``java`` process (``jvm``) and the processes under it
    (``spark python``, the Python workers the JVM forks)."""

    def __init__(self, roots: dict[str, int], interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.roots = roots
        self.interval_s = interval_s
        self.seen: dict[int, tuple[str, float, int]] = {}  # pid -> (role, cpu s, peak KiB)
        self._done = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")
        self._before = self._cpu()  # CPU a process had used before sampling began is not counted

    def run(self) -> None:
        while not self._done.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict[str, dict[str, float]]:
        """Stop sampling; per role: processes seen, CPU seconds (sum), peak RSS MiB (the largest)."""
        self._done.set()
        self.join()
        self.sample()
        out: dict[str, dict[str, float]] = {}
        for role, cpu, peak in self.seen.values():
            r = out.setdefault(role, {"processes": 0, "cpu": 0.0, "peak_mib": 0.0})
            r["processes"] += 1
            r["cpu"] += cpu
            r["peak_mib"] = max(r["peak_mib"], peak / 1024)
        return out

    def _cpu(self) -> dict[int, tuple[int, float]]:
        """pid -> (parent pid, own CPU seconds) of every process."""
        out: dict[int, tuple[int, float]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                text = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / self._tick)
        return out

    def sample(self) -> None:
        now = self._cpu()
        parent = {pid: v[0] for pid, v in now.items()}
        cpu = {pid: v[1] - self._before.get(pid, (0, 0.0))[1] for pid, v in now.items()}
        children: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            children.setdefault(ppid, []).append(pid)
        for role, root in self.roots.items():
            todo = [(root, role)]
            while todo:
                pid, r = todo.pop()
                if pid not in cpu:
                    continue
                if r == role and self._is_java(pid):
                    r = "jvm"
                elif r == "jvm":
                    r = "spark python"
                peak = self._peak_kib(pid)
                old = self.seen.get(pid)
                if old is not None:
                    peak = max(peak, old[2])
                    if old[0] in ("jvm", "spark python"):
                        r = old[0]  # an exiting JVM's comm may no longer read "java"
                self.seen[pid] = (r, max(cpu[pid], old[1] if old else 0.0), peak)
                todo.extend((c, r) for c in children.get(pid, []))

    @staticmethod
    def _is_java(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip() == "java"
        except OSError:
            return False

    @staticmethod
    def _peak_kib(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0


def _lake_rows(path: str) -> tuple[int, int]:
    """The rows of the loaded table at ``path`` (a snapshot read of its key column, logs merged)
    and how many distinct ids they hold."""
    import pyarrow.compute as pc

    from inlet.core import HudiTable

    ids = HudiTable.open(path).read(columns=["id"], meta_columns=False).column("id")
    return len(ids), int(pc.count_distinct(ids).as_py())


def child(args: argparse.Namespace) -> int:
    """One path's load in this (child) process; prints its numbers as JSON."""
    from inlet.services import logs
    from inlet.services.coordinator_client.client import CoordinatorClient
    from inlet.services.writer import initial_load

    logs.configure(level="INFO" if args.progress else "WARNING")
    started = time.monotonic()
    cpu0 = time.process_time()
    spark = None
    if args.path == "spark":
        from inlet.services.writer import spark_load

        conf = dict(kv.split("=", 1) for kv in args.spark_conf)
        spark = spark_load.spark_session(args.spark_master, conf, "inlet load benchmark")
    with CoordinatorClient(args.coordinator) as client:
        if args.path in ("new", "spark"):
            summary = initial_load.load(
                args.url,
                ["public.items"],
                client=client,
                lake_root=args.lake,
                topic_prefix=args.path,
                slot=f"bench_{args.path}",
                publication="bench_pub",
                options=initial_load.LoadOptions(workers=args.workers, pages_per_range=args.pages_per_range),
                spark=spark,
            )
            rows, table_path = summary.loaded[0].rows, summary.loaded[0].path
        else:
            rows, table_path = _old_load(args.url, client, args.lake)
    seconds = time.monotonic() - started
    if spark is not None:
        spark_load.stop_session(spark)  # the JVM exits and is reaped: its usage is in RUSAGE_CHILDREN
    cpu = time.process_time() - cpu0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu += kids.ru_utime + kids.ru_stime
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"rows": rows, "seconds": seconds, "cpu": cpu, "peak_mib": peak_kib / 1024, "table": table_path}
    out["children_peak_mib"] = kids.ru_maxrss / 1024
    print(json.dumps(out))
    return 0


def _old_load(url: str, client: Any, lake: str) -> tuple[int, str]:
    """The load before ranges: one CSV spool, one Arrow table, one bulk_insert."""
    from inlet.core import HudiTable
    from inlet.core.storage import Storage
    from inlet.services.cdc_consumer import PostgresCatalog
    from inlet.services.coordinator_client.client import GrpcCommitProtocol
    from inlet.services.writer import initial_load, tables
    from inlet.services.writer.rows import SNAPSHOT_ORDERING

    catalog = PostgresCatalog(url)
    try:
        with (
            initial_load.exported_snapshot(url, "bench_old", "bench_pub") as snap,
            psycopg.connect(url) as conn,
            tempfile.TemporaryDirectory(prefix="inlet-bench-old-") as workdir,
        ):
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(f"SET TRANSACTION SNAPSHOT '{snap.name}'")  # type: ignore[arg-type]
            plan = initial_load.plan_table(catalog, conn, "public", "items")
            data = initial_load.with_event_columns(
                initial_load.read_table(conn, plan, Path(workdir)), SNAPSHOT_ORDERING, "old"
            )
            table_id = "old.public.items"
            settings = tables.TableSettings()
            path = tables.ensure_table(
                client, table_id, lake, "bench", "public", "items", plan.keys, settings
            )
            hudi = HudiTable.open(path, commit_protocol=GrpcCommitProtocol(client, table_id, Storage(path)))
            hudi.write(data, "bulk_insert", {}, extra_metadata={initial_load.LOAD_LSN_KEY: str(snap.lsn)})
            return int(data.num_rows), path
    finally:
        catalog.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--paths", default="new,old", help="comma-separated: new, old, spark")
    ap.add_argument("--spark-master", default="local[2]", help="the spark path's master")
    ap.add_argument(
        "--spark-conf", action="append", default=[], metavar="K=V", help="a Spark setting of the spark path"
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pages-per-range", type=int, default=4096)
    ap.add_argument("--progress", action="store_true", help="the load's INFO lines on stderr")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--coordinator", help=argparse.SUPPRESS)
    ap.add_argument("--lake", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    n = args.rows
    results = []
    with tempfile.TemporaryDirectory(prefix="inlet-bench-load-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg")
        pg.start()
        try:
            url = pg.create_database("bench")
            started = time.monotonic()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(TABLE_SQL)  # type: ignore[arg-type]
                for lo in range(1, n + 1, 250_000):
                    conn.execute(FILL_SQL, (lo, min(n, lo + 249_999)))  # type: ignore[arg-type]
                conn.execute("VACUUM ANALYZE items")
                [(size,)] = conn.execute("SELECT pg_relation_size('items')").fetchall()
            print(
                f"setup: {n:,} rows x 20 columns ({size / 2**20:,.0f} MiB of heap) in "
                f"{time.monotonic() - started:.1f} s",
                flush=True,
            )
            lakes = {p: Path(tmp) / f"lake-{p}" for p in ("new", "old", "spark")}
            for d in lakes.values():
                d.mkdir()
            server = serve(
                CoordinatorConfig(
                    listen="127.0.0.1:0",
                    database_url=url,
                    lake_roots=tuple(str(d) for d in lakes.values()),
                    insecure=True,
                    grace_s=1.0,
                )
            )
            try:
                for path in [p.strip() for p in args.paths.split(",") if p.strip()]:
                    pg_cpu0 = _cpu_of(pg.pid or 0)
                    argv = [sys.executable, __file__, "--child", "--path", path, "--url", url]
                    argv += ["--coordinator", server.address, "--lake", str(lakes[path])]
                    argv += ["--workers", str(args.workers), "--pages-per-range", str(args.pages_per_range)]
                    argv += ["--spark-master", args.spark_master]
                    argv += [f"--spark-conf={kv}" for kv in args.spark_conf]
                    if args.progress:
                        argv.append("--progress")
                    load0 = os.getloadavg()[0]
                    began = time.monotonic()
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
                    sampler = TreeSampler({"loader": proc.pid, "postgres": pg.pid or 0})
                    sampler.start()
                    loads = []
                    while proc.poll() is None:
                        loads.append(os.getloadavg()[0])
                        time.sleep(1.0)
                    out, _ = proc.communicate()
                    wall = time.monotonic() - began
                    roles = sampler.stop()
                    if proc.returncode != 0:
                        raise SystemExit(f"the {path} load failed (exit {proc.returncode})")
                    pg_cpu = _cpu_of(pg.pid or 0) - pg_cpu0
                    r = json.loads(out.strip().splitlines()[-1])
                    r["load_avg"] = (load0, max(loads or [load0]), os.getloadavg()[0])
                    r["roles"] = roles
                    r["wall"] = wall
                    lake_rows, distinct = _lake_rows(r["table"])
                    if lake_rows != n or distinct != n:
                        raise SystemExit(
                            f"the {path} load left {lake_rows:,} rows ({distinct:,} ids) in the lake, not {n:,}"
                        )
                    results.append((path, r, pg_cpu))
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute("SELECT pg_drop_replication_slot(%s)", (f"bench_{path}",))
            finally:
                server.stop(0)
        finally:
            pg.stop()
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    print(f"commit {commit}; lake checked: every path's table holds all {n:,} ids once (snapshot read)")
    print(
        f"{'path':<5} {'rows':>11} {'wall s':>7} {'rows/s':>8} {'load s':>7} {'rows/s':>8} {'loader cpu s':>12} "
        f"{'pg cpu s':>8} {'rows/cpu-s':>10} {'peak RSS MiB: loader / JVM / Spark Python / PG':>47} "
        f"{'load avg (start/max/end)':>24}"
    )
    for path, r, pg_cpu in results:
        roles = r["roles"]
        own = sum(v["cpu"] for k, v in roles.items() if k != "postgres")
        peaks = " / ".join(
            "-" if k not in roles else f"{roles[k]['peak_mib']:,.0f}"
            for k in ("loader", "jvm", "spark python", "postgres")
        )
        avg = "/".join(f"{x:.1f}" for x in r["load_avg"])
        print(
            f"{path:<5} {r['rows']:>11,} {r['wall']:>7.1f} {r['rows'] / r['wall']:>8,.0f} {r['seconds']:>7.1f} "
            f"{r['rows'] / r['seconds']:>8,.0f} {own:>12.1f} {pg_cpu:>8.1f} {r['rows'] / (own + pg_cpu):>10,.0f} "
            f"{peaks:>47} {avg:>24}"
        )
    print(
        "wall s: the loading process from start to exit (Python, JVM start and stop included); load s: "
        "from its imports done to the load returned; loader cpu s: the loading process, its JVM and the "
        "JVM's Python workers (sampled below); pg cpu s: the postmaster and every backend, reaped ones too"
    )
    print("per process (sampled from /proc every 0.5 s: CPU seconds of the processes seen, largest peak RSS)")
    print(f"{'path':<5} {'role':<13} {'processes':>9} {'cpu s':>7} {'peak RSS MiB':>12}")
    for path, r, _ in results:
        for role, v in sorted(r["roles"].items()):
            print(f"{path:<5} {role:<13} {v['processes']:>9.0f} {v['cpu']:>7.1f} {v['peak_mib']:>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
