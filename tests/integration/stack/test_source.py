"""``inlet stack up --source``'s checks of the user's PostgreSQL, against real servers.

Each problem :func:`preflight` reports is produced for real: a role without REPLICATION, a role
without SELECT on a table, a role that may not create the publication, a server with
``wal_level=replica`` whose only replication slot is taken, a server nobody listens on. Then the
slot as ``stack status`` shows it (the WAL it holds back) and ``stack down --drop-slot``'s drop.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from inlet.services.stack import EmbeddedPostgres
from inlet.services.stack.processes import StackError, free_port
from inlet.services.stack.source import (
    SourceCheck,
    drop_replication,
    drop_slot,
    ensure_publication,
    mask_url,
    preflight,
    publication_mode,
    replication_name,
    slot_state,
)


def as_role(url: str, role: str, password: str = "pw") -> str:
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{role}:{password}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def roles(pg_url: str) -> Iterator[list[str]]:
    """Roles the test creates (cluster-wide), dropped with what they own afterwards."""
    made: list[str] = []
    yield made
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for role in made:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def make_role(pg_url: str, roles: list[str], attributes: str) -> str:
    role = "r_" + uuid.uuid4().hex[:10]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw' {attributes}")
        conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    roles.append(role)
    return role


def test_replication_name_is_a_postgres_identifier_unique_per_directory(tmp_path: Path) -> None:
    a = replication_name(tmp_path / "My Stack-dir.2026")
    assert a.startswith("inlet_my_stack_dir_2026_") and len(a) == len("inlet_my_stack_dir_2026_") + 8
    assert replication_name(tmp_path / "x" / "My Stack-dir.2026") != a
    long = replication_name(tmp_path / ("Ä" * 10 + "b" * 100))
    assert len(long) <= 63 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in long)
    assert replication_name(tmp_path / "a" / ".." / "My Stack-dir.2026") == a


def test_mask_url_hides_only_the_password() -> None:
    assert mask_url("postgresql://u:s3cret@db.example:6543/app") == "postgresql://u:***@db.example:6543/app"
    assert mask_url("postgresql://u@db/app") == "postgresql://u@db/app"


def test_a_replication_role_owning_its_tables_passes(pg_url: str, roles: list[str]) -> None:
    role = make_role(pg_url, roles, "REPLICATION")
    url = as_role(pg_url, role)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE parted (id int PRIMARY KEY) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)")
    name = "inlet_t_" + uuid.uuid4().hex[:8]
    check = preflight(url, ["public.*"], name)
    assert check.problems == [] and check.warnings == []
    # a partition is no table of its own: its rows are its root's
    assert check.tables == [("public", "items"), ("public", "parted")] and not check.superuser
    assert check.partitioned == [("public", "parted")]
    assert publication_mode(check) == "filtered"
    ensure_publication(url, name, check)  # as the copy load needs it before the slot
    with psycopg.connect(pg_url) as conn:
        published = conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 2", (name,)
        ).fetchall()
        [(via_root,)] = conn.execute(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (name,)
        ).fetchall()
    # the root, not its partitions: their changes are published under the root's name
    assert published == [("public", "items"), ("public", "parted")] and via_root
    again = preflight(url, ["public.*"], name)
    assert again.publication_exists and again.publication_owned and publication_mode(again) == "filtered"
    # a matched table the role does not own cannot join the publication Debezium keeps filtered
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE theirs (id int PRIMARY KEY)")
        conn.execute(f"GRANT SELECT ON theirs TO {role}")
    assert preflight(url, ["public.*"], name).problems == [
        f"role {role} may not add public.theirs to its publication {name} (it does not own them): leave "
        f"them out of --tables, or as a superuser run DROP PUBLICATION {name}; CREATE PUBLICATION {name} "
        "FOR ALL TABLES WITH (publish_via_partition_root = true)"
    ]
    assert preflight(url, ["public.items", "public.parted"], name).problems == []
    assert drop_replication(url, name) == {"slot_dropped": False, "publication_dropped": True}


def test_role_without_replication_or_select_is_refused_naming_the_fix(pg_url: str, roles: list[str]) -> None:
    role = make_role(pg_url, roles, "")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE readable (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE secret (id int PRIMARY KEY)")
        conn.execute(f"GRANT SELECT ON readable TO {role}")
    check = preflight(as_role(pg_url, role), ["public.*"], "inlet_t_x")
    assert check.problems == [
        f'role {role} may not replicate: run ALTER ROLE "{role}" REPLICATION as a superuser '
        "(on Amazon RDS: GRANT rds_replication TO the role)",
        f'role {role} lacks SELECT on public.secret: run GRANT SELECT ON "public"."secret" TO "{role}"',
        f"publication inlet_t_x does not exist and role {role} may not create it (it does not own "
        "public.readable, public.secret): as a superuser run CREATE PUBLICATION inlet_t_x FOR ALL TABLES "
        "WITH (publish_via_partition_root = true)",
    ]
    # a DBA's publication is used as it is, and lifts the last problem
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION inlet_t_x FOR ALL TABLES")
    try:
        check = preflight(as_role(pg_url, role), ["public.readable"], "inlet_t_x")
        assert [p.split(":")[0] for p in check.problems] == [f"role {role} may not replicate"]
        assert publication_mode(check) == "disabled"
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP PUBLICATION inlet_t_x")


def test_a_dba_publication_without_publish_via_partition_root_is_refused_naming_the_fix(
    pg_url: str, roles: list[str]
) -> None:
    """A publication a DBA made is used as it is: without publish_via_partition_root it would
    publish a partitioned table's changes under its partitions' names (topics and lake tables of
    their own, the root's table frozen at the load), so ``up`` stops with the ALTER to run."""
    role = make_role(pg_url, roles, "REPLICATION")
    name = "inlet_t_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY)")
        conn.execute(
            "CREATE TABLE measures (id int, day date, PRIMARY KEY (id, day)) PARTITION BY RANGE (day)"
        )
        conn.execute(
            "CREATE TABLE measures_2026 PARTITION OF measures FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')"
        )
        conn.execute(f"GRANT SELECT ON plain, measures TO {role}")
        conn.execute(f"CREATE PUBLICATION {name} FOR ALL TABLES")
    url = as_role(pg_url, role)
    try:
        check = preflight(url, ["public.*"], name)
        assert check.problems == [
            f"publication {name} publishes the changes of public.measures under their partitions' names, "
            f"not the partitioned table's: as its owner run ALTER PUBLICATION {name} SET "
            "(publish_via_partition_root = true);"
        ]
        assert preflight(url, ["public.plain"], name).problems == []  # no partitioned table replicates
        with psycopg.connect(pg_url, autocommit=True) as conn:  # the fix the line names
            conn.execute(f"ALTER PUBLICATION {name} SET (publish_via_partition_root = true)")
        check = preflight(url, ["public.*"], name)
        assert check.problems == [] and publication_mode(check) == "disabled"
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP PUBLICATION {name}")


