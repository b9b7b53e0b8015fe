"""The source's tables as Inlet replicates them, and the publication that carries their changes.

A partitioned table replicates as one table, its root (issue #32): :func:`matching_tables` lists
ordinary tables and partitioned roots (``relkind`` 'r' or 'p') that are no partition themselves;
the publications Inlet makes publish ``WITH (publish_via_partition_root = true)`` (PostgreSQL 13+,
:func:`create_publication`), so a change to any partition, also one created or attached later,
is published under the root's name and Debezium emits it on the root's topic. Debezium's own
table filter (:func:`debezium_include_list`) leaves the partitions that exist out, so its
snapshots and its filtered publication name roots only.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import sql

#: the publication option that publishes a partition's changes under its root's name
VIA_ROOT = "publish_via_partition_root = true"
#: the first PostgreSQL (server_version_num) with publish_via_partition_root
VIA_ROOT_SINCE = 130000

_TABLES = """SELECT n.nspname, c.relname, c.relkind = 'p' FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relkind IN ('r', 'p') AND c.relispartition = %s
               AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
             ORDER BY 1, 2"""


def _matching(rows: Iterable[Any], globs: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(r) for r in rows if any(fnmatch.fnmatchcase(f"{r[0]}.{r[1]}", g) for g in globs)]


def matching_tables(conn: psycopg.Connection[Any], globs: Sequence[str]) -> list[tuple[str, str]]:
    """The ordinary and partitioned tables whose ``schema.table`` matches one of ``globs``; a
    partition is no table of its own (its rows are its root's)."""
    return [(s, t) for s, t, _ in _matching(conn.execute(_TABLES, (False,)).fetchall(), globs)]


def partitioned_tables(conn: psycopg.Connection[Any], globs: Sequence[str]) -> list[tuple[str, str]]:
    """The partitioned roots among :func:`matching_tables`."""
    return [(s, t) for s, t, p in _matching(conn.execute(_TABLES, (False,)).fetchall(), globs) if p]


def partitions(conn: psycopg.Connection[Any], globs: Sequence[str]) -> list[tuple[str, str]]:
    """The partitions (at any level) whose ``schema.table`` matches one of ``globs``."""
    return [(s, t) for s, t, _ in _matching(conn.execute(_TABLES, (True,)).fetchall(), globs)]


def via_root_supported(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server has ``publish_via_partition_root`` (PostgreSQL 13+)."""
    return conn.info.server_version >= VIA_ROOT_SINCE


def create_publication(
    conn: psycopg.Connection[Any], name: str, tables: Sequence[tuple[str, str]] | None
) -> None:
    """``CREATE PUBLICATION name`` FOR ALL TABLES (``tables`` None) or for ``tables`` (none: an
    empty one), published via the partitions' roots where the server can."""
    what: sql.Composable
    if tables is None:
        what = sql.SQL(" FOR ALL TABLES")
    elif tables:
        what = sql.SQL(" FOR TABLE {}").format(sql.SQL(", ").join(sql.Identifier(s, t) for s, t in tables))
    else:
        what = sql.SQL("")
    options = sql.SQL(f" WITH ({VIA_ROOT})" if via_root_supported(conn) else "")
    conn.execute(sql.SQL("CREATE PUBLICATION {}{}{}").format(sql.Identifier(name), what, options))


def include_regexes(globs: Sequence[str], excluded: Sequence[tuple[str, str]] = ()) -> str:
    """Debezium's ``table.include.list`` (comma-separated regexes, each matched against the whole
    ``schema.table``) for ``globs``, never matching the tables ``excluded``."""
    regexes = [fnmatch.translate(g).removeprefix("(?s:").removesuffix(")\\Z") for g in globs]
    if not excluded:
        return ",".join(regexes)
    names = "|".join(re.escape(f"{s}.{t}") for s, t in excluded)
    return ",".join(f"(?!(?:{names})$){r}" for r in regexes)


def debezium_include_list(conn: psycopg.Connection[Any], globs: Sequence[str]) -> str:
    """:func:`include_regexes` of ``globs`` without the partitions that exist now: Debezium's own
    snapshots read a root (its partitions' rows with it), never a partition again as a table of
    its own, and the publication it keeps filtered lists roots. Changes to partitions made later
    are published via their root anyway."""
    return include_regexes(globs, partitions(conn, globs))
