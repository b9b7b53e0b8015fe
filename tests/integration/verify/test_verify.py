"""``inlet verify`` against a real PostgreSQL and coordinator, on tables the initial load wrote.

The lake is written by the initial load (COPY rendering, bulk_insert through the coordinator); no
replication runs, so changes made afterwards in PostgreSQL are exactly what verify must name. A
commit carrying a Kafka checkpoint stands in for the writer's last batch, so the repair can be
shown to leave the writer's resume position alone.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.storage import Storage
from inlet.services.cli.main import main
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.verify.repair import REPAIR_KEY
from inlet.services.verify.source import SourceReader
from inlet.services.verify.verifier import Verifier, VerifyOptions
from inlet.services.writer import checkpoint as ckpt
from inlet.services.writer import initial_load, tables
from inlet.services.writer.rows import LSN_COL

SOURCE_SQL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
    id     int PRIMARY KEY,
    small  smallint,
    big    bigint,
    label  varchar(20),
    price  numeric(12,2),
    loose  numeric,
    ratio  real,
    score  double precision,
    active boolean,
    born   date,
    seen   timestamp,
    at     timestamptz,
    clock  time,
    span   interval,
    uid    uuid,
    doc    jsonb,
    raw    bytea,
    nums   int[],
    tags   text[],
    feel   mood
);
INSERT INTO items
SELECT g,
       CASE WHEN g % 7 = 0 THEN NULL ELSE (g % 30000) - 15000 END,
       g::bigint * 1000003,
       'label ' || g,
       (g * 1.37)::numeric(12,2),
       CASE WHEN g % 11 = 0 THEN NULL WHEN g % 13 = 0 THEN 1.50 + g ELSE (g / 7.0)::numeric END,
       (g / 3.0)::real,
       CASE WHEN g % 500 = 0 THEN 'NaN'::float8 ELSE g / 9.0 END,
       g % 2 = 0,
       date '2000-01-01' + g,
       timestamp '2020-02-29 12:34:56.123456' + g * interval '1 minute 1.000001 second',
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
CREATE TABLE pairs (a int, b text, v int, PRIMARY KEY (a, b));
INSERT INTO pairs SELECT g % 20, 'b' || g, g FROM generate_series(1, 400) g;
CREATE TABLE notes (n int, note text);
INSERT INTO notes SELECT g, 'note ' || g FROM generate_series(1, 20) g;
CREATE TABLE nothing (id int PRIMARY KEY, v text);
"""
TABLES = "public.items,public.pairs,public.notes,public.nothing"  # not the coordinator's tables
TOPIC = "inlet.changes.srv.public.items"


def _load(pg_url: str, coordinator: RunningServer, lake: Path, slot: str) -> None:
    with psycopg.connect(pg_url) as conn:
        conn.execute(SOURCE_SQL)  # type: ignore[arg-type]
    with CoordinatorClient(coordinator.address) as client:
        summary = initial_load.load(
            pg_url,
            TABLES.split(","),
            client=client,
            lake_root=str(lake),
            topic_prefix="srv",
            slot=slot,
            publication=slot + "_pub",
        )
    loaded = sorted((r.table_id, r.rows) for r in summary.loaded)
    assert loaded == [("srv.public.items", 3000), ("srv.public.nothing", 0), ("srv.public.pairs", 400)]


def _items_path(pg_url: str, lake: Path) -> str:
    with psycopg.connect(pg_url) as conn:
        return str(lake / conn.info.dbname / "public" / "items")


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["verify", "--no-progress", "--recheck-wait", "0", *args])
    return code, capsys.readouterr().out


def _report(out: str) -> dict[str, dict[str, Any]]:
    return {t["table"]: t for t in json.loads(out)["tables"]}


