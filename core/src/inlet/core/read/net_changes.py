"""Net change queries over a window of commits, the two change streams Apache Hudi lacks.

The window is the incremental query's (:mod:`inlet.core.read.incremental`): the write commits
whose completion time is in ``(begin, end]``, compactions and clustering excluded.

- **min-delta**: per key, the net effect of the window: nothing when the key's data is the same at
  both ends (an update chain that came back, or an insert deleted again inside the window), else
  one ``i`` (insert: absent before), one ``d`` (delete: absent at the end) or one ``u`` (update)
  row, with the ``before`` image at the window's start and the ``after`` image at its end (data
  columns, as structs). ``commit_time`` is the ``_hoodie_commit_time`` of the after image (null for
  deletes: the deleting commit leaves no record). It compares, for the record keys of the file
  groups the window's commits touched (of their whole partitions when a clustering or another
  replace commit moved records between file groups in the meantime, and of every file group when
  ``begin`` precedes the active timeline), the table's state **before** the window (as of the last
  write completed at or before ``begin``) with its state at the window's **end**. The "before"
  state is read as of the last write *requested* at or before the window's start, which is the
  state of the commits completed by then unless a write requested earlier completed inside the
  window (concurrent writers): such a write's records count as changed by the window.
- **append-only**: every record the window inserted, with the values it was inserted with
  (Snowflake's ``APPEND_ONLY`` streams), as plain rows with their meta columns, for consumers that
  treat a table as an event log. Each commit's inserts are found as the CDC query
  (:mod:`inlet.core.read.cdc`) infers them: the keys the commit wrote (``_hoodie_commit_time`` is
  the commit) that were absent from the file groups it touched as of the write before it; each is
  returned as that commit left it. What later commits of the window do to an inserted record does
  not matter: 10 records inserted and 5 of them updated or deleted afterwards give the 10 records
  as inserted. A key deleted and inserted again gives one row per insertion (as Snowflake counts
  each insert, whether or not the key existed at the window's start); a key that is only updated
  gives none. Rows come by commit (completion order), then record key. A window that begins before
  the active timeline counts the inserts of its commits still on the active timeline, as the
  latest-state query returns their rows only (the first of them is compared with the state as of
  the last archived write).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.errors import InvalidInputError, UnsupportedError
from inlet.core.read.cdc import CDC_SCHEMA, archived_timeline, previous_write
from inlet.core.read.incremental import ChangeWindow, change_window, read_file_groups
from inlet.core.read.options import ChangeFormat
from inlet.core.read.snapshot import plan_read
from inlet.core.schema import META_COLUMNS, MetaField
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action, Instant

KEY: str = MetaField.RECORD_KEY.value
COMMIT_TIME: str = MetaField.COMMIT_TIME.value
INSERT, UPDATE, DELETE = "i", "u", "d"


def _start_instant(timeline: Timeline, begin: str) -> str | None:
    """The last write completed at or before ``begin`` (the state before the window), by its
    requested time; None when none had completed (the table was empty)."""
    done = [i for i in timeline.completed_writes() if (i.completion_time or i.time) <= begin]
    return max((i.time for i in done), default=None)


def _ends(
    table: TableHandle, begin: str, end: str | None, columns: Sequence[str] | None
) -> tuple[ChangeWindow, pa.Table, pa.Table]:
    if not table.meta.populate_meta_fields:
        raise UnsupportedError(
            "change queries need the _hoodie_* meta fields (this table has hoodie.populate.meta.fields=false)"
        )
    timeline = table.load_timeline()
    window = change_window(timeline, begin, end)
    if not window.instants:
        empty = read_file_groups(table, None, set(), columns)
        return window, empty, empty
    groups: set[tuple[str, str]] | None = None
    last = max(i.time for i in window.instants)
    start = _start_instant(timeline, window.begin)
    partitions: set[str] | None = None
    if not window.full_scan:
        groups = set()
        for inst in window.instants:
            groups |= timeline.commit_metadata(inst).touched_file_groups()
        moved = _replaced_between(timeline, start, last)
        if moved:  # records moved between file groups: compare the partitions, not the file groups
            partitions = {p for p, _ in groups | moved}
            groups = None
    before = (
        read_file_groups(table, start, groups, columns, partitions)
        if start
        else read_file_groups(table, None, set(), columns)
    )
    after = read_file_groups(table, last, groups, columns, partitions)
    return window, before, after


def _replaced_between(timeline: Timeline, start: str | None, last: str) -> set[tuple[str, str]]:
    """The file groups of the replace commits (clustering, insert overwrite) requested after the
    state ``start`` and up to ``last``: a key the window wrote may have lived in another file group
    at the window's start, or live in another one at its end."""
    out: set[tuple[str, str]] = set()
    for inst in timeline.completed_writes():
        if (
            inst.action == Action.REPLACE_COMMIT
            and (start is None or inst.time > start)
            and inst.time <= last
        ):
            out |= timeline.commit_metadata(inst).touched_file_groups()
    return out


def _data_columns(t: pa.Table, columns: Sequence[str] | None) -> list[str]:
    return list(columns) if columns is not None else [c for c in t.column_names if c not in META_COLUMNS]


