"""One storage abstraction over ``pyarrow.fs``: local disk and S3-compatible object stores.

Format code never touches ``os`` or ``open`` directly; it goes through :class:`Storage`, whose
paths are relative to the table's base path.

``s3://bucket/prefix`` (also ``s3a://``) reaches an S3-compatible store with the options of
:class:`~inlet.core.s3.S3Options` (default: the AWS environment). On an object store there is no
rename and no directory: :meth:`Storage.write_atomic` is one PUT (a PUT is atomic: readers see the
old object or the whole new one), :meth:`Storage.mkdirs` does nothing, and every request is counted
(:attr:`Storage.requests`, shared by all storages of one bucket in this process).
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from inlet.core.errors import InletError
from inlet.core.s3 import ConditionalS3, S3Options, is_s3_uri, split_s3_uri
from inlet.core.storage_requests import RequestCounts, counting

_counts_guard = threading.Lock()
_counts: dict[tuple[str, str], RequestCounts] = {}


def request_counts(options: S3Options, bucket: str) -> RequestCounts:
    """The process-wide request counter of one bucket on one store."""
    key = (options.endpoint or "aws", bucket)
    with _counts_guard:
        return _counts.setdefault(key, RequestCounts())


@functools.lru_cache(maxsize=64)
def _with_region(options: S3Options, bucket: str) -> S3Options:
    """On AWS without a configured region, the bucket's own (as pyarrow's ``from_uri`` finds it)."""
    if options.region is not None or options.endpoint is not None:
        return options
    try:
        return replace(options, region=pafs.resolve_s3_region(bucket))
    except OSError:
        return options


def all_request_counts() -> dict[tuple[str, str], RequestCounts]:
    """Every bucket's request counter in this process, by (endpoint or ``aws``, bucket)."""
    with _counts_guard:
        return dict(_counts)


@functools.lru_cache(maxsize=32)
def _s3_filesystem(options: S3Options, bucket: str) -> pafs.FileSystem:
    return counting(options.filesystem(), request_counts(options, bucket))


@dataclass(frozen=True)
class FileInfo:
    path: str  # relative to the storage root, '/'-separated
    size: int
    mtime_ms: int | None


class Storage:
    """Files of one table, addressed by paths relative to the table's base path."""

    def __init__(
        self, base_uri: str, filesystem: pafs.FileSystem | None = None, s3: S3Options | None = None
    ) -> None:
        self.s3: S3Options | None = None
        self.requests: RequestCounts | None = None
        #: its commits go through the coordinator (see CommitProtocol.serialises_commits)
        self.coordinated = False
        if filesystem is None and is_s3_uri(base_uri):
            bucket, key = split_s3_uri(base_uri)
            self.s3 = _with_region(s3 or S3Options.from_env(), bucket)
            self.bucket = bucket
            filesystem = _s3_filesystem(self.s3, bucket)
            self.requests = request_counts(self.s3, bucket)
            root = f"{bucket}/{key}" if key else bucket
        elif filesystem is None:
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

    @property
    def is_object_store(self) -> bool:
        """No rename, no directories, no locks: an S3-compatible store."""
        return self.s3 is not None

    def conditional(self) -> ConditionalS3:
        """Conditional requests (``If-None-Match``/``If-Match``) on this table's bucket (S3 only)."""
        if self.s3 is None:
            raise InletError(f"{self.base_uri} is not on an object store")
        return ConditionalS3(self.s3, self.bucket, self.requests)

    def object_key(self, rel: str) -> str:
        """The S3 key of a table file (S3 only)."""
        return self.full(rel).split("/", 1)[1]

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
        """Write so readers see either no file or the whole file (temp file + rename; on an
        object store one PUT, which is atomic)."""
        if self.is_object_store:
            with self.fs.open_output_stream(self.full(rel)) as f:
                f.write(data)
            return
        parent = posixpath.dirname(rel)
        self.mkdirs(parent)
        tmp = posixpath.join(parent, f".{posixpath.basename(rel)}.{uuid.uuid4().hex}.tmp")
        with self.fs.open_output_stream(self.full(tmp)) as f:
            f.write(data)
        self.fs.move(self.full(tmp), self.full(rel))

    def mkdirs(self, rel: str) -> None:
        if rel and not self.is_object_store:  # object stores have no directories to make
            self.fs.create_dir(self.full(rel), recursive=True)

    def delete(self, rel: str, missing_ok: bool = True) -> None:
        if self.s3 is not None and missing_ok:
            self.conditional().delete(self.object_key(rel))  # one request, no directory object
            return
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
        return self.list_entries(rel, recursive)[0]

    def list_entries(self, rel: str, recursive: bool = False) -> tuple[list[FileInfo], list[str]]:
        """Files and directories below ``rel`` (one listing); empty if it does not exist."""
        sel = pafs.FileSelector(self.full(rel), allow_not_found=True, recursive=recursive)
        files, dirs = [], []
        prefix = self.root.rstrip("/") + "/"
        for info in self.fs.get_file_info(sel):
            path = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
            if info.type == pafs.FileType.Directory:
                dirs.append(path)
            elif info.type == pafs.FileType.File:
                mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None
                files.append(FileInfo(path, info.size or 0, mtime))
        return files, dirs

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