def test_no_matching_table_is_a_warning(pg_url: str) -> None:
    check = preflight(pg_url, ["shop.*"], "inlet_t_none")
    assert check.problems == []
    assert len(check.warnings) == 1 and "matches --tables shop.*" in check.warnings[0]


@pytest.fixture(scope="module")
def replica_server() -> Iterator[EmbeddedPostgres]:
    """A server without logical decoding whose one replication slot is taken."""
    with EmbeddedPostgres(settings={"wal_level": "replica", "max_replication_slots": 1}) as pg:
        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_create_physical_replication_slot('someone_elses')")
        yield pg


def test_wal_level_and_a_full_slot_table_are_refused(replica_server: EmbeddedPostgres) -> None:
    check = preflight(replica_server.url(), ["public.*"], "inlet_t_full")
    assert check.problems == [
        "the source's wal_level is replica, not logical: run ALTER SYSTEM SET wal_level = logical as a "
        "superuser and restart the server",
        "no free replication slot on the source (1 of max_replication_slots = 1 in use): drop an unused "
        "one (SELECT pg_drop_replication_slot('NAME')) or raise max_replication_slots",
    ]
    # our own slot, already there, needs no free one
    assert not any(
        "free replication slot" in p for p in preflight(replica_server.url(), [], "someone_elses").problems
    )


def test_an_unreachable_source_is_one_line_without_the_password() -> None:
    url = f"postgresql://me:s3cret@127.0.0.1:{free_port()}/app"
    check = preflight(url, ["public.*"], "inlet_t_gone")
    assert len(check.problems) == 1
    problem = check.problems[0]
    assert problem.startswith("cannot connect to the source postgresql://me:***@127.0.0.1:")
    assert "s3cret" not in problem and "\n" not in problem


