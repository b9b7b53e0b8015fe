"""The archived timeline of table version 8: Apache Hudi's LSM timeline under ``.hoodie/timeline/history/``.

Layout (Hudi's ``LSMTimeline`` / ``LSMTimelineWriter`` / ``HoodieLSMTimelineManifest``):

- Data files ``${min}_${max}_${layer}.parquet``: one row per archived instant (Avro record
  ``HoodieLSMTimelineInstant``: ``instantTime``, ``completionTime``, ``action`` of the completed
  instant, ``metadata`` = bytes of the completed instant file, ``plan`` = bytes of the plan the
  action was requested with, ``version`` = 1), written by parquet-avro without Hudi meta fields.
  ``min``/``max`` are the first and last instant times in the file; rows are in instant-time order.
- ``manifest_${N}``: the files of snapshot version N, Jackson pretty-printed JSON
  ``{"files" : [ {"fileName" : ..., "fileLen" : ...}, ... ]}``.
- ``_version_``: the latest snapshot version N as decimal text. A reader takes it, or, if it is
  missing or unreadable, the largest N of the ``manifest_N`` files.

Writing a batch (``LSMTimelineWriter.write``): the new layer-0 file, then ``manifest_{N+1}`` (the
latest manifest's files plus the new one), then ``_version_``. A file whose name is already in
the latest manifest is not written again (an interrupted archive that got that far); one that
exists but is not in the manifest was left half-written and is replaced.

Compaction (``LSMTimelineWriter.compactAndClean``): while a layer holds at least
``hoodie.timeline.compaction.batch.size`` files, its oldest ones (by file name; at most that many,
at least two, under 1 GiB together) are merged into one file of the next layer
(``${min of mins}_${max of maxes}_${layer+1}.parquet``) and a new manifest replaces them by it.
Then the clean: if more than ``3 + compacted layers`` manifests exist, older manifests go, and so
does every data file none of the kept manifests names.

Inlet writes each file to a temporary name and renames it, so a crash leaves either no file or a
whole one; everything else (names, JSON, row layout, footer schema) is Hudi's.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from inlet.core import faults
from inlet.core.errors import CorruptFileError, InstantNotFoundError
from inlet.core.storage import Storage
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant, State, normalize_instant_time

log = logging.getLogger(__name__)

VERSION_FILE = "_version_"
MANIFEST_PREFIX = "manifest_"
MANIFEST_RE = re.compile(r"manifest_(\d+)")
# Hudi's ARCHIVE_FILE_PATTERN, matched whole (Matcher.matches): the layer is one digit
DATA_FILE_RE = re.compile(r"(\d+)_(\d+)_(\d)\.parquet")
LSM_TIMELINE_INSTANT_VERSION = 1  # LSMTimeline.LSM_TIMELINE_INSTANT_VERSION_1
DEFAULT_COMPACTION_BATCH_SIZE = 10  # hoodie.timeline.compaction.batch.size
COMPACTION_TARGET_MAX_BYTES = 1024 * 1024 * 1024  # getCandidateFiles: at most 1 GB per compaction
RETAINED_MANIFEST_VERSIONS = 3  # LSMTimelineWriter.clean keeps 3 (+ compacted layers) versions


def _avro_schema_json() -> str:
    """The writer schema parquet-avro records in the footer: Avro's ``Schema.toString()`` of the
    generated ``HoodieLSMTimelineInstant`` class (compact JSON, Hudi's avsc key order)."""
    text = resources.files("inlet.core.avro").joinpath("HoodieLSMTimelineInstant.avsc").read_text("utf-8")
    return json.dumps(json.loads(text), separators=(",", ":"))


AVRO_SCHEMA_JSON = _avro_schema_json()
# the Parquet schema parquet-avro's AvroSchemaConverter derives from that Avro schema:
# optional binary (STRING) x3, optional binary x2, required int32
ARROW_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ]
)
FOOTER = {"parquet.avro.schema": AVRO_SCHEMA_JSON, "writer.model.name": "avro"}


