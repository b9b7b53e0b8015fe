"""Hudi's commit-callback JSON carries a write stat's ``cdcStats`` (path -> bytes) as
``HoodieWriteStat.getCdcStats`` gives it to Jackson, and null when no CDC file was written."""

from __future__ import annotations

from inlet.proto.hudi.v1 import commit_pb2
from inlet.services.coordinator.hudi_callback import write_stat_json


def test_callback_json_carries_cdc_stats() -> None:
    logged = commit_pb2.WriteStat(
        file_id="f1", path="p/f1_0-0-0_1.parquet", cdc_stats={"p/.f1_1.log.1_0-0-0.cdc": 123}
    )
    assert write_stat_json(logged)["cdcStats"] == {"p/.f1_1.log.1_0-0-0.cdc": 123}
    assert write_stat_json(commit_pb2.WriteStat(file_id="f2", path="p/f2.parquet"))["cdcStats"] is None