def _writer_commit(coordinator: RunningServer, path: str) -> None:
    """What the writer's last batch would have committed: row 1 again, with a Kafka checkpoint."""
    with CoordinatorClient(coordinator.address) as client:
        protocol = GrpcCommitProtocol(client, "srv.public.items", Storage(path))
        table = HudiTable.open(path, commit_protocol=protocol)
        row = table.read(filters=[("id", "=", 1)], meta_columns=False)
        lsn = row.schema.get_field_index(LSN_COL)
        row = row.set_column(lsn, LSN_COL, pa.array([row.column(LSN_COL)[0].as_py() + 1], pa.int64()))
        extra = {
            ckpt.CHECKPOINT_KEY: ckpt.format_checkpoint(TOPIC, {0: 42, 1: 7}),
            ckpt.RANGES_KEY: ckpt.format_ranges(TOPIC, {0: (40, 42), 1: (0, 7)}),
        }
        table.write(row, "upsert", extra_metadata=extra)
        protocol.close()


def test_verify_names_the_changed_keys_and_repair_makes_the_lake_equal_keeping_the_checkpoint(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _load(pg_url, coordinator, lake, slot)
    path = _items_path(pg_url, lake)
    base = ["--source", pg_url, "--lake", str(lake), "--tables", TABLES]

    code, out = _verify(capsys, *base, "--json", "--chunk-rows", "500")
    report = _report(out)
    assert code == 0, out
    assert report["public.items"]["status"] == "equal"
    assert report["public.items"]["source_rows"] == report["public.items"]["lake_rows"] == 3000
    assert report["public.items"]["chunks"] == 6 and report["public.items"]["differing_chunks"] == 0
    assert report["public.items"]["ignored_columns"] == {}  # every column compared
    assert report["public.pairs"]["status"] == "equal"
    assert report["public.notes"]["status"] == "skipped"
    assert "no primary key" in report["public.notes"]["reason"]
    assert report["public.nothing"]["status"] == "equal" and report["public.nothing"]["source_rows"] == 0

    _writer_commit(coordinator, path)
    assert ckpt.table_checkpoint(Storage(path), TOPIC) == {0: 42, 1: 7}

    # behind replication's back
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE items SET label = 'changed' WHERE id IN (10, 2000)")
        conn.execute("UPDATE items SET raw = NULL, nums = ARRAY[1] WHERE id = 77")
        conn.execute("UPDATE items SET score = 'NaN' WHERE id = 1234")
        conn.execute("DELETE FROM items WHERE id IN (30, 2999)")
        conn.execute("INSERT INTO items (id, label) VALUES (3001, 'new'), (5000, 'far')")
        conn.execute("UPDATE pairs SET v = -1 WHERE a = 3 AND b = 'b3'")
        conn.execute("DELETE FROM pairs WHERE a = 5 AND b = 'b5'")

    code, out = _verify(capsys, *base, "--json", "--chunk-rows", "500")
    assert code == 1, out
    items = _report(out)["public.items"]
    assert items["status"] == "different"
    assert sorted(k["id"] for k in items["keys"]["different"]) == [10, 77, 1234, 2000]
    assert sorted(k["id"] for k in items["keys"]["extra"]) == [30, 2999]
    assert sorted(k["id"] for k in items["keys"]["missing"]) == [3001, 5000]
    assert items["counts"] == {"missing": 2, "extra": 2, "different": 4, "duplicate": 0}
    assert 1 <= items["differing_chunks"] <= 5 and items["rechecks"] == 1
    pairs = _report(out)["public.pairs"]
    assert pairs["keys"]["different"] == [{"a": 3, "b": "b3"}]
    assert pairs["keys"]["extra"] == [{"a": 5, "b": "b5"}]
    assert pairs["keys"]["missing"] == []

    code, out = _verify(capsys, "--source", pg_url, "--lake", str(lake), "--tables", "public.items")
    assert code == 1
    lines = out.splitlines()
    assert "public.items missing id=3001" in lines and "public.items extra id=30" in lines
    assert "public.items different id=77" in lines
    summary = next(line for line in lines if line.startswith("public.items: different;"))
    assert "source 3000 rows, lake 3000 rows; 2 missing, 2 extra, 4 different; chunks 1" in summary
    assert summary.endswith(" rows/s")

    code, out = _verify(capsys, *base, "--json", "--repair", "--coordinator", coordinator.address)
    assert code == 0, out
    repaired = _report(out)
    assert repaired["public.items"]["status"] == "repaired" and repaired["public.items"]["remaining"] == 0
    repair = repaired["public.items"]["repair"]
    assert (repair["upserted"], repair["deleted"], repair["via"]) == (6, 2, "coordinator")
    assert repair["table_id"] == "srv.public.items"  # from the rows' db_shard_source_partition
    assert repaired["public.pairs"]["status"] == "repaired"

    code, out = _verify(capsys, *base, "--json")
    assert code == 0, out
    assert {t: r["status"] for t, r in _report(out).items()} == {
        "public.items": "equal",
        "public.pairs": "equal",
        "public.notes": "skipped",
        "public.nothing": "equal",
    }
    table = HudiTable.open(path)
    ids = table.read(columns=["id"], meta_columns=False).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 3000
    # the writer resumes where it was: the repair commit carries no checkpoint and is skipped
    assert ckpt.table_checkpoint(Storage(path), TOPIC) == {0: 42, 1: 7}
    assert ckpt.table_checkpoint(Storage(path), TOPIC, partitions=[0, 1]) == {0: 42, 1: 7}
    timeline = table.timeline
    last = timeline.completed_writes()[-1]
    extra = timeline.commit_metadata(last).extra_metadata
    assert REPAIR_KEY in extra and ckpt.CHECKPOINT_KEY not in extra
    assert json.loads(extra[REPAIR_KEY])["upserted"] == 6


def test_a_key_whose_lake_row_catches_up_during_the_recheck_is_not_reported(
    pg_url: str, coordinator: RunningServer, lake: Path, slot: str
) -> None:
    _load(pg_url, coordinator, lake, slot)
    path = _items_path(pg_url, lake)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE items SET label = 'late' WHERE id IN (5, 6)")
    streamed: list[str] = []

    def stream_one_change(seconds: float) -> None:
        """The writer catches up on key 5 (not 6) while verify waits for the lake to progress."""
        if streamed:
            time.sleep(seconds)  # later waits: nothing streams
            return
        table = HudiTable.open(path)
        row = table.read(filters=[("id", "=", 5)], meta_columns=False)
        row = row.set_column(row.schema.get_field_index("label"), "label", pa.array(["late"]))
        row = row.set_column(
            row.schema.get_field_index(LSN_COL), LSN_COL, pa.array([row.column(LSN_COL)[0].as_py() + 1])
        )
        streamed.append(table.write(row, "upsert").instant_time)

    options = VerifyOptions(pg_url, str(lake), tables=("public.items",), rechecks=3, recheck_wait_s=0.3)
    (report,) = Verifier(options, sleep=stream_one_change).run()
    assert streamed
    assert report.status == "different"
    assert report.keys["different"] == [{"id": 6}] and report.counts["different"] == 1
    # round 1 saw the lake progress (5 caught up); round 2 waited in vain and found 6 again: stable
    assert report.rechecks == 2


def test_usage_and_connection_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["verify", "--source", "postgresql://127.0.0.1:1/none", "--lake", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot reach the source database" in err
    code = main(["verify", "--source", "postgresql://127.0.0.1:1/none", "--lake", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no such directory" in err
    code = main(["verify", "--lake", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--source is required" in err


def test_a_keyless_table_compares_as_a_multiset_and_a_lake_table_without_source_is_named(
    pg_url: str, lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (n int, note text)")
        conn.execute("INSERT INTO notes SELECT g % 5, 'note ' || (g % 5) FROM generate_series(1, 10) g")
        database = conn.info.dbname
    # the lake as a writer keying rows by the whole row (--keyless whole_row) might hold them:
    # one copy of (4, 'note 4') short, one row the source never had
    rows = [(g % 5, f"note {g % 5}") for g in range(1, 10)] + [(7, "stray")]
    data = pa.table(
        {
            "n": pa.array([r[0] for r in rows], pa.int32()),
            "note": [r[1] for r in rows],
            "_inlet_record_key": [f"{r}#{i}" for i, r in enumerate(rows)],
        }
    )
    for name in ("notes", "gone"):
        path = str(lake / database / "public" / name)
        tables.open_or_create(path, name, database, ["_inlet_record_key"], tables.TableSettings())
        HudiTable.open(path).write(initial_load.with_event_columns(data, 1, "srv"), "bulk_insert")

    code, out = _verify(
        capsys, "--source", pg_url, "--lake", str(lake), "--tables", "public.notes,public.gone"
    )
    assert code == 1, out
    lines = out.splitlines()
    assert 'public.notes missing n=0,note="note 0"' in lines  # g = 10: the copy the lake lacks
    assert 'public.notes extra n=7,note="stray"' in lines
    assert any(line.startswith("public.notes: different; source 10 rows, lake 10 rows") for line in lines)
    assert "public.gone: different; the source has no table public.gone" in out


def test_the_repair_point_waits_for_the_transactions_running_at_it(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    reader = SourceReader(pg_url, tmp_path)
    other = psycopg.connect(pg_url)
    try:
        other.execute("INSERT INTO t VALUES (1)")  # an open transaction with an xid
        with caplog.at_level(logging.WARNING, logger="inlet.verify"):
            reader.repair_point(wait_s=0)  # gives up at once, saying so
        assert "have not ended" in caplog.text
        found: list[int] = []
        waiter = threading.Thread(target=lambda: found.append(reader.repair_point(wait_s=60)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # waits for the transaction: a change it made may be below the LSN
        other.commit()
        waiter.join(30)
        assert not waiter.is_alive() and found
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None and found[0] <= initial_load.parse_lsn(row[0])
    finally:
        other.close()
        reader.close()


def test_repair_of_a_partitioned_table_moves_a_row_whose_partition_changed_never_copies_it(
    pg_url: str,
    coordinator: RunningServer,
    lake: Path,
    slot: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The lake row sits in its old partition; the repaired table has it once, in the new one."""
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "CREATE TABLE shops (id int PRIMARY KEY, region text NOT NULL, v int);"
            "INSERT INTO shops SELECT g, CASE WHEN g % 2 = 0 THEN 'east' ELSE 'west' END, g"
            " FROM generate_series(1, 40) g"
        )
    config = tmp_path / "tables.json"
    config.write_text(json.dumps([{"match": "*.public.shops", "partition_by": "region", "index": "simple"}]))
    rules = tables.load_rules(str(config))
    with CoordinatorClient(coordinator.address) as client:
        initial_load.load(
            pg_url,
            ["public.shops"],
            client=client,
            lake_root=str(lake),
            topic_prefix="srv",
            slot=slot,
            publication=slot + "_pub",
            rules=rules,
        )
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE shops SET region = 'north', v = -7 WHERE id IN (3, 4)")  # moved partitions
        dbname = conn.info.dbname
    base = [
        "--source",
        pg_url,
        "--lake",
        str(lake),
        "--tables",
        "public.shops",
        "--table-config",
        str(config),
    ]

    code, out = _verify(capsys, *base, "--json", "--repair", "--coordinator", coordinator.address)
    assert code == 0, out
    assert _report(out)["public.shops"]["status"] == "repaired", out

    table = HudiTable.open(str(lake / dbname / "public" / "shops"))
    assert table.partition_fields == ("region",)
    rows = table.read(columns=["id", "region", "v"], meta_columns=False).to_pylist()
    moved = sorted((r["id"], r["region"], r["v"]) for r in rows if r["id"] in (3, 4))
    assert moved == [(3, "north", -7), (4, "north", -7)]  # once each, where the source has them
    assert len(rows) == 40
    code, out = _verify(capsys, *base, "--json")
    assert code == 0 and _report(out)["public.shops"]["status"] == "equal", out
