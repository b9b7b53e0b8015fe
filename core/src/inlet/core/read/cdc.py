"""CDC queries (``hoodie.datasource.query.incremental.format=cdc``): every change of every commit of
a window, with before and after images, in Apache Hudi's CDC layout.

The rows have Hudi's Spark CDC schema (``HoodieCDCFileIndex.FULL_CDC_SPARK_SCHEMA``, Debezium's
shape): ``op`` (``i``, ``u`` or ``d``), ``ts_ms`` (the commit's instant time), ``before`` and
``after`` (the record's data columns as JSON text, null for an insert's before and a delete's after).

The window is the incremental query's (:mod:`inlet.core.read.incremental`): the write commits
completed in ``(begin, end]``, compaction and clustering excluded. Each commit's changes are
inferred as Hudi's CDC reader infers them when no CDC log file was written (its
``BASE_FILE_INSERT`` / ``BASE_FILE_DELETE`` / ``LOG_FILE`` / ``REPLACE_COMMIT`` cases): the file
groups the commit touched are read as of the write before it and as of the commit itself; a key the
commit wrote is an insert (absent before) or an update, a key gone after it is a delete. Unlike
min-delta (:mod:`inlet.core.read.net_changes`), nothing is netted: a key inserted, updated and
deleted in three commits yields three rows, and an update that rewrote the same values is a ``u``.

Rows come by commit (completion order), then record key. As in Hudi, only commits still on the
active timeline can be read: a window that reaches archived commits is refused. Inlet writes no CDC log files
(``hoodie.table.cdc.enabled`` tables written by Inlet are not supported yet), so the query works on
any table with meta fields and every commit is inferred.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from inlet.core.config import TableConfig
from inlet.core.errors import InvalidInputError, UnsupportedError
from inlet.core.read.incremental import ChangeWindow, change_window, read_file_groups
from inlet.core.schema import META_COLUMNS, MetaField
from inlet.core.table.handle import TableHandle
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.archived import ArchivedTimeline
from inlet.core.timeline.instant import Action, Instant

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


def _previous_write(timeline: Timeline, inst: Instant) -> str | None:
    return max((i.time for i in timeline.completed_writes() if i.time < inst.time), default=None)


def _refuse_archived(table: TableHandle, begin: str) -> None:
    """Hudi's CDC reader takes active instants only: a window reaching archived writes is refused."""
    archived = ArchivedTimeline.load(
        table.storage,
        table.meta.layout_version,
        table.meta.timeline_path,
        TableConfig.TIMELINE_HISTORY_PATH.require(table.meta.props),
    )
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
    out: list[dict[str, Any]] = []
    for inst in window.instants:
        groups = timeline.commit_metadata(inst).touched_file_groups()
        before = _state(table, _previous_write(timeline, inst), groups, columns)
        after = _state(table, inst.time, groups, columns)
        sample = next(iter(after.values()), None) or next(iter(before.values()), None)
        if sample is None:
            continue
        data = list(columns) if columns is not None else [c for c in sample if c not in META_COLUMNS]
        for key in sorted(before.keys() | after.keys()):
            b, a = before.get(key), after.get(key)
            if a is not None and a[COMMIT_TIME] == inst.time:
                op = "i" if b is None else "u"
            elif a is None and b is not None:
                op = "d"
            else:
                continue
            out.append(
                {
                    "op": op,
                    "ts_ms": inst.time,
                    "before": image_json(b, data) if b is not None else None,
                    "after": image_json(a, data) if a is not None else None,
                }
            )
    return window, pa.Table.from_pylist(out, schema=CDC_SCHEMA)
