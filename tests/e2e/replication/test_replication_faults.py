"""Exactly-once under faults: components killed while a workload runs, on the stack as
``inlet stack up`` runs it (the broker keeps its topics in the S3 store, so it can restart)."""

from __future__ import annotations

import time

import pytest
from conftest import (
    BackgroundWorkload,
    RunningStack,
    check_offsets,
    compare_hudi_rs,
    compare_inlet,
    start_tables,
    wait_for,
    wait_for_lake,
)

from inlet.core import HudiTable
from inlet.core.faults import AFTER_DATA_FILES, BEFORE_COMPLETE
from inlet.services.writer.service import AFTER_COMMIT

pytestmark = pytest.mark.slow


def _crash_writer_at(stack: RunningStack, point: str) -> None:
    """SIGKILL the writer; the supervisor restarts it with ``INLET_CRASH_AT=point``, so it dies at
    that point of its next batch; the next restart runs without it."""
    writer = stack.command("writer")
    writer.env["INLET_CRASH_AT"] = point
    try:
        killed = stack.kill("writer")
        armed = stack.wait_restarted("writer", killed)
    finally:
        writer.env.pop("INLET_CRASH_AT", None)
    # the armed writer reaches the point with the workload's next batch and exits
    wait_for(lambda: writer.pid != armed, 90, f"the writer to crash at {point}", every_s=0.2)
    stack.wait_restarted("writer", armed)


def test_exactly_once_under_faults(durable_stack: RunningStack) -> None:
    """While a workload runs, one fault after another: the writer SIGKILLed at a random moment
    (three times), each time restarted to die at one fault point: ``after_data_files`` (mid-batch:
    files written, nothing committed), ``before_complete`` (mid-commit: the instant is inflight,
    completion not yet asked for), ``writer_after_commit`` (the commit landed, nothing else
    recorded: its in-memory positions are lost); the CDC consumer SIGKILLed; the broker (its topics
    in the S3 store), the coordinator and Debezium (Kafka Connect) SIGKILLed and restarted by the
    supervisor. Afterwards every table equals PostgreSQL (Inlet's reader; hudi-rs's reader 2 for
    the two tables without TOAST), no record key is duplicated, the crashes before a commit left
    rolled-back (or still pending) writes, and no two commits of a table consumed the same Kafka
    offset (a batch committed twice would). A lost change shows as a missing row, a stale value
    (updates bump values) or an extra row."""
    stack = durable_stack
    w = start_tables(stack, "ft_", seed=22)
    # about 25 changes/s until the last fault is over
    bg = BackgroundWorkload(w, changes=1_000_000, seconds=40_000, alter_after_s=40)
    before = {n: stack.restarts(n) for n in ("writer", "cdc_consumer", "kafka", "coordinator", "debezium")}
    time.sleep(3)
    # each: SIGKILL at a random moment, then the restarted writer dies at the fault point
    for point in (AFTER_DATA_FILES, BEFORE_COMPLETE, AFTER_COMMIT):
        _crash_writer_at(stack, point)
    stack.wait_restarted("cdc_consumer", stack.kill("cdc_consumer"))
    time.sleep(2)
    stack.wait_restarted("kafka", stack.kill("kafka"))
    time.sleep(2)
    stack.wait_restarted("coordinator", stack.kill("coordinator"))
    time.sleep(2)
    stack.wait_restarted("debezium", stack.kill("debezium"), timeout_s=180)
    time.sleep(5)
    assert bg.running, "the workload ended before the last fault"
    bg.stop.set()
    bg.join()
    assert w.columns_added and w.changes >= 2_000, w.changes
    w.close()
    took = wait_for_lake(stack, w.tables, timeout_s=300)
    print(f"{w.changes} changes; lake equal {took:.1f} s after the workload")
    after = {n: stack.restarts(n) for n in before}
    assert after["writer"] - before["writer"] >= 2 * 3
    for n in ("cdc_consumer", "kafka", "coordinator", "debezium"):
        assert after[n] - before[n] >= 1, n
    # the two crashes before a completed commit left instants that were (or wait to be) rolled back
    unfinished = 0
    for t in w.tables:
        for i in HudiTable.open(str(stack.table_path(t))).instants():
            done = str(i.state).endswith("COMPLETED")
            unfinished += (i.action == "rollback" and done) or (i.action == "deltacommit" and not done)
    assert unfinished >= 2, "the writer never died with a write in flight"
    for t in w.tables:
        compare_inlet(stack, t)
        check_offsets(stack.table_path(t))
    for t in w.tables[1:]:
        compare_hudi_rs(stack, t, versions=["2"])
