"""Debezium's heartbeat table: what keeps the replication slot moving while the replicated tables are idle.

Debezium confirms to PostgreSQL only positions of changes it received. While the replicated tables
do not change, other writes on the server (other tables, other databases) still make WAL, and the
slot holds all of it until PostgreSQL drops the slot at ``max_slot_wal_keep_size``. Debezium's
``heartbeat.action.query`` writes a row of a heartbeat table every ``heartbeat.interval.ms``; when
that table is in the slot's publication, the change reaches Debezium, which then confirms its
position (the table is not in the include list, so no change event is emitted for it).

The stack creates the table in a database it runs itself and uses it in a ``--source`` database
where it exists (:data:`CREATE_SQL`, run by whoever may create it there); the deploy files create it
in ``deploy/postgres/initdb`` and name it in the connector's publication.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

SCHEMA = "inlet"
TABLE = "debezium_heartbeat"
QUALIFIED = f"{SCHEMA}.{TABLE}"
CREATE_SQL = (
    f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}; "
    f"CREATE TABLE IF NOT EXISTS {QUALIFIED} (id integer PRIMARY KEY, ts timestamptz NOT NULL DEFAULT now())"
)
ACTION_QUERY = (
    f"INSERT INTO {QUALIFIED} (id, ts) VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET ts = EXCLUDED.ts"
)

log = logging.getLogger(__name__)


def create_table(url: str) -> None:
    """Create the heartbeat table (and its schema) in the database at ``url`` if it is missing."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in CREATE_SQL.split("; "):
            conn.execute(statement)  # constant SQL


def _exists(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (QUALIFIED,)).fetchone() == (True,)


def connector_settings(url: str, publication: str, publication_mode: str) -> dict[str, str]:
    """Debezium's ``heartbeat.action.query`` when the heartbeat table exists at ``url`` and the
    publication holds it (``publication_mode`` ``all_tables``: Debezium makes one FOR ALL TABLES; an
    existing publication must list it); otherwise nothing, with one warning saying what to run."""
    if publication_mode == "filtered":
        log.warning(
            "publication %s is filtered (Debezium sets its tables to the replicated ones at every start), "
            "so the heartbeat table cannot be in it: while the replicated tables are idle the slot does not "
            "advance; a publication FOR ALL TABLES (or a DBA's listing %s) avoids that",
            publication,
            QUALIFIED,
        )
        return {}
    with psycopg.connect(url, autocommit=True) as conn:
        if not _exists(conn):
            log.warning(
                "no heartbeat table %s in the source: while the replicated tables are idle the slot does "
                "not advance and the source keeps WAL for it; create it with: %s",
                QUALIFIED,
                CREATE_SQL,
            )
            return {}
        row = conn.execute(
            "SELECT puballtables FROM pg_publication WHERE pubname = %s", (publication,)
        ).fetchone()
        if row is None:
            included = publication_mode == "all_tables"
        else:
            included = (
                bool(row[0])
                or conn.execute(
                    "SELECT 1 FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s AND tablename = %s",
                    (publication, SCHEMA, TABLE),
                ).fetchone()
                is not None
            )
    if not included:
        log.warning(
            "the heartbeat table %s is not in publication %s: while the replicated tables are idle the "
            "slot does not advance; as its owner run ALTER PUBLICATION %s ADD TABLE %s",
            QUALIFIED,
            publication,
            publication,
            QUALIFIED,
        )
        return {}
    return {"heartbeat.action.query": ACTION_QUERY}
