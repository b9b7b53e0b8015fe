"""Helpers of the coordinator tests (imported by name: pytest puts this directory on sys.path)."""

from __future__ import annotations

import pyarrow as pa


def rows(ids: list[int], city: str, ts: int, fare: float = 1.0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [city] * len(ids),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "fare": [fare + i for i in range(len(ids))],
        }
    )
