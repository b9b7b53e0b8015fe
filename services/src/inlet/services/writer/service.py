"""The writer service: ``inlet.changes.<table_id>`` topics -> Hudi tables, exactly once.

One consumer (a member of ``--group``) reads every matching topic; each table has its own buffer,
cut and commit. Exactly-once comes from the table, not from Kafka:

- every commit carries the next offsets of the table's partitions (Hudi Streamer's
  ``deltastreamer.checkpoint.key``, see :mod:`.checkpoint`);
- on assignment, and after any failed batch, a partition is positioned at the offset found in
  the newest completed commit naming it (the beginning when none does), never at the consumer
  group's committed offset (committed only for lag monitoring);
- a failed write is rolled back by the core (or later by the coordinator's janitor when the
  process died), the table's buffer is dropped, its partitions paused and, after a backoff,
  re-positioned from the table's checkpoint; when the commit call failed with an unknown outcome
  the timeline decides whether it landed (its checkpoint is then the table's).

Tables that are not written with non-blocking concurrency control (OCC tables) have one writer at
a time: each batch is written while holding the table's ``writer`` lock lease at the coordinator,
and completed with its fencing token, so a worker that stalled past its lease (its partitions
reassigned meanwhile) cannot commit over its successor. NBCC tables take several workers at once.

Records of one table never hold up another's: a failing table's partitions are paused
(incompatible schema changes stay paused, retried every ``--error-retry-s``, and are reported on
/healthz) and a table whose held buffer grows beyond twice the batch limits is paused until it
commits.

Bad rows (a change that cannot become a row of the table, or an undecodable record) quarantine their
table: with ``--on-bad-row stop`` (the default) nothing of the batch is committed, each bad record
goes -- its bytes read back from its topic, with the reason and its position in ``inlet-dlq-*``
headers (:mod:`inlet.services.dead_letters`) -- to the dead-letter topic, and the table stops: its
partitions stay paused, it is not retried (a retry would fail on the same row), and /healthz and
/readyz name it with the reason. It resumes when the writer restarts (with ``--on-bad-row
dead-letter`` to get past the row). With ``dead-letter`` the bad records' letters are written first
and the batch then commits without them, its checkpoint past them. A letter that cannot be written
is a transient failure: nothing moves past a bad row before its letter is acknowledged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from google.protobuf.message import DecodeError

from inlet.core import HudiTable, faults
from inlet.core.errors import CommitConflictError, InvalidInputError, SchemaError
from inlet.core.storage import Storage
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.proto.coordinator.v1 import coordinator_pb2
from inlet.services.coordinator_client.client import (
    CoordinatorCallError,
    CoordinatorClient,
    GrpcCommitProtocol,
)
from inlet.services.coordinator_client.locks import hold_lease
from inlet.services.dead_letters import DEFAULT_TOPIC as DEFAULT_DLQ_TOPIC
from inlet.services.dead_letters import DeadLetterError, DeadLetterSink, Headers, fetch, message_headers
from inlet.services.logs import log_event
from inlet.services.runtime import Liveness
from inlet.services.writer import DEFAULT_GROUP, tables
from inlet.services.writer import checkpoint as ckpt
from inlet.services.writer.batcher import Cut, Entry, TableBuffer
from inlet.services.writer.lookup import batch_input
from inlet.services.writer.metrics import WriterMetrics
from inlet.services.writer.offset_gaps import OffsetsUnknownError, find_gaps
from inlet.services.writer.rows import CONVERSION_ERRORS, OP_COL, Change, bad_changes, key_columns

log = logging.getLogger("inlet.writer")

TOPIC_PREFIX = "inlet.changes."
# fault points of the writer (INLET_CRASH_AT=...), beside the core's
AFTER_COMMIT = "writer_after_commit"  # the commit landed, nothing else recorded yet
BEFORE_WRITE = "writer_before_write"
WRITER_LOCK = "writer"  # the coordinator lock an OCC table's batches are written under
ON_BAD_ROW = ("stop", "dead-letter")


@dataclass
class WriterConfig:
    bootstrap: str
    coordinator: str
    lake_root: str
    topic_pattern: str = r"^inlet\.changes\..*"
    group: str = DEFAULT_GROUP
    engine: str = "local"
    spark_master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    batch_max_records: int = 10000
    batch_max_bytes: int = 64 * 1024 * 1024
    batch_interval_ms: int = 1000
    transaction_hold_ms: int = 10000
    retry_backoff_ms: int = 1000
    error_retry_s: float = 30.0
    table_config: str | None = None
    coordinator_token: str | None = None
    coordinator_ca: bytes | None = None  # PEM roots; TLS when set or when coordinator_tls
    coordinator_tls: bool = False
    kafka: dict[str, Any] = field(default_factory=dict)  # extra librdkafka consumer settings
    write_options: dict[str, str] = field(default_factory=dict)
    compaction: bool = True
    lease_ms: int = 30000  # the writer lease of an OCC table (renewed while a batch is written)
    lease_wait_ms: int = 10000  # how long a batch waits for another worker's lease
    liveness_timeout_s: float = 600.0  # /livez fails once the main loop has not turned for this long
    # a checkpoint outside its partition's available offsets (retention deleted records the table
    # never saw, or the topic was recreated): "fail" stops the table, "earliest" resumes from the
    # earliest available offset with a warning
    on_offset_gap: str = "fail"
    on_bad_row: str = "stop"  # stop: the table stops; dead-letter: the row is dropped, the batch commits
    dlq_topic: str = DEFAULT_DLQ_TOPIC
    # an initial load's progress file (inlet writer load --progress-file): exported as metrics
    load_progress: str | None = None


@dataclass
class TableState:
    table_id: str
    topic: str
    path: str | None = None
    protocol: GrpcCommitProtocol | None = None
    assigned: set[int] = field(default_factory=set)
    positions: dict[int, int] = field(default_factory=dict)  # committed next offset per partition
    expected: dict[int, int] = field(default_factory=dict)  # next offset we accept per partition
    buffer: TableBuffer = field(default_factory=TableBuffer)
    paused: bool = False
    held_paused: bool = False
    retry_at: float | None = None
    error: str | None = None
    error_kind: str | None = None
    failures: int = 0
    held_logged: bool = False
    last_commit: str | None = None
    exclusive: bool = True  # one writer at a time (not NBCC): batches hold the writer lease
    # partitions moved back to their earliest offset (--on-offset-gap earliest): the next commit
    # naming them marks the reset, so the coordinator's checkpoint fence lets it through
    reset: set[int] = field(default_factory=set)
    stopped: bool = False  # by a bad row: paused until the writer restarts
    dead_lettered: set[tuple[int, int]] = field(default_factory=set)  # (partition, offset) not yet committed


class _BadRows(Exception):
    """A batch holds changes that cannot become rows (``--on-bad-row stop``)."""

    def __init__(self, bad: list[tuple[Change, str, str]]) -> None:
        super().__init__(bad[0][1])
        self.bad = bad


def table_id_of(topic: str) -> str:
    return topic[len(TOPIC_PREFIX) :] if topic.startswith(TOPIC_PREFIX) else topic


class Writer:
    def __init__(self, config: WriterConfig, metrics: WriterMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or WriterMetrics(Path(config.load_progress) if config.load_progress else None)
        self.rules = tables.load_rules(config.table_config)
        self.client = CoordinatorClient(
            config.coordinator,
            tls=config.coordinator_tls,
            root_certificates=config.coordinator_ca,
            token=config.coordinator_token,
            timeout_s=60,
        )
        self.tables: dict[str, TableState] = {}
        self.consumer: Consumer | None = None
        self.liveness = Liveness(config.liveness_timeout_s)  # /livez: the main loop turns
        self._spark: Any = None
        self._last_lag = 0.0
        self.started = False
        self._dlq = DeadLetterSink(self._client_settings(), config.dlq_topic)

    # ------------------------------------------------------------------ health

    def health(self) -> tuple[bool, Mapping[str, Any]]:
        details: dict[str, Any] = {}
        for tid, st in sorted(self.tables.items()):
            details[tid] = {
                "state": "stopped" if st.stopped else "paused" if st.paused else "running",
                "error": st.error,
                "buffered": st.buffer.records,
                "last_commit": st.last_commit,
                "partitions": sorted(st.assigned),
            }
        degraded = any(st.error for st in self.tables.values())
        return self.started, {"degraded": degraded, "tables": details}

    def readiness(self) -> tuple[bool, Mapping[str, Any]]:
        """Ready while consuming with no table stopped; ``stopped`` names each stopped table with its reason."""
        stopped = {tid: st.error or "" for tid, st in sorted(self.tables.items()) if st.stopped}
        return self.started and not stopped, {"stopped": stopped}

    # ------------------------------------------------------------------ consumer

    def _consumer_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.config.bootstrap,
            "group.id": self.config.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # a position that is no longer available is reported (and stops its table), never skipped
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 5000,
            "partition.assignment.strategy": "range",
        }
        settings.update(self.config.kafka)
        return settings

    def _client_settings(self) -> dict[str, Any]:
        """The settings of this writer's other clients (the dead letters): bootstrap and security."""
        shared = ("security.", "sasl.", "ssl.", "client.", "socket.")
        return {
            "bootstrap.servers": self.config.bootstrap,
            **{k: v for k, v in self.config.kafka.items() if k.startswith(shared)},
        }

    def _state(self, topic: str) -> TableState:
        tid = table_id_of(topic)
        st = self.tables.get(tid)
        if st is None:
            st = self.tables[tid] = TableState(tid, topic)
            st.buffer.assigned = st.assigned  # the same set: a per-partition END names other workers' too
        return st

    def _load_path(self, st: TableState) -> None:
        if st.path is not None:
            return
        try:
            desc = self.client.describe_table(st.table_id)
        except CoordinatorCallError as e:
            if e.code.name == "NOT_FOUND":
                return
            raise
        if desc.table.base_path:
            st.path = desc.table.base_path
            st.exclusive = desc.table.concurrency_mode != coordinator_pb2.CONCURRENCY_MODE_NON_BLOCKING

    def _checkpoint(self, st: TableState) -> dict[int, int]:
        self._load_path(st)
        if st.path is None or not Storage(st.path).exists(".hoodie/hoodie.properties"):
            return {}
        return ckpt.table_checkpoint(Storage(st.path), st.topic, partitions=st.assigned or None)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            st = self._state(tp.topic)
            st.assigned.add(tp.partition)
        gaps: dict[str, tuple[str, str]] = {}
        for st in {self._state(tp.topic).table_id: self._state(tp.topic) for tp in partitions}.values():
            st.positions = self._checkpoint(st)
            st.buffer.clear()
            gap = self._check_offsets(consumer, st)
            if gap is not None:
                gaps[st.table_id] = gap
        for tp in partitions:
            st = self._state(tp.topic)
            off = st.positions.get(tp.partition)
            tp.offset = off if off is not None else OFFSET_BEGINNING
            if off is not None:
                st.expected[tp.partition] = off
            else:
                st.expected.pop(tp.partition, None)
        log_event(
            log,
            logging.INFO,
            "partitions assigned; positioned at the tables' checkpoints",
            assignment=[f"{tp.topic}[{tp.partition}]@{tp.offset}" for tp in partitions],
        )
        consumer.assign(partitions)
        for tid, (kind, error) in gaps.items():
            self._fail(self.tables[tid], error, kind)
        for st in self.tables.values():
            if st.paused and any(tp.topic == st.topic for tp in partitions):
                consumer.pause([TopicPartition(st.topic, p) for p in st.assigned])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            st = self._state(tp.topic)
            st.assigned.discard(tp.partition)
            st.expected.pop(tp.partition, None)
            st.buffer.clear()
        log_event(
            log,
            logging.INFO,
            "partitions revoked",
            partitions=[f"{tp.topic}[{tp.partition}]" for tp in partitions],
        )

    # ------------------------------------------------------------------ main loop

    def run(self, stop: Any) -> int:
        """Consume and commit until ``stop.is_set()``; returns the exit status."""
        self.consumer = Consumer(self._consumer_settings())
        self.consumer.subscribe(
            [
                self.config.topic_pattern
                if self.config.topic_pattern.startswith("^")
                else "^" + self.config.topic_pattern
            ],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
        )
        self.started = True
        log_event(log, logging.INFO, "writer started", group=self.config.group, engine=self.config.engine)
        try:
            while not stop.is_set():
                self.liveness.beat()
                msgs = self.consumer.consume(num_messages=1000, timeout=0.1)
                for msg in msgs:
                    self._handle(msg)
                self._tick()
        finally:
            self.close()
        return 0

    def close(self) -> None:
        if self.consumer is not None:
            with contextlib.suppress(Exception):  # already closed
                self.consumer.close()
            self.consumer = None
        for st in self.tables.values():
            if st.protocol is not None:
                st.protocol.close()
        self._dlq.close()
        self.client.close()
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def _handle(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._AUTO_OFFSET_RESET and msg.topic() is not None:
                # the position fell out of the partition's available offsets while consuming
                # (retention, a recreated topic): re-checked against the checkpoint on resume
                st = self._state(msg.topic() or "")
                if not st.paused:
                    self._fail(
                        st, f"offset out of range on {msg.topic()}[{msg.partition()}]: {err}", "transient"
                    )
                return
            if err.code() != KafkaError._PARTITION_EOF:
                log_event(log, logging.WARNING, "kafka error", error=str(err))
            return
        topic = msg.topic()
        partition = msg.partition()
        offset = msg.offset()
        if topic is None or partition is None or offset is None:
            return
        st = self._state(topic)
        if st.paused or partition not in st.assigned:
            return  # re-read from the checkpoint when the table resumes
        exp = st.expected.get(partition)
        if exp is not None and offset < exp:
            return  # fetched before a seek back: already in the buffer or the table
        st.expected[partition] = offset + 1
        value = msg.value()
        size = len(value or b"") + len(msg.key() or b"")
        entry = Entry(partition, offset, size)
        if value:
            try:
                record = pb.ChangeRecord.FromString(value)
            except DecodeError as e:
                reason = f"undecodable ChangeRecord at {topic}[{partition}]@{offset}: {e}"
                if not self._undecodable(st, msg, reason):
                    return
                record = pb.ChangeRecord()  # dead-lettered: kept as a non-data entry, committed past
            kind = record.WhichOneof("record")
            if kind == "change":
                ev = record.change
                entry.change = Change(ev, partition, offset, raw=value)
                entry.tx_id = ev.transaction.id or None if ev.HasField("transaction") else None
            elif kind == "transaction":
                tx = record.transaction
                if tx.status == pb.TransactionEvent.STATUS_END:
                    entry.tx_id = tx.id or None
                    entry.tx_count = tx.table_event_count
                    entry.tx_parts = dict(tx.partition_event_counts) or None
        st.buffer.add(entry)
        self.metrics.buffered.labels(st.table_id).set(st.buffer.records)
        limit_records = 2 * self.config.batch_max_records
        if not st.held_paused and (
            st.buffer.records >= limit_records or st.buffer.bytes >= 2 * self.config.batch_max_bytes
        ):
            assert self.consumer is not None
            self.consumer.pause([TopicPartition(st.topic, p) for p in st.assigned])
            st.held_paused = True

    def _tick(self) -> None:
        now = time.monotonic()
        for st in list(self.tables.values()):
            if st.paused:
                if st.retry_at is not None and now >= st.retry_at:
                    self._resume(st)
                continue
            if st.buffer.due(
                self.config.batch_max_records,
                self.config.batch_max_bytes,
                self.config.batch_interval_ms / 1000,
            ):
                self._flush(st)
        self.metrics.paused.set(sum(1 for st in self.tables.values() if st.paused))
        if now - self._last_lag > 5:
            self._last_lag = now
            self._update_lag()

    def _update_lag(self) -> None:
        if self.consumer is None:
            return
        for st in self.tables.values():
            for p in st.assigned:
                try:
                    _low, high = self.consumer.get_watermark_offsets(TopicPartition(st.topic, p), cached=True)
                except Exception:
                    continue
                pos = st.expected.get(p, st.positions.get(p, 0))
                if high is not None and high >= 0:
                    self.metrics.lag.labels(st.topic, str(p)).set(max(0, high - pos))

    # ------------------------------------------------------------------ batches

    def _flush(self, st: TableState) -> None:
        cut = st.buffer.cut(self.config.batch_max_records, self.config.transaction_hold_ms / 1000)
        if cut is None:
            if not st.held_logged:
                st.held_logged = True
                log_event(
                    log,
                    logging.INFO,
                    "holding the batch until its transactions are complete",
                    table=st.table_id,
                    open_transactions=st.buffer.open_transactions()[:5],
                )
            return
        st.held_logged = False
        if cut.reason in ("oversized_transaction", "hold_expired"):
            log_event(
                log,
                logging.WARNING,
                "committing part of a source transaction",
                table=st.table_id,
                reason=cut.reason,
                open_transactions=st.buffer.open_transactions(cut.taken)[:5],
            )
        self._commit_batch(st, cut)

    def _ensure_table(self, st: TableState, first: pb.ChangeEvent) -> None:
        if st.path is not None and st.protocol is not None:
            return
        self._load_path(st)
        settings = tables.settings_for(self.rules, st.table_id)
        if st.path is None:
            src = first.source
            schema_name = src.schema or st.table_id.split(".")[-2]
            table_name = src.table or st.table_id.split(".")[-1]
            database = src.database or st.table_id.split(".")[0]
            keys = key_columns(first.schema) or [tables_synthetic_key()]
            path = tables.ensure_table(
                self.client,
                st.table_id,
                self.config.lake_root,
                database,
                schema_name,
                table_name,
                keys,
                settings,
            )
            log_event(
                log,
                logging.INFO,
                "table registered",
                table=st.table_id,
                path=path,
                mode=settings.concurrency_mode,
                record_key=keys,
            )
            st.path = path
            st.exclusive = not settings.nbcc
        st.protocol = GrpcCommitProtocol(self.client, st.table_id, Storage(st.path))

    def _write_options(self, st: TableState) -> dict[str, str]:
        settings = tables.settings_for(self.rules, st.table_id)
        return {**self.config.write_options, **settings.options}

    def _commit_batch(self, st: TableState, cut: Cut) -> None:
        entries = st.buffer.taken(cut)
        changes = [e.change for e in entries if e.change is not None]
        new_positions = dict(st.positions)
        ranges: dict[int, tuple[int, int]] = {}
        for e in entries:
            new_positions[e.partition] = e.offset + 1
            start = ranges[e.partition][0] if e.partition in ranges else e.offset
            ranges[e.partition] = (start, e.offset + 1)
        if changes and all(c.event.op == pb.OPERATION_TRUNCATE for c in changes):
            self._load_path(st)
            if st.path is None:  # nothing to truncate in a table that does not exist yet
                changes = []
        if not changes:
            st.positions = new_positions
            st.buffer.drop(cut)
            return
        started = time.monotonic()
        checkpoint_positions = {p: o for p, o in new_positions.items() if p in st.assigned or p in ranges}
        extra = {
            ckpt.CHECKPOINT_KEY: ckpt.format_checkpoint(st.topic, checkpoint_positions),
            ckpt.RANGES_KEY: ckpt.format_ranges(st.topic, ranges),
        }
        if st.reset & checkpoint_positions.keys():
            extra[ckpt.RESET_KEY] = "true"
        try:
            self._ensure_table(
                st, next((c.event for c in changes if c.event.schema.columns), changes[0].event)
            )
            assert st.path is not None and st.protocol is not None
            table = HudiTable.open(st.path, commit_protocol=st.protocol)
            keys = list(table.record_key_fields)

            def convert(batch: list[Change]) -> pa.Table:
                return batch_input(batch, table)

            try:
                arrow = convert(changes)
            except CONVERSION_ERRORS:
                bad = bad_changes(changes, keys, table.schema())
                if not bad:  # only the batch as a whole fails: no row to name, the table stops
                    raise
                if self.config.on_bad_row != "dead-letter":
                    raise _BadRows(bad) from None
                self._dead_letter(st, bad)
                changes = [c for c in changes if (c.partition, c.offset) not in st.dead_lettered]
                arrow = convert(changes) if changes else None
            faults.crash_point(BEFORE_WRITE)
            result = None
            if arrow is not None:
                with self._writer_lease(st):
                    result = self._write(st, table, arrow, extra)
            faults.crash_point(AFTER_COMMIT)
            instant = result.instant_time if result is not None else None
        except _BadRows as e:
            self._stop_bad_rows(st, e.bad)
            return
        except Exception as e:  # decide from the timeline whether the commit landed
            landed = False
            try:
                found = self._checkpoint(st)
                landed = bool(ranges) and all(found.get(p) == new_positions[p] for p in ranges)
            except Exception:
                log.debug("could not re-read the checkpoint", exc_info=True)
            if not landed:
                self._fail(st, f"{type(e).__name__}: {e}", _kind(e))
                return
            log_event(
                log,
                logging.WARNING,
                "commit call failed but the commit landed",
                table=st.table_id,
                error=str(e),
            )
            instant = None
        elapsed = time.monotonic() - started
        st.positions = new_positions
        st.buffer.drop(cut)
        st.reset -= checkpoint_positions.keys()
        st.dead_lettered = {(p, o) for p, o in st.dead_lettered if o >= new_positions.get(p, 0)}
        st.failures = 0
        st.error = None
        st.last_commit = instant
        self.metrics.buffered.labels(st.table_id).set(st.buffer.records)
        if st.held_paused and st.buffer.records < self.config.batch_max_records:
            assert self.consumer is not None
            self.consumer.resume([TopicPartition(st.topic, p) for p in st.assigned])
            st.held_paused = False
        self._record_metrics(st, changes, elapsed)
        log_event(
            log,
            logging.INFO,
            "batch committed",
            table=st.table_id,
            instant=instant,
            records=len(changes),
            checkpoint=extra[ckpt.CHECKPOINT_KEY],
            seconds=round(elapsed, 3),
            cut=cut.reason,
        )
        if self.consumer is not None:  # for lag monitoring only; never read back
            try:
                self.consumer.commit(
                    offsets=[TopicPartition(st.topic, p, o) for p, o in ranges_end(ranges).items()],
                    asynchronous=True,
                )
            except Exception:
                log.debug("group offset commit failed", exc_info=True)
        if self.config.compaction:
            self._maybe_compact(st)

    @contextlib.contextmanager
    def _writer_lease(self, st: TableState) -> Iterator[None]:
        """For a one-writer table: hold its writer lease and complete under its fencing token."""
        assert st.protocol is not None
        if not st.exclusive:
            yield
            return
        with hold_lease(
            self.client,
            st.table_id,
            WRITER_LOCK,
            st.protocol.writer_id,
            lease_ms=self.config.lease_ms,
            wait_ms=self.config.lease_wait_ms,
        ) as lease:
            st.protocol.fence = (WRITER_LOCK, lease.fencing_token)
            try:
                yield
            finally:
                st.protocol.fence = None

    def _write(self, st: TableState, table: HudiTable, arrow: Any, extra: dict[str, str]) -> Any:
        options = self._write_options(st)
        if self.config.engine == "spark":
            import inlet.core.spark as inlet_spark

            spark = self._spark_session()
            df = spark.createDataFrame(arrow)
            opts = {**options, "hoodie.datasource.write.operation": "upsert"}
            return inlet_spark.write(
                df, table.base_path, opts, commit_protocol=st.protocol, extra_metadata=extra
            )
        return table.write(arrow, "upsert", options, extra_metadata=extra)

    def _spark_session(self) -> Any:
        if self._spark is None:
            from inlet.services.writer.spark_load import spark_session

            self._spark = spark_session(self.config.spark_master, self.config.spark_conf, "inlet writer")
        return self._spark

    def _record_metrics(self, st: TableState, changes: list[Change], elapsed: float) -> None:
        m = self.metrics
        m.commits.labels(st.table_id).inc()
        m.last_commit.labels(st.table_id).set(time.time())
        m.batch_seconds.labels(st.table_id).observe(elapsed)
        m.batch_records.labels(st.table_id).observe(len(changes))
        ops: dict[str, int] = {}
        now_ms = time.time() * 1000
        newest = 0
        for c in changes:
            op = pb.Operation.Name(c.event.op).removeprefix("OPERATION_").lower()
            ops[op] = ops.get(op, 0) + 1
            ts = c.event.source.source_ts_ms
            if ts:
                m.freshness.labels(st.table_id).observe(max(0.0, (now_ms - ts) / 1000))
                newest = max(newest, ts)
        for op, n in ops.items():
            m.records.labels(st.table_id, op).inc(n)
        if newest:
            m.last_freshness.labels(st.table_id).set(max(0.0, (now_ms - newest) / 1000))

    def _maybe_compact(self, st: TableState) -> None:
        assert st.path is not None and st.protocol is not None
        table = HudiTable.open(st.path, commit_protocol=st.protocol)
        if table.table_type.value != "MERGE_ON_READ":
            return
        options = self._write_options(st)
        started = time.monotonic()
        try:
            instant = table.schedule_compaction(options)
            if instant is None:
                return
            if self.config.engine == "spark":
                import inlet.core.spark as inlet_spark

                inlet_spark.run_compaction(
                    self._spark_session(),
                    st.path,
                    instant=instant,
                    options=options,
                    commit_protocol=st.protocol,
                )
            else:
                table.run_compaction(instant, options)
        except Exception as e:  # compaction is retried at a later batch; ingestion goes on
            log_event(
                log, logging.WARNING, "compaction failed", table=st.table_id, error=f"{type(e).__name__}: {e}"
            )
            return
        elapsed = time.monotonic() - started
        self.metrics.compactions.labels(st.table_id).inc()
        self.metrics.compaction_seconds.labels(st.table_id).observe(elapsed)
        log_event(
            log,
            logging.INFO,
            "compaction committed",
            table=st.table_id,
            instant=instant,
            seconds=round(elapsed, 3),
        )

    # ------------------------------------------------------------------ failures

    def _fail(self, st: TableState, message: str, kind: str) -> None:
        if kind == "bad_input":  # the same input fails again: no retry
            self._stop(st, message)
            return
        st.failures += 1
        st.error = message
        st.error_kind = kind
        st.buffer.clear()
        self.metrics.failures.labels(st.table_id, kind).inc()
        self.metrics.retries.labels(st.table_id).inc()
        if kind == "conflict":
            self.metrics.conflicts.labels(st.table_id).inc()
        if kind in ("schema", "offset_gap"):
            delay = self.config.error_retry_s
        else:
            delay = min(60.0, self.config.retry_backoff_ms / 1000 * 2 ** min(st.failures - 1, 6))
        st.retry_at = time.monotonic() + delay
        st.paused = True
        if self.consumer is not None and st.assigned:
            self.consumer.pause([TopicPartition(st.topic, p) for p in st.assigned])
        level = logging.ERROR if kind in ("schema", "offset_gap") else logging.WARNING
        log_event(
            log,
            level,
            "batch failed; table paused, will re-read from its checkpoint",
            table=st.table_id,
            kind=kind,
            error=message,
            retry_in_s=round(delay, 1),
        )

    def _stop(self, st: TableState, message: str) -> None:
        """Stop the table for bad input: its partitions stay paused until the writer restarts."""
        st.stopped = True
        st.paused = True
        st.retry_at = None
        st.error = message
        st.error_kind = "bad_input"
        st.buffer.clear()
        self.metrics.failures.labels(st.table_id, "bad_input").inc()
        self.metrics.stopped.set(sum(1 for t in self.tables.values() if t.stopped))
        if self.consumer is not None and st.assigned:
            self.consumer.pause([TopicPartition(st.topic, p) for p in st.assigned])
        log_event(
            log,
            logging.ERROR,
            "bad input; table stopped until the writer restarts (--on-bad-row dead-letter skips bad rows)",
            table=st.table_id,
            error=message,
            dead_letters=self.config.dlq_topic,
        )

    def _letters(self, st: TableState, bad: list[tuple[Change, str, str]]) -> list[tuple[Any, Any, Headers]]:
        """The dead letters of ``bad``: each record read back from the topic, as it was consumed."""
        positions = {(st.topic, c.partition, c.offset): (reason, cls) for c, reason, cls in bad}
        records = fetch(self._consumer_settings(), positions)
        return [
            (m.key(), m.value(), message_headers(m, *positions[pos]))
            for pos, m in sorted(records.items(), key=lambda pm: pm[0])
        ]

    def _dead_letter(self, st: TableState, bad: list[tuple[Change, str, str]]) -> None:
        """Write the letters of the bad rows not written yet (raises :class:`DeadLetterError`)."""
        new = [b for b in bad if (b[0].partition, b[0].offset) not in st.dead_lettered]
        if new:
            self._dlq.send(self._letters(st, new))
            self.metrics.dead_letters.labels(st.table_id).inc(len(new))
            for c, reason, _cls in new:
                log_event(
                    log,
                    logging.WARNING,
                    "bad row sent to the dead letters; the batch goes on without it",
                    table=st.table_id,
                    partition=c.partition,
                    offset=c.offset,
                    reason=reason,
                    dead_letters=self.config.dlq_topic,
                )
        st.dead_lettered.update((c.partition, c.offset) for c, _r, _c in bad)

    def _stop_bad_rows(self, st: TableState, bad: list[tuple[Change, str, str]]) -> None:
        try:
            self._dlq.send(self._letters(st, bad))
        except DeadLetterError as e:  # retried like any transient failure; the rows are found again
            self._fail(st, f"{bad[0][1]}; its dead letter failed: {e}", "transient")
            return
        self.metrics.dead_letters.labels(st.table_id).inc(len(bad))
        c = bad[0][0]
        more = f" (and {len(bad) - 1} more bad rows)" if len(bad) > 1 else ""
        self._stop(st, f"bad row at {st.topic}[{c.partition}]@{c.offset}: {bad[0][1]}{more}")

    def _undecodable(self, st: TableState, msg: Message, reason: str) -> bool:
        """Dead-letter a record that is no ChangeRecord (once, also when re-read after a failed
        batch); whether the table goes on past it."""
        where = (msg.partition() or 0, msg.offset() or 0)
        if where not in st.dead_lettered:
            try:
                self._dlq.send([(msg.key(), msg.value(), message_headers(msg, reason, "DecodeError"))])
            except DeadLetterError as e:
                self._fail(st, f"{reason}; its dead letter failed: {e}", "transient")
                return False
            self.metrics.dead_letters.labels(st.table_id).inc()
        if self.config.on_bad_row == "dead-letter":
            st.dead_lettered.add(where)
            log_event(
                log,
                logging.WARNING,
                "undecodable record sent to the dead letters",
                table=st.table_id,
                reason=reason,
            )
            return True
        self._stop(st, reason)
        return False

    def _resume(self, st: TableState) -> None:
        assert self.consumer is not None
        try:
            st.positions = self._checkpoint(st)
        except Exception as e:
            st.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
            log_event(
                log, logging.WARNING, "cannot read the table checkpoint yet", table=st.table_id, error=str(e)
            )
            return
        st.buffer.clear()
        gap = self._check_offsets(self.consumer, st)
        if gap is not None:
            self._fail(st, gap[1], gap[0])
            return
        for p in sorted(st.assigned):
            off = st.positions.get(p)
            target = off if off is not None else OFFSET_BEGINNING
            self._seek(TopicPartition(st.topic, p, target))
            if off is not None:
                st.expected[p] = off
            else:
                st.expected.pop(p, None)
        st.paused = False
        st.held_paused = False
        st.retry_at = None
        self.consumer.resume([TopicPartition(st.topic, p) for p in st.assigned])
        log_event(
            log,
            logging.INFO,
            "table resumed from its checkpoint",
            table=st.table_id,
            positions={str(k): v for k, v in st.positions.items()},
        )

    def _check_offsets(self, consumer: Consumer, st: TableState) -> tuple[str, str] | None:
        """Compare the table's checkpoint with its partitions' available offsets (:mod:`.offset_gaps`).

        A gap returns ``("offset_gap", error naming it)``: the table stops (Hudi Streamer's
        fail-on-data-loss); with ``on_offset_gap="earliest"`` the partition is moved to the earliest
        available offset and a warning logged instead. A broker that does not tell the offsets
        returns ``("transient", error)``: the table waits and checks again, never unchecked."""
        checkpoints = {p: off for p in sorted(st.assigned) if (off := st.positions.get(p)) is not None}
        if not checkpoints:
            return None
        try:
            gaps = find_gaps(consumer, st.topic, checkpoints)
        except OffsetsUnknownError as e:
            return "transient", f"table {st.table_id}: checkpoint not checked against the broker: {e}"
        problems: list[str] = []
        for gap in gaps:
            detail = gap.describe(st.table_id, st.topic)
            if self.config.on_offset_gap == "earliest":
                log_event(
                    log,
                    logging.WARNING,
                    detail + "; resuming from the earliest available offset (--on-offset-gap earliest)",
                    table=st.table_id,
                    topic=st.topic,
                    partition=gap.partition,
                    checkpoint=gap.checkpoint,
                    earliest=gap.earliest,
                    latest=gap.latest,
                )
                if gap.earliest < gap.checkpoint:
                    st.reset.add(gap.partition)
                st.positions[gap.partition] = gap.earliest
                self.metrics.failures.labels(st.table_id, "offset_gap").inc()
            else:
                problems.append(detail)
        if not problems:
            return None
        return "offset_gap", (
            "; ".join(problems) + " (nothing skipped; --on-offset-gap earliest resumes from the earliest)"
        )

    def _seek(self, tp: TopicPartition) -> None:
        assert self.consumer is not None
        for attempt in range(50):
            try:
                self.consumer.seek(tp)
                return
            except Exception:
                if attempt == 49:
                    raise
                time.sleep(0.05)


def tables_synthetic_key() -> str:
    from inlet.services.writer.rows import SYNTHETIC_KEY_COL

    return SYNTHETIC_KEY_COL


def ranges_end(ranges: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    return {p: until for p, (_a, until) in ranges.items()}


def _kind(e: BaseException) -> str:
    if isinstance(e, CommitConflictError):
        return "conflict"
    if isinstance(e, SchemaError):
        return "schema"
    if isinstance(e, (InvalidInputError, *CONVERSION_ERRORS)):
        return "bad_input"
    return "transient"


__all__ = ["OP_COL", "Writer", "WriterConfig"]
