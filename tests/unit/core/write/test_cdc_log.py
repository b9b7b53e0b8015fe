"""CDC log files (``hoodie.table.cdc.enabled``): what Inlet writes matches Apache Hudi's
``HoodieCDCLogger`` (names, CDC_DATA blocks, ``HoodieCDCUtils`` schemas, ``cdcStats``), the CDC query
over them equals a model of the writes and the same query over a table without CDC files
(inference), and failed writes, rollbacks and cleans leave no CDC file behind."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random
import re
import struct
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from support.tables import run_python

from inlet.core import HudiTable, faults
from inlet.core.errors import InvalidConfigError, InvalidInputError
from inlet.core.log.blocks import BlockType, HeaderKey
from inlet.core.log.reader import read_cdc_rows, scan_log_file
from inlet.core.schema import to_avro_schema
from inlet.core.table.properties import read_properties
from inlet.core.write import cdc_log
from inlet.core.write import files as write_files

MODES = ["OP_KEY_ONLY", "DATA_BEFORE", "DATA_BEFORE_AFTER"]
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
COLS = SCHEMA.names
Row = dict[str, Any]
# Hudi's log file name pattern (FSUtils.LOG_FILE_PATTERN, v8 names) with HoodieCDCUtils' ".cdc" suffix
CDC_NAME = re.compile(
    r"^\.(?P<file_id>.+)_(?P<instant>\d{17})\.log\.(?P<version>\d+)_(?P<token>\d+-\d+-\d+)\.cdc$"
)


def _create(path: str, table_type: str, mode: str | None) -> HudiTable:
    return HudiTable.create(
        path, "t", record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
        cdc=mode is not None, cdc_logging_mode=mode,
    )  # fmt: skip


def _files(root: str, suffix: str) -> set[str]:
    return {str(p.relative_to(root)) for p in Path(root).rglob(f"*{suffix}") if ".hoodie" not in p.parts}


def _ops(seed: int) -> list[tuple[str, list[Row]]]:
    """A random sequence of upserts (inserts and updates) and deletes over 12 keys in 3 partitions."""
    rng = random.Random(seed)
    live: set[int] = set()
    out: list[tuple[str, list[Row]]] = []
    for step in range(1, 11):
        roll = rng.random()
        if live and roll < 0.3:
            gone = rng.sample(sorted(live), k=min(len(live), rng.randint(1, 3)))
            live -= set(gone)
            out.append(("delete", [{"id": i, "part": f"p{i % 3}"} for i in gone]))
        elif roll > 0.8 and len(live) < 10:  # insert: new keys only (appended to small files as is)
            ids = rng.sample(sorted(set(range(12)) - live), k=rng.randint(1, 2))
            live |= set(ids)
            out.append(
                ("insert", [{"id": i, "part": f"p{i % 3}", "ts": step, "v": rng.randint(0, 2)} for i in ids])
            )
        else:
            ids = rng.sample(range(12), k=rng.randint(1, 5))
            live |= set(ids)
            out.append(
                ("upsert", [{"id": i, "part": f"p{i % 3}", "ts": step, "v": rng.randint(0, 2)} for i in ids])
            )
    return out


def _model(ops: list[tuple[str, list[Row]]]) -> list[list[tuple[str, Row | None, Row | None]]]:
    """Per commit, its changes by record key: (op, before image, after image), from the states."""
    state: dict[int, Row] = {}
    out = []
    for kind, rows in ops:
        changes = []
        for r in rows:
            if kind == "delete":
                changes.append((str(r["id"]), "d", state.pop(r["id"]), None))
            else:
                changes.append((str(r["id"]), "u" if r["id"] in state else "i", state.get(r["id"]), r))
                state[r["id"]] = r
        out.append([(op, b, a) for _, op, b, a in sorted(changes, key=lambda c: c[0])])
    return out


def _apply(t: HudiTable, ops: list[tuple[str, list[Row]]]) -> list[Any]:
    done = []
    for kind, rows in ops:
        if kind == "delete":
            keys = pa.table(
                {"id": pa.array([r["id"] for r in rows], pa.int64()), "part": [r["part"] for r in rows]}
            )
            done.append(t.delete(keys))
        else:
            done.append(t.write(pa.Table.from_pylist(rows, schema=SCHEMA), kind))
    return done


def _query(t: HudiTable, begin: str, end: str, instants: dict[str, int]) -> list[tuple]:
    got = t.read_changes(begin, end, columns=COLS, format="cdc").table
    return [
        (
            instants[r["ts_ms"]],
            r["op"],
            json.loads(r["before"]) if r["before"] else None,
            json.loads(r["after"]) if r["after"] else None,
        )
        for r in got.to_pylist()
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_cdc_log_query_equals_model_and_inference(tmp_path: Path, table_type: str, mode: str) -> None:
    ops = _ops(11)
    assert {k for k, _ in ops} == {"upsert", "insert", "delete"}
    model = _model(ops)
    with_cdc = _create(str(tmp_path / "cdc"), table_type, mode)
    without = _create(str(tmp_path / "plain"), table_type, None)
    done_cdc, done_plain = _apply(with_cdc, ops), _apply(without, ops)
    logged = [r for r in done_cdc if any(s.cdc_stats for s in r.metadata.write_stats())]
    if table_type == "COPY_ON_WRITE":
        # every commit that rewrote a stored base file logged its changes (AS_IS is exercised)
        assert len(logged) >= 3
    else:
        assert logged == []
    # as Hudi: only a rewritten base file (merge handle) gets a CDC file; log appends and new file
    # groups get none (the reader infers LOG_FILE / BASE_FILE_INSERT)
    stats = [s for r in done_cdc for s in r.metadata.write_stats()]
    assert all(s.path.endswith(".parquet") and s.prev_base_file for s in stats if s.cdc_stats)
    assert not any(s.cdc_stats for s in stats if not s.path.endswith(".parquet") or not s.prev_base_file)
    if table_type == "MERGE_ON_READ":
        assert any(s.log_files for s in stats)  # log appends were part of the story
        # none on Merge-on-Read: hudi-rs 0.5.0 could not read the table (see write.cdc_log)
        assert not _files(with_cdc.base_path, ".cdc")
    assert not any(s.cdc_stats for r in done_plain for s in r.metadata.write_stats())
    rng = random.Random(5)
    for table, done in ((with_cdc, done_cdc), (without, done_plain)):
        bounds = ["00000000000000000", *(r.completion_time for r in done)]
        instants = {r.instant_time: i for i, r in enumerate(done)}
        windows = [(0, len(done))] + [tuple(sorted(rng.sample(range(len(bounds)), 2))) for _ in range(6)]
        for i, j in windows:
            want = [(k, op, b, a) for k in range(i, j) for op, b, a in model[k]]
            assert _query(table, bounds[i], bounds[j], instants) == want, (table.base_path, i, j)


def _expected_cdc_fields(mode: str, table_schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """HoodieCDCUtils' CDC schemas, written from its source: OP_KEY_ONLY ``Record{op, record_key}``
    with ``["string","null"]`` unions; the other modes ``CDC`` records whose fields are nullable
    (``["null", ...]``) with doc "" and default null, images being the table record."""
    if mode == "OP_KEY_ONLY":
        return [("op", ["string", "null"]), ("record_key", ["string", "null"])]
    image = ["null", f"{table_schema['namespace']}.{table_schema['name']}"]
    second = (
        ("ts_ms", ["null", "string"]) if mode == "DATA_BEFORE_AFTER" else ("record_key", ["null", "string"])
    )
    fields = [("op", ["null", "string"]), second, ("before", image)]
    if mode == "DATA_BEFORE_AFTER":
        fields.append(("after", image))
    return fields


def _field_types(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, union) of each field, a nested record named by its full name (its own fields apart)."""
    out = []
    ns = schema.get("namespace")
    for f in schema["fields"]:
        union = []
        for branch in f["type"]:
            if isinstance(branch, dict):
                union.append(f"{branch.get('namespace', ns)}.{branch['name']}")
            else:
                union.append(branch if "." in branch or branch in ("null", "string") else f"{ns}.{branch}")
        out.append((f["name"], union))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_cdc_log_files_have_hudis_name_block_schema_and_stats(tmp_path: Path, mode: str) -> None:
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", mode)
    props = read_properties(t.storage)
    assert props["hoodie.table.cdc.enabled"] == "true"
    assert props["hoodie.table.cdc.supplemental.logging.mode"] == mode
    t.write(
        pa.Table.from_pylist([{"id": i, "part": "p0", "ts": 1, "v": i} for i in (0, 3, 6)], schema=SCHEMA),
        "upsert",
    )
    r = t.write(pa.Table.from_pylist([{"id": 3, "part": "p0", "ts": 2, "v": 30}, {"id": 9, "part": "p0", "ts": 2, "v": 9}], schema=SCHEMA), "upsert")  # fmt: skip
    d = t.delete(pa.table({"id": pa.array([6], pa.int64()), "part": ["p0"]}))
    expected_ops = {r.instant_time: {"3": "u", "9": "i"}, d.instant_time: {"6": "d"}}
    for commit in (r, d):
        (stat,) = commit.metadata.write_stats()
        assert stat.cdc_stats and len(stat.cdc_stats) == 1
        (path, size) = next(iter(stat.cdc_stats.items()))
        # cdcStats: path relative to the table -> the file's size; the Avro commit file keeps it
        assert size == (tmp_path / "t" / path).stat().st_size
        tl = t.load_timeline()
        inst = next(i for i in tl.completed_writes() if i.time == commit.instant_time)
        assert [s.cdc_stats for s in tl.commit_metadata(inst).write_stats()] == [{path: size}]
        m = CDC_NAME.match(path.split("/")[-1])
        assert path.startswith("p0/") and m is not None
        assert (m["file_id"], m["instant"], m["version"]) == (stat.file_id, commit.instant_time, "1")
        frames = scan_log_file(t.storage, path).frames
        assert [f.block_type for f in frames] == [BlockType.CDC_DATA] and int(BlockType.CDC_DATA) == 6
        assert set(frames[0].header) == {HeaderKey.INSTANT_TIME, HeaderKey.SCHEMA}
        assert frames[0].header[HeaderKey.INSTANT_TIME] == commit.instant_time
        schema = json.loads(frames[0].header[HeaderKey.SCHEMA])
        table_schema = json.loads(commit.metadata.schema or "")
        assert schema["name"] == ("Record" if mode == "OP_KEY_ONLY" else "CDC")
        assert schema.get("namespace") == (None if mode == "OP_KEY_ONLY" else table_schema["namespace"])
        assert _field_types(schema) == _expected_cdc_fields(mode, table_schema)
        if mode != "OP_KEY_ONLY":
            assert all(f["doc"] == "" and f["default"] is None for f in schema["fields"])
            image = schema["fields"][2]["type"][1]
            assert [f["name"] for f in image["fields"]] == COLS  # the table record without meta fields
        recs = read_cdc_rows(t.storage, path)
        if mode == "DATA_BEFORE_AFTER":
            got = {str((r["after"] or r["before"])["id"]): r["op"] for r in recs}
            assert {r["ts_ms"] for r in recs} == {commit.instant_time}
        else:
            got = {r["record_key"]: r["op"] for r in recs}
        assert got == expected_ops[commit.instant_time]
    # the first commit created the file group: every record an insert, no CDC file (Hudi's BASE_FILE_INSERT)
    assert len(_files(t.base_path, ".cdc")) == 2


