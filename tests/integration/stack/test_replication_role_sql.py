"""deploy/sql/replication-role.sql, run with the real psql on the real PostgreSQL: the role it makes
is no superuser, yet Inlet's source preflight accepts it, `inlet writer load` reads the tables as it,
and it runs the connector's heartbeat query; it may not write the replicated tables."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from inlet.core import HudiTable
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.stack.postgres import postgres_bin_dir
from inlet.services.stack.source import preflight, publication_mode
from inlet.services.writer import initial_load

ROOT = Path(__file__).resolve().parents[3]
SQL = ROOT / "deploy" / "sql" / "replication-role.sql"
CONNECTOR = ROOT / "deploy" / "connect" / "postgres-connector.json"


def as_role(url: str, role: str, password: str = "pw") -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def role(pg_url: str) -> Iterator[str]:
    name = "repl_" + uuid.uuid4().hex[:10]
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            conn.execute(f"DROP OWNED BY {name}")
            conn.execute(f"DROP ROLE {name}")


def run_sql_file(url: str, **variables: str) -> subprocess.CompletedProcess[str]:
    argv = [str(postgres_bin_dir() / "psql"), url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(SQL)]
    for k, v in variables.items():
        argv += ["-v", f"{k}={v}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_replication_role_replicates_without_superuser(
    pg_url: str, role: str, slot: str, coordinator: RunningServer, lake: Path
) -> None:
    publication = "pub_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # its own schema: the coordinator's tables are in public of this database
        conn.execute("CREATE SCHEMA shop")
        conn.execute("CREATE TABLE shop.customers (id bigint PRIMARY KEY, name text NOT NULL)")
        conn.execute("INSERT INTO shop.customers SELECT g, 'customer ' || g FROM generate_series(1, 50) g")
        dbname = conn.info.dbname

    for attempt in (1, 2):  # a second run changes nothing and does not fail
        done = run_sql_file(pg_url, role=role, password="pw", publication=publication, schema="shop")
        assert done.returncode == 0, f"run {attempt}: {done.stderr}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # a table created after the script, by the same administrator, is readable and published too
        conn.execute("CREATE TABLE shop.orders (id bigint PRIMARY KEY, customer bigint)")
        conn.execute("INSERT INTO shop.orders VALUES (1, 1), (2, 2)")
        # a partitioned table replicates as its root: the publication publishes via the root
        conn.execute(
            "CREATE TABLE shop.visits (id bigint, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)"
        )
        conn.execute(
            "CREATE TABLE shop.visits_26 PARTITION OF shop.visits FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')"
        )
        conn.execute("INSERT INTO shop.visits VALUES (1, '2026-05-01'), (2, '2026-06-01'), (3, '2026-07-01')")
        attrs = conn.execute(
            "SELECT rolsuper, rolreplication, rolcanlogin, rolcreatedb, rolcreaterole FROM pg_roles "
            "WHERE rolname = %s",
            (role,),
        ).fetchone()
        may_create = conn.execute(
            "SELECT has_database_privilege(%s, current_database(), 'CREATE')", (role,)
        ).fetchone()
    assert attrs == (False, True, True, False, False)
    assert may_create == (False,)

    url = as_role(pg_url, role)
    check = preflight(url, ["shop.*"], publication)
    assert check.problems == [] and check.warnings == [], (check.problems, check.warnings)
    assert not check.superuser
    assert check.tables == [("shop", "customers"), ("shop", "orders"), ("shop", "visits")]
    assert publication_mode(check) == "disabled"  # the administrator's publication, used as it is

    # `writer load` as the role: the slot, the snapshot and the COPY of every table
    with CoordinatorClient(coordinator.address) as client:
        summary = initial_load.load(
            url,
            ["shop.*"],
            client=client,
            lake_root=str(lake),
            topic_prefix="app",
            slot=slot,
            publication=publication,
        )
    assert sorted((r.table_id, r.rows) for r in summary.loaded) == [
        ("app.shop.customers", 50),
        ("app.shop.orders", 2),
        ("app.shop.visits", 3),
    ]
    got = HudiTable.open(str(lake / dbname / "shop" / "customers")).read(columns=["id"], meta_columns=False)
    assert sorted(got.column("id").to_pylist()) == list(range(1, 51))

    with psycopg.connect(url, autocommit=True) as conn:
        # the connector's heartbeat query runs as the role
        heartbeat = json.loads(CONNECTOR.read_text())["config"]["heartbeat.action.query"]
        conn.execute(heartbeat)
        conn.execute(heartbeat)
        # ... but it may not change the replicated tables
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM shop.customers")
