"""The initial load by COPY (``stack up --initial-load copy``, the default) against Debezium's own path.

Tables that already hold rows when the stack first starts are read by COPY at the replication slot's
exported snapshot and written in bulk; Debezium then streams from the slot's consistent point. The
proof: each loaded table equals PostgreSQL (Inlet's reader); a no-op ``UPDATE`` of every row then
sends each row's full image through Debezium, the CDC consumer and the writer, and the table read
afterwards equals the table read before (every column typed and valued exactly as the streaming path
stores it, the table's schema unchanged); changes made after the start arrive once; a table COPY
cannot load (no primary key, a ``point`` column) goes through Debezium's snapshot instead: a table
without a primary key under REPLICA IDENTITY DEFAULT is skipped by the CDC consumer, one under FULL is
keyed by the whole row and follows updates and deletes (its identical rows kept once).

The stack runs on the Spark engine and submits to a real standalone cluster (``--spark-master
spark://...``: a master and a worker, :class:`support.spark_cluster.StandaloneCluster`): the load's
ranges, the writer's batches and the table services' compactions are jobs of three applications on
it. The last test proves the rest of the stack on that engine: compactions by the table services'
Spark jobs while changes stream, with the lake equal to PostgreSQL by Inlet's reader and by hudi-rs.
(Crashes in the middle of a Spark write or compaction are proven below the stack, where they cost
seconds: tests/spark/test_spark_write_faults.py and test_spark_compaction.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import (
    DATABASE,
    HUDI_RS_TOAST_REFUSAL,
    RunningStack,
    Workload,
    _norm,
    check_offsets,
    compare_hudi_rs,
    compare_inlet,
    diff,
    inlet_read,
    rows_by_key,
    supervised,
    wait_for,
    wait_for_lake,
)
from support.spark_cluster import StandaloneCluster

from inlet.core import HudiTable
from inlet.core.timeline.instant import Action, State
from inlet.services.stack.postgres import EmbeddedPostgres
from inlet.services.stack.supervisor import LOAD_PROGRESS_FILE, PORTS_FILE, Ports
from inlet.services.writer.load_ranges import read_progress

pytestmark = pytest.mark.slow

TYPES_SQL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE typed (
    id       int PRIMARY KEY,
    small    smallint,
    big      bigint,
    label    varchar(20),
    code     char(5),
    price    numeric(12,2),
    loose    numeric,
    ratio    real,
    score    double precision,
    active   boolean,
    born     date,
    seen     timestamp,
    seen_ms  timestamp(3),
    at       timestamptz,
    clock    time,
    span     interval,
    uid      uuid,
    doc      jsonb,
    raw      bytea,
    nums     int[],
    tags     text[],
    feel     mood
);
INSERT INTO typed
SELECT g,
       CASE WHEN g % 7 = 0 THEN NULL ELSE (g % 30000) - 15000 END,
       g::bigint * 1000003,
       'label ' || g,
       CASE WHEN g % 5 = 0 THEN NULL ELSE chr(97 + g % 26) END,
       (g * 1.37)::numeric(12,2),
       CASE WHEN g % 11 = 0 THEN NULL WHEN g % 13 = 0 THEN 1.50 + g ELSE (g / 7.0)::numeric END,
       (g / 3.0)::real,
       g / 9.0,
       g % 2 = 0,
       date '2000-01-01' + g,
       timestamp '2020-02-29 12:34:56.123456' + g * interval '1 minute 1.000001 second',
       timestamp '1999-12-31 23:59:59.999' + g * interval '1 hour',
       timestamptz '2021-06-01 00:00:00+02' + g * interval '1 day 1 microsecond',
       time '00:00:01.5' + g * interval '1 second',
       CASE WHEN g % 3 = 0 THEN interval '1 year 2 months 3 days 04:05:06.5' ELSE g * interval '1 minute' END,
       md5(g::text)::uuid,
       jsonb_build_object('g', g, 'name', 'n' || g),
       decode(lpad(to_hex(g), 8, '0'), 'hex'),
       CASE WHEN g % 4 = 0 THEN NULL ELSE ARRAY[g, g + 1, NULL] END,
       ARRAY['a' || g, 'b'],
       (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood
FROM generate_series(1, 3000) g;
CREATE TABLE no_key (n int, note text);
INSERT INTO no_key SELECT g, 'row ' || g FROM generate_series(1, 50) g;
CREATE TABLE full_key (n int, note text);
ALTER TABLE full_key REPLICA IDENTITY FULL;
INSERT INTO full_key SELECT g % 20, 'row ' || (g % 20) FROM generate_series(1, 40) g;
CREATE TABLE spots (id int PRIMARY KEY, place point);
INSERT INTO spots SELECT g, point(g, -g) FROM generate_series(1, 40) g;
"""


