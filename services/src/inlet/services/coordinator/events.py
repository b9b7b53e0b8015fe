"""The ``CommitEvent`` (``inlet.proto.events.v1``) announced for each completed instant."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import timestamp_pb2

from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Instant, parse_instant_time
from inlet.proto.events.v1 import events_pb2
from inlet.services.coordinator_client import convert


@dataclass(frozen=True)
class TableInfo:
    """What an event says about its table."""

    table_id: str
    table_name: str
    base_path: str
    table_type: str


def event_id(table_id: str, instant_time: str) -> str:
    return f"{table_id}/{instant_time}"


def commit_event(
    table: TableInfo, instant: Instant, metadata: CommitMetadata | None, sequence: int
) -> events_pb2.CommitEvent:
    """The event of a completed instant; ``metadata`` is None for table services without write stats.

    ``committed_at`` is the completion time (the timeline's time zone is UTC for Inlet tables).
    """
    if not instant.is_completed or not instant.completion_time:
        raise ValueError(f"instant {instant.time} is not completed")
    committed = timestamp_pb2.Timestamp()
    committed.FromDatetime(parse_instant_time(instant.completion_time))
    event = events_pb2.CommitEvent(
        event_id=event_id(table.table_id, instant.time),
        table_id=table.table_id,
        table_name=table.table_name,
        base_path=table.base_path,
        table_type=table.table_type,
        instant=convert.instant_to_proto(instant),
        sequence=sequence,
        committed_at=committed,
    )
    if metadata is not None:
        stats = metadata.write_stats()
        event.metadata.CopyFrom(convert.metadata_to_proto(metadata))
        event.num_inserts = sum(s.num_inserts for s in stats)
        event.num_updates = sum(s.num_update_writes for s in stats)
        event.num_deletes = sum(s.num_deletes for s in stats)
        event.num_files = sum(1 for s in stats if s.path)
    return event
