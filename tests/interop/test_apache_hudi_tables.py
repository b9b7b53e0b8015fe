"""Inlet reads (and writes into) tables that Apache Hudi itself wrote.

The tables are the zips under ``<repo>/../shared/testdata/hudi-tables`` (Spark SQL, Hudi 0.15 /
1.0 / 1.1), each next to the ``.sql`` that produced it. Three kinds of evidence:

- the independent ``hudi`` reader (hudi-rs), with file group reader version 1 and 2, reads the
  same rows as Inlet, at the latest instant and as of every completed commit/replacecommit;
- expectations derived by hand from the ``.sql`` files (not from any reader's output);
- after Inlet writes into a copy of an Apache-Hudi-written table, hudi-rs reads the result.

Reader-version difference (documented, not a bug of Inlet): on the table written with
``hoodie.populate.meta.fields=false`` hudi-rs reader version 1 still returns the five
``_hoodie_*`` columns (null, except ``_hoodie_file_name``, which Apache Hudi stores even then),
while reader version 2 and Inlet leave them out. Those comparisons cover data columns only.

Merge-on-Read tables: opening, ``describe()``, the timeline, the schema and the file groups'
base files are checked here, and ``read()`` (a snapshot: base files merged with log files) equals
hudi-rs's snapshot read, ``read(query_type="read_optimized")`` hudi-rs's read-optimized mode.
Time travel, file slices, hand-derived rows and damaged log files are covered in
``test_apache_hudi_mor.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from support.hudi_testdata import COW_TABLES, MOR_TABLES, V6_TABLES, TableCache, available

import inlet.core.read.snapshot as readers
from inlet.core import HudiTable
from inlet.core.file_group.view import BaseFile
from inlet.core.schema import META_COLUMNS
from inlet.core.timeline.instant import State

pytestmark = pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")

READER_VERSIONS = ("1", "2")
NO_META = "sample_table_cow_v8_simplekeygen_hivestyle_no_metafields"
COMPLEX = "sample_table_cow_v8_complexkeygen_hivestyle"
NONPART = "sample_table_cow_v8_nonpartitioned"
NONHIVE = "sample_table_cow_v8_simplekeygen_nonhivestyle"
EMPTY = "sample_table_cow_v8_empty"
TXNS = "sample_table_cow_v9_txns_simple_meta"
UTC = dt.UTC


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def tables(tmp_path_factory: pytest.TempPathFactory) -> TableCache:
    """Each zip extracted once, into its own directory. Read-only: writers copy first."""
    return TableCache(tmp_path_factory.mktemp("apache-hudi-tables"))


@pytest.fixture
def files_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Paths of the base files Inlet's reader opens (a spy on its per-file read)."""
    opened: list[str] = []
    real = readers._read_file

    def spy(table: HudiTable, bf: BaseFile, schema: pa.Schema, expr: Any) -> pa.Table:
        opened.append(bf.path)
        return real(table, bf, schema, expr)

    monkeypatch.setattr(readers, "_read_file", spy)
    yield opened


# ---------------------------------------------------------------------------------- helpers


def hudi_table(path: Path, version: str, **options: str) -> Any:
    builder = HudiTableBuilder.from_base_uri(str(path)).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    for key, value in options.items():
        builder = builder.with_hudi_option(key, value)
    return builder.build()


def hudi_rows(
    path: Path,
    version: str,
    as_of: str | None = None,
    filters: Sequence[tuple[str, str, str]] | None = None,
    columns: Sequence[str] | None = None,
    **options: str,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, column names) read by hudi-rs.

    Batches are converted one by one: hudi-rs returns each file's batches with that file's
    Parquet schema (Apache Hudi writes lists as ``array`` items, Arrow writers as ``element``),
    which ``pa.Table.from_batches`` would refuse to concatenate.
    """
    opts = HudiReadOptions()
    if as_of is not None:
        opts = opts.with_as_of_timestamp(as_of)
    if filters:
        opts = opts.with_filters(list(filters))
    if columns:
        opts = opts.with_projection(list(columns))
    batches = list(hudi_table(path, version, **options).read(opts))
    names = list(batches[0].schema.names) if batches else []
    for b in batches:
        assert list(b.schema.names) == names, "hudi-rs batches disagree on columns"
    return [r for b in batches for r in b.to_pylist()], names


def canon(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Rows restricted to ``columns`` (all if None), in a stable order."""
    out = [{c: r[c] for c in (columns if columns is not None else r)} for r in rows]
    return sorted(out, key=lambda r: repr(sorted(r.items())))


def data_columns(names: Sequence[str]) -> list[str]:
    return [c for c in names if c not in META_COLUMNS]


def hudi_write_instants(path: Path) -> list[str]:
    """Completed commits and replacecommits, as hudi-rs's timeline lists them."""
    tl = hudi_table(path, "2").get_timeline()
    return sorted(i.timestamp for i in [*tl.get_completed_commits(), *tl.get_completed_replacecommits()])


def by_key(rows: Sequence[Mapping[str, Any]], key: str = "id") -> dict[Any, dict[str, Any]]:
    out = {r[key]: dict(r) for r in rows}
    assert len(out) == len(rows), f"duplicate {key} values"
    return out


def assert_same_as_hudi(inlet: pa.Table, path: Path, version: str, as_of: str | None, meta: bool) -> None:
    rows, names = hudi_rows(path, version, as_of)
    where = f"hudi-rs v{version} as of {as_of or 'latest'}"
    if not rows:
        assert inlet.num_rows == 0, where
        return
    if meta:
        assert inlet.column_names == names, where
        columns = names
    else:
        columns = data_columns(names)
        assert data_columns(inlet.column_names) == columns, where
    assert canon(inlet.to_pylist(), columns) == canon(rows, columns), where


