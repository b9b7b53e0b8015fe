"""Faults: the coordinator SIGKILLed mid-commit (at random, and at exact points), a writer killed
mid-write, Kafka down while commits happen. Every check reads what is durable (the timeline, the
coordinator's database, the broker, the independent hudi-rs reader), never the coordinator's word."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inlet.core import HudiTable, avro
from inlet.core.storage import Storage
from inlet.core.timeline.instant import Instant
from inlet.proto.events.v1 import events_pb2
from inlet.services.coordinator_client.client import GrpcCommitProtocol
from inlet.services.stack import EmbeddedKafka
from inlet.services.stack.processes import free_port

WRITES = 10


def journal_instants(writers: list[Any]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """(acknowledged instant -> ack, every instant a writer was handed by BeginInstant)."""
    acked = {a["instant"]: a for w in writers for a in w.acked()}
    begun = {e["instant"] for w in writers for e in w.journal() if e["event"] == "begun"}
    return acked, begun


def in_flight(writers: list[Any], since: float) -> bool:
    """Whether some writer has a write begun after ``since`` that is neither acked nor failed."""
    for w in writers:
        journal = w.journal()
        answered = {e["instant"] for e in journal if e["event"] in ("acked", "failed")}
        if any(e["event"] == "begun" and e["at"] > since and e["instant"] not in answered for e in journal):
            return True
    return False


def check_acks_exactly_once(e2e: Any, path: Path, table_id: str, writers: list[Any]) -> list[Instant]:
    """Every acknowledged commit is on the timeline, completed once with the acknowledged completion
    time; every completed write on the timeline was acknowledged (a retry never committed twice, and
    no commit happened that its writer was told had failed); the coordinator's database and outbox
    agree (one row per completed instant). Returns the timeline."""
    tl: list[Instant] = e2e.check_times(path, table_id)
    acked, begun = journal_instants(writers)
    done = {i.time: i for i in tl if i.is_completed and i.action in ("commit", "deltacommit")}
    for t, a in acked.items():
        assert t in done, f"acknowledged commit {a} is not on the timeline"
        assert done[t].completion_time == a["completion"], (done[t], a)
    unacked = sorted(set(done) - set(acked))
    assert not unacked, f"completed but not acknowledged to their writer: {unacked}"
    for i in tl:
        if not i.is_completed:  # only an orphan .requested of a BeginInstant that never answered
            assert i.time not in begun and i.state.value == "REQUESTED", i
    return tl


def test_coordinator_sigkilled_while_writers_commit(e2e: Any) -> None:
    """Three writer processes commit in a loop (disjoint partitions) while the coordinator is
    SIGKILLed and restarted three times, each time as soon as a write is in flight (begun, not yet
    answered: in MarkInflight, its data files or CompleteInstant). Clients retry UNAVAILABLE; afterwards
    every acknowledged commit is on the timeline exactly once, nothing else completed, the outbox has
    one row per completed instant, and hudi-rs reads each writer's last write."""
    coordinator = e2e.coordinator()
    path = e2e.cow_table("kill")
    with e2e.client(coordinator) as client:
        client.register_table("kill", str(path))
    jobs = {
        f"w{n}": [
            {"op": "upsert", "rows": e2e.rows([100 * n + j for j in range(3)], f"p{n}", i + 1, float(i))}
            for i in range(WRITES)
        ]
        for n in range(3)
    }
    writers = [
        e2e.writer(coordinator, "kill", path, name, writes, pause_s=0.3, retries=300, max_backoff_s=0.3)
        for name, writes in jobs.items()
    ]
    deadline = time.monotonic() + 90
    while not all(w.acked() for w in writers):  # every writer is in its loop
        assert time.monotonic() < deadline, [w.journal() for w in writers]
        time.sleep(0.05)
    rng = random.Random(5)
    outages: list[tuple[float, float]] = []
    for _ in range(3):
        # kill while a write is in flight: begun (after the last restart) and not yet answered
        since = outages[-1][1] if outages else 0.0
        while not in_flight(writers, since):
            assert time.monotonic() < deadline + 60, [w.journal() for w in writers]
            time.sleep(0.005)
        killed = time.time()  # at once: a write takes only some 15-50 ms here
        coordinator.kill()
        time.sleep(rng.uniform(0.0, 0.5))
        coordinator.start()
        outages.append((killed, time.time()))
    codes = e2e.wait_writers(writers)
    assert codes == [0, 0, 0], [w.failed() for w in writers]
    assert all(len(w.acked()) == WRITES for w in writers)
    assert coordinator.starts == 4
    # the outages caught writes in the middle (begun before the kill, acknowledged after the
    # restart): those commits went through retried calls
    spans = [
        (b["at"], a["at"])
        for w in writers
        for b in w.journal()
        if b["event"] == "begun"
        for a in w.acked()
        if a["instant"] == b["instant"]
    ]
    caught = [
        any(begun < killed and restarted < acked for begun, acked in spans) for killed, restarted in outages
    ]
    assert sum(caught) >= 2, (outages, spans)  # a write may still finish between the look and the kill

    check_acks_exactly_once(e2e, path, "kill", writers)
    expected = sorted((r for writes in jobs.values() for r in writes[-1]["rows"]), key=lambda r: r["id"])
    for version in ("1", "2"):
        assert e2e.hudi_rows(path, version) == expected