def history_dir(timeline_dir: str, history_path: str = "history") -> str:
    """``.hoodie/<hoodie.timeline.path>/<hoodie.timeline.history.path>``."""
    return posixpath.join(timeline_dir, history_path)


def data_file_name(min_instant: str, max_instant: str, layer: int) -> str:
    """``LSMTimelineWriter.newFileName``."""
    return f"{min_instant}_{max_instant}_{layer}.parquet"


def file_layer(name: str) -> int:
    """``LSMTimeline.getFileLayer`` (0 for a name that does not match)."""
    m = DATA_FILE_RE.fullmatch(name)
    return int(m[3]) if m else 0


def file_range(name: str) -> tuple[str, str]:
    """(min, max) instant time of a data file, from its name."""
    m = DATA_FILE_RE.fullmatch(name)
    if not m:
        raise CorruptFileError(f"unexpected archived timeline file name {name!r}")
    return m[1], m[2]


def compacted_file_name(files: Sequence[str]) -> str:
    """``LSMTimelineWriter.compactedFileName``: the span of the inputs, one layer down."""
    ranges = [file_range(f) for f in files]
    return data_file_name(min(r[0] for r in ranges), max(r[1] for r in ranges), file_layer(files[0]) + 1)


# ------------------------------------------------------------------------------------ manifest


@dataclass(frozen=True)
class ManifestEntry:
    file_name: str
    file_len: int


@dataclass(frozen=True)
class Manifest:
    """``HoodieLSMTimelineManifest``: the data files of one snapshot version."""

    files: tuple[ManifestEntry, ...] = ()

    @property
    def file_names(self) -> list[str]:
        return [f.file_name for f in self.files]

    def without(self, names: Iterable[str]) -> Manifest:
        drop = set(names)
        return Manifest(tuple(f for f in self.files if f.file_name not in drop))

    def with_file(self, entry: ManifestEntry) -> Manifest:
        return Manifest((*self.files, entry))

    def to_json(self) -> str:
        """Jackson's ``writerWithDefaultPrettyPrinter()`` output (two-space indents, ``" : "``,
        arrays on one line with ``[ {`` ... ``}, {`` ... ``} ]``), no trailing newline."""
        if not self.files:
            return '{\n  "files" : [ ]\n}'
        entries = ", ".join(
            f'{{\n    "fileName" : {json.dumps(f.file_name)},\n    "fileLen" : {f.file_len}\n  }}'
            for f in self.files
        )
        return '{\n  "files" : [ ' + entries + " ]\n}"

    @staticmethod
    def from_json(text: str, what: str = "manifest") -> Manifest:
        if not text.strip():
            return Manifest()  # HoodieLSMTimelineManifest.fromJsonString: empty -> no files
        try:
            doc = json.loads(text)
            files = tuple(
                ManifestEntry(str(f["fileName"]), int(f["fileLen"])) for f in doc.get("files") or []
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"cannot decode archived timeline {what}: {e}") from e
        return Manifest(files)


# -------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class ArchivedRecord:
    """One ``HoodieLSMTimelineInstant`` row."""

    instant_time: str
    completion_time: str | None
    action: str
    metadata: bytes | None = None
    plan: bytes | None = None
    version: int = LSM_TIMELINE_INSTANT_VERSION

    @property
    def instant(self) -> Instant:
        return Instant(self.instant_time, self.action, State.COMPLETED, self.completion_time)

    def to_row(self) -> dict[str, Any]:
        return {
            "instantTime": self.instant_time,
            "completionTime": self.completion_time,
            "action": self.action,
            "metadata": self.metadata,
            "plan": self.plan,
            "version": self.version,
        }


