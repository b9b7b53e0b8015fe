"""Helpers of the catalog sync tests: a recording Thrift client and readers of what the metastore holds."""

from __future__ import annotations

import uuid
from typing import Any

from inlet.services.catalog_sync import MetastoreClient
from inlet.services.stack import EmbeddedPostgres

#: table/partition parameters the metastore itself adds (DDL time, basic stats; Hive 4 also counts
#: erasure-coded files); Hudi sets none of them
HMS_OWNED_PARAMS = frozenset(
    {
        "transient_lastDdlTime",
        "numFiles",
        "numFilesErasureCoded",
        "totalSize",
        "numRows",
        "rawDataSize",
        "COLUMN_STATS_ACCURATE",
    }
)


class RecordingClient(MetastoreClient):
    """A MetastoreClient that also records the arguments of every call."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.log: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any) -> Any:
        self.log.append((method, args))
        return super().call(method, *args)

    def reset_counts(self) -> None:
        super().reset_counts()
        self.log.clear()


def table_params(tbl: Any) -> dict[str, str]:
    return {k: v for k, v in (tbl.parameters or {}).items() if k not in HMS_OWNED_PARAMS}


def columns(cols: list[Any]) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in cols]


def partitions(client: MetastoreClient, db: str, table: str) -> dict[tuple[str, ...], str]:
    """values -> location of every partition of the table."""
    return {tuple(p.values): p.sd.location for p in client.call("get_partitions", db, table, -1)}


def metastore_database(postgres_server: EmbeddedPostgres) -> str:
    """The URL of a fresh database on the session's PostgreSQL for one metastore's catalog (the
    metastore creates it when it starts)."""
    return postgres_server.url(f"hms_{uuid.uuid4().hex[:12]}")
