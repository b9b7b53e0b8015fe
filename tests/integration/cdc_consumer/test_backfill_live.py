"""An online backfill racing writes to the same keys ends with the lake equal to PostgreSQL (issue #24).

PostgreSQL -> the real Debezium 3.6 connector with Inlet's signal settings
(:func:`inlet.services.backfill.connector_settings`, chunks of 10 rows) -> the CDC consumer service
-> the writer's rows (``batch_input``, the lookups the writer service uses) -> upserts into a
Merge-on-Read table made as the writer makes it, in topic order. The connector starts without a data
snapshot (the table's rows are not in the lake: a table added to a running pipeline), some changes
stream, then ``inlet backfill`` (the CLI, in-process) signals the incremental snapshot while a
thread keeps updating, deleting and re-inserting keys of the table and a transaction that updated one
key stays open across the whole snapshot; it follows Debezium's notifications until COMPLETED. The CDC
consumer service runs in-process on the connector's topics; its output is written, and ``inlet verify``'s
comparison must find the lake equal to PostgreSQL.

The open transaction pins why snapshot reads keep ``_event_lsn`` 0 (``rows.SNAPSHOT_ORDERING``): its
update streams *after* the ``r`` event of its key (it commits after the snapshot), with an LSN
*below* those of changes streamed before that ``r`` event (Debezium's incremental ``r`` events carry
no LSN of their own), so ordering the read by its position in the stream would keep the older copy.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cdc_helpers import make_config, running, topics_with_prefix, wait_for
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inlet.core import HudiTable
from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services import backfill
from inlet.services.cli.main import main
from inlet.services.stack import TEST_CONSUMER_SETTINGS
from inlet.services.verify.verifier import EQUAL, Verifier, VerifyOptions
from inlet.services.writer import tables
from inlet.services.writer.lookup import batch_input
from inlet.services.writer.rows import Change

pytestmark = pytest.mark.slow

ROWS = 300
HELD = 150  # the key the long transaction updates
MARKER = 100_000  # inserted last: the stream has everything once it arrives


def _racer(url: str, stop: threading.Event, done: list[int]) -> None:
    """Updates, deletes and re-inserts random keys (never HELD), one transaction each, until ``stop``."""
    rnd = random.Random(24)
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            k = rnd.choice([i for i in range(1, ROWS + 20) if i != HELD])
            what = rnd.random()
            if what < 0.5:
                conn.execute("UPDATE public.items SET v = v + 1, note = 'raced' WHERE id = %s", (k,))
            elif what < 0.75:
                conn.execute("DELETE FROM public.items WHERE id = %s", (k,))
            else:
                conn.execute(
                    "INSERT INTO public.items VALUES (%s, %s, 'reinserted') ON CONFLICT (id) DO NOTHING",
                    (k, -k),
                )
            done[0] += 1
            time.sleep(0.002)


def _read_changes(bootstrap: str, topic: str, timeout_s: float = 120.0) -> list[tuple[int, pb.ChangeEvent]]:
    """(partition, change) on the CDC consumer's output ``topic``, its partitions interleaved as read
    (each key's changes in order), up to the MARKER row's insert and until nothing more comes for a second."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
        | dict(TEST_CONSUMER_SETTINGS)
    )
    out: list[tuple[int, pb.ChangeEvent]] = []
    try:
        partitions = wait_for(lambda: consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout_s
        marker_at = None
        while time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=500, timeout=0.3)
            for m in msgs:
                assert m.error() is None, m.error()
                rec = pb.ChangeRecord.FromString(m.value())
                if rec.HasField("change"):
                    out.append((m.partition(), rec.change))
                    if rec.change.op == pb.OPERATION_CREATE and _id(rec.change) == MARKER:
                        marker_at = time.monotonic()
            if marker_at is not None and not msgs and time.monotonic() - marker_at > 1.0:
                return out
        raise AssertionError(f"the marker row never arrived on {topic} ({len(out)} changes read)")
    finally:
        consumer.close()


def _id(ev: pb.ChangeEvent) -> int:
    row = ev.before if ev.op == pb.OPERATION_DELETE else ev.after
    return int(row.values[0].int_value)  # id is the first column


