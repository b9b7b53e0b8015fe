"""The writer's rows for unchanged TOASTed values where arrival order and LSN order differ (issue #21).

The end-to-end proof is tests/integration/writer/test_toast_live.py (real Debezium, one partition).
Here: the changes of a primary-key change's two keys come from different partitions of the
``inlet.changes`` topic, so the new key's CREATE may arrive before the old key's earlier UPDATE
and its DELETE; and an old key whose row is nowhere leaves the placeholder (string) or null.
Event shapes are Debezium's (a DELETE of the old key with its key only, REPLICA IDENTITY DEFAULT,
and a CREATE of the new key with ``old_key`` and ``Unchanged`` TOASTed values).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.rows import PLACEHOLDER, Change, table_rows, to_arrow

COLUMNS = [
    pb.Column(name="id", type=pb.COLUMN_TYPE_INT32, key_position=1),
    pb.Column(name="n", type=pb.COLUMN_TYPE_INT32, nullable=True),
    pb.Column(name="note", type=pb.COLUMN_TYPE_STRING, nullable=True),
    pb.Column(
        name="nums",
        type=pb.COLUMN_TYPE_LIST,
        nullable=True,
        element=pb.Column(name="element", type=pb.COLUMN_TYPE_INT32, nullable=True),
    ),
]
SCHEMA = pb.TableSchema(columns=COLUMNS, fingerprint="toast")
KEEP = object()


def _value(v: Any) -> pb.Value:
    if v is KEEP:
        return pb.Value(unchanged=pb.Unchanged())
    if isinstance(v, int):
        return pb.Value(int_value=v)
    if isinstance(v, str):
        return pb.Value(string_value=v)
    return pb.Value(list_value=pb.ListValue(values=[pb.Value(int_value=x) for x in v]))


def event(op: pb.Operation.ValueType, key: int, lsn: int, *values: Any, old_key: int | None = None) -> Change:
    ev = pb.ChangeEvent(
        table_id="srv.public.docs",
        op=op,
        record_key=str(key),
        key=pb.Row(values=[pb.Value(int_value=key)]),
        schema=SCHEMA,
        source=pb.SourcePosition(lsn=lsn),
    )
    if op == pb.OPERATION_DELETE:
        ev.before.CopyFrom(pb.Row(values=[pb.Value(int_value=key), pb.Value(), pb.Value(), pb.Value()]))
    else:
        ev.after.CopyFrom(pb.Row(values=[_value(key), *(_value(v) for v in values)]))
    if old_key is not None:
        ev.old_key.CopyFrom(pb.Row(values=[pb.Value(int_value=old_key)]))
    return Change(ev, 0, 0)


def rows_of(changes: list[Change], stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def current_rows(images: list[dict[str, Any]]) -> list[dict[str, Any]]:
        wanted = {i["id"] for i in images}
        return [r for r in stored if r["id"] in wanted]

    table = to_arrow(changes, key_fields=["id"], current_rows=current_rows)
    return [{k: r[k] for k in ("id", "n", "note", "nums", "_hoodie_is_deleted")} for r in table_rows(table)]


def test_the_new_key_takes_the_old_keys_value_as_of_the_change_whatever_the_arrival_order() -> None:
    stored = [{"id": 1, "n": 0, "note": "stored", "nums": [1]}]
    rows = rows_of(
        [
            event(pb.OPERATION_CREATE, 2, 300, 5, KEEP, KEEP, old_key=1),  # partition B, first
            event(pb.OPERATION_UPDATE, 2, 400, 6, KEEP, KEEP),  # then its own update
            event(pb.OPERATION_UPDATE, 1, 100, 1, "new note", [7, 8]),  # partition A: the old key's
            event(pb.OPERATION_UPDATE, 1, 200, 2, KEEP, KEEP),  # two updates, then its delete
            event(pb.OPERATION_DELETE, 1, 300),
        ],
        stored,
    )
    assert rows[:2] == [
        {"id": 2, "n": 5, "note": "new note", "nums": [7, 8], "_hoodie_is_deleted": False},
        {"id": 2, "n": 6, "note": "new note", "nums": [7, 8], "_hoodie_is_deleted": False},
    ]
    assert rows[3] == {"id": 1, "n": 2, "note": "new note", "nums": [7, 8], "_hoodie_is_deleted": False}


def test_an_old_key_found_nowhere_leaves_the_placeholder_or_null(caplog: pytest.LogCaptureFixture) -> None:
    stored = [{"id": 1, "n": 0, "note": "stored", "nums": [1]}]
    with caplog.at_level(logging.WARNING, "inlet.writer.rows"):
        rows = rows_of([event(pb.OPERATION_CREATE, 3, 300, 5, KEEP, KEEP, old_key=9)], stored)
    assert rows == [{"id": 3, "n": 5, "note": PLACEHOLDER, "nums": None, "_hoodie_is_deleted": False}]
    assert "the old key's row is not in the table" in caplog.text
    # through a stored old key it is that row's value (the merge cannot fill across keys)
    rows = rows_of([event(pb.OPERATION_CREATE, 3, 300, 5, KEEP, KEEP, old_key=1)], stored)
    assert rows == [{"id": 3, "n": 5, "note": "stored", "nums": [1], "_hoodie_is_deleted": False}]
