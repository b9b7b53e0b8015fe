"""Merge-on-Read tables written by Apache Hudi, read by Inlet's file group reader.

Evidence, per table under ``<repo>/../shared/testdata/hudi-tables`` (Hudi 0.15 table version 6
with Parquet and Avro log blocks, rollback blocks and deletes; Hudi 1.1 table version 9 with Avro
logs, updates, deletes, insert overwrite, compaction, clustering and a rolled-back deltacommit):

- snapshot reads equal the independent ``hudi`` reader (hudi-rs, file group reader versions 1
  and 2) at the latest instant and as of every completed instant; read-optimized reads equal
  hudi-rs's read-optimized mode; the file slices (base file and log files) equal hudi-rs's;
- rows derived by hand from each table's ``.sql``;
- every log file of these tables decodes; cut at every byte offset, a log reads its whole blocks
  (with a warning) and nothing else; damage to a block's magic or length is reported as
  corruption, including through a table read.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from support.hudi_testdata import MOR_TABLES, TableCache, available

from inlet.core import HudiTable
from inlet.core.errors import CorruptFileError, UnsupportedError
from inlet.core.file_group.reader import BlockFilter, read_merged
from inlet.core.file_group.view import FileSlice
from inlet.core.log.blocks import BlockType
from inlet.core.log.reader import BytesSource, decode_block, scan_frames
from inlet.core.read.snapshot import merge_config
from inlet.core.schema import META_COLUMNS

pytestmark = pytest.mark.skipif(not available(), reason="../shared/testdata/hudi-tables is not present")

READER_VERSIONS = ("1", "2")
TRIPS = "quickstart_trips_table_mor_avro_v6_trips_8i3d"
V6_ROLLBACK = "sample_table_mor_parquet_v6_nonpartitioned_rollback"
V6_NONHIVE = "sample_table_mor_parquet_v6_simplekeygen_nonhivestyle"
V9_ROLLBACK = "sample_table_mor_avro_v9_nonpartitioned_rollback"
TXNS = "sample_table_mor_avro_v9_txns_simple_meta"
OVERWRITE = "sample_table_mor_avro_v9_txns_simple_overwrite"


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> TableCache:
    return TableCache(tmp_path_factory.mktemp("apache-hudi-mor"))


def hudi_table(path: Path, version: str, **options: str) -> Any:
    builder = HudiTableBuilder.from_base_uri(str(path)).with_hudi_option(
        "hoodie.read.file.group.reader.version", version
    )
    for key, value in options.items():
        builder = builder.with_hudi_option(key, value)
    return builder.build()


def hudi_rows(
    path: Path, version: str, as_of: str | None = None, **options: str
) -> tuple[list[dict[str, Any]], list[str]]:
    opts = HudiReadOptions()
    if as_of is not None:
        opts = opts.with_as_of_timestamp(as_of)
    batches = list(hudi_table(path, version, **options).read(opts))
    names = list(batches[0].schema.names) if batches else []
    return [r for b in batches for r in b.to_pylist()], names


def canon(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    out = [{c: r[c] for c in (columns if columns is not None else r)} for r in rows]
    return sorted(out, key=lambda r: repr(sorted(r.items())))


def assert_same_as_hudi(got: pa.Table, path: Path, version: str, as_of: str | None, **options: str) -> None:
    rows, names = hudi_rows(path, version, as_of, **options)
    where = f"hudi-rs v{version} {options or 'snapshot'} as of {as_of or 'latest'}"
    if not rows:
        assert got.num_rows == 0, where
        return
    assert got.column_names == names, where
    assert canon(got.to_pylist()) == canon(rows), where


def write_instants(table: HudiTable) -> list[str]:
    return [i.time for i in table.timeline.completed_writes()]


# ========================================================== 1. the same rows as hudi-rs


@pytest.mark.parametrize("version", READER_VERSIONS)
@pytest.mark.parametrize("name", MOR_TABLES)
def test_snapshot_matches_hudi_reader_at_every_instant(tables: TableCache, name: str, version: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    instants = write_instants(table)
    assert instants, name
    for as_of in [None, *instants]:
        assert_same_as_hudi(table.read(as_of=as_of), path, version, as_of)


@pytest.mark.parametrize("version", READER_VERSIONS)
@pytest.mark.parametrize("name", MOR_TABLES)
def test_read_optimized_matches_hudi_reader(tables: TableCache, name: str, version: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    ro = {"hoodie.read.use.read_optimized.mode": "true"}
    for as_of in [None, *write_instants(table)]:
        assert_same_as_hudi(table.read(as_of=as_of, query_type="read_optimized"), path, version, as_of, **ro)


@pytest.mark.parametrize("name", MOR_TABLES)
def test_file_slices_match_hudi(tables: TableCache, name: str) -> None:
    path = tables.path(name)
    table = HudiTable.open(str(path))
    hudi = hudi_table(path, "2")
    for as_of in [None, *write_instants(table)]:
        opts = HudiReadOptions() if as_of is None else HudiReadOptions().with_as_of_timestamp(as_of)
        want = sorted(
            (s.partition_path, s.file_id, s.creation_instant_time, s.base_file_name, list(s.log_file_names))
            for s in hudi.get_file_slices(opts)
        )
        got = sorted(
            (
                s.partition,
                s.file_id,
                s.base_instant,
                s.base_file.name if s.base_file else None,
                [lf.name for lf in s.log_files],
            )
            for s in table.file_system_view(as_of).latest_file_slices()
        )
        assert got == want, as_of


def test_projection_filters_and_partition_pruning_on_merged_slices(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(TXNS)))
    instants = write_instants(table)
    for as_of in (instants[2], instants[5], None):  # after the delete, after the update+delete, latest
        full = table.read(as_of=as_of).to_pylist()
        cases: list[tuple[list[tuple[str, str, Any]], Any]] = [
            ([("region", "=", "us")], lambda r: r["region"] == "us"),
            ([("txn_type", "=", "reversal")], lambda r: r["txn_type"] == "reversal"),
            ([("amount", ">", 1000)], lambda r: r["amount"] > 1000),
            (
                [("region", "in", ["eu", "apac"]), ("txn_ts", ">=", 1700000000005)],
                lambda r: r["region"] != "us" and r["txn_ts"] >= 1700000000005,
            ),
            ([("_hoodie_record_key", "!=", "TXN-001")], lambda r: r["_hoodie_record_key"] != "TXN-001"),
        ]
        for filters, pred in cases:
            got = table.read(as_of=as_of, columns=["txn_id", "amount", "txn_ts"], filters=filters)
            assert got.column_names == ["txn_id", "amount", "txn_ts"]
            want = [
                {"txn_id": r["txn_id"], "amount": r["amount"], "txn_ts": r["txn_ts"]} for r in full if pred(r)
            ]
            assert canon(got.to_pylist()) == canon(want), (as_of, filters)
    # a filter the base record passes but its update does not (and the other way round)
    latest = table.read(filters=[("txn_type", "=", "debit"), ("region", "=", "us")], columns=["txn_id"])
    assert "TXN-001" not in latest.column("txn_id").to_pylist()
    as_of = table.read(
        as_of=instants[0], filters=[("txn_type", "=", "debit"), ("region", "=", "us")], columns=["txn_id"]
    )
    assert "TXN-001" in as_of.column("txn_id").to_pylist()


def test_filters_agree_with_hudi_reader(tables: TableCache) -> None:
    path = tables.path(TXNS)
    table = HudiTable.open(str(path))
    for version in READER_VERSIONS:
        for as_of in (write_instants(table)[4], None):
            opts = (
                HudiReadOptions().with_filters([("region", "=", "eu")]).with_projection(["txn_id", "amount"])
            )
            if as_of:
                opts = opts.with_as_of_timestamp(as_of)
            want = [r for b in hudi_table(path, version).read(opts) for r in b.to_pylist()]
            got = table.read(as_of=as_of, filters=[("region", "=", "eu")], columns=["txn_id", "amount"])
            assert canon(got.to_pylist()) == canon(want), (version, as_of)


# ========================================================== 2. hand-derived from the .sql


def by_key(rows: Sequence[Mapping[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    out = {r[key]: dict(r) for r in rows}
    assert len(out) == len(rows), "duplicate keys"
    return out


TRIPS_ROWS = {
    # uuid: (ts, rider, driver, fare, city)
    "334e26e9-8355-45cc-97c6-c31daf0df330": (1695159649087, "rider-A", "driver-K", 19.10, "san_francisco"),
    "e96c4396-3fad-413a-a942-4cb36106d721": (1695091554788, "rider-C", "driver-M", 27.70, "san_francisco"),
    "9909a8b1-2d15-4d3d-8ec9-efc48c536a00": (1695046462179, "rider-D", "driver-L", 33.90, "san_francisco"),
    "1dced545-862b-4ceb-8b43-d2a568f6616b": (1695332066204, "rider-E", "driver-O", 93.50, "san_francisco"),
    "e3cf430c-889d-4015-bc98-59bdce1e530c": (1695516137016, "rider-F", "driver-P", 34.15, "sao_paulo"),
    "7a84095f-737f-40bc-b62f-6b69664712d2": (1695376420876, "rider-G", "driver-Q", 43.40, "sao_paulo"),
    "3eeb61f7-c2b0-4636-99bd-5d7a5a1d2c04": (1695173887231, "rider-I", "driver-S", 41.06, "chennai"),
    "c8abbe79-8d89-47ea-b4ce-4d224bae5bfa": (1695115999911, "rider-J", "driver-T", 17.85, "chennai"),
}


def test_trips_delete_block_removes_three_riders(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(TRIPS)))
    insert, delete = write_instants(table)

    def rows(as_of: str | None) -> dict[str, tuple[Any, ...]]:
        got = table.read(as_of=as_of).to_pylist()
        return {r["uuid"]: (r["ts"], r["rider"], r["driver"], r["fare"], r["city"]) for r in got}

    assert rows(insert) == TRIPS_ROWS
    deleted = {"rider-A", "rider-C", "rider-D"}
    want = {k: v for k, v in TRIPS_ROWS.items() if v[1] not in deleted}
    assert rows(delete) == want and rows(None) == want
    # the delete block is the only log file; read-optimized still sees all eight riders
    assert table.read(query_type="read_optimized").num_rows == 8
    for r in table.read().to_pylist():
        assert r["_hoodie_commit_time"] == insert and r["_hoodie_partition_path"] == f"city={r['city']}"


def _people_v6(*ids: int, active: Mapping[int, bool]) -> dict[int, dict[str, Any]]:
    names = {1: "Alice", 2: "Bob", 3: "Carol", 4: "Diana"}
    longs = {1: 1234567890, 2: 9876543210, 3: 1928374650, 4: 987654321}
    ints = {1: 15000, 2: 25000, 3: 35000, 4: 45000}
    decimals = {1: "12345.67890", 2: "67890.12345", 3: "11111.22222", 4: "65432.12345"}
    return {
        i: {
            "name": names[i],
            "isActive": active[i],
            "intField": ints[i],
            "longField": longs[i],
            "decimalField": Decimal(decimals[i]),
        }
        for i in ids
    }


def test_v6_rollback_block_hides_the_rolled_back_update(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(V6_ROLLBACK)))
    first, last = write_instants(table)
    assert [i.action for i in table.instants()] == ["deltacommit", "rollback", "deltacommit"]
    cols = ["name", "isActive", "intField", "longField", "decimalField"]

    def rows(as_of: str | None) -> dict[int, dict[str, Any]]:
        return {r["id"]: {c: r[c] for c in cols} for r in table.read(as_of=as_of).to_pylist()}

    # the second INSERT (Alice inactive, Diana) was rolled back: its log block stays in log .1,
    # its deltacommit is gone from the timeline and the rollback command block in log .2 names
    # it; the third INSERT made Bob active (log .3)
    assert rows(first) == _people_v6(1, 2, 3, active={1: True, 2: False, 3: True})
    assert rows(None) == rows(last) == _people_v6(1, 2, 3, active={1: True, 2: True, 3: True})
    # the rollback block alone hides the block, even if its instant counted as committed
    (fs,) = table.file_system_view().latest_file_slices()
    config = merge_config(table)
    schema = pa.schema([pa.field(c, pa.string()) for c in META_COLUMNS] + list(table.schema() or []))
    merged = read_merged(table.storage, fs, schema, config, BlockFilter(lambda t: True))
    assert {r["id"]: r["isActive"] for r in merged.to_pylist()} == {1: True, 2: True, 3: True}
    no_rollback = read_merged(
        table.storage,
        FileSlice(fs.partition, fs.file_id, fs.base_instant, fs.base_file, fs.log_files[:1]),
        schema,
        config,
        BlockFilter(lambda t: True),
    )
    assert {r["id"]: r["isActive"] for r in no_rollback.to_pylist()} == {1: False, 2: False, 3: True}
    got = by_key(table.read().to_pylist(), "id")
    assert got[2]["_hoodie_commit_time"] == last and got[1]["_hoodie_commit_time"] == first
    kinds = []
    for lf in table.file_system_view().latest_file_slices()[0].log_files:
        data = table.storage.read_bytes(lf.path)
        kinds += [f.block_type for f in scan_frames(BytesSource(data), lf.path).frames]
    assert kinds == [BlockType.PARQUET_DATA, BlockType.COMMAND, BlockType.PARQUET_DATA]


def test_v6_parquet_log_update_and_new_partition(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(V6_NONHIVE)))
    first, _ = write_instants(table)
    cols = ["name", "isActive", "intField", "longField", "decimalField"]

    def rows(as_of: str | None) -> dict[int, dict[str, Any]]:
        return {r["id"]: {c: r[c] for c in cols} for r in table.read(as_of=as_of).to_pylist()}

    assert rows(first) == _people_v6(1, 2, 3, active={1: True, 2: False, 3: True})
    # Alice's update (same longField: the later write wins) lands in a Parquet log block
    assert rows(None) == _people_v6(1, 2, 3, 4, active={1: False, 2: False, 3: True, 4: True})
    parts = {r["id"]: r["_hoodie_partition_path"] for r in table.read().to_pylist()}
    assert parts == {1: "10", 2: "20", 3: "10", 4: "30"}


def test_v9_rolled_back_deltacommit_leaves_no_trace(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(V9_ROLLBACK)))
    first, third = write_instants(table)
    assert [i.action for i in table.instants()] == ["deltacommit", "rollback", "deltacommit"]

    def rows(as_of: str | None) -> list[tuple[str, int, str]]:
        got = table.read(as_of=as_of, columns=["txn_id", "txn_ts", "txn_type"]).to_pylist()
        return sorted((r["txn_id"], r["txn_ts"], r["txn_type"]) for r in got)

    initial = [
        ("TXN-001", 1700000000001, "debit"),
        ("TXN-002", 1700000000002, "debit"),
        ("TXN-003", 1700000000003, "debit"),
    ]
    assert rows(first) == initial
    # the upsert of TXN-001 and TXN-004 is gone; the last INSERT adds a second TXN-002 (an
    # insert, not an upsert, into a new file group)
    assert rows(None) == rows(third) == sorted([*initial, ("TXN-002", 1700200000002, "debit")])


def _txns_states() -> list[dict[str, dict[str, Any]]]:
    def row(
        region: str, acc: str, ts: int, amount: str, cur: str, typ: str, merchant: str | None, fee: str
    ) -> dict[str, Any]:
        return {
            "region": region,
            "account_id": acc,
            "txn_ts": ts,
            "amount": Decimal(amount),
            "currency": cur,
            "txn_type": typ,
            "merchant_name": merchant,
            "fee_amount": Decimal(fee),
        }

    s0 = {
        "TXN-001": row("us", "ACC-A", 1700000000001, "1250.00", "USD", "debit", "Amazon", "0.00"),
        "TXN-002": row("us", "ACC-B", 1700000000002, "89.99", "USD", "debit", "Netflix", "0.00"),
        "TXN-003": row("us", "ACC-A", 1700000000003, "5000.00", "USD", "transfer", None, "25.00"),
        "TXN-004": row("eu", "ACC-C", 1700000000004, "450.75", "EUR", "debit", "Zalando", "0.00"),
        "TXN-005": row("eu", "ACC-D", 1700000000005, "2100.00", "GBP", "credit", "Salary Deposit", "0.00"),
        "TXN-006": row("eu", "ACC-C", 1700000000006, "175.50", "EUR", "debit", "Lufthansa", "3.50"),
        "TXN-007": row(
            "apac", "ACC-E", 1700000000007, "8900.00", "USD", "debit", "Singapore Airlines", "45.00"
        ),
        "TXN-008": row("apac", "ACC-F", 1700000000008, "320.25", "USD", "debit", "Grab", "0.00"),
    }

    def upd(s: dict[str, dict[str, Any]], k: str, **kw: Any) -> dict[str, dict[str, Any]]:
        return {**s, k: {**s[k], **kw}}

    def drop(s: dict[str, dict[str, Any]], k: str) -> dict[str, dict[str, Any]]:
        return {x: v for x, v in s.items() if x != k}

    s1 = upd(s0, "TXN-001", txn_type="reversal", txn_ts=1700100000001)
    s2 = drop(s1, "TXN-002")
    s3 = upd(s2, "TXN-005", amount=Decimal("2500.00"), txn_ts=1700200000005)
    s4 = drop(s3, "TXN-005")
    s5 = upd(s4, "TXN-007", fee_amount=Decimal("75.00"), txn_ts=1700300000007)
    s6 = {
        **s5,
        "TXN-009": row("eu", "ACC-G", 1700400000009, "1500.00", "EUR", "debit", "IKEA", "0.00"),
        "TXN-010": row("eu", "ACC-H", 1700400000010, "2200.00", "EUR", "transfer", None, "15.00"),
    }
    s7 = {
        **{k: v for k, v in s6.items() if v["region"] != "eu"},
        "TXN-011": row("eu", "ACC-I", 1700500000011, "999.99", "EUR", "debit", "MediaMarkt", "0.00"),
        "TXN-012": row("eu", "ACC-J", 1700500000012, "350.00", "GBP", "debit", "British Airways", "7.50"),
    }
    s8 = {
        **s7,
        "TXN-013": row("us", "ACC-K", 1700600000013, "750.00", "USD", "debit", "Best Buy", "0.00"),
        "TXN-014": row("us", "ACC-L", 1700600000014, "125.50", "USD", "debit", "Uber", "0.00"),
    }
    s9 = {
        **s8,
        "TXN-015": row("apac", "ACC-M", 1700700000015, "4500.00", "USD", "debit", "Japan Airlines", "50.00"),
        "TXN-016": row("apac", "ACC-N", 1700700000016, "88.00", "USD", "debit", "GrabFood", "0.00"),
    }
    s12 = {
        **s9,
        "TXN-017": row("us", "ACC-O", 1700800000017, "199.99", "USD", "debit", "Apple Store", "0.00"),
        "TXN-018": row("eu", "ACC-P", 1700800000018, "55.00", "EUR", "debit", "Spotify", "0.00"),
    }
    # ..., compaction and clustering rewrite files, not rows
    return [s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s9, s9, s12]


def test_v9_txns_every_statement(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(TXNS)))
    writes = table.timeline.completed_writes()
    actions = ["deltacommit"] * 7 + [
        "replacecommit",
        "deltacommit",
        "deltacommit",
        "commit",
        "replacecommit",
        "deltacommit",
    ]
    assert [i.action for i in writes] == actions
    states = _txns_states()
    fields = list(states[0]["TXN-001"])
    for inst, want in zip(writes, states, strict=True):
        got = by_key(table.read(as_of=inst.time).to_pylist(), "txn_id")
        assert {k: {c: r[c] for c in fields} for k, r in got.items()} == want, inst
    latest = by_key(table.read().to_pylist(), "txn_id")
    assert {k: {c: r[c] for c in fields} for k, r in latest.items()} == states[-1]
    # the updates came from log files: their commit times are the UPDATE deltacommits'; after
    # compaction the rows keep them
    assert latest["TXN-001"]["_hoodie_commit_time"] == writes[1].time
    assert latest["TXN-007"]["_hoodie_commit_time"] == writes[5].time
    # read-optimized before compaction misses the log updates and deletes
    ro = by_key(table.read(as_of=writes[5].time, query_type="read_optimized").to_pylist(), "txn_id")
    assert ro["TXN-001"]["txn_type"] == "debit" and "TXN-002" in ro and "TXN-005" in ro


def test_v9_insert_overwrite_table_after_compaction(tables: TableCache) -> None:
    table = HudiTable.open(str(tables.path(OVERWRITE)))
    writes = table.timeline.completed_writes()
    assert [i.action for i in writes] == ["deltacommit", "deltacommit", "replacecommit"]
    ids = [sorted(table.read(as_of=w.time, columns=["txn_id"]).column("txn_id").to_pylist()) for w in writes]
    six = [f"TXN-00{i}" for i in range(1, 7)]
    assert ids == [six, sorted([*six, "TXN-007", "TXN-008"]), ["TXN-101", "TXN-102", "TXN-103"]]
    got = by_key(table.read().to_pylist(), "txn_id")
    assert {k: (r["region"], r["amount"]) for k, r in got.items()} == {
        "TXN-101": ("us", Decimal("999.99")),
        "TXN-102": ("eu", Decimal("350.00")),
        "TXN-103": ("apac", Decimal("4500.00")),
    }


# ========================================================== 3. damaged log files


def _log_paths(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob(".*.log.*") if ".hoodie" not in p.relative_to(path).parts)


def test_every_log_file_of_the_tables_decodes(tables: TableCache) -> None:
    kinds: set[BlockType] = set()
    count = 0
    for name in MOR_TABLES:
        for p in _log_paths(tables.path(name)):
            data = p.read_bytes()
            src = BytesSource(data)
            scan = scan_frames(src, str(p))
            assert scan.torn_at is None and scan.frames and scan.frames[-1].end == len(data), p
            for f in scan.frames:
                kinds.add(f.block_type)
                block = decode_block(src, f, str(p))
                assert block.instant_time.isdigit()
                count += 1
    assert kinds == {BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE, BlockType.COMMAND}
    assert count == 10


def _concatenated_logs(tables: TableCache, parquet: bool = True) -> tuple[bytes, list[int]]:
    """One log file made of real blocks of the tables (blocks are self-contained)."""
    data = b""
    ends = []
    for name in MOR_TABLES:
        for p in _log_paths(tables.path(name)):
            raw = p.read_bytes()
            if (
                not parquet
                and scan_frames(BytesSource(raw), str(p)).frames[0].block_type is BlockType.PARQUET_DATA
            ):
                continue
            data += raw
            ends.append(len(data))
    return data, ends


def _check_every_cut(data: bytes, ends: list[int], caplog: pytest.LogCaptureFixture) -> None:
    src = BytesSource(data)
    full = scan_frames(src, "all.log")
    assert [f.end for f in full.frames] == ends
    rows_of = {}
    for f in full.frames:
        block = decode_block(src, f, "all.log")
        rows_of[f.offset] = (block.records.to_pylist() if block.records is not None else None, block.deletes)
    for cut in range(len(data) + 1):
        caplog.clear()
        part = BytesSource(data[:cut])
        scan = scan_frames(part, "all.log")
        whole = [e for e in ends if e <= cut]
        assert [f.end for f in scan.frames] == whole, cut
        torn = cut not in (0, *ends)
        assert (scan.torn_at is not None) == torn and bool(caplog.records) == torn, cut
        if cut in ends or cut % 101 == 0:  # decoding at every cut is slow; the frames are checked above
            for f in scan.frames:
                block = decode_block(part, f, "all.log")
                got = (block.records.to_pylist() if block.records is not None else None, block.deletes)
                assert got == rows_of[f.offset], (cut, f.offset)


def test_real_log_files_cut_at_every_byte(tables: TableCache, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="inlet.core.log.reader")
    # each log file of the tables on its own (Avro, Parquet, delete and rollback blocks) ...
    for name in MOR_TABLES:
        for p in _log_paths(tables.path(name)):
            data = p.read_bytes()
            _check_every_cut(data, [f.end for f in scan_frames(BytesSource(data), str(p)).frames], caplog)
    # ... and the non-Parquet ones as one multi-block log
    data, ends = _concatenated_logs(tables, parquet=False)
    assert len(ends) == 7
    _check_every_cut(data, ends, caplog)


def test_real_log_damaged_magic_or_length_is_corruption(tables: TableCache) -> None:
    data, ends = _concatenated_logs(tables)
    starts = [0, *ends[:-1]]
    for start in starts[:-1]:  # every block that has another block after it
        for pos in [*range(start, start + 6), *range(start + 6, start + 14)]:
            damaged = bytearray(data)
            damaged[pos] ^= 0x10
            with pytest.raises(CorruptFileError, match=f"all.log: corrupt block at byte offset {start}"):
                scan_frames(BytesSource(bytes(damaged)), "all.log")


def _copy(tables: TableCache, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(tables.path(name), dst)
    return dst


def test_table_read_with_a_torn_log_tail(
    tables: TableCache, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _copy(tables, TRIPS, tmp_path)
    (log,) = _log_paths(path)
    data = log.read_bytes()
    caplog.set_level(logging.WARNING, logger="inlet.core.log.reader")
    # the delete block torn (a crashed append): its deletes do not apply, nothing else changes
    log.write_bytes(data[: len(data) // 2])
    assert HudiTable.open(str(path)).read().num_rows == 8
    assert "partial block" in caplog.text and log.name in caplog.text
    # a second, torn copy of the block after the intact one: the intact one applies
    log.write_bytes(data + data[:100])
    assert HudiTable.open(str(path)).read().num_rows == 5


def test_table_read_with_a_corrupt_middle_block(tables: TableCache, tmp_path: Path) -> None:
    path = _copy(tables, TRIPS, tmp_path)
    (log,) = _log_paths(path)
    data = log.read_bytes()
    damaged = bytearray(data + data)
    damaged[9] ^= 0x01  # the first block's length
    log.write_bytes(bytes(damaged))
    with pytest.raises(CorruptFileError, match=f"{log.name}: corrupt block at byte offset 0"):
        HudiTable.open(str(path)).read()
    damaged = bytearray(data + data)
    damaged[len(data) + 2] = ord("X")  # the second block's magic
    log.write_bytes(bytes(damaged))
    with pytest.raises(CorruptFileError, match=f"byte offset {len(data)}"):
        HudiTable.open(str(path)).read()
    # a read-optimized read does not open log files
    assert HudiTable.open(str(path)).read(query_type="read_optimized").num_rows == 8


# ========================================================== 4. round trip with Inlet's MOR writer


def test_round_trip_with_inlet_mor_writes(tmp_path: Path) -> None:
    """Inlet's Merge-on-Read writes, read back by Inlet and hudi-rs (skipped while Inlet cannot write MOR)."""
    import random

    path = tmp_path / "mor"
    table = HudiTable.create(
        str(path),
        name="mor",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
    )
    rng = random.Random(7)
    model: dict[int, dict[str, Any]] = {}
    history: list[tuple[str, dict[int, dict[str, Any]]]] = []
    schema = pa.schema([("id", pa.int64()), ("city", pa.string()), ("ts", pa.int64()), ("name", pa.string())])
    for step in range(1, 9):
        if step % 3 == 0 and model:
            gone = rng.sample(sorted(model), k=min(2, len(model)))
            keys = pa.table({"id": pa.array(gone, pa.int64()), "city": [model[k]["city"] for k in gone]})
            try:
                result = table.delete(keys)
            except UnsupportedError:
                pytest.skip("Inlet cannot delete from MOR tables yet")
            for k in gone:
                del model[k]
        else:
            rows = []
            for k in rng.sample(range(12), k=5):
                if k in model and rng.random() < 0.3:
                    ts = model[k]["ts"] - 1  # a stale update: the stored record stays
                else:
                    ts = step * 100 + rng.randrange(50)
                rows.append(
                    {
                        "id": k,
                        "city": model[k]["city"] if k in model else "abc"[k % 3],
                        "ts": ts,
                        "name": f"s{step}-{k}",
                    }
                )
            try:
                result = table.write(pa.Table.from_pylist(rows, schema=schema), "upsert")
            except UnsupportedError:
                pytest.skip("Inlet cannot write MOR tables yet")
            for r in rows:
                if r["id"] not in model or r["ts"] >= model[r["id"]]["ts"]:
                    model[r["id"]] = r
        history.append((result.instant_time, {k: dict(v) for k, v in model.items()}))
    assert list(path.rglob(".*.log.*")), "the writes produced log files"
    cols = ["id", "city", "ts", "name"]
    for as_of, want in [(None, model), *history]:
        got = table.read(as_of=as_of, columns=cols).to_pylist()
        assert canon(got) == canon(list(want.values())), as_of
        for version in READER_VERSIONS:
            rows, _ = hudi_rows(path, version, as_of)
            assert canon(rows, cols) == canon(list(want.values())), (version, as_of)