@pytest.mark.parametrize("point", ["complete_file", "complete_reply", "begin_file"])
def test_coordinator_crash_at_exact_points_is_retried_idempotently(e2e: Any, point: str) -> None:
    """The coordinator dies at an exact point of its second BeginInstant/CompleteInstant (injected
    os._exit: after the completed instant file is written but before its transaction commits; after
    the commit but before the reply; right after a .requested file is written, which follows the
    commit of its issue). Restarted, the writer's retries (same request ids) get one answer: each write is
    acknowledged and completed exactly once, with one outbox row."""
    coordinator = e2e.coordinator(crash_at=point, crash_nth=2)
    path = e2e.cow_table("crash")
    with e2e.client(coordinator) as client:
        client.register_table("crash", str(path))
    writes = [{"op": "upsert", "rows": e2e.rows([1, 2], "a", i + 1, float(i))} for i in range(3)]
    w = e2e.writer(coordinator, "crash", path, "w", writes, retries=200, backoff_s=0.05, max_backoff_s=0.2)
    assert coordinator.wait_exit(120) == 77, coordinator.log_tail()
    assert f"INLET_E2E_CRASH at {point}" in coordinator.log_tail()
    coordinator.start()
    assert e2e.wait_writers([w]) == [0], w.journal()
    assert len(w.acked()) == 3
    tl = check_acks_exactly_once(e2e, path, "crash", [w])
    # a crashed BeginInstant had recorded its issue before writing the file: the retry took it over
    assert [i for i in tl if not i.is_completed] == []
    assert e2e.hudi_rows(path, "2") == writes[-1]["rows"]


def test_crash_right_after_begin_leaves_no_orphan_instant(e2e: Any) -> None:
    """The coordinator dies right after writing a .requested file. The issue was recorded in the
    database before the file was written, so the writer's retry of BeginInstant (same request id)
    gets the same instant and the write commits: nothing stays pending, on the timeline or in the
    database, and the instant the writer acknowledges is the one the crashed call issued."""
    coordinator = e2e.coordinator(crash_at="begin_file", crash_nth=1)
    path = e2e.cow_table("orphan")
    with e2e.client(coordinator) as client:
        # a timeout longer than the restart plus the client's reconnect backoff: the writer is alive
        client.register_table("orphan", str(path), heartbeat_timeout_ms=15000)
    rows = e2e.rows([1], "a", 1, 1.0)
    w = e2e.writer(
        coordinator, "orphan", path, "w", [{"op": "upsert", "rows": rows}], retries=400, max_backoff_s=0.2
    )
    assert coordinator.wait_exit(120) == 77, coordinator.log_tail()
    issued = [i.time for i in e2e.timeline(path) if not i.is_completed]
    assert len(issued) == 1, issued  # the crashed call's .requested file
    coordinator.start()
    assert e2e.wait_writers([w]) == [0], w.journal()
    assert [i for i in e2e.timeline(path) if not i.is_completed] == []
    assert [r for r in e2e.db_instants("orphan") if r.state not in ("COMPLETED", "ROLLED_BACK")] == []
    [ack] = w.acked()
    assert ack["instant"] == issued[0], (issued, ack)
    check_acks_exactly_once(e2e, path, "orphan", [w])


