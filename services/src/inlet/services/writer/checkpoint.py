"""The Kafka checkpoint a commit carries, in Apache Hudi Streamer's format, and finding it again.

Apache Hudi's Kafka sources keep their position in the commit's extraMetadata under
``deltastreamer.checkpoint.key`` (``StreamerCheckpointV1.STREAMER_CHECKPOINT_KEY_V1``) as
``KafkaOffsetGen.CheckpointUtils.offsetsToStr``: ``<topic>,<partition>:<untilOffset>,...``, where
``untilOffset`` is exclusive, i.e. the next offset to read. Kafka sources stay on checkpoint V1 on
table version 8 too (only the Hudi-incremental sources move to ``streamer.checkpoint.key.v2``,
whose value is an instant time, not offsets), and ``CheckpointUtils.getCheckpoint`` reads V1 when
no V2 key is present, so this is what Hudi 1.x reads back.

Inlet adds ``inlet.kafka.offset.ranges`` (``<topic>,<partition>:<from>-<until>,...``): the offsets
the commit actually consumed, for audits (ranges of two commits never overlap).

A worker resumes each partition from the newest completed commit (by completion time) whose
checkpoint names that partition; commits without a checkpoint (compaction, other writers) are
skipped. The consumer group's committed offsets are never used for this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from inlet.core.config import TableConfig
from inlet.core.storage import Storage
from inlet.core.table import properties as props_io
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.archived import ArchivedTimeline
from inlet.core.timeline.commit_metadata import CommitMetadata
from inlet.core.timeline.instant import Action, Instant

CHECKPOINT_KEY = "deltastreamer.checkpoint.key"
RANGES_KEY = "inlet.kafka.offset.ranges"
# set on a commit that deliberately moves its checkpoint back (resuming a recreated topic from its
# earliest offset): the coordinator's fence then lets the checkpoint go backwards
RESET_KEY = "inlet.kafka.checkpoint.reset"
_WRITE_ACTIONS = (Action.COMMIT, Action.DELTA_COMMIT)


class CheckpointError(ValueError):
    pass


def format_checkpoint(topic: str, next_offsets: Mapping[int, int]) -> str:
    if not next_offsets:
        raise CheckpointError("a checkpoint needs at least one partition")
    return topic + "," + ",".join(f"{p}:{next_offsets[p]}" for p in sorted(next_offsets))


def parse_checkpoint(text: str) -> tuple[str, dict[int, int]]:
    """``topic,p:offset,...`` -> (topic, {partition: next offset})."""
    parts = text.split(",")
    if len(parts) < 2 or not parts[0]:
        raise CheckpointError(f"not a Kafka checkpoint: {text!r}")
    # topic names cannot contain ',' so the first item is the topic
    topic = parts[0]
    offsets: dict[int, int] = {}
    for item in parts[1:]:
        p, colon, off = item.partition(":")
        if not colon or not p.strip().lstrip("-").isdigit() or not off.strip().lstrip("-").isdigit():
            raise CheckpointError(f"not a Kafka checkpoint: {text!r}")
        offsets[int(p)] = int(off)
    return topic, offsets


def format_ranges(topic: str, ranges: Mapping[int, tuple[int, int]]) -> str:
    return topic + "," + ",".join(f"{p}:{a}-{b}" for p, (a, b) in sorted(ranges.items()))


def parse_ranges(text: str) -> tuple[str, dict[int, tuple[int, int]]]:
    parts = text.split(",")
    out: dict[int, tuple[int, int]] = {}
    for item in parts[1:]:
        p, _, span = item.partition(":")
        a, _, b = span.partition("-")
        out[int(p)] = (int(a), int(b))
    return parts[0], out


def stale_offsets(
    extra_metadata: Mapping[str, str], committed: Callable[[str, set[int]], dict[int, int]]
) -> str | None:
    """Why a commit with ``extra_metadata`` would go behind the table's Kafka checkpoint, or None.

    A writer that lost its partitions (a rebalance, a long pause) may still hold a batch read
    before that; its successor has meanwhile committed later offsets. Such a commit either consumed
    offsets the table already has (its range starts below the partition's checkpoint) or carries a
    partition's older position over; both would move the checkpoint back, so the commit is fenced.
    ``committed(topic, partitions)`` gives the table's current checkpoint of those partitions.
    """
    text = extra_metadata.get(CHECKPOINT_KEY)
    if not text or extra_metadata.get(RESET_KEY) == "true":
        return None
    try:
        topic, positions = parse_checkpoint(text)
        ranges = parse_ranges(extra_metadata[RANGES_KEY])[1] if RANGES_KEY in extra_metadata else {}
    except (CheckpointError, ValueError):
        return None  # not ours to judge: another tool's checkpoint
    current = committed(topic, set(positions) | set(ranges))
    for p in sorted(set(positions) | set(ranges)):
        at = current.get(p)
        if at is None:
            continue
        if p in ranges and ranges[p][0] < at:
            return (
                f"fenced: offsets {ranges[p][0]}-{ranges[p][1]} of {topic}[{p}] start below the table's "
                f"checkpoint {at} (another writer committed them: this one lost the partition)"
            )
        if p in positions and positions[p] < at:
            return (
                f"fenced: the checkpoint {positions[p]} of {topic}[{p}] is behind the table's {at} "
                "(another writer committed further: this one lost the partition)"
            )
    return None


def table_checkpoint(
    storage: Storage, topic: str, timeline: Timeline | None = None, partitions: Iterable[int] | None = None
) -> dict[int, int]:
    """{partition: next offset} of ``topic`` from the table's completed commits, newest first
    (the scan stops once every partition in ``partitions`` is found). A partition whose last
    commit was archived is found in the archived timeline, as Hudi Streamer finds its checkpoint
    after archival."""
    wanted = set(partitions) if partitions is not None else None
    tl = timeline or _load_timeline(storage)
    found: dict[int, int] = {}
    active: list[tuple[Instant, Callable[[Instant], CommitMetadata]]] = [
        (i, tl.commit_metadata) for i in tl.completed(_WRITE_ACTIONS)
    ]
    if _scan(active, topic, found, wanted):
        return found
    props = props_io.read_properties(storage)
    archived = ArchivedTimeline.load(
        storage,
        TableConfig.TIMELINE_LAYOUT_VERSION.require(props),
        TableConfig.TIMELINE_PATH.require(props),
        TableConfig.TIMELINE_HISTORY_PATH.require(props),
    )
    if tl.layout_version >= 2:
        old: list[tuple[Instant, Callable[[Instant], CommitMetadata]]] = [
            (i, archived.commit_metadata) for i in archived.instants if i.action in _WRITE_ACTIONS
        ]
        _scan(old, topic, found, wanted)
    return found


def _scan(
    instants: list[tuple[Instant, Callable[[Instant], CommitMetadata]]],
    topic: str,
    found: dict[int, int],
    wanted: set[int] | None,
) -> bool:
    """Add the offsets of ``instants`` (newest first) to ``found``; whether all ``wanted`` are found."""
    instants.sort(key=lambda im: (im[0].completion_time or im[0].time, im[0].time), reverse=True)
    for instant, metadata in instants:
        text = metadata(instant).extra_metadata.get(CHECKPOINT_KEY)
        if not text:
            continue
        try:
            ck_topic, offsets = parse_checkpoint(text)
        except CheckpointError:
            continue
        if ck_topic != topic:
            continue
        for p, off in offsets.items():
            found.setdefault(p, off)
        if wanted is not None and wanted <= found.keys():
            return True
    return False


def _load_timeline(storage: Storage) -> Timeline:
    props = props_io.read_properties(storage)
    return Timeline.load(
        storage,
        TableConfig.TIMELINE_LAYOUT_VERSION.require(props),
        TableConfig.TIMELINE_PATH.require(props),
    )
