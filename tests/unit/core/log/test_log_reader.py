"""Log files: block framing and decoding, torn tails and corruption, the merge rules of the
Merge-on-Read file group reader, and file slicing by completion time.

Blocks are built by hand here (an independent encoder of the ``#HUDI#`` block layout, not Inlet's
log writer), so the reader is checked against the format, not against itself.
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inlet.core import avro
from inlet.core.config import MergeMode
from inlet.core.errors import CorruptFileError, UnsupportedError
from inlet.core.file_group.reader import BlockFilter, merge_log_records, read_merged
from inlet.core.file_group.view import BaseFile, FileSlice, FileSystemView, LogFile
from inlet.core.log import reader as log_reader
from inlet.core.log.blocks import BlockType, HeaderKey
from inlet.core.log.reader import (
    BytesSource,
    decode_block,
    iter_block_batches,
    iter_block_rows,
    read_delete_records,
    read_log_file,
    scan_frames,
)
from inlet.core.merge.records import MergeConfig, RecordMerger
from inlet.core.storage import FileInfo, Storage
from inlet.core.timeline.active import Timeline

META = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path")
MARKER = "__debezium_unavailable_value"
FILE_ID = "f1-0"
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "t_record",
    "namespace": "hoodie.t",
    "fields": [
        *({"name": c, "type": ["null", "string"], "default": None} for c in META),
        {"name": "_hoodie_file_name", "type": ["null", "string"], "default": None},
        {"name": "id", "type": ["null", "string"], "default": None},
        {"name": "ts", "type": ["null", "long"], "default": None},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "payload", "type": ["null", "bytes"], "default": None},
        {"name": "_hoodie_is_deleted", "type": ["null", "boolean"], "default": None},
    ],
}
SCHEMA_JSON = json.dumps(SCHEMA)
ARROW = pa.schema(
    [pa.field(c, pa.string()) for c in (*META, "_hoodie_file_name")]
    + [
        pa.field("id", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("payload", pa.binary()),
        pa.field("_hoodie_is_deleted", pa.bool_()),
    ]
)


# ------------------------------------------------------------------------ an independent encoder


def _metadata(entries: dict[int, str]) -> bytes:
    out = struct.pack(">i", len(entries))
    for key, value in entries.items():
        raw = value.encode()
        out += struct.pack(">ii", key, len(raw)) + raw
    return out


def frame(
    block_type: int, header: dict[int, str], content: bytes = b"", footer: dict[int, str] | None = None
) -> bytes:
    """One block: magic, length, version 1, type, header, content, footer, total length."""
    body = struct.pack(">ii", 1, block_type) + _metadata(header)
    body += struct.pack(">q", len(content)) + content + _metadata(footer or {})
    total = 6 + 8 + len(body)
    return b"#HUDI#" + struct.pack(">q", len(body) + 8) + body + struct.pack(">q", total)


def _row(instant: str, values: dict[str, Any], seq: int = 0) -> dict[str, Any]:
    row = {c: None for c in ARROW.names}
    row.update(
        {
            "_hoodie_commit_time": instant,
            "_hoodie_commit_seqno": f"{instant}_0_{seq}",
            "_hoodie_record_key": values["id"],
            "_hoodie_partition_path": "",
            "_hoodie_file_name": FILE_ID,
        }
    )
    row.update(values)
    return row


def avro_block(instant: str, rows: Sequence[dict[str, Any]]) -> bytes:
    parsed = fastavro.parse_schema(SCHEMA)
    content = struct.pack(">ii", 3, len(rows))
    for i, values in enumerate(rows):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, _row(instant, values, i))
        content += struct.pack(">i", len(buf.getvalue())) + buf.getvalue()
    return frame(3, {0: instant, 2: SCHEMA_JSON}, content)


def parquet_block(instant: str, rows: Sequence[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([_row(instant, r, i) for i, r in enumerate(rows)], schema=ARROW), buf)
    return frame(5, {0: instant, 2: SCHEMA_JSON}, buf.getvalue())


def _wrap(value: Any) -> Any:
    """An ordering value as Apache Hudi writes it: a one-field wrapper record (0 = Hudi's default)."""
    if value is None:
        return None
    ns = "org.apache.hudi.avro.model."
    if isinstance(value, bool):
        return (ns + "BooleanWrapper", {"value": value})
    if isinstance(value, int):
        return (ns + ("IntWrapper" if value == 0 else "LongWrapper"), {"value": value})
    if isinstance(value, float):
        return (ns + "DoubleWrapper", {"value": value})
    return (ns + "StringWrapper", {"value": value})


def delete_block(instant: str, deletes: Sequence[tuple[str, Any]]) -> bytes:
    buf = io.BytesIO()
    records = [{"recordKey": k, "partitionPath": "", "orderingVal": _wrap(v)} for k, v in deletes]
    fastavro.schemaless_writer(buf, avro.schema("HoodieDeleteRecordList"), {"deleteRecordList": records})
    content = struct.pack(">ii", 3, len(buf.getvalue())) + buf.getvalue()
    return frame(1, {0: instant, 2: SCHEMA_JSON}, content)


def rollback_block(instant: str, target: str) -> bytes:
    return frame(0, {0: instant, 1: target, 3: "0"})


# ------------------------------------------------------------------------ framing and decoding


def test_blocks_decode_with_headers_footers_and_offsets() -> None:
    blocks = [
        avro_block("20240101000000001", [{"id": "a", "ts": 1, "name": "x"}, {"id": "b", "ts": 2}]),
        delete_block("20240101000000002", [("a", 0), ("b", None), ("c", 7), ("d", "z")]),
        parquet_block("20240101000000003", [{"id": "c", "ts": 3, "payload": b"\x00\x01"}]),
        rollback_block("20240101000000004", "20240101000000003"),
        frame(
            3, {0: "20240101000000005", 2: SCHEMA_JSON}, struct.pack(">ii", 3, 0), footer={0: "f", 42: "?"}
        ),
    ]
    data = b"".join(blocks)
    src = BytesSource(data)
    scan = scan_frames(src, "mem.log")
    assert scan.torn_at is None
    ends = [sum(len(b) for b in blocks[: i + 1]) for i in range(len(blocks))]
    assert [f.end for f in scan.frames] == ends
    assert [f.offset for f in scan.frames] == [0, *ends[:-1]]
    assert [f.block_type for f in scan.frames] == [
        BlockType.AVRO_DATA,
        BlockType.DELETE,
        BlockType.PARQUET_DATA,
        BlockType.COMMAND,
        BlockType.AVRO_DATA,
    ]
    assert [f.instant_time for f in scan.frames] == [f"2024010100000000{i}" for i in range(1, 6)]
    assert scan.frames[3].is_rollback and scan.frames[3].target_instant_time == "20240101000000003"
    assert scan.frames[4].footer == {HeaderKey.INSTANT_TIME: "f"}  # unknown key 42 skipped
    avro = decode_block(src, scan.frames[0], "mem.log")
    assert avro.records is not None
    assert avro.records.select(["id", "ts", "name"]).to_pylist() == [
        {"id": "a", "ts": 1, "name": "x"},
        {"id": "b", "ts": 2, "name": None},
    ]
    assert avro.records.column_names == ARROW.names
    deletes = read_delete_records(src, scan.frames[1], "mem.log")
    assert [(d.record_key, d.ordering_value) for d in deletes] == [
        ("a", 0),
        ("b", None),
        ("c", 7),
        ("d", "z"),
    ]
    rows = [r for part in iter_block_rows(src, scan.frames[2], "mem.log") for r in part]
    assert [(r["id"], r["payload"]) for r in rows] == [("c", b"\x00\x01")]
    assert decode_block(src, scan.frames[4], "mem.log").records.num_rows == 0  # type: ignore[union-attr]


def test_read_log_file_from_storage(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path))
    storage.write_bytes(
        "p/.f1-0_20240101000000001.log.1_0-0-0", avro_block("20240101000000001", [{"id": "a"}])
    )
    (block,) = read_log_file(storage, "p/.f1-0_20240101000000001.log.1_0-0-0")
    assert block.instant_time == "20240101000000001"
    assert block.records is not None and block.records.column("id").to_pylist() == ["a"]