def test_complete_retry_after_another_call_reconciled_the_crashed_completion(e2e: Any) -> None:
    """The coordinator dies after writing the completed instant file, before its transaction commits.
    Another coordinator on the same database serves a BeginInstant of the table first (which records
    the completion it finds on the timeline); then the writer's retry of CompleteInstant reaches the
    restarted coordinator. The retry must still be answered with the completion (idempotent)."""
    coordinator = e2e.coordinator(crash_at="complete_file", crash_nth=1)
    path = e2e.cow_table("reconcile")
    with e2e.client(coordinator) as client:
        client.register_table("reconcile", str(path))
    rows = e2e.rows([1, 2], "a", 1, 1.0)
    w = e2e.writer(
        coordinator, "reconcile", path, "w", [{"op": "upsert", "rows": rows}], retries=400, max_backoff_s=0.2
    )
    assert coordinator.wait_exit(120) == 77, coordinator.log_tail()
    other = e2e.coordinator()  # another replica, on another port: the writer cannot reach it
    with e2e.client(other) as client:
        t = client.begin_instant("reconcile", "commit", writer_id="other").instant.instant_time
        client.abort_instant("reconcile", t, "test")
    other.stop()
    coordinator.start()
    e2e.wait_writers([w])
    assert w.acked() and not w.failed(), w.journal()
    check_acks_exactly_once(e2e, path, "reconcile", [w])


@pytest.mark.parametrize(
    ("table_type", "how"), [("COPY_ON_WRITE", "crash_after_data_files"), ("MERGE_ON_READ", "sigkill")]
)
def test_killed_writer_is_rolled_back_after_heartbeat_expiry(e2e: Any, table_type: str, how: str) -> None:
    """A writer dies after BeginInstant with its data files written (INLET_CRASH_AT=after_data_files,
    or SIGKILL while it waits before CompleteInstant). Once its heartbeats stop for the table's
    timeout (1.5 s) the coordinator's janitor rolls it back: a completed rollback instant names it,
    its files are gone, and hudi-rs reads the table as if it never started. Meanwhile a second
    writer that is alive but slow (held at its gate for 3x the timeout) is not rolled back and
    commits."""
    timeout_ms = 1500
    coordinator = e2e.coordinator()
    path = e2e.lake / "victim"
    HudiTable.create(
        str(path),
        name="victim",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
    )
    data0 = e2e.rows([1, 2, 3], "a", 1, 1.0) + e2e.rows([4], "b", 1, 1.0)
    with e2e.client(coordinator) as client:
        client.register_table("victim", str(path), heartbeat_timeout_ms=timeout_ms)
        protocol = GrpcCommitProtocol(client, "victim", Storage(str(path)), writer_id="seed")
        try:
            HudiTable.open(str(path), commit_protocol=protocol).write(pa.Table.from_pylist(data0), "upsert")
        finally:
            protocol.close()

    victim_rows = e2e.rows([1, 2], "a", 2, 50.0) + e2e.rows([9], "a", 2, 50.0)
    alive_rows = e2e.rows([4], "b", 2, 60.0)
    if how == "sigkill":
        victim = e2e.writer(
            coordinator,
            "victim",
            path,
            "victim",
            [{"op": "upsert", "rows": victim_rows}],
            complete_after=["never"],
        )
    else:
        victim = e2e.writer(
            coordinator,
            "victim",
            path,
            "victim",
            [{"op": "upsert", "rows": victim_rows}],
            env={"INLET_CRASH_AT": "after_data_files"},
        )
    alive = e2e.writer(
        coordinator,
        "victim",
        path,
        "alive",
        [{"op": "upsert", "rows": alive_rows}],
        complete_after=["release"],
    )
    deadline = time.monotonic() + 90
    ready = e2e.gates / ("victim.ready" if how == "sigkill" else "victim.begun")
    while not (ready.exists() and (e2e.gates / "alive.ready").exists()):
        assert time.monotonic() < deadline, (victim.journal(), alive.journal())
        time.sleep(0.05)
    if how == "sigkill":
        victim.kill()
    assert e2e.wait_writers([victim], timeout_s=60) == ([-9] if how == "sigkill" else [77])
    killed_at = time.monotonic()
    [t] = [e["instant"] for e in victim.journal() if e["event"] == "begun"]
    assert files_written(path, t), "the victim died before writing its files"
    time.sleep(0.5)
    assert any(i.time == t for i in e2e.timeline(path)), "rolled back too early"

    rollback = None
    while rollback is None:
        assert time.monotonic() - killed_at < 60, e2e.timeline(path)
        rollback = next(
            (
                i
                for i in e2e.timeline(path)
                if i.action == "rollback" and i.is_completed and rollback_target(path, i) == t
            ),
            None,
        )
        time.sleep(0.1)
    assert time.monotonic() - killed_at >= 0.5 * timeout_ms / 1000
    time.sleep(max(0.0, 3 * timeout_ms / 1000 - (time.monotonic() - killed_at)))
    (e2e.gates / "release").write_text("")
    assert e2e.wait_writers([alive]) == [0], alive.journal()

    tl = e2e.timeline(path)
    assert not any(i.time == t for i in tl), f"the rolled-back instant {t} is still on the timeline"
    assert files_written(path, t) == []
    [row] = [r for r in e2e.db_instants("victim") if r.instant_time == t]
    assert (row.state, row.rolled_back_by) == ("ROLLED_BACK", rollback.time)
    e2e.check_times(path, "victim")
    expected = sorted(data0[:3] + alive_rows, key=lambda r: r["id"])
    for version in ("1", "2"):
        assert e2e.hudi_rows(path, version) == expected
    assert e2e.inlet_rows(path) == expected


