"""Inlet's COW writes read back by the independent hudi-rs reader, against a pandas model.

Every write in these tests goes through the harness (``conftest.py``), which applies it to the
Inlet table and to the model and then compares hudi-rs (file group reader v1 and v2) and
Inlet's reader with the model, for the snapshot and as of every completed instant.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from support.model import CowModel, ModelConfig

from inlet.core.errors import SchemaError

if TYPE_CHECKING:
    from conftest import Harness

UTC = dt.UTC
DAY0_MS = 1_705_276_800_000  # 2024-01-15T00:00:00Z

BASE_FIELDS = [
    pa.field("id", pa.int32()),
    pa.field("k2", pa.string()),
    pa.field("p", pa.string()),
    pa.field("q", pa.int32()),
    pa.field("event_ms", pa.int64()),
    pa.field("ts", pa.int64()),
    pa.field("name", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("flag", pa.bool_()),
    pa.field("day", pa.date32()),
    pa.field("at", pa.timestamp("us", tz="UTC")),
    pa.field("price", pa.decimal128(10, 2)),
    pa.field("info", pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string())])),
    pa.field("tags", pa.list_(pa.string())),
]
SCHEMA = pa.schema(BASE_FIELDS)
SCHEMA_DEL = pa.schema([*BASE_FIELDS, pa.field("_hoodie_is_deleted", pa.bool_())])

# partition slot -> (p, q): three partitions by p; by (q, p) slots 0 and 1 share the prefix "1/"
SLOTS = [("us", 1), ("eu", 1), ("apac", 2)]


@dataclass(frozen=True)
class Shape:
    name: str
    kwargs: dict[str, Any]
    partitioned: bool = True
    key_fields: tuple[str, ...] = ("id",)
    part_fields: tuple[str, ...] = ("p",)

    def row(self, id: int, slot: int, ts: int | None, v: int = 0, **over: Any) -> dict[str, Any]:
        p, q = SLOTS[slot]
        row: dict[str, Any] = {
            "id": id,
            "k2": "x" if id % 2 else "y",
            "p": p,
            "q": q,
            # within the slot's day: several distinct values map to one date partition
            "event_ms": DAY0_MS + slot * 86_400_000 + id * 60_000 + v,
            "ts": ts,
            "name": f"n{id}v{v}",
            "amount": id * 1.25 + v,
            "flag": (id + v) % 2 == 0,
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=id + v),
            "at": dt.datetime(2024, 3, 1, 12, 0, tzinfo=UTC) + dt.timedelta(minutes=id, seconds=v),
            "price": decimal.Decimal(f"{id}.{v % 100:02d}"),
            "info": {"a": id * 10 + v, "b": f"i{v}"},
            "tags": [f"t{i}" for i in range(v % 3)],
        }
        row.update(over)
        return row

    @property
    def key_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.key_fields, *self.part_fields]))

    @property
    def key_schema(self) -> pa.Schema:
        return pa.schema([SCHEMA.field(c) for c in self.key_columns])

    def key(self, id: int, slot: int, **over: Any) -> dict[str, Any]:
        """The columns the delete operation needs (record key and partition fields)."""
        full = self.row(id, slot, 0, **over)
        return {c: full[c] for c in self.key_columns}


SHAPES = [
    Shape("non_partitioned", {"record_key": "id"}, partitioned=False, part_fields=()),
    Shape("hive_single", {"record_key": "id", "partition_by": "p", "hive_style": True}),
    Shape("plain_single", {"record_key": "id", "partition_by": "p"}),
    Shape("multi_field_partition", {"record_key": "id", "partition_by": ["q", "p"]}, part_fields=("q", "p")),
    Shape(
        "complex_key",
        {"record_key": ["id", "k2"], "partition_by": "p", "hive_style": True},
        key_fields=("id", "k2"),
    ),
    Shape(
        "timestamp_partition",
        {"record_key": "id", "partition_by": "event_ms", "timestamp_format": "yyyy/MM/dd"},
        part_fields=("event_ms",),
    ),
    Shape("bucket_index", {"record_key": "id", "partition_by": "p", "index": "bucket", "buckets": 4}),
    Shape(
        "bucket_complex_non_partitioned",
        {"record_key": ["id", "k2"], "index": "bucket", "buckets": 4},
        partitioned=False,
        key_fields=("id", "k2"),
        part_fields=(),
    ),
]

MODES = {
    "event_time": {"ordering_field": "ts"},
    "commit_time": {"ordering_field": "ts", "merge_mode": "COMMIT_TIME_ORDERING"},
}


def _partition(h: Harness, shape: Shape, slot: int) -> str:
    return str(h.model.partition_path(shape.row(1, slot, 0)))


# Each shape once, the merge modes alternating (a mode is decided per record, whatever the key and
# partition layout, so every shape under both modes proved nothing more at twice the cost).
SHAPE_MODES = [(s, list(MODES)[i % len(MODES)]) for i, s in enumerate(SHAPES)]


@pytest.mark.parametrize(("shape", "mode"), SHAPE_MODES, ids=[f"{s.name}-{m}" for s, m in SHAPE_MODES])
def test_every_operation(harness: Callable[..., Harness], shape: Shape, mode: str) -> None:
    h = harness(**shape.kwargs, **MODES[mode], schema=SCHEMA)
    r = shape.row

    # 1. first upsert, with duplicates inside the batch: id 1 by ordering value (event time: ts 12
    #    beats the later ts 11; commit time: the later row), id 2 with equal values (later wins);
    #    id 3 in two partitions (two records unless the table is not partitioned)
    h.upsert(
        [
            *[r(1, 1, 12, v=1), r(2, 2, 10, v=1), r(3, 0, 10), r(4, 1, 10), r(5, 2, 10), r(6, 0, 10)],
            *[r(7, 1, 10), r(8, 2, 10), r(1, 1, 11, v=2), r(2, 2, 10, v=2), r(3, 1, 10, v=3)],
        ]
    )
    # 2. updates: lower (id 1), equal (id 2) and higher (id 4) ordering values, a null ordering
    #    value (id 5), duplicates where null loses (id 6), new keys (9, 10)
    h.upsert(
        [
            *[r(1, 1, 5, v=4), r(2, 2, 10, v=4), r(4, 1, 20, v=4), r(5, 2, None, v=4)],
            *[r(6, 0, None, v=4), r(6, 0, 15, v=5), r(6, 0, None, v=6), r(9, 0, 10), r(10, 1, 10)],
        ]
    )
    # 3. _hoodie_is_deleted: id 4 with a winning value, id 7 with a losing one (kept under event
    #    time), id 11 does not exist, id 8 is an ordinary update carrying the flag false
    h.upsert(
        [
            r(4, 1, 25, v=7, _hoodie_is_deleted=True),
            r(7, 1, 1, v=7, _hoodie_is_deleted=True),
            r(11, 2, 30, v=7, _hoodie_is_deleted=True),
            r(8, 2, 30, v=7, _hoodie_is_deleted=False),
        ],
        schema=SCHEMA_DEL,
    )
    # 4. delete: an existing key, a missing key, and id 3 in one partition only; ordering ignored
    h.delete([shape.key(9, 0), shape.key(99, 1), shape.key(3, 0)], schema=shape.key_schema)
    # 5. insert: an existing key becomes a duplicate, duplicates in the batch are combined, a
    #    deleted record is dropped
    h.insert(
        [r(10, 1, 3, v=8), r(12, 2, 10, v=8), r(12, 2, 11, v=9), r(13, 0, 10, v=8, _hoodie_is_deleted=True)],
        schema=SCHEMA_DEL,
    )
    # 6. upsert of the duplicated key: every stored copy is merged with the incoming record
    #    (event time: ts 5 beats the inserted copy (ts 3) but not the original (ts 10))
    h.upsert([r(10, 1, 5, v=10), r(2, 2, 40, v=10)])
    # 7. bulk insert (no index lookup, no small-file packing, batch combined): ids 12 and 5 now
    #    have copies in two file groups
    h.bulk_insert(
        [r(14, 0, 1, v=11), r(15, 1, 1, v=11), r(12, 2, 1, v=11), r(14, 0, 2, v=12), r(5, 2, 0, v=11)]
    )
    # 8. an upsert and a delete reach every file group holding a key (Hudi's simple index joins
    #    incoming keys with all stored locations); event time: ts 5 beats only the bulk-inserted
    #    copy of id 12 (ts 1), not the upserted one (ts 11)
    h.upsert([r(12, 2, 5, v=12), r(16, 0, 1, v=12)])
    h.delete([shape.key(5, 2)], schema=shape.key_schema)
    # 9. insert_overwrite of slot 0's partition: only its rows are replaced
    h.insert_overwrite([r(20, 0, 1, v=13), r(21, 0, 1, v=13), r(1, 0, 1, v=13), r(20, 0, 2, v=14)])
    # 10. writes after a replacecommit land in the new file groups, not the replaced ones
    h.upsert([r(20, 0, 3, v=15), r(2, 2, 50, v=15), r(22, 1, 1, v=15)])
    if shape.partitioned:
        # 11. delete_partition by partition path, then by rows naming a partition
        h.delete_partition([_partition(h, shape, 1)])
        h.upsert([r(23, 1, 1, v=16), r(24, 2, 1, v=16)])
        h.delete_partition(rows=[shape.key(24, 2)], schema=shape.key_schema)
    # 12. insert_overwrite_table replaces everything
    h.insert_overwrite_table([r(30, 0, 1, v=17), r(31, 1, 1, v=17), r(30, 0, 0, v=18)])
    # 13. and the table keeps working afterwards
    h.upsert([r(30, 0, 2, v=19), r(32, 2, 1, v=19)])

    snapshot = h.model.rows()
    assert {x["id"] for x in snapshot} == {30, 31, 32}


def test_commit_time_without_ordering_field(harness: Callable[..., Harness]) -> None:
    shape = SHAPES[2]
    h = harness(record_key="id", partition_by="p", schema=SCHEMA)
    r = shape.row
    h.upsert([r(1, 0, 5), r(2, 1, 5), r(1, 0, 9, v=1), r(1, 0, 1, v=2)])
    h.upsert([r(1, 0, 0, v=3), r(2, 1, None, v=3), r(3, 2, 7)])
    h.upsert([r(1, 0, 100, v=4, _hoodie_is_deleted=True), r(2, 1, 0, v=4)], schema=SCHEMA_DEL)
    assert [(x["id"], x["name"]) for x in h.model.rows()] == [(2, "n2v4"), (3, "n3v0")]


def test_schema_evolution(harness: Callable[..., Harness]) -> None:
    v1 = pa.schema([("id", pa.int64()), ("p", pa.string()), ("ts", pa.int64()), ("cnt", pa.int32())])
    h = harness(record_key="id", partition_by="p", ordering_field="ts", schema=v1)
    h.upsert([{"id": i, "p": "ab"[i % 2], "ts": 1, "cnt": i} for i in range(6)])
    # a new nullable column, a nested one, and cnt widened int -> long
    v2 = pa.schema(
        [
            ("id", pa.int64()),
            ("p", pa.string()),
            ("ts", pa.int64()),
            ("cnt", pa.int64()),
            ("note", pa.string()),
            ("meta", pa.struct([("k", pa.string()), ("vals", pa.list_(pa.int32()))])),
        ]
    )
    big = 2**40
    h.upsert(
        [
            {"id": 0, "p": "a", "ts": 2, "cnt": big, "note": "x", "meta": {"k": "m", "vals": [1, 2]}},
            {"id": 6, "p": "a", "ts": 2, "cnt": big + 1, "note": None, "meta": None},
        ],
        schema=v2,
    )
    schema = h.table.schema()
    assert schema is not None
    assert schema.field("cnt").type == pa.int64()
    assert schema.names == ["id", "p", "ts", "cnt", "note", "meta"]
    # a batch in the old shape: the new columns become null for the rows it writes
    h.upsert([{"id": 1, "p": "b", "ts": 3, "cnt": 7}], schema=v1)
    assert h.table.schema() == schema
    # narrower input than the table (int into long) is widened, not a schema change
    h.insert([{"id": 9, "p": "a", "ts": 1, "cnt": 5}], schema=v1)
    # replace operations keep the evolved schema
    h.insert_overwrite([{"id": 3, "p": "b", "ts": 9, "cnt": 3, "note": "o"}], schema=v2)
    h.delete_partition(["a"])
    h.upsert(
        [{"id": 0, "p": "a", "ts": 1, "cnt": 1, "note": "back", "meta": {"k": None, "vals": []}}], schema=v2
    )
    # nested evolution (a field added inside the struct) and decimal precision widening
    v3 = pa.schema(
        [
            ("id", pa.int64()),
            ("p", pa.string()),
            ("ts", pa.int64()),
            ("cnt", pa.int64()),
            (
                "meta",
                pa.struct([("k", pa.string()), ("vals", pa.list_(pa.int32())), ("extra", pa.float64())]),
            ),
            ("price", pa.decimal128(8, 2)),
        ]
    )
    h.upsert(
        [{"id": 4, "p": "a", "ts": 5, "cnt": 4, "meta": {"k": "z", "vals": None, "extra": 0.5}, "price": 1}],
        schema=v3,
    )
    v4 = pa.schema(
        [("id", pa.int64()), ("p", pa.string()), ("ts", pa.int64()), ("price", pa.decimal128(12, 2))]
    )
    h.upsert([{"id": 5, "p": "b", "ts": 5, "price": decimal.Decimal("1234567890.12")}], schema=v4)
    schema = h.table.schema()
    assert schema is not None
    assert schema.field("price").type == pa.decimal128(12, 2)
    assert [f.name for f in schema.field("meta").type] == ["k", "vals", "extra"]
    # an incompatible change is refused and leaves the table as it was
    with pytest.raises(SchemaError):
        h.table.write(pa.table({"id": [1], "p": ["b"], "ts": [9], "cnt": ["text"]}), "upsert")
    h.check()


def test_all_types_roundtrip_values(harness: Callable[..., Harness]) -> None:
    """Edge values of every supported type survive both readers (nulls everywhere but the key)."""
    shape = SHAPES[1]
    h = harness(**shape.kwargs, ordering_field="ts", schema=SCHEMA)
    nulls = {c: None for c in SCHEMA.names if c not in ("id", "p", "ts")}
    h.upsert(
        [
            shape.row(1, 0, 1, **nulls),
            shape.row(
                2,
                1,
                1,
                amount=-0.0,
                name="",
                price=decimal.Decimal("-99999999.99"),
                at=dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                day=dt.date(1900, 1, 1),
                info={"a": None, "b": None},
                tags=[None, "", "ünï"],
            ),
            shape.row(
                3,
                2,
                1,
                amount=1e308,
                name="ü/é=%",
                price=decimal.Decimal("99999999.99"),
                at=dt.datetime(2262, 4, 11, tzinfo=UTC),
                day=dt.date(9999, 12, 31),
                tags=[],
            ),
        ]
    )
    h.upsert([shape.row(1, 0, 2, v=5), shape.row(2, 1, 2, **nulls)])
    # null and empty partition values both go to the default partition, as one partition
    h.upsert([shape.row(4, 0, 1, p=None), shape.row(5, 0, 1, p="")])
    h.upsert([shape.row(4, 0, 2, v=1, p="")])
    assert {r["_hoodie_partition_path"] for r in h.model.rows() if r["id"] in (4, 5)} == {
        "p=__HIVE_DEFAULT_PARTITION__"
    }
    h.delete_partition(["p=__HIVE_DEFAULT_PARTITION__"])


def test_timestamp_partition_paths(harness: Callable[..., Harness]) -> None:
    h = harness(
        record_key="id",
        partition_by="event_ms",
        timestamp_format="yyyy/MM/dd",
        ordering_field="ts",
        schema=pa.schema([("id", pa.int32()), ("event_ms", pa.int64()), ("ts", pa.int64())]),
    )
    h.upsert(
        [
            {"id": 1, "event_ms": 1_705_312_800_000, "ts": 1},  # 2024-01-15T10:00:00Z
            {"id": 2, "event_ms": 1_705_363_199_999, "ts": 1},  # 2024-01-15T23:59:59.999Z
            {"id": 3, "event_ms": 1_705_363_200_000, "ts": 1},  # 2024-01-16T00:00:00Z
            {"id": 4, "event_ms": 0, "ts": 1},
        ]
    )
    paths = {r["id"]: r["_hoodie_partition_path"] for r in h.table.read().to_pylist()}
    assert paths == {1: "2024/01/15", 2: "2024/01/15", 3: "2024/01/16", 4: "1970/01/01"}
    # a record moving to another day is a new record in the other partition (no global index)
    h.upsert([{"id": 1, "event_ms": 1_705_363_200_001, "ts": 2}])
    h.delete(
        [{"id": 2, "event_ms": 1_705_312_800_000}], schema=h.schema.remove(2)
    )  # same day, another time: same partition
    h.delete_partition(["2024/01/16"])
    assert sorted(r["id"] for r in h.table.read().to_pylist()) == [1, 4]


def test_replace_operations_and_time_travel(harness: Callable[..., Harness]) -> None:
    shape = SHAPES[3]  # multi-field partitions 1/us, 1/eu, 2/apac
    h = harness(**shape.kwargs, ordering_field="ts", schema=SCHEMA)
    r = shape.row
    h.bulk_insert([r(i, i % 3, 1) for i in range(12)], options={"hoodie.bulkinsert.sort.mode": "GLOBAL_SORT"})
    h.insert_overwrite([r(100, 0, 1), r(101, 1, 1)])  # two partitions replaced, 2/apac untouched
    h.insert_overwrite([r(102, 0, 1, _hoodie_is_deleted=True)], schema=SCHEMA_DEL)  # 1/us emptied
    h.delete_partition(rows=[shape.key(0, 1), shape.key(0, 2)], schema=shape.key_schema)  # 1/eu and 2/apac
    h.upsert([r(1, 2, 5), r(2, 0, 5)])  # partitions come back
    h.insert_overwrite_table([r(7, 1, 1)])
    h.delete_partition([_partition(h, shape, 1)])  # the table is empty now
    assert h.model.rows() == []
    h.insert([r(8, 2, 1)])


def test_failed_write_changes_nothing(harness: Callable[..., Harness]) -> None:
    shape = SHAPES[2]
    h = harness(**shape.kwargs, ordering_field="ts", schema=SCHEMA)
    h.upsert([shape.row(i, i % 3, 1) for i in range(5)])
    with pytest.raises(SchemaError):  # the ordering field is required
        h.table.write(pa.table({"id": pa.array([1], pa.int32()), "p": ["us"]}), "upsert")
    with pytest.raises(SchemaError):  # string into a date column
        h.table.write(pa.Table.from_pylist([shape.row(1, 0, 2, day="yesterday")]), "upsert")
    h.check()
    h.upsert([shape.row(1, 0, 2, v=1)])


# ---------------------------------------------------------------------- the model itself


def test_model_semantics_by_hand() -> None:
    """The oracle, checked against hand-written expectations (no Inlet involved)."""
    m = CowModel(
        ModelConfig(
            record_key=("id",),
            partition_by=("p",),
            hive_style=True,
            merge_mode="EVENT_TIME_ORDERING",
            ordering_field="ts",
        )
    )
    m.upsert(
        [{"id": 1, "p": "a", "ts": 2}, {"id": 1, "p": "a", "ts": 1}, {"id": 2, "p": "a", "ts": None}], "001"
    )
    assert [(r["_hoodie_record_key"], r["_hoodie_partition_path"], r["ts"]) for r in m.rows()] == [
        ("1", "p=a", 2),
        ("2", "p=a", None),
    ]
    m.upsert(
        [{"id": 1, "p": "a", "ts": 1}, {"id": 2, "p": "a", "ts": 0}, {"id": 1, "p": "b", "ts": 0}], "002"
    )
    assert [(r["_hoodie_commit_time"], r["id"], r["p"], r["ts"]) for r in m.rows()] == [
        ("001", 1, "a", 2),
        ("002", 2, "a", 0),
        ("002", 1, "b", 0),
    ]
    m.insert([{"id": 1, "p": "a", "ts": 0}], "003")
    m.upsert([{"id": 1, "p": "a", "ts": 1, "_hoodie_is_deleted": True}], "004")  # beats only the ts=0 copy
    assert sorted((r["id"], r["p"], r["ts"]) for r in m.rows()) == [(1, "a", 2), (1, "b", 0), (2, "a", 0)]
    m.delete([{"id": 1, "p": "a"}], "005")
    m.insert_overwrite([{"id": 5, "p": "b", "ts": 1}], "006")
    assert [(r["id"], r["p"]) for r in m.rows()] == [(2, "a"), (5, "b")]
    assert [(r["id"], r["p"]) for r in m.rows("003")] == [(1, "a"), (2, "a"), (1, "b"), (1, "a")]
    m.delete_partition(["p=a"], "007")
    assert [r["id"] for r in m.rows()] == [5]

    c = CowModel(ModelConfig(record_key=("id", "k"), partition_by=("p", "q")))
    assert c.record_key({"id": 1, "k": ""}) == "id:1,k:__empty__"
    assert c.record_key({"id": 1, "k": None}) == "id:1,k:__null__"
    assert c.partition_path({"p": "x", "q": None}) == "x/__HIVE_DEFAULT_PARTITION__"
    t = CowModel(ModelConfig(record_key=("id",), partition_by=("e",), timestamp_strftime="%Y/%m/%d"))
    assert t.partition_path({"e": 1_705_312_800_000}) == "2024/01/15"


SMALL_FILES = {
    "hoodie.parquet.max.file.size": "12000",
    "hoodie.parquet.small.file.limit": "9000",
    "hoodie.copyonwrite.record.size.estimate": "1500",
}


def test_many_file_groups_per_partition(harness: Callable[..., Harness]) -> None:
    """Tiny file sizes: inserts spread over several file groups and fill small ones later."""
    shape = SHAPES[2]
    h = harness(**shape.kwargs, ordering_field="ts", schema=SCHEMA)
    r = shape.row
    h.insert([r(i, i % 2, 1) for i in range(40)], options=SMALL_FILES)
    view = h.table.file_system_view()
    assert len(view.file_groups()) > 2
    # updates spread over file groups, inserts packed into small ones, duplicates across groups
    h.upsert(
        [r(i, i % 2, 2, v=1) for i in range(0, 40, 3)] + [r(i, 2, 1) for i in range(50, 70)],
        options=SMALL_FILES,
    )
    h.insert([r(i, i % 2, 0, v=2) for i in range(0, 40, 7)], options=SMALL_FILES)
    h.bulk_insert([r(i, i % 2, 5, v=3) for i in range(0, 40, 5)], options=SMALL_FILES)
    h.upsert([r(i, i % 2, 1, v=4) for i in range(0, 40, 2)], options=SMALL_FILES)
    h.delete([shape.key(i, i % 2) for i in range(0, 40, 4)], schema=shape.key_schema, options=SMALL_FILES)
    h.insert_overwrite([r(i, 0, 1, v=5) for i in range(100, 130)], options=SMALL_FILES)
    print(
        {g.partition: 0 for g in h.table.file_system_view().file_groups()},
        len(h.table.file_system_view().file_groups()),
    )


def test_insert_without_combining(harness: Callable[..., Harness]) -> None:
    """hoodie.combine.before.insert=false: duplicates inside an insert batch are all written."""
    shape = SHAPES[1]
    h = harness(**shape.kwargs, ordering_field="ts", schema=SCHEMA)
    r = shape.row
    no_combine = {"hoodie.combine.before.insert": "false"}
    h.insert([r(1, 0, 1), r(1, 0, 2, v=1), r(2, 1, 1)], options=no_combine)
    h.bulk_insert([r(2, 1, 1, v=2), r(2, 1, 1, v=3)], options=no_combine)
    h.upsert([r(1, 0, 1, v=4), r(2, 1, 1, v=5)])  # every copy that the incoming record beats
    h.insert_overwrite([r(3, 1, 1), r(3, 1, 1, v=6)], options=no_combine)
    assert len(h.model.rows()) == 4


def test_complex_key_null_and_empty_parts(harness: Callable[..., Harness]) -> None:
    """``__null__`` / ``__empty__`` keep a null and an empty key part apart (complex key generator)."""
    schema = pa.schema([("id", pa.int32()), ("k2", pa.string()), ("p", pa.string()), ("ts", pa.int64())])
    h = harness(record_key=["id", "k2"], partition_by="p", ordering_field="ts", schema=schema)
    h.upsert([{"id": 1, "k2": None, "p": "a", "ts": 1}, {"id": 1, "k2": "", "p": "a", "ts": 1}])
    h.upsert([{"id": 1, "k2": "", "p": "a", "ts": 2}, {"id": 1, "k2": "x", "p": "a", "ts": 1}])
    keys = sorted(r["_hoodie_record_key"] for r in h.table.read().to_pylist())
    assert keys == ["id:1,k2:__empty__", "id:1,k2:__null__", "id:1,k2:x"]
    h.delete([{"id": 1, "k2": None, "p": "a"}], schema=schema.remove(3))


def test_timestamp_partition_hive_style_other_format(harness: Callable[..., Harness]) -> None:
    schema = pa.schema([("id", pa.int64()), ("event_ms", pa.int64()), ("ts", pa.int64())])
    h = harness(
        record_key="id",
        partition_by="event_ms",
        hive_style=True,
        timestamp_format="yyyyMMdd",
        ordering_field="ts",
        schema=schema,
    )
    h.upsert(
        [{"id": 1, "event_ms": 1_705_312_800_000, "ts": 1}, {"id": 2, "event_ms": 951_782_400_000, "ts": 1}]
    )
    paths = sorted(r["_hoodie_partition_path"] for r in h.table.read().to_pylist())
    assert paths == ["event_ms=20000229", "event_ms=20240115"]  # 2000-02-29T00:00:00Z
    h.insert_overwrite([{"id": 3, "event_ms": 951_782_400_001, "ts": 1}])