# ---------------------------------------------------------- expected rows, derived from the .sql


def _people() -> dict[int, dict[str, Any]]:
    """The four rows of the v8 sample tables' INSERTs, as in the .sql (values shared by all tables).

    The v8 tables were written by a JVM in UTC (see the date comment in their hoodie.properties),
    so Spark's TIMESTAMP literals are those UTC instants.
    """

    def ts(day: int, hour: int, minute: int) -> dt.datetime:
        return dt.datetime(2023, 4, day, hour, minute, tzinfo=UTC)

    def arr(*items: tuple[str, int]) -> list[dict[str, Any]]:
        return [{"arr_struct_f1": a, "arr_struct_f2": b} for a, b in items]

    def mp(*items: tuple[str, float, bool]) -> list[tuple[str, dict[str, Any]]]:
        return [(k, {"map_field_value_struct_f1": d, "map_field_value_struct_f2": b}) for k, d, b in items]

    def st(f1: str, f2: int, c1: float, c2: bool) -> dict[str, Any]:
        return {"field1": f1, "field2": f2, "child_struct": {"child_field1": c1, "child_field2": c2}}

    return {
        1: {
            "id": 1,
            "name": "Alice",
            "isActive": True,
            "intField": 15000,
            "longField": 1234567890,
            "floatField": 1.0,
            "doubleField": 3.14159,
            "decimalField": Decimal("12345.67890"),
            "dateField": dt.date(2023, 4, 1),
            "timestampField": ts(1, 12, 1),
            "binaryField": b"binary data",
            "arrayField": arr(("red", 100), ("blue", 200), ("green", 300)),
            "mapField": mp(("key1", 123.456, True), ("key2", 789.012, False)),
            "structField": st("Alice", 30, 123.456, True),
        },
        2: {
            "id": 2,
            "name": "Bob",
            "isActive": False,
            "intField": 25000,
            "longField": 9876543210,
            "floatField": 2.0,
            "doubleField": 2.71828,
            "decimalField": Decimal("67890.12345"),
            "dateField": dt.date(2023, 4, 2),
            "timestampField": ts(2, 13, 2),
            "binaryField": b"more binary data",
            "arrayField": arr(("yellow", 400), ("purple", 500)),
            "mapField": mp(("key3", 234.567, True), ("key4", 567.890, False)),
            "structField": st("Bob", 40, 789.012, False),
        },
        3: {
            "id": 3,
            "name": "Carol",
            "isActive": True,
            "intField": 35000,
            "longField": 1928374650,
            "floatField": 3.0,
            "doubleField": 1.41421,
            "decimalField": Decimal("11111.22222"),
            "dateField": dt.date(2023, 4, 3),
            "timestampField": ts(3, 14, 3),
            "binaryField": b"even more binary data",
            "arrayField": arr(("black", 600), ("white", 700), ("pink", 800)),
            "mapField": mp(("key5", 345.678, True), ("key6", 654.321, False)),
            "structField": st("Carol", 25, 456.789, True),
        },
        4: {
            "id": 4,
            "name": "Diana",
            "isActive": True,
            "intField": 45000,
            "longField": 987654321,
            "floatField": 4.0,
            "doubleField": 2.468,
            "decimalField": Decimal("65432.12345"),
            "dateField": dt.date(2023, 4, 4),
            "timestampField": ts(4, 15, 4),
            "binaryField": b"new binary data",
            "arrayField": arr(("orange", 900), ("gray", 1000)),
            "mapField": mp(("key7", 456.789, True), ("key8", 123.456, False)),
            "structField": st("Diana", 50, 987.654, True),
        },
    }


def people(ids: Sequence[int], extra: Mapping[int, Mapping[str, Any]]) -> dict[int, dict[str, Any]]:
    base = _people()
    return {i: {**base[i], **extra.get(i, {})} for i in ids}


# per table: the partition/byte/short columns of each id, from the .sql VALUES
COMPLEX_COLS = {
    1: {"byteField": 10, "shortField": 300},
    2: {"byteField": 20, "shortField": 100},
    3: {"byteField": 10, "shortField": 300},
    4: {"byteField": 30, "shortField": 100},
}
NONPART_COLS = {
    1: {"byteField": 1, "shortField": 300},
    2: {"byteField": 0, "shortField": 100},
    3: {"byteField": 1, "shortField": 200},
    4: {"byteField": 1, "shortField": 500},
}
SIMPLE_COLS = {
    1: {"byteField": 10, "shortField": 300},
    2: {"byteField": 20, "shortField": 100},
    3: {"byteField": 10, "shortField": 200},
    4: {"byteField": 30, "shortField": 500},
}


def v8_expected(name: str, after_second_insert: bool = True) -> dict[int, dict[str, Any]]:
    """Rows of a v8 sample table after its INSERTs (first INSERT only if not ``after_second_insert``)."""
    cols = {COMPLEX: COMPLEX_COLS, NONPART: NONPART_COLS, NONHIVE: SIMPLE_COLS, NO_META: SIMPLE_COLS}[name]
    if name == NO_META:  # one INSERT of all four rows, Alice already inactive
        return people([1, 2, 3, 4], {i: {**cols[i], **({"isActive": False} if i == 1 else {})} for i in cols})
    if not after_second_insert:
        return people([1, 2, 3], cols)
    # the second INSERT upserts Alice (same longField, so the later write wins) as inactive, adds Diana
    return people([1, 2, 3, 4], {i: {**cols[i], **({"isActive": False} if i == 1 else {})} for i in cols})


