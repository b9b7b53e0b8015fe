"""Listing a table's data files does not read its timeline: a commit's listing must not grow with
the number of instants (on S3 a listing costs a request per 1,000 keys)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from inlet.core import HudiTable
from inlet.core.file_group.view import PER_DIRECTORY_LISTING_MAX, list_data_files
from inlet.core.storage import Storage
from inlet.core.storage_requests import CountingHandler, RequestCounts


class RecordingHandler(CountingHandler):
    def __init__(self) -> None:
        super().__init__(pafs.LocalFileSystem(), RequestCounts())
        self.listed: list[tuple[str, bool]] = []

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        self.listed.append((selector.base_dir, selector.recursive))
        return super().get_file_info_selector(selector)


def _listed_for(path: Path) -> tuple[list[str], list[tuple[str, bool]]]:
    handler = RecordingHandler()
    storage = Storage(str(path), pafs.PyFileSystem(handler))
    files = sorted(f.path for f in list_data_files(storage))
    return files, handler.listed


def test_data_files_are_listed_without_the_timeline(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", partition_by="p")
    for i in range(3):
        t.write(pa.table({"id": [i], "p": [f"p{i}"]}), operation="insert")
    files, listed = _listed_for(tmp_path / "t")
    assert len([f for f in files if f.endswith(".parquet")]) == 3
    assert not [f for f in files if f.startswith(".hoodie")]
    root = str(tmp_path / "t")
    assert (root, True) not in listed and not [d for d, _ in listed if "/.hoodie" in d], listed
    assert len(listed) == 1 + 3  # the top level, then each partition


def test_many_partitions_are_listed_at_once(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), name="t", record_key="id", partition_by="p")
    n = PER_DIRECTORY_LISTING_MAX + 1
    t.write(pa.table({"id": list(range(n)), "p": [f"p{i}" for i in range(n)]}), operation="insert")
    files, listed = _listed_for(tmp_path / "t")
    assert len([f for f in files if f.endswith(".parquet")]) == n
    assert not [f for f in files if f.startswith(".hoodie")]
    assert len(listed) == 2  # the top level, then everything in one listing
