"""Write and compaction options are parsed before the action begins: a malformed value raises
``InvalidOptionError`` (both an ``InvalidInputError`` and an ``InvalidConfigError``) naming the
key and the value, and the table is left exactly as it was (no requested/inflight/rollback
instant, no heartbeat, no marker, no data file)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from inlet.core import HudiTable
from inlet.core.errors import InvalidConfigError, InvalidInputError, InvalidOptionError
from inlet.core.timeline.instant import State

HEARTBEAT = "hoodie.client.heartbeat.interval_in_ms"
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}

# (key, bad value): every option a write parses, each refused before the instant begins
BAD_WRITE_OPTIONS = [
    (HEARTBEAT, "soon"),
    (HEARTBEAT, "0"),
    (HEARTBEAT, "-1000"),
    ("hoodie.parquet.max.file.size", "big"),
    ("hoodie.parquet.max.file.size", "0"),
    ("hoodie.parquet.small.file.limit", "-1"),
    ("hoodie.copyonwrite.record.size.estimate", "0"),
    ("hoodie.parquet.compression.codec", "lzo"),
    ("hoodie.parquet.compression.codec", "fastest"),
    ("hoodie.bulkinsert.sort.mode", "RANDOM"),
    ("hoodie.combine.before.insert", "maybe"),
    ("hoodie.logfile.data.block.format", "orc"),
]


def rows(ids: list[int], ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(["sf" if i % 2 else "nyc" for i in ids], pa.string()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": pa.array([f"{tag}-{i}" for i in ids], pa.string()),
        }
    )


def table_files(path: str) -> dict[str, bytes]:
    """Every file of the table (timeline, heartbeats, markers, data) with its bytes."""
    root = Path(path)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_rows(path: str) -> list[dict[str, Any]]:
    return sorted(HudiTable.open(path).read().to_pylist(), key=lambda r: r["id"])


def make(tmp_path: Path, table_type: str = "COPY_ON_WRITE") -> HudiTable:
    t = HudiTable.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
    )
    t.write(rows([1, 2, 3, 4], 1, "a"), operation="insert")
    return t


def refused(key: str, value: str) -> Any:
    """The error a bad option must raise: the input-error class, naming the key and the value."""
    return pytest.raises(InvalidInputError, match=rf"{re.escape(key)}='{re.escape(value)}'")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize(("key", "value"), BAD_WRITE_OPTIONS)
def test_bad_write_option_is_refused_before_the_instant_begins(
    tmp_path: Path, table_type: str, key: str, value: str
) -> None:
    t = make(tmp_path, table_type)
    before, data = table_files(t.base_path), read_rows(t.base_path)
    instants = HudiTable.open(t.base_path).instants()
    with refused(key, value) as e:
        t.write(rows([3, 4, 5], 2, "b"), operation="upsert", options={key: value})
    assert isinstance(e.value, InvalidOptionError)
    assert isinstance(e.value, InvalidConfigError)  # the config-error class sees it too
    assert "\n" not in str(e.value)
    after = HudiTable.open(t.base_path)
    assert after.instants() == instants  # no requested, inflight or rollback instant
    assert table_files(t.base_path) == before  # nor a heartbeat, marker or data file
    assert read_rows(t.base_path) == data
    # the same write with good options goes through
    t.write(rows([3, 4, 5], 2, "b"), operation="upsert", options={HEARTBEAT: "5000"})
    assert [r["v"] for r in read_rows(t.base_path)] == ["a-1", "a-2", "b-3", "b-4", "b-5"]


def test_bad_option_of_delete_and_delete_partition_is_refused_too(tmp_path: Path) -> None:
    t = make(tmp_path)
    before = table_files(t.base_path)
    keys = pa.table({"id": pa.array([1], pa.int64()), "city": ["sf"]})
    with refused(HEARTBEAT, "1s"):
        t.delete(keys, options={HEARTBEAT: "1s"})
    with refused(HEARTBEAT, "1s"):
        t.write(None, operation="delete_partition", options={HEARTBEAT: "1s"}, partitions=["sf"])
    assert table_files(t.base_path) == before


def test_valid_codec_names_of_hudi_are_accepted(tmp_path: Path) -> None:
    """Hudi's ``uncompressed`` (Parquet's name) maps to pyarrow's ``none``; names are case-blind."""
    t = make(tmp_path)
    for i, codec in enumerate(["UNCOMPRESSED", "zstd", "GZIP"]):
        t.write(
            rows([10 + i], 5, codec), operation="insert", options={"hoodie.parquet.compression.codec": codec}
        )
    assert len(read_rows(t.base_path)) == 7


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (HEARTBEAT, "soon"),
        ("hoodie.parquet.compression.codec", "fastest"),
        ("hoodie.parquet.max.file.size", "0"),
        ("hoodie.compaction.target.io", "lots"),
    ],
)
def test_bad_compaction_option_is_refused_before_anything_is_scheduled_or_run(
    tmp_path: Path, key: str, value: str
) -> None:
    t = make(tmp_path, "MERGE_ON_READ")
    t.write(rows([1, 2], 2, "b"), operation="upsert")
    before = table_files(t.base_path)
    with refused(key, value):
        t.schedule_compaction({**DUE, key: value})
    with refused(key, value):
        t.compact({**DUE, key: value})
    assert table_files(t.base_path) == before  # no compaction.requested
    planned = t.schedule_compaction(DUE)
    assert planned is not None
    scheduled, data = table_files(t.base_path), read_rows(t.base_path)
    with refused(key, value):
        t.run_compaction(planned, {key: value})
    # the plan stays requested (not inflight), no heartbeat or marker
    assert table_files(t.base_path) == scheduled
    pending = [i for i in HudiTable.open(t.base_path).instants() if i.time == planned]
    assert [i.state for i in pending] == [State.REQUESTED]
    assert read_rows(t.base_path) == data
    done = t.run_compaction(planned, {HEARTBEAT: "5000"})
    assert done is not None and done.instant_time == planned

    def no_file(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "_hoodie_file_name"} for r in rs]

    assert no_file(read_rows(t.base_path)) == no_file(data)


def test_cli_prints_one_line_naming_the_option_and_leaves_the_table(tmp_path: Path) -> None:
    """``inlet write --option`` and ``inlet compaction run --option`` with a bad heartbeat."""
    from inlet.services.cli.main import main

    t = make(tmp_path, "MERGE_ON_READ")
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "city": "sf", "ts": 9, "v": "x"}\n')
    before = table_files(t.base_path)
    for argv in (
        ["write", t.base_path, "--op", "upsert", "--input", str(src), "--option", f"{HEARTBEAT}=soon"],
        ["compaction", "run", t.base_path, "--option", f"{HEARTBEAT}=soon"],
        ["compaction", "schedule", t.base_path, "--option", f"{HEARTBEAT}=soon"],
    ):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        assert code == 1, argv
        lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("inlet: error:")]
        assert lines == [f"inlet: error: invalid option {HEARTBEAT}='soon': not an integer"], err.getvalue()
    assert table_files(t.base_path) == before