def records_to_parquet(records: Sequence[ArchivedRecord], compression: str = "gzip") -> bytes:
    """A data file as parquet-avro writes it: the Avro writer schema in the footer
    (``parquet.avro.schema``, ``writer.model.name``) and no Arrow schema."""
    table = pa.Table.from_pylist([r.to_row() for r in records], schema=ARROW_SCHEMA)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, ARROW_SCHEMA, compression=compression, store_schema=False) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata(FOOTER)
    return buf.getvalue()


def records_from_table(table: pa.Table) -> list[ArchivedRecord]:
    cols = set(table.column_names)
    out = []
    for row in table.to_pylist():
        t = row.get("instantTime")
        if not t:
            continue
        out.append(
            ArchivedRecord(
                t,
                row.get("completionTime"),
                row.get("action") or "",
                row.get("metadata") if "metadata" in cols else None,
                row.get("plan") if "plan" in cols else None,
                row.get("version") or LSM_TIMELINE_INSTANT_VERSION,
            )
        )
    return out


# --------------------------------------------------------------------------------- LSM storage


class LSMTimeline:
    """Reads and writes the files of one LSM timeline directory (``LSMTimeline`` + writer)."""

    def __init__(self, storage: Storage, directory: str, compression: str = "gzip") -> None:
        self.storage = storage
        self.dir = directory
        self.compression = compression

    def _path(self, name: str) -> str:
        return posixpath.join(self.dir, name)

    # -- versions and manifests

    def all_versions(self) -> list[int]:
        """``LSMTimeline.allSnapshotVersions``: N of every ``manifest_N``."""
        out = []
        for info in self.storage.list_files(self.dir):
            m = MANIFEST_RE.fullmatch(posixpath.basename(info.path))
            if m:
                out.append(int(m[1]))
        return out

    def latest_version(self) -> int:
        """``LSMTimeline.latestSnapshotVersion``: ``_version_``, else the largest manifest; -1: none."""
        path = self._path(VERSION_FILE)
        try:
            if self.storage.exists(path):
                return int(self.storage.read_bytes(path).decode("utf-8").strip())
        except Exception as e:  # unreadable or malformed: fall back to the listing, like Hudi
            log.warning("cannot read %s (%s); listing the manifests instead", path, e)
        versions = self.all_versions()
        return max(versions) if versions else -1

    def manifest(self, version: int | None = None) -> Manifest:
        v = self.latest_version() if version is None else version
        if v < 0:
            return Manifest()
        name = f"{MANIFEST_PREFIX}{v}"
        return Manifest.from_json(self.storage.read_bytes(self._path(name)).decode("utf-8"), name)

    def _write_manifest(self, manifest: Manifest, current_version: int) -> int:
        """``createManifestFile`` + ``updateVersionFile``: ``manifest_{N+1}``, then ``_version_``."""
        new_version = 1 if current_version < 0 else current_version + 1
        # a manifest of this number left by a run that died before its version file is replaced
        self.storage.write_atomic(self._path(f"{MANIFEST_PREFIX}{new_version}"), manifest.to_json().encode())
        faults.crash_point(faults.ARCHIVE_AFTER_MANIFEST)
        self.storage.write_atomic(self._path(VERSION_FILE), str(new_version).encode())
        return new_version

    def update_manifest(self, files_to_remove: Sequence[str], file_to_add: str, file_len: int) -> int:
        """``LSMTimelineWriter.updateManifest``: the latest manifest minus ``files_to_remove``, plus
        the new file, as the next version. Returns that version."""
        version = self.latest_version()
        manifest = (
            self.manifest(version).without(files_to_remove).with_file(ManifestEntry(file_to_add, file_len))
        )
        return self._write_manifest(manifest, version)

    # -- data files

    def read_file(self, name: str, columns: list[str] | None = None) -> list[ArchivedRecord]:
        try:
            table = self.storage.read_parquet(self._path(name), columns=columns)
        except Exception as e:  # pyarrow raises several types for truncated or foreign files
            raise CorruptFileError(f"cannot read archived timeline file {name}: {e}") from e
        return records_from_table(table)

    def _write_data_file(self, name: str, records: Sequence[ArchivedRecord]) -> int:
        data = records_to_parquet(records, self.compression)
        self.storage.write_atomic(self._path(name), data)
        return len(data)

    def write(self, records: Sequence[ArchivedRecord]) -> str | None:
        """``LSMTimelineWriter.write``: a layer-0 file of ``records`` (sorted by instant time) and
        the manifest and version naming it. Returns the file name, or None if that file was
        already committed by an earlier run."""
        if not records:
            raise ValueError("the instants to archive must not be empty")
        rows = sorted(records, key=lambda r: r.instant_time)
        name = data_file_name(rows[0].instant_time, rows[-1].instant_time, 0)
        if self.storage.exists(self._path(name)):
            if name in self.manifest().file_names:
                log.info("skip archiving into %s: an earlier run committed it", name)
                return None
            self.storage.delete(self._path(name))  # left half-done by a failed run
        size = self._write_data_file(name, rows)
        faults.crash_point(faults.ARCHIVE_AFTER_DATA_FILE)
        self.update_manifest([], name, size)
        return name

    # -- compaction and cleaning

    def compact_and_clean(self, batch_size: int = DEFAULT_COMPACTION_BATCH_SIZE) -> list[str]:
        """``LSMTimelineWriter.compactAndClean``: compact layer 0, then each next layer while the
        previous one produced a file; then clean. Returns the compacted files written."""
        manifest = self.manifest()
        written: list[str] = []
        layer = 0
        name = self._compact_layer(manifest, layer, batch_size)
        while name is not None:
            written.append(name)
            # like Hudi, the next layer is judged on the manifest read before plus the new file
            manifest = manifest.with_file(ManifestEntry(name, 0))
            layer += 1
            name = self._compact_layer(manifest, layer, batch_size)
        self.clean(layer)
        return written

    def _compact_layer(self, manifest: Manifest, layer: int, batch_size: int) -> str | None:
        files = sorted(
            (f for f in manifest.files if file_layer(f.file_name) == layer), key=lambda f: f.file_name
        )
        if len(files) < batch_size:
            return None
        candidates = _candidate_files(files, batch_size)
        if len(candidates) < 2:
            return None
        name = compacted_file_name(candidates)
        records: list[ArchivedRecord] = []
        for f in candidates:
            records.extend(self.read_file(f))
        path = self._path(name)
        if self.storage.exists(path):
            self.storage.delete(path)  # a compaction that died before its manifest
        size = self._write_data_file(name, records)
        faults.crash_point(faults.ARCHIVE_AFTER_COMPACTED_FILE)
        self.update_manifest(candidates, name, size)
        log.info("compacted archived timeline files %s into %s", candidates, name)
        return name

    def clean(self, compacted_layers: int) -> list[str]:
        """``LSMTimelineWriter.clean``: keep the newest ``3 + compacted_layers`` manifests and the
        data files they name; delete older manifests first, then unreferenced data files."""
        versions = sorted(self.all_versions(), reverse=True)
        keep_n = RETAINED_MANIFEST_VERSIONS + compacted_layers
        if len(versions) <= keep_n:
            return []
        kept = versions[:keep_n]
        keep_files: set[str] = set()
        for v in kept:
            keep_files.update(self.manifest(v).file_names)
        deleted = []
        for v in versions[keep_n:]:
            name = f"{MANIFEST_PREFIX}{v}"
            self.storage.delete(self._path(name))
            deleted.append(name)
        for info in self.storage.list_files(self.dir):
            base = posixpath.basename(info.path)
            if base.endswith(".parquet") and base not in keep_files:
                self.storage.delete(info.path)
                deleted.append(base)
        return deleted


