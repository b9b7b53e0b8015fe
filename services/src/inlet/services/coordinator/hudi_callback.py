"""Apache Hudi's commit-callback message, built from a ``CommitEvent``, and its HTTP delivery.

Apache Hudi's write client, when ``hoodie.write.commit.callback.on=true``, hands a
``HoodieWriteCommitCallbackMessage`` to ``HoodieWriteCommitKafkaCallback`` (Kafka, record key = table
name) or ``HoodieWriteCommitHttpCallback`` (HTTP POST); both send it as the JSON Jackson makes of the
message's getters:

- ``commitTime``: the instant (requested) time, ``tableName``, ``basePath``;
- ``hoodieWriteStat``: every ``HoodieWriteStat`` of the commit, with Jackson's names of its getters
  (``fileId``, ``path``, ``prevCommit``, ``numWrites``, ``numDeletes``, ``numUpdateWrites``,
  ``numInserts``, ``totalWriteBytes``, ``partitionPath``, ``fileSizeInBytes``, ...; MOR delta stats add
  ``logVersion``, ``logOffset``, ``baseFile``, ``logFiles``);
- since Hudi 1.x ``commitActionType`` (``commit``, ``deltacommit``, ``replacecommit``...) and
  ``extraMetadata`` (the commit's extra metadata: ``schema``, checkpoints...).

One deliberate difference: Hudi declares the last two as its own ``Option`` type, which a plain
Jackson ``ObjectMapper`` serialises as ``{"present": true}`` (the value is lost). Here they carry the
value itself - a string and a JSON object - which is what a subscriber can use.

The HTTP delivery follows ``HoodieWriteCommitHttpCallbackClient``: POST with ``Content-Type:
application/json``, the API key in header ``HUDI-CALLBACK-KEY`` (default
``hudi_write_commit_http_callback``, config ``hoodie.write.commit.callback.http.api.key``), optional
custom headers, a timeout of 3 s by default.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from inlet.proto.events.v1 import events_pb2
from inlet.proto.hudi.v1 import commit_pb2

HTTP_API_KEY_HEADER = "HUDI-CALLBACK-KEY"
DEFAULT_HTTP_API_KEY = "hudi_write_commit_http_callback"
DEFAULT_HTTP_TIMEOUT_S = 3.0
JSON_CONTENT_TYPE = "application/json"

# proto field -> Hudi (Jackson) property, for the int64 counters every HoodieWriteStat carries
_COUNTERS = (
    ("num_writes", "numWrites"),
    ("num_deletes", "numDeletes"),
    ("num_update_writes", "numUpdateWrites"),
    ("num_inserts", "numInserts"),
    ("total_write_bytes", "totalWriteBytes"),
    ("total_write_errors", "totalWriteErrors"),
    ("total_log_records", "totalLogRecords"),
    ("total_log_files_compacted", "totalLogFilesCompacted"),
    ("total_log_size_compacted", "totalLogSizeCompacted"),
    ("total_updated_records_compacted", "totalUpdatedRecordsCompacted"),
    ("total_log_blocks", "totalLogBlocks"),
    ("total_corrupt_log_block", "totalCorruptLogBlock"),
    ("total_rollback_blocks", "totalRollbackBlocks"),
    ("file_size_in_bytes", "fileSizeInBytes"),
)


def write_stat_json(stat: commit_pb2.WriteStat) -> dict[str, Any]:
    """One ``HoodieWriteStat`` (or ``HoodieDeltaWriteStat`` for log writes) as Hudi's JSON object."""
    out: dict[str, Any] = {
        "fileId": stat.file_id,
        "path": stat.path,
        "cdcStats": dict(stat.cdc_stats) if stat.cdc_stats else None,
        "prevCommit": stat.prev_commit,
        "tempPath": None,
        "partitionPath": stat.partition_path,
    }
    for field, name in _COUNTERS:
        out[name] = getattr(stat, field)
    out["minEventTime"] = stat.min_event_time if stat.HasField("min_event_time") else None
    out["maxEventTime"] = stat.max_event_time if stat.HasField("max_event_time") else None
    out["runtimeStats"] = dict(stat.runtime_stats) if stat.runtime_stats else None
    if stat.HasField("prev_base_file"):
        out["prevBaseFile"] = stat.prev_base_file
    is_delta = stat.HasField("log_version") or stat.HasField("log_offset") or len(stat.log_files) > 0
    if is_delta:
        out["logVersion"] = stat.log_version
        out["logOffset"] = stat.log_offset
        out["baseFile"] = stat.base_file if stat.HasField("base_file") else None
        out["logFiles"] = list(stat.log_files)
    return out


def callback_message(event: events_pb2.CommitEvent) -> dict[str, Any]:
    """The ``HoodieWriteCommitCallbackMessage`` of one committed instant, as a JSON-ready dict."""
    stats = [
        write_stat_json(stat)
        for partition in sorted(event.metadata.partition_to_write_stats)
        for stat in event.metadata.partition_to_write_stats[partition].stats
    ]
    return {
        "commitTime": event.instant.instant_time,
        "tableName": event.table_name,
        "basePath": event.base_path,
        "hoodieWriteStat": stats,
        "commitActionType": event.instant.action or None,
        "extraMetadata": dict(event.metadata.extra_metadata),
    }


def callback_json(event: events_pb2.CommitEvent) -> str:
    """The callback message serialised as compact JSON (what Hudi puts on Kafka / POSTs)."""
    return json.dumps(callback_message(event), separators=(",", ":"), ensure_ascii=False)


# like Hudi's HttpClientBuilder.create(): no proxy taken from the environment
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HttpCallbackError(RuntimeError):
    """The callback endpoint could not be reached or answered with an error status."""


def post_callback(
    url: str,
    body: str,
    *,
    api_key: str = DEFAULT_HTTP_API_KEY,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
) -> int:
    """POST ``body`` to ``url`` as Hudi's HTTP callback does; returns the status, raises on >= 300."""
    request = urllib.request.Request(url, data=body.encode(), method="POST")
    request.add_header("Content-Type", JSON_CONTENT_TYPE)
    request.add_header(HTTP_API_KEY_HEADER, api_key)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            status: int = response.status
    except urllib.error.HTTPError as exc:
        raise HttpCallbackError(f"callback POST to {url} answered {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise HttpCallbackError(f"callback POST to {url} failed: {exc}") from exc
    if status >= 300:
        raise HttpCallbackError(f"callback POST to {url} answered {status}")
    return status
