"""Random sequences of writes against a small partitioned table: hudi-rs, Inlet and the model agree.

Hypothesis draws the table's merge mode and index, then 3-6 operations (upsert, insert,
bulk_insert, delete, insert_overwrite, delete_partition) with small batches over ~20 keys and
3 partitions, with ordering-value ties, nulls, duplicates inside a batch and
``_hoodie_is_deleted`` records; optionally with tiny file sizes so partitions hold several file
groups (and keys inserted twice end up in different ones). After every commit the harness compares both hudi-rs reader
versions and Inlet's reader with the pandas model, for the snapshot and as of every instant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from conftest import Harness

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.string()),
        ("ts", pa.int64()),
        ("val", pa.int32()),
        ("_hoodie_is_deleted", pa.bool_()),
    ]
)
KEY_SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string())])
PARTITIONS = ("a", "b", "c")
KEYS = 20
# tiny Parquet size limits: inserts spread over several file groups, small ones get filled later
SMALL_FILES = {
    "hoodie.parquet.max.file.size": "9000",
    "hoodie.parquet.small.file.limit": "7000",
    "hoodie.copyonwrite.record.size.estimate": "1500",
}

# half of the draws come from a few hot keys, so keys are often written again (and duplicated)
ids = st.one_of(st.integers(0, 3), st.integers(0, KEYS - 1))
rows = st.fixed_dictionaries(
    {
        "id": ids,
        "p": st.sampled_from(PARTITIONS),
        "ts": st.one_of(st.none(), st.integers(0, 3)),  # few values: ties are common
        "val": st.integers(-5, 5),
        "_hoodie_is_deleted": st.sampled_from([None, False, False, True]),
    }
)
batches = st.lists(rows, min_size=2, max_size=6)
key_batches = st.lists(st.fixed_dictionaries({"id": ids, "p": st.sampled_from(PARTITIONS)}), max_size=5)
partition_lists = st.lists(st.sampled_from(PARTITIONS), min_size=1, max_size=2, unique=True)
PAYLOADS: dict[str, st.SearchStrategy[Any]] = {
    "upsert": batches,
    "insert": batches,
    "bulk_insert": batches,  # never packs into existing file groups: keys end up in two groups
    "insert_overwrite": batches,
    "delete": key_batches,
    "delete_partition": partition_lists,
}
# weights: upserts dominate, as in real pipelines
KINDS = ["upsert"] * 3 + [
    "insert",
    "bulk_insert",
    "bulk_insert",
    "insert_overwrite",
    "delete",
    "delete_partition",
]
operation = st.sampled_from(KINDS).flatmap(lambda kind: st.tuples(st.just(kind), PAYLOADS[kind]))
# the first write creates the table's schema, so it carries data
first_operation = st.sampled_from(["upsert", "insert", "bulk_insert"]).flatmap(
    lambda kind: st.tuples(st.just(kind), batches)
)
sequences = st.tuples(first_operation, st.lists(operation, min_size=2, max_size=5))


def _r(id: int, p: str, ts: int | None, val: int = 0, deleted: bool | None = None) -> dict[str, Any]:
    return {"id": id, "p": p, "ts": ts, "val": val, "_hoodie_is_deleted": deleted}


# Regression examples, run before the generated ones (writers.py bugs these sequences exposed):
# an insert of a stored key with a lower ordering value was merged into the small file group
# holding the key (and dropped) instead of being written as a duplicate;
INSERT_EXISTING = (
    ("upsert", [_r(1, "a", 5), _r(2, "a", 5)]),
    [("insert", [_r(1, "a", 1, 1), _r(3, "a", 1)])],
)
# an upsert or delete of a key stored in two file groups (after a bulk insert) reached only one;
DUPLICATE_ACROSS_GROUPS = (
    ("upsert", [_r(1, "a", 1), _r(2, "b", 1)]),
    [
        ("bulk_insert", [_r(1, "a", 0, 1), _r(2, "b", 3, 1)]),
        ("upsert", [_r(1, "a", 2, 2), _r(2, "b", 2, 2)]),
        ("delete", [{"id": 1, "p": "a"}]),
    ],
)
# insert_overwrite with the bucket index wrote into the bucket file groups it was replacing.
OVERWRITE_BUCKETS = (
    ("upsert", [_r(i, "a", 1) for i in range(6)]),
    [
        ("insert_overwrite", [_r(1, "a", 0, 1), _r(7, "a", 0, 1)]),
        ("upsert", [_r(7, "a", 1, 2), _r(8, "b", 1)]),
    ],
)


@example("EVENT_TIME_ORDERING", "simple", False, False, INSERT_EXISTING)
@example("EVENT_TIME_ORDERING", "simple", True, False, DUPLICATE_ACROSS_GROUPS)
@example("COMMIT_TIME_ORDERING", "simple", False, True, DUPLICATE_ACROSS_GROUPS)
@example("EVENT_TIME_ORDERING", "bucket", False, False, OVERWRITE_BUCKETS)
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    merge_mode=st.sampled_from(["EVENT_TIME_ORDERING", "COMMIT_TIME_ORDERING"]),
    index=st.sampled_from(["simple", "bucket"]),
    hive_style=st.booleans(),
    small_files=st.booleans(),
    steps=sequences,
)
def test_random_operation_sequences(
    harness: Callable[..., Harness],
    merge_mode: str,
    index: str,
    hive_style: bool,
    small_files: bool,
    steps: tuple[tuple[str, list[dict[str, Any]]], list[tuple[str, Any]]],
) -> None:
    h = harness(
        record_key="id",
        partition_by="p",
        hive_style=hive_style,
        ordering_field="ts",
        merge_mode=merge_mode,
        index=index,
        buckets=4,
        schema=SCHEMA,
    )
    options = SMALL_FILES if small_files else {}
    first, rest = steps
    for op, payload in [first, *rest]:
        if op == "delete_partition":
            h.delete_partition([f"p={p}" if hive_style else p for p in payload], options=options)
        elif op == "delete":
            h.delete(payload, schema=KEY_SCHEMA, options=options)
        else:
            h.write(op, payload, options=options)
