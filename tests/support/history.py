"""A model of the core tests' partitioned table by instant (rows by id after every write or delete),
and the table it describes; shared by the savepoint and restore tests."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from inlet.core import HudiTable
from support.tables import rows, trips

CITIES = ["sf", "nyc", "la"]


class Model:
    """Rows by id after each write, keyed by the write's instant time."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.current: dict[int, dict[str, Any]] = {}
        self.at: dict[str, list[dict[str, Any]]] = {}
        self.step = 0

    def write(self, table: HudiTable, first: bool = False) -> str:
        self.step += 1
        ids = list(range(20)) if first else self.rng.sample(range(30), 8)
        batch = trips(ids, [CITIES[i % 3] for i in ids], self.step, f"w{self.step}")
        # the first write makes base files: hudi-rs 0.5.0's v1 file-group reader fails on log-only
        # MOR slices ("Unable to get field named ts")
        t = table.write(batch, "bulk_insert" if first else "upsert").instant_time
        for r in rows(batch):
            self.current[r["id"]] = r
        self.at[t] = self.snapshot()
        return t

    def delete(self, table: HudiTable) -> str:
        ids = self.rng.sample(sorted(self.current), 3)
        t = table.delete(trips(ids, [CITIES[i % 3] for i in ids], self.step, "del")).instant_time
        for i in ids:
            del self.current[i]
        self.at[t] = self.snapshot()
        return t

    def restore(self, t: str) -> None:
        """Back to the state at ``t``: the later states are forgotten."""
        self.current = {r["id"]: dict(r) for r in self.at[t]}
        self.at = {k: v for k, v in self.at.items() if k <= t}

    def snapshot(self) -> list[dict[str, Any]]:
        return sorted(self.current.values(), key=lambda r: r["id"])


def data_rows(read: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "_hoodie_commit_time"} for r in read]


def make_table(path: Path, table_type: str, index: str) -> HudiTable:
    return HudiTable.create(
        str(path),
        name="t",
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        index=index,
        buckets=2,
    )
