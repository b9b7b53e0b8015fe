"""``inlet backfill``'s checks before it signals Debezium, on a real PostgreSQL (issue #24 item 2).

A table that cannot be backfilled is one line on stderr (exit 2) and no signal is written; a good
request writes exactly one ``execute-snapshot`` signal naming the tables as Debezium's regular
expressions. The backfill itself, racing writes under the real connector, is
tests/integration/cdc_consumer/test_backfill_live.py.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from inlet.services import backfill
from inlet.services.cli.main import main
from inlet.services.stack.supervisor import STATE_FILE, StackConfig


def _signals(url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute("SELECT id, type, data FROM inlet.debezium_signal").fetchall()]  # type: ignore[misc]


def _cli(url: str, *tables: str) -> int:
    flags = ["--source", url, "--kafka-bootstrap", "127.0.0.1:1", "--topic-prefix", "app", "--no-wait"]
    return main(["backfill", *flags, *tables])


def test_bad_tables_are_refused_before_any_signal(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.keyed (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE public.loose (id int)")
    assert _cli(pg_url, "public.keyed") == 2
    assert "signal table inlet.debezium_signal does not exist" in capsys.readouterr().err

    backfill.ensure_signal_table(pg_url)
    backfill.ensure_signal_table(pg_url)  # idempotent
    # and with a role that may not create schemas, once the table exists (a DBA made it)
    role = f"r_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"REVOKE CREATE ON DATABASE {conn.info.dbname} FROM PUBLIC")
    try:
        backfill.ensure_signal_table(make_conninfo(pg_url, user=role))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")
    for tables, problem in [
        (["public.missing"], "table public.missing does not exist in the source"),
        (["public.keyed", "public.loose"], "table public.loose has no primary key"),
        (["orders"], "table 'orders' is not SCHEMA.TABLE"),
        (["inlet.debezium_signal"], "is the signal table"),
    ]:
        assert _cli(pg_url, *tables) == 2, tables
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and problem in err, err
    assert _signals(pg_url) == []

    # a broker that does not answer: nobody could follow the backfill, so no signal either
    flags = [
        "--source",
        pg_url,
        "--kafka-bootstrap",
        "127.0.0.1:1",
        "--topic-prefix",
        "app",
        "--timeout",
        "60",
    ]
    assert main(["backfill", *flags, "public.keyed"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach Kafka to follow the backfill" in err, err
    assert _signals(pg_url) == []

    assert _cli(pg_url, "public.keyed") == 0
    sent = json.loads(capsys.readouterr().out)
    [(signal_id, kind, data)] = _signals(pg_url)
    assert (signal_id, kind) == (sent["signal_id"], "execute-snapshot")
    collections = json.loads(data)["data-collections"]
    assert json.loads(data)["type"] == "incremental"
    assert [c for c in collections if re.fullmatch(c, "public.keyed")] == collections
    assert not re.fullmatch(collections[0], "publicXkeyed")  # the dot is escaped


def test_dir_needs_a_running_stack_that_replicates_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["backfill", "--dir", str(tmp_path), "public.t"]) == 2
    assert "no stack there" in capsys.readouterr().err
    StackConfig(dir=str(tmp_path), tables=("shop.*",)).save()
    assert main(["backfill", "--dir", str(tmp_path), "shop.t"]) == 2
    assert "the stack is not running" in capsys.readouterr().err
    state = {
        "state": "running",
        "addresses": {"kafka": {"bootstrap": "127.0.0.1:1"}, "postgres": {"url": "x"}},
    }
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    assert main(["backfill", "--dir", str(tmp_path), "public.t"]) == 2
    assert "public.t does not replicate in the stack" in capsys.readouterr().err
    assert main(["backfill", "public.t"]) == 2
    assert (
        "give --dir of a running stack, or --source, --kafka-bootstrap, --topic-prefix"
        in capsys.readouterr().err
    )
