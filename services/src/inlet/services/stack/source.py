"""The user's PostgreSQL as the stack's source (``inlet stack up --source URL``).

:func:`preflight` checks what replication needs of the source before anything starts and returns
one line per problem, each naming the fix: the server answers, ``wal_level`` is ``logical``, the
role may replicate (superuser, ``REPLICATION``, or member of ``rds_replication``), it may read
every replicated table, a replication slot is free, and the publication exists or the role may
create it; an existing publication that would publish a replicated partitioned table's changes
under its partitions' names (without ``publish_via_partition_root``) is refused with the ALTER that
fixes it. The stack's slot and publication are both named :func:`replication_name` of its
directory. :func:`slot_state` is what ``inlet stack status`` shows (the WAL the slot holds back),
:func:`drop_replication` what ``inlet stack down --drop-slot`` does. Nothing here creates a
database on the source; the objects made there are the slot, the publication, and (by the
supervisor, for ``inlet backfill``) the schema ``inlet`` with Debezium's signal table.
"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from inlet.services.source_tables import (
    VIA_ROOT,
    create_publication,
    matching_tables,
    partitioned_tables,
    via_root_supported,
)
from inlet.services.stack.processes import StackError

CONNECT_TIMEOUT_S = 10
_SHOWN_TABLES = 5


def mask_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (for state files, logs and output)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def same_source(a: str, b: str) -> bool:
    """Whether two URLs name the same server, database and role (a changed password is the same)."""

    def key(url: str) -> dict[str, str]:
        info = {k: str(v) for k, v in conninfo_to_dict(url).items() if v is not None}
        info.pop("password", None)
        return info

    return key(a) == key(b)


def database_of(url: str) -> str:
    """The database a source URL names (its user's name when it names none, as libpq does)."""
    info = conninfo_to_dict(url)
    return str(info.get("dbname") or info.get("user") or "postgres")


def replication_name(directory: Path) -> str:
    """The slot and publication name of the stack in ``directory``.

    ``inlet_<basename>_<hash>``: the directory's base name in lower case with every run of other
    characters than ``[a-z0-9_]`` made one ``_`` (at most 40 characters), then the first 8 hex
    digits of the SHA-256 of the absolute path - a valid PostgreSQL identifier of at most 55
    characters, and two stack directories never share a slot.
    """
    path = str(Path(directory).resolve())
    base = re.sub(r"[^a-z0-9_]+", "_", Path(path).name.lower()).strip("_")[:40]
    digest = hashlib.sha256(path.encode()).hexdigest()[:8]
    return f"inlet_{base}_{digest}" if base else f"inlet_{digest}"


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _names(tables: Sequence[tuple[str, str]]) -> str:
    shown = ", ".join(f"{s}.{t}" for s, t in tables[:_SHOWN_TABLES])
    more = len(tables) - _SHOWN_TABLES
    return shown + (f" and {more} more" if more > 0 else "")


def _quoted(tables: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{sql.Identifier(s).as_string()}.{sql.Identifier(t).as_string()}" for s, t in tables)


@dataclass
class SourceCheck:
    """What :func:`preflight` found: problems (the stack must not start), warnings, and facts."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    role: str = ""
    superuser: bool = False
    tables: list[tuple[str, str]] = field(default_factory=list)  # the tables --tables matches
    partitioned: list[tuple[str, str]] = field(default_factory=list)  # those that are partitioned roots
    via_root: bool = True  # the server has publish_via_partition_root (PostgreSQL 13+)
    publication_exists: bool = False
    publication_owned: bool = False  # by the role, and not FOR ALL TABLES: Debezium may alter it


def preflight(url: str, globs: Sequence[str], name: str) -> SourceCheck:
    """Check the source at ``url`` for a stack replicating ``globs`` through slot/publication ``name``."""
    check = SourceCheck()
    try:
        conn = _connect(url)
    except psycopg.Error as e:
        check.problems.append(
            f"cannot connect to the source {mask_url(url)}: {_first_line(e)} "
            "(check the URL, the password, and that the server's pg_hba.conf admits this host)"
        )
        return check
    with conn:
        _check(conn, check, globs, name)
    return check


def _check(conn: psycopg.Connection[Any], check: SourceCheck, globs: Sequence[str], name: str) -> None:
    row = conn.execute(
        """SELECT current_user, r.rolsuper, r.rolreplication, current_setting('wal_level'),
                  EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication')
                    AND pg_has_role(current_user, 'rds_replication', 'member'),
                  current_database(), has_database_privilege(current_database(), 'CREATE')
           FROM pg_roles r WHERE r.rolname = current_user"""
    ).fetchone()
    assert row is not None
    role, superuser, replication, wal_level, rds_replication, database, may_create = row
    check.role, check.superuser = role, bool(superuser)
    if wal_level != "logical":
        check.problems.append(
            f"the source's wal_level is {wal_level}, not logical: run ALTER SYSTEM SET wal_level = logical "
            "as a superuser and restart the server"
        )
    if not (superuser or replication or rds_replication):
        check.problems.append(
            f"role {role} may not replicate: run ALTER ROLE {sql.Identifier(role).as_string()} REPLICATION "
            "as a superuser (on Amazon RDS: GRANT rds_replication TO the role)"
        )
    check.tables = matching_tables(conn, globs)
    check.partitioned = partitioned_tables(conn, globs)
    check.via_root = via_root_supported(conn)
    if check.partitioned and not check.via_root:
        check.problems.append(
            f"the source is PostgreSQL {conn.info.server_version // 10000}, which publishes the changes of "
            f"partitioned tables ({_names(check.partitioned)}) under their partitions' names: replicating "
            "them needs PostgreSQL 13 or later (publish_via_partition_root); leave them out of --tables"
        )
    if not check.tables:
        check.warnings.append(
            f"no table in database {database} matches --tables {','.join(globs)}; nothing replicates "
            "until one is created"
        )
    unreadable = [
        (s, t)
        for s, t in check.tables
        if not conn.execute(
            "SELECT has_table_privilege(format('%%I.%%I', %s::text, %s::text), 'SELECT')", (s, t)
        ).fetchone()[0]  # type: ignore[index]
    ]
    if unreadable:
        check.problems.append(
            f"role {role} lacks SELECT on {_names(unreadable)}: run GRANT SELECT ON {_quoted(unreadable)} "
            f"TO {sql.Identifier(role).as_string()}"
        )
    used, limit, ours = conn.execute(
        """SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int,
                  EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %s)""",
        (name,),
    ).fetchone()  # type: ignore[misc]
    if not ours and used >= limit:
        check.problems.append(
            f"no free replication slot on the source ({used} of max_replication_slots = {limit} in use): "
            "drop an unused one (SELECT pg_drop_replication_slot('NAME')) or raise max_replication_slots"
        )
    _check_publication(conn, check, name, database, bool(may_create))


def _not_owned(conn: psycopg.Connection[Any], tables: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The tables whose owner the current role is not (nor a member of)."""
    return [
        (s, t)
        for s, t in tables
        if not conn.execute(
            """SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s""",
            (s, t),
        ).fetchone()[0]  # type: ignore[index]
    ]


def _check_publication(
    conn: psycopg.Connection[Any], check: SourceCheck, name: str, database: str, may_create: bool
) -> None:
    via_root = "pubviaroot" if check.via_root else "false"
    pub = conn.execute(
        f"""SELECT pg_get_userbyid(pubowner) = current_user, puballtables, {via_root}
            FROM pg_publication WHERE pubname = %s""",
        (name,),
    ).fetchone()
    if pub is not None:
        check.publication_exists = True
        check.publication_owned = bool(pub[0]) and not pub[1]
        if check.partitioned and check.via_root and not pub[2]:
            # changes would stream under each partition's name, into lake tables of their own
            check.problems.append(
                f"publication {name} publishes the changes of {_names(check.partitioned)} under their "
                f"partitions' names, not the partitioned table's: as its owner run ALTER PUBLICATION "
                f"{name} SET ({VIA_ROOT});"
            )
        if pub[1]:
            return
        if check.publication_owned and not check.superuser:
            # Debezium sets the publication's tables at every start: only to tables the role owns
            not_owned = _not_owned(conn, check.tables)
            if not_owned:
                check.problems.append(
                    f"role {check.role} may not add {_names(not_owned)} to its publication {name} (it does "
                    f"not own them): leave them out of --tables, or as a superuser run DROP PUBLICATION "
                    f"{name}; CREATE PUBLICATION {name} FOR ALL TABLES WITH ({VIA_ROOT})"
                )
            return
        published = set(
            conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,)
            ).fetchall()
        )
        missing = [t for t in check.tables if t not in published]
        if missing and not check.publication_owned:
            check.warnings.append(
                f"publication {name} lacks {_names(missing)}: their changes do not replicate until "
                f"a superuser runs ALTER PUBLICATION {name} ADD TABLE {_quoted(missing)}"
            )
        return
    if check.superuser:
        return
    not_owned = _not_owned(conn, check.tables)
    if not_owned or not may_create:
        why = (
            f"it does not own {_names(not_owned)}" if not_owned else f"it lacks CREATE on database {database}"
        )
        check.problems.append(
            f"publication {name} does not exist and role {check.role} may not create it ({why}): "
            f"as a superuser run CREATE PUBLICATION {name} FOR ALL TABLES WITH ({VIA_ROOT})"
        )