def test_cdc_logging_mode_is_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"supplemental\.logging\.mode"):
        _create(str(tmp_path / "a"), "COPY_ON_WRITE", "DATA_AFTER")
    with pytest.raises(InvalidConfigError, match=r"needs hoodie\.table\.cdc\.enabled=true"):
        HudiTable.create(str(tmp_path / "b"), "t", record_key="id", cdc_logging_mode="OP_KEY_ONLY")
    t = HudiTable.create(str(tmp_path / "c"), "t", record_key="id", cdc=True)
    assert read_properties(t.storage)["hoodie.table.cdc.supplemental.logging.mode"] == "DATA_BEFORE_AFTER"
    plain = read_properties(HudiTable.create(str(tmp_path / "d"), "t", record_key="id").storage)
    assert not [k for k in plain if "cdc" in k]  # as Apache Hudi: no cdc keys on a table without CDC


def _two_groups(t: HudiTable) -> None:
    t.write(pa.Table.from_pylist([{"id": i, "part": f"p{i % 2}", "ts": 1, "v": i} for i in range(4)], schema=SCHEMA), "upsert")  # fmt: skip


def _update_both(ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "part": f"p{i % 2}", "ts": ts, "v": ts} for i in range(4)], schema=SCHEMA
    )


def test_a_failed_cdc_write_leaves_no_cdc_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", "DATA_BEFORE_AFTER")
    _two_groups(t)
    before = t.read().sort_by("id")
    real = write_files.write_base_file
    calls = {"n": 0}

    def second_fails(*args: Any, **kwargs: Any) -> int:  # the fault: the second file group's write fails
        calls["n"] += 1
        if calls["n"] == 2:
            assert _files(t.base_path, ".cdc"), (
                "the first file group's CDC file must exist when the write fails"
            )
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(write_files, "write_base_file", second_fails)
    with pytest.raises(OSError, match="disk full"):
        t.write(_update_both(2), "upsert")
    assert _files(t.base_path, ".cdc") == set()
    assert HudiTable.open(t.base_path).read().sort_by("id").equals(before)


