"""One storage abstraction over ``pyarrow.fs``: local disk now, S3-compatible stores later.

Format code never touches ``os`` or ``open`` directly; it goes through :class:`Storage`, whose
paths are relative to the table's base path.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from inlet.core.errors import InletError


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the storage root, '/'-separated
    size: int
    mtime_ms: int | None


class Storage:
    """Files of one table, addressed by paths relative to the table's base path."""

    def __init__(self, base_uri: str, filesystem: pafs.FileSystem | None = None) -> None:
        if filesystem is None:
            if "://" not in base_uri:
                base_uri = os.path.abspath(base_uri)
            filesystem, root = pafs.FileSystem.from_uri(base_uri)
        else:
            root = base_uri
        self.fs: pafs.FileSystem = filesystem
        self.root = root.rstrip("/") or "/"
        self.base_uri = base_uri

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def full(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def exists(self, rel: str) -> bool:
        return bool(self.fs.get_file_info(self.full(rel)).type != pafs.FileType.NotFound)

    def read_bytes(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self.full(rel)) as f:
                return bytes(f.read())
        except FileNotFoundError as e:
            raise InletError(f"file not found: {rel}") from e

    def write_bytes(self, rel: str, data: bytes) -> None:
        self.mkdirs(posixpath.dirname(rel))
        with self.fs.open_output_stream(self.full(rel)) as f:
            f.write(data)

    def write_atomic(self, rel: str, data: bytes) -> None:
        """Write so readers see either no file or the whole file (temp file + rename)."""
        parent = posixpath.dirname(rel)
        self.mkdirs(parent)
        tmp = posixpath.join(parent, f".{posixpath.basename(rel)}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(self.full(tmp)) as f:
            f.write(data)
        self.fs.move(self.full(tmp), self.full(rel))

    def mkdirs(self, rel: str) -> None:
        if rel:
            self.fs.create_dir(self.full(rel), recursive=True)

    def delete(self, rel: str, missing_ok: bool = True) -> None:
        try:
            self.fs.delete_file(self.full(rel))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def delete_dir(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(self.full(rel))

    def list_files(self, rel: str, recursive: bool = False) -> list[FileInfo]:
        """Files (not directories) below ``rel``; empty if it does not exist."""
        sel = pafs.FileSelector(self.full(rel), allow_not_found=True, recursive=recursive)
        out = []
        prefix = self.root.rstrip("/") + "/"
        for info in self.fs.get_file_info(sel):
            if info.type != pafs.FileType.File:
                continue
            path = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
            mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
            out.append(FileInfo(path, info.size or 0, mtime))
        return out

    def list_names(self, rel: str) -> set[str]:
        """Names of the files (not directories) directly in ``rel``; empty if it does not exist.
        Cheaper than :meth:`list_files` on local disk: no ``stat`` per file."""
        if not self.is_local:
            return {posixpath.basename(f.path) for f in self.list_files(rel)}
        try:
            with os.scandir(self.full(rel)) as entries:
                return {e.name for e in entries if e.is_file()}
        except (FileNotFoundError, NotADirectoryError):
            return set()

    def walk_files(self, rel: str) -> Iterator[FileInfo]:
        yield from self.list_files(rel, recursive=True)

    def read_parquet(self, rel: str, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(self.full(rel), columns=columns, filesystem=self.fs)

    def parquet_file(self, rel: str) -> pq.ParquetFile:
        return pq.ParquetFile(self.fs.open_input_file(self.full(rel)))
