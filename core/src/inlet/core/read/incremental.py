"""Incremental queries: the latest state of the records that commits of a window wrote.

Apache Hudi 1.x (table version 8), ``hoodie.datasource.query.type=incremental`` with
``hoodie.datasource.query.incremental.format=latest_state``:

- the window ``(begin, end]`` is on **completion** times (``hoodie.datasource.read.begin.instanttime``
  exclusive, ``hoodie.datasource.read.end.instanttime`` inclusive, open-ended without one);
- its commits are the completed writes (commit, deltacommit, replacecommit) completed in it, except
  table services that write no new record versions: compaction and clustering;
- the result holds, for every record such a commit wrote, the record's state as of the window's
  last commit when that state was written inside the window (its ``_hoodie_commit_time`` is one of
  the window's instants); records deleted by then are not returned (Hudi's latest-state format
  carries no deletes);
- only the file groups the window's commits touched are read (from their write stats); when
  ``begin`` lies before the active timeline (those commits were archived, their stats are gone),
  every file group is read and the rows filtered on ``_hoodie_commit_time``, as Hudi's fallback to a
  full table scan does.

Every result names the completion time to resume from: a consumer that passes it as the next
``begin`` sees every later commit once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.errors import InvalidInputError, UnsupportedError
from inlet.core.file_group.view import FileSlice
from inlet.core.read.snapshot import ReadPlan, plan_read, read_slice
from inlet.core.schema import META_COLUMNS, MetaField
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant, normalize_instant_time

COMMIT_TIME: str = MetaField.COMMIT_TIME.value
EARLIEST = "0" * 17  # a begin before every instant
# operations that rewrite records without changing them (no new versions for change queries)
_TABLE_SERVICE_OPERATIONS = {"compact", "cluster", "log_compact"}


@dataclass(frozen=True)
class ChangeWindow:
    """The commits of ``(begin, end]`` (completion times) and where a consumer resumes."""

    begin: str
    end: str | None
    instants: tuple[Instant, ...]  # the window's write commits, by completion time
    full_scan: bool  # begin precedes the active timeline: no write stats to prune file groups with

    @property
    def resume_from(self) -> str:
        """The completion time to pass as the next ``begin``."""
        if self.instants:
            return max(i.completion_time or i.time for i in self.instants)
        return self.begin


@dataclass(frozen=True)
class Changes:
    """An incremental query's rows and its window."""

    table: pa.Table
    window: ChangeWindow

    @property
    def resume_from(self) -> str:
        return self.window.resume_from


def _is_table_service(timeline: Timeline, instant: Instant) -> bool:
    if instant.action not in (Action.COMMIT, Action.REPLACE_COMMIT):
        return False
    op = (timeline.commit_metadata(instant).operation_type or "").lower()
    return op in _TABLE_SERVICE_OPERATIONS


def change_window(timeline: Timeline, begin: str, end: str | None = None) -> ChangeWindow:
    """The write commits completed in ``(begin, end]``."""
    try:
        # Hudi's "from the start": 000 (HoodieTimeline.INIT_INSTANT_TS is zeros)
        b = EARLIEST if begin.strip() and not begin.strip().strip("0") else normalize_instant_time(begin)
        e = normalize_instant_time(end) if end else None
    except ValueError as err:
        raise InvalidInputError(f"invalid incremental window: {err}") from None
    if e is not None and e < b:
        raise InvalidInputError(f"the incremental window ends ({e}) before it begins ({b})")
    picked = [
        i
        for i in timeline.completed_writes()
        if (i.completion_time or i.time) > b
        and (e is None or (i.completion_time or i.time) <= e)
        and not _is_table_service(timeline, i)
    ]
    picked.sort(key=lambda i: i.completion_time or i.time)
    first = timeline.instants[0].time if timeline.instants else None
    return ChangeWindow(b, e, tuple(picked), full_scan=first is not None and b < first)


def instant_window(timeline: Timeline, instant_time: str) -> tuple[str, str]:
    """The window ``(begin, end]`` holding exactly one completed instant (what a commit event
    names): from the completion time before its own to its own."""
    t = normalize_instant_time(instant_time)
    found = next((i for i in timeline.instants if i.time == t and i.is_completed), None)
    if found is None:
        pending = any(i.time == t for i in timeline.instants)
        raise InvalidInputError(
            f"instant {t} is {'not completed' if pending else 'not on the active timeline'}: "
            "only a completed instant's changes can be read"
        )
    done = found.completion_time or found.time
    earlier = [i.completion_time or i.time for i in timeline.instants if i.is_completed]
    return max((c for c in earlier if c < done), default=EARLIEST), done