WRITER = """
import sys
import pyarrow as pa
from inlet.core import HudiTable

rows = [{"id": i, "part": f"p{i % 2}", "ts": 2, "v": 2} for i in range(4)]
HudiTable.open(sys.argv[1]).write(pa.Table.from_pylist(rows), "upsert")
"""


def test_rollback_of_a_crashed_cdc_write_deletes_its_cdc_files(tmp_path: Path) -> None:
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", "OP_KEY_ONLY")
    _two_groups(t)
    assert run_python(WRITER, t.base_path, crash_at=faults.AFTER_DATA_FILES) == 77
    left = _files(t.base_path, ".cdc")
    assert len(left) == 2  # one per file group the crashed commit rewrote
    pending = HudiTable.open(t.base_path).timeline.pending()
    assert [CDC_NAME.match(f.split("/")[-1])["instant"] for f in sorted(left)] == [pending[0].time] * 2
    assert HudiTable.open(t.base_path).rollback_failed_writes(force=True)
    assert _files(t.base_path, ".cdc") == set()


def test_clean_deletes_the_cdc_files_of_cleaned_slices(tmp_path: Path) -> None:
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", "DATA_BEFORE")
    _two_groups(t)
    commits = [t.write(_update_both(ts), "upsert").instant_time for ts in (2, 3, 4)]
    cdc_instants = sorted(CDC_NAME.match(f.split("/")[-1])["instant"] for f in _files(t.base_path, ".cdc"))
    assert cdc_instants == sorted(commits * 2)
    res = t.clean(
        {"hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.clean.fileversions.retained": "1"}
    )
    assert res is not None
    # only the latest slice of each group stays: its base file and the CDC file of the commit that wrote it
    bases = {Path(p).name.split("_")[-1].removesuffix(".parquet") for p in _files(t.base_path, ".parquet")}
    assert bases == {commits[-1]}
    left = sorted(CDC_NAME.match(f.split("/")[-1])["instant"] for f in _files(t.base_path, ".cdc"))
    assert left == [commits[-1]] * 2


