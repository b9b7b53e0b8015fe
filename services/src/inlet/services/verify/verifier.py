"""Verifying replicated tables against their PostgreSQL source, table by table.

For each source table matching the globs (and each lake table under ``<lake>/<database>/`` that
matches them but has no source table):

1. Read the source (one ``COPY``, rendered as the writer stores values) and the lake table
   (snapshot read, soft-deleted rows dropped), each reduced to keys + row hashes.
2. :func:`inlet.services.verify.compare.compare`: checksums of primary-key range chunks, and the
   differing chunks row by row: keys *missing* (in the source, not the lake), *extra* (in the lake,
   not the source), *different* (values differ), *duplicate* (the lake holds the key twice).
3. Recheck: changes may still be streaming, so the differing keys are read again on both sides
   (by key; a whole-table pass when there are very many) after waiting, briefly, for the lake
   table to complete another commit. A key whose lake row caught up with the source drops out.
   Up to ``rechecks`` rounds; it stops early once a round without lake progress finds the same.
4. ``repair``: one upsert commit that makes the remaining keys equal (:mod:`.repair`), then the
   repaired keys are compared once more.

Tables without a primary key are compared as multisets of rows when the lake has them (Inlet
replicates them only when keyed by the whole row); otherwise they are skipped, saying why.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa

from inlet.core import InletError
from inlet.core.progress import Throttle
from inlet.services.cdc_consumer.errors import DecodeError
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.logs import log_event
from inlet.services.verify import lake as lake_side
from inlet.services.verify.compare import Diff, Hashed, compare, compare_multiset
from inlet.services.verify.repair import Repair, RepairError, RepairTarget, repair
from inlet.services.verify.source import SourceError, SourceReader, SourceTable
from inlet.services.writer.tables import TableConfigError, TableRule, table_path

log = logging.getLogger("inlet.verify")
progress_log = logging.getLogger("inlet.verify.progress")

KINDS = ("missing", "extra", "different", "duplicate")
EQUAL, REPAIRED, DIFFERENT, SKIPPED, ERROR = "equal", "repaired", "different", "skipped", "error"


@dataclasses.dataclass(frozen=True)
class VerifyOptions:
    source_url: str
    lake_root: str
    tables: tuple[str, ...] = ("public.*",)
    chunk_rows: int = 100_000
    rechecks: int = 3
    recheck_wait_s: float = 2.0
    recheck_keys: int = 50_000  # more differing keys than this: a recheck re-reads whole tables
    max_keys: int = 1000  # keys reported per kind and table
    repair: bool = False
    topic_prefix: str | None = None
    rules: tuple[TableRule, ...] = ()


@dataclasses.dataclass
class TableReport:
    table: str  # schema.table
    path: str
    status: str = EQUAL  # equal | repaired (differed, equal after the repair) | different | skipped | error
    reason: str | None = None
    source_rows: int = 0
    lake_rows: int = 0
    chunks: int = 0
    differing_chunks: int = 0
    rechecks: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    keys: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=lambda: {k: [] for k in KINDS})
    ignored_columns: dict[str, str] = dataclasses.field(default_factory=dict)  # source columns not compared
    lake_only_columns: list[str] = dataclasses.field(default_factory=list)
    repair: Repair | None = None
    remaining: int | None = None  # differing keys after the repair

    @property
    def rows_per_s(self) -> float:
        rows = max(self.source_rows, self.lake_rows)
        return round(rows / self.seconds, 1) if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["rows_per_s"] = self.rows_per_s
        doc["repair"] = self.repair.as_json() if self.repair is not None else None
        return doc


class Progress:
    """Progress lines (logger ``inlet.verify.progress``, INFO), at most one per ``interval_s`` a table
    (the shared :class:`inlet.core.progress.Throttle`); ``force`` lines (a table's start, its result)
    always."""

    def __init__(self, interval_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._throttle = Throttle(interval_s, clock)

    def __call__(self, table: str, message: str, force: bool = False, **fields: Any) -> None:
        if self._throttle.due(table, force):
            log_event(progress_log, logging.INFO, message, table=table, **fields)


def _key_dicts(keys: pa.Table, limit: int) -> list[dict[str, Any]]:
    return keys.slice(0, limit).to_pylist()  # type: ignore[no-any-return]


def _matches(name: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


class Verifier:
    """Runs the verification (see the module doc); :meth:`run` returns one report per table."""

    def __init__(
        self,
        options: VerifyOptions,
        client: CoordinatorClient | None = None,
        progress: Progress | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options
        self.client = client
        self.progress = progress or Progress()
        self.sleep = sleep

    def run(self) -> list[TableReport]:
        with tempfile.TemporaryDirectory(prefix="inlet-verify-") as workdir:
            reader = SourceReader(self.options.source_url, Path(workdir))
            try:
                return self._run(reader)
            finally:
                reader.close()

    def _run(self, reader: SourceReader) -> list[TableReport]:
        database = reader.database
        found = reader.tables(self.options.tables)
        reports = []
        for st in found:
            reports.append(self._table(reader, database, st))
        known = {(st.schema, st.table) for st in found}
        for schema, table in lake_side.lake_tables(self.options.lake_root, database):
            if (schema, table) in known or not _matches(f"{schema}.{table}", self.options.tables):
                continue
            path = table_path(self.options.lake_root, database, schema, table)
            report = TableReport(
                f"{schema}.{table}", path, DIFFERENT, f"the source has no table {schema}.{table}"
            )
            hudi = lake_side.open_table(path)
            if hudi is not None and hudi.schema() is not None:
                keys = list(hudi.record_key_fields)
                report.lake_rows = hudi.read(columns=keys, meta_columns=False).num_rows
            reports.append(report)
        return reports

    # ------------------------------------------------------------------ one table

    def _table(self, reader: SourceReader, database: str, st: SourceTable) -> TableReport:
        started = time.monotonic()
        report = TableReport(st.name, "", ignored_columns=dict(st.unrendered))
        try:
            path = report.path = table_path(self.options.lake_root, database, st.schema, st.table)
            self.progress(st.name, "verifying", force=True, path=path)
            problem = st.key_problem()
            if problem is None:
                self._keyed(reader, database, st, report)
            elif lake_side.open_table(path) is None:
                report.status = SKIPPED
                report.reason = (
                    f"{problem}: rows cannot be matched by key, and the lake has no such table "
                    "(Inlet replicates such tables only keyed by the whole row)"
                )
            elif not st.keys:
                self._multiset(reader, st, report)
            else:
                report.status = SKIPPED
                report.reason = problem
        except (
            SourceError,
            lake_side.LakeError,
            RepairError,
            InletError,
            DecodeError,
            TableConfigError,
            psycopg.Error,
        ) as e:
            log.debug("verifying %s failed", st.name, exc_info=True)
            report.status = ERROR
            report.reason = " ".join(str(e).split())
        report.seconds = round(time.monotonic() - started, 3)
        self.progress(
            st.name,
            "verified",
            force=True,
            status=report.status,
            rows=max(report.source_rows, report.lake_rows),
            seconds=report.seconds,
            rows_per_s=report.rows_per_s,
        )
        return report

    def _read(
        self, reader: SourceReader, st: SourceTable, path: str, keys: pa.Table | None
    ) -> tuple[Hashed, lake_side.LakeRead]:
        """Both sides: whole tables, or the rows of ``keys``."""
        name = st.name
        if keys is None:

            def source_progress(what: str, count: int) -> None:
                if what == "bytes":
                    self.progress(name, "copying the source", mb=round(count / 1e6, 1))
                else:
                    self.progress(name, "hashing the source", rows=count)

            source = reader.read_hashed(st, progress=source_progress)
        else:
            rows = reader.read_rows(st, keys)
            source = Hashed.of(rows, st.keys, st.columns)
        hudi = lake_side.open_table(path)
        if hudi is None:
            empty = Hashed.empty(st.key_schema)
            return source, lake_side.LakeRead(empty, None, None, [])

        def lake_progress(done: int, slices: int, rows: int) -> None:
            self.progress(name, "reading the lake", slices=f"{done}/{slices}", rows=rows)

        lake = lake_side.read_hashed(
            hudi, st.fields, st.keys, only_keys=keys, progress=lake_progress if keys is None else None
        )
        return source, lake

    def _keyed(self, reader: SourceReader, database: str, st: SourceTable, report: TableReport) -> None:
        opts = self.options
        marker = lake_side.progress_marker(report.path)
        source, lake = self._read(reader, st, report.path, None)
        report.source_rows, report.lake_rows = source.rows, lake.hashed.rows
        report.lake_only_columns = lake.lake_only
        if lake_side.open_table(report.path) is None:
            report.reason = f"the lake has no table at {report.path}"
        shard = lake.shard
        diff = compare(source, lake.hashed, opts.chunk_rows)
        report.chunks, report.differing_chunks = diff.chunks, diff.differing_chunks
        for chunk, source_rows, lake_rows, differs in diff.chunk_ranges:
            self.progress(
                st.name,
                "chunk differs" if differs else "chunk equal",
                force=differs,
                chunk=chunk,
                source_rows=source_rows,
                lake_rows=lake_rows,
            )
        self.progress(
            st.name,
            "compared",
            force=True,
            chunks=diff.chunks,
            differing_chunks=diff.differing_chunks,
            differing_keys=diff.count,
        )
        diff = self._recheck(reader, st, report, diff, marker)
        self._fill(report, diff)
        if diff and opts.repair:
            target = RepairTarget(report.path, database, self.client, opts.topic_prefix, opts.rules)
            report.repair = repair(reader, st, diff.keys(), target, shard)
            source, lake = self._read(reader, st, report.path, diff.keys())
            after = compare(source, lake.hashed, max(1, source.rows))
            report.remaining = after.count
            self.progress(st.name, "repaired", force=True, remaining=after.count, **report.repair.as_json())
            if after:
                report.reason = f"{after.count} keys still differ after the repair"
            else:
                report.status = REPAIRED

    def _recheck(
        self, reader: SourceReader, st: SourceTable, report: TableReport, diff: Diff, marker: str
    ) -> Diff:
        opts = self.options
        for _ in range(opts.rechecks):
            if not diff:
                break
            report.rechecks += 1
            progressed = self._wait_for_progress(report.path, marker)
            marker = lake_side.progress_marker(report.path)
            if diff.count > opts.recheck_keys:
                source, lake = self._read(reader, st, report.path, None)
                report.source_rows, report.lake_rows = source.rows, lake.hashed.rows
                new = compare(source, lake.hashed, opts.chunk_rows)
            else:
                source, lake = self._read(reader, st, report.path, diff.keys())
                new = compare(source, lake.hashed, max(1, source.rows))
            stable = not progressed and new.signature() == diff.signature()
            self.progress(
                st.name,
                "rechecked",
                force=True,
                round=report.rechecks,
                lake_progressed=progressed,
                differing_keys=new.count,
            )
            diff = new
            if stable:
                break
        return diff

    def _wait_for_progress(self, path: str, marker: str) -> bool:
        """Whether the lake table completed an instant since ``marker``, waiting up to recheck_wait_s."""
        deadline = time.monotonic() + self.options.recheck_wait_s
        while True:
            if lake_side.progress_marker(path) != marker:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sleep(min(0.1, left))

    def _multiset(self, reader: SourceReader, st: SourceTable, report: TableReport) -> None:
        """A table without a primary key: its rows compared as multisets (no rechecks, no repair)."""
        hudi = lake_side.open_table(report.path)
        assert hudi is not None
        source = reader.read_hashed(st)  # "keyed" by every column
        lake = lake_side.read_hashed(hudi, st.fields, st.match_columns)
        report.source_rows, report.lake_rows = source.rows, lake.hashed.rows
        report.lake_only_columns = [c for c in lake.lake_only if c != "_inlet_record_key"]
        found = compare_multiset(source.hashes, lake.hashed.hashes)
        report.counts["missing"] = len(found.missing)
        report.counts["extra"] = len(found.extra)
        limit = self.options.max_keys
        report.keys["missing"] = _key_dicts(source.keys.take(np.sort(found.missing)[:limit]), limit)
        report.keys["extra"] = _key_dicts(lake.hashed.keys.take(np.sort(found.extra)[:limit]), limit)
        report.status = DIFFERENT if found.count else EQUAL
        if found.count:
            report.reason = "no primary key: compared as multisets of rows (rows shown whole)"
            if self.options.repair:
                report.reason += "; not repaired (no key to upsert or delete by)"

    def _fill(self, report: TableReport, diff: Diff) -> None:
        limit = self.options.max_keys
        for kind, keys in zip(KINDS, (diff.missing, diff.extra, diff.different, diff.duplicate), strict=True):
            report.counts[kind] = keys.num_rows
            report.keys[kind] = _key_dicts(keys, limit)
        report.status = DIFFERENT if diff else EQUAL