@dataclass
class IncrementalPlan:
    """A latest-state incremental query, planned: the file slices the window touched (as of its
    last commit), the window, and the columns returned. Plain values: :func:`read_incremental_slice`
    reads one slice anywhere the table is reachable (a Spark task)."""

    plan: ReadPlan
    window: ChangeWindow
    times: tuple[str, ...]  # the window's commits (requested times): the rows' commit times
    columns: tuple[str, ...] | None
    meta_columns: bool

    @property
    def out_schema(self) -> pa.Schema:
        names = _returned(self.plan.out_schema.names, self.columns, self.meta_columns)
        return pa.schema([self.plan.out_schema.field(n) for n in names])


def plan_incremental(
    table: TableHandle,
    begin: str,
    end: str | None = None,
    columns: Sequence[str] | None = None,
    filters: Sequence[tuple[str, str, Any]] | None = None,
    meta_columns: bool = True,
) -> IncrementalPlan:
    """Plan the latest state of the records written by the commits completed in ``(begin, end]``."""
    if not table.meta.populate_meta_fields:
        raise UnsupportedError(
            "incremental queries need the _hoodie_* meta fields (this table has hoodie.populate.meta.fields=false)"
        )
    timeline = table.load_timeline()
    window = change_window(timeline, begin, end)
    wanted = tuple(columns) if columns is not None else None
    read_columns = None if wanted is None else list(dict.fromkeys([*wanted, COMMIT_TIME]))
    as_of: str | None = max((i.time for i in window.instants), default=None)
    if as_of is None or as_of == max((i.time for i in timeline.completed_writes()), default=None):
        as_of = None  # the window reaches the latest write: a plain snapshot, no time travel
    plan = plan_read(table, as_of, read_columns, filters, meta_columns=True)
    if not window.instants:
        plan.slices = []
    elif not window.full_scan:
        touched: set[tuple[str, str]] = set()
        for inst in window.instants:
            touched |= timeline.commit_metadata(inst).touched_file_groups()
        plan.slices = [s for s in plan.slices if (s.partition, s.file_id) in touched]
    times = tuple(sorted(i.time for i in window.instants))
    return IncrementalPlan(plan, window, times, wanted, meta_columns)


def read_incremental_slice(
    table: TableHandle, planned: IncrementalPlan, file_slice: FileSlice
) -> Iterator[pa.Table]:
    """The rows of one planned slice that the window's commits wrote."""
    times = pa.array(planned.times, pa.string())
    names = planned.out_schema.names
    for piece in read_slice(table, planned.plan, file_slice):
        kept = piece.filter(pc.is_in(piece[COMMIT_TIME].cast(pa.string()), value_set=times))
        if kept.num_rows:
            yield kept.select(names)


def read_incremental(
    table: TableHandle,
    begin: str,
    end: str | None = None,
    columns: Sequence[str] | None = None,
    filters: Sequence[tuple[str, str, Any]] | None = None,
    meta_columns: bool = True,
) -> Changes:
    """The latest state of the records written by the commits completed in ``(begin, end]``."""
    planned = plan_incremental(table, begin, end, columns, filters, meta_columns)
    pieces = [p for fs in planned.plan.slices for p in read_incremental_slice(table, planned, fs)]
    result = pa.concat_tables(pieces) if pieces else planned.out_schema.empty_table()
    return Changes(result, planned.window)


def read_file_groups(
    table: TableHandle,
    as_of: str | None,
    groups: set[tuple[str, str]] | None,
    columns: Sequence[str] | None,
    partitions: set[str] | None = None,
    missing_ok: bool = False,
) -> pa.Table:
    """The table as of ``as_of``, restricted to ``groups`` (None: every file group) and to
    ``partitions`` (None: all), with the record key and commit time beside ``columns`` (None: every
    column): the states change queries compare. ``missing_ok``: columns the table did not have yet
    as of ``as_of`` are left out instead of refused."""
    wanted = (
        None if columns is None else list(dict.fromkeys([MetaField.RECORD_KEY.value, COMMIT_TIME, *columns]))
    )
    plan = plan_read(table, as_of, None if missing_ok else wanted, None, meta_columns=True)
    if missing_ok and wanted is not None:
        known = pa.schema([plan.queryable.field(c) for c in wanted if c in plan.queryable.names])
        plan.out_schema = plan.read_schema = known
    if groups is not None:
        plan.slices = [s for s in plan.slices if (s.partition, s.file_id) in groups]
    if partitions is not None:
        plan.slices = [s for s in plan.slices if s.partition in partitions]
    pieces = [p for fs in plan.slices for p in read_slice(table, plan, fs)]
    return pa.concat_tables(pieces) if pieces else plan.out_schema.empty_table()


def _returned(names: Sequence[str], wanted: Sequence[str] | None, meta_columns: bool) -> list[str]:
    if wanted is not None:
        return list(wanted)
    return [c for c in names if meta_columns or c not in META_COLUMNS]
