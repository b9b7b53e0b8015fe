"""End-to-end replication benchmark: PostgreSQL -> Debezium -> Kafka -> CDC consumer -> writer -> Hudi.

    .venv/bin/python benchmarks/replication.py [--engines local,spark] [--rates 500,2000,5000]
        [--seconds 30] [--snapshot-rows 1000000] [--initial-loads copy,debezium] [--dir DIR] [--json FILE]

A script that prints a table (not a test). For each engine it brings up the whole local stack
(``inlet stack up``: embedded PostgreSQL, Apache Kafka, the coordinator, Debezium, the CDC consumer and
the writer, every process on 127.0.0.1) in a fresh directory and measures:

1. **Initial snapshot.** Before the stack first starts, PostgreSQL alone is started in the stack's own
   data directory (on the port the stack will use, kept in ``ports.json``) and a 20-column table of
   ``--snapshot-rows`` rows is created and filled; it is stopped, then ``inlet stack up`` starts
   everything, so Debezium's initial snapshot reads the table. Measured from ``stack up`` to every row
   visible in a snapshot read of the Hudi table (``HudiTable.open(path).read``), with the time each stage
   had all rows: Debezium's topic, the CDC consumer's ``inlet.changes.*`` topic, the writer. Each of
   ``--initial-loads`` runs in its own stack: ``copy`` (``stack up --initial-load copy``, the default:
   the rows are COPYed at the replication slot's snapshot during ``up``, whose time includes it) and
   ``debezium`` (Debezium's snapshot: every row an event through Kafka, the CDC consumer and the writer).

2. **Sustained changes.** At each offered rate a load generator (one psycopg connection) runs inserts,
   updates and deletes (30/50/20) on a 20-column table in small transactions (rate/100 changes each,
   100 transactions/s), paced to the rate. Every transaction writes its number into ``seq`` of the rows
   it inserts or updates and records its commit wall time and PostgreSQL transaction id. Meanwhile:

   - a probe reads the Hudi table (``read(columns=["_hoodie_commit_time", "seq"])``) in a loop; the
     newest ``seq`` visible is the newest transaction visible (the writer commits Kafka-ordered prefixes),
     and the ``_hoodie_commit_time`` of a ``seq``'s rows names the lake commit that made it visible, whose
     completion time (from the timeline) is the exact moment it became visible;
   - a Kafka listener records when each transaction's END marker appeared on Debezium's
     ``<db>.transaction`` topic and on the CDC consumer's ``inlet.changes.<table>`` topic (markers only:
     the data records are skipped unparsed), which splits the latency per stage;
   - the writer's and CDC consumer's ``/metrics`` are scraped before and after (freshness histogram,
     batch latency, batch size, commits, compactions, lag).

   Freshness = lake commit completion (or probe read) minus PostgreSQL commit, per transaction.
   "kept up" = the lake had every change within ``max(5 s, 2 x p50)`` after the load stopped.

Also printed: the CPU cores each component's process tree used in each phase (from the pids in
``stack.json``; "benchmark" is this process: load generator, probe and listener together).

The broker is Apache Kafka as ``inlet stack up`` runs it (KRaft, data under the stack's directory).

Targets (issue 11): p99 freshness < 5 s at 2,000 changes/s; 1M-row initial load < 2 minutes.
Progress goes to stderr; the table (markdown) to stdout. The stack is stopped on exit, Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _procs
import psycopg
import pyarrow.compute as pc
from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from inlet.core import HudiTable
from inlet.core.timeline.instant import parse_instant_time
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.stack.postgres import EmbeddedPostgres
from inlet.services.stack.supervisor import PID_FILE, PORTS_FILE, Ports

DATABASE = "app"
SNAP_TABLE = "snap"
BENCH_TABLE = "bench"
TARGET_P99_S = 5.0
TARGET_P99_RATE = 2000
TARGET_SNAPSHOT_S = 120.0
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# ---------------------------------------------------------------------- the 20-column tables

COLUMNS_DDL = """
    id bigint PRIMARY KEY,
    seq bigint NOT NULL,
    account_id bigint,
    name text,
    email text,
    city text,
    country text,
    balance numeric(12,2),
    score double precision,
    active boolean,
    born date,
    created_at timestamp,
    updated_at timestamptz,
    uid uuid,
    qty smallint,
    ratio real,
    note text,
    code varchar(16),
    status integer,
    version bigint
"""

# the values of every column but id/seq, from the bigint `i` (server side, so the client stays light)
ROW_EXPR = """
    i * 7, 'name-' || i, 'user' || i || '@example.com',
    (ARRAY['sf','nyc','la','sea','chi','bos','aus','den'])[1 + i % 8],
    (ARRAY['us','ca','mx','de'])[1 + i % 4],
    (i % 100000) / 100.0, (i % 1000) * 0.37, i % 3 = 0,
    DATE '1970-01-01' + (i % 20000)::int,
    TIMESTAMP '2024-01-01' + make_interval(secs => i % 10000000),
    now(), md5(i::text)::uuid, (i % 30000)::smallint, (i % 997) / 7.0,
    repeat('x', (20 + i % 40)::int), 'C' || (i % 100000), (i % 5)::int, 1::bigint
