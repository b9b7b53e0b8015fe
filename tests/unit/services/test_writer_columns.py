"""The writer's column-by-column conversion (issue #23 item 4) makes exactly the rows the row-by-row
path makes, and hands every batch it does not cover to that path.

``to_arrow`` converts a batch column by column when its changes carry their ``ChangeRecord`` bytes
(``Change.raw``, as the writer service keeps them); the same changes without bytes take the row path.
Random batches of every column type, with nulls, TOAST placeholders, snapshot reads and deletes,
must give equal tables both ways (and the column path must have taken them); batches it does not
cover (two schema fingerprints, a value read from the table, a primary-key change, a bad value)
must come out as the row path makes them (or fail with its error).
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.writer.columns import columnar
from inlet.services.writer.rows import Change, RowError, table_rows, to_arrow

T = pb.ColumnType
COLUMNS = [
    pb.Column(name="id", type=T.COLUMN_TYPE_INT64, key_position=1),
    pb.Column(name="region", type=T.COLUMN_TYPE_STRING, key_position=2),
    pb.Column(name="small", type=T.COLUMN_TYPE_INT16, nullable=True),
    pb.Column(name="name", type=T.COLUMN_TYPE_STRING, nullable=True),
    pb.Column(name="price", type=T.COLUMN_TYPE_DECIMAL, precision=12, scale=2, nullable=True),
    pb.Column(name="amount", type=T.COLUMN_TYPE_DECIMAL, nullable=True),  # numeric: text
    pb.Column(name="score", type=T.COLUMN_TYPE_FLOAT64, nullable=True),
    pb.Column(name="ratio", type=T.COLUMN_TYPE_FLOAT32, nullable=True),
    pb.Column(name="ok", type=T.COLUMN_TYPE_BOOLEAN, nullable=True),
    pb.Column(name="born", type=T.COLUMN_TYPE_DATE, nullable=True),
    pb.Column(name="at", type=T.COLUMN_TYPE_TIMESTAMP_MICROS_UTC, nullable=True),
    pb.Column(name="photo", type=T.COLUMN_TYPE_BYTES, nullable=True),
    pb.Column(name="doc", type=T.COLUMN_TYPE_JSON, nullable=True),
    pb.Column(
        name="nums",
        type=T.COLUMN_TYPE_LIST,
        nullable=True,
        element=pb.Column(name="element", type=T.COLUMN_TYPE_INT32, nullable=True),
    ),
    pb.Column(
        name="tags",
        type=T.COLUMN_TYPE_LIST,
        nullable=True,
        element=pb.Column(name="element", type=T.COLUMN_TYPE_STRING, nullable=True),
    ),
]
SCHEMA = pb.TableSchema(columns=COLUMNS, fingerprint="v1")
#: columns whose unchanged TOASTed value the merge fills when no earlier change has it
TOASTABLE = ("name", "photo", "doc", "amount")
KEEP = object()


def _random_value(rnd: random.Random, col: pb.Column) -> pb.Value:
    t = col.type
    if t == T.COLUMN_TYPE_INT16:
        return pb.Value(int_value=rnd.randint(-(2**15), 2**15 - 1))
    if t == T.COLUMN_TYPE_STRING or t == T.COLUMN_TYPE_JSON:
        return pb.Value(string_value=rnd.choice(["", "a", "héllo", '{"k": 1}', "x" * 40]))
    if t == T.COLUMN_TYPE_DECIMAL and col.precision:
        return pb.Value(decimal_value=f"{rnd.randint(-(10**9), 10**9) / 100:.2f}")
    if t == T.COLUMN_TYPE_DECIMAL:
        return pb.Value(
            decimal_value=rnd.choice(["1.5", "-0.000001", "NaN", "Infinity", "12345678901234567890123"])
        )
    if t == T.COLUMN_TYPE_FLOAT64 or t == T.COLUMN_TYPE_FLOAT32:
        return pb.Value(double_value=rnd.choice([0.0, -1.5, 3.25, float("inf")]))
    if t == T.COLUMN_TYPE_BOOLEAN:
        return pb.Value(bool_value=rnd.random() < 0.5)
    if t == T.COLUMN_TYPE_DATE:
        return pb.Value(int_value=rnd.choice([0, -719162, 2_932_896, 2**31 - 1, -(2**31)]))
    if t == T.COLUMN_TYPE_TIMESTAMP_MICROS_UTC:
        return pb.Value(int_value=rnd.choice([0, 1_700_000_000_000_000, 2**63 - 1, -(2**63)]))
    if t == T.COLUMN_TYPE_BYTES:
        return pb.Value(bytes_value=rnd.randbytes(rnd.randint(0, 5)))
    if t == T.COLUMN_TYPE_LIST:
        element = col.element
        items = [
            pb.Value() if rnd.random() < 0.2 else _random_value(rnd, element)
            for _ in range(rnd.randint(0, 3))
        ]
        return pb.Value(list_value=pb.ListValue(values=items))
    if t == T.COLUMN_TYPE_INT32:
        return pb.Value(int_value=rnd.randint(-(2**31), 2**31 - 1))
    raise AssertionError(t)


def _key(key: tuple[int, str]) -> list[pb.Value]:
    return [pb.Value(int_value=key[0]), pb.Value(string_value=key[1])]


def change(
    op: pb.Operation.ValueType,
    key: tuple[int, str],
    lsn: int,
    values: dict[str, Any] | None = None,
    schema: pb.TableSchema = SCHEMA,
    before: bool = True,
) -> pb.ChangeRecord:
    """A ChangeRecord as the CDC consumer writes it (``values``: column -> pb.Value, KEEP or None)."""
    record = pb.ChangeRecord()
    ev = record.change
    ev.table_id = "srv.public.items"
    ev.op = op
    ev.record_key = f"id:{key[0]},region:{key[1]}"
    ev.key.values.extend(_key(key))
    ev.schema.CopyFrom(schema)
    ev.schema_version = schema.fingerprint
    ev.source.lsn = lsn
    ev.source.tx_id = lsn // 10
    ev.source.source_ts_ms = 1_700_000_000_000 + lsn
    if lsn % 3:  # some changes without these: null columns
        ev.source.processed_ts_ms = 1_700_000_000_500 + lsn
        ev.source.xmin = lsn
    if op == pb.OPERATION_DELETE:
        if before:  # REPLICA IDENTITY DEFAULT: the key, the rest null
            ev.before.values.extend([*_key(key), *(pb.Value() for _ in schema.columns[2:])])
        return record
    row = ev.after.values
    row.extend(_key(key))
    for col in schema.columns[2:]:
        v = (values or {}).get(col.name)
        row.add().CopyFrom(
            pb.Value(unchanged=pb.Unchanged()) if v is KEEP else v if v is not None else pb.Value()
        )
    return record


def random_batch(seed: int, n: int = 300) -> list[pb.ChangeRecord]:
    rnd = random.Random(seed)
    keys = [(rnd.randint(-5, 40), rnd.choice(["eu", "us", ""])) for _ in range(25)]
    out = []
    for i in range(n):
        key = rnd.choice(keys)
        op = rnd.choice(
            [
                pb.OPERATION_CREATE,
                pb.OPERATION_UPDATE,
                pb.OPERATION_UPDATE,
                pb.OPERATION_READ,
                pb.OPERATION_DELETE,
            ]
        )
        values: dict[str, Any] = {}
        for col in COLUMNS[2:]:
            r = rnd.random()
            if r < 0.2:
                values[col.name] = None
            elif r < 0.4 and op == pb.OPERATION_UPDATE and col.name in TOASTABLE:
                values[col.name] = KEEP
            elif col.name == "amount" and rnd.random() < 0.5:  # numeric without typmod sent as a number
                values[col.name] = pb.Value(int_value=rnd.randint(-10, 10))
            else:
                values[col.name] = _random_value(rnd, col)
        out.append(change(op, key, 1000 + i * rnd.choice([1, -1]), values, before=rnd.random() < 0.8))
    return out


def both_ways(records: list[pb.ChangeRecord], **kwargs: Any) -> tuple[pa.Table, pa.Table, bool]:
    """(row path's table, column path's table, whether the column path took the batch)."""
    raws = [r.SerializeToString() for r in records]
    plain = [Change(pb.ChangeRecord.FromString(b).change, 0, i) for i, b in enumerate(raws)]
    with_raw = [Change(pb.ChangeRecord.FromString(b).change, 0, i, raw=b) for i, b in enumerate(raws)]
    key_fields = kwargs.pop("key_fields", ["id", "region"])
    rows = to_arrow(plain, key_fields=key_fields, **kwargs)
    cols = to_arrow(with_raw, key_fields=key_fields, **kwargs)
    taken = columnar(with_raw, key_fields, kwargs.get("partition_fields", ()), False) is not None
    return rows, cols, taken


@pytest.mark.parametrize("seed", range(6))
def test_random_batches_come_out_the_same_column_by_column(seed: int) -> None:
    rows, cols, taken = both_ways(random_batch(seed))
    assert taken
    assert cols.schema == rows.schema
    assert table_rows(cols) == table_rows(rows)


def test_toasted_values_come_from_the_keys_earlier_change_or_are_null_after_its_delete() -> None:
    note = pb.Value(string_value="first")
    tags = pb.Value(list_value=pb.ListValue(values=[pb.Value(string_value="a"), pb.Value()]))
    records = [
        change(pb.OPERATION_CREATE, (1, "eu"), 10, {"name": note, "doc": note, "tags": tags}),
        change(
            pb.OPERATION_UPDATE,
            (1, "eu"),
            11,
            {"name": KEEP, "doc": pb.Value(string_value="2"), "tags": KEEP},
        ),
        change(pb.OPERATION_DELETE, (1, "eu"), 12),
        change(pb.OPERATION_UPDATE, (1, "eu"), 13, {"name": KEEP, "doc": KEEP, "tags": KEEP}),
        change(pb.OPERATION_UPDATE, (2, "eu"), 14, {"name": KEEP}),  # nothing earlier: the placeholder
    ]
    rows, cols, taken = both_ways(records)
    assert taken
    assert table_rows(cols) == table_rows(rows)
    got = [(r["id"], r["name"], r["doc"], r["tags"], r["_hoodie_is_deleted"]) for r in table_rows(cols)]
    assert got == [
        (1, "first", "first", ["a", None], False),
        (1, "first", "2", ["a", None], False),
        (1, None, None, None, True),
        (1, None, None, None, False),
        (2, "__debezium_unavailable_value", None, None, False),
    ]


def test_a_batch_with_two_schema_fingerprints_takes_the_row_path_with_both_schemas_columns() -> None:
    v2 = pb.TableSchema(
        columns=[*COLUMNS, pb.Column(name="added", type=T.COLUMN_TYPE_INT32, nullable=True)], fingerprint="v2"
    )
    records = [
        change(pb.OPERATION_CREATE, (1, "eu"), 10, {"name": pb.Value(string_value="a")}),
        change(pb.OPERATION_UPDATE, (1, "eu"), 11, {"name": KEEP, "added": pb.Value(int_value=7)}, schema=v2),
    ]
    rows, cols, taken = both_ways(records)
    assert not taken
    assert table_rows(cols) == table_rows(rows)
    assert [(r["name"], r["added"]) for r in table_rows(cols)] == [("a", None), ("a", 7)]


def test_a_value_read_from_the_table_takes_the_row_path() -> None:
    stored = [{"id": 3, "region": "us", "small": 42}]
    records = [change(pb.OPERATION_UPDATE, (3, "us"), 10, {"small": KEEP})]  # an int: not the merge's
    rows, cols, taken = both_ways(records, current_rows=lambda images: stored)
    assert not taken
    assert table_rows(cols) == table_rows(rows)
    assert cols.column("small").to_pylist() == [42]


def test_a_primary_key_change_takes_the_row_path() -> None:
    record = change(pb.OPERATION_UPDATE, (2, "eu"), 10, {"name": KEEP})
    record.change.before.values.extend([*_key((1, "eu")), *(pb.Value() for _ in COLUMNS[2:])])
    rows, cols, taken = both_ways([record], current_rows=lambda images: [])
    assert not taken
    assert table_rows(cols) == table_rows(rows)
    assert [(r["id"], r["_hoodie_is_deleted"]) for r in table_rows(cols)] == [(1, True), (2, False)]


def test_a_value_that_does_not_fit_fails_as_on_the_row_path() -> None:
    records = [change(pb.OPERATION_CREATE, (1, "eu"), 10, {"price": pb.Value(decimal_value="1.234")})]
    raw = records[0].SerializeToString()
    with pytest.raises(RowError, match=r"column 'price': value '1.234' does not fit decimal128\(12, 2\)"):
        to_arrow([Change(pb.ChangeRecord.FromString(raw).change, 0, 0, raw=raw)], key_fields=["id", "region"])