def test_slot_state_shows_retained_wal_and_drop_is_idempotent(pg_url: str, roles: list[str]) -> None:
    role = make_role(pg_url, roles, "REPLICATION")
    url = as_role(pg_url, role)
    name = "inlet_t_" + uuid.uuid4().hex[:8]
    assert slot_state(url, name).exists is False
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (id int, v text)")
        ensure_publication(url, name, SourceCheck(tables=[("public", "filler")]))
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
        before = slot_state(url, name)
        conn.execute("INSERT INTO filler SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g")
    assert before.exists and not before.active
    # the rows' WAL is held (once written: the test server commits asynchronously)
    deadline = time.monotonic() + 10
    while (after := slot_state(url, name)).retained_wal_bytes < before.retained_wal_bytes + 100_000:
        assert time.monotonic() < deadline, f"the slot holds only {after.retained_wal_bytes} bytes"
        time.sleep(0.1)
    # a slot something streams from is not dropped: the error says so
    repl = psycopg.connect(url, replication="database", autocommit=True)
    try:
        repl.pgconn.send_query(
            f"START_REPLICATION SLOT {name} LOGICAL 0/0 (proto_version '1', publication_names '{name}')".encode()
        )
        deadline = time.monotonic() + 10
        while not slot_state(url, name).active:
            assert time.monotonic() < deadline, "the slot did not become active"
            time.sleep(0.05)
        with pytest.raises(StackError, match=f"replication slot {name} is still active"):
            drop_slot(url, name, wait_s=0.5)
    finally:
        repl.pgconn.finish()  # the connection is streaming: no more commands on it
    # once the stream ends the slot is dropped (drop waits for its server process to go)
    assert drop_replication(url, name) == {"slot_dropped": True, "publication_dropped": True}
    with psycopg.connect(pg_url) as conn:
        assert not conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (name,)).fetchone()
        assert not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    assert drop_replication(url, name) == {"slot_dropped": False, "publication_dropped": False}


def test_a_stack_directory_keeps_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another --source for a directory, or --source for one of the embedded PostgreSQL, is one
    line (naming no password) before anything connects or starts; so is --drop-slot without a source."""
    from inlet.services.cli.main import main
    from inlet.services.stack.supervisor import StackConfig

    theirs, embedded = tmp_path / "theirs", tmp_path / "embedded"
    StackConfig(dir=str(theirs), source="postgresql://a:pw-one@db.example:5432/shop").save()
    StackConfig(dir=str(embedded)).save()
    assert (theirs / "config.json").stat().st_mode & 0o777 == 0o600  # it holds the password
    cases = [
        (
            ["up", "--dir", str(theirs), "--source", "postgresql://a:pw-two@db.example:5432/other"],
            "another source",
        ),
        (
            ["up", "--dir", str(embedded), "--source", "postgresql://a:pw-two@db.example/shop"],
            "its own PostgreSQL",
        ),
        (["down", "--dir", str(embedded), "--drop-slot"], "--drop-slot is for a stack started with --source"),
    ]
    for argv, reason in cases:
        assert main(["stack", *argv]) == 2
        err = capsys.readouterr().err
        assert reason in err and len(err.strip().splitlines()) == 1, err
        assert "pw-" not in err
    assert "db.example:5432/shop" in json.loads((theirs / "config.json").read_text())["source"]


def test_status_and_logs_of_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``stack status`` and ``stack logs`` on a directory that holds no stack say so in one line and
    exit 1; ``stack logs`` lists a stack's processes and prints the tail of one's log."""
    from inlet.services.cli.main import main
    from inlet.services.stack.supervisor import StackConfig

    empty = tmp_path / "nothing-here"
    for argv in (["status", "--dir", str(empty)], ["logs", "--dir", str(empty)]):
        assert main(["stack", *argv]) == 1
        err = capsys.readouterr().err
        assert f"no stack in {empty}" in err and len(err.strip().splitlines()) == 1, err

    stack = tmp_path / "stack"
    StackConfig(dir=str(stack)).save()
    (stack / "logs").mkdir()
    (stack / "logs" / "writer.log").write_text("".join(f"line {i}\n" for i in range(200)))
    (stack / "logs" / "kafka.log").write_text("up\n")
    assert main(["stack", "logs", "--dir", str(stack)]) == 0
    assert capsys.readouterr().out.split() == ["kafka", "writer"]
    assert main(["stack", "logs", "--dir", str(stack), "writer", "-n", "3"]) == 0
    assert capsys.readouterr().out == "line 197\nline 198\nline 199\n"
    assert main(["stack", "logs", "--dir", str(stack), "coordinator"]) == 2
    assert "the logs are: kafka, writer" in capsys.readouterr().err