def typed_rows_as_stored(url: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``typed`` from PostgreSQL in the writer's documented representations (writer/rows.py): numeric
    without a typmod as a Decimal (the lake's text is compared by value: its exact form is checked
    against the streamed rows), real widened exactly, uuid and json as text, time as microseconds
    since midnight. ``span`` (interval) is left to the comparison with the streamed rows."""
    with psycopg.connect(url) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        cur = conn.execute(
            "SELECT id, small, big, label, code, price, loose, ratio::float8 AS ratio, score, "
            "active, born, seen, seen_ms, at, clock, uid::text AS uid, doc::text AS doc, raw, nums, tags, "
            "feel::text AS feel FROM typed"
        )
        names = [d.name for d in cur.description or ()]
        out = {}
        for row in cur.fetchall():
            rec = dict(zip(names, row, strict=True))
            t = rec["clock"]
            rec["clock"] = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
            rec = {k: _norm(v) for k, v in rec.items()}
            out[(rec["id"],)] = rec
    return out


def resumed_workload(url: str, seed: int) -> Workload:
    """The ``pre_`` tables' workload, continued where the rows in PostgreSQL leave its ids."""
    work = Workload(url, "pre_", seed=seed)
    with psycopg.connect(url) as conn:
        work.next_customer = 1 + conn.execute("SELECT coalesce(max(id), 0) FROM pre_customers").fetchone()[0]  # type: ignore[index]
        work.next_order = 1 + conn.execute("SELECT coalesce(max(id), 0) FROM pre_orders").fetchone()[0]  # type: ignore[index]
        work.customers = [r[0] for r in conn.execute("SELECT id FROM pre_customers").fetchall()]
        work.orders = dict(
            conn.execute("SELECT order_id, count(*) FROM pre_order_lines GROUP BY order_id").fetchall()
        )
        columns = {
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'pre_customers'"
            ).fetchall()
        }
    work.columns_added = "tier" in columns
    return work


def _prepare(root: Path) -> None:
    """PostgreSQL alone in the stack's directory (its port kept for the stack): tables and rows."""
    port = Ports.load(root / PORTS_FILE).get("postgres")
    pg = EmbeddedPostgres(root / "postgres", port=port)
    pg.start()
    try:
        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(pg.url(DATABASE)) as conn:
            conn.execute(TYPES_SQL)  # type: ignore[arg-type]
        work = Workload(pg.url(DATABASE), "pre_", seed=11)
        try:
            work.create()
            for _ in range(40):
                work.step()
                work.conn.commit()
        finally:
            work.close()
    finally:
        pg.stop()