def publication_mode(check: SourceCheck) -> str:
    """Debezium's ``publication.autocreate.mode`` for the source :func:`preflight` described.

    A publication the role did not make (a DBA's, or one FOR ALL TABLES) is used as it is
    (``disabled``); else a superuser gets one FOR ALL TABLES (tables created later replicate
    too), any other role one for the matched tables (``filtered``: Debezium sets its tables at
    every start, which needs the role to own them).
    """
    if check.publication_exists and not check.publication_owned:
        return "disabled"
    return "all_tables" if check.superuser else "filtered"


def ensure_publication(url: str, name: str, check: SourceCheck) -> None:
    """Create publication ``name`` as Debezium's ``publication_mode`` would, if it does not exist."""
    if check.publication_exists:
        return
    with _connect(url) as conn:
        if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone():
            return
        # the roots of partitioned tables, never their partitions: published via the root
        create_publication(conn, name, None if check.superuser else check.tables)


@dataclass(frozen=True)
class SlotState:
    """A replication slot as ``inlet stack status`` shows it."""

    slot: str
    exists: bool
    active: bool = False
    retained_wal_bytes: int = 0  # pg_current_wal_lsn() - restart_lsn: WAL the server keeps for it


def slot_state(url: str, name: str) -> SlotState:
    """The slot ``name`` on the source: whether it exists, is in use, and the WAL it holds back."""
    with _connect(url) as conn:
        row = conn.execute(
            """SELECT active, COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
               FROM pg_replication_slots WHERE slot_name = %s""",
            (name,),
        ).fetchone()
    if row is None:
        return SlotState(name, exists=False)
    return SlotState(name, exists=True, active=bool(row[0]), retained_wal_bytes=int(row[1]))


