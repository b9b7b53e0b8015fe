"""File names, file groups and file slices, and the file-system view of a table at an instant.

A base file is ``<fileId>_<writeToken>_<instantTime>.parquet``; the file group is
``(partition, fileId)``; its file slices are its base files by instant. A reader at instant T
sees, per file group not replaced by a replacecommit at or before T, the base file of the
latest completed write at or before T.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from dataclasses import dataclass, field

from inlet.core.instant import Action
from inlet.core.storage import FileInfo, Storage
from inlet.core.timeline import Timeline

BASE_FILE_EXTENSIONS = (".parquet", ".orc", ".hfile")
PARTITION_METADATA_FILE = ".hoodie_partition_metadata"
_BASE_RE = re.compile(r"^(?P<file_id>.+)_(?P<token>[^_]+)_(?P<instant>\d{17}|\d{14})(?P<ext>\.[a-z]+)$")
_LOG_RE = re.compile(
    r"^\.(?P<file_id>.+)_(?P<instant>\d{14,17})\.log\.(?P<version>\d+)(?:_(?P<token>\d+-\d+-\d+))?(?:\.cdc)?$"
)


def new_file_id() -> str:
    """A new file group id: a UUID plus Hudi's ``-0`` file-index suffix."""
    return f"{uuid.uuid4()}-0"


def write_token(partition_id: int = 0, stage_id: int = 0, attempt_id: int = 0) -> str:
    return f"{partition_id}-{stage_id}-{attempt_id}"


def base_file_name(file_id: str, token: str, instant_time: str, ext: str = ".parquet") -> str:
    return f"{file_id}_{token}_{instant_time}{ext}"


def log_file_name(file_id: str, instant_time: str, version: int = 1, token: str = "0-0-0") -> str:
    """Table version 8 log file name: ``.<fileId>_<deltacommit requested time>.log.<version>_<token>``."""
    return f".{file_id}_{instant_time}.log.{version}_{token}"


@dataclass(frozen=True)
class DataFile:
    """A file of a file group: where it is, and the instant that wrote it."""

    partition: str
    file_id: str
    instant_time: str
    write_token: str
    size: int
    name: str

    @property
    def path(self) -> str:
        return posixpath.join(self.partition, self.name) if self.partition else self.name


@dataclass(frozen=True)
class BaseFile(DataFile):
    @staticmethod
    def parse(path: str, size: int = 0) -> BaseFile | None:
        name = posixpath.basename(path)
        m = _BASE_RE.match(name)
        if not m or m.group("ext") not in BASE_FILE_EXTENSIONS:
            return None
        return BaseFile(
            partition=posixpath.dirname(path),
            file_id=m.group("file_id"),
            write_token=m.group("token"),
            instant_time=m.group("instant"),
            size=size,
            name=name,
        )


@dataclass(frozen=True)
class LogFile(DataFile):
    version: int = 1

    @staticmethod
    def parse(path: str, size: int = 0) -> LogFile | None:
        name = posixpath.basename(path)
        m = _LOG_RE.match(name)
        if not m:
            return None
        return LogFile(
            partition=posixpath.dirname(path),
            file_id=m.group("file_id"),
            instant_time=m.group("instant"),
            version=int(m.group("version")),
            write_token=m.group("token") or "",
            size=size,
            name=name,
        )


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: list[LogFile] = field(default_factory=list)


@dataclass
class FileGroup:
    partition: str
    file_id: str
    base_files: list[BaseFile] = field(default_factory=list)  # ascending by instant time

    @property
    def latest(self) -> BaseFile | None:
        return self.base_files[-1] if self.base_files else None


def list_data_files(storage: Storage) -> list[FileInfo]:
    """Every file of the table outside ``.hoodie``."""
    return [f for f in storage.walk_files("") if not f.path.startswith(".hoodie/") and f.path != ".hoodie"]


class FileSystemView:
    """File groups visible at an instant (all completed writes if ``as_of`` is None)."""

    def __init__(
        self, timeline: Timeline, as_of: str | None = None, files: list[FileInfo] | None = None
    ) -> None:
        self.timeline = timeline
        self.as_of = as_of
        writes = [i for i in timeline.completed_writes() if as_of is None or i.time <= as_of]
        self.visible_instants: set[str] = {i.time for i in writes}
        active = timeline.instants
        # instants older than the active timeline were archived; their files count as committed
        self.archive_boundary = active[0].time if active else None
        self.replaced: set[tuple[str, str]] = set()
        for inst in writes:
            if inst.action == Action.REPLACE_COMMIT:
                md = timeline.commit_metadata(inst)
                for p, ids in (md.partition_to_replace_file_ids or {}).items():
                    self.replaced.update((p, i) for i in ids)
        self.partitions_seen: set[str] = set()
        groups: dict[tuple[str, str], FileGroup] = {}
        for info in files if files is not None else list_data_files(timeline.storage):
            bf = BaseFile.parse(info.path, info.size)
            if bf is None:
                if posixpath.basename(info.path) == PARTITION_METADATA_FILE:
                    self.partitions_seen.add(posixpath.dirname(info.path))
                continue
            if not self._committed(bf.instant_time):
                continue
            g = groups.setdefault((bf.partition, bf.file_id), FileGroup(bf.partition, bf.file_id))
            g.base_files.append(bf)
        for g in groups.values():
            g.base_files.sort(key=lambda b: b.instant_time)
        self.groups = groups

    def _committed(self, instant_time: str) -> bool:
        if instant_time in self.visible_instants:
            return True
        archived = self.archive_boundary is not None and instant_time < self.archive_boundary
        return archived and (self.as_of is None or instant_time <= self.as_of)

    def file_groups(self, partition: str | None = None, include_replaced: bool = False) -> list[FileGroup]:
        out = [
            g
            for key, g in self.groups.items()
            if (partition is None or g.partition == partition)
            and (include_replaced or key not in self.replaced)
        ]
        return sorted(out, key=lambda g: (g.partition, g.file_id))

    def partitions(self) -> list[str]:
        return sorted({g.partition for g in self.file_groups()})

    def latest_base_files(self, partition: str | None = None) -> list[BaseFile]:
        return [b for g in self.file_groups(partition) if (b := g.latest) is not None]

    def latest_file_slices(self, partition: str | None = None) -> list[FileSlice]:
        return [
            FileSlice(g.partition, g.file_id, b.instant_time, b)
            for g in self.file_groups(partition)
            if (b := g.latest) is not None
        ]
