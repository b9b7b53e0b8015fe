"""Direct marker files: ``.hoodie/.temp/<instant>/<partition>/<file name>.marker.<IOType>``.

A marker is written before its data file, so after a crash the markers name every file the
failed write may have left behind.
"""

from __future__ import annotations

import posixpath

from inlet.core.storage import Storage

TEMP_DIR = ".hoodie/.temp"
MARKER_SUFFIX = ".marker."


def marker_dir(instant_time: str) -> str:
    return f"{TEMP_DIR}/{instant_time}"


def create_marker(storage: Storage, instant_time: str, partition: str, file_name: str, io_type: str) -> None:
    rel = posixpath.join(marker_dir(instant_time), partition, f"{file_name}{MARKER_SUFFIX}{io_type}")
    storage.write_bytes(rel, b"")


def marked_files(storage: Storage, instant_time: str) -> list[str]:
    """Table-relative paths of the data files named by an instant's markers."""
    root = marker_dir(instant_time) + "/"
    out = []
    for info in storage.list_files(marker_dir(instant_time), recursive=True):
        rel = info.path[len(root) :] if info.path.startswith(root) else info.path
        if MARKER_SUFFIX in rel:
            out.append(rel[: rel.rindex(MARKER_SUFFIX)])
    return out


def delete_markers(storage: Storage, instant_time: str) -> None:
    storage.delete_dir(marker_dir(instant_time))