def read_min_delta(
    table: TableHandle, begin: str, end: str | None = None, columns: Sequence[str] | None = None
) -> tuple[ChangeWindow, pa.Table]:
    """The net change of every key the window changed: ``op``, ``record_key``, ``commit_time``,
    ``before`` and ``after`` (structs of the data columns, or of ``columns``)."""
    window, before, after = _ends(table, begin, end, columns)
    data = _data_columns(after if after.num_columns else before, columns)
    before_rows = {r[KEY]: r for r in before.to_pylist()}
    after_rows = {r[KEY]: r for r in after.to_pylist()}
    in_window = {i.time for i in window.instants}
    out: list[dict[str, Any]] = []
    for key in sorted(before_rows.keys() | after_rows.keys()):
        b, a = before_rows.get(key), after_rows.get(key)
        b_img = {c: b.get(c) for c in data} if b is not None else None
        a_img = {c: a.get(c) for c in data} if a is not None else None
        if a is not None and b is None:
            op = INSERT
        elif a is None and b is not None:
            op = DELETE
        elif a is not None and a[COMMIT_TIME] in in_window and a_img != b_img:
            op = UPDATE
        else:
            continue
        out.append(
            {
                "op": op,
                "record_key": key,
                "commit_time": a[COMMIT_TIME] if a is not None else None,
                "before": b_img,
                "after": a_img,
            }
        )
    schema = min_delta_schema([(after if after.num_columns else before).schema.field(c) for c in data])
    return window, pa.Table.from_pylist(out, schema=schema)


def min_delta_schema(image: Sequence[pa.Field]) -> pa.Schema:
    """A min-delta result's schema, ``image`` being the data columns of its before/after images."""
    struct = pa.struct(list(image))
    return pa.schema(
        [
            ("op", pa.string()),
            ("record_key", pa.string()),
            ("commit_time", pa.string()),
            ("before", struct),
            ("after", struct),
        ]
    )


def read_append_only(
    table: TableHandle,
    begin: str,
    end: str | None = None,
    columns: Sequence[str] | None = None,
    meta_columns: bool = True,
) -> tuple[ChangeWindow, pa.Table]:
    """Every record the window's commits inserted, as the inserting commit wrote it (later updates
    and deletes in the window notwithstanding), with its meta columns (unless ``meta_columns`` is
    false), or ``columns``; by commit, then record key."""
    if not table.meta.populate_meta_fields:
        raise UnsupportedError(
            "change queries need the _hoodie_* meta fields (this table has hoodie.populate.meta.fields=false)"
        )
    timeline = table.load_timeline()
    window = change_window(timeline, begin, end)
    schema = read_file_groups(table, None, set(), columns).schema
    pieces = []
    for inst in window.instants:
        prev = previous_write(timeline, inst)
        if prev is None:  # the first active write: the one before it may have been archived
            prev = max(
                (
                    i.time
                    for i in archived_timeline(table).instants
                    if i.action in Action.WRITE_ACTIONS and i.time < inst.time
                ),
                default=None,
            )
        pieces.append(_conform(_inserted_by(table, timeline, inst, prev, columns), schema))
    rows = pa.concat_tables(pieces) if pieces else schema.empty_table()
    return window, rows.select(_append_only_columns(schema.names, columns, meta_columns))


def _inserted_by(
    table: TableHandle, timeline: Timeline, inst: Instant, prev: str | None, columns: Sequence[str] | None
) -> pa.Table:
    """The records commit ``inst`` inserted, as of ``inst``: written by it and absent from the file
    groups it touched as of ``prev``, the write before it (the CDC query's ``i`` rows, see
    :mod:`inlet.core.read.cdc`), by record key."""
    groups = timeline.commit_metadata(inst).touched_file_groups()
    after = read_file_groups(table, inst.time, groups, columns, missing_ok=True)
    written = pc.equal(after.column(COMMIT_TIME).cast(pa.string()), inst.time)
    if prev is not None and after.num_rows:
        before = read_file_groups(table, prev, groups, [], missing_ok=True)  # the keys
        existed = before.column(KEY).cast(pa.string()).combine_chunks()
        written = pc.and_(written, pc.invert(pc.is_in(after.column(KEY), value_set=existed)))
    return after.filter(written).sort_by(KEY)


def _conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with ``schema``'s columns (a commit's state may predate a column: nulls)."""
    return pa.Table.from_arrays(
        [
            t.column(f.name).cast(f.type) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
            for f in schema
        ],
        schema=schema,
    )


def _append_only_columns(
    names: Sequence[str], columns: Sequence[str] | None, meta_columns: bool
) -> list[str]:
    if columns is not None:
        return list(columns)
    return [c for c in names if meta_columns or c not in META_COLUMNS]


def net_change_schema(
    table: TableHandle, fmt: ChangeFormat, columns: Sequence[str] | None = None, meta_columns: bool = True
) -> pa.Schema:
    """The schema :func:`read_min_delta`, :func:`read_append_only` or a CDC query return (as of the latest
    commit), without running the query (a Spark data source's schema)."""
    wanted = None if columns is None else list(dict.fromkeys([KEY, COMMIT_TIME, *columns]))
    full = plan_read(table, None, wanted, None, meta_columns=True).out_schema
    if fmt is ChangeFormat.MIN_DELTA:
        data = list(columns) if columns is not None else [c for c in full.names if c not in META_COLUMNS]
        return min_delta_schema([full.field(c) for c in data])
    if fmt is ChangeFormat.CDC:
        return CDC_SCHEMA
    if fmt is ChangeFormat.APPEND_ONLY:
        return pa.schema([full.field(c) for c in _append_only_columns(full.names, columns, meta_columns)])
    raise InvalidInputError(f"{fmt.value} is not a net change format")