def _candidate_files(files: Sequence[ManifestEntry], batch: int) -> list[str]:
    """``LSMTimelineWriter.getCandidateFiles``: consecutive files, at most ``batch``, at least
    two, stopping once their total size passes the target (a lone large file is skipped)."""
    candidates: list[str] = []
    total = 0
    for f in files:
        total += f.file_len
        candidates.append(f.file_name)
        if len(candidates) >= batch:
            break
        if total > COMPACTION_TARGET_MAX_BYTES:
            if len(candidates) < 2:
                total = 0
                candidates.clear()
            else:
                break
    return candidates


# ----------------------------------------------------------------------------------- the reader


@dataclass
class ArchivedTimeline:
    """The instants of the LSM archived timeline (latest snapshot version), read-only.

    ``start``/``end`` (inclusive instant times) limit which data files are read, by the time
    range in their names (Hudi's ``TimeRangeFilter``). An instant archived twice (a rerun after
    a crash, or a file both in a layer and its compaction) is returned once.
    """

    storage: Storage
    dir: str
    start: str | None = None
    end: str | None = None
    _records: dict[tuple[str, str], ArchivedRecord] | None = field(default=None, repr=False)

    @classmethod
    def load(
        cls,
        storage: Storage,
        layout_version: int = 2,
        timeline_path: str = "timeline",
        history_path: str = "history",
        start: str | None = None,
        end: str | None = None,
    ) -> ArchivedTimeline:
        if layout_version < 2:
            raise CorruptFileError(
                "the LSM archived timeline exists from timeline layout 2 (table version 8)"
            )
        tdir = posixpath.join(".hoodie", timeline_path)
        return cls(
            storage,
            history_dir(tdir, history_path),
            normalize_instant_time(start) if start else None,
            normalize_instant_time(end) if end else None,
        )

    @cached_property
    def lsm(self) -> LSMTimeline:
        return LSMTimeline(self.storage, self.dir)

    @cached_property
    def manifest(self) -> Manifest:
        return self.lsm.manifest()

    def _in_range(self, name: str) -> bool:
        lo, hi = file_range(name)
        return (self.start is None or hi >= self.start) and (self.end is None or lo <= self.end)

    @property
    def records(self) -> dict[tuple[str, str], ArchivedRecord]:
        if self._records is None:
            out: dict[tuple[str, str], ArchivedRecord] = {}
            for name in sorted(self.manifest.file_names):
                if not self._in_range(name):
                    continue
                for rec in self.lsm.read_file(name):
                    if (self.start is None or rec.instant_time >= self.start) and (
                        self.end is None or rec.instant_time <= self.end
                    ):
                        out.setdefault((rec.instant_time, rec.action), rec)
            self._records = dict(sorted(out.items()))
        return self._records

    @property
    def instants(self) -> list[Instant]:
        """Every archived instant (completed, with its completion time), by requested time."""
        return [r.instant for r in self.records.values()]

    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.records)

    def times(self) -> set[str]:
        return {t for t, _ in self.records}

    def completion_times(self) -> dict[str, str]:
        """Requested time -> completion time of every archived instant (for file slicing)."""
        return {r.instant_time: r.completion_time or r.instant_time for r in self.records.values()}

    def record(self, instant: Instant | str) -> ArchivedRecord:
        t = normalize_instant_time(instant if isinstance(instant, str) else instant.time)
        for (time, action), rec in self.records.items():
            if time == t and (isinstance(instant, str) or action == instant.action):
                return rec
        raise InstantNotFoundError(f"instant {t} is not on the archived timeline")

    def metadata_bytes(self, instant: Instant | str) -> bytes | None:
        """The completed instant file's bytes, as archived (None: it was empty)."""
        return self.record(instant).metadata

    def plan_bytes(self, instant: Instant | str) -> bytes | None:
        """The requested plan's bytes (clean, compaction, clustering/replace), as archived."""
        return self.record(instant).plan

    def commit_metadata(self, instant: Instant | str) -> CommitMetadata:
        rec = self.record(instant)
        return CommitMetadata.from_bytes(rec.metadata or b"", f"archived instant {rec.instant_time}")
