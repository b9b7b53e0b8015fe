"""Initial loads as the tests run them: ``public.src_*`` of the test's database into a lake, through
an in-process coordinator, and the rows a loaded table holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from inlet.core import HudiTable
from inlet.services.coordinator_client.client import CoordinatorClient
from inlet.services.writer import initial_load


def load(url: str, coordinator_address: str, lake: Path, slot: str, **kw: Any) -> initial_load.LoadSummary:
    """``initial_load.load`` of ``public.src_*`` (topic prefix ``srv``, publication ``<slot>_pub``);
    ``kw`` are its keyword arguments (``options``, ``resume``, ``spark``, ``progress_path``...)."""
    with CoordinatorClient(coordinator_address) as client:
        return initial_load.load(
            url,
            ["public.src_*"],
            client=client,
            lake_root=str(lake),
            topic_prefix="srv",
            slot=slot,
            publication=slot + "_pub",
            **kw,
        )


def table_path(url: str, lake: Path, table: str) -> Path:
    """Where the load puts ``public.<table>`` of the database ``url`` names."""
    return lake / str(psycopg.conninfo.conninfo_to_dict(url)["dbname"]) / "public" / table


def lake_rows(path: Path) -> dict[int, str]:
    """``id -> v`` of a loaded table, checking every key is there once."""
    got = HudiTable.open(str(path)).read(columns=["id", "v"], meta_columns=False)
    ids = got.column("id").to_pylist()
    assert len(ids) == len(set(ids))
    return dict(zip(ids, got.column("v").to_pylist(), strict=True))
