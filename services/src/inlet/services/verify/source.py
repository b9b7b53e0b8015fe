"""The PostgreSQL side of ``inlet verify``: the tables, and their rows as the writer stores them.

Rows are read with the initial load's ``COPY`` rendering (:mod:`inlet.services.writer.initial_load`:
epoch microseconds for timestamps and times, days for dates, Debezium's ``MicroDuration`` for
intervals, numerics without typmod without trailing zeros, arrays as JSON, bytea as hex), parsed
by Arrow's CSV reader and typed as the writer types the column, so a source row and the lake row
the writer made of it are equal Arrow values. Columns without a rendering there (geometric types,
bit strings, arrays of other element types) are not compared.

A whole-table read is one ``COPY`` statement, i.e. one snapshot; rows are hashed a CSV block at a
time and only keys and hashes are kept. Rows of given keys are read with a predicate on the same
renderings (index-friendly where the rendering is the column itself: integers, text, uuid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from pyarrow import csv

from inlet.services.cdc_consumer.catalog import PostgresCatalog
from inlet.services.logs import log_event
from inlet.services.source_tables import matching_tables
from inlet.services.verify.compare import Hashed
from inlet.services.writer import initial_load
from inlet.services.writer.initial_load import TablePlan

log = logging.getLogger("inlet.verify")

# the PostgreSQL type of a rendering, by the type Arrow's CSV reader parses it as
_RENDERED_TYPES = {
    pa.int64(): "int8",
    pa.int32(): "int4",
    pa.int16(): "int2",
    pa.float32(): "float4",
    pa.float64(): "float8",
    pa.bool_(): "bool",
    pa.string(): "text",
}
_COLUMN_TYPES = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
"""


class SourceError(RuntimeError):
    """The source cannot be read as asked (one line)."""


@dataclasses.dataclass(frozen=True)
class SourceTable:
    """One source table: its renderable columns, primary key and the columns left out."""

    schema: str
    table: str
    plan: TablePlan  # plan.keys: the primary key (empty: none)
    unrendered: dict[str, str]  # column -> why it is not compared
    pg_types: dict[str, str]  # column -> its SQL type (format_type)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def keys(self) -> list[str]:
        return list(self.plan.keys)

    @property
    def columns(self) -> list[str]:
        return [c.name for c in self.plan.columns]

    @property
    def fields(self) -> list[pa.Field]:
        """The compared columns as the writer types them."""
        return [pa.field(c.name, c.target) for c in self.plan.columns]

    @property
    def match_columns(self) -> list[str]:
        """What rows are matched by: the primary key, or (no key) every compared column."""
        return self.keys or self.columns

    @property
    def key_schema(self) -> pa.Schema:
        types = {c.name: c.target for c in self.plan.columns}
        return pa.schema([pa.field(k, types[k]) for k in self.match_columns])

    def key_problem(self) -> str | None:
        """Why rows cannot be matched by key (None: they can)."""
        if not self.keys:
            return "no primary key"
        bad = [k for k in self.keys if k in self.unrendered]
        if bad:
            return f"primary key column {bad[0]!r} cannot be rendered: {self.unrendered[bad[0]]}"
        return None


def find_tables(
    conn: psycopg.Connection[Any], catalog: PostgresCatalog, globs: Sequence[str]
) -> list[SourceTable]:
    """The source tables matching ``globs`` (``schema.table``), as the initial load finds them."""
    found = []
    for schema, table in matching_tables(conn, globs):
        keys = initial_load.primary_key(conn, schema, table)
        columns, unrendered = initial_load.render_columns(catalog, schema, table)
        pg_types = dict(conn.execute(_COLUMN_TYPES, (schema, table)).fetchall())
        found.append(
            SourceTable(schema, table, TablePlan(schema, table, columns, keys), unrendered, pg_types)
        )
    return found