def _multi_block_file() -> tuple[bytes, list[int]]:
    blocks = [
        avro_block("20240101000000001", [{"id": f"k{i}", "ts": i, "name": "n" * i} for i in range(3)]),
        delete_block("20240101000000002", [("k1", 0), ("k2", 5)]),
        rollback_block("20240101000000003", "20240101000000009"),
        parquet_block("20240101000000004", [{"id": "k9", "ts": 9}]),
        avro_block("20240101000000005", [{"id": "k0", "ts": 10, "payload": b"#HUDI#"}]),
    ]
    ends = [sum(len(b) for b in blocks[: i + 1]) for i in range(len(blocks))]
    return b"".join(blocks), ends


def _records(block: Any) -> list[dict[str, Any]] | None:
    return block.records.to_pylist() if block.records is not None else None


def _decoded(src: BytesSource, scan: Any) -> list[Any]:
    out = []
    for f in scan.frames:
        b = decode_block(src, f, "x.log")
        out.append((f.offset, _records(b), b.deletes))
    return out


def test_a_log_cut_at_every_byte_reads_its_whole_blocks(caplog: pytest.LogCaptureFixture) -> None:
    data, ends = _multi_block_file()
    full_src = BytesSource(data)
    full_scan = scan_frames(full_src, "x.log")
    full = _decoded(full_src, full_scan)
    caplog.set_level(logging.WARNING, logger="inlet.core.log.reader")
    for cut in range(len(data) + 1):
        caplog.clear()
        src = BytesSource(data[:cut])
        scan = scan_frames(src, "x.log")
        whole = [e for e in ends if e <= cut]
        assert [f.end for f in scan.frames] == whole, cut
        torn = cut not in (0, *ends)
        assert (scan.torn_at is not None) == torn, cut
        assert bool(caplog.records) == torn, cut
        if torn:
            assert scan.torn_at == (whole[-1] if whole else 0)
            assert "partial block" in caplog.text
        # never wrong rows: the blocks read decode exactly as in the intact file (the ones before
        # the last were checked at earlier cuts: their bytes do not change)
        assert [(f.offset, f.header) for f in scan.frames] == [
            (f.offset, f.header) for f in full_scan.frames[: len(whole)]
        ]
        if scan.frames:
            last = scan.frames[-1]
            got = decode_block(src, last, "x.log")
            assert (last.offset, _records(got), got.deletes) == full[len(whole) - 1], cut