def drop_slot(url: str, name: str, wait_s: float = 15.0) -> bool:
    """Drop the slot ``name`` if it exists; wait ``wait_s`` for it to go idle (a stopped connector's
    server process lingers briefly), then raise. True if a slot was dropped."""
    deadline = time.monotonic() + wait_s
    with _connect(url) as conn:
        while True:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,)
            ).fetchone()
            if row is None:
                return False
            if row[0] is None:
                try:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
                    return True
                except psycopg.errors.UndefinedObject:
                    return False
                except psycopg.errors.ObjectInUse:
                    pass
            if time.monotonic() > deadline:
                raise StackError(
                    f"replication slot {name} is still active (server process {row[0]}): stop what "
                    "replicates from it, then run this again"
                )
            time.sleep(0.2)


def drop_replication(url: str, name: str) -> dict[str, bool]:
    """Drop the slot and the publication ``name`` on the source (each only if it exists)."""
    dropped_slot = drop_slot(url, name)
    with _connect(url) as conn:
        exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
        if exists:
            try:
                conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                raise StackError(
                    f"dropped slot {name}, but role {conn.info.user} may not drop publication {name}: "
                    f"its owner or a superuser runs DROP PUBLICATION {name}"
                ) from None
    return {"slot_dropped": dropped_slot, "publication_dropped": bool(exists)}
