"""Tables without a primary key under REPLICA IDENTITY FULL, keyed by the whole row (issue #21).

The CDC consumer keys such a table's changes by every column (``row_record_key``; the writer stores it
in ``_inlet_record_key``). An UPDATE changes the row, so it changes the key: the writer must delete
the old image's key, or the old row stays beside the new one. Shown through the writer's batch input
(``lookup.batch_input``) onto real tables of both types.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cdc_consumer import row_record_key
from inlet.services.writer.lookup import batch_input
from inlet.services.writer.rows import LSN_COL, SYNTHETIC_KEY_COL, Change

SCHEMA = pb.TableSchema(
    columns=[
        pb.Column(name="id", type=pb.COLUMN_TYPE_INT32, nullable=True),
        pb.Column(name="name", type=pb.COLUMN_TYPE_STRING, nullable=True),
    ],
    fingerprint="keyless-id-name",
)


def _row(id_: int, name: str) -> pb.Row:
    return pb.Row(values=[pb.Value(int_value=id_), pb.Value(string_value=name)])


def change(
    op: pb.Operation.ValueType, lsn: int, before: tuple[int, str] | None, after: tuple[int, str] | None
):
    """A change as the CDC consumer decodes it with REPLICA IDENTITY FULL (whole-row record key)."""
    ev = pb.ChangeEvent(
        table_id="srv.public.events",
        op=op,
        schema=SCHEMA,
        source=pb.SourcePosition(connector="postgresql", schema="public", table="events", lsn=lsn),
    )
    if before is not None:
        ev.before.CopyFrom(_row(*before))
    if after is not None:
        ev.after.CopyFrom(_row(*after))
    ev.record_key = row_record_key(SCHEMA, ev.after if after is not None else ev.before)
    return ev


def write(table: HudiTable, *events: pb.ChangeEvent) -> None:
    table.write(batch_input([Change(e, 0, i) for i, e in enumerate(events)], table), "upsert")


def stored(table: HudiTable) -> list[tuple[int, str]]:
    got = table.read(columns=["id", "name"], meta_columns=False)
    return sorted(zip(got.column("id").to_pylist(), got.column("name").to_pylist(), strict=True))


@pytest.fixture(params=["MERGE_ON_READ", "COPY_ON_WRITE"])
def table(request: pytest.FixtureRequest, tmp_path: Path) -> HudiTable:
    """A keyless table as the writer creates it: record key ``_inlet_record_key``."""
    return HudiTable.create(
        str(tmp_path / "events"),
        name="events",
        record_key=SYNTHETIC_KEY_COL,
        table_type=request.param,
        ordering_field=LSN_COL,
        merge_mode="EVENT_TIME_ORDERING",
        index="bucket",
        buckets=2,
    )


def test_an_update_of_a_row_keyed_by_its_whole_image_removes_the_old_image(table: HudiTable) -> None:
    c, u, d = pb.OPERATION_CREATE, pb.OPERATION_UPDATE, pb.OPERATION_DELETE
    write(table, change(c, 100, None, (1, "a")), change(c, 101, None, (2, "b")))
    write(table, change(u, 200, (1, "a"), (1, "a2")))
    assert stored(table) == [(1, "a2"), (2, "b")]
    # within one batch: updated twice, then the other row updated and deleted
    write(
        table,
        change(u, 300, (1, "a2"), (1, "a3")),
        change(u, 301, (1, "a3"), (1, "a4")),
        change(u, 302, (2, "b"), (2, "b2")),
        change(d, 303, (2, "b2"), None),
    )
    assert stored(table) == [(1, "a4")]
