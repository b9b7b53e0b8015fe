"""The table services' compaction rule for plans others requested: a fresh plan is its scheduler's
(left alone), one requested long ago and never started is abandoned (run); then a new plan is
scheduled when Hudi's trigger says so."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.timeline.instant import State
from inlet.services.table_services.actions import COMPACTION, run_services

DUE = {"hoodie.compact.inline.max.delta.commits": "1"}


def test_fresh_plans_are_left_to_their_scheduler_and_stale_ones_run(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    HudiTable.create(path, name="t", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    for ts in (1, 2):
        HudiTable.open(path).write(
            pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([ts, ts], pa.int64())}), "upsert"
        )
    planned = HudiTable.open(path).schedule_compaction(DUE)
    assert planned is not None

    fresh = run_services(HudiTable.open(path), "t", (COMPACTION,), {}, stale_plan_s=3600)
    assert fresh.completed == {} and any(planned in why for why in fresh.skipped)
    states = {c.instant_time: c.state for c in HudiTable.open(path).compactions()}
    assert states == {planned: State.REQUESTED}

    stale = run_services(HudiTable.open(path), "t", (COMPACTION,), {}, stale_plan_s=0)
    assert stale.completed == {COMPACTION: [planned]}
    states = {c.instant_time: c.state for c in HudiTable.open(path).compactions()}
    assert states == {planned: State.COMPLETED}
    assert [r["ts"] for r in HudiTable.open(path).read().to_pylist()] == [2, 2]
