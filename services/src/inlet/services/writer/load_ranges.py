"""The pieces of a parallel initial load: a table's CTID ranges, one range's COPY streamed into Arrow
batches in an imported snapshot, and the per-table progress line.

A range is a span of heap pages ``[start, end)`` read with ``WHERE ctid >= '(start,0)' AND ctid <
'(end,0)'`` (a TID range scan on PostgreSQL 14+, reading only those pages); the last range of a table
has no end, so tuples in pages added after the table's size was taken are never missed. Ranges are
recorded in the load's commits as ``start:end`` (``start:`` for the open last one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from pyarrow import csv

from inlet.core import progress

log = logging.getLogger("inlet.writer.initial_load")


@dataclasses.dataclass(frozen=True, order=True)
class PageRange:
    """Heap pages ``[start, end)``; ``end`` None: to the end of the table."""

    start: int
    end: int | None

    def where(self) -> str:
        """The ``WHERE`` condition selecting the tuples of these pages ("" for the whole table)."""
        parts = []
        if self.start > 0:
            parts.append(f"ctid >= '({self.start},0)'::tid")
        if self.end is not None:
            parts.append(f"ctid < '({self.end},0)'::tid")
        return " AND ".join(parts)

    def text(self) -> str:
        return f"{self.start}:{'' if self.end is None else self.end}"

    @classmethod
    def parse(cls, text: str) -> PageRange:
        start, _, end = text.partition(":")
        return cls(int(start), int(end) if end else None)

    def pages(self, total: int) -> int:
        """How many of the table's ``total`` pages (as measured) this range covers."""
        return max(0, min(total, self.end if self.end is not None else total) - self.start)


def ranges_left(total_pages: int, per_range: int, done: Iterable[PageRange]) -> list[PageRange]:
    """The ranges of at most ``per_range`` pages covering every page not in ``done`` (a table of
    ``total_pages`` pages); the last one is open-ended unless ``done`` covers the end."""
    if per_range < 1:
        raise ValueError("pages per range must be at least 1")
    left: list[PageRange] = []

    def span(start: int, end: int | None) -> None:
        stop = total_pages if end is None else end
        while start + per_range < stop:
            left.append(PageRange(start, start + per_range))
            start += per_range
        if end is None:
            left.append(PageRange(start, None))
        elif start < end:
            left.append(PageRange(start, end))

    pos: int | None = 0
    for r in sorted(done):
        if pos is None:
            break
        if r.start > pos:
            span(pos, r.start)
        pos = None if r.end is None else max(pos, r.end)
    if pos is not None:
        span(pos, None)
    return left


def covers_all(done: Iterable[PageRange]) -> bool:
    """``done`` covers every page, from 0 to the open end."""
    return not ranges_left(1, 1, done)


def table_pages(conn: psycopg.Connection[Any], schema: str, table: str) -> tuple[int, int]:
    """The table's size in pages (for a partitioned table: its largest partition, whose pages bound
    every partition's ctids: a range's ``ctid`` condition selects those pages of each partition)
    and its relfilenode, as of now. Rows the snapshot sees are in pages that existed when it was
    taken, and relations do not shrink below a tuple an open snapshot can see, so the size taken
    after the snapshot covers them. A partitioned table has no file of its own: its "relfilenode"
    is a digest of its partitions and theirs, so a resumed load sees a partition rewritten
    (``VACUUM FULL``, ``TRUNCATE``), attached or detached since the ranges it records were read."""
    row = conn.execute(
        """SELECT c.oid, c.relkind, c.relfilenode FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = %s AND c.relname = %s""",
        (schema, table),
    ).fetchone()
    assert row is not None, f"{schema}.{table} vanished"
    oid, kind, relfilenode = row
    block = int(conn.execute("SELECT current_setting('block_size')::int").fetchone()[0])  # type: ignore[index]
    if kind == "p":
        leaves = conn.execute(
            """SELECT t.relid::oid::int8, c.relfilenode, pg_relation_size(t.relid) FROM pg_partition_tree(%s) t
               JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf ORDER BY 1""",
            (oid,),
        ).fetchall()
        files = ",".join(f"{leaf}:{node}" for leaf, node, _ in leaves).encode()
        digest = int.from_bytes(hashlib.sha256(files).digest()[:7], "big")  # a positive int8
        return max((int(n) for _, _, n in leaves), default=0) // block, digest
    size = conn.execute("SELECT pg_relation_size(%s)", (oid,)).fetchone()
    assert size is not None
    return int(size[0]) // block, int(relfilenode)


