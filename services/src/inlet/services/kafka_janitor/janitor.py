"""Retention for Tansu's S3 storage: delete the batch objects every consumer group has read.

Tansu 0.6's S3 engine (docs/kafka-storage.md) keeps each produced batch as its own object
``clusters/<cluster>/topics/<topic>/partitions/<p:010>/records/<base offset:020>.batch`` and never
deletes one, while every fetch pass lists all of a partition's objects: a stack that runs for hours
slows down and its bucket only grows. A pass of :class:`KafkaJanitor`:

1. reads every consumer group's committed offsets through the Kafka protocol (``ListGroups``,
   ``OffsetFetch``); a partition's **low watermark** is the lowest offset any group (but the
   ``ignore_groups``) committed for it;
2. takes only partitions of topics a rule names (``rules``: topic glob -> the groups that must read
   it) whose every required group has committed an offset there, and never a ``protect``-ed topic
   (Kafka Connect's, Debezium's notifications, the dead letters): a topic no rule names is left alone;
3. lists the partition's batch objects and deletes each one whose records all lie below the
   watermark: a batch ends before the next object's base offset, so an object is deleted only when
   the next one starts at or below the watermark. The newest object of a partition is always kept.

Why this is safe with Tansu 0.6 (read from its source, tested in
tests/integration/stack/test_kafka_janitor.py): a Fetch lists the partition and returns the
objects at or above the fetch offset, so deleted objects are simply not found; ListOffsets(earliest)
is the oldest remaining object (by its listing), not a stored log-start offset; the partition's
``watermark.json`` (the high watermark that allocates offsets) is never touched, so produces carry on
at the right offsets. A consumer that asks for a deleted offset gets the first remaining record after
it (no OFFSET_OUT_OF_RANGE): a group that has committed is never below the watermark, a new group
starts at the earliest remaining record, as with Kafka's own retention.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inlet.services.logs import log_event
from inlet.services.stack.s3 import S3Storage

log = logging.getLogger(__name__)

#: topics never cleaned, whatever the rules say: Kafka Connect's own topics, Debezium's heartbeat and
#: notification topics, Confluent's schema registry, the dead letters (``inlet dlq show`` / replay
#: read them without a group)
DEFAULT_PROTECT = ("__*", "connect-*", "_schemas", "inlet.dlq*")

#: DELETE requests in flight at once
DELETE_THREADS = 8

_RECORDS = re.compile(r"/partitions/(\d{10})/records/(\d{20})\.batch$")


class JanitorError(Exception):
    """A pass could not read the groups' offsets or the bucket; nothing was deleted on its account."""


@dataclass(frozen=True)
class Rule:
    """Topics matching ``topic`` (a glob) are cleaned only below what every group of ``groups`` read."""

    topic: str
    groups: tuple[str, ...]

    @classmethod
    def parse(cls, pair: str) -> Rule:
        """``TOPIC_GLOB=GROUP[,GROUP...]``."""
        topic, sep, groups = pair.partition("=")
        names = tuple(g.strip() for g in groups.split(",") if g.strip())
        if not sep or not topic.strip() or not names:
            raise ValueError(f"rule {pair!r} is not TOPIC_GLOB=GROUP[,GROUP...]")
        return cls(topic.strip(), names)


@dataclass(frozen=True)
class JanitorConfig:
    bootstrap: str
    storage: S3Storage
    rules: tuple[Rule, ...]
    cluster: str = "inlet"  # Tansu's --cluster-id (the first part of every key)
    protect: tuple[str, ...] = DEFAULT_PROTECT
    ignore_groups: tuple[str, ...] = ()  # globs of groups whose offsets do not hold data back
    interval_s: float = 60.0
    dry_run: bool = False
    kafka: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PartitionPass:
    topic: str
    partition: int
    watermark: int
    objects: int  # batch objects found
    deleted: int
    deleted_bytes: int


@dataclass
class PassResult:
    partitions: list[PartitionPass] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # "topic/partition" or topic -> why
    seconds: float = 0.0

    @property
    def deleted(self) -> int:
        return sum(p.deleted for p in self.partitions)

    @property
    def deleted_bytes(self) -> int:
        return sum(p.deleted_bytes for p in self.partitions)

    @property
    def remaining(self) -> int:
        return sum(p.objects - p.deleted for p in self.partitions)

    def summary(self) -> dict[str, Any]:
        return {
            "partitions": len(self.partitions),
            "deleted_objects": self.deleted,
            "deleted_bytes": self.deleted_bytes,
            "remaining_objects": self.remaining,
            "skipped": len(self.skipped),
            "seconds": round(self.seconds, 3),
        }


