"""``inlet stack up | status | down`` as a user runs them: the supervisor is a background process.

The stack replicates "the user's" PostgreSQL (``--source``): a server started here, with a role that
is no superuser - it has REPLICATION and owns its tables, as an application's role would. The
stack's own PostgreSQL (``make demo``'s path) is covered by tests/e2e/demo.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import check_offsets, compare_inlet, processes_mentioning, wait_for, wait_for_lake
from support.metrics import exposed_names, scrape

from inlet.services.stack import EmbeddedPostgres
from inlet.services.stack.source import replication_name

pytestmark = pytest.mark.slow

COMPONENTS = {
    "coordinator_store",
    "kafka",
    "coordinator",
    "debezium",
    "cdc_consumer",
    "writer",
    "table_services",
}


# what each service's /metrics must offer (issue #22: freshness, lag, slot WAL, coordinator)
METRICS = {
    "coordinator": {
        "inlet_coordinator_commit_latency_seconds_bucket",
        "inlet_coordinator_conflicts_total",
        "inlet_coordinator_outbox_pending_events",
        "inlet_coordinator_outbox_oldest_event_age_seconds",
        "inlet_coordinator_janitor_rollbacks_total",
    },
    "cdc_consumer": {
        "inlet_kafka_consumer_lag_records",
        "inlet_cdc_slot_lag_bytes",
        "inlet_cdc_slot_retained_wal_bytes",
        "inlet_cdc_slot_wal_budget_bytes",
        "inlet_cdc_dead_letters_total",
    },
    "writer": {
        "inlet_writer_last_commit_timestamp_seconds",
        "inlet_writer_last_freshness_seconds",
        "inlet_kafka_consumer_lag_records",
        "inlet_writer_dead_letters_total",
    },
    "table_services": {"inlet_table_services_runs_total"},
}


PASSWORD = "app-s3cret-pw"
OUTPUT: list[str] = []  # everything the commands printed: the password must never be there


def run(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "inlet.services.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    OUTPUT.extend((proc.stdout, proc.stderr))
    return proc


def inlet(*args: str, timeout: float = 400) -> str:
    proc = run(*args, timeout=timeout)
    assert proc.returncode == 0, f"inlet {' '.join(args)} failed: {proc.stderr[-2000:]}"
    return proc.stdout


def status(d: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(inlet("stack", "status", "--dir", str(d), "--json"))
    return data


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class Lake:
    """What the comparison helpers need of a stack: its PostgreSQL URL and where tables land."""

    url: str
    lake: Path
    database: str

    def table_path(self, table: str) -> Path:
        return self.lake / self.database / "public" / table

    def table_uri(self, table: str) -> str:
        return str(self.table_path(table))


def start_source(server_dir: Path) -> tuple[EmbeddedPostgres, str]:
    """The user's PostgreSQL: database shop owned by role shop_app (REPLICATION, no superuser),
    with a table and a partitioned table that already hold rows."""
    pg = EmbeddedPostgres(server_dir / "source").start()
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE shop_app LOGIN REPLICATION PASSWORD '{PASSWORD}'")
        conn.execute("CREATE DATABASE shop OWNER shop_app")
    url = f"postgresql://shop_app:{PASSWORD}@127.0.0.1:{pg.port}/shop"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE cli_items (id int PRIMARY KEY, v text, at timestamptz DEFAULT now())")
        conn.execute("INSERT INTO cli_items (id, v) SELECT g, 'v' || g FROM generate_series(1, 50) g")
        # one table of the lake, its root's (#32): the stack's filtered publication lists the root
        conn.execute(
            "CREATE TABLE cli_parts (id int, day date, v text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)"
        )
        conn.execute(
            "CREATE TABLE cli_parts_1 PARTITION OF cli_parts FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')"
        )
        conn.execute(
            "CREATE TABLE cli_parts_2 PARTITION OF cli_parts FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')"
        )
        conn.execute(
            "INSERT INTO cli_parts SELECT g, date '2026-01-01' + g, 'p' || g FROM generate_series(1, 40) g"
        )
    return pg, url


# Three `up`s of a whole stack (Apache Kafka's, the metastore's and Debezium's JVMs each time) and a
# partitioned source: 5-7 minutes on a loaded 2-core machine, past pytest's 10-minute default once
# (the thread timeout then kills the worker); every wait inside has a bound of its own.
@pytest.mark.timeout(1200)
def test_stack_up_status_restart_down_and_up_again(server_dir: Path) -> None:
    """``up --source`` loads the rows already in the user's database and replicates what follows,
    through a slot and publication named for --dir; it prints every address and returns once
    healthy; ``status --json`` lists every component with its pid and health and the slot's
    retained WAL; a SIGKILLed component is restarted by the supervisor (its restart count goes up
    and logs/supervisor.log says so) and changes keep flowing; ``down`` leaves no process of the
    stack, and ``status`` then says the slot holds WAL; ``up`` on the same directory reuses the
    saved source and resumes: changes made after it appear once, and nothing is replicated twice
    (no duplicate key, no offset consumed twice), and a table created while it was down is
    backfilled; ``inlet backfill --dir`` re-reads a table while it replicates; ``down --drop-slot`` removes slot and
    publication. The password is never printed, logged, or on a command line."""
    d = server_dir / "stack"
    source_pg, url = start_source(server_dir)
    name = replication_name(d)
    try:
        addresses = json.loads(
            inlet("stack", "up", "--dir", str(d), "--source", url, "--batch-interval-ms", "500").splitlines()[
                -1
            ]
        )
        assert set(addresses) >= COMPONENTS and "postgres" not in addresses
        assert addresses["source"] == {"url": url.replace(PASSWORD, "***"), "slot": name}
        for host_port in (addresses["kafka"]["bootstrap"], addresses["coordinator"]["address"]):
            assert host_port.startswith("127.0.0.1:")
        # Apache Kafka keeps its data (and cluster id) under DIR/kafka, so `down` + `up` resumes
        assert addresses["kafka"]["data"] == str(d.resolve() / "kafka") and addresses["kafka"]["cluster_id"]
        lake = Lake(url, Path(addresses["lake"]), "shop")
        with psycopg.connect(source_pg.url(), autocommit=True) as conn:  # nothing made there but these
            assert [r[0] for r in conn.execute("SELECT datname FROM pg_database ORDER BY 1")] == [
                "postgres",
                "shop",
                "template0",
                "template1",
            ]
        wait_for_lake(lake, ["cli_items", "cli_parts"], 120)  # type: ignore[arg-type]  # rows before `up`

        st = status(d)
        assert st["state"] == "running"
        comps = {c["name"]: c for c in st["components"]}
        assert set(comps) >= COMPONENTS  # and catalog sync with its metastore, where the stack runs them
        for c in comps.values():
            assert isinstance(c["pid"], int) and alive(c["pid"]), c
            assert c["healthy"] is True and c["restarts"] == 0, c
        assert st["source"]["slot"] == name and st["source"]["active"] is True
        # Apache Kafka keeps its data under DIR/kafka; the CDC consumer gives its topics Kafka's retention
        assert comps["kafka"]["data"] == str(d.resolve() / "kafka") and comps["kafka"]["cluster_id"]
        cdc_argv = Path(f"/proc/{comps['cdc_consumer']['pid']}/cmdline").read_bytes().split(b"\0")
        assert cdc_argv[cdc_argv.index(b"--topic-retention-ms") + 1] == b"604800000", cdc_argv
        assert (
            isinstance(st["source"]["retained_wal_bytes"], int)
            and not st["source"]["holds_wal_while_stopped"]
        )
        # every service's metrics URL is listed, and serves what an on-call engineer needs
        assert set(st["metrics"]) == {n for n, c in comps.items() if c.get("metrics")} >= set(METRICS)
        for component, endpoint in st["metrics"].items():
            assert endpoint == comps[component]["metrics"] and endpoint.startswith("http://127.0.0.1:")
            names = exposed_names(scrape(endpoint))
            assert names >= METRICS.get(component, set()), (component, METRICS[component] - names)
        assert f"data {d.resolve() / 'kafka'}" in inlet("stack", "status", "--dir", str(d))

        # a killed component is restarted and says so
        old = comps["cdc_consumer"]["pid"]
        os.kill(old, signal.SIGKILL)

        def restarted() -> dict[str, Any] | None:
            c = {c["name"]: c for c in status(d)["components"]}["cdc_consumer"]
            return c if c["restarts"] == 1 and c["pid"] not in (None, old) and c["healthy"] else None

        wait_for(restarted, 90, "the supervisor to restart the CDC consumer")
        log = (d / "logs" / "supervisor.log").read_text()
        died = [json.loads(line) for line in log.splitlines() if "component died" in line]
        assert [e.get("component") for e in died] == ["cdc_consumer"], died
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE cli_items SET v = v || '!' WHERE id <= 10")
            conn.execute("DELETE FROM cli_items WHERE id > 45")
            # in both partitions, one made now, and rows moved across partitions
            conn.execute(
                "CREATE TABLE cli_parts_3 PARTITION OF cli_parts FOR VALUES FROM ('2026-03-01') TO ('2026-04-01')"
            )
            conn.execute(
                "INSERT INTO cli_parts VALUES (41, '2026-01-30', 'n'), (42, '2026-02-27', 'n'), (43, '2026-03-01', 'n')"
            )
            conn.execute("UPDATE cli_parts SET day = '2026-03-02', v = 'moved' WHERE id IN (3, 35)")
            conn.execute("DELETE FROM cli_parts WHERE id = 4")
        wait_for_lake(lake, ["cli_items", "cli_parts"], 120)  # type: ignore[arg-type]
        assert sorted(p.name for p in (lake.lake / "shop" / "public").iterdir()) == ["cli_items", "cli_parts"]
        with psycopg.connect(url) as conn:
            # the stack's publication publishes via the root, and Debezium (which keeps it filtered
            # to its include list) made the root its member, not the partitions
            assert conn.execute(
                "SELECT pubviaroot, array(SELECT r.prrelid::regclass::text FROM pg_publication_rel r "
                "WHERE r.prpubid = p.oid ORDER BY 1) FROM pg_publication p WHERE pubname = %s",
                (name,),
            ).fetchone() == (True, ["cli_items", "cli_parts", "inlet.debezium_signal"])

        # inlet tables: the table (its changes now flow through the writer) with freshness, lag, state
        listed = inlet("tables", "--dir", str(d), "--json").splitlines()
        items = {r["table"]: r for r in map(json.loads, listed)}["shop.public.cli_items"]
        assert items["path"] == lake.table_uri("cli_items") and items["last_instant"], items
        assert items["state"] == "running" and items["error"] is None and isinstance(items["lag"], int), items
        assert 0 <= items["freshness_s"] < 600, items

        # an online backfill (issue #24): Debezium reads the table again on the stack's slot, in
        # chunks between watermarks in the signal table the stack made; the lake stays equal, and
        # the signal table's rows are no table of the lake
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE cli_items SET v = 'before the backfill' WHERE id = 3")
        done = json.loads(inlet("backfill", "--dir", str(d), "--timeout", "120", "public.cli_items"))
        assert done["rows_read"] == {"public.cli_items": 45}, done
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE cli_items SET v = 'after the backfill' WHERE id = 4")
        wait_for_lake(lake, ["cli_items"], 120)  # type: ignore[arg-type]
        assert not (lake.lake / "shop" / "inlet").exists()

        # down: nothing left, and the slot (with the WAL it holds) is shown
        pids = [c["pid"] for c in status(d)["components"] if c.get("pid")]
        assert not processes_mentioning(PASSWORD), "the password is on a command line"
        stopped = json.loads(inlet("stack", "down", "--dir", str(d)))
        assert stopped["was_running"] is True
        assert not [p for p in pids if alive(p)], "a component outlived down"
        assert not processes_mentioning(str(d)), "a process of the stack outlived down"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO cli_items (id, v) VALUES (999, 'while the stack was down')")
            # a table created while the stack was down: backfilled at the next start (issue #24)
            conn.execute("CREATE TABLE cli_late (id int PRIMARY KEY, v text)")
            conn.execute("INSERT INTO cli_late SELECT g, 'late' || g FROM generate_series(1, 30) g")
        st = status(d)
        assert st["state"] == "stopped"
        stopped_items = json.loads(inlet("tables", "--dir", str(d), "--json").splitlines()[0])
        assert (stopped_items["state"], stopped_items["lag"]) == ("unknown", None)  # no writer to ask
        assert st["source"]["holds_wal_while_stopped"] is True and st["source"]["active"] is False
        text = inlet("stack", "status", "--dir", str(d))
        assert f"the stack is stopped but slot {name} holds" in text, text
        assert f"data {d.resolve() / 'kafka'}" in text, text  # the broker's data, from the last stack.json

        # up again, without --source: the saved one; the pipeline resumes where it was
        again = json.loads(inlet("stack", "up", "--dir", str(d)).splitlines()[-1])
        assert again["source"] == addresses["source"]
        assert again["kafka"]["bootstrap"] == addresses["kafka"]["bootstrap"]
        assert (
            again["kafka"]["cluster_id"] == addresses["kafka"]["cluster_id"]
        )  # the same cluster, its data kept
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO cli_items (id, v) VALUES (1000, 'after the restart')")
            conn.execute("UPDATE cli_items SET v = 'changed after the restart' WHERE id = 2")
        wait_for_lake(lake, ["cli_items", "cli_late"], 180)  # type: ignore[arg-type]
        compare_inlet(lake, "cli_items")  # type: ignore[arg-type]
        log = (d / "logs" / "supervisor.log").read_text()
        assert [json.loads(line)["tables"] for line in log.splitlines() if "backfill started" in line] == [
            ["public.cli_late"]
        ]
        check_offsets(lake.table_path("cli_items"))
        assert all(c["restarts"] == 0 for c in status(d)["components"])  # a new supervisor

        # down --drop-slot: the source keeps nothing of the stack
        dropped = json.loads(inlet("stack", "down", "--dir", str(d), "--drop-slot"))
        assert dropped["slot_dropped"] is True and dropped["publication_dropped"] is True
        with psycopg.connect(url) as conn:
            assert not conn.execute(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone()
            assert not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()

        assert not [o for o in OUTPUT if PASSWORD in o], "the password was printed"
        for written in (d / "stack.json", *(d / "logs").glob("*.log"), d / "debezium" / "connect.log"):
            assert PASSWORD not in written.read_text(errors="replace"), f"the password is in {written}"
        for holder in (d / "config.json", d / "debezium" / "connector.properties"):
            assert holder.stat().st_mode & 0o077 == 0, (
                f"{holder} (it holds the password) is readable by others"
            )
    finally:
        if (d / "supervisor.pid").exists():
            subprocess.run(
                [sys.executable, "-m", "inlet.services.cli.main", "stack", "down", "--dir", str(d)],
                capture_output=True,
                timeout=300,
            )
        deadline = time.monotonic() + 30
        while processes_mentioning(str(d)) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = processes_mentioning(str(d))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        source_pg.stop()
        assert not left, f"processes of the stack left running: {left}"
