"""``initial_load.load`` against a real PostgreSQL and coordinator: the slot, the snapshot, the retry.

The end-to-end proof (COPY-loaded tables equal PostgreSQL and what Debezium's path stores) is in
tests/e2e/replication/test_initial_load.py; here: the slot is created at the load's LSN, rows
committed after the snapshot are not loaded, and a load run again after it stopped half-way (a new
slot, rows deleted meanwhile) overwrites the table instead of appending to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.edge_values import EDGE_STORED, edge_ddl, edge_rows, nan_text
from support.loads import load

from inlet.core import HudiTable
from inlet.core.faults import CRASH_EXIT_CODE
from inlet.services.cdc_consumer import PostgresCatalog
from inlet.services.coordinator.server import RunningServer
from inlet.services.writer import initial_load
from inlet.services.writer.rows import table_rows


def _load(pg_url: str, coordinator: RunningServer, lake: Path, slot: str) -> initial_load.LoadSummary:
    return load(pg_url, coordinator.address, lake, slot)


def _drop_slot(url: str, slot: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def test_load_creates_the_slot_at_its_lsn_and_a_rerun_overwrites(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_items (id int PRIMARY KEY, name text, qty int)")
        conn.execute("INSERT INTO src_items SELECT g, 'item ' || g, g % 10 FROM generate_series(1, 500) g")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")  # not matched by the glob
        dbname = conn.info.dbname

    summary = _load(pg_url, coordinator, lake, slot)
    assert [r.table_id for r in summary.loaded] == ["srv.public.src_items"]
    assert summary.loaded[0].rows == 500 and summary.skipped == {}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT plugin, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        assert found is not None and found[0] == "pgoutput"
        assert initial_load.parse_lsn(found[1]) == summary.lsn
        assert conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (slot + "_pub",)).fetchone()
        # after the snapshot: streamed later, not loaded
        conn.execute("INSERT INTO src_items VALUES (501, 'late', 1)")

    path = lake / dbname / "public" / "src_items"
    table = HudiTable.open(str(path))
    got = table.read(columns=["id", "name", "qty", "_event_lsn"], meta_columns=False)
    assert sorted(got.column("id").to_pylist()) == list(range(1, 501))
    assert set(got.column("_event_lsn").to_pylist()) == {0}  # snapshot reads: below every streamed LSN
    assert dict(zip(got.column("id").to_pylist(), got.column("name").to_pylist(), strict=True))[7] == "item 7"

    # the load stopped before streaming began: the stack drops the slot and loads again
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM src_items WHERE id <= 100")
    _drop_slot(pg_url, slot)
    again = _load(pg_url, coordinator, lake, slot)
    assert again.lsn > summary.lsn
    table = HudiTable.open(str(path))
    ids = table.read(columns=["id"], meta_columns=False).column("id").to_pylist()
    assert sorted(ids) == list(range(101, 502))  # deleted rows gone, the late row now in, no duplicates
    actions = [i.action for i in table.instants() if i.completion_time]
    assert actions[-1] == "replacecommit"


def test_a_slot_that_exists_is_a_clear_error(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_a (id int PRIMARY KEY)")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    with pytest.raises(
        initial_load.LoadError, match=f"cannot create replication slot {slot}.*already exists"
    ):
        _load(pg_url, coordinator, lake, slot)
    with pytest.raises(initial_load.LoadError, match="replication slot name 'Bad-Slot'"):
        _load(pg_url, coordinator, lake, "Bad-Slot")
    assert not any(lake.rglob("hoodie.properties"))  # nothing written


def test_writer_load_cli_prints_the_summary_and_the_debezium_settings(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_k (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO src_k SELECT g, 'v' || g FROM generate_series(1, 20) g")
        conn.execute("CREATE TABLE src_nokey (v text)")
    argv = [sys.executable, "-m", "inlet.services.cli.main", "writer", "load", "--database-url", pg_url]
    argv += ["--tables", "public.src_*", "--coordinator", coordinator.address, "--lake-root", str(lake)]
    argv += ["--topic-prefix", "srv", "--slot", slot, "--publication", slot + "_pub"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(r["table_id"], r["rows"]) for r in summary["loaded"]] == [("srv.public.src_k", 20)]
    assert list(summary["skipped"]) == ["public.src_nokey"]
    assert summary["debezium"] == {
        "snapshot.mode": "initial",
        "snapshot.include.collection.list": r"public\.src_nokey",
    }
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)  # the slot exists now
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0 and "already exists" in again.stderr


def test_writer_load_reruns_after_it_died_midway(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE src_a (id int PRIMARY KEY, v text)")
        conn.execute("CREATE TABLE src_b (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO src_a SELECT g, 'a' || g FROM generate_series(1, 300) g")
        conn.execute("INSERT INTO src_b SELECT g, 'b' || g FROM generate_series(1, 200) g")
        dbname = conn.info.dbname
    argv = [sys.executable, "-m", "inlet.services.cli.main", "writer", "load", "--database-url", pg_url]
    argv += ["--tables", "public.src_*", "--coordinator", coordinator.address, "--lake-root", str(lake)]
    argv += ["--topic-prefix", "srv", "--slot", slot, "--publication", slot + "_pub"]
    # dies like SIGKILL once src_a's data files are written, before its commit
    env = {**os.environ, "INLET_CRASH_AT": "after_data_files"}
    died = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert died.returncode == CRASH_EXIT_CODE, died.stderr
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM src_a WHERE id <= 50")  # changed before the rerun's snapshot

    again = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0
    assert "--replace-slot" in again.stderr, again.stderr

    done = subprocess.run([*argv, "--replace-slot"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted((r["table_id"], r["rows"]) for r in summary["loaded"]) == [
        ("srv.public.src_a", 250),
        ("srv.public.src_b", 200),
    ]
    for table, ids in (("src_a", range(51, 301)), ("src_b", range(1, 201))):
        got = HudiTable.open(str(lake / dbname / "public" / table)).read(columns=["id"], meta_columns=False)
        assert sorted(got.column("id").to_pylist()) == list(ids), table  # once each, as of the rerun
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the new slot is at the rerun's snapshot
        [(flushed,)] = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchall()
    assert initial_load.parse_lsn(flushed) == summary["lsn"]


# ---------------------------------------------------------------------------- values at the edges


def _copy_rows(url: str, tmp: Path, table: str) -> dict[int, dict[str, Any]]:
    """``table`` read by the initial load's COPY, dates and timestamps as their numbers."""
    catalog = PostgresCatalog(url)
    try:
        with psycopg.connect(url) as conn:
            plan = initial_load.plan_table(catalog, conn, "public", table)
            data = initial_load.read_table(conn, plan, tmp)
    finally:
        catalog.close()
    rows = {}
    for r in table_rows(data):
        rows[r["id"]] = {k: nan_text(v) for k, v in r.items()}
    return rows


