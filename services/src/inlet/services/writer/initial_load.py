"""Initial load by ``COPY``: the tables' existing rows straight from PostgreSQL into Hudi, then CDC.

Debezium's initial snapshot sends every existing row through Kafka as a change event (with its
schema, as JSON), the CDC consumer and the writer; on two cores that path moves a few thousand rows
a second. Tools that replicate Postgres at scale load the existing rows in bulk instead and stream
from the exact point the bulk read saw, and so does this module:

1. A publication for all tables is made sure of (pgoutput decodes with the catalog as of each WAL
   record, so it must exist before the slot's start), then the connector's logical replication slot
   is created on a replication connection with ``EXPORT_SNAPSHOT``: PostgreSQL returns the slot's
   consistent point (an LSN) and the name of a snapshot that sees exactly the transactions committed
   before it.
2. Each table is read in that snapshot (``SET TRANSACTION SNAPSHOT``) with one
   ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` whose select list renders each column the way the
   writer stores it (epoch microseconds for timestamps and times, days for dates, Debezium's
   ``MicroDuration`` arithmetic for intervals, JSON for arrays), parsed by Arrow's CSV reader.
3. The rows are written with ``bulk_insert`` through the coordinator into the Hudi table the writer
   would have created (same path, record key, ordering field, options and column types), as
   Debezium ``r`` (read) rows whose ``_event_lsn`` is :data:`~inlet.services.writer.rows.SNAPSHOT_ORDERING`
   (0), as the writer stores Debezium's own snapshot reads: with EVENT_TIME_ORDERING every change
   streamed afterwards wins over the loaded row. Not the consistent point: a transaction that began
   between the snapshot builder's steps and is still open at the consistent point is not in the
   snapshot, and streams when it commits with change LSNs *below* the consistent point. The commit
   records the consistent point in its extraMetadata (``inlet.initial_load.lsn``).
4. Debezium then starts on the existing slot without a data snapshot (``snapshot.mode=no_data``)
   for the loaded tables and streams from the consistent point. Tables this module cannot load (no
   primary key, a column type without a rendering here) are left to Debezium's own snapshot
   (``snapshot.include.collection.list``).

The load commit carries no Kafka checkpoint, so the writer reads the change topic from its start.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from pyarrow import csv

from inlet.core import HudiTable
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
from inlet.services.writer import tables
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
    name: str  # the exported snapshot, valid while the replication connection stays open


@dataclasses.dataclass(frozen=True)
class LoadResult:
    table_id: str
    path: str
    rows: int
    seconds: float


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


@contextmanager
def exported_snapshot(
    conninfo: str, slot: str, publication: str, replace_slot: bool = False
) -> Iterator[ExportedSnapshot]:
    """Create ``slot`` (pgoutput) exporting its snapshot; the snapshot lives until the block ends.

    A slot of that name left by a load that stopped midway is dropped first with ``replace_slot``
    (never one in use); without it, it is an error that says so."""
    if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
        raise LoadError(f"replication slot name {slot!r}: use 1-63 lower-case letters, digits and '_'")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        existing = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if existing is not None:
            if existing[0] is not None:
                raise LoadError(
                    f"replication slot {slot} is in use (by pid {existing[0]}); stop its consumer"
                )
            if not replace_slot:
                raise LoadError(
                    f"cannot create replication slot {slot}: it already exists (a load that stopped "
                    "midway leaves it): rerun with --replace-slot to drop and create it again, unless "
                    "Debezium already streams from it"
                )
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            log_event(log, logging.WARNING, "initial load: dropped the existing replication slot", slot=slot)
        found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(publication)))
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
    return pa.array([None if v is None else bytes.fromhex(v) for v in arr.to_pylist()], pa.binary())


def _json_lists(target: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    floats = pa.types.is_floating(target.value_type)

    def finish(arr: pa.Array) -> pa.Array:
        lists = [None if v is None else json.loads(v) for v in arr.to_pylist()]
        if floats:  # to_json writes NaN and the infinities as strings
            lists = [
                None if v is None else [_FLOAT_WORDS.get(x, x) if x.__class__ is str else x for x in v]
                for v in lists
            ]
        return pa.array(lists, target)

    return finish


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


def _read_or_refuse(conn: psycopg.Connection[Any], plan: TablePlan, workdir: Path) -> pa.Table:
    """:func:`read_table` in a savepoint: a value the rendering refuses (or PostgreSQL cannot
    render) makes the table a LoadError, left to Debezium's snapshot, and the load goes on."""
    conn.execute("SAVEPOINT inlet_copy")
    try:
        data = read_table(conn, plan, workdir)
    except psycopg.errors.DataError as e:
        conn.execute("ROLLBACK TO SAVEPOINT inlet_copy")
        why = refusal(e) or str(e).strip().splitlines()[0]
        raise LoadError(f"{plan.schema}.{plan.table}: {why}") from None
    conn.execute("RELEASE SAVEPOINT inlet_copy")
    return data


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