@pytest.mark.parametrize("mode", MODES)
def test_cdc_images_come_from_the_cdc_log_after_a_clean(tmp_path: Path, mode: str) -> None:
    """AS_IS: once the slice before a logged commit is cleaned, only the CDC log still has the before
    image (DATA_BEFORE, DATA_BEFORE_AFTER); OP_KEY_ONLY needs that slice, and a commit whose CDC file
    was cleaned cannot be read: both are refused with a clear error, as Hudi cannot read them either."""
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", mode)
    row = lambda ts: pa.Table.from_pylist([{"id": 1, "part": "p1", "ts": ts, "v": 10 * ts}], schema=SCHEMA)  # noqa: E731
    t.write(row(1), "upsert")
    second = t.write(row(2), "upsert")
    third = t.write(row(3), "upsert")
    t.clean({"hoodie.clean.policy": "KEEP_LATEST_FILE_VERSIONS", "hoodie.clean.fileversions.retained": "1"})
    with pytest.raises(InvalidInputError, match="deleted by a clean"):
        t.read_changes("000", format="cdc")
    if mode == "OP_KEY_ONLY":
        with pytest.raises(InvalidInputError, match="OP_KEY_ONLY"):
            t.read_changes(second.completion_time, format="cdc")
        return
    rows = t.read_changes(second.completion_time, columns=COLS, format="cdc").table.to_pylist()
    assert [(r["op"], r["ts_ms"], json.loads(r["before"]), json.loads(r["after"])) for r in rows] == [
        (
            "u",
            third.instant_time,
            {"id": 1, "part": "p1", "ts": 2, "v": 20},
            {"id": 1, "part": "p1", "ts": 3, "v": 30},
        )
    ]


def test_restore_deletes_the_cdc_files_of_the_commits_it_rolls_back(tmp_path: Path) -> None:
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", "DATA_BEFORE_AFTER")
    _two_groups(t)
    kept = t.write(_update_both(2), "upsert").instant_time
    t.savepoint(kept)
    undone = [t.write(_update_both(ts), "upsert").instant_time for ts in (3, 4)]

    def instants() -> list[str]:
        return sorted(CDC_NAME.match(f.split("/")[-1])["instant"] for f in _files(t.base_path, ".cdc"))

    assert instants() == sorted([kept, *undone] * 2)
    t.restore(kept)
    assert instants() == [kept, kept]
    assert [r["v"] for r in t.read().sort_by("id").to_pylist()] == [2, 2, 2, 2]