def test_backfill_racing_updates_and_deletes(
    postgres_server: Any,
    debezium_factory: Any,
    kafka_bootstrap: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"t_backfill_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    prefix = f"bf{uuid.uuid4().hex[:8]}"
    dbz = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, v int NOT NULL, note text)")
            conn.execute(
                "INSERT INTO public.items SELECT i, i, 'loaded ' || i FROM generate_series(1, %s) i", (ROWS,)
            )
        backfill.ensure_signal_table(url)
        dbz = debezium_factory(
            url,
            prefix,
            table_include_list=["public.items"],  # Debezium adds the signal table (filtered publication)
            snapshot_mode="no_data",
            extra_config=backfill.connector_settings(prefix, chunk_size=10),
        )
        with psycopg.connect(url, autocommit=True) as conn:  # streamed before the backfill
            conn.execute("UPDATE public.items SET v = v + 1000 WHERE id <= 10")
            conn.execute("DELETE FROM public.items WHERE id BETWEEN 11 AND 15")
        held = psycopg.connect(url)  # a transaction open across the whole snapshot
        held.execute("UPDATE public.items SET v = -7, note = 'held' WHERE id = %s", (HELD,))
        stop, done = threading.Event(), [0]
        racer = threading.Thread(target=_racer, args=(url, stop, done), daemon=True)
        racer.start()
        with running(make_config(kafka_bootstrap, prefix)):
            try:
                flags = ["--source", url, "--kafka-bootstrap", kafka_bootstrap, "--topic-prefix", prefix]
                code = main(["backfill", *flags, "--timeout", "120", "public.items"])
            finally:
                stop.set()
                racer.join()
            held.commit()
            held.close()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("INSERT INTO public.items VALUES (%s, 0, 'marker')", (MARKER,))
            read = _read_changes(kafka_bootstrap, f"inlet.changes.{dbz.topic('items')}")
        changes = [c for _, c in read]
        # the signal table's rows (the signal, each chunk's watermarks) are no table of the lake
        assert topics_with_prefix(kafka_bootstrap, f"inlet.changes.{prefix}.") == [
            f"inlet.changes.{dbz.topic('items')}"
        ]
        out, err = capsys.readouterr()
        assert code == 0, err
        # progress from Debezium's notifications: started, one line per chunk, the table's rows, completed
        lines = [line.split(": ", 1)[1] for line in err.splitlines() if line.startswith("backfill ")]
        assert lines[1].startswith("started: public.items") and lines[-1] == "completed", lines
        assert sum("chunk read up to key" in line for line in lines) >= 10, lines
        report = json.loads(out)
        assert report["tables"] == ["public.items"] and report["rows_read"]["public.items"] > ROWS // 4
        assert done[0] > 20, f"only {done[0]} racing changes during the backfill"

        reads = [c for c in changes if c.op == pb.OPERATION_READ]
        assert 0 < len(reads) < ROWS + 20, len(reads)
        # the held key: read with its old value; its update streams after that read, with an LSN below
        # that of changes streamed before the read (so below any position the read could be given)
        (held_read,) = [c for c in reads if _id(c) == HELD]
        held_update = next(c for c in changes if c.op == pb.OPERATION_UPDATE and _id(c) == HELD)
        at = changes.index(held_read)
        assert at < changes.index(held_update)
        # (in its output partition, the order the writer owning it reads)
        assert held_update.source.lsn < max(c.source.lsn for p, c in read[:at] if p == read[at][0])

        lake_root = str(tmp_path / "lake")
        path = tables.table_path(lake_root, name, "public", "items")
        tables.open_or_create(path, "items", name, ["id"], tables.TableSettings())
        for start in range(0, len(changes), 97):  # batches in topic order, as the writer commits them
            table = HudiTable.open(path)
            batch = [Change(ev, 0, start + n) for n, ev in enumerate(changes[start : start + 97])]
            table.write(batch_input(batch, table), "upsert")

        (report,) = Verifier(
            VerifyOptions(source_url=url, lake_root=lake_root, tables=("public.items",), rechecks=0)
        ).run()
        assert report.status == EQUAL, report.as_json()
        assert report.source_rows > ROWS // 4
    finally:
        if dbz is not None:
            debezium_factory.release(dbz)
        postgres_server.drop_database(name)


def test_a_backfill_survives_a_connector_restart(
    postgres_server: Any, debezium_factory: Any, kafka_bootstrap: str
) -> None:
    """Debezium keeps an incremental snapshot's position in its offsets: a connector stopped in the
    middle of a backfill resumes it when it starts again, under the same signal id, so ``inlet
    backfill`` (:func:`~inlet.services.backfill.follow`) sees it through to COMPLETED, and every row
    of the table was read."""
    name = f"t_backfill_{uuid.uuid4().hex[:8]}"
    url = postgres_server.create_database(name)
    prefix = f"bf{uuid.uuid4().hex[:8]}"
    dbz = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, v int NOT NULL, note text)")
            conn.execute("INSERT INTO public.items SELECT i, i, 'x' FROM generate_series(1, %s) i", (ROWS,))
        backfill.ensure_signal_table(url)
        dbz = debezium_factory(
            url,
            prefix,
            table_include_list=["public.items"],
            snapshot_mode="no_data",
            extra_config=backfill.connector_settings(prefix, chunk_size=10),
        )
        reader = backfill.NotificationReader(kafka_bootstrap, backfill.notification_topic(prefix))
        try:
            signal_id = backfill.send_signal(url, ["public.items"])
            seen: list[str] = []
            for n in backfill.follow(reader, signal_id, timeout_s=120):
                seen.append(n.type)
                if seen.count("IN_PROGRESS") == 3:
                    dbz.restart()
        finally:
            reader.close()
        assert seen[-1] == "COMPLETED" and seen.count("IN_PROGRESS") > 3, seen
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO public.items VALUES (%s, 0, 'marker')", (MARKER,))
        consumer = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}"}
            | dict(TEST_CONSUMER_SETTINGS)
        )
        read: set[int] = set()
        try:
            consumer.assign([TopicPartition(dbz.topic("items"), 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 60
            while MARKER not in read and time.monotonic() < deadline:
                for m in consumer.consume(num_messages=500, timeout=0.3):
                    if m.value() is not None:
                        payload = json.loads(m.value())["payload"]
                        read.add(payload["after"]["id"])
        finally:
            consumer.close()
        assert read == {*range(1, ROWS + 1), MARKER}
    finally:
        if dbz is not None:
            debezium_factory.release(dbz)
        postgres_server.drop_database(name)