@pytest.mark.parametrize("field", ["magic", "length"])
def test_a_damaged_middle_block_is_reported_not_skipped(field: str) -> None:
    data, ends = _multi_block_file()
    starts = [0, *ends[:-1]]
    for block, start in enumerate(starts):
        positions = range(start, start + 6) if field == "magic" else range(start + 6, start + 14)
        for pos in positions:
            for flip in (0x01, 0x80, 0xFF):
                damaged = bytearray(data)
                damaged[pos] ^= flip
                with pytest.raises(CorruptFileError) as err:
                    scan_frames(BytesSource(bytes(damaged)), "dir/x.log")
                msg = str(err.value)
                assert "dir/x.log" in msg and f"byte offset {start}" in msg, (block, pos, flip, msg)


def test_garbage_after_the_last_block_is_corruption() -> None:
    data, _ = _multi_block_file()
    with pytest.raises(CorruptFileError, match=f"byte offset {len(data)}"):
        scan_frames(BytesSource(data + b"\x00" * 40), "x.log")
    # a partial magic at the end is a torn write, not corruption
    scan = scan_frames(BytesSource(data + b"#HU"), "x.log")
    assert scan.torn_at == len(data) and len(scan.frames) == 5


def test_damaged_content_is_reported_on_decode() -> None:
    good = avro_block("20240101000000001", [{"id": "a", "ts": 1}, {"id": "b", "ts": 2}])
    src = BytesSource(good)
    f = scan_frames(src, "x.log").frames[0]
    content = bytearray(good[f.content_offset : f.content_offset + f.content_length])
    # the record count says 3 but the block holds 2 records
    bad = bytearray(good)
    bad[f.content_offset + 4 : f.content_offset + 8] = struct.pack(">i", 3)
    with pytest.raises(CorruptFileError, match="byte offset 0"):
        list(iter_block_rows(BytesSource(bytes(bad)), f, "x.log"))
    # a record length pointing past the content
    bad = bytearray(good)
    bad[f.content_offset + 8 : f.content_offset + 12] = struct.pack(">i", 10_000)
    with pytest.raises(CorruptFileError):
        list(iter_block_rows(BytesSource(bytes(bad)), f, "x.log"))
    # an unsupported block version is not mistaken for corruption
    content[0:4] = struct.pack(">i", 2)
    bad = bytearray(good)
    bad[f.content_offset : f.content_offset + f.content_length] = content
    with pytest.raises(UnsupportedError, match="block version 2"):
        list(iter_block_rows(BytesSource(bytes(bad)), f, "x.log"))
    # a Parquet block whose content is not Parquet
    broken = frame(5, {0: "20240101000000001"}, b"PAR1 not really parquet PAR1")
    pf = scan_frames(BytesSource(broken), "x.log").frames[0]
    with pytest.raises(CorruptFileError, match="PARQUET_DATA"):
        list(iter_block_rows(BytesSource(broken), pf, "x.log"))


# ------------------------------------------------------------------------ merge rules