"""
ROW_EXPR_PARAM = ROW_EXPR.replace("%", "%%")  # in a statement with parameters


def create_table(conn: psycopg.Connection[Any], name: str) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({COLUMNS_DDL})")


def fill(conn: psycopg.Connection[Any], name: str, first: int, last: int, seq: int = 0) -> None:
    conn.execute(
        f"INSERT INTO {name} SELECT i, {seq}, {ROW_EXPR} FROM generate_series({first}::bigint, {last}) AS i"
    )


# ---------------------------------------------------------------------- the stack


def inlet_cli(*args: str, timeout: float = 600) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "inlet.services.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"inlet {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout


class StackRun:
    """One stack directory: prepare PostgreSQL alone, then ``stack up``; ``down`` always, idempotently."""

    def __init__(
        self,
        directory: Path,
        engine: str,
        batch_interval_ms: int | None,
        initial_load: str = "copy",
        debezium_schemas: bool | None = None,
    ) -> None:
        self.dir = directory
        self.debezium_schemas = debezium_schemas  # None: the stack's default
        self.engine = engine
        self.initial_load = initial_load
        self.batch_interval_ms = batch_interval_ms
        self.addresses: dict[str, Any] = {}
        self.started = False
        self.pg: EmbeddedPostgres | None = None
        self.supervisor: subprocess.Popen[bytes] | None = None  # when this process started it

    def prepare_source(self, rows: int) -> float:
        """Start PostgreSQL alone where the stack will run it, create + fill the snapshot table, stop it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        port = Ports.load(self.dir / PORTS_FILE).get("postgres")
        self.pg = EmbeddedPostgres(self.dir / "postgres", port=port)
        started = time.monotonic()
        try:
            self.pg.start()
            with psycopg.connect(self.pg.url(), autocommit=True) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (DATABASE,)).fetchone():
                    conn.execute(f"CREATE DATABASE {DATABASE}")
            if rows > 0:
                with psycopg.connect(self.pg.url(DATABASE)) as conn:
                    create_table(conn, SNAP_TABLE)
                    step = 200_000
                    for first in range(1, rows + 1, step):
                        fill(conn, SNAP_TABLE, first, min(rows, first + step - 1))
                        conn.commit()
                    conn.execute(f"ANALYZE {SNAP_TABLE}")
                    conn.commit()
        finally:
            self.pg.stop()
            self.pg = None
        return time.monotonic() - started

    def up(self) -> dict[str, Any]:
        self.started = True
        args = ["stack", "up", "--dir", str(self.dir), "--engine", self.engine, "--database", DATABASE]
        args += ["--initial-load", self.initial_load]
        if self.batch_interval_ms is not None:
            args += ["--batch-interval-ms", str(self.batch_interval_ms)]
        if self.debezium_schemas is not None:
            args += ["--debezium-schemas" if self.debezium_schemas else "--no-debezium-schemas"]
        out = inlet_cli(*args, timeout=900)
        self.addresses = json.loads(out.strip().splitlines()[-1])
        return self.addresses

    def down(self) -> None:
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.stop()
            self.pg = None
        if not self.started:
            return
        self.started = False
        if self.supervisor is not None:  # our child: stop and reap it here (`stack down` would see a zombie)
            proc, self.supervisor = self.supervisor, None
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=180)
                except subprocess.TimeoutExpired:
                    say("the stack supervisor did not stop in 180 s; killing it")
                    proc.kill()
                    proc.wait()
            (self.dir / PID_FILE).unlink(missing_ok=True)
            return
        try:
            inlet_cli("stack", "down", "--dir", str(self.dir), timeout=300)
        except Exception as e:  # last resort: the supervisor's process group
            say(f"stack down failed: {e}; killing the supervisor")
            with contextlib.suppress(Exception):
                pid = int((self.dir / "supervisor.pid").read_text())
                os.kill(pid, signal.SIGTERM)

    @property
    def pg_url(self) -> str:
        return str(self.addresses["postgres"]["url"])

    @property
    def bootstrap(self) -> str:
        return str(self.addresses["kafka"]["bootstrap"])

    @property
    def lake(self) -> Path:
        return Path(self.addresses["lake"])

    def metrics_url(self, component: str) -> str:
        return str(self.addresses[component]["metrics"])


# ---------------------------------------------------------------------- metrics


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a /metrics page as {(name, sorted labels): value}; empty when unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def msum(samples: Samples, name: str, table: str | None = None, **labels: str) -> float:
    total = 0.0
    for (n, lab), v in samples.items():
        d = dict(lab)
        if n != name or (table is not None and d.get("table") != table):
            continue
        if all(d.get(k) == val for k, val in labels.items()):
            total += v
    return total


def histogram(before: Samples, after: Samples, name: str, table: str) -> dict[str, Any]:
    """Delta of a Prometheus histogram between two scrapes: count, mean and interpolated p50/p99."""
    buckets: dict[float, float] = {}
    for (n, lab), v in after.items():
        d = dict(lab)
        if n == f"{name}_bucket" and d.get("table") == table:
            le = float(d["le"])
            buckets[le] = v - before.get((n, lab), 0.0)
    count = msum(after, f"{name}_count", table) - msum(before, f"{name}_count", table)
    total = msum(after, f"{name}_sum", table) - msum(before, f"{name}_sum", table)
    out: dict[str, Any] = {"count": count, "mean": total / count if count else None}
    edges = sorted(buckets)
    for q in (0.5, 0.99):
        out[f"p{int(q * 100)}"] = None
        if not count:
            continue
        rank = q * count
        prev_le, prev_c = 0.0, 0.0
        for le in edges:
            c = buckets[le]
            if c >= rank:
                if math.isinf(le):
                    out[f"p{int(q * 100)}"] = f">{prev_le:g}"
                else:
                    frac = (rank - prev_c) / (c - prev_c) if c > prev_c else 1.0
                    out[f"p{int(q * 100)}"] = prev_le + (le - prev_le) * frac
                break
            prev_le, prev_c = le, c
    return out