def deletable(bases: Sequence[int], watermark: int) -> list[int]:
    """The base offsets (sorted ascending) of objects whose records all lie below ``watermark``: an
    object's records end before the next object's base, so it goes when the next base is <= the
    watermark. The last object is always kept (nothing tells where it ends, and Tansu's
    ListOffsets(latest) is read from the newest object)."""
    return [b for b, nxt in itertools.pairwise(bases) if nxt <= watermark]


def low_watermarks(
    committed: Mapping[str, Mapping[tuple[str, int], int]], ignore_groups: Sequence[str] = ()
) -> dict[tuple[str, int], dict[str, int]]:
    """(topic, partition) -> {group: committed offset} over every group not ignored; negative
    offsets (none committed) are left out."""
    out: dict[tuple[str, int], dict[str, int]] = {}
    for group, offsets in committed.items():
        if any(fnmatch.fnmatchcase(group, g) for g in ignore_groups):
            continue
        for tp, offset in offsets.items():
            if offset >= 0:
                out.setdefault(tp, {})[group] = offset
    return out


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.passes = Counter(
            "inlet_kafka_janitor_passes_total", "janitor passes, by result", ["result"], registry=r
        )
        self.deleted_objects = Counter(
            "inlet_kafka_janitor_deleted_objects_total",
            "batch objects deleted, by topic",
            ["topic"],
            registry=r,
        )
        self.deleted_bytes = Counter(
            "inlet_kafka_janitor_deleted_bytes_total",
            "bytes of batch objects deleted, by topic",
            ["topic"],
            registry=r,
        )
        self.remaining = Gauge(
            "inlet_kafka_janitor_remaining_objects",
            "batch objects left in the partitions cleaned at the last pass, by topic",
            ["topic"],
            registry=r,
        )
        self.pass_seconds = Histogram("inlet_kafka_janitor_pass_seconds", "duration of one pass", registry=r)
        self.last_success = Gauge(
            "inlet_kafka_janitor_last_success_timestamp_seconds",
            "end of the last successful pass",
            registry=r,
        )