# v9 transactions: the initial INSERT of sample_table_cow_v9_txns_simple_meta.sql
_TXN_FIELDS = (
    "region",
    "account_id",
    "txn_ts",
    "amount",
    "currency",
    "txn_type",
    "merchant_name",
    "fee_amount",
)
_TXNS_INITIAL = {
    "TXN-001": ("us", "ACC-A", 1700000000001, "1250.00", "USD", "debit", "Amazon", "0.00"),
    "TXN-002": ("us", "ACC-B", 1700000000002, "89.99", "USD", "debit", "Netflix", "0.00"),
    "TXN-003": ("us", "ACC-A", 1700000000003, "5000.00", "USD", "transfer", None, "25.00"),
    "TXN-004": ("eu", "ACC-C", 1700000000004, "450.75", "EUR", "debit", "Zalando", "0.00"),
    "TXN-005": ("eu", "ACC-D", 1700000000005, "2100.00", "GBP", "credit", "Salary Deposit", "0.00"),
    "TXN-006": ("eu", "ACC-C", 1700000000006, "175.50", "EUR", "debit", "Lufthansa", "3.50"),
    "TXN-007": ("apac", "ACC-E", 1700000000007, "8900.00", "USD", "debit", "Singapore Airlines", "45.00"),
    "TXN-008": ("apac", "ACC-F", 1700000000008, "320.25", "USD", "debit", "Grab", "0.00"),
}
_TXNS_LATER = {
    "TXN-009": ("eu", "ACC-G", 1700400000009, "1500.00", "EUR", "debit", "IKEA", "0.00"),
    "TXN-010": ("eu", "ACC-H", 1700400000010, "2200.00", "EUR", "transfer", None, "15.00"),
    "TXN-011": ("eu", "ACC-I", 1700500000011, "999.99", "EUR", "debit", "MediaMarkt", "0.00"),
    "TXN-012": ("eu", "ACC-J", 1700500000012, "350.00", "GBP", "debit", "British Airways", "7.50"),
    "TXN-013": ("us", "ACC-K", 1700600000013, "750.00", "USD", "debit", "Best Buy", "0.00"),
    "TXN-014": ("us", "ACC-L", 1700600000014, "125.50", "USD", "debit", "Uber", "0.00"),
    "TXN-015": ("apac", "ACC-M", 1700700000015, "4500.00", "USD", "debit", "Japan Airlines", "50.00"),
    "TXN-016": ("apac", "ACC-N", 1700700000016, "88.00", "USD", "debit", "GrabFood", "0.00"),
    "TXN-017": ("us", "ACC-O", 1700800000017, "199.99", "USD", "debit", "Apple Store", "0.00"),
    "TXN-018": ("eu", "ACC-P", 1700800000018, "55.00", "EUR", "debit", "Spotify", "0.00"),
}


def _txn(txn_id: str) -> dict[str, Any]:
    values = {**_TXNS_INITIAL, **_TXNS_LATER}[txn_id]
    row = dict(zip(_TXN_FIELDS, values, strict=True))
    row["amount"] = Decimal(row["amount"])
    row["fee_amount"] = Decimal(row["fee_amount"])
    return {"txn_id": txn_id, **row}


Txns = dict[str, dict[str, Any]]


def _upd(state: Txns, txn_id: str, **changes: Any) -> Txns:
    return {**state, txn_id: {**state[txn_id], **changes}}


def _add(state: Txns, *ids: str) -> Txns:
    return {**state, **{i: _txn(i) for i in ids}}


def _drop(state: Txns, *ids: str) -> Txns:
    return {k: v for k, v in state.items() if k not in ids}


def _overwrite_eu(state: Txns) -> Txns:
    return _add({k: v for k, v in state.items() if v["region"] != "eu"}, "TXN-011", "TXN-012")


def txns_history() -> list[tuple[str, Txns]]:
    """(action, table state) after each write statement of the .sql, in order."""
    s0 = _add({}, *_TXNS_INITIAL)
    s1 = _upd(s0, "TXN-001", txn_type="reversal", txn_ts=1700100000001)
    s2 = _drop(s1, "TXN-002")
    s3 = _upd(s2, "TXN-005", amount=Decimal("2500.00"), txn_ts=1700200000005)
    s4 = _drop(s3, "TXN-005")
    s5 = _upd(s4, "TXN-007", fee_amount=Decimal("75.00"), txn_ts=1700300000007)
    s6 = _add(s5, "TXN-009", "TXN-010")
    s7 = _overwrite_eu(s6)  # INSERT OVERWRITE ... PARTITION (region = 'eu')
    s8 = _add(s7, "TXN-013", "TXN-014")
    s9 = _add(s8, "TXN-015", "TXN-016")
    s10 = s9  # run_clustering rewrites files, not rows
    s11 = _add(s10, "TXN-017", "TXN-018")
    actions = ["commit"] * 7 + ["replacecommit", "commit", "commit", "replacecommit", "commit"]
    return list(zip(actions, [s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11], strict=True))


# ================================================================ 1. COW reads = hudi-rs reads