def component_cpu(stack_dir: Path) -> dict[str, float]:
    """CPU seconds used so far by each stack component's process tree (from stack.json's pids)."""
    try:
        state = json.loads((stack_dir / "stack.json").read_text())
    except (OSError, ValueError):
        return {}
    procs = _procs.proc_table()
    out: dict[str, float] = {}
    for c in state.get("components", []):
        pid = c.get("pid")
        if pid and pid in procs:
            out[c["name"]] = _procs.tree_cpu([pid], procs)
    with contextlib.suppress(OSError, ValueError):  # the supervisor itself (its children are counted above)
        out["supervisor"] = procs[int((stack_dir / PID_FILE).read_text())][1]
    t = os.times()
    out["benchmark"] = t.user + t.system  # this process: load generator, lake probe, marker listener
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores used by each component between two samples (CPU seconds / wall seconds)."""
    return {k: round((after[k] - before.get(k, 0.0)) / seconds, 2) for k in after if seconds > 0}


# ---------------------------------------------------------------------- Kafka helpers


def kafka_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"inlet-bench-{os.getpid()}-{random.randrange(1 << 30)}",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 50,
            "enable.partition.eof": False,
        }
    )


def high_watermark(consumer: Consumer, topic: str) -> int | None:
    try:
        md = consumer.list_topics(topic, timeout=2)
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2)[1] for p in t.partitions
        )
    except KafkaException:
        return None


class MarkerListener(threading.Thread):
    """Records when each source transaction's END marker appears on Debezium's and the CDC topics."""

    def __init__(self, bootstrap: str, dbz_topic: str, cdc_topic: str) -> None:
        super().__init__(daemon=True, name="markers")
        self.consumer = kafka_consumer(bootstrap)
        self.dbz_topic, self.cdc_topic = dbz_topic, cdc_topic
        self.dbz_end: dict[int, float] = {}
        self.cdc_end: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            tps = []
            for topic in (self.dbz_topic, self.cdc_topic):
                md = self.consumer.list_topics(topic, timeout=10).topics[topic]
                for p in md.partitions:
                    tps.append(TopicPartition(topic, p, OFFSET_END))
            self.consumer.assign(tps)
            self.ready.set()
            while not self.stop_event.is_set():
                for msg in self.consumer.consume(500, timeout=0.2):
                    now = time.time()
                    if msg.error() is not None:
                        continue
                    value = msg.value()
                    if not value:
                        continue
                    if msg.topic() == self.dbz_topic:
                        if b'"END"' not in value:
                            continue
                        doc = json.loads(value)
                        doc = doc.get("payload", doc)
                        if doc.get("status") == "END":
                            txid = int(str(doc["id"]).split(":")[0])
                            self.dbz_end.setdefault(txid, now)
                    elif value[0] == 0x12:  # ChangeRecord.transaction (field 2, length-delimited)
                        rec = pb.ChangeRecord.FromString(value)
                        if rec.transaction.status == pb.TransactionEvent.STATUS_END:
                            self.cdc_end.setdefault(int(rec.transaction.id.split(":")[0]), now)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self.ready.set()
        finally:
            with contextlib.suppress(Exception):
                self.consumer.close()


# ---------------------------------------------------------------------- the lake probe


class LakeProbe(threading.Thread):
    """Reads the Hudi table in a loop; records when each ``seq`` became visible and by which commit."""

    def __init__(self, path: Path, interval_s: float) -> None:
        super().__init__(daemon=True, name="probe")
        self.path = str(path)
        self.interval_s = interval_s
        self.max_seq = -1
        self.seen_at: dict[int, float] = {}  # seq -> wall time of the read that first showed it
        self.commit_of: dict[int, str] = {}  # seq -> instant time of the commit that wrote it
        self.completion: dict[str, float] = {}  # instant time -> completion wall time
        self.reads: list[float] = []  # read durations
        self.rows = 0
        self.stop_event = threading.Event()
        self.error: str | None = None

    def read_once(self) -> None:
        started = time.time()
        t = HudiTable.open(self.path)
        for inst in t.instants():
            if inst.completion_time and inst.time not in self.completion:
                self.completion[inst.time] = parse_instant_time(inst.completion_time).timestamp()
        if t.schema() is None:
            return
        tbl = t.read(columns=["_hoodie_commit_time", "seq"], meta_columns=True)
        self.reads.append(time.time() - started)
        self.rows = tbl.num_rows
        newer = tbl.filter(pc.greater(tbl["seq"], self.max_seq))
        if newer.num_rows == 0:
            return
        seqs = newer["seq"].to_pylist()
        commits = newer["_hoodie_commit_time"].to_pylist()
        for s, c in zip(seqs, commits, strict=True):
            if s not in self.seen_at:
                self.seen_at[s] = started
                self.commit_of[s] = c
        self.max_seq = max(self.max_seq, max(seqs))

    def run(self) -> None:
        while not self.stop_event.is_set():
            began = time.monotonic()
            try:
                self.read_once()
                self.error = None
            except Exception as e:  # a table not created yet, a file compacted away mid-read ...
                self.error = f"{type(e).__name__}: {e}"
            self.stop_event.wait(max(0.0, self.interval_s - (time.monotonic() - began)))


# ---------------------------------------------------------------------- initial snapshot


def debezium_snapshot_times(log: Path) -> tuple[float | None, float | None]:
    """When Debezium started snapshotting data and when it finished (its log; local time = UTC here)."""
    start = done = None
    try:
        for line in log.read_text(errors="replace").splitlines():
            if "Snapshot step 7" in line or "Snapshot completed" in line:
                stamp = line[1:24]  # [2026-11-24 12:07:25,222]
                t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000
                t -= time.timezone if time.daylight == 0 else time.altzone
                if "step 7" in line:
                    start = t
                else:
                    done = t
    except OSError:
        pass
    return start, done


def copy_load(directory: Path, table_id: str) -> dict[str, Any] | None:
    """The table's entry in the stack's ``initial_load.json`` (None: not loaded by COPY)."""
    try:
        summary = json.loads((directory / "initial_load.json").read_text())
    except OSError:
        return None
    return next((r for r in summary["loaded"] if r["table_id"] == table_id), None)


def measure_snapshot(stack: StackRun, rows: int, timeout_s: float) -> dict[str, Any]:
    table_id = f"{DATABASE}.public.{SNAP_TABLE}"
    say(f"snapshot: filling {rows:,} rows into PostgreSQL (stack not running yet)")
    fill_s = stack.prepare_source(rows)
    say(f"snapshot: filled in {fill_s:.1f}s; load {loadavg()}; starting the stack")
    t_start = time.time()
    stack.up()
    t_up = time.time()
    say(f"snapshot: stack healthy after {t_up - t_start:.1f}s")
    cpu0 = component_cpu(stack.dir)
    copied = copy_load(stack.dir, table_id)
    if copied:
        say(f"snapshot: {copied['rows']:,} rows loaded by COPY during `stack up` in {copied['seconds']:.1f}s")
    consumer = kafka_consumer(stack.bootstrap)
    path = stack.lake / DATABASE / "public" / SNAP_TABLE
    reached: dict[str, float] = {}
    last_dbz = last_cdc = 0
    first_commit: float | None = None
    visible_at: float | None = None
    confirmed_at: float | None = None
    last_report = 0.0
    loads = []
    writer_url = stack.metrics_url("writer")
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline:
            now = time.time()
            dbz = high_watermark(consumer, table_id) or 0
            cdc = high_watermark(consumer, f"inlet.changes.{table_id}") or 0
            written = msum(scrape(writer_url), "inlet_writer_records_written_total", table_id)
            # a stage is done when its topic stops growing
            if dbz > last_dbz:
                last_dbz, reached["debezium"] = dbz, now
            if cdc > last_cdc:
                last_cdc, reached["cdc"] = cdc, now
            if written > 0 and first_commit is None:
                first_commit = now
            if written >= rows or copied:
                reached.setdefault("writer", now)
                t = HudiTable.open(str(path))
                n = t.read(columns=["id"], meta_columns=False).num_rows
                if n >= rows:
                    confirmed_at = time.time()
                    done = [i for i in t.instants() if i.completion_time]
                    visible_at = max(parse_instant_time(i.completion_time).timestamp() for i in done)  # type: ignore[arg-type]
                    break
            if now - last_report >= 5:
                last_report = now
                loads.append(os.getloadavg()[0])
                say(
                    f"snapshot: t+{now - t_start:5.1f}s debezium topic {dbz:,} cdc topic {cdc:,} "
                    f"written {int(written):,} / {rows:,} (load {loadavg()})"
                )
            time.sleep(0.5)
    finally:
        consumer.close()
    cores = cpu_delta(cpu0, component_cpu(stack.dir), time.time() - t_up)
    say(f"snapshot: cores used per component after the stack was up: {cores}")
    after = scrape(writer_url)
    batch = histogram({}, after, "inlet_writer_batch_seconds", table_id)
    commits = msum(after, "inlet_writer_commits_total", table_id)
    comp = histogram({}, after, "inlet_writer_compaction_seconds", table_id)
    total = (visible_at - t_start) if visible_at else None
    dbz_log = debezium_snapshot_times(stack.dir / "debezium" / "connect.log")
    res = {
        "debezium_snapshot_start_s": dbz_log[0] - t_start if dbz_log[0] else None,
        "debezium_snapshot_done_s": dbz_log[1] - t_start if dbz_log[1] else None,
        "rows": rows,
        "fill_s": fill_s,
        "stack_up_s": t_up - t_start,
        "initial_load": stack.initial_load,
        "copy_load_s": copied["seconds"] if copied else None,
        "debezium_all_s": reached["debezium"] - t_start if "debezium" in reached else None,
        "cdc_all_s": reached["cdc"] - t_start if "cdc" in reached else None,
        "first_lake_commit_s": first_commit - t_start if first_commit else None,
        "writer_all_s": reached["writer"] - t_start if "writer" in reached else None,
        "visible_s": total,
        "confirmed_read_s": confirmed_at - t_start if confirmed_at else None,
        "rows_per_s": rows / total if total else None,
        "commits": commits,
        "batch_mean_s": batch["mean"],
        "batch_p99_s": batch["p99"],
        "compactions": comp["count"],
        "compaction_s": (comp["mean"] or 0) * comp["count"],
        "load_avg_1m": statistics.mean(loads) if loads else os.getloadavg()[0],
        "cores_by_component": cores,
        "met_target": total is not None and total < TARGET_SNAPSHOT_S,
    }
    say(
        "snapshot: "
        + (f"all {rows:,} rows visible after {total:.1f}s" if total else f"NOT complete in {timeout_s:.0f}s")
    )
    return res


# ---------------------------------------------------------------------- sustained load


@dataclass
class LoadGen:
    url: str
    next_id: int
    live: list[int]
    seq: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    commit_at: dict[int, float] = field(default_factory=dict)  # seq -> wall time after COMMIT returned
    txid_of: dict[int, int] = field(default_factory=dict)  # seq -> PostgreSQL transaction id
    changes_of: dict[int, int] = field(default_factory=dict)

    def _pick(self, n: int) -> list[int]:
        """Remove and return n random live ids (swap-pop)."""
        out = []
        for _ in range(min(n, len(self.live))):
            i = self.rng.randrange(len(self.live))
            self.live[i], self.live[-1] = self.live[-1], self.live[i]
            out.append(self.live.pop())
        return out

    def run(self, rate: int, seconds: float, stop: threading.Event) -> tuple[int, float, int, int]:
        """Offer ``rate`` changes/s for ``seconds``; returns (changes, elapsed, first seq, last seq)."""
        size = max(1, min(50, round(rate / 100)))
        tx_rate = rate / size
        n_ins = max(1, round(size * 0.3))
        n_del = round(size * 0.2)
        n_upd = max(0, size - n_ins - n_del)
        changes = 0
        first_seq = self.seq + 1
        with psycopg.connect(self.url) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.commit()
            start = time.monotonic()
            i = 0
            while not stop.is_set():
                due = start + i / tx_rate
                now = time.monotonic()
                if now - start >= seconds:
                    break
                if due > now:
                    time.sleep(due - now)
                self.seq += 1
                s = self.seq
                ins = list(range(self.next_id, self.next_id + n_ins))
                self.next_id += n_ins
                upd = self._pick(n_upd)
                dels = self._pick(n_del)
                with conn.pipeline():  # one round trip per transaction
                    cur = conn.execute(
                        f"INSERT INTO {BENCH_TABLE} SELECT i, %s, {ROW_EXPR_PARAM} "
                        "FROM unnest(%s::bigint[]) AS i RETURNING pg_current_xact_id()::text::bigint",
                        (s, ins),
                    )
                    if upd:
                        conn.execute(
                            f"UPDATE {BENCH_TABLE} SET seq = %s, score = random(), updated_at = now(), "
                            "qty = (qty + 1) %% 30000, version = version + 1, note = md5(random()::text) "
                            "WHERE id = ANY(%s)",
                            (s, upd),
                        )
                    if dels:
                        conn.execute(f"DELETE FROM {BENCH_TABLE} WHERE id = ANY(%s)", (dels,))
                    conn.commit()
                txid = cur.fetchone()[0]  # type: ignore[index]
                self.commit_at[s] = time.time()
                self.txid_of[s] = int(txid)
                n = len(ins) + len(upd) + len(dels)
                self.changes_of[s] = n
                changes += n
                self.live.extend(ins)
                self.live.extend(upd)
                i += 1
            elapsed = time.monotonic() - start
        return changes, elapsed, first_seq, self.seq


def stage_stats(values: list[float]) -> dict[str, float | None]:
    return {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "max": max(values) if values else None}


def measure_rate(
    stack: StackRun,
    gen: LoadGen,
    probe: LakeProbe,
    markers: MarkerListener | None,
    rate: int,
    seconds: float,
    drain_timeout_s: float,
    stop: threading.Event,
) -> dict[str, Any]:
    table_id = f"{DATABASE}.public.{BENCH_TABLE}"
    w_url, c_url = stack.metrics_url("writer"), stack.metrics_url("cdc_consumer")
    w0, c0 = scrape(w_url), scrape(c_url)
    say(f"rate {rate:,}/s: offering for {seconds:.0f}s (load {loadavg()})")
    loads = [os.getloadavg()[0]]
    sampler_stop = threading.Event()

    def sample() -> None:
        while not sampler_stop.wait(5):
            loads.append(os.getloadavg()[0])
            say(
                f"rate {rate:,}/s: seq {gen.seq} committed, lake shows seq {probe.max_seq} "
                f"({probe.rows:,} rows; load {loadavg()})"
            )

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu0 = component_cpu(stack.dir)
    wall_start = time.time()
    gen_cpu0 = time.thread_time()  # the load generator runs in this thread; the probe and listener in others
    try:
        changes, elapsed, first, last = gen.run(rate, seconds, stop)
    finally:
        sampler_stop.set()
        gen_cpu = time.thread_time() - gen_cpu0
    t_end = time.time()
    backlog_txs = last - max(probe.max_seq, first - 1)
    backlog_changes = sum(
        gen.changes_of.get(s, 0) for s in range(max(probe.max_seq, first - 1) + 1, last + 1)
    )
    say(
        f"rate {rate:,}/s: offered {changes:,} changes in {elapsed:.1f}s ({changes / elapsed:,.0f}/s); "
        f"backlog {backlog_changes:,} changes; draining"
    )
    deadline = time.time() + drain_timeout_s
    while probe.max_seq < last and time.time() < deadline and not stop.is_set():
        time.sleep(0.2)
    drained_at = time.time() if probe.max_seq >= last else None
    cpu1 = component_cpu(stack.dir)
    cores = cpu_delta(cpu0, cpu1, time.time() - wall_start)
    say(f"rate {rate:,}/s: cores used per component (load + drain): {cores}")
    cpu_s = {k: cpu1[k] - cpu0.get(k, 0.0) for k in cpu1}
    cpu_s["load_generator"] = gen_cpu
    cpu_s["benchmark"] = cpu_s.get("benchmark", 0.0) - gen_cpu  # the lake probe and the marker listener
    w1, c1 = scrape(w_url), scrape(c_url)
    loads.append(os.getloadavg()[0])

    # per transaction: when it became visible (probe) and by which commit (exact)
    fresh_probe: list[float] = []
    fresh_commit: list[float] = []
    dbz_lat: list[float] = []
    cdc_lat: list[float] = []
    writer_lat: list[float] = []
    probe_lag: list[float] = []
    seen = sorted(s for s in probe.seen_at if first <= s <= last)
    j = 0
    last_visible = None
    for s in range(first, last + 1):
        while j < len(seen) and seen[j] < s:
            j += 1
        if j >= len(seen):
            break  # never visible (drain timed out)
        carrier = seen[j]  # s itself, or the first later transaction seen (visible no later than it)
        t_pg = gen.commit_at[s]
        t_seen = probe.seen_at[carrier]
        commit = probe.commit_of.get(carrier)
        t_commit = probe.completion.get(commit) if commit else None
        if carrier != s and probe.seen_at.get(carrier) is not None:
            # an earlier carrier seen at the same read gives a tighter bound; keep the first later one
            pass
        fresh_probe.append(t_seen - t_pg)
        if t_commit is not None:
            fresh_commit.append(t_commit - t_pg)
            probe_lag.append(t_seen - t_commit)
            last_visible = max(last_visible or 0.0, t_commit)
        if markers is not None:
            txid = gen.txid_of[s]
            t_dbz = markers.dbz_end.get(txid)
            t_cdc = markers.cdc_end.get(txid)
            if t_dbz is not None:
                dbz_lat.append(t_dbz - t_pg)
            if t_dbz is not None and t_cdc is not None:
                cdc_lat.append(t_cdc - t_dbz)
            if t_cdc is not None and t_commit is not None:
                writer_lat.append(t_commit - t_cdc)
    first_pg = gen.commit_at.get(first, wall_start)
    lake_rate = changes / (last_visible - first_pg) if last_visible and last_visible > first_pg else None
    drain_s = (drained_at - t_end) if drained_at else None
    # kept up: the backlog at the end drained within 10 s and freshness did not grow during the run
    tenth = max(1, len(fresh_commit) // 10)
    early = pct(fresh_commit[:tenth], 0.5)
    late = pct(fresh_commit[-tenth:], 0.5)
    kept_up = (
        drain_s is not None
        and drain_s <= 10.0
        and early is not None
        and late is not None
        and late <= early + 5.0
    )
    wf = histogram(w0, w1, "inlet_writer_freshness_seconds", table_id)
    wb = histogram(w0, w1, "inlet_writer_batch_seconds", table_id)
    commits = msum(w1, "inlet_writer_commits_total", table_id) - msum(
        w0, "inlet_writer_commits_total", table_id
    )
    recs = msum(w1, "inlet_writer_records_written_total", table_id) - msum(
        w0, "inlet_writer_records_written_total", table_id
    )
    comp = histogram(w0, w1, "inlet_writer_compaction_seconds", table_id)
    cdc_in = msum(c1, "inlet_cdc_events_in_total") - msum(c0, "inlet_cdc_events_in_total")
    n_vis = len(fresh_probe)
    res = {
        "rate": rate,
        "seconds": elapsed,
        "transactions": last - first + 1,
        "changes": changes,
        "achieved_per_s": changes / elapsed,
        "lake_per_s": lake_rate,
        "visible_transactions": n_vis,
        "freshness_commit": stage_stats(fresh_commit),
        "freshness_probe": stage_stats(fresh_probe),
        "stage_pg_to_debezium": stage_stats(dbz_lat),
        "stage_debezium_to_cdc": stage_stats(cdc_lat),
        "stage_cdc_to_lake_commit": stage_stats(writer_lat),
        "stage_lake_commit_to_probe": stage_stats(probe_lag),
        "probe_read_s": statistics.mean(probe.reads[-50:]) if probe.reads else None,
        "backlog_at_end_changes": backlog_changes,
        "backlog_at_end_transactions": backlog_txs,
        "drain_s": drain_s,
        "freshness_first_tenth_p50": early,
        "freshness_last_tenth_p50": late,
        "kept_up": kept_up,
        "writer_freshness_hist": wf,
        "writer_batch_hist": wb,
        "writer_commits": commits,
        "writer_records": recs,
        "writer_records_per_commit": recs / commits if commits else None,
        "compactions": comp["count"],
        "compaction_s": (comp["mean"] or 0) * comp["count"],
        "cdc_events_in": cdc_in,
        "table_rows": probe.rows,
        "cores_by_component": cores,
        "cpu_s_by_process": cpu_s,  # load start to drained (or drain timeout)
        "load_avg_1m": statistics.mean(loads),
    }
    fc = res["freshness_commit"]
    say(
        f"rate {rate:,}/s: achieved {res['achieved_per_s']:,.0f}/s, freshness p50 {_f(fc['p50'])} "
        f"p99 {_f(fc['p99'])} max {_f(fc['max'])}; drain {_f(drain_s)}; "
        f"{int(commits)} commits, {int(comp['count'])} compactions"
    )
    return res


def measure_steady(
    stack: StackRun, rates: list[int], seconds: float, args: argparse.Namespace, stop: threading.Event
) -> list[dict[str, Any]]:
    seed_rows = args.seed_rows
    say(f"steady: creating {BENCH_TABLE} with {seed_rows:,} rows")
    with psycopg.connect(stack.pg_url) as conn:
        create_table(conn, BENCH_TABLE)
        fill(conn, BENCH_TABLE, 1, seed_rows)
        conn.commit()
    path = stack.lake / DATABASE / "public" / BENCH_TABLE
    probe = LakeProbe(path, args.probe_interval)
    probe.start()
    deadline = time.time() + 300
    while probe.rows < seed_rows and time.time() < deadline and not stop.is_set():
        time.sleep(0.5)
    if probe.rows < seed_rows:
        raise RuntimeError(f"the seed rows did not reach {path} in 300 s (probe: {probe.error})")
    say(f"steady: {probe.rows:,} seed rows visible in the lake")
    markers = None
    if not args.no_markers:
        markers = MarkerListener(
            stack.bootstrap, f"{DATABASE}.transaction", f"inlet.changes.{DATABASE}.public.{BENCH_TABLE}"
        )
        markers.start()
        markers.ready.wait(30)
        if markers.error:
            say(f"steady: marker listener failed ({markers.error}); no per-stage split")
            markers = None
    gen = LoadGen(stack.pg_url, next_id=seed_rows + 1, live=list(range(1, seed_rows + 1)))
    results: list[dict[str, Any]] = []
    if args.idle_seconds > 0 and not stop.is_set():
        # what each process spends with nothing to replicate (heartbeats, polls, the probe's reads):
        # part of every rate's CPU per change, the more so the lower the rate
        say(f"steady: {args.idle_seconds:.0f}s idle")
        cpu0, t0 = component_cpu(stack.dir), time.time()
        stop.wait(args.idle_seconds)
        idle = cpu_delta(cpu0, component_cpu(stack.dir), time.time() - t0)
        say(f"steady: idle cores per component: {idle}")
        results.append({"idle_cores": idle, "load_avg_1m": os.getloadavg()[0]})
    try:
        for rate in rates:
            if stop.is_set():
                break
            results.append(measure_rate(stack, gen, probe, markers, rate, seconds, args.drain_timeout, stop))
    finally:
        probe.stop_event.set()
        if markers is not None:
            markers.stop_event.set()
        probe.join(10)
        if markers is not None:
            markers.join(10)
    return results


# ---------------------------------------------------------------------- output


def _f(v: Any, unit: str = "s") -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v + unit
    return f"{v:.2f}{unit}"


def _n(v: Any) -> str:
    return "-" if v is None else f"{v:,.0f}"


#: the headline table's CPU columns: (heading, the process trees summed)
CPU_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("PostgreSQL", ("postgres",)),
    ("Debezium", ("debezium",)),
    ("broker (Apache Kafka)", ("kafka",)),
    ("CDC consumer", ("cdc_consumer",)),
    ("writer", ("writer",)),
    ("coordinator", ("coordinator",)),
    ("table services", ("table_services",)),
    ("catalog sync + metastore", ("catalog_sync", "metastore")),
    ("supervisor", ("supervisor",)),
)
STACK_PROCESSES = tuple(n for _, names in CPU_COLUMNS for n in names)


def cpu_per_1k(s: dict[str, Any]) -> dict[str, float | None]:
    """CPU seconds per 1,000 changes of each headline column (None: no such process in the run)."""
    cpu = s.get("cpu_s_by_process") or {}
    changes = s["changes"] or 1
    out: dict[str, float | None] = {}
    for heading, names in CPU_COLUMNS:
        found = [cpu[n] for n in names if n in cpu]
        out[heading] = sum(found) * 1000 / changes if found else None
    out["stack total"] = sum(cpu.get(n, 0.0) for n in STACK_PROCESSES) * 1000 / changes
    out["load generator"] = cpu["load_generator"] * 1000 / changes if "load_generator" in cpu else None
    out["probe + listener"] = cpu["benchmark"] * 1000 / changes if "benchmark" in cpu else None
    return out


def render_cpu_table(results: dict[str, Any]) -> list[str]:
    """The headline: per offered rate, what was achieved and the CPU each process spent per change."""
    headings = [h for h, _ in CPU_COLUMNS] + ["stack total", "load generator", "probe + listener"]
    lines = [
        "## Sustained changes: rate, freshness and CPU-seconds per 1,000 changes per process",
        "",
        "| engine | offered/s | committed/s | lake/s | fresh p50 | fresh p99 | kept up | "
        + " | ".join(headings)
        + " | load avg |",
        "|---|---|---|---|---|---|---|" + "---|" * len(headings) + "---|",
    ]
    for eng, r in results["engines"].items():
        for s in ([r["idle"]] if r.get("idle") else []) + r.get("steady", []):
            if "idle_cores" in s:  # CPU seconds per second (cores) with nothing to replicate
                idle = s["idle_cores"]
                cells = [sum(idle.get(n, 0.0) for n in names) for _, names in CPU_COLUMNS]
                cells.append(sum(idle.get(n, 0.0) for n in STACK_PROCESSES))
                cells += [0.0, idle.get("benchmark", 0.0)]
                lines.append(
                    f"| {eng} | idle (cores) | - | - | - | - | - | "
                    + " | ".join(f"{c:.3f}" for c in cells)
                    + f" | {s['load_avg_1m']:.1f} |"
                )
                continue
            fc, per = s["freshness_commit"], cpu_per_1k(s)
            lines.append(
                f"| {eng} | {s['rate']:,} | {_n(s['achieved_per_s'])} | {_n(s['lake_per_s'])} | "
                f"{_f(fc['p50'])} | {_f(fc['p99'])} | {'yes' if s['kept_up'] else 'NO'} | "
                + " | ".join("-" if per[h] is None else f"{per[h]:.3f}" for h in headings)
                + f" | {s['load_avg_1m']:.1f} |"
            )
    lines += [
        "",
        "CPU = user + system seconds of each process tree (PostgreSQL: every backend, the load generator's "
        "and the walsender's included) from the first offered change until the lake had the last "
        "(or the drain timed out), per 1,000 changes committed; 'load generator' is the benchmark thread "
        "that commits the changes, 'probe + listener' the rest of the benchmark process (lake reads, "
        "Kafka marker listener). Freshness = lake commit completion - PostgreSQL commit. The 'idle' row is "
        "CPU seconds per second (cores) over the idle seconds before the first rate: a process's idle "
        "cost is in every rate's CPU per change, the more so the lower the rate.",
        "",
    ]
    return lines


def render_snapshot(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    lines += [
        "",
        "## Initial snapshot",
        "",
        "| engine | initial load | rows | stack up (COPY load inside) | Debezium snapshot start/done | Debezium topic full | CDC topic full "
        "| first lake commit | writer done "
        "| all visible | rows/s | commits | batch mean/p99 | compactions (s) | < 2 min | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for eng, r in results["engines"].items():
        s = r.get("snapshot")
        if not s:
            continue
        copy_s = f" ({_f(s['copy_load_s'])})" if s.get("copy_load_s") else ""
        lines.append(
            f"| {eng} | {s['initial_load']} | {s['rows']:,} | {_f(s['stack_up_s'])}{copy_s} | "
            f"{_f(s.get('debezium_snapshot_start_s'))} / {_f(s.get('debezium_snapshot_done_s'))} | {_f(s['debezium_all_s'])} | "
            f"{_f(s['cdc_all_s'])} | {_f(s['first_lake_commit_s'])} | {_f(s['writer_all_s'])} | "
            f"{_f(s['visible_s'])} | {_n(s['rows_per_s'])} | {int(s['commits'])} | "
            f"{_f(s['batch_mean_s'])} / {_f(s['batch_p99_s'])} | {int(s['compactions'])} ({_f(s['compaction_s'])}) | "
            f"{'met' if s['met_target'] else 'MISSED'} | {s['load_avg_1m']:.1f} |"
        )
    lines += ["", "Times in the snapshot table are from `inlet stack up` (which starts every process)."]
    names = ["postgres", "debezium", "kafka", "s3", "cdc_consumer", "writer", "coordinator"]
    names += ["table_services", "metastore", "catalog_sync", "supervisor", "benchmark"]
    lines += [
        "",
        "### CPU cores used per component during the initial snapshot (process tree CPU s / wall s)",
        "",
        "| engine | phase | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for eng, r in results["engines"].items():
        phases = [(f"snapshot {r['snapshot']['rows']:,}", r["snapshot"])] if r.get("snapshot") else []
        for label, ph in phases:
            cores = ph.get("cores_by_component") or {}
            lines.append(f"| {eng} | {label} | " + " | ".join(_f(cores.get(n), "") for n in names) + " |")
    return lines


def render(results: dict[str, Any]) -> str:
    lines = [
        f"# Inlet replication benchmark ({results['started']}, {os.cpu_count()} cores)",
        "",
        *render_cpu_table(results),
        "Targets (issue 11): p99 freshness < 5 s at 2,000 changes/s; 1M-row initial load < 2 min.",
        "Freshness = lake commit completion (exact moment visible to a snapshot read) - PostgreSQL commit;",
        "'probe' = when the benchmark's own read loop first saw it. Stage split from transaction END markers.",
        "",
        "## Sustained changes",
        "",
        "| engine | offered/s | achieved/s | lake/s | fresh p50 | fresh p99 | fresh max | probe p50/p99 "
        "| writer hist p50/p99 | backlog@end | drain | fresh p50 first/last 10% | kept up | p99 target | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for eng, r in results["engines"].items():
        for s in r.get("steady", []):
            fc, fp, wf = s["freshness_commit"], s["freshness_probe"], s["writer_freshness_hist"]
            target = ""
            if s["rate"] == TARGET_P99_RATE:
                target = "met" if fc["p99"] is not None and fc["p99"] < TARGET_P99_S else "MISSED"
            lines.append(
                f"| {eng} | {s['rate']:,} | {_n(s['achieved_per_s'])} | {_n(s['lake_per_s'])} | "
                f"{_f(fc['p50'])} | {_f(fc['p99'])} | {_f(fc['max'])} | {_f(fp['p50'])} / {_f(fp['p99'])} | "
                f"{_f(wf['p50'])} / {_f(wf['p99'])} | {_n(s['backlog_at_end_changes'])} | "
                f"{_f(s['drain_s'])} | {_f(s['freshness_first_tenth_p50'])} / {_f(s['freshness_last_tenth_p50'])} | "
                f"{'yes' if s['kept_up'] else 'NO'} | {target or '-'} | "
                f"{s['load_avg_1m']:.1f} |"
            )
    lines += [
        "",
        "### Where the time goes (per transaction, p50 / p99)",
        "",
        "| engine | offered/s | PG commit -> Debezium topic | -> CDC topic | -> lake commit (writer) "
        "| -> probe read | probe read | commits | records/commit | batch p50/p99 | compactions (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for eng, r in results["engines"].items():
        for s in r.get("steady", []):
            st = [
                s["stage_pg_to_debezium"],
                s["stage_debezium_to_cdc"],
                s["stage_cdc_to_lake_commit"],
                s["stage_lake_commit_to_probe"],
            ]
            wb = s["writer_batch_hist"]
            lines.append(
                f"| {eng} | {s['rate']:,} | "
                + " | ".join(f"{_f(x['p50'])} / {_f(x['p99'])}" for x in st)
                + f" | {_f(s['probe_read_s'])} | {int(s['writer_commits'])} | "
                f"{_n(s['writer_records_per_commit'])} | {_f(wb['p50'])} / {_f(wb['p99'])} | "
                f"{int(s['compactions'])} ({_f(s['compaction_s'])}) |"
            )
    if any(r.get("snapshot") for r in results["engines"].values()):
        lines += render_snapshot(results)
    for eng, r in results["engines"].items():
        if r.get("error"):
            lines.append(f"\n{eng}: ERROR {r['error']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- main


def run_engine(
    engine: str, initial_load: str, steady: bool, args: argparse.Namespace, root: Path, stop: threading.Event
) -> dict[str, Any]:
    directory = root / f"{engine}-{initial_load}"
    if directory.exists():
        shutil.rmtree(directory)
    stack = StackRun(directory, engine, args.batch_interval_ms, initial_load, args.debezium_schemas)
    out: dict[str, Any] = {"dir": str(directory)}
    try:
        if args.snapshot_rows > 0:
            out["snapshot"] = measure_snapshot(stack, args.snapshot_rows, args.snapshot_timeout)
        else:
            stack.prepare_source(0)
            stack.up()
        if steady and args.rates and not stop.is_set():
            steady = measure_steady(stack, args.rates, args.seconds, args, stop)
            out["idle"] = next((s for s in steady if "idle_cores" in s), None)
            out["steady"] = [s for s in steady if "idle_cores" not in s]
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        say(f"{engine}: failed: {out['error']} (logs in {directory / 'logs'})")
    finally:
        say(f"{engine}: stopping the stack")
        stack.down()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engines", "--engine", default="local", help="local, spark or local,spark")
    p.add_argument("--rates", default="500,2000,5000", help="offered changes/s, comma-separated")
    p.add_argument("--seconds", type=float, default=30, help="seconds per rate")
    p.add_argument(
        "--snapshot-rows", type=int, default=1_000_000, help="rows of the snapshot table (0: skip)"
    )
    p.add_argument(
        "--initial-loads",
        default="copy,debezium",
        help="how the snapshot table reaches the lake (stack up --initial-load), each in its own stack: "
        "copy, debezium or both (the sustained load runs with the first)",
    )
    p.add_argument("--seed-rows", type=int, default=20_000, help="rows in the sustained-load table at start")
    p.add_argument("--batch-interval-ms", type=int, default=None, help="the writer's (stack default: 1000)")
    p.add_argument("--probe-interval", type=float, default=1.0, help="seconds between lake reads")
    p.add_argument(
        "--idle-seconds", type=float, default=10, help="seconds measured idle before the first rate (0: skip)"
    )
    p.add_argument(
        "--drain-timeout", type=float, default=180, help="seconds to wait for the lake to catch up"
    )
    p.add_argument("--snapshot-timeout", type=float, default=900, help="seconds to wait for the snapshot")
    p.add_argument(
        "--debezium-schemas",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stack up --debezium-schemas / --no-debezium-schemas (default: the stack's, schemas on)",
    )
    p.add_argument("--no-markers", action="store_true", help="skip the Kafka marker listener (stage split)")
    p.add_argument("--dir", type=Path, help="stack directories go under DIR/<engine> (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    p.add_argument("--json", type=Path, help="also write the results as JSON")
    args = p.parse_args(argv)
    args.rates = [int(x) for x in str(args.rates).split(",") if x.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    loads = [m.strip() for m in args.initial_loads.split(",") if m.strip()]
    if not loads or any(m not in ("copy", "debezium") for m in loads):
        p.error("--initial-loads: copy, debezium or copy,debezium")
    for e in engines:
        if e not in ("local", "spark"):
            p.error(f"unknown engine {e!r}")
    root = args.dir.resolve() if args.dir else Path(tempfile.mkdtemp(prefix="inlet-repl-bench-"))
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load_avg_at_start": loadavg(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "engines": {},
    }
    say(f"benchmark in {root}; load {loadavg()}")
    try:
        for engine in engines:
            if stop.is_set():
                break
            for i, mode in enumerate(loads if args.snapshot_rows > 0 else loads[:1]):
                if stop.is_set():
                    break
                label = engine if len(loads) == 1 else f"{engine}/{mode}"
                results["engines"][label] = run_engine(engine, mode, i == 0, args, root, stop)
    except KeyboardInterrupt:
        stop.set()
        say("interrupted")
    finally:
        results["load_avg_at_end"] = loadavg()
        if args.dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    text = render(results)
    print(text)
    print(f"\nload average at start {results['load_avg_at_start']}, at end {results['load_avg_at_end']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    failed = any(r.get("error") for r in results["engines"].values())
    return 1 if failed or stop.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
