"""What a committed write or table service returns to its caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inlet.core.timeline.commit_metadata import CommitMetadata


@dataclass(frozen=True)
class CommitResult:
    """What one write committed."""

    instant_time: str
    completion_time: str
    action: str
    operation: str
    metadata: CommitMetadata

    @property
    def num_inserts(self) -> int:
        return sum(s.num_inserts for s in self.metadata.write_stats())

    @property
    def num_updates(self) -> int:
        return sum(s.num_update_writes for s in self.metadata.write_stats())

    @property
    def num_deletes(self) -> int:
        return sum(s.num_deletes for s in self.metadata.write_stats())

    @property
    def files_written(self) -> list[str]:
        return [s.path for s in self.metadata.write_stats() if s.path]

    def summary(self) -> dict[str, Any]:
        return {
            "instant": self.instant_time,
            "completion_time": self.completion_time,
            "action": self.action,
            "operation": self.operation,
            "inserts": self.num_inserts,
            "updates": self.num_updates,
            "deletes": self.num_deletes,
            "files": len(self.files_written),
            "replaced_file_groups": sum(
                len(v) for v in (self.metadata.partition_to_replace_file_ids or {}).values()
            ),
        }