PRE_TABLES = ("pre_customers", "pre_orders", "pre_order_lines")
# the stack's processes: their Spark drivers bind loopback; the table services compact after two
# delta commits (instead of five), so compactions happen while the tests stream changes; the
# coordinator's janitor rolls back an instant whose writer has been silent for 15 s (instead of 60)
STACK_ENV = {
    "SPARK_LOCAL_IP": "127.0.0.1",
    "INLET_TABLE_SERVICES_OPTIONS": "hoodie.compact.inline.max.delta.commits=2",
    "INLET_COORDINATOR_HEARTBEAT_TIMEOUT_MS": "15000",
}


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[StandaloneCluster]:
    work = Path(tempfile.mkdtemp(prefix="inlet-e2e-spark-"))
    try:
        # one core per application unless it asks for more: the writer's and the table services'
        # applications run side by side (a killed writer's one is still leaving when the next comes)
        with StandaloneCluster(work, cores=3, memory="3g", default_cores=1) as cluster:
            yield cluster
    finally:
        if os.environ.get("INLET_E2E_KEEP"):  # its master's, worker's and executors' logs
            print(f"the Spark cluster's directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def loaded_stack(spark_cluster: StandaloneCluster) -> Iterator[RunningStack]:
    root = Path(tempfile.mkdtemp(prefix="inlet-e2e-load-"))
    _prepare(root)
    # --engine spark on the cluster: the load's ranges are Spark tasks, the writer commits the
    # streamed changes by Spark jobs and the table services compact by Spark jobs; the local
    # engine's load, writer and table services are proven by the integration tests and the other
    # stack tests
    with pytest.MonkeyPatch.context() as mp:
        for k, v in STACK_ENV.items():
            mp.setenv(k, v)
        yield from supervised(
            root,
            initial_load="copy",
            engine="spark",
            spark_master=spark_cluster.master_url,
            table_services=True,
        )


def test_copy_loaded_tables_equal_postgres_and_what_streaming_stores(loaded_stack: RunningStack) -> None:
    summary = json.loads((Path(loaded_stack.config.dir) / "initial_load.json").read_text())
    loaded = {r["table_id"]: r["rows"] for r in summary["loaded"]}
    assert loaded[loaded_stack.table_id("typed")] == 3000
    for t in ("pre_customers", "pre_orders", "pre_order_lines"):
        assert loaded_stack.table_id(t) in loaded
    assert set(summary["skipped"]) == {"public.no_key", "public.spots", "public.full_key"}
    # the load's progress, kept in the stack dir for `stack status`, exported by the writer
    progress = read_progress(Path(loaded_stack.config.dir) / LOAD_PROGRESS_FILE)
    assert progress[loaded_stack.table_id("typed")]["rows"] == 3000
    assert progress["app.public.no_key"]["state"] == "skipped"
    writer = loaded_stack.command("writer").describe()["metrics"]
    with urllib.request.urlopen(writer, timeout=10) as resp:
        metrics = resp.read().decode()
    assert (
        f'inlet_writer_initial_load_rows_total{{table="{loaded_stack.table_id("typed")}"}} 3000.0' in metrics
    )
    assert "primary key" in summary["skipped"]["public.no_key"]
    assert "point" in summary["skipped"]["public.spots"]

    # loaded by COPY, before any change streamed: equal to PostgreSQL
    for t in ("pre_customers", "pre_orders", "pre_order_lines"):
        compare_inlet(loaded_stack, t)
    path = loaded_stack.table_path("typed")
    before = inlet_read(path)
    assert before is not None
    expected = typed_rows_as_stored(loaded_stack.url)
    got = rows_by_key(before, list(next(iter(expected.values()))), ["id"])
    for rec in got.values():
        rec["loose"] = None if rec["loose"] is None else Decimal(rec["loose"])
    assert got == expected
    assert set(before.column("_change_operation_type").to_pylist()) == {"r"}
    assert set(before.column("_event_lsn").to_pylist()) == {0}  # snapshot reads: below every streamed LSN
    columns = [c for c in before.column_names if not c.startswith("_")]

    # the same rows again through Debezium -> CDC consumer -> writer (a no-op update sends full images)
    with psycopg.connect(loaded_stack.url, autocommit=True) as conn:
        conn.execute("UPDATE typed SET id = id")

    def streamed() -> bool:
        data = inlet_read(path)
        return data is not None and set(data.column("_change_operation_type").to_pylist()) == {"u"}

    wait_for(streamed, 240, "the no-op updates to reach the lake")
    after = inlet_read(path)
    assert after is not None
    assert after.select(columns).schema == before.select(columns).schema
    streamed_rows, loaded_rows = rows_by_key(after, columns, ["id"]), rows_by_key(before, columns, ["id"])
    assert streamed_rows == loaded_rows, diff(loaded_rows, streamed_rows)
    assert min(after.column("_event_lsn").to_pylist()) > summary["lsn"]


def test_changes_after_the_load_arrive_once_and_unloadable_tables_take_debezium(
    loaded_stack: RunningStack,
) -> None:
    work = resumed_workload(loaded_stack.url, seed=12)
    try:
        for _ in range(30):
            work.step()
            work.conn.commit()
    finally:
        work.close()
    with psycopg.connect(loaded_stack.url, autocommit=True) as conn:
        conn.execute("DELETE FROM spots WHERE id <= 10")
        conn.execute("UPDATE full_key SET note = 'changed ' || n WHERE n < 5")
        conn.execute("DELETE FROM full_key WHERE n >= 15")

    def full_key_rows() -> set[tuple[Any, ...]] | None:
        data = inlet_read(loaded_stack.table_path("full_key"))
        if data is None:
            return None
        rows = list(zip(data.column("n").to_pylist(), data.column("note").to_pylist(), strict=True))
        assert len(rows) == len(set(rows)), "a row image twice in the lake"
        return set(rows)

    def caught_up() -> bool:
        try:
            for t in ("pre_customers", "pre_orders", "pre_order_lines"):
                compare_inlet(loaded_stack, t)
        except AssertionError:
            return False
        spots = inlet_read(loaded_stack.table_path("spots"))
        if spots is None or sorted(spots.column("id").to_pylist()) != list(range(11, 41)):
            return False
        with psycopg.connect(loaded_stack.url) as conn:  # a multiset: identical rows share a key
            want = set(conn.execute("SELECT n, note FROM full_key").fetchall())
        return full_key_rows() == want

    wait_for(caught_up, 240, "the lake to equal PostgreSQL")
    spots = inlet_read(loaded_stack.table_path("spots"))
    assert spots is not None
    assert set(spots.column("_change_operation_type").to_pylist()) == {"r"}  # Debezium's snapshot rows
    # REPLICA IDENTITY DEFAULT without a primary key: skipped (one warning), no table in the lake
    assert not loaded_stack.table_path("no_key").exists()
    log = (loaded_stack.config.logs / "cdc_consumer.log").read_text()
    assert log.count("has no primary key and REPLICA IDENTITY DEFAULT") == 1


# ------------------------------------------------------------------------- the rest on Spark


def compactions(stack: RunningStack, table: str) -> dict[str, Any]:
    """The table's compactions (instant time -> :class:`CompactionInfo`), pending and completed."""
    return {c.instant_time: c for c in HudiTable.open(stack.table_uri(table)).compactions()}


def completed_compactions(stack: RunningStack, table: str) -> set[str]:
    return {t for t, c in compactions(stack, table).items() if c.state is State.COMPLETED}


def tasks_run_by(cluster: StandaloneCluster, app_name: str) -> int:
    """Tasks the executors of the cluster's applications named ``app_name`` started (their logs in
    the worker's work directory, one directory per application)."""
    ids = [a["id"] for a in cluster.applications() if a["name"] == app_name]
    return sum(
        log.read_text(errors="replace").count("Running task")
        for app_id in ids
        for log in (cluster.work_dir / "worker" / app_id).glob("*/stderr")
    )


def compare_readers(stack: RunningStack) -> None:
    """The ``pre_`` tables equal PostgreSQL by Inlet's reader and by hudi-rs (file group reader 2:
    reader 1 needs every file group compacted; see test_pipeline.py), no duplicate key, no offset
    consumed twice."""
    customers, orders, lines = PRE_TABLES
    for t in PRE_TABLES:
        compare_inlet(stack, t)
        check_offsets(stack.table_uri(t))
    compare_hudi_rs(stack, orders, versions=["2"])
    compare_hudi_rs(stack, lines, versions=["2"])
    compare_hudi_rs(
        stack, customers, allow_placeholder="bio", versions=["2"], known_refusal=HUDI_RS_TOAST_REFUSAL
    )


def test_table_services_compact_by_spark_jobs_on_the_cluster_while_changes_stream(
    loaded_stack: RunningStack, spark_cluster: StandaloneCluster
) -> None:
    """The changes streamed so far (and more transactions while a table has none yet) made the
    table services compact every ``pre_`` table by Spark jobs of their own application on the
    standalone cluster (its executors ran the tasks), the writer's and the load's applications ran
    there too; changes go on streaming on top of the compacted file slices, and the lake equals
    PostgreSQL by Inlet's reader and by hudi-rs."""
    stack = loaded_stack
    w = resumed_workload(stack.url, seed=13)
    try:

        def compacted() -> bool:
            if all(completed_compactions(stack, t) for t in PRE_TABLES):
                return True
            for _ in range(3):  # a table without a compaction yet: more delta commits
                w.step()
            return False

        # (a Spark application's start on a loaded two-core machine takes a minute of its own)
        wait_for(compacted, 300, "the table services to compact every pre_ table", every_s=2)
        done = {t: max(completed_compactions(stack, t)) for t in PRE_TABLES}
        for _ in range(10):  # changes after the compactions, merged onto their base files
            w.step()
    finally:
        w.close()
    wait_for_lake(stack, PRE_TABLES, timeout_s=240)
    for t, compaction in done.items():
        info = compactions(stack, t)[compaction]
        assert info.completion_time is not None
        after = HudiTable.open(stack.table_uri(t)).timeline.completed([Action.DELTA_COMMIT])
        assert any((i.completion_time or "") > info.completion_time for i in after), t
    new = sum(len(completed_compactions(stack, t)) for t in PRE_TABLES)
    names = {a["name"] for a in spark_cluster.applications()}
    # (the initial load's application, finished long before, was once missing from the master's list)
    assert {"inlet writer", "inlet table services"} <= names, names
    # one task per compacted file group, on the cluster's executors
    assert tasks_run_by(spark_cluster, "inlet table services") >= new
    assert tasks_run_by(spark_cluster, "inlet writer") > 0
    compare_readers(stack)
