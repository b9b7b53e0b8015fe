"""CDC queries (``hoodie.datasource.query.incremental.format=cdc``): every change of every commit of
a window, with before and after images, in Apache Hudi's CDC layout.

The rows have Hudi's Spark CDC schema (``HoodieCDCFileIndex.FULL_CDC_SPARK_SCHEMA``, Debezium's
shape): ``op`` (``i``, ``u`` or ``d``), ``ts_ms`` (the commit's instant time), ``before`` and
``after`` (the record's data columns as JSON text, null for an insert's before and a delete's after).

The window is the incremental query's (:mod:`inlet.core.read.incremental`): the write commits
completed in ``(begin, end]``, compaction and clustering excluded. A file group whose write stat
lists CDC log files (``cdcStats``, written on ``hoodie.table.cdc.enabled`` tables, see
:mod:`inlet.core.write.cdc_log`) is read from them, as Hudi's ``HoodieCDCInferenceCase.AS_IS``:
``DATA_BEFORE_AFTER`` records hold both images; ``DATA_BEFORE`` records the before image, the after
image comes from the file group as of the commit; ``OP_KEY_ONLY`` records only op and key, the
before image comes from the file group as of the write before the commit and the after image as of
the commit. A CDC log a clean deleted, or an ``OP_KEY_ONLY`` commit whose previous slice was cleaned,
is refused with an error naming where to begin instead. Every other file group's changes are
inferred as Hudi's CDC reader infers them when no CDC log file was written (its
``BASE_FILE_INSERT`` / ``BASE_FILE_DELETE`` / ``LOG_FILE`` / ``REPLACE_COMMIT`` cases): the file
groups the commit touched are read as of the write before it and as of the commit itself; a key the
commit wrote is an insert (absent before) or an update, a key gone after it is a delete. Unlike
min-delta (:mod:`inlet.core.read.net_changes`), nothing is netted: a key inserted, updated and
deleted in three commits yields three rows, and an update that rewrote the same values is a ``u``.

Rows come by commit (completion order), then record key. As in Hudi, only commits still on the
active timeline can be read: a window that reaches archived commits is refused. The query works on
any table with meta fields, CDC-enabled or not.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from inlet.core.config import CdcLoggingMode, TableConfig
from inlet.core.errors import InvalidInputError, UnsupportedError
from inlet.core.log.reader import read_cdc_rows
from inlet.core.read.incremental import ChangeWindow, change_window, read_file_groups
from inlet.core.schema import META_COLUMNS, MetaField
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.archived import ArchivedTimeline
from inlet.core.timeline.commit_metadata import WriteStat
from inlet.core.timeline.instant import Action, Instant
from inlet.core.write import cdc_log

KEY: str = MetaField.RECORD_KEY.value
COMMIT_TIME: str = MetaField.COMMIT_TIME.value
CDC_SCHEMA = pa.schema(
    [("op", pa.string()), ("ts_ms", pa.string()), ("before", pa.string()), ("after", pa.string())]
)


def _json_value(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, decimal.Decimal | dt.timedelta):
        return str(v)
    raise TypeError(f"{type(v).__name__} has no JSON form")


def image_json(row: dict[str, Any], columns: Sequence[str]) -> str:
    """A before/after image: the columns of ``row`` as compact JSON (dates and timestamps ISO-8601,
    decimals as strings, bytes base64)."""
    return json.dumps({c: row.get(c) for c in columns}, default=_json_value, separators=(",", ":"))


def _state(
    table: TableHandle, as_of: str | None, groups: set[tuple[str, str]], columns: Sequence[str] | None
) -> dict[str, dict[str, Any]]:
    """Record key -> row of the file groups ``groups`` as of ``as_of`` (None: before any write)."""
    if as_of is None or not groups:
        return {}
    return {r[KEY]: r for r in read_file_groups(table, as_of, groups, columns).to_pylist()}


def previous_write(timeline: Timeline, inst: Instant) -> str | None:
    """The write before ``inst`` (by requested time): the state a commit's changes start from."""
    return max((i.time for i in timeline.completed_writes() if i.time < inst.time), default=None)


def archived_timeline(table: TableHandle) -> ArchivedTimeline:
    """The table's archived instants."""
    return ArchivedTimeline.load(
        table.storage,
        table.meta.layout_version,
        table.meta.timeline_path,
        TableConfig.TIMELINE_HISTORY_PATH.require(table.meta.props),
    )


def _refuse_archived(table: TableHandle, begin: str) -> None:
    """Hudi's CDC reader takes active instants only: a window reaching archived writes is refused."""
    archived = archived_timeline(table)
    late = [
        i
        for i in archived.instants
        if i.action in Action.WRITE_ACTIONS and (i.completion_time or i.time) > begin
    ]
    if late:
        raise InvalidInputError(
            f"a CDC query reads commits of the active timeline only: {len(late)} commit(s) completed after "
            f"{begin} were archived (the earliest {late[0].time}); begin at or after "
            f"{max(i.completion_time or i.time for i in late)}"
        )