def matching_tables(conn: psycopg.Connection[Any], globs: Sequence[str]) -> list[tuple[str, str]]:
    """The ordinary and partitioned tables whose ``schema.table`` matches one of ``globs``."""
    rows = conn.execute(
        """SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
             AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
           ORDER BY 1, 2"""
    ).fetchall()
    return [(s, t) for s, t in rows if any(fnmatch.fnmatchcase(f"{s}.{t}", g) for g in globs)]


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
) -> LoadSummary:
    """Create ``slot`` and load every matching table as of its consistent point (see the module doc).

    A table already holding data (a load that stopped half-way before streaming began) is
    overwritten (``insert_overwrite_table``), never appended to; ``replace_slot`` drops the slot
    such a load left (see :func:`exported_snapshot`).
    """
    summary = LoadSummary()
    catalog = PostgresCatalog(conninfo)
    try:
        with (
            exported_snapshot(conninfo, slot, publication, replace_slot) as snap,
            psycopg.connect(conninfo) as conn,
        ):
            summary.lsn = snap.lsn
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snap.name)))
            database = conn.info.dbname
            found = matching_tables(conn, globs)
            log_event(
                log,
                logging.INFO,
                "initial load: snapshot exported",
                slot=slot,
                lsn=snap.lsn,
                tables=len(found),
            )
            with tempfile.TemporaryDirectory(prefix="inlet-load-") as workdir:
                for schema, table in found:
                    started = time.monotonic()
                    try:
                        plan = plan_table(catalog, conn, schema, table)
                        rows = _read_or_refuse(conn, plan, Path(workdir))
                    except LoadError as e:
                        summary.skipped[f"{schema}.{table}"] = str(e)
                        log_event(
                            log,
                            logging.INFO,
                            "initial load: left to Debezium's snapshot",
                            table=f"{schema}.{table}",
                            reason=str(e),
                        )
                        continue
                    data = with_event_columns(rows, SNAPSHOT_ORDERING, topic_prefix)
                    table_id = f"{topic_prefix}.{schema}.{table}"
                    settings = tables.settings_for(rules, table_id)
                    path = tables.ensure_table(
                        client, table_id, lake_root, database, schema, table, plan.keys, settings
                    )
                    hudi = HudiTable.open(
                        path, commit_protocol=GrpcCommitProtocol(client, table_id, Storage(path))
                    )
                    op = "bulk_insert" if hudi.schema() is None else "insert_overwrite_table"
                    if data.num_rows or op != "bulk_insert":
                        hudi.write(
                            data, op, dict(settings.options), extra_metadata={LOAD_LSN_KEY: str(snap.lsn)}
                        )
                    result = LoadResult(table_id, path, data.num_rows, round(time.monotonic() - started, 3))
                    summary.loaded.append(result)
                    log_event(log, logging.INFO, "initial load: table loaded", **dataclasses.asdict(result))
    finally:
        catalog.close()
    return summary