class KafkaJanitor:
    """Deletes Tansu batch objects below every consumer group's committed offset; :meth:`run_pass`
    once, :meth:`run` every ``interval_s`` until stopped."""

    def __init__(
        self,
        config: JanitorConfig,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.last_pass: PassResult | None = None
        self.last_error: str | None = None
        self.last_turn: float | None = None
        self._fs: Any = None
        self._deleter: Any = None

    # -- reading ----------------------------------------------------------------------------------

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """group -> (topic, partition) -> committed offset, for every group the broker lists."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**self.config.kafka, "bootstrap.servers": self.config.bootstrap})
        try:
            listed = admin.list_consumer_groups(request_timeout=15).result(timeout=30)
            if listed.errors:
                raise JanitorError(f"cannot list consumer groups: {listed.errors[0]}")
            out: dict[str, dict[tuple[str, int], int]] = {}
            for group in sorted(g.group_id for g in listed.valid):
                futures = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=15
                )
                result = futures[group].result(timeout=30)
                offsets: dict[tuple[str, int], int] = {}
                for tp in result.topic_partitions or []:
                    if tp.error is not None:
                        raise JanitorError(f"group {group}: offset of {tp.topic}/{tp.partition}: {tp.error}")
                    offsets[(tp.topic, tp.partition)] = tp.offset
                out[group] = offsets
            return out
        except (KafkaException, TimeoutError) as e:
            raise JanitorError(f"cannot read consumer group offsets from {self.config.bootstrap}: {e}") from e

    def _filesystem(self) -> Any:
        if self._fs is None:
            self._fs = self.config.storage.filesystem()
        return self._fs

    def _deleter_for(self) -> Any:
        """Plain signed DELETE requests: pyarrow's ``delete_file`` also recreates the parent
        "directory" as an empty ``records/`` object, and Tansu's fetch panics on that key (it reads an
        offset from the first 20 characters of every name it lists), leaving the partition unreadable."""
        from inlet.core.s3 import ConditionalS3, S3Options

        if self._deleter is None:
            s = self.config.storage
            options = S3Options(
                endpoint=s.endpoint,
                region=s.region,
                access_key=s.access_key,
                secret_key=s.secret_key,
                path_style=True,
            )
            self._deleter = ConditionalS3(options, s.bucket)
        return self._deleter

    def _records_dir(self, topic: str, partition: int) -> str:
        return (
            f"{self.config.storage.bucket}/clusters/{self.config.cluster}/topics/{topic}"
            f"/partitions/{partition:010d}/records"
        )

    def batch_objects(self, topic: str, partition: int) -> dict[int, tuple[str, int]]:
        """base offset -> (path, size) of the partition's batch objects."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self._records_dir(topic, partition), allow_not_found=True)
        try:
            infos = self._filesystem().get_file_info(selector)
        except OSError as e:
            raise JanitorError(f"cannot list {selector.base_dir}: {e}") from e
        out: dict[int, tuple[str, int]] = {}
        for info in infos:
            m = _RECORDS.search(info.path)
            if m and int(m.group(1)) == partition:
                out[int(m.group(2))] = (info.path, info.size or 0)
        return out

    # -- one pass ---------------------------------------------------------------------------------

    def _required(self, topic: str) -> tuple[str, ...] | None:
        """The groups that must read ``topic`` (None: no rule names it, or it is protected)."""
        if any(fnmatch.fnmatchcase(topic, p) for p in self.config.protect):
            return None
        groups: list[str] = []
        matched = False
        for rule in self.config.rules:
            if fnmatch.fnmatchcase(topic, rule.topic):
                matched = True
                groups.extend(g for g in rule.groups if g not in groups)
        return tuple(groups) if matched else None

    def run_pass(self) -> PassResult:
        start = self.clock()
        result = PassResult()
        committed = self.committed_offsets()
        by_partition = low_watermarks(committed, self.config.ignore_groups)
        for (topic, partition), groups in sorted(by_partition.items()):
            required = self._required(topic)
            where = f"{topic}/{partition}"
            if required is None:
                result.skipped[where] = "no rule (or protected)"
                continue
            missing = [g for g in required if g not in groups]
            if missing:
                result.skipped[where] = f"no offset committed by {', '.join(missing)}"
                continue
            watermark = min(groups.values())
            result.partitions.append(self._clean(topic, partition, watermark))
        result.seconds = self.clock() - start
        self.last_pass = result
        return result

    def _clean(self, topic: str, partition: int, watermark: int) -> PartitionPass:
        objects = self.batch_objects(topic, partition)
        doomed = deletable(sorted(objects), watermark)
        done = PartitionPass(topic, partition, watermark, len(objects), 0, 0)
        if self.config.dry_run:
            done.deleted, done.deleted_bytes = len(doomed), sum(objects[b][1] for b in doomed)
            return done

        deleter = self._deleter_for()
        prefix = self.config.storage.bucket + "/"

        def delete(base: int) -> int:
            path, size = objects[base]
            try:
                deleter.delete(path.removeprefix(prefix))
            except OSError as e:
                raise JanitorError(f"cannot delete {path}: {e}") from e
            return size

        # a DELETE is one round trip (~1.5 ms on the stack's SeaweedFS): a few at once. Every object
        # here is below the watermark, so a pass cut short leaves only objects nobody reads.
        with ThreadPoolExecutor(DELETE_THREADS, thread_name_prefix="inlet-janitor") as pool:
            for size in pool.map(delete, doomed):
                done.deleted += 1
                done.deleted_bytes += size
                self.metrics.deleted_objects.labels(topic).inc()
                self.metrics.deleted_bytes.labels(topic).inc(size)
        return done

    # -- service ----------------------------------------------------------------------------------

    def pass_and_log(self) -> PassResult | None:
        """One pass, its log line and metrics; a failure is logged and counted, not raised."""
        try:
            with self.metrics.pass_seconds.time():
                result = self.run_pass()
        except JanitorError as e:
            self.last_error = str(e)
            self.metrics.passes.labels("error").inc()
            log_event(log, logging.WARNING, "janitor pass failed", error=str(e))
            return None
        self.last_error = None
        self.metrics.passes.labels("ok").inc()
        self.metrics.last_success.set_to_current_time()
        remaining: dict[str, int] = {}
        for p in result.partitions:
            remaining[p.topic] = remaining.get(p.topic, 0) + p.objects - p.deleted
        for topic, n in remaining.items():
            self.metrics.remaining.labels(topic).set(n)
        log_event(log, logging.INFO, "janitor pass", dry_run=self.config.dry_run, **result.summary())
        return result

    def run(self, stop: threading.Event) -> int:
        while not stop.is_set():
            self.last_turn = self.clock()
            self.pass_and_log()
            self.last_turn = self.clock()
            stop.wait(self.config.interval_s)
        return 0

    def health(self) -> tuple[bool, Mapping[str, Any]]:
        """Healthy while the loop turns (a pass at least every interval plus a margin); the last
        pass's error is shown but a broker outage does not make the janitor unhealthy."""
        details: dict[str, Any] = {"last_error": self.last_error}
        if self.last_pass is not None:
            details["last_pass"] = self.last_pass.summary()
        if self.last_turn is None:
            return False, {**details, "loop": "not started"}
        silent = self.clock() - self.last_turn
        return silent <= self.config.interval_s + 300, {**details, "loop_silent_s": round(silent, 1)}


def parse_rules(pairs: Iterable[str]) -> tuple[Rule, ...]:
    return tuple(Rule.parse(p) for p in pairs)
