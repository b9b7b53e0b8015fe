"""Counting the requests a table makes to an object store.

:class:`CountingFileSystem` wraps a pyarrow filesystem and counts each call by the S3 request it
costs: a file's information is a ``HEAD``, a directory listing a ``LIST`` per 1,000 entries, opening a file to read a
``GET`` (Parquet footers and column chunks may take a few ranged GETs more: pyarrow does not report
them), a written file a ``PUT``, a deleted file a ``DELETE``. :class:`RequestCounts` is cheap
(a lock and a dict) and shared by every :class:`~inlet.core.storage.Storage` of one store.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

KINDS = ("LIST", "HEAD", "GET", "PUT", "DELETE", "COPY")
LIST_PAGE = 1000


class RequestCounts:
    """Requests by kind (``LIST``, ``HEAD``, ``GET``, ``PUT``, ``DELETE``, ``COPY``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] = self._counts.get(kind, 0) + n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    @staticmethod
    def diff(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
        return {k: after.get(k, 0) - before.get(k, 0) for k in KINDS}


class CountingHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """Delegates to ``inner``, counting requests into ``counts``."""

    def __init__(self, inner: pafs.FileSystem, counts: RequestCounts) -> None:
        self.inner = inner
        self.counts = counts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CountingHandler) and self.inner.equals(other.inner)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return f"counting+{self.inner.type_name}"

    def normalize_path(self, path: str) -> str:
        return str(self.inner.normalize_path(path))

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        self.counts.add("HEAD", len(paths))
        return list(self.inner.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        infos = list(self.inner.get_file_info(selector))
        self.counts.add("LIST", max(1, -(-len(infos) // LIST_PAGE)))  # S3 returns 1,000 keys a page
        return infos

    def create_dir(self, path: str, recursive: bool) -> None:
        self.counts.add("PUT")
        self.inner.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.counts.add("LIST")
        self.counts.add("DELETE")
        self.inner.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.counts.add("LIST")
        self.counts.add("DELETE")
        self.inner.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refusing to delete the root of an object store")

    def delete_file(self, path: str) -> None:
        self.counts.add("DELETE")
        self.inner.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.counts.add("COPY")
        self.counts.add("DELETE")
        self.inner.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.counts.add("COPY")
        self.inner.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        self.counts.add("GET")
        return self.inner.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        self.counts.add("GET")
        return self.inner.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        self.counts.add("PUT")
        return self.inner.open_output_stream(path, metadata=metadata)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        self.counts.add("PUT")
        return self.inner.open_append_stream(path, metadata=metadata)


def counting(inner: pafs.FileSystem, counts: RequestCounts) -> pafs.FileSystem:
    return pafs.PyFileSystem(CountingHandler(inner, counts))
