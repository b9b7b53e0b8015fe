"""File names, file groups and file slices, and the file-system view of a table at an instant.

A base file is ``<fileId>_<writeToken>_<instantTime>.parquet``, a log file (table version 8)
``.<fileId>_<deltacommitTime>.log.<version>_<writeToken>`` (table version 6: the base instant time
instead of the deltacommit time); the file group is ``(partition, fileId)``. A file slice is a base
instant with its base file (if any) and the log files written on top of it.

Slicing and visibility (what Apache Hudi 1.x ``HoodieFileGroup.addLogFile`` /
``AbstractTableFileSystemView`` and hudi-rs ``FileGroup::add_log_file`` / ``TimelineView`` do):

- A file is *committed* when the instant in its name is a completed commit, deltacommit or
  replacecommit on the active timeline, or is older than the active timeline's first instant
  (archived, hence committed). Base and log files of pending or failed instants are invisible.
- Slices are keyed by base instant: one per committed base file. On timeline layout 2 (table
  version 8+) a committed log file belongs to the slice with the largest base instant <= the
  **completion time** of the log's deltacommit; if there is none (a log-only file group, or logs
  completed before any base file), it opens a log-only slice keyed by its deltacommit time, which
  later logs join. On layout 1 (table version 6) the log's name carries its base instant.
- Within a slice logs are ordered by (deltacommit time, log version, write token) (Hudi's
  ``HoodieLogFile.LogFileComparator``).
- Reading as of instant T (hudi-rs semantics): slicing uses every committed file of the timeline;
  a file group shows the slice with the largest base instant <= T; the merged reader then skips
  log blocks whose instant time is > T (request times throughout, as Hudi's time travel does).
  Without T the latest slice is shown and every committed block is read.
- File groups replaced by a completed replacecommit requested at or before T (or at all, without
  T) are excluded.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from inlet.core.storage import FileInfo, Storage
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.instant import Action

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

    @property
    def is_cdc(self) -> bool:
        """A change-data-capture log (``.cdc``): not part of the table's records."""
        return self.name.endswith(".cdc")

    @property
    def sort_key(self) -> tuple[str, int, str]:
        """Order of logs within a slice: (deltacommit time, log version, write token)."""
        return (self.instant_time, self.version, self.write_token)


@dataclass
class FileSlice:
    partition: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: list[LogFile] = field(default_factory=list)  # ordered by LogFile.sort_key
    # CDC log files (``.cdc``) of the commits of this slice: no records of the table, but cleaned with it
    cdc_files: list[LogFile] = field(default_factory=list)

    @property
    def has_logs(self) -> bool:
        return bool(self.log_files)


@dataclass
class FileGroup:
    partition: str
    file_id: str
    base_files: list[BaseFile] = field(default_factory=list)  # visible ones, ascending by instant time
    slices: list[FileSlice] = field(default_factory=list)  # visible ones, ascending by base instant

    @property
    def latest(self) -> BaseFile | None:
        return self.base_files[-1] if self.base_files else None

    @property
    def latest_slice(self) -> FileSlice | None:
        return self.slices[-1] if self.slices else None


#: with more top-level directories than this, one listing of the whole table is cheaper than one each
PER_DIRECTORY_LISTING_MAX = 16


def list_data_files(storage: Storage) -> list[FileInfo]:
    """Every file of the table outside ``.hoodie``.

    The top level, then each top-level directory but ``.hoodie`` (whose timeline grows with every
    commit: listing it made a commit's listing grow with the table's age); with many top-level
    directories (partitions), one listing of everything.
    """
    files, dirs = storage.list_entries("")
    dirs = [d for d in dirs if d != ".hoodie"]
    if len(dirs) > PER_DIRECTORY_LISTING_MAX:
        return [
            f for f in storage.walk_files("") if not f.path.startswith(".hoodie/") and f.path != ".hoodie"
        ]
    files = [f for f in files if f.path != ".hoodie"]
    for d in dirs:
        files.extend(storage.walk_files(d))
    return files


def list_partition_files(storage: Storage, partitions: Iterable[str]) -> list[FileInfo]:
    """The files of only these partitions (``""``: a non-partitioned table's top level), one listing
    each: what a write needs, so that a commit's listing does not grow with the table's partitions."""
    files: list[FileInfo] = []
    for p in sorted(set(partitions)):
        files.extend(storage.walk_files(p) if p else storage.list_files(""))
    return files


def slice_file_group(
    partition: str,
    file_id: str,
    base_files: list[BaseFile],
    log_files: list[LogFile],
    completion_time: Callable[[LogFile], str | None] | None,
) -> list[FileSlice]:
    """The slices of one file group from its committed files (see the module docstring).

    ``completion_time`` gives a log's deltacommit completion time (timeline layout 2); None
    means layout 1, where a log file names its base instant.
    """
    slices: dict[str, FileSlice] = {}
    for bf in sorted(base_files, key=lambda b: b.instant_time):
        slices.setdefault(bf.instant_time, FileSlice(partition, file_id, bf.instant_time)).base_file = bf
    for lf in sorted(log_files, key=lambda f: f.sort_key):
        if completion_time is None:
            key = lf.instant_time
        else:
            completed = completion_time(lf)
            if completed is None:
                continue
            candidates = [k for k in slices if k <= completed]
            key = max(candidates) if candidates else lf.instant_time
        slices.setdefault(key, FileSlice(partition, file_id, key)).log_files.append(lf)
    return [slices[k] for k in sorted(slices)]