@pytest.mark.parametrize("version", READER_VERSIONS)
@pytest.mark.parametrize("name", COW_TABLES)
def test_cow_snapshot_matches_hudi_reader(tables: TableCache, name: str, version: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    got = table.read()
    assert_same_as_hudi(got, path, version, None, meta=name != NO_META)
    # same schema as hudi-rs derives from the table (names and Arrow types, nested included)
    hudi_schema = hudi_table(path, version).get_schema()
    schema = table.schema()
    assert schema is not None
    assert [(f.name, str(f.type)) for f in schema] == [(f.name, str(f.type)) for f in hudi_schema]
    assert data_columns(got.column_names) == schema.names
    for f in schema:
        assert got.schema.field(f.name).type.equals(f.type), f.name


@pytest.mark.parametrize("name", COW_TABLES)
def test_cow_time_travel_matches_hudi_reader(tables: TableCache, name: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    instants = hudi_write_instants(path)
    assert [i.time for i in table.timeline.completed_writes()] == instants
    for as_of in instants:
        got = table.read(as_of=as_of)
        for version in READER_VERSIONS:
            assert_same_as_hudi(got, path, version, as_of, meta=name != NO_META)


def test_no_metafields_reader_versions_differ_only_in_meta_columns(tables: TableCache) -> None:
    path = tables.path(NO_META)
    v1_rows, v1_names = hudi_rows(path, "1")
    v2_rows, v2_names = hudi_rows(path, "2")
    assert v1_names[:5] == list(META_COLUMNS)  # v1 keeps the (null) meta columns of the files
    assert not set(META_COLUMNS) & set(v2_names)  # v2 leaves them out, as Inlet does
    assert {r["_hoodie_record_key"] for r in v1_rows} == {None}
    table = HudiTable.open(str(path))
    assert table.read().column_names == v2_names
    assert canon(v1_rows, v2_names) == canon(v2_rows)
    # asked for explicitly, a meta column comes from the file (null: the writer did not fill it)
    got = table.read(columns=["id", "_hoodie_record_key"])
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "_hoodie_record_key": None} for i in (1, 2, 3, 4)
    ]


# ---------------------------------------------------------------- hand-derived from the .sql


@pytest.mark.parametrize("name", [COMPLEX, NONPART, NONHIVE, NO_META])
def test_v8_rows_follow_the_sql(tables: TableCache, name: str) -> None:
    table = HudiTable.open(str(tables.path(name)))
    got = table.read()
    rows = by_key(got.to_pylist())
    expected = v8_expected(name)
    assert sorted(rows) == [1, 2, 3, 4]
    for i, want in expected.items():
        assert {c: rows[i][c] for c in want} == want, f"id {i}"
    assert rows[1]["isActive"] is False  # the second INSERT (or the only one) made Alice inactive
    assert set(got.column_names) - set(META_COLUMNS) == set(expected[1])
    writes = [i.time for i in table.timeline.completed_writes()]
    if name == NO_META:
        assert len(writes) == 1
        assert not set(META_COLUMNS) & set(got.column_names)
        return
    # two INSERT statements -> two commits; before the second one: Alice active, no Diana
    assert len(writes) == 2
    first = by_key(table.read(as_of=writes[0]).to_pylist())
    assert sorted(first) == [1, 2, 3]
    for i, want in v8_expected(name, after_second_insert=False).items():
        assert {c: first[i][c] for c in want} == want, f"id {i} as of the first commit"
    assert first[1]["isActive"] is True
    # meta columns: what each key generator and partitioning style writes
    commit_of = {1: writes[1], 2: writes[0], 3: writes[0], 4: writes[1]}
    for i, r in rows.items():
        assert r["_hoodie_commit_time"] == commit_of[i]
        assert r["_hoodie_commit_seqno"].startswith(commit_of[i] + "_")
        name_of = expected[i]["name"]
        byte, short = expected[i]["byteField"], expected[i]["shortField"]
        if name == COMPLEX:
            assert r["_hoodie_record_key"] == f"id:{i},name:{name_of}"
            assert r["_hoodie_partition_path"] == f"byteField={byte}/shortField={short}"
        elif name == NONPART:
            assert r["_hoodie_record_key"] == str(i)
            assert r["_hoodie_partition_path"] == ""
        else:
            assert r["_hoodie_record_key"] == str(i)
            assert r["_hoodie_partition_path"] == str(byte)
        assert r["_hoodie_file_name"].endswith(".parquet")
        partition = r["_hoodie_partition_path"]
        assert (tables.path(name) / partition / r["_hoodie_file_name"]).is_file()


def test_v8_empty_table(tables: TableCache) -> None:
    path = tables.path(EMPTY)
    table = HudiTable.open(str(path))
    assert table.instants() == []
    assert table.describe()["latest_commit"] is None
    got = table.read()
    assert got.num_rows == 0
    # CREATE TABLE v8_empty (id INT, name STRING, isActive BOOLEAN); schema from the create schema
    assert got.schema.names == [*META_COLUMNS, "id", "name", "isActive"]
    assert [str(f.type) for f in got.schema][5:] == ["int32", "string", "bool"]
    assert table.read(columns=["id"], filters=[("id", "=", 1)]).num_rows == 0
    for version in READER_VERSIONS:
        assert hudi_rows(path, version) == ([], [])


def test_v9_cow_history_follows_the_sql(tables: TableCache) -> None:
    path = tables.path(TXNS)
    table = HudiTable.open(str(path))
    tl = table.timeline
    writes = tl.completed_writes()
    history = txns_history()
    assert [i.action for i in writes] == [action for action, _ in history]
    # CREATE INDEX twice: two completed indexing instants, not writes; the metadata table exists
    assert [i.action for i in tl.completed() if i not in writes] == ["indexing", "indexing"]
    assert tl.latest_completed_write() == writes[-1]
    assert table.describe()["latest_commit"] == writes[-1].time
    assert (path / ".hoodie" / "metadata" / ".hoodie" / "hoodie.properties").is_file()
    compared = ("region", "account_id", "txn_ts", "amount", "currency", "txn_type", "merchant_name")
    for inst, (_, state) in zip(writes, history, strict=True):
        rows = by_key(table.read(as_of=inst.time).to_pylist(), "txn_id")
        assert sorted(rows) == sorted(state), f"as of {inst.time} ({inst.action})"
        for txn_id, want in state.items():
            got = {c: rows[txn_id][c] for c in (*compared, "fee_amount")}
            assert got == {c: want[c] for c in (*compared, "fee_amount")}, f"{txn_id} as of {inst.time}"