class Slice:
    """A file slice built by hand: an optional base file and log files, each one block list."""

    def __init__(self, tmp_path: Path) -> None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.storage = Storage(str(tmp_path))
        self.base: BaseFile | None = None
        self.logs: list[LogFile] = []

    def base_file(self, instant: str, rows: Sequence[dict[str, Any]]) -> Slice:
        name = f"{FILE_ID}_0-0-0_{instant}.parquet"
        table = pa.Table.from_pylist([_row(instant, r, i) for i, r in enumerate(rows)], schema=ARROW)
        pq.write_table(table, self.storage.full(name))
        self.base = BaseFile.parse(name)
        return self

    def log(self, *blocks: bytes, instant: str | None = None) -> Slice:
        version = len(self.logs) + 1
        name = f".{FILE_ID}_{instant or '20240101000000000'}.log.{version}_0-0-0"
        self.storage.write_bytes(name, b"".join(blocks))
        lf = LogFile.parse(name)
        assert lf is not None
        self.logs.append(lf)
        return self

    def file_slice(self) -> FileSlice:
        return FileSlice("", FILE_ID, self.base.instant_time if self.base else "0", self.base, self.logs)

    def read(
        self,
        mode: MergeMode = MergeMode.EVENT_TIME_ORDERING,
        as_of: str | None = None,
        committed: Callable[[str], bool] = lambda t: True,
        marker: str | None = MARKER,
    ) -> dict[str, dict[str, Any]]:
        config = MergeConfig(mode, "ts", marker)
        got = read_merged(self.storage, self.file_slice(), ARROW, config, BlockFilter(committed, as_of))
        rows = got.to_pylist()
        out = {r["id"]: r for r in rows}
        assert len(out) == len(rows), "one row per key"
        return out


T1, T2, T3, T4, T5 = (f"2024010100000000{i}" for i in range(1, 6))
EVENT, COMMIT = MergeMode.EVENT_TIME_ORDERING, MergeMode.COMMIT_TIME_ORDERING


