"""Direct marker files: ``.hoodie/.temp/<instant>/<partition>/<file name>.marker.<IOType>``.

A marker is written before its data file, so after a crash the markers name every file the
failed write may have left behind.
"""

from __future__ import annotations

import posixpath
import re

from inlet.core.storage import Storage

TEMP_DIR = ".hoodie/.temp"
MARKER_SUFFIX = ".marker."
_TIMELINE_SERVER_MARKERS = re.compile(r"^MARKERS\d+$")


def marker_dir(instant_time: str) -> str:
    return f"{TEMP_DIR}/{instant_time}"


def create_marker(storage: Storage, instant_time: str, partition: str, file_name: str, io_type: str) -> None:
    rel = posixpath.join(marker_dir(instant_time), partition, f"{file_name}{MARKER_SUFFIX}{io_type}")
    storage.write_bytes(rel, b"")


def _strip(marker: str) -> str | None:
    return marker[: marker.rindex(MARKER_SUFFIX)] if MARKER_SUFFIX in marker else None


def marked_files(storage: Storage, instant_time: str) -> list[str]:
    """Table-relative paths of the data files named by an instant's markers.

    Besides direct markers (one empty file each), Apache Hudi's timeline-server-based markers are
    read too: ``MARKERS<n>`` files in the marker directory listing one marker per line, so the
    files of a failed Java writer are found even before they are listed.
    """
    root = marker_dir(instant_time) + "/"
    out: set[str] = set()
    for info in storage.list_files(marker_dir(instant_time), recursive=True):
        rel = info.path[len(root) :] if info.path.startswith(root) else info.path
        if _TIMELINE_SERVER_MARKERS.match(rel):
            for line in storage.read_bytes(info.path).decode("utf-8", "replace").splitlines():
                data_file = _strip(line.strip())
                if data_file:
                    out.add(data_file)
            continue
        data_file = _strip(rel)
        if data_file:
            out.add(data_file)
    return sorted(out)


def delete_markers(storage: Storage, instant_time: str) -> None:
    storage.delete_dir(marker_dir(instant_time))