def test_v9_cow_final_state(tables: TableCache) -> None:
    path = tables.path(TXNS)
    table = HudiTable.open(str(path))
    got = table.read()
    rows = by_key(got.to_pylist(), "txn_id")
    assert "TXN-002" not in rows and "TXN-005" not in rows  # deleted
    # the INSERT OVERWRITE of region=eu left exactly its two rows; TXN-018 was inserted later
    assert {k for k, r in rows.items() if r["region"] == "eu"} == {"TXN-011", "TXN-012", "TXN-018"}
    assert {k for k, r in rows.items() if r["region"] == "us"} == {
        "TXN-001",
        "TXN-003",
        "TXN-013",
        "TXN-014",
        "TXN-017",
    }
    assert {k for k, r in rows.items() if r["region"] == "apac"} == {
        "TXN-007",
        "TXN-008",
        "TXN-015",
        "TXN-016",
    }
    assert rows["TXN-001"]["txn_type"] == "reversal" and rows["TXN-001"]["txn_ts"] == 1700100000001
    assert rows["TXN-007"]["fee_amount"] == Decimal("75.00")
    assert rows["TXN-003"]["merchant_name"] is None
    # TXN-011 in full. The v9 tables were written by a JVM on US Central time (CST, UTC-6 in
    # January; see hoodie.properties' date comments), so TIMESTAMP '2024-01-18 09:00:00' is 15:00 UTC.
    assert {c: rows["TXN-011"][c] for c in data_columns(got.column_names)} == {
        "txn_id": "TXN-011",
        "account_id": "ACC-I",
        "txn_ts": 1700500000011,
        "txn_datetime": dt.datetime(2024, 1, 18, 15, 0, tzinfo=UTC),
        "txn_date": dt.date(2024, 1, 18),
        "amount": Decimal("999.99"),
        "currency": "EUR",
        "txn_type": "debit",
        "merchant_name": "MediaMarkt",
        "is_international": False,
        "fee_amount": Decimal("0.00"),
        "txn_metadata": '{"category":"electronics","mcc":"5732","risk_score":0.06}',
        "region": "eu",
    }
    assert got.schema.field("amount").type == pa.decimal128(15, 2)
    assert got.schema.field("fee_amount").type == pa.decimal128(10, 2)
    # every row comes from a data file of its partition, never from the metadata table
    view = table.file_system_view()
    files = [b.path for b in view.latest_base_files()]
    assert files and not any(f.startswith(".hoodie") for f in files)
    for r in rows.values():
        assert r["_hoodie_partition_path"] == f"region={r['region']}"
        assert f"{r['_hoodie_partition_path']}/{r['_hoodie_file_name']}" in files


def test_v9_cow_replaced_file_groups_are_not_read(tables: TableCache, files_opened: list[str]) -> None:
    """The overwrite and the clustering replaced file groups whose files are still on disk."""
    path = tables.path(TXNS)
    table = HudiTable.open(str(path))
    on_disk = {str(p.relative_to(path)) for p in path.glob("region=*/*.parquet")}
    got = table.read()
    assert len(set(files_opened)) == len(files_opened)
    assert set(files_opened) == {
        f"{r['_hoodie_partition_path']}/{r['_hoodie_file_name']}" for r in got.to_pylist()
    }
    assert len(files_opened) < len(on_disk)
    latest = set(files_opened)
    # the clustering (replacecommit 11) rewrote file groups: its files are read now, and the
    # files it replaced were read as of the commit before it
    clustering = table.timeline.completed_writes()[10]
    assert clustering.action == "replacecommit"
    assert any(clustering.time in f for f in latest)
    files_opened.clear()
    assert table.read(as_of=table.timeline.completed_writes()[9].time).num_rows == 10
    before = set(files_opened)
    assert not any(clustering.time in f for f in before)
    assert before - latest


# ========================================================== 2. projection, filters, pruning

PARTITION_COLUMNS = {
    COMPLEX: ("byteField", "shortField"),
    NONHIVE: ("byteField",),
    NO_META: ("byteField",),
    TXNS: ("region",),
}
MISSING_VALUE = {"byteField": 99, "shortField": 999, "region": "mars"}


@pytest.mark.parametrize("name", list(PARTITION_COLUMNS))
def test_partition_filters_prune_and_match(tables: TableCache, name: str, files_opened: list[str]) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    key = "txn_id" if name == TXNS else "id"
    extra = "txn_datetime" if name == TXNS else "structField"
    full_rows = table.read().to_pylist()
    stored_name = {r[key]: r for r in table.read(columns=[key, "_hoodie_file_name"]).to_pylist()}
    all_files = len({r["_hoodie_file_name"] for r in stored_name.values()})
    for column in PARTITION_COLUMNS[name]:
        for value in [*sorted({r[column] for r in full_rows}), MISSING_VALUE[column]]:
            files_opened.clear()
            columns = [key, extra, column]
            got = table.read(columns=columns, filters=[(column, "=", value)])
            want = [{c: r[c] for c in columns} for r in full_rows if r[column] == value]
            assert got.column_names == columns
            assert canon(got.to_pylist()) == canon(want), (column, value)
            # only the files of matching partitions are opened (COW files are never empty, so
            # they are the files the matching rows live in)
            want_files = {stored_name[r[key]]["_hoodie_file_name"] for r in want}
            assert sorted(p.rsplit("/", 1)[-1] for p in files_opened) == sorted(want_files), (column, value)
            assert len(files_opened) < all_files
            # hudi-rs's own partition filter agrees
            for version in READER_VERSIONS:
                hrows, _ = hudi_rows(path, version, filters=[(column, "=", str(value))], columns=[key])
                assert sorted(r[key] for r in hrows) == sorted(r[key] for r in want), (column, value, version)