def files_written(path: Path, instant_time: str) -> list[str]:
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and instant_time in p.name
    )


def rollback_target(path: Path, rollback: Instant) -> str | None:
    """The instant a completed rollback rolled back, from its HoodieRollbackMetadata."""
    table = HudiTable.open(str(path))
    md = avro.decode(table.timeline.read_bytes(rollback), "rollback metadata")
    targets = md.get("commitsRollback") or []
    return str(targets[0]) if targets else None


def consume(bootstrap: str, topic: str, want: int, timeout_s: float = 60.0) -> list[Any]:
    """Every message of ``topic`` (all partitions, from the beginning) until ``want`` arrived."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-{topic}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
        # anything more (a duplicate) arrives within a few more polls
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
        return got
    finally:
        consumer.close()


def test_kafka_down_while_commits_happen(e2e: Any) -> None:
    """The coordinator's broker (our own Apache Kafka, not the shared one) stops; writers commit several
    times on two tables meanwhile (commits do not wait for Kafka); the publisher's deliveries fail
    (recorded in the outbox); a new broker starts on the same port; then every event of the outage
    arrives, in completion order per table, none missing, and a later commit's event follows."""
    topic = "inlet.commits.e2e"
    port = free_port()
    broker = EmbeddedKafka(port=port).start()
    try:
        coordinator = e2e.coordinator(kafka_bootstrap=broker.bootstrap, topic=topic)
        paths = {t: e2e.cow_table(t) for t in ("t1", "t2")}
        with e2e.client(coordinator) as client:
            for t, p in paths.items():
                client.register_table(t, str(p))
        broker.stop()

        writers = [
            e2e.writer(
                coordinator,
                t,
                p,
                f"{t}-outage",
                [{"op": "upsert", "rows": e2e.rows([1, 2], "a", i + 1, float(i))} for i in range(3)],
            )
            for t, p in paths.items()
        ]
        assert e2e.wait_writers(writers) == [0, 0]
        outage = {t: [r.event_id for r in e2e.db_outbox(t)] for t in paths}
        assert all(len(ids) == 3 for ids in outage.values()), outage
        deadline = time.monotonic() + 60
        while not any(r.last_error for t in paths for r in e2e.db_outbox(t)):
            assert time.monotonic() < deadline, "the publisher never tried (and failed) to deliver"
            time.sleep(0.2)
        assert not any(r.published for t in paths for r in e2e.db_outbox(t))

        broker = EmbeddedKafka(port=port).start()
        deadline = time.monotonic() + 90
        while not all(r.published for t in paths for r in e2e.db_outbox(t)):
            assert time.monotonic() < deadline, [e2e.db_outbox(t) for t in paths]
            time.sleep(0.2)
        after = e2e.writer(
            coordinator, "t1", paths["t1"], "t1-after", [{"op": "upsert", "rows": e2e.rows([3], "a", 9, 9.0)}]
        )
        assert e2e.wait_writers([after]) == [0]
        [late] = [a["instant"] for a in after.acked()]

        messages = consume(broker.bootstrap, topic, want=7)
        events: dict[str, list[events_pb2.CommitEvent]] = {t: [] for t in paths}
        for m in messages:
            event = events_pb2.CommitEvent.FromString(m.value())
            assert m.key() == event.table_id.encode()
            events[event.table_id].append(event)
        for t, p in paths.items():
            done = [i for i in e2e.check_times(p, t) if i.is_completed]
            by_completion = [f"{t}/{i.time}" for i in sorted(done, key=lambda i: i.completion_time or "")]
            first: dict[str, events_pb2.CommitEvent] = {}
            for e in events[t]:  # at-least-once: a redelivery repeats an earlier event id
                first.setdefault(e.event_id, e)
            assert list(first) == by_completion, f"{t}: events {list(first)}, timeline {by_completion}"
            assert set(outage[t]) <= set(first)
            assert [e.sequence for e in first.values()] == list(range(1, len(first) + 1))
        assert events["t1"][-1].event_id == f"t1/{late}"
    finally:
        broker.stop()