def test_copy_renders_edge_values_as_streaming_stores(pg_url: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in edge_ddl("src_edges"):
            conn.execute(stmt)
        for row in edge_rows():
            conn.execute(f"INSERT INTO src_edges VALUES {row}")
    got = _copy_rows(pg_url, tmp_path, "src_edges")
    assert sorted(got) == sorted(EDGE_STORED)
    for key, expected in EDGE_STORED.items():
        row = got[key]
        assert {c: row[c] for c in expected} == expected, key
        assert all(row[c] is None for c in row if c not in expected and c != "id"), key


@pytest.mark.parametrize(
    ("ddl", "value", "reason"),
    [
        (
            "ts timestamp",
            "'294276-12-31 23:59:59.999999'",
            "public.src_bad: column ts = 294276-12-31 23:59:59.999999: after 294247-01-10T04:00:54.775807Z, "
            "the last instant int64 microseconds hold",
        ),
        (
            "ia int[]",
            "'{{1,2},{3,4}}'",
            "public.src_bad: column ia = {{1,2},{3,4}}: a multi-dimensional array, which Debezium cannot "
            "send (it sends nulls or Java object names)",
        ),
        (
            "n numeric(10,2) NOT NULL",
            "'NaN'",
            "public.src_bad: column n = NaN: NaN or Infinity in a NOT NULL numeric, which Debezium "
            "(decimal.handling.mode=precise) cannot send",
        ),
    ],
    ids=["timestamp past int64 micros", "multi-dimensional array", "NaN in NOT NULL numeric"],
)
def test_a_value_copy_cannot_store_leaves_the_table_to_debezium_with_the_reason(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str, ddl: str, value: str, reason: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE src_bad (id int PRIMARY KEY, {ddl})")
        conn.execute(f"INSERT INTO src_bad VALUES (1, {value})")
        conn.execute("CREATE TABLE src_good (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO src_good VALUES (1, 'a')")
    summary = _load(pg_url, coordinator, lake, slot)
    assert summary.skipped == {"public.src_bad": reason}
    assert [(r.table_id, r.rows) for r in summary.loaded] == [("srv.public.src_good", 1)]