def test_partition_pruning_on_two_levels_and_ranges(tables: TableCache, files_opened: list[str]) -> None:
    table = HudiTable.open(str(tables.path(COMPLEX)))
    Row = dict[str, Any]
    # (filters, rows they select, partitions whose files must be opened: the partition-column
    # filters prune files; other filters apply to rows)
    cases: list[tuple[list[tuple[str, str, Any]], Callable[[Row], bool], Callable[[Row], bool] | None]] = [
        ([("byteField", "=", 10), ("shortField", "=", 300)], lambda r: r["byteField"] == 10, None),
        ([("byteField", "=", 10), ("shortField", "=", 100)], lambda r: False, None),
        ([("byteField", "in", [20, 30])], lambda r: r["byteField"] in (20, 30), None),
        ([("byteField", "not in", [20, 30])], lambda r: r["byteField"] not in (20, 30), None),
        ([("byteField", ">", 15)], lambda r: r["byteField"] > 15, None),
        ([("byteField", "!=", 10)], lambda r: r["byteField"] != 10, None),
        ([("byteField", "=", "10")], lambda r: r["byteField"] == 10, None),  # text coerced to the type
        (
            [("shortField", "<=", 100), ("id", ">", 2)],
            lambda r: r["shortField"] <= 100 and r["id"] > 2,
            lambda r: r["shortField"] <= 100,
        ),
    ]
    full = table.read().to_pylist()
    for filters, pred, part_pred in cases:
        files_opened.clear()
        got = table.read(columns=["id", "name"], filters=filters)
        want = [{"id": r["id"], "name": r["name"]} for r in full if pred(r)]
        assert canon(got.to_pylist()) == canon(want), filters
        opened = part_pred or pred
        partitions = {f"byteField={r['byteField']}/shortField={r['shortField']}" for r in full if opened(r)}
        assert {p.rsplit("/", 1)[0] for p in files_opened} == partitions, filters


def test_filters_on_data_columns(tables: TableCache) -> None:
    """Filters on non-partition columns of every type; expected rows computed in Python."""
    table = HudiTable.open(str(tables.path(TXNS)))
    full = table.read().to_pylist()
    cases: list[tuple[list[tuple[str, str, Any]], Callable[[dict[str, Any]], bool]]] = [
        ([("amount", ">", 1000)], lambda r: r["amount"] > 1000),  # int against DECIMAL(15,2)
        ([("amount", ">", 999.985)], lambda r: r["amount"] > Decimal("999.985")),  # not rounded
        ([("amount", "<=", "350.00")], lambda r: r["amount"] <= Decimal("350")),
        ([("amount", "in", [999.99, 350, "55.001"])], lambda r: r["amount"] in (Decimal("999.99"), 350)),
        ([("fee_amount", "=", 0)], lambda r: r["fee_amount"] == 0),
        ([("txn_date", "=", "2024-01-15")], lambda r: r["txn_date"] == dt.date(2024, 1, 15)),
        ([("txn_date", ">=", dt.date(2024, 1, 19))], lambda r: r["txn_date"] >= dt.date(2024, 1, 19)),
        (
            [("txn_datetime", "<", "2024-01-16T00:00:00Z")],
            lambda r: r["txn_datetime"] < dt.datetime(2024, 1, 16, tzinfo=UTC),
        ),
        (
            [("txn_datetime", ">=", "2024-01-18 15:00:00")],  # no offset: UTC
            lambda r: r["txn_datetime"] >= dt.datetime(2024, 1, 18, 15, tzinfo=UTC),
        ),
        (
            [("txn_datetime", ">=", "2024-01-18T16:00:00+01:00")],
            lambda r: r["txn_datetime"] >= dt.datetime(2024, 1, 18, 15, tzinfo=UTC),
        ),
        ([("is_international", "=", True)], lambda r: r["is_international"]),
        ([("txn_ts", ">", 1700500000011)], lambda r: r["txn_ts"] > 1700500000011),
        ([("currency", "in", ["GBP", "EUR"])], lambda r: r["currency"] in ("GBP", "EUR")),
        ([("region", "=", "eu"), ("amount", "<", 500)], lambda r: r["region"] == "eu" and r["amount"] < 500),
        (
            [("_hoodie_commit_time", ">", "20260307162450901")],
            lambda r: r["_hoodie_commit_time"] > "20260307162450901",
        ),
    ]
    for filters, pred in cases:
        got = table.read(columns=["txn_id", "amount"], filters=filters)
        want = [{"txn_id": r["txn_id"], "amount": r["amount"]} for r in full if pred(r)]
        assert canon(got.to_pylist()) == canon(want), filters
    # non-partitioned table: row filters only, nested columns projected
    table = HudiTable.open(str(tables.path(NONPART)))
    full = table.read().to_pylist()
    got = table.read(columns=["id", "mapField", "arrayField"], filters=[("decimalField", ">", 20000)])
    want = [
        {"id": r["id"], "mapField": r["mapField"], "arrayField": r["arrayField"]}
        for r in full
        if r["decimalField"] > 20000
    ]
    assert sorted(r["id"] for r in want) == [2, 4]
    assert canon(got.to_pylist()) == canon(want)