class _CopyStream(io.RawIOBase):
    """A ``COPY ... TO STDOUT`` as a readable binary stream (what Arrow's streaming reader reads).

    Arrow reads it ahead on an I/O thread of its own, so the COPY (a psycopg connection) is used from
    that thread while the caller's thread may end it: :meth:`end` waits for a read in flight and
    makes every later read see the end of the data. Without it, a reader dropped early (an error, a
    closed generator) or collected later could read the connection while it was being closed, and
    libpq crashed the process (a segfault seen in CI)."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")
        self._lock = threading.Lock()
        self._ended = False
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def end(self) -> None:
        with self._lock:
            self._ended = True

    def readinto(self, buffer: Any) -> int:
        with self._lock:
            return 0 if self._ended else self._fill(buffer)

    def _fill(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view):
            if not self._pending:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._pending = memoryview(chunk).cast("B")
            take = min(len(view) - filled, len(self._pending))
            view[filled : filled + take] = self._pending[:take]
            self._pending = self._pending[take:]
            filled += take
        self.bytes += filled
        return filled


COPY_BLOCK = 1 << 20  # bytes of COPY data handed to Arrow's CSV reader at a time


def joined(chunks: Iterable[Any], size: int) -> Iterator[bytes]:
    """``chunks`` (bytes-like) joined into blocks of about ``size`` bytes. libpq hands a ``COPY TO``
    over one row per chunk; copied into Arrow's reader one by one, the rows cost more CPU in Python
    than Arrow spends parsing them (about 1.5 us a row of the benchmark's 20 columns against
    0.9 us), joined they cost a list append each."""
    parts: list[Any] = []
    n = 0
    for chunk in chunks:
        parts.append(chunk)
        n += len(chunk)
        if n >= size:
            yield b"".join(parts)
            parts.clear()
            n = 0
    if parts:
        yield b"".join(parts)


def snapshot_connection(conninfo: str, snapshot: str) -> psycopg.Connection[Any]:
    """A connection in a read-only repeatable-read transaction that imports ``snapshot``."""
    conn = psycopg.connect(conninfo)
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
    except BaseException:
        conn.close()
        raise
    return conn


def stream_copy(
    conn: psycopg.Connection[Any],
    statement: str,
    options: tuple[csv.ReadOptions, csv.ParseOptions, csv.ConvertOptions],
) -> Iterator[pa.RecordBatch]:
    """Run a ``COPY ... TO STDOUT (FORMAT csv)`` and yield its rows as Arrow batches, parsed while
    the rows arrive (never more than a few CSV blocks in memory)."""
    with conn.cursor().copy(statement) as copy:
        chunks = iter(copy)
        first = next(chunks, None)
        if first is None:  # no rows: Arrow's reader refuses an empty input
            return

        def all_chunks() -> Iterator[Any]:
            yield first
            yield from chunks

        read_options, parse_options, convert_options = options
        raw = _CopyStream(joined(all_chunks(), COPY_BLOCK))
        try:
            reader = csv.open_csv(
                io.BufferedReader(raw, buffer_size=1 << 20),
                read_options=read_options,
                parse_options=parse_options,
                convert_options=convert_options,
            )
            yield from reader
        finally:
            raw.end()  # Arrow's read-ahead thread never touches the COPY again
        for _ in chunks:  # drain (the reader stops at the end of the data)
            pass


class ProgressFile:
    """Every table's load progress as one JSON object in a file, replaced atomically at each report:
    ``{"tables": {TABLE_ID: {"state": "loading" | "loaded" | "skipped", "rows", "rows_per_s",
    "pages_done", "pages", "eta_s", "updated_at"}}}``. What ``inlet stack status`` shows and the
    writer's ``inlet_writer_initial_load_*`` metrics export while and after a load runs in another
    process (the stack's supervisor, ``inlet writer load``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._tables: dict[str, dict[str, Any]] = read_progress(path)

    def update(self, table_id: str, state: str, **fields: Any) -> None:
        with self._lock:
            self._tables[table_id] = {**fields, "state": state, "updated_at": round(time.time(), 3)}
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"tables": self._tables}, indent=2))
            tmp.replace(self.path)


def read_progress(path: Path) -> dict[str, dict[str, Any]]:
    """The tables of a :class:`ProgressFile` (none when it does not exist or cannot be read)."""
    try:
        tables = json.loads(path.read_text()).get("tables", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return tables if isinstance(tables, dict) else {}


class Progress(progress.Progress):
    """One table's load progress (the shared :class:`inlet.core.progress.Progress`, by pages read): at
    INFO at most every ``interval_s`` while the table loads, and once at the end (:meth:`report`); each
    line also goes to ``sink`` (a :class:`ProgressFile`) when there is one."""

    def __init__(
        self,
        table_id: str,
        pages: int,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        sink: ProgressFile | None = None,
    ) -> None:
        super().__init__(
            f"initial load {table_id}",
            "pages",
            total=max(pages, 1),
            interval_s=interval_s,
            logger=log,
            clock=clock,
            table=table_id,
        )
        self.table_id = table_id
        self.sink = sink

    def add_pages(self, n: int) -> None:
        with self._lock:
            self.done += n

    def log(self, suffix: str = "", state: str = "loading") -> None:
        super().log(suffix)
        self.publish(state)

    def report(self, suffix: str, state: str = "loading") -> None:
        self.log(f" ({suffix})", state)

    def publish(self, state: str = "loading") -> None:
        """Write the table's progress to the sink (no log line)."""
        if self.sink is not None:
            f = self.fields()
            self.sink.update(
                self.table_id,
                state,
                rows=f["rows"],
                rows_per_s=f["rows_per_s"],
                pages_done=f["done"],
                pages=f["total"],
                eta_s=f["eta_s"],
            )