def _key_texts(values: pa.ChunkedArray | pa.Array) -> list[str]:
    """Key values as the text PostgreSQL reads for their rendering (see :func:`key_condition`)."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    t = arr.type
    if pa.types.is_timestamp(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_date32(t):
        arr = arr.cast(pa.int32())
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [v.hex() for v in arr.to_pylist()]
    elif pa.types.is_decimal(t):
        return [format(v, "f") for v in arr.to_pylist()]
    elif pa.types.is_floating(t):
        return [repr(v) for v in arr.to_pylist()]
    elif pa.types.is_boolean(t):
        return ["true" if v else "false" for v in arr.to_pylist()]
    return [str(v) for v in arr.to_pylist()]


def key_condition(st: SourceTable, keys: pa.Table) -> str:
    """A WHERE condition selecting the rows of ``keys`` (writer-typed key columns): each key column,
    or its rendering where that is not the column itself, compared with the key values."""
    by_name = {c.name: c for c in st.plan.columns}
    lhs, casts, arrays = [], [], []
    for i, name in enumerate(st.keys):
        col = by_name[name]
        ident = sql.Identifier(name).as_string(None)
        if col.select == ident:
            lhs.append(ident)
            casts.append(f"u.c{i}::{st.pg_types[name]}")
        else:
            rendered = "text" if pa.types.is_decimal(col.csv_type) else _RENDERED_TYPES.get(col.csv_type)
            if rendered is None:
                raise SourceError(
                    f"{st.name}: key column {name!r} ({col.csv_type}) cannot be selected by value"
                )
            lhs.append(f"({col.select})")
            casts.append(f"u.c{i}::{rendered}")
        arrays.append(sql.Literal(_key_texts(keys.column(name))).as_string(None) + "::text[]")
    names = ", ".join(f"c{i}" for i in range(len(st.keys)))
    return f"({', '.join(lhs)}) IN (SELECT {', '.join(casts)} FROM unnest({', '.join(arrays)}) AS u({names}))"


class SourceReader:
    """Reads source tables over one connection (autocommit: each statement its own snapshot)."""

    def __init__(self, url: str, workdir: Path) -> None:
        self.url = url
        self.workdir = workdir
        self.conn = psycopg.connect(url, autocommit=True)  # session settings as the initial load's
        self.catalog = PostgresCatalog(url)

    def close(self) -> None:
        self.catalog.close()
        self.conn.close()

    @property
    def database(self) -> str:
        return str(self.conn.info.dbname)

    def tables(self, globs: Sequence[str]) -> list[SourceTable]:
        return find_tables(self.conn, self.catalog, globs)

    def _copy(self, st: SourceTable, where: str = "", progress: Callable[[int], None] | None = None) -> Path:
        """The rendered rows (``COPY`` as CSV) in a file of the work directory; ``progress(bytes)``."""
        path = self.workdir / f"{st.schema}.{st.table}.csv"
        if progress is None:
            initial_load.copy_csv(self.conn, st.plan.copy_statement(where), path)
            return path
        written = reported = 0
        with path.open("wb") as out, self.conn.cursor().copy(st.plan.copy_statement(where)) as copy:
            for chunk in copy:  # about a row each
                written += out.write(chunk)
                if written - reported >= 1 << 20:
                    progress(written)
                    reported = written
        return path

    def read_hashed(
        self,
        st: SourceTable,
        progress: Callable[[str, int], None] | None = None,
    ) -> Hashed:
        """Every row of ``st`` (one statement: one snapshot) as keys + row hashes (keyed by every
        column when the table has no primary key). ``progress(what, count)``: bytes copied, then
        rows parsed."""
        started = time.monotonic()
        path = self._copy(st, progress=(lambda n: progress("bytes", n)) if progress is not None else None)
        copied = time.monotonic()
        read_options, parse_options, convert_options = initial_load.csv_options(st.plan, block_size=4 << 20)
        parts: list[Hashed] = []
        rows = 0
        try:
            with contextlib.ExitStack() as stack:
                batches: Any = []  # an empty file: no rows (Arrow's CSV reader refuses it)
                if path.stat().st_size:
                    batches = stack.enter_context(
                        csv.open_csv(
                            path,
                            read_options=read_options,
                            parse_options=parse_options,
                            convert_options=convert_options,
                        )
                    )
                for batch in batches:
                    data = initial_load.typed(st.plan, batch)
                    parts.append(Hashed.of(data, st.match_columns, st.columns))
                    rows += data.num_rows
                    if progress is not None:
                        progress("rows", rows)
        finally:
            path.unlink(missing_ok=True)
        log_event(
            log,
            logging.DEBUG,
            "source read",
            table=st.name,
            rows=rows,
            copy_s=round(copied - started, 3),
            parse_s=round(time.monotonic() - copied, 3),
        )
        return Hashed.concat(parts, st.key_schema)

    def read_rows(self, st: SourceTable, keys: pa.Table) -> pa.Table:
        """The current rows of ``keys`` (those still in the table), rendered and typed."""
        if keys.num_rows == 0:
            return _empty(st)
        path = self._copy(st, key_condition(st, keys))
        try:
            return initial_load.parse_csv(st.plan, path)
        finally:
            path.unlink(missing_ok=True)

    def repair_point(self, wait_s: float = 30.0) -> int:
        """An LSN for repair rows: the current WAL position, once every transaction running at it ended.

        The writer orders a key's versions by ``_event_lsn``. A repair row carries this LSN and is
        read afterwards (in a later snapshot), so: every change it includes was written before the
        rows are read; every change it misses belongs to a transaction that committed after the
        read, which (all transactions running at the LSN having ended first) began after it and
        so streams with a larger LSN and wins over the repair row; and the lake rows it replaces
        carry smaller LSNs."""
        # every transaction holding an xid holds an exclusive lock on it (prepared ones too)
        running_xids = (
            "SELECT transactionid::text FROM pg_locks WHERE locktype = 'transactionid' "
            "AND mode = 'ExclusiveLock' AND granted"
        )
        row = self.conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        lsn = initial_load.parse_lsn(row[0])
        # after the LSN: a transaction that wrote below it had its xid by then, so is listed (or ended)
        running = [r[0] for r in self.conn.execute(running_xids).fetchall()]
        deadline = time.monotonic() + wait_s
        while running:
            left = self.conn.execute(
                f"SELECT count(*) FROM ({running_xids}) AS r(x) WHERE x = ANY(%s)", (running,)
            ).fetchone()
            if not left or not left[0]:
                break
            if time.monotonic() >= deadline:
                log_event(
                    log,
                    logging.WARNING,
                    "repair: transactions running at the repair's LSN have not ended; a change of "
                    "theirs to a repaired key may lose to the repair row (verify again afterwards)",
                    transactions=int(left[0]),
                )
                break
            time.sleep(0.05)
        return lsn


def _empty(st: SourceTable) -> pa.Table:
    return pa.schema(st.fields).empty_table()