@pytest.mark.parametrize("mode", MODES)
def test_cdc_block_content_equals_fastavros_encoding(mode: str) -> None:
    """The column-at-a-time CDC encoder writes the bytes fastavro writes record by record for the
    block's schema (nested images with decimals, timestamps, dates, structs, lists and nulls)."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("amount", pa.decimal128(10, 2)),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("info", pa.struct([("a", pa.int64()), ("b", pa.string())])),
            ("tags", pa.list_(pa.string())),
            ("flag", pa.bool_()),
            ("score", pa.float64()),
        ]
    )
    key = "_hoodie_record_key"
    rows = {
        1: {"id": 1, "name": "a", "amount": decimal.Decimal("1.50"), "at": dt.datetime(2024, 1, 2, 3, 4, 5, 6, dt.UTC),
            "day": dt.date(2024, 1, 2), "info": {"a": 1, "b": "x"}, "tags": ["p", "q"], "flag": True, "score": 0.5},
        2: {"id": 2, "name": None, "amount": None, "at": None, "day": None, "info": None, "tags": None, "flag": None,
            "score": None},
        3: {"id": 3, "name": "c", "amount": decimal.Decimal("-99.99"), "at": dt.datetime(1969, 12, 31, tzinfo=dt.UTC),
            "day": dt.date(1900, 1, 1), "info": {"a": None, "b": None}, "tags": [], "flag": False, "score": -1e300},
    }  # fmt: skip
    new2 = {**rows[1], "id": 2, "name": "b2"}

    def table(items: list[tuple[int, dict[str, Any]]]) -> pa.Table:
        t = pa.Table.from_pylist([r for _, r in items], schema=schema)
        return t.append_column(key, pa.array([str(k) for k, _ in items], pa.string()))

    before = table([(1, rows[1]), (2, rows[2])])  # 1 deleted, 2 updated
    after = table([(3, rows[3]), (2, new2)])  # 3 inserted
    avro_schema = to_avro_schema(schema, "t")
    count, content = cdc_log.encode_cdc_records(
        mode, "20240102030405006", key, schema, before, after, avro_schema
    )
    want = [("1", "d", rows[1], None), ("2", "u", rows[2], new2), ("3", "i", None, rows[3])]
    parsed = fastavro.parse_schema(json.loads(cdc_log.cdc_schema(mode, avro_schema)))
    expected = bytearray(struct.pack(">ii", 3, len(want)))
    for k, op, b, a in want:
        rec: dict[str, Any] = {"op": op}
        if mode == "DATA_BEFORE_AFTER":
            rec.update(ts_ms="20240102030405006", before=b, after=a)
        else:
            rec["record_key"] = k
            if mode == "DATA_BEFORE":
                rec["before"] = b
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, rec)
        expected += struct.pack(">i", len(buf.getvalue())) + buf.getvalue()
    assert count == 3
    assert content == bytes(expected)


def test_clustering_writes_no_cdc_file_and_adds_no_cdc_rows(tmp_path: Path) -> None:
    """As Hudi: clustering rewrites records without changing them, so it logs nothing, and the CDC
    query (which skips clustering commits) returns the writes' changes only."""
    t = _create(str(tmp_path / "t"), "COPY_ON_WRITE", "DATA_BEFORE_AFTER")
    for n in range(3):  # three small file groups per partition
        rows = [{"id": 10 * n + i, "part": f"p{i % 2}", "ts": 1, "v": i} for i in range(4)]
        t.write(pa.Table.from_pylist(rows, schema=SCHEMA), "bulk_insert")
    before = _files(t.base_path, ".cdc")
    end_writes = t.load_timeline().completed_writes()[-1].completion_time
    done = t.cluster(options={"hoodie.clustering.plan.strategy.sort.columns": "v"}, force=True)
    assert done is not None and done.action == "replacecommit"
    assert not any(s.cdc_stats for s in done.metadata.write_stats())
    assert _files(t.base_path, ".cdc") == before
    assert t.read_changes(end_writes, format="cdc").table.num_rows == 0
    assert t.read_changes("000", format="cdc").table.num_rows == 12  # the three inserts, nothing more