@dataclass(frozen=True)
class CommittedInstants:
    """:meth:`FileSystemView.is_committed` as plain values, so a read or write plan pickles to
    another process (a Spark executor); a log-block filter's predicate."""

    times: frozenset[str]
    archive_boundary: str | None = None

    @staticmethod
    def of(view: FileSystemView) -> CommittedInstants:
        return CommittedInstants(frozenset(view.completion_times), view.archive_boundary)

    def __call__(self, instant_time: str) -> bool:
        if instant_time in self.times:
            return True
        return self.archive_boundary is not None and instant_time < self.archive_boundary


class FileSystemView:
    """File groups and their slices visible at an instant (all completed writes if ``as_of`` is None)."""

    def __init__(
        self, timeline: Timeline, as_of: str | None = None, files: list[FileInfo] | None = None
    ) -> None:
        self.timeline = timeline
        self.as_of = as_of
        completed = timeline.completed_writes()
        writes = [i for i in completed if as_of is None or i.time <= as_of]
        self.visible_instants: set[str] = {i.time for i in writes}
        # request time -> completion time of every completed write (slicing uses the whole timeline)
        self.completion_times: dict[str, str] = {i.time: i.completion_time or i.time for i in completed}
        self.uses_completion_time = timeline.layout_version >= 2
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
        base_by_group: dict[tuple[str, str], list[BaseFile]] = {}
        logs_by_group: dict[tuple[str, str], list[LogFile]] = {}
        cdc_by_group: dict[tuple[str, str], list[LogFile]] = {}
        for info in files if files is not None else list_data_files(timeline.storage):
            bf = BaseFile.parse(info.path, info.size)
            if bf is not None:
                if self.is_committed(bf.instant_time):
                    base_by_group.setdefault((bf.partition, bf.file_id), []).append(bf)
                continue
            lf = LogFile.parse(info.path, info.size)
            if lf is not None:
                if lf.is_cdc:
                    if self.is_committed(lf.instant_time):
                        cdc_by_group.setdefault((lf.partition, lf.file_id), []).append(lf)
                    continue
                # layout 1 logs name their base instant: their blocks are checked one by one
                if not self.uses_completion_time or self.is_committed(lf.instant_time):
                    logs_by_group.setdefault((lf.partition, lf.file_id), []).append(lf)
                continue
            if posixpath.basename(info.path) == PARTITION_METADATA_FILE:
                self.partitions_seen.add(posixpath.dirname(info.path))
        completion = self._log_completion_time if self.uses_completion_time else None
        groups: dict[tuple[str, str], FileGroup] = {}
        for key in sorted(set(base_by_group) | set(logs_by_group)):
            partition, file_id = key
            slices = slice_file_group(
                partition, file_id, base_by_group.get(key, []), logs_by_group.get(key, []), completion
            )
            visible = [s for s in slices if self._slice_visible(s)]
            if not visible:
                continue
            for cdc in cdc_by_group.get(key, []):
                # a CDC file belongs to the slice its commit wrote (the base file of the same instant)
                written = [s for s in visible if s.base_instant <= cdc.instant_time]
                if written:
                    written[-1].cdc_files.append(cdc)
            base_files = [s.base_file for s in visible if s.base_file is not None]
            groups[key] = FileGroup(partition, file_id, base_files, visible)
        self.groups = groups

    def is_committed(self, instant_time: str) -> bool:
        """Whether files and log blocks of ``instant_time`` are committed (on the whole timeline)."""
        if instant_time in self.completion_times:
            return True
        return self.archive_boundary is not None and instant_time < self.archive_boundary

    def is_visible(self, instant_time: str) -> bool:
        """Whether data written by ``instant_time`` is visible to this view's reads."""
        return self.is_committed(instant_time) and (self.as_of is None or instant_time <= self.as_of)

    def _committed(self, instant_time: str) -> bool:
        return self.is_visible(instant_time)

    def _log_completion_time(self, lf: LogFile) -> str | None:
        done = self.completion_times.get(lf.instant_time)
        if done is not None:
            return done
        return lf.instant_time if self.is_committed(lf.instant_time) else None  # archived

    def _slice_visible(self, s: FileSlice) -> bool:
        if self.as_of is not None and s.base_instant > self.as_of:
            return False
        if s.base_file is not None:
            return True
        # a log-only slice: keyed by a committed deltacommit (layout 2), or on layout 1 by the
        # base instant its logs name, which must itself be committed
        return self.is_committed(s.base_instant)

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
        """The slice each file group shows at this view's instant (base file and/or log files)."""
        return [s for g in self.file_groups(partition) if (s := g.latest_slice) is not None]
