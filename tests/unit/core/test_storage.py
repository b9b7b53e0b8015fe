"""The format code goes through one storage abstraction: any pyarrow filesystem works."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pyarrow.fs as pafs
from hudi import HudiReadOptions, HudiTableBuilder

from inlet.core import HudiTable
from inlet.core.storage import Storage


def test_table_on_a_non_local_filesystem_object(tmp_path: pathlib.Path) -> None:
    # A SubTreeFileSystem is not a LocalFileSystem: no os-level shortcuts apply, as on S3.
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    t = HudiTable.create("lake/t", name="t", record_key="id", partition_by="p", filesystem=fs)
    assert not t.storage.is_local
    t.write(pa.table({"id": [1, 2, 3], "p": ["a", "b", "a"], "v": [10, 20, 30]}))
    t.write(pa.table({"id": [2], "p": ["b"], "v": [99]}))
    t.delete(pa.table({"id": [1], "p": ["a"]}))
    reopened = HudiTable.open("lake/t", filesystem=fs)
    got = sorted((r["id"], r["v"]) for r in reopened.read(columns=["id", "v"]).to_pylist())
    assert got == [(2, 99), (3, 30)]
    # the same bytes are a genuine Hudi table for an independent reader
    hudi = HudiTableBuilder.from_base_uri(str(tmp_path / "lake" / "t")).build()
    rows = pa.Table.from_batches(hudi.read(HudiReadOptions())).to_pylist()
    assert sorted((r["id"], r["v"]) for r in rows) == [(2, 99), (3, 30)]


def test_storage_lists_relative_paths_and_writes_atomically(tmp_path: pathlib.Path) -> None:
    s = Storage(str(tmp_path))
    s.write_atomic("a/b/c.txt", b"one")
    s.write_atomic("a/b/c.txt", b"two")
    assert s.read_bytes("a/b/c.txt") == b"two"
    assert [f.path for f in s.list_files("a", recursive=True)] == ["a/b/c.txt"]
    assert not [p for p in (tmp_path / "a" / "b").iterdir() if p.name.endswith(".tmp")]
    assert s.list_files("missing") == []
