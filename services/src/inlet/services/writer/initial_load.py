"""Initial load by ``COPY``: the tables' existing rows straight from PostgreSQL into Hudi, then CDC.

Debezium's initial snapshot sends every existing row through Kafka as a change event (with its
schema, as JSON), the CDC consumer and the writer; on two cores that path moves a few thousand rows
a second. Tools that replicate Postgres at scale load the existing rows in bulk instead and stream
from the exact point the bulk read saw, and so does this module:

1. A publication for all tables is made sure of (pgoutput decodes with the catalog as of each WAL
   record, so it must exist before the slot's start; it publishes a partition's changes via its
   root, whose rows the load reads, :mod:`inlet.services.source_tables`), then the connector's logical replication slot
   is created on a replication connection with ``EXPORT_SNAPSHOT``: PostgreSQL returns the slot's
   consistent point (an LSN) and the name of a snapshot that sees exactly the transactions committed
   before it.
2. Each table is split into ranges of heap pages (:mod:`~inlet.services.writer.load_ranges`:
   ``ctid >= '(a,0)' AND ctid < '(b,0)'``, TID range scans on PostgreSQL 14+), and each range is read
   on its own connection that imports that snapshot (``SET TRANSACTION SNAPSHOT``; the exporting
   connection stays open until the last range is read) with one
   ``COPY (SELECT ... WHERE <range>) TO STDOUT (FORMAT csv)`` whose select list renders each column
   the way the writer stores it (epoch microseconds for timestamps and times, days for dates,
   Debezium's ``MicroDuration`` arithmetic for intervals, JSON for arrays), streamed as it arrives
   into Arrow's streaming CSV reader. ``LoadOptions.workers`` threads read a table's ranges at once
   (the COPY rendering runs in their PostgreSQL backends, Arrow's parsing and Parquet encoding
   release the GIL); a worker holds one range, so memory is bounded by the range (about
   ``pages_per_range`` x 8 KiB of rows, more for rows whose values are TOASTed out of line), never
   by the table.
3. Each range is written as **one commit**: a ``bulk_insert`` through the coordinator into the Hudi
   table the writer would have created (same path, record key, ordering field, options and column
   types), as Debezium ``r`` (read) rows whose ``_event_lsn`` is
   :data:`~inlet.services.writer.rows.SNAPSHOT_ORDERING` (0), as the writer stores Debezium's own
   snapshot reads: with EVENT_TIME_ORDERING every change streamed afterwards wins over the loaded
   row. Not the consistent point: a transaction that began between the snapshot builder's steps
   and is still open at the consistent point is not in the snapshot, and streams when it commits
   with change LSNs *below* the consistent point. Every commit records the consistent point
   (``inlet.initial_load.lsn``), its range (``inlet.initial_load.range``) and the table's
   relfilenode. One commit per range rather than one commit listing every range's files, because
   (a) the default tables (Merge-on-Read, bucket index) have one file group per bucket, so ranges
   cannot each write a bucket's base file in one instant: the first commit writes the buckets'
   base files and later ranges append to their logs (Parquet data blocks), as any writer of such a
   table does; and (b) a commit is the record that a range is done, so a load killed midway
   resumes from the ranges left instead of starting over. A table's first commit runs alone (its
   ``bulk_insert`` creates the file groups); after it, the ranges of a Merge-on-Read bucket-index
   table commit concurrently as ``insert``s (appends to the buckets' logs, which non-blocking
   concurrency control does not conflict-check; it does check ``bulk_insert``), and those of other
   tables one at a time, their reading going on meanwhile. A table that already holds rows
   of another load is overwritten: its first commit is an ``insert_overwrite_table``.
   **Resume** (``resume=True``, ``--resume``): the slot the killed load created is kept (its exported
   snapshot died with the load, its position did not), a new snapshot is exported by an ordinary
   transaction, and each table loads the ranges its commits at the slot's position (and the same
   relfilenode: ``VACUUM FULL``, ``CLUSTER`` or ``TRUNCATE`` move rows) do not record as done.
   Rows changed between the two snapshots are streamed from the slot's position anyway and win;
   a row that moved from a range done into a range left is then loaded twice, which only a table
   that merges records by key keeps once (Merge-on-Read with the bucket index, the default), so
   other tables are loaded again whole (overwritten) instead.
4. Debezium then starts on the existing slot without a data snapshot (``snapshot.mode=no_data``)
   for the loaded tables and streams from the consistent point. Tables this module cannot load (no
   primary key, a column type without a rendering here, a value the rendering refuses in any of
   its ranges) are left to Debezium's own snapshot (``snapshot.include.collection.list``); ranges
   of such a table already committed are cleared first (an empty ``insert_overwrite_table``).

Threads, not processes, read the ranges: the work that costs (rendering in PostgreSQL, CSV parsing
and Parquet encoding in Arrow) does not hold the GIL, and threads share the coordinator client, the
snapshot's name and one table handle without pickling. Measured at 10M rows x 20 columns on two
quiet cores: two threads load 204k rows/s (1.57 cores); a pool of reader processes gave +6 % at
10M, less at 1M (its start) and more CPU, and was not kept (docs/benchmarks.md). Resume caveat: an update made between the
killed load and the resume that leaves a TOASTed column unchanged, to a row that moved from a range
left into a range done, streams without that column's value and finds no stored row to take it from.

The load commit carries no Kafka checkpoint, so the writer reads the change topic from its start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from pyarrow import csv
from pyarrow import json as pa_json

from inlet.core import HudiTable
from inlet.core.faults import crash_point
from inlet.core.storage import Storage
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer.catalog import CatalogColumn, PostgresCatalog, connect_field
from inlet.services.cdc_consumer.types import (
    INFINITY_DAYS,
    INFINITY_MICROS,
    NEG_INFINITY_DAYS,
    NEG_INFINITY_MICROS,
    UnsupportedType,
    column_plan,
)
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.logs import log_event
from inlet.services.source_tables import create_publication, matching_tables
from inlet.services.writer import tables
from inlet.services.writer.load_ranges import (
    PageRange,
    Progress,
    ProgressFile,
    covers_all,
    ranges_left,
    snapshot_connection,
    stream_copy,
    table_pages,
)
from inlet.services.writer.rows import (
    DELETED_COL,
    LSN_COL,
    META_FIELDS,
    OP_COL,
    PROCESSED_TS_COL,
    SHARD_COL,
    SNAPSHOT_ORDERING,
    arrow_type,
)

log = logging.getLogger("inlet.writer.initial_load")

LOAD_LSN_KEY = "inlet.initial_load.lsn"  # extraMetadata of a load commit: the slot's consistent point
LOAD_RANGE_KEY = "inlet.initial_load.range"  # ... the heap pages it loaded, "start:end" ("start:" to the end)
LOAD_RELFILENODE_KEY = "inlet.initial_load.relfilenode"  # ... the table's file then (a rewrite moves rows)
AFTER_RANGE = "initial_load_after_range"  # crash point (INLET_CRASH_AT): a range committed
DEFAULT_WORKERS = 2
# the ranges after a bucket's first append to its file group's log: Parquet data blocks (Avro
# ones are encoded row by row), unless the table's options say otherwise
LOG_BLOCK_FORMAT = "hoodie.logfile.data.block.format"
DEFAULT_PAGES_PER_RANGE = 4096  # 32 MiB of heap: what one range holds in memory, about

_EPOCH_US = "(extract(epoch from {c}) * 1000000)::int8"
# timestamps: PostgreSQL's infinities as the int64 bounds (as the CDC consumer decodes them); one
# after 294247-01-10T04:00:54.775807Z, past int64 microseconds, is refused
_TIMESTAMP_US = (
    f"CASE WHEN {{c}} = 'infinity' THEN {INFINITY_MICROS} WHEN {{c}} = '-infinity' "
    f"THEN {NEG_INFINITY_MICROS} WHEN extract(epoch from {{c}}) >= 9223372036854.775808 THEN {{refuse}} "
    f"ELSE {_EPOCH_US} END"
)
_DATE_DAYS = (
    f"CASE WHEN {{c}} = 'infinity' THEN {INFINITY_DAYS} WHEN {{c}} = '-infinity' THEN {NEG_INFINITY_DAYS} "
    "ELSE {c} - date '1970-01-01' END"
)
# timetz: Debezium's ZonedTime, the time in UTC with 'Z' (its 24:00:00 is 00:00:00Z)
_TIMETZ = (
    "CASE WHEN ({c} AT TIME ZONE 'UTC')::time = '24:00:00' THEN '00:00:00Z' "
    "ELSE ({c} AT TIME ZONE 'UTC')::time::text || 'Z' END"
)
_ARRAY_ELEMENTS = {"int2", "int4", "int8", "float4", "float8", "text", "varchar", "bpchar", "bool", "uuid"}
_FLOAT_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _interval_us(c: str) -> str:
    """Debezium's MicroDuration of an interval, computed as Debezium computes it (in doubles, from
    pgjdbc's PGInterval fields, 30.4375-day months, truncated and saturated to a long), so the load
    stores the very number streaming stores; an infinite interval is 0, what Debezium sends."""

    def part(field: str) -> str:
        return f"extract({field} from {c})"

    whole = f"trunc({part('second')})"
    seconds = f"({whole}::float8 + ({part('microseconds')} - {whole} * 1000000)::float8 / 1e6::float8)"
    days = f"(({part('year')} * 12 + {part('month')})::float8 * 30.4375::float8 + {part('day')}::float8)"
    micros = (
        f"((({days} * 24::float8 + {part('hour')}::float8) * 60::float8 + {part('minute')}::float8)"
        f" * 60::float8 + {seconds}) * 1e6::float8"
    )
    return (
        f"CASE WHEN NOT isfinite({c}) THEN 0::int8 WHEN {micros} >= 9223372036854775807::float8 "
        f"THEN {INFINITY_MICROS}::int8 ELSE trunc(greatest({micros}, -9223372036854775808::float8))::int8 END"
    )


def _refuse(name: str, c: str, why: str) -> str:
    """An int8 expression that fails the COPY with a message naming the column, the value and why
    (plain SQL cannot raise: casting this text to bigint does, quoting it in the error)."""
    column = sql.Literal(f"inlet: column {name} = ").as_string(None)
    return f"(({column} || left({c}::text, 80) || {sql.Literal(': ' + why).as_string(None)})::int8)"


def refusal(error: Exception) -> str | None:
    """The reason in the error of a COPY that :func:`_refuse` failed, or None for another error."""
    found = re.search(r'"inlet: (.*)"', str(error))
    return found.group(1) if found else None


class LoadError(RuntimeError):
    """A table cannot be loaded by COPY (it is left to Debezium's snapshot)."""


@dataclasses.dataclass(frozen=True)
class ExportedSnapshot:
    slot: str
    lsn: int  # the slot's consistent point
    name: str  # the exported snapshot, valid while the exporting connection stays open
    resumed: bool = False  # an existing slot kept (a load resumed): ``name`` is a newer snapshot


@dataclasses.dataclass(frozen=True)
class LoadResult:
    table_id: str
    path: str
    rows: int
    seconds: float
    ranges: int = 0  # ranges read by this run
    ranges_done_before: int = 0  # ranges an earlier run at the same LSN had loaded (resumed)


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@contextmanager
def exported_snapshot(
    conninfo: str, slot: str, publication: str, replace_slot: bool = False, resume: bool = False
) -> Iterator[ExportedSnapshot]:
    """Create ``slot`` (pgoutput) exporting its snapshot; the snapshot lives until the block ends.

    A slot of that name left by a load that stopped midway is dropped first with ``replace_slot``
    (never one in use), or kept with ``resume``: its position (``confirmed_flush_lsn``, where
    streaming will start) is the load's LSN and a new snapshot is exported by an ordinary
    transaction (the slot's own died with the load); without either, it is an error that says so."""
    if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
        raise LoadError(f"replication slot name {slot!r}: use 1-63 lower-case letters, digits and '_'")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        existing = conn.execute(
            "SELECT active_pid, confirmed_flush_lsn::text, plugin FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
        if existing is not None:
            if existing[0] is not None:
                raise LoadError(
                    f"replication slot {slot} is in use (by pid {existing[0]}); stop its consumer"
                )
            if resume and existing[1] is not None and existing[2] == "pgoutput":
                lsn = parse_lsn(existing[1])
            elif not replace_slot:
                raise LoadError(
                    f"cannot create replication slot {slot}: it already exists (a load that stopped "
                    "midway leaves it): rerun with --resume to load the ranges left, or with "
                    "--replace-slot to drop it and load again, unless Debezium already streams from it"
                )
            else:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                log_event(
                    log, logging.WARNING, "initial load: dropped the existing replication slot", slot=slot
                )
                existing = None
        found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone()
        if found is None:
            create_publication(conn, publication, None)  # partitions published via their root
    if existing is not None:  # resumed: the slot stays, a fresh snapshot for the ranges left
        with psycopg.connect(conninfo) as exporter:
            exporter.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            [(name,)] = exporter.execute("SELECT pg_export_snapshot()").fetchall()
            log_event(log, logging.INFO, "initial load: resuming on the existing slot", slot=slot, lsn=lsn)
            yield ExportedSnapshot(slot, lsn, name, resumed=True)
        return
    repl = psycopg.connect(conninfo, replication="database", autocommit=True)
    try:
        statement = f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT'
        res = repl.pgconn.exec_(statement.encode())
        if res.status != 2:  # PGRES_TUPLES_OK
            raise LoadError(f"cannot create replication slot {slot}: {res.error_message.decode().strip()}")
        values = [(res.get_value(0, i) or b"").decode() for i in range(res.nfields)]
        yield ExportedSnapshot(values[0], parse_lsn(values[1]), values[2])
    finally:
        repl.close()


def primary_key(conn: psycopg.Connection[Any], schema: str, table: str) -> list[str]:
    rows = conn.execute(
        """SELECT a.attname FROM pg_index i
           JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) ON true
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
           WHERE i.indisprimary AND n.nspname = %s AND c.relname = %s ORDER BY k.pos""",
        (schema, table),
    ).fetchall()
    return [r[0] for r in rows]


@dataclasses.dataclass(frozen=True)
class _Column:
    name: str
    select: str  # the COPY select expression
    csv_type: pa.DataType  # what Arrow's CSV reader parses
    target: pa.DataType  # the writer's column type
    finish: Callable[[pa.Array], pa.Array] | None = None


def _rendering(col: CatalogColumn, pb_col: pb.Column) -> _Column:
    """How one column is selected, parsed and typed (LoadError when there is no rendering)."""
    target = arrow_type(pb_col)
    ident = sql.Identifier(col.name).as_string(None)
    ct = pb_col.type
    if col.element_type is not None:
        if col.element_type not in _ARRAY_ELEMENTS:
            raise LoadError(f"column {col.name!r}: arrays of {col.element_type} are not loaded by COPY")
        # Debezium sends a multi-dimensional array as nulls (or Java object names for text): refused
        why = "a multi-dimensional array, which Debezium cannot send (it sends nulls or Java object names)"
        select = (
            f"CASE WHEN array_ndims({ident}) > 1 THEN {_refuse(col.name, ident, why)}::text "
            f"ELSE to_json({ident})::text END"
        )
        return _Column(col.name, select, pa.string(), target, _json_lists(target))
    if ct in (pb.COLUMN_TYPE_TIMESTAMP_MICROS, pb.COLUMN_TYPE_TIMESTAMP_MICROS_UTC):
        why = "after 294247-01-10T04:00:54.775807Z, the last instant int64 microseconds hold"
        select = _TIMESTAMP_US.format(c=ident, refuse=_refuse(col.name, ident, why))
        return _Column(col.name, select, pa.int64(), target)
    if ct == pb.COLUMN_TYPE_TIME_MICROS and col.type_name == "time":
        return _Column(col.name, _EPOCH_US.format(c=ident), pa.int64(), target)
    if ct == pb.COLUMN_TYPE_DURATION_MICROS:
        return _Column(col.name, _interval_us(ident), pa.int64(), target)
    if ct == pb.COLUMN_TYPE_DATE:
        return _Column(col.name, _DATE_DAYS.format(c=ident), pa.int32(), target)
    if ct == pb.COLUMN_TYPE_DECIMAL:
        # Debezium sends a numeric without typmod (VariableScaleDecimal) without its trailing zeros
        text = (
            f"trim_scale({ident})::text"
            if col.typmod < 0 and col.type_name == "numeric"
            else f"{ident}::numeric::text"
        )
        # NaN and +-Infinity: Debezium (decimal.handling.mode=precise) sends null, and stops on a
        # NOT NULL column ("Got a special value (NaN/Infinity) for Decimal type"): refused
        why = "NaN or Infinity in a NOT NULL numeric, which Debezium (decimal.handling.mode=precise) cannot send"
        special = f"{_refuse(col.name, ident, why)}::text" if col.not_null else "NULL"
        finite = f"CASE WHEN {text} IN ('NaN', 'Infinity', '-Infinity') THEN {special} ELSE {text} END"
        return _Column(col.name, finite, target if pa.types.is_decimal(target) else pa.string(), target)
    if ct == pb.COLUMN_TYPE_STRING and col.type_name == "timetz":
        return _Column(col.name, _TIMETZ.format(c=ident), pa.string(), target)
    if ct == pb.COLUMN_TYPE_BYTES and col.type_name == "bytea":
        return _Column(col.name, f"encode({ident}, 'hex')", pa.string(), target, _hex_bytes)
    if ct == pb.COLUMN_TYPE_BOOLEAN and col.type_name == "bool":
        return _Column(col.name, ident, pa.bool_(), target)
    if ct in (
        pb.COLUMN_TYPE_INT16,
        pb.COLUMN_TYPE_INT32,
        pb.COLUMN_TYPE_INT64,
        pb.COLUMN_TYPE_FLOAT32,
        pb.COLUMN_TYPE_FLOAT64,
    ):
        return _Column(col.name, ident, target, target)
    if ct in (pb.COLUMN_TYPE_STRING, pb.COLUMN_TYPE_UUID) or (
        ct == pb.COLUMN_TYPE_JSON and col.type_name in ("json", "jsonb")
    ):
        return _Column(col.name, ident, pa.string(), target)
    raise LoadError(f"column {col.name!r}: {col.type_name} is not loaded by COPY")


def _hex_bytes(arr: pa.Array) -> pa.Array:
    """``encode(bytea, 'hex')`` text as binary, decoded in one call for the whole array: the hex
    digits of every value are contiguous in the array's data buffer (a null's are empty), so the
    decoded bytes are too, at half the offsets."""
    if arr.offset:  # a slice: its own buffers from offset 0
        arr = pa.concat_arrays([arr])
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[: len(arr) + 1]
    if len(arr) == 0 or (np.diff(offsets) % 2).any():  # not hex digits: fromhex says why, by value
        return pa.array([None if v is None else bytes.fromhex(v) for v in arr.to_pylist()], pa.binary())
    start, end = int(offsets[0]), int(offsets[-1])
    data = arr.buffers()[2]
    digits = b"" if data is None else data[start:end].to_pybytes()
    decoded = pa.py_buffer(bytes.fromhex(digits.decode("ascii")))
    halved = pa.py_buffer(((offsets - start) // 2).astype(np.int32))
    return pa.Array.from_buffers(pa.binary(), len(arr), [arr.buffers()[0], halved, decoded], arr.null_count)


def _json_lists(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """``to_json(array)`` text as Arrow lists of ``target``: parsed by Arrow's JSON reader (the
    values wrapped as ``{"v": ...}`` lines), except float arrays, whose NaN and infinities
    ``to_json`` writes as strings (parsed in Python)."""
    floats = pa.types.is_floating(target.value_type)
    schema = pa.schema([pa.field("v", target)])

    def finish(arr: pa.Array) -> pa.Array:
        if not floats and len(arr):
            lines = pc.binary_join_element_wise('{"v":', pc.fill_null(arr, "null"), "}\n", "")
            text = memoryview(_contiguous(lines)).tobytes()
            parsed = pa_json.read_json(
                pa.BufferReader(text),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, len(text) + 1)),
                parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
            )
            return parsed.column("v").combine_chunks()
        lists = [None if v is None else json.loads(v) for v in arr.to_pylist()]
        if floats:  # to_json writes NaN and the infinities as strings
            lists = [
                None if v is None else [_FLOAT_WORDS.get(x, x) if x.__class__ is str else x for x in v]
                for v in lists
            ]
        return pa.array(lists, target)

    return finish


def _contiguous(arr: pa.Array) -> pa.Buffer:
    """The bytes of every value of a string array without nulls, one after another."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1]
    data = arr.buffers()[2]
    return pa.py_buffer(b"") if data is None else data[int(offsets[0]) : int(offsets[-1])]


@dataclasses.dataclass(frozen=True)
class TablePlan:
    """How one source table is read: its columns, record key and the writer's schema."""

    schema: str
    table: str
    columns: list[_Column]
    keys: list[str]

    def copy_statement(self, where: str = "") -> str:
        """``COPY (SELECT <renderings> FROM <table> [WHERE ...]) TO STDOUT`` as CSV."""
        select = ", ".join(c.select for c in self.columns)
        source = f"{sql.Identifier(self.schema).as_string(None)}.{sql.Identifier(self.table).as_string(None)}"
        condition = f" WHERE {where}" if where else ""
        return f"COPY (SELECT {select} FROM {source}{condition}) TO STDOUT WITH (FORMAT csv)"


def render_columns(catalog: PostgresCatalog, schema: str, table: str) -> tuple[list[_Column], dict[str, str]]:
    """Each column's rendering, and the columns without one (name -> why)."""
    columns, unrendered = [], {}
    for col in catalog.columns(schema, table, refresh=True).values():
        try:
            try:
                pb_col = column_plan(connect_field(col), "json").column
            except (UnsupportedType, ValueError) as e:
                raise LoadError(f"column {col.name!r}: {e}") from None
            columns.append(_rendering(col, pb_col))
        except LoadError as e:
            unrendered[col.name] = str(e)
    return columns, unrendered


def plan_table(catalog: PostgresCatalog, conn: psycopg.Connection[Any], schema: str, table: str) -> TablePlan:
    """The table's COPY plan; LoadError when COPY cannot reproduce what Debezium would send."""
    keys = primary_key(conn, schema, table)
    if not keys:
        raise LoadError(f"{schema}.{table} has no primary key")
    columns, unrendered = render_columns(catalog, schema, table)
    if unrendered:
        raise LoadError(next(iter(unrendered.values())))
    return TablePlan(schema, table, columns, keys)


def copy_csv(conn: psycopg.Connection[Any], statement: str, path: Path) -> None:
    """Run a ``COPY ... TO STDOUT`` into the file ``path``."""
    with path.open("wb") as out, conn.cursor().copy(statement) as copy:
        for chunk in copy:
            out.write(chunk)


def csv_options(
    plan: TablePlan, block_size: int = 16 << 20
) -> tuple[csv.ReadOptions, csv.ParseOptions, csv.ConvertOptions]:
    """How Arrow's CSV reader parses the output of ``plan.copy_statement()``."""
    return (
        csv.ReadOptions(column_names=[c.name for c in plan.columns], block_size=block_size),
        csv.ParseOptions(newlines_in_values=True),
        csv.ConvertOptions(
            column_types={c.name: c.csv_type for c in plan.columns},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            true_values=["t"],
            false_values=["f"],
        ),
    )


def typed(plan: TablePlan, data: pa.Table | pa.RecordBatch) -> pa.Table:
    """Parsed CSV columns finished and cast to the writer's column types."""
    arrays = []
    for c in plan.columns:
        column = data.column(c.name)
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if c.finish is not None:
            arr = c.finish(arr)
        arrays.append(arr.cast(c.target) if arr.type != c.target else arr)
    return pa.Table.from_arrays(arrays, names=[c.name for c in plan.columns])


def parse_csv(plan: TablePlan, path: Path) -> pa.Table:
    """A file of ``plan.copy_statement()`` output, parsed and typed (an empty file: no rows, which
    Arrow's CSV reader refuses to parse)."""
    if path.stat().st_size == 0:
        return pa.schema([pa.field(c.name, c.target) for c in plan.columns]).empty_table()
    read_options, parse_options, convert_options = csv_options(plan)
    data = csv.read_csv(
        path, read_options=read_options, parse_options=parse_options, convert_options=convert_options
    )
    return typed(plan, data)


def read_table(conn: psycopg.Connection[Any], plan: TablePlan, workdir: Path) -> pa.Table:
    """COPY the table (in the transaction's snapshot) into Arrow, typed as the writer types it."""
    path = workdir / f"{plan.schema}.{plan.table}.csv"
    copy_csv(conn, plan.copy_statement(), path)
    try:
        return parse_csv(plan, path)
    finally:
        path.unlink()


def with_event_columns(data: pa.Table, lsn: int, shard: str | None) -> pa.Table:
    """The writer's Debezium columns for snapshot reads: op ``r`` with ``_event_lsn`` = ``lsn`` (the
    load's rows: :data:`SNAPSHOT_ORDERING`; ``inlet verify --repair``'s: its repair point)."""
    n = data.num_rows
    values: dict[str, Any] = {
        OP_COL: "r",
        PROCESSED_TS_COL: int(time.time() * 1000),
        SHARD_COL: shard,
        LSN_COL: lsn,
        DELETED_COL: False,
    }
    for f in META_FIELDS:
        if f.name not in data.column_names:
            value = values.get(f.name)
            column = pa.nulls(n, f.type) if value is None else pa.repeat(pa.scalar(value, f.type), n)
            data = data.append_column(f, column)
    return data


@dataclasses.dataclass
class LoadSummary:
    lsn: int = 0
    loaded: list[LoadResult] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # "schema.table" -> why

    def as_json(self) -> dict[str, Any]:
        return {
            "lsn": self.lsn,
            "loaded": [dataclasses.asdict(r) for r in self.loaded],
            "skipped": self.skipped,
            "debezium": debezium_snapshot_config(self.skipped),
        }


def debezium_snapshot_config(skipped: Iterable[str]) -> dict[str, str]:
    """The connector settings that follow a load: no data snapshot, or one of the tables COPY left."""
    left = sorted(skipped)
    if not left:
        return {"snapshot.mode": "no_data"}
    return {
        "snapshot.mode": "initial",
        "snapshot.include.collection.list": ",".join(re.escape(t) for t in left),
    }


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """How the load splits and runs: ranges of ``pages_per_range`` heap pages read by ``workers``
    threads, progress at INFO every ``progress_interval_s``."""

    workers: int = DEFAULT_WORKERS
    pages_per_range: int = DEFAULT_PAGES_PER_RANGE
    progress_interval_s: float = 5.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise LoadError(f"--load-workers must be at least 1, got {self.workers}")
        if self.pages_per_range < 1:
            raise LoadError(f"--pages-per-range must be at least 1, got {self.pages_per_range}")


@dataclasses.dataclass
class _TableState:
    """What the lake already holds of a table: the ranges loaded at this LSN and relfilenode since
    the last overwrite, and whether it holds rows of anything else (then it is overwritten)."""

    done: list[PageRange]
    overwrite: bool


def _table_state(hudi: HudiTable, lsn: int, relfilenode: int, resumable: bool) -> _TableState:
    if hudi.schema() is None:
        return _TableState([], overwrite=False)
    entries: list[tuple[str, str, str | None]] = []
    for inst in hudi.timeline.completed_writes():
        md = hudi.timeline.commit_metadata(inst)
        extra = md.extra_metadata
        if LOAD_LSN_KEY not in extra:
            continue  # e.g. a compaction of the load's files
        if md.operation_type == "insert_overwrite_table":
            entries = []
        entries.append((extra[LOAD_LSN_KEY], extra.get(LOAD_RELFILENODE_KEY, ""), extra.get(LOAD_RANGE_KEY)))
    same = all(e[0] == str(lsn) and e[1] == str(relfilenode) for e in entries)
    # a Spark load's commit records its wave of ranges, comma-separated
    done = [PageRange.parse(t) for e in entries if e[2] for t in e[2].split(",")] if same and entries else []
    # a partly loaded table resumes only where rows of two snapshots merge by key (Merge-on-Read,
    # bucket index: see the module doc); anything else is loaded again from scratch
    if done and (resumable or covers_all(done)):
        return _TableState(done, overwrite=False)
    return _TableState([], overwrite=True)


class _TableLoad:
    """One table's ranges read on the pool, each written as one commit (see the module doc)."""

    def __init__(
        self,
        conninfo: str,
        snap: ExportedSnapshot,
        plan: TablePlan,
        open_table: Callable[[], HudiTable],
        concurrent: bool,
        table_id: str,
        topic_prefix: str,
        write_options: dict[str, str],
        relfilenode: int,
        total_pages: int,
        overwrite: bool,
        progress: Progress,
    ) -> None:
        self.conninfo = conninfo
        self.snap = snap
        self.plan = plan
        self.open_table = open_table
        self.hudi = open_table()
        # Merge-on-Read with the bucket index (NBCC): once the buckets' file groups exist, ranges
        # commit concurrently as ``insert``s, appends to their logs that NBCC never conflict-checks
        self.concurrent = concurrent
        self._appending = threading.Event()
        if concurrent and not overwrite and self.hudi.schema() is not None:
            self._appending.set()
        self.table_id = table_id
        self.topic_prefix = topic_prefix
        self.write_options = write_options
        self.relfilenode = relfilenode
        self.total_pages = total_pages
        self.overwrite = overwrite  # the first commit replaces what the table holds
        self.progress = progress
        self.committed = 0
        self.stop = threading.Event()
        self._write_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._csv = csv_options(self.plan, block_size=4 << 20)

    def run(self, page_range: PageRange) -> int:
        """Read one range in the snapshot and commit it; its row count."""
        if self.stop.is_set():
            return 0
        parts: list[pa.Table] = []
        with snapshot_connection(self.conninfo, self.snap.name) as conn:
            try:
                for batch in stream_copy(conn, self.plan.copy_statement(page_range.where()), self._csv):
                    if self.stop.is_set():
                        # read on to the end (keeping nothing): leaving Arrow's reader midway
                        # would close the COPY under its read-ahead thread
                        parts.clear()
                        continue
                    parts.append(typed(self.plan, batch))
                    self.progress.add_rows(batch.num_rows)
                if self.stop.is_set():
                    return 0
            except psycopg.errors.DataError as e:
                why = refusal(e) or str(e).strip().splitlines()[0]
                raise LoadError(f"{self.plan.schema}.{self.plan.table}: {why}") from None
        if parts:
            rows = pa.concat_tables(parts)
        else:
            rows = pa.schema([pa.field(c.name, c.target) for c in self.plan.columns]).empty_table()
        del parts
        data = with_event_columns(rows, SNAPSHOT_ORDERING, self.topic_prefix)
        written = False
        if not self._appending.is_set():
            with self._write_lock:  # one commit at a time; the first one creates the file groups
                if self.stop.is_set():
                    return 0
                if not self._appending.is_set():
                    if data.num_rows or self.overwrite:
                        self._write(data, page_range, self.hudi)
                        if self.concurrent:
                            self._appending.set()
                    written = True
        if not written:  # appends, concurrently (the bulk_insert that NBCC checks is behind us)
            if self.stop.is_set():
                return 0
            if data.num_rows:
                self._write(data, page_range, self.open_table(), "insert")
        crash_point(AFTER_RANGE)
        self.progress.add_pages(page_range.pages(self.total_pages))
        return int(data.num_rows)

    def run_wave(self, spark: Any, wave: list[PageRange]) -> int:
        """``--engine spark``: read ``wave``'s ranges as Spark tasks and commit them as one write
        (:mod:`~inlet.services.writer.spark_load`); its row count."""
        from inlet.services.writer import spark_load

        spec, arrow = spark_load.RangeRead.of(self.conninfo, self.snap.name, self.plan, self.topic_prefix)
        if self.overwrite:
            op = "insert_overwrite_table"
        else:
            op = "insert" if self._appending.is_set() else "bulk_insert"
        extra = {
            LOAD_LSN_KEY: str(self.snap.lsn),
            LOAD_RELFILENODE_KEY: str(self.relfilenode),
            LOAD_RANGE_KEY: ",".join(r.text() for r in wave),
        }
        hudi = self.open_table()
        try:
            rows = spark_load.write_wave(
                spark, spec, arrow, wave, hudi.base_path, op, self.write_options, hudi.commit_protocol, extra
            )
        except Exception as e:
            why = spark_load.refused(e)
            if why is None:
                raise
            raise LoadError(f"{self.plan.schema}.{self.plan.table}: {why}") from None
        self.overwrite = False
        self.committed += 1
        if rows and self.concurrent:
            self._appending.set()  # the buckets' file groups exist: later waves append
        crash_point(AFTER_RANGE)
        self.progress.add_pages(sum(r.pages(self.total_pages) for r in wave))
        self.progress.add_rows(rows)
        return rows

    def _write(
        self, data: pa.Table, page_range: PageRange | None, hudi: HudiTable, op: str = "bulk_insert"
    ) -> None:
        if self.overwrite:
            op = "insert_overwrite_table"
        extra = {LOAD_LSN_KEY: str(self.snap.lsn), LOAD_RELFILENODE_KEY: str(self.relfilenode)}
        if page_range is not None:
            extra[LOAD_RANGE_KEY] = page_range.text()
        hudi.write(data, op, dict(self.write_options), extra_metadata=extra)
        self.overwrite = False
        with self._count_lock:
            self.committed += 1

    def clear(self) -> None:
        """Empty the table (a range was refused after others were committed): no rows of a table
        left to Debezium's snapshot stay behind."""
        empty = pa.schema([pa.field(c.name, c.target) for c in self.plan.columns]).empty_table()
        with self._write_lock:
            self.overwrite = True
            self._write(
                with_event_columns(empty, SNAPSHOT_ORDERING, self.topic_prefix), None, self.open_table()
            )


def _load_ranges(work: _TableLoad, ranges: list[PageRange], workers: int) -> int:
    """Run every range on a pool of ``workers`` threads; the rows loaded. The first failure stops
    the ranges not started and is raised once the running ones end."""
    rows = 0
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inlet-load") as pool:
        futures = [pool.submit(work.run, r) for r in ranges]
        try:
            for done in as_completed(futures):
                rows += done.result()
        except BaseException:
            work.stop.set()
            for f in futures:
                f.cancel()
            raise
    if work.overwrite:  # every range was empty: the table still has to lose what it held
        work.clear()
    return rows


def _load_waves(work: _TableLoad, ranges: list[PageRange], spark: Any) -> int:
    """``--engine spark``: the ranges in waves of ``spark.default.parallelism``, each wave one Spark
    write (a task per range) and one commit; the rows loaded."""
    per_commit = max(1, int(spark.sparkContext.defaultParallelism))
    rows = 0
    for i in range(0, len(ranges), per_commit):
        rows += work.run_wave(spark, ranges[i : i + per_commit])
    if work.overwrite:  # no wave ran (every range was done): the table still has to lose what it held
        work.clear()
    return rows


def load(
    conninfo: str,
    globs: Sequence[str],
    *,
    client: CoordinatorClient,
    lake_root: str,
    topic_prefix: str,
    slot: str,
    publication: str,
    rules: Sequence[tables.TableRule] = (),
    replace_slot: bool = False,
    resume: bool = False,
    options: LoadOptions | None = None,
    progress_path: Path | None = None,
    spark: Any = None,
) -> LoadSummary:
    """Create ``slot`` and load every matching table as of its consistent point (see the module doc).

    Each table is split into ranges of ``options.pages_per_range`` pages read on
    ``options.workers`` threads, one commit per range. A table already holding data (a load that
    stopped half-way before streaming began) is overwritten (``insert_overwrite_table`` as its first
    commit), never appended to; ``replace_slot`` drops the slot such a load left (see
    :func:`exported_snapshot`), ``resume`` keeps it and loads only the ranges left. Each table's
    progress is also kept in ``progress_path`` (a :class:`~inlet.services.writer.load_ranges.ProgressFile`).
    With ``spark`` (a SparkSession), the ranges are Spark tasks instead of threads
    (:mod:`~inlet.services.writer.spark_load`).
    """
    opts = options or LoadOptions()
    summary = LoadSummary()
    sink = ProgressFile(progress_path) if progress_path is not None else None
    catalog = PostgresCatalog(conninfo)
    try:
        with (
            exported_snapshot(conninfo, slot, publication, replace_slot, resume) as snap,
            snapshot_connection(conninfo, snap.name) as conn,
        ):
            summary.lsn = snap.lsn
            database = conn.info.dbname
            found = matching_tables(conn, globs)
            log_event(
                log,
                logging.INFO,
                "initial load: snapshot exported",
                slot=slot,
                lsn=snap.lsn,
                tables=len(found),
                resumed=snap.resumed,
                workers=opts.workers,
                pages_per_range=opts.pages_per_range,
                engine="local" if spark is None else f"spark ({spark.sparkContext.master})",
            )
            for schema, table in found:
                try:
                    result = _load_table(
                        conninfo,
                        conn,
                        catalog,
                        snap,
                        schema,
                        table,
                        client,
                        lake_root,
                        database,
                        topic_prefix,
                        rules,
                        opts,
                        sink,
                        spark,
                    )
                except LoadError as e:
                    summary.skipped[f"{schema}.{table}"] = str(e)
                    if sink is not None:
                        sink.update(f"{topic_prefix}.{schema}.{table}", "skipped", reason=str(e))
                    log_event(
                        log,
                        logging.INFO,
                        "initial load: left to Debezium's snapshot",
                        table=f"{schema}.{table}",
                        reason=str(e),
                    )
                    continue
                summary.loaded.append(result)
                log_event(log, logging.INFO, "initial load: table loaded", **dataclasses.asdict(result))
    finally:
        catalog.close()
    return summary


def _load_table(
    conninfo: str,
    conn: psycopg.Connection[Any],
    catalog: PostgresCatalog,
    snap: ExportedSnapshot,
    schema: str,
    table: str,
    client: CoordinatorClient,
    lake_root: str,
    database: str,
    topic_prefix: str,
    rules: Sequence[tables.TableRule],
    opts: LoadOptions,
    sink: ProgressFile | None = None,
    spark: Any = None,
) -> LoadResult:
    started = time.monotonic()
    plan = plan_table(catalog, conn, schema, table)
    pages, relfilenode = table_pages(conn, schema, table)
    table_id = f"{topic_prefix}.{schema}.{table}"
    settings = tables.settings_for(rules, table_id)
    path = tables.ensure_table(client, table_id, lake_root, database, schema, table, plan.keys, settings)

    def open_table() -> HudiTable:  # a handle per commit: concurrent commits share none
        return HudiTable.open(path, commit_protocol=GrpcCommitProtocol(client, table_id, Storage(path)))

    state = _table_state(open_table(), snap.lsn, relfilenode, resumable=settings.nbcc)
    ranges = ranges_left(pages, opts.pages_per_range, state.done)
    progress = Progress(table_id, sum(r.pages(pages) for r in ranges), opts.progress_interval_s, sink=sink)
    progress.publish()
    work = _TableLoad(
        conninfo,
        snap,
        plan,
        open_table,
        settings.nbcc,
        table_id,
        topic_prefix,
        {LOG_BLOCK_FORMAT: "parquet", **settings.options},
        relfilenode,
        pages,
        state.overwrite,
        progress,
    )
    try:
        rows = _load_ranges(work, ranges, opts.workers) if spark is None else _load_waves(work, ranges, spark)
    except LoadError:
        if work.committed or state.done or state.overwrite:
            work.clear()
        raise
    progress.report("table read", state="loaded")
    return LoadResult(
        table_id, path, rows, round(time.monotonic() - started, 3), len(ranges), len(state.done)
    )