def names(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {k: r["name"] for k, r in sorted(rows.items())}


def test_event_time_ordering_ties_and_log_order(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(
        T1, [{"id": "a", "ts": 5, "name": "base"}, {"id": "b", "ts": 5, "name": "base"}]
    )
    s.log(
        avro_block(T2, [{"id": "a", "ts": 4, "name": "older"}, {"id": "b", "ts": 5, "name": "tie"}]),
        avro_block(T3, [{"id": "c", "ts": 1, "name": "c1"}, {"id": "c", "ts": 1, "name": "c2"}]),
    )
    s.log(avro_block(T4, [{"id": "c", "ts": 0, "name": "c-lower"}, {"id": "d", "ts": 2, "name": "d"}]))
    # a: lower ordering loses to the base; b: a tie goes to the later write (the log);
    # c: equal ordering within a block -> later record; a later lower value loses; d: insert
    assert names(s.read()) == {"a": "base", "b": "tie", "c": "c2", "d": "d"}
    # commit time ordering: the latest write wins whatever its ordering value
    assert names(s.read(COMMIT)) == {"a": "older", "b": "tie", "c": "c-lower", "d": "d"}
    merged = s.read()
    assert merged["b"]["_hoodie_commit_time"] == T2 and merged["a"]["_hoodie_commit_time"] == T1


def test_null_ordering_values_lose_to_any_value(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(
        T1, [{"id": "a", "ts": 1, "name": "base"}, {"id": "b", "ts": None, "name": "base"}]
    )
    s.log(
        avro_block(T2, [{"id": "a", "ts": None, "name": "null"}, {"id": "b", "ts": None, "name": "null-tie"}])
    )
    assert names(s.read()) == {"a": "base", "b": "null-tie"}


def test_deletes_with_and_without_ordering_values(tmp_path: Path) -> None:
    base = [{"id": k, "ts": 10, "name": "base"} for k in "abcdefgh"]
    s = Slice(tmp_path).base_file(T1, base)
    s.log(
        delete_block(
            T2,
            [
                ("a", 0),  # Hudi's default ordering value: always wins
                ("b", None),  # absent ordering value: always wins
                ("c", 9),  # lower than the stored record: the record stays
                ("d", 10),  # equal: the delete (the later write) wins
                ("e", 11),  # higher: deleted
                ("f", "zz"),  # a value of another kind: the delete wins, as in Hudi
                ("g", 0),
                ("h", 11),
            ],
        ),
        # after deletes: g with any ordering comes back (the default delete yields to the next
        # write); h with a value lower than the delete's stays deleted
        avro_block(T3, [{"id": "g", "ts": 1, "name": "back"}, {"id": "h", "ts": 10, "name": "stale"}]),
    )
    got = s.read()
    assert names(got) == {"c": "base", "g": "back"}
    # commit time ordering ignores ordering values: every delete wins, the later inserts too
    assert names(s.read(COMMIT)) == {"g": "back", "h": "stale"}


def test_deletes_of_log_records_and_reinserts(tmp_path: Path) -> None:
    s = Slice(tmp_path)  # a log-only slice
    s.log(
        avro_block(T1, [{"id": "a", "ts": 5, "name": "a"}, {"id": "b", "ts": 5, "name": "b"}]),
        delete_block(T2, [("a", 3), ("b", 0), ("zz", 1)]),
        avro_block(T3, [{"id": "b", "ts": 1, "name": "b-again"}]),
    )
    assert names(s.read()) == {"a": "a", "b": "b-again"}


def test_is_deleted_records_carry_their_ordering_value(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(
        T1, [{"id": "a", "ts": 5, "name": "base"}, {"id": "b", "ts": 5, "name": "base"}]
    )
    s.log(
        avro_block(
            T2,
            [
                {"id": "a", "ts": 4, "_hoodie_is_deleted": True},  # older than the base: ignored
                {"id": "b", "ts": 6, "_hoodie_is_deleted": True},
                {"id": "c", "ts": 1, "name": "c"},
                {"id": "c", "ts": 2, "_hoodie_is_deleted": True},
            ],
        )
    )
    assert names(s.read()) == {"a": "base"}
    # the flag counts even when the read does not ask for the column
    narrow = pa.schema([f for f in ARROW if f.name != "_hoodie_is_deleted"])
    got = read_merged(
        s.storage, s.file_slice(), narrow, MergeConfig(EVENT, "ts"), BlockFilter(lambda t: True)
    )
    assert got.column("id").to_pylist() == ["a"]


def test_debezium_unavailable_placeholder_keeps_the_previous_value(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(
        T1,
        [
            {"id": "a", "ts": 1, "name": "big text", "payload": b"big blob"},
            {"id": "b", "ts": 1, "name": "b-text", "payload": b"b-blob"},
        ],
    )
    s.log(
        avro_block(
            T2,
            [
                {"id": "a", "ts": 2, "name": MARKER, "payload": MARKER.encode()},  # TOAST unchanged
                {"id": "b", "ts": 2, "name": "new", "payload": MARKER.encode()},
                {"id": "c", "ts": 1, "name": MARKER},  # an insert: nothing to keep
            ],
        ),
        avro_block(
            T3, [{"id": "b", "ts": 3, "name": MARKER, "payload": MARKER.encode()}]
        ),  # over a log record
    )
    got = s.read()
    assert (got["a"]["name"], got["a"]["payload"], got["a"]["ts"]) == ("big text", b"big blob", 2)
    assert (got["b"]["name"], got["b"]["payload"], got["b"]["ts"]) == ("new", b"b-blob", 3)
    assert got["c"]["name"] == MARKER
    assert s.read(COMMIT)["a"]["name"] == "big text"
    # a losing update with placeholders does not touch the winner
    s2 = Slice(tmp_path / "s2").base_file(T1, [{"id": "a", "ts": 9, "name": "kept"}])
    s2.log(avro_block(T2, [{"id": "a", "ts": 1, "name": MARKER}]))
    assert s2.read()["a"]["name"] == "kept"
    # without a configured marker the value is just a string
    assert s.read(marker=None)["a"]["name"] == MARKER


def test_rollback_blocks_hide_their_target_instant(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(T1, [{"id": "a", "ts": 1, "name": "base"}])
    s.log(avro_block(T2, [{"id": "a", "ts": 2, "name": "rolled-back"}, {"id": "x", "ts": 1, "name": "x"}]))
    s.log(avro_block(T3, [{"id": "b", "ts": 1, "name": "b"}]), rollback_block(T4, T2))
    assert names(s.read()) == {"a": "base", "b": "b"}
    # as of before the rollback instant the rollback does not apply yet
    assert names(s.read(as_of=T3)) == {"a": "rolled-back", "b": "b", "x": "x"}
    assert names(s.read(as_of=T2)) == {"a": "rolled-back", "x": "x"}


def test_uncommitted_and_later_blocks_do_not_count(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(T1, [{"id": "a", "ts": 1, "name": "base"}])
    s.log(
        avro_block(T2, [{"id": "a", "ts": 2, "name": "t2"}]),
        avro_block(T3, [{"id": "a", "ts": 3, "name": "failed"}]),
        delete_block(T4, [("a", 0)]),
    )
    committed = {T1, T2, T4}.__contains__
    assert names(s.read(committed=committed)) == {}
    assert names(s.read(committed=committed, as_of=T3)) == {"a": "t2"}
    assert names(s.read(committed=committed, as_of=T1)) == {"a": "base"}


def test_log_compacted_blocks_supersede_their_sources(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(T1, [{"id": "a", "ts": 1, "name": "base"}])
    s.log(avro_block(T2, [{"id": "a", "ts": 2, "name": "t2"}]))
    s.log(avro_block(T3, [{"id": "a", "ts": 3, "name": "t3"}, {"id": "b", "ts": 1, "name": "b"}]))
    compacted = frame(
        3, {0: T4, 2: SCHEMA_JSON, 4: f"{T2},{T3}"}, _avro_content(T4, [{"id": "a", "ts": 3, "name": "t3"}])
    )
    s.log(compacted)
    # the compacted block replaces T2 and T3 (so "b", which it does not hold, is gone too)
    assert names(s.read()) == {"a": "t3"}
    assert names(s.read(as_of=T3)) == {"a": "t3", "b": "b"}


def _avro_content(instant: str, rows: Sequence[dict[str, Any]]) -> bytes:
    block = avro_block(instant, rows)
    f = scan_frames(BytesSource(block), "x").frames[0]
    return block[f.content_offset : f.content_offset + f.content_length]


def test_parquet_blocks_and_duplicate_base_keys(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(
        T1, [{"id": "a", "ts": 1, "name": "first"}, {"id": "a", "ts": 1, "name": "dup"}]
    )
    s.log(parquet_block(T2, [{"id": "a", "ts": 2, "name": "log"}, {"id": "b", "ts": 1, "name": "b"}]))
    got = read_merged(
        s.storage, s.file_slice(), ARROW, MergeConfig(EVENT, "ts"), BlockFilter(lambda t: True)
    ).to_pylist()
    # Hudi's reader merges a key's log record into the first base record; a duplicate stays
    assert sorted((r["id"], r["name"]) for r in got) == [("a", "dup"), ("a", "log"), ("b", "b")]


def test_merge_state_holds_only_keys_written_by_the_logs(tmp_path: Path) -> None:
    s = Slice(tmp_path).base_file(T1, [{"id": f"k{i}", "ts": 1, "name": "base"} for i in range(1000)])
    s.log(avro_block(T2, [{"id": "k1", "ts": 2, "name": "u"}, {"id": "new", "ts": 1, "name": "n"}]))
    s.log(delete_block(T3, [("k2", 0)]))
    merger = merge_log_records(
        s.storage,
        [lf.path for lf in s.logs],
        MergeConfig(EVENT, "ts"),
        BlockFilter(lambda t: True),
        ARROW.names,
    )
    assert sorted(merger.entries) == ["k1", "k2", "new"]
    got = read_merged(
        s.storage, s.file_slice(), ARROW, MergeConfig(EVENT, "ts"), BlockFilter(lambda t: True), batch_rows=64
    )
    assert got.num_rows == 1000  # 1000 - k2 + new
    rows = {r["id"]: r["name"] for r in got.to_pylist()}
    assert rows["k1"] == "u" and rows["new"] == "n" and "k2" not in rows and rows["k999"] == "base"


def test_record_merger_rules_directly() -> None:
    m = RecordMerger(MergeConfig(EVENT, "ts"))
    m.add_record("a", {"ts": 5, "name": "x"})
    m.add_delete("a", 4)  # stale delete
    assert m.entries["a"].row == {"ts": 5, "name": "x"}
    m.add_delete("a", 5)
    assert m.entries["a"].is_delete
    m.add_record("a", {"ts": 4, "name": "older"})  # loses to the delete's ordering value
    assert m.entries["a"].is_delete
    m.add_delete("b", 0)
    m.add_delete("b", 100)  # an always-winning delete is already there
    assert m.entries["b"].commit_time_delete
    m.add_record("b", {"ts": -1, "name": "back"})
    assert m.merge_base("b", {"ts": 99, "name": "base"}) == {"ts": -1, "name": "back"}
    assert m.merge_base("a", {"ts": 6, "name": "base"}) == {"ts": 6, "name": "base"}


# ------------------------------------------------------------------------ slicing


def _timeline(
    tmp_path: Path, completed: dict[str, str], layout: int = 2, pending: Sequence[str] = ()
) -> Timeline:
    storage = Storage(str(tmp_path))
    tdir = ".hoodie/timeline" if layout >= 2 else ".hoodie"
    for req, done in completed.items():
        action = "commit" if req.endswith("c") else "deltacommit"
        name = (
            f"{req[:-1] if req.endswith('c') else req}_{done}.{action}" if layout >= 2 else f"{req}.{action}"
        )
        storage.write_bytes(f"{tdir}/{name}", b"")
    for req in pending:
        storage.write_bytes(f"{tdir}/{req}.deltacommit.requested", b"")
    return Timeline.load(storage, layout)


def t(n: int) -> str:
    return f"20240101{n:09d}"


def _files(*names: str) -> list[FileInfo]:
    return [FileInfo(f"p/{n}", 1, None) for n in names]


def base(fid: str, n: int) -> str:
    return f"{fid}_0-0-0_{t(n)}.parquet"


def logf(fid: str, n: int, version: int = 1, token: str = "0-0-0") -> str:
    return f".{fid}_{t(n)}.log.{version}_{token}"


def _layout(view: FileSystemView) -> dict[str, list[tuple[str, str | None, list[str]]]]:
    return {
        g.file_id: [
            (s.base_instant, s.base_file.name if s.base_file else None, [lf.name for lf in s.log_files])
            for s in g.slices
        ]
        for g in view.file_groups()
    }


def test_logs_join_the_slice_of_their_completion_time(tmp_path: Path) -> None:
    # base at 100; deltacommits 200 (done 210), 260 (done 290), 250 (done 320, after the
    # compaction at 300 was requested); compaction 300 done 350; 400 pending
    tl = _timeline(
        tmp_path,
        {t(100) + "c": t(101), t(200): t(210), t(250): t(320), t(260): t(290), t(300) + "c": t(350)},
        pending=[t(400)],
    )
    files = _files(
        base("g", 100),
        base("g", 300),
        logf("g", 200),
        logf("g", 250),
        logf("g", 260),
        logf("g", 400),
        base("g", 500),  # written by an instant that is not on the timeline (failed)
    )
    view = FileSystemView(tl, files=files)
    assert _layout(view) == {
        "g": [
            (t(100), base("g", 100), [logf("g", 200), logf("g", 260)]),
            (t(300), base("g", 300), [logf("g", 250)]),
        ]
    }
    (latest,) = view.latest_file_slices()
    assert latest.base_instant == t(300) and [lf.name for lf in latest.log_files] == [logf("g", 250)]
    # as of 280: the slice of 100 (its blocks are then filtered by instant)
    (at,) = FileSystemView(tl, as_of=t(280), files=files).latest_file_slices()
    assert at.base_instant == t(100) and [lf.name for lf in at.log_files] == [logf("g", 200), logf("g", 260)]
    assert FileSystemView(tl, as_of=t(99), files=files).latest_file_slices() == []
    assert view.is_committed(t(250)) and not view.is_committed(t(400))
    assert not FileSystemView(tl, as_of=t(240), files=files).is_visible(t(250))


def test_log_only_file_groups_and_log_order(tmp_path: Path) -> None:
    tl = _timeline(tmp_path, {t(500): t(510), t(600): t(610)})
    files = _files(
        logf("h", 600), logf("h", 500, 2, "1-0-0"), logf("h", 500, 2, "0-0-0"), logf("h", 500, 1, "9-9-9")
    )
    view = FileSystemView(tl, files=files)
    assert _layout(view) == {
        "h": [
            (
                t(500),
                None,
                [
                    logf("h", 500, 1, "9-9-9"),
                    logf("h", 500, 2, "0-0-0"),
                    logf("h", 500, 2, "1-0-0"),
                    logf("h", 600),
                ],
            )
        ]
    }
    assert view.latest_base_files() == []
    assert FileSystemView(tl, as_of=t(450), files=files).file_groups() == []


def test_layout_1_logs_name_their_base_instant(tmp_path: Path) -> None:
    tl = _timeline(tmp_path, {t(100): t(100), t(200): t(200), t(300): t(300)}, layout=1)
    files = _files(base("g", 100), base("g", 300), logf("g", 100), logf("g", 100, 2), logf("g", 300))
    assert _layout(FileSystemView(tl, files=files)) == {
        "g": [
            (t(100), base("g", 100), [logf("g", 100), logf("g", 100, 2)]),
            (t(300), base("g", 300), [logf("g", 300)]),
        ]
    }


def test_pending_compaction_leaves_new_logs_on_the_previous_slice(tmp_path: Path) -> None:
    # compaction 300 requested but not completed: its (partial) base file is invisible, and a
    # deltacommit completed meanwhile stays on the slice of 100 (Hudi merges the two slices)
    tl = _timeline(tmp_path, {t(100) + "c": t(101), t(350): t(360)}, pending=[t(300)])
    files = _files(base("g", 100), base("g", 300), logf("g", 350))
    assert _layout(FileSystemView(tl, files=files)) == {"g": [(t(100), base("g", 100), [logf("g", 350)])]}


def test_avro_named_types_resolve_by_full_name() -> None:
    from inlet.core.log.reader import avro_to_arrow_schema

    schema = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {
                "name": "a",
                "type": {
                    "type": "fixed",
                    "name": "fixed",
                    "namespace": "ns.a",
                    "size": 3,
                    "logicalType": "decimal",
                    "precision": 5,
                    "scale": 2,
                },
            },
            {
                "name": "b",
                "type": {
                    "type": "fixed",
                    "name": "fixed",
                    "namespace": "ns.b",
                    "size": 5,
                    "logicalType": "decimal",
                    "precision": 10,
                    "scale": 1,
                },
            },
            {"name": "c", "type": ["null", "ns.b.fixed"]},
            {
                "name": "d",
                "type": {"type": "record", "name": "In", "fields": [{"name": "x", "type": ["null", "int"]}]},
            },
            {"name": "e", "type": {"type": "array", "items": "In"}},
            {
                "name": "f",
                "type": {
                    "type": "map",
                    "values": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
                },
            },
        ],
    }
    got = avro_to_arrow_schema(json.dumps(schema))
    assert [str(f.type) for f in got] == [
        "decimal128(5, 2)",
        "decimal128(10, 1)",
        "decimal128(10, 1)",
        "struct<x: int32>",
        "list<item: struct<x: int32>>",
        "map<string, timestamp[ms, tz=UTC]>",
    ]


FLAT_SCHEMA = {
    "type": "record",
    "name": "flat",
    "fields": [
        {"name": "_hoodie_record_key", "type": ["null", "string"], "default": None},
        {"name": "b", "type": ["null", "boolean"], "default": None},
        {"name": "i", "type": ["null", "int"], "default": None},
        {"name": "l", "type": "long"},
        {"name": "f", "type": ["null", "float"], "default": None},
        {"name": "d", "type": ["null", "double"], "default": None},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": ["null", "bytes"], "default": None},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {
            "name": "us",
            "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            "default": None,
        },
        {
            "name": "ms",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
    ],
}


def _flat_block(schema: dict[str, Any], rows: Sequence[dict[str, Any]]) -> bytes:
    parsed = fastavro.parse_schema(schema)
    content = struct.pack(">ii", 3, len(rows))
    for values in rows:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, values)
        content += struct.pack(">i", len(buf.getvalue())) + buf.getvalue()
    return frame(3, {0: "20240101000000001", 2: json.dumps(schema)}, content)


def test_avro_blocks_of_flat_schemas_decode_columnar_exactly_as_record_by_record() -> None:
    import datetime as dt

    utc = dt.UTC
    rows = [
        {
            "_hoodie_record_key": f"k{i}",
            "b": [True, False, None][i % 3],
            "i": None if i % 4 == 0 else -(2**31) + i,
            "l": 2**62 - i,
            "f": None if i % 5 == 0 else i / 4,
            "d": None if i % 6 == 0 else -i * 1e300,
            "s": None if i % 7 == 0 else "ünïcødé 𝄞 " * (i % 3),
            "raw": None if i % 2 else bytes(range(i % 256)),
            "day": None if i % 3 == 0 else dt.date(1969, 12, 31) + dt.timedelta(days=i),
            "us": None
            if i % 4 == 1
            else dt.datetime(1900, 1, 1, tzinfo=utc) + dt.timedelta(microseconds=7 * i),
            "ms": None if i % 4 == 2 else dt.datetime(2262, 1, 1, tzinfo=utc) - dt.timedelta(milliseconds=i),
        }
        for i in range(300)
    ]
    data = _flat_block(FLAT_SCHEMA, rows)
    f = scan_frames(BytesSource(data), "x.log").frames[0]
    columnar = list(iter_block_batches(BytesSource(data), f, "x.log", chunk_rows=128))
    assert [type(p) for p in columnar] == [pa.Table] * 3  # 128 + 128 + 44 rows
    got = pa.concat_tables(columnar)
    want = pa.Table.from_pylist(
        [
            r
            for part in log_reader._iter_avro_rows(
                data[f.content_offset : f.content_offset + f.content_length], f, "x.log", 1000
            )
            for r in part
        ],
        schema=log_reader.avro_to_arrow_schema(json.dumps(FLAT_SCHEMA)),
    )
    assert got.schema == want.schema
    assert got.equals(want)
    assert got.column("us").to_pylist()[:2] == [rows[0]["us"], None]


def test_avro_blocks_of_other_schemas_decode_record_by_record() -> None:
    schema = {
        "type": "record",
        "name": "nested",
        "fields": [
            {"name": "_hoodie_record_key", "type": "string"},
            {"name": "tags", "type": ["null", {"type": "map", "values": "long"}], "default": None},
        ],
    }
    data = _flat_block(
        schema, [{"_hoodie_record_key": "a", "tags": {"x": 1}}, {"_hoodie_record_key": "b", "tags": None}]
    )
    f = scan_frames(BytesSource(data), "x.log").frames[0]
    parts = list(iter_block_batches(BytesSource(data), f, "x.log"))
    assert parts == [
        [{"_hoodie_record_key": "a", "tags": {"x": 1}}, {"_hoodie_record_key": "b", "tags": None}]
    ]
