"""The source's replication slots as metrics (issue #22 items 4 and 6), against a real PostgreSQL:
the WAL a slot holds back and its unconfirmed lag grow with writes; a dropped slot's series go; a
slot near its max_slot_wal_keep_size budget, or whose WAL is unreserved, is a warning."""

from __future__ import annotations

import time
import uuid

import psycopg
from prometheus_client import CollectorRegistry

from inlet.services.cdc_consumer.slots import SlotMonitor, SlotState


def test_slot_metrics_follow_the_wal_a_slot_holds(pg_url: str) -> None:
    slot = "mon_" + uuid.uuid4().hex[:10]
    registry = CollectorRegistry()
    monitor = SlotMonitor(pg_url, registry)

    def sample(name: str) -> float | None:
        return registry.get_sample_value(name, {"slot": slot})

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            [first] = monitor.poll()  # only this database's slots
            assert first.slot == slot and not first.active
            conn.execute("CREATE TABLE filler (id int, pad text)")
            conn.execute("INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g")
            assert first.retained_wal_bytes is not None
            # pg_current_wal_lsn() is the WAL *written*: with synchronous_commit=off (the test
            # server's) the WAL writer gets there within its wal_writer_delay, so wait for it
            deadline = time.monotonic() + 30
            while True:
                [after] = monitor.poll()
                assert after.retained_wal_bytes is not None
                if (
                    after.retained_wal_bytes > first.retained_wal_bytes + 500_000
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(0.1)
            assert after.retained_wal_bytes > first.retained_wal_bytes + 500_000  # ~1 MB of rows
            assert after.lag_bytes is not None and after.lag_bytes > 500_000  # nobody confirmed it
            assert sample("inlet_cdc_slot_retained_wal_bytes") == after.retained_wal_bytes
            assert sample("inlet_cdc_slot_lag_bytes") == after.lag_bytes
            assert sample("inlet_cdc_slot_active") == 0
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert monitor.poll() == []
    assert sample("inlet_cdc_slot_retained_wal_bytes") is None  # a dropped slot's series go


def test_a_slot_near_its_wal_budget_is_a_warning() -> None:
    def state(budget: int | None, status: str = "extended") -> SlotState:
        return SlotState("s", True, 900, 10, status, budget, 1000 if budget is not None else None)

    assert state(None).warning(0.8) is None  # no max_slot_wal_keep_size: no budget
    assert state(500).warning(0.8) is None
    assert state(150).warning(0.8) == (
        "slot s holds 85% of max_slot_wal_keep_size (150 bytes left before the server invalidates it)"
    )
    assert "unreserved" in (state(500, "unreserved").warning(0.8) or "")
    assert "lost" in (state(None, "lost").warning(0.8) or "")