def test_filters_with_time_travel(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(TXNS)))
    writes = table.timeline.completed_writes()
    history = txns_history()
    for idx in (5, 6, 7, 11):  # around the overwrite of region=eu, and the latest
        got = table.read(as_of=writes[idx].time, columns=["txn_id"], filters=[("region", "=", "eu")])
        want = {k for k, r in history[idx][1].items() if r["region"] == "eu"}
        assert set(got.column("txn_id").to_pylist()) == want, idx
    before = table.read(as_of=writes[6].time, filters=[("region", "=", "eu")], columns=["txn_id"])
    assert sorted(before.column("txn_id").to_pylist()) == ["TXN-004", "TXN-006", "TXN-009", "TXN-010"]
    after = table.read(as_of=writes[7].time, filters=[("region", "=", "eu")], columns=["txn_id"])
    assert sorted(after.column("txn_id").to_pylist()) == ["TXN-011", "TXN-012"]


# ================================================================== 3. MOR and v6 tables


def _table_version(name: str) -> int:
    m = re.search(r"_v(\d+)_", name)
    assert m is not None
    return int(m.group(1))


@pytest.mark.parametrize("name", MOR_TABLES)
def test_mor_tables_open_describe_and_timeline(tables: TableCache, name: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    version = _table_version(name)
    assert table.version == version
    assert table.layout_version == (1 if version == 6 else 2)
    info = table.describe()
    assert info["table_type"] == "MERGE_ON_READ"
    assert info["table_version"] == version
    assert info["pending_instants"] == 0
    hudi = hudi_table(path, "2")
    tl = hudi.get_timeline()
    hudi_writes = sorted(
        (i.timestamp, i.action)
        for i in [
            *tl.get_completed_commits(),
            *tl.get_completed_deltacommits(),
            *tl.get_completed_replacecommits(),
        ]
    )
    assert [(i.time, i.action) for i in table.timeline.completed_writes()] == hudi_writes
    assert info["latest_commit"] == hudi_writes[-1][0]
    schema = table.schema()
    assert schema is not None
    assert [(f.name, str(f.type)) for f in schema] == [(f.name, str(f.type)) for f in hudi.get_schema()]
    assert info["schema"] == [f"{f.name}: {f.type}" for f in schema]
    # the file groups' base files are those of hudi-rs's latest file slices
    slices = [s.base_file_relative_path() for s in hudi.get_file_slices()]
    base_files = sorted(s for s in slices if s)
    assert sorted(b.path for b in table.file_system_view().latest_base_files()) == base_files
    for inst in table.timeline.completed_writes():
        md = table.timeline.commit_metadata(inst)
        assert md.write_stats(), inst


@pytest.mark.parametrize("version", READER_VERSIONS)
@pytest.mark.parametrize("name", MOR_TABLES)
def test_mor_snapshot_and_read_optimized_reads_match_hudi_reader(
    tables: TableCache, name: str, version: str
) -> None:
    """``read()`` on MOR merges log files (hudi-rs's snapshot read); ``read_optimized`` reads base files."""
    path = tables.path(name)
    table = HudiTable.open(str(path))
    got = table.read()
    rows, names = hudi_rows(path, version)
    assert got.column_names == names
    assert canon(got.to_pylist()) == canon(rows)
    got = table.read(query_type="read_optimized")
    rows, names = hudi_rows(path, version, **{"hoodie.read.use.read_optimized.mode": "true"})
    assert got.column_names == names
    assert canon(got.to_pylist()) == canon(rows)


# actions of each v6 table's timeline, from its .sql: every INSERT/DELETE on MOR is a
# deltacommit; the rollback_to_instant of the second INSERT removed that deltacommit and left a
# rollback instant
V6_ACTIONS = {
    "quickstart_trips_table_mor_avro_v6_trips_8i3d": ["deltacommit", "deltacommit"],  # INSERT, DELETE
    "sample_table_mor_parquet_v6_nonpartitioned_rollback": ["deltacommit", "rollback", "deltacommit"],
    "sample_table_mor_parquet_v6_simplekeygen_nonhivestyle": ["deltacommit", "deltacommit"],
}


@pytest.mark.parametrize("name", V6_TABLES)
def test_v6_timeline_matches_its_files(tables: TableCache, name: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    assert table.layout_version == 1
    files = [p.name for p in (path / ".hoodie").iterdir() if p.is_file()]
    completed = sorted(
        (m.group(1), m.group(2)) for f in files if (m := re.fullmatch(r"(\d{17})\.([a-z]+)", f)) is not None
    )
    pending = {m.group(1) for f in files if (m := re.fullmatch(r"(\d{17})\.[a-z]+\.(requested|inflight)", f))}
    assert pending <= {t for t, _ in completed}  # every requested/inflight file has completed
    instants = table.instants()
    assert [(i.time, i.action) for i in instants] == completed
    assert all(i.state is State.COMPLETED and i.completion_time for i in instants)
    assert [a for _, a in completed] == V6_ACTIONS[name]
    # JSON commit metadata of layout 1 decodes: write stats name files of the table
    for inst in table.timeline.completed_writes():
        md = table.timeline.commit_metadata(inst)
        stats = md.write_stats()
        assert stats and md.operation_type, inst
        for s in stats:
            assert s.path and (path / s.partition_path).is_dir(), s.path
    assert table.schema() is not None


# ============================================ 4. Inlet writes into Apache-Hudi-written tables


def _copy(tables: TableCache, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(tables.path(name), dst)
    return dst


def _data_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    return canon(rows, columns)


def _check_all_readers(path: Path, expected: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    want = _data_rows(expected, columns)
    inlet = HudiTable.open(str(path)).read().to_pylist()
    assert _data_rows(inlet, columns) == want, "inlet"
    for version in READER_VERSIONS:
        rows, _ = hudi_rows(path, version)
        assert _data_rows(rows, columns) == want, f"hudi-rs v{version}"


def test_upsert_into_hudi_written_complexkeygen_table(tables: TableCache, tmp_path: Path) -> None:
    path = _copy(tables, COMPLEX, tmp_path)
    table = HudiTable.open(str(path))
    schema = table.schema()
    assert schema is not None
    before = by_key(table.read().to_pylist())
    old_instants = hudi_write_instants(path)
    old_schema = table.avro_schema() or ""
    expected = v8_expected(COMPLEX)
    # update Bob (ordering field longField raised, so the update wins under EVENT_TIME_ORDERING),
    # a stale update of Carol (lower longField: Apache Hudi's merge keeps the stored row), insert
    # Eve into Bob's partition and Frank into a new partition
    bob = {**expected[2], "isActive": True, "intField": 26000, "longField": expected[2]["longField"] + 1}
    stale_carol = {**expected[3], "isActive": False, "longField": expected[3]["longField"] - 1}
    eve = {**expected[2], "id": 5, "name": "Eve", "mapField": [], "arrayField": None}
    frank = {**expected[4], "id": 6, "name": "Frank", "byteField": 40, "shortField": 200}
    data = pa.Table.from_pylist([bob, stale_carol, eve, frank], schema=schema)
    result = table.write(data, "upsert")
    assert result.action == "commit"
    # the writer schema Inlet records is the one Apache Hudi recorded (names, namespaces, types)
    assert json.loads(HudiTable.open(str(path)).avro_schema() or "") == json.loads(old_schema)
    want = {1: expected[1], 2: bob, 3: expected[3], 4: expected[4], 5: eve, 6: frank}
    _check_all_readers(path, list(want.values()), schema.names)
    # meta columns: rows Inlet did not change keep Apache Hudi's commit time and sequence number
    after = by_key(HudiTable.open(str(path)).read().to_pylist())
    for i in (1, 3, 4):
        for c in (
            "_hoodie_commit_time",
            "_hoodie_commit_seqno",
            "_hoodie_record_key",
            "_hoodie_partition_path",
        ):
            assert after[i][c] == before[i][c], (i, c)
    for i, who in ((2, "Bob"), (5, "Eve"), (6, "Frank")):
        assert after[i]["_hoodie_commit_time"] == result.instant_time
        assert after[i]["_hoodie_record_key"] == f"id:{i},name:{who}"
    assert after[6]["_hoodie_partition_path"] == "byteField=40/shortField=200"
    assert (path / "byteField=40" / "shortField=200" / ".hoodie_partition_metadata").is_file()
    # hudi-rs sees the new commit, and time travel to before it still shows Apache Hudi's rows
    assert hudi_write_instants(path) == [*old_instants, result.instant_time]
    for version in READER_VERSIONS:
        rows, _ = hudi_rows(path, version, as_of=old_instants[-1])
        assert _data_rows(rows, schema.names) == _data_rows(list(expected.values()), schema.names)


def test_upsert_and_delete_into_hudi_written_nonpartitioned_table(tables: TableCache, tmp_path: Path) -> None:
    path = _copy(tables, NONPART, tmp_path)
    table = HudiTable.open(str(path))
    schema = table.schema()
    assert schema is not None
    expected = v8_expected(NONPART)
    carol = {
        **expected[3],
        "name": "Caroline",
        "decimalField": Decimal("-1.00001"),
        "longField": expected[3]["longField"] + 10,
        "structField": {"field1": None, "field2": 26, "child_struct": None},
        "timestampField": dt.datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC),
    }
    gus = {
        **expected[4],
        "id": 6,
        "name": "Gus",
        "binaryField": b"\x00\xff",
        "dateField": dt.date(1969, 12, 31),
    }
    first = table.write(pa.Table.from_pylist([carol, gus], schema=schema), "upsert")
    want = {1: expected[1], 2: expected[2], 3: carol, 4: expected[4], 6: gus}
    _check_all_readers(path, list(want.values()), schema.names)
    # delete Bob by key (the record key column; the table is not partitioned)
    keys = pa.table({"id": pa.array([2], schema.field("id").type)})
    second = HudiTable.open(str(path)).delete(keys)
    assert second.num_deletes == 1
    del want[2]
    _check_all_readers(path, list(want.values()), schema.names)
    instants = hudi_write_instants(path)
    assert instants[-2:] == [first.instant_time, second.instant_time]
    for version in READER_VERSIONS:
        rows, _ = hudi_rows(path, version, as_of=first.instant_time)
        assert sorted(r["id"] for r in rows) == [1, 2, 3, 4, 6]


def test_upsert_into_hudi_written_table_without_meta_fields(tables: TableCache, tmp_path: Path) -> None:
    path = _copy(tables, NO_META, tmp_path)
    table = HudiTable.open(str(path))
    schema = table.schema()
    assert schema is not None
    expected = v8_expected(NO_META)
    bob = {**expected[2], "isActive": True, "longField": expected[2]["longField"] + 1}
    result = table.write(pa.Table.from_pylist([bob], schema=schema), "upsert")
    assert (result.num_updates, result.num_inserts) == (1, 0)
    _check_all_readers(path, [expected[1], bob, expected[3], expected[4]], schema.names)
    # like Apache Hudi, Inlet leaves the key/commit meta columns null in such a table
    (written,) = result.files_written
    meta = pq.read_table(path / written, columns=["_hoodie_record_key", "_hoodie_commit_time"]).to_pylist()
    assert meta and all(m["_hoodie_record_key"] is None and m["_hoodie_commit_time"] is None for m in meta)