def _as_is(
    table: TableHandle,
    inst: Instant,
    mode: CdcLoggingMode,
    stat: WriteStat,
    before: dict[str, dict[str, Any]],
    after: dict[str, dict[str, Any]],
    columns: Sequence[str] | None,
) -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]]:
    """(key, op, before, after) of the changes one file group's CDC log files hold, the images the
    mode omits taken from the file group's states (Hudi's ``AS_IS`` case)."""
    out = []
    for path in sorted(stat.cdc_stats or {}):
        if not table.storage.exists(path):
            raise InvalidInputError(
                f"the CDC log file {path} of commit {inst.time} was deleted by a clean (its file slice is "
                f"gone); begin the window at or after {inst.completion_time or inst.time}"
            )
        recs = read_cdc_rows(table.storage, path)
        if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
            images = [r.get(cdc_log.AFTER) or r.get(cdc_log.BEFORE) or {} for r in recs]
            keys = (
                table.meta.key_generator.record_keys(pa.Table.from_pylist(images)).to_pylist() if recs else []
            )
        else:
            keys = [r[cdc_log.RECORD_KEY] for r in recs]
        for key, r in zip(keys, recs, strict=True):
            op = r[cdc_log.OP]
            if mode is CdcLoggingMode.DATA_BEFORE_AFTER:
                b, a = r.get(cdc_log.BEFORE), r.get(cdc_log.AFTER)
            elif mode is CdcLoggingMode.DATA_BEFORE:
                b, a = r.get(cdc_log.BEFORE), after.get(key) if op != cdc_log.DELETE else None
            else:
                b = before.get(key) if op != cdc_log.INSERT else None
                a = after.get(key) if op != cdc_log.DELETE else None
                if b is None and op != cdc_log.INSERT:
                    raise InvalidInputError(
                        f"commit {inst.time} logged keys only (OP_KEY_ONLY) and the file slice before it, "
                        f"which holds the before image of {key!r}, was cleaned; begin the window at or after "
                        f"{inst.completion_time or inst.time}"
                    )
            if columns is not None:
                b = {c: b.get(c) for c in columns} if b is not None else None
                a = {c: a.get(c) for c in columns} if a is not None else None
            out.append((key, op, b, a))
    return out


def read_cdc(
    table: TableHandle, begin: str, end: str | None = None, columns: Sequence[str] | None = None
) -> tuple[ChangeWindow, pa.Table]:
    """Every change the window's commits made, as Hudi's CDC rows (images of ``columns``, default
    the data columns)."""
    if not table.meta.populate_meta_fields:
        raise UnsupportedError(
            "CDC queries need the _hoodie_* meta fields (this table has hoodie.populate.meta.fields=false)"
        )
    timeline = table.load_timeline()
    window = change_window(timeline, begin, end)
    if window.full_scan:
        _refuse_archived(table, window.begin)
    mode = TableConfig.CDC_LOGGING_MODE.require(table.meta.props)
    out: list[dict[str, Any]] = []
    for inst in window.instants:
        md = timeline.commit_metadata(inst)
        logged = {(s.partition_path, s.file_id): s for s in md.write_stats() if s.cdc_stats}
        inferred = md.touched_file_groups() - set(logged)
        before = _state(table, previous_write(timeline, inst), inferred, columns)
        after = _state(table, inst.time, inferred, columns)
        changes: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]] = []
        for key in sorted(before.keys() | after.keys()):
            b, a = before.get(key), after.get(key)
            if a is not None and a[COMMIT_TIME] == inst.time:
                op = "i" if b is None else "u"
            elif a is None and b is not None:
                op = "d"
            else:
                continue
            changes.append((key, op, b, a))
        if logged:
            # AS_IS: the CDC log files; OP_KEY_ONLY reads both states, DATA_BEFORE the after state
            groups = set(logged)
            prev = previous_write(timeline, inst) if mode is CdcLoggingMode.OP_KEY_ONLY else None
            logged_before = _state(table, prev, groups, columns)
            logged_after = _state(
                table, inst.time if mode is not CdcLoggingMode.DATA_BEFORE_AFTER else None, groups, columns
            )
            for stat in logged.values():
                changes += _as_is(table, inst, mode, stat, logged_before, logged_after, columns)
        sample = next((img for c in changes for img in (c[3], c[2]) if img is not None), None)
        if sample is None:
            continue
        data = list(columns) if columns is not None else [c for c in sample if c not in META_COLUMNS]
        for _key, op, b, a in sorted(changes, key=lambda c: c[0]):
            out.append(
                {
                    "op": op,
                    "ts_ms": inst.time,
                    "before": image_json(b, data) if b is not None else None,
                    "after": image_json(a, data) if a is not None else None,
                }
            )
    return window, pa.Table.from_pylist(out, schema=CDC_SCHEMA)
