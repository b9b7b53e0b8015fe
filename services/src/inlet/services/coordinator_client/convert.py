"""Core commit types <-> ``inlet.proto.hudi.v1`` messages.

The round trip core -> proto -> core is lossless for what Inlet and Apache Hudi write, with two
limits of the proto3 contract: an empty ``log_files`` list or ``runtime_stats`` map comes back
as None (proto3 repeated/map fields cannot tell empty from absent), and an empty operation type
as None. Whether metadata is the replace form (``HoodieReplaceCommitMetadata``) follows from the
action: a ``replacecommit`` (or pending ``clustering``) always is, any other only when it names
replaced file ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from inlet.core.timeline.commit_metadata import CommitMetadata, WriteStat
from inlet.core.timeline.instant import Action, Instant, State
from inlet.proto.hudi.v1 import commit_pb2

_STATE_TO_PROTO = {
    State.REQUESTED: commit_pb2.INSTANT_STATE_REQUESTED,
    State.INFLIGHT: commit_pb2.INSTANT_STATE_INFLIGHT,
    State.COMPLETED: commit_pb2.INSTANT_STATE_COMPLETED,
}
_STATE_FROM_PROTO = {v: k for k, v in _STATE_TO_PROTO.items()}
REPLACE_ACTIONS = frozenset({Action.REPLACE_COMMIT, Action.CLUSTERING})

# WriteStat fields that are plain int64 numbers in both forms
_INT_FIELDS = (
    "num_writes",
    "num_deletes",
    "num_update_writes",
    "num_inserts",
    "total_write_bytes",
    "total_write_errors",
    "file_size_in_bytes",
    "total_log_records",
    "total_log_blocks",
    "total_log_files_compacted",
    "total_log_size_compacted",
    "total_updated_records_compacted",
    "total_rollback_blocks",
    "total_corrupt_log_block",
)
_Optional = Literal[
    "prev_base_file", "base_file", "log_version", "log_offset", "min_event_time", "max_event_time"
]
_OPTIONAL_FIELDS: tuple[_Optional, ...] = (
    "prev_base_file",
    "base_file",
    "log_version",
    "log_offset",
    "min_event_time",
    "max_event_time",
)


def instant_to_proto(instant: Instant) -> commit_pb2.Instant:
    return commit_pb2.Instant(
        instant_time=instant.time,
        action=instant.action,
        state=_STATE_TO_PROTO[instant.state],
        completion_time=instant.completion_time or "",
    )


def instant_from_proto(msg: commit_pb2.Instant) -> Instant:
    state = _STATE_FROM_PROTO.get(msg.state)
    if state is None:
        raise ValueError(f"instant {msg.instant_time} has no state")
    return Instant(msg.instant_time, msg.action, state, msg.completion_time or None)


def file_group_to_proto(partition: str, file_id: str) -> commit_pb2.FileGroupId:
    return commit_pb2.FileGroupId(partition_path=partition, file_id=file_id)


def file_groups_to_proto(groups: Iterable[tuple[str, str]]) -> list[commit_pb2.FileGroupId]:
    return [file_group_to_proto(p, f) for p, f in sorted(groups)]


def file_groups_from_proto(msgs: Iterable[commit_pb2.FileGroupId]) -> set[tuple[str, str]]:
    return {(m.partition_path, m.file_id) for m in msgs}


def write_stat_to_proto(stat: WriteStat) -> commit_pb2.WriteStat:
    msg = commit_pb2.WriteStat(
        file_id=stat.file_id,
        path=stat.path,
        partition_path=stat.partition_path,
        prev_commit=stat.prev_commit,
        log_files=list(stat.log_files or ()),
        runtime_stats=dict(stat.runtime_stats or {}),
        cdc_stats=dict(stat.cdc_stats or {}),
    )
    for name in _INT_FIELDS:
        setattr(msg, name, getattr(stat, name))
    for name in _OPTIONAL_FIELDS:
        value = getattr(stat, name)
        if value is not None:
            setattr(msg, name, value)
    return msg


def write_stat_from_proto(msg: commit_pb2.WriteStat) -> WriteStat:
    stat = WriteStat(
        file_id=msg.file_id,
        path=msg.path,
        partition_path=msg.partition_path,
        prev_commit=msg.prev_commit,
        log_files=list(msg.log_files) or None,
        runtime_stats=dict(msg.runtime_stats) or None,
        cdc_stats=dict(msg.cdc_stats) or None,
    )
    for name in _INT_FIELDS:
        setattr(stat, name, getattr(msg, name))
    for name in _OPTIONAL_FIELDS:
        if msg.HasField(name):
            setattr(stat, name, getattr(msg, name))
    return stat


def metadata_to_proto(md: CommitMetadata) -> commit_pb2.CommitMetadata:
    msg = commit_pb2.CommitMetadata(
        operation_type=md.operation_type or "",
        extra_metadata=dict(md.extra_metadata),
        compacted=md.compacted,
    )
    for partition, stats in md.partition_to_write_stats.items():
        msg.partition_to_write_stats[partition].stats.extend(write_stat_to_proto(s) for s in stats)
    for partition, ids in (md.partition_to_replace_file_ids or {}).items():
        msg.partition_to_replace_file_ids[partition].file_ids.extend(ids)
    return msg


def metadata_from_proto(msg: commit_pb2.CommitMetadata, action: str | None = None) -> CommitMetadata:
    """Core metadata of a message; ``action`` decides the replace form (see the module doc)."""
    replace: dict[str, list[str]] | None = {
        p: list(v.file_ids) for p, v in msg.partition_to_replace_file_ids.items()
    }
    if not replace and action not in REPLACE_ACTIONS:
        replace = None
    return CommitMetadata(
        partition_to_write_stats={
            p: [write_stat_from_proto(s) for s in v.stats] for p, v in msg.partition_to_write_stats.items()
        },
        extra_metadata=dict(msg.extra_metadata),
        operation_type=msg.operation_type or None,
        compacted=msg.compacted,
        partition_to_replace_file_ids=replace,
    )
