"""Commit metadata of completed write instants (``HoodieCommitMetadata`` and the replace form)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from inlet.core import avro
from inlet.core.errors import CorruptFileError

SCHEMA_KEY = "schema"  # extraMetadata key of the writer's Avro schema (HoodieCommitMetadata.SCHEMA_KEY)
NULL_COMMIT = "null"  # Hudi writes the string "null" as prevCommit of a new file group


@dataclass
class WriteStat:
    """One file written by an instant (Hudi's ``HoodieWriteStat``)."""

    file_id: str
    path: str
    partition_path: str
    prev_commit: str = NULL_COMMIT
    num_writes: int = 0
    num_deletes: int = 0
    num_update_writes: int = 0
    num_inserts: int = 0
    total_write_bytes: int = 0
    total_write_errors: int = 0
    file_size_in_bytes: int = 0
    prev_base_file: str | None = None
    base_file: str | None = None
    log_files: list[str] | None = None
    total_log_records: int = 0
    total_log_blocks: int = 0
    total_log_files_compacted: int = 0
    total_log_size_compacted: int = 0
    total_updated_records_compacted: int = 0
    total_rollback_blocks: int = 0
    total_corrupt_log_block: int = 0
    log_version: int | None = None
    log_offset: int | None = None
    min_event_time: int | None = None
    max_event_time: int | None = None
    runtime_stats: dict[str, int] | None = None
    # CDC log files written beside the data file: path (relative to the table) -> size in bytes
    cdc_stats: dict[str, int] | None = None

    def files(self) -> list[str]:
        """The files this stat names: the data file and its CDC log files."""
        return [self.path, *(self.cdc_stats or {})]

    def to_avro(self) -> dict[str, Any]:
        return {
            "fileId": self.file_id,
            "path": self.path,
            "prevCommit": self.prev_commit,
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": self.total_write_errors,
            "partitionPath": self.partition_path,
            "totalLogRecords": self.total_log_records,
            "totalLogFiles": None,
            "totalUpdatedRecordsCompacted": self.total_updated_records_compacted,
            "numInserts": self.num_inserts,
            "totalLogBlocks": self.total_log_blocks,
            "totalCorruptLogBlock": self.total_corrupt_log_block,
            "totalRollbackBlocks": self.total_rollback_blocks,
            "fileSizeInBytes": self.file_size_in_bytes,
            "logVersion": self.log_version,
            "logOffset": self.log_offset,
            "baseFile": self.base_file,
            "logFiles": self.log_files,
            "cdcStats": dict(self.cdc_stats) if self.cdc_stats else None,
            "prevBaseFile": self.prev_base_file,
            "minEventTime": self.min_event_time,
            "maxEventTime": self.max_event_time,
            "runtimeStats": self.runtime_stats,
            "totalLogFilesCompacted": self.total_log_files_compacted,
            "totalLogReadTimeMs": 0,
            "totalLogSizeCompacted": self.total_log_size_compacted,
            "tempPath": None,
            "numUpdates": 0,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], partition: str) -> WriteStat:
        def num(key: str) -> int:
            v = d.get(key)
            return int(v) if v is not None else 0

        return cls(
            file_id=d.get("fileId") or "",
            path=d.get("path") or "",
            partition_path=str(d["partitionPath"]) if d.get("partitionPath") is not None else partition,
            prev_commit=d.get("prevCommit") or NULL_COMMIT,
            num_writes=num("numWrites"),
            num_deletes=num("numDeletes"),
            num_update_writes=num("numUpdateWrites"),
            num_inserts=num("numInserts"),
            total_write_bytes=num("totalWriteBytes"),
            total_write_errors=num("totalWriteErrors"),
            file_size_in_bytes=num("fileSizeInBytes"),
            prev_base_file=d.get("prevBaseFile"),
            base_file=d.get("baseFile"),
            log_files=list(d["logFiles"]) if d.get("logFiles") is not None else None,
            total_log_records=num("totalLogRecords"),
            total_log_blocks=num("totalLogBlocks"),
            total_log_files_compacted=num("totalLogFilesCompacted"),
            total_log_size_compacted=num("totalLogSizeCompacted"),
            total_updated_records_compacted=num("totalUpdatedRecordsCompacted"),
            total_rollback_blocks=num("totalRollbackBlocks"),
            total_corrupt_log_block=num("totalCorruptLogBlock"),
            log_version=d.get("logVersion"),
            log_offset=d.get("logOffset"),
            cdc_stats={str(k): int(v) for k, v in d["cdcStats"].items()} if d.get("cdcStats") else None,
        )


@dataclass
class CommitMetadata:
    """``HoodieCommitMetadata``; with ``partition_to_replace_file_ids`` the replace form."""

    partition_to_write_stats: dict[str, list[WriteStat]] = field(default_factory=dict)
    extra_metadata: dict[str, str] = field(default_factory=dict)
    operation_type: str | None = None
    compacted: bool = False
    partition_to_replace_file_ids: dict[str, list[str]] | None = None

    @property
    def is_replace(self) -> bool:
        return self.partition_to_replace_file_ids is not None

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partition_to_write_stats.values() for s in stats]

    def add(self, stat: WriteStat) -> None:
        self.partition_to_write_stats.setdefault(stat.partition_path, []).append(stat)

    @property
    def schema(self) -> str | None:
        return self.extra_metadata.get(SCHEMA_KEY)

    def touched_file_groups(self) -> set[tuple[str, str]]:
        """(partition, file id) of every file group this commit wrote or replaced."""
        out = {(s.partition_path, s.file_id) for s in self.write_stats() if s.file_id}
        for p, ids in (self.partition_to_replace_file_ids or {}).items():
            out.update((p, i) for i in ids)
        return out

    def to_avro_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "partitionToWriteStats": {
                p: [s.to_avro() for s in stats] for p, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "version": 1,
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids is not None:
            rec["partitionToReplaceFileIds"] = {
                p: list(v) for p, v in self.partition_to_replace_file_ids.items()
            }
        return rec

    def to_bytes(self) -> bytes:
        name = "HoodieReplaceCommitMetadata" if self.is_replace else "HoodieCommitMetadata"
        return avro.encode(name, self.to_avro_record())

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> CommitMetadata:
        stats = {
            p: [WriteStat.from_dict(s, p) for s in (lst or [])]
            for p, lst in (rec.get("partitionToWriteStats") or {}).items()
        }
        replace = rec.get("partitionToReplaceFileIds")
        return cls(
            partition_to_write_stats=stats,
            extra_metadata=dict(rec.get("extraMetadata") or {}),
            operation_type=rec.get("operationType"),
            compacted=bool(rec.get("compacted") or False),
            partition_to_replace_file_ids={p: list(v or []) for p, v in replace.items()} if replace else None,
        )

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "commit metadata") -> CommitMetadata:
        """Decode Avro (table version >= 8) or JSON (table version <= 6) commit metadata."""
        if not data:
            return cls()
        if data[:4] == b"Obj\x01":
            return cls.from_record(avro.decode(data, what))
        try:
            rec = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptFileError(f"cannot decode {what}: neither Avro nor JSON") from e
        if not isinstance(rec, dict):
            raise CorruptFileError(f"cannot decode {what}: not a JSON object")
        return cls.from_record(rec)
