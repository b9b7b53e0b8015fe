"""``inlet verify --repair``: make a lake table equal to its source again, in one ordinary commit.

For the differing keys the source's current rows are read (rendered as the initial load renders
them) and upserted as Debezium ``r`` rows; keys the source no longer holds are deleted the way the
writer deletes (``_hoodie_is_deleted`` rows in the same upsert, op ``d``), and so is the stored
copy of a key the source now holds in another partition (a partitioned table: the row is moved,
never copied). Every row carries, as
``_event_lsn``, the source's WAL position taken before the rows are read
(:meth:`SourceReader.repair_point`), so with the table's EVENT_TIME_ORDERING a repair row wins over
the stale lake row and loses to any change that streams in after it. Columns the source side does
not compare (no rendering, or gone from the source) keep the lake's value.

The commit goes through the commit coordinator when one is given (the table registered under
``<topic prefix>.<schema>.<table>``; a one-writer table's writer lease held, as the writer holds
it), else through the table's own commit protocol, as ``inlet writer load`` writes.

Replication checkpoint: the commit's extraMetadata carries ``inlet.verify.repair`` (what it did)
and no ``deltastreamer.checkpoint.key``. The writer (like Apache Hudi Streamer) resumes each Kafka
partition from the newest completed commit that *has* a checkpoint and skips commits without one
(:func:`inlet.services.writer.checkpoint.table_checkpoint`), so a repair commit neither moves nor
hides the replication position. Copying the previous checkpoint forward would be wrong: with
several writers on a non-blocking table the newest commit per partition may be another worker's,
committed while the repair ran, and a copied, older position would make the writer re-read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from inlet.core import HudiTable
from inlet.core.config import NBCC_MODE, TableConfig
from inlet.core.storage import Storage
from inlet.services.coordinator_client.client import CoordinatorClient, GrpcCommitProtocol
from inlet.services.coordinator_client.locks import hold_lease
from inlet.services.logs import log_event
from inlet.services.verify.compare import row_hashes
from inlet.services.verify.lake import WRITER_COLUMNS, open_table, read_hashed
from inlet.services.verify.source import SourceReader, SourceTable
from inlet.services.writer import tables
from inlet.services.writer.initial_load import with_event_columns
from inlet.services.writer.rows import DELETED_COL, OP_COL
from inlet.services.writer.service import WRITER_LOCK

log = logging.getLogger("inlet.verify")

REPAIR_KEY = "inlet.verify.repair"  # extraMetadata of a repair commit: what it did, as JSON


class RepairError(RuntimeError):
    """A repair cannot be made (one line)."""


@dataclass
class Repair:
    instant: str | None
    upserted: int
    deleted: int
    lsn: int
    via: str  # "coordinator" | "table"
    table_id: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "instant": self.instant,
            "upserted": self.upserted,
            "deleted": self.deleted,
            "lsn": self.lsn,
            "via": self.via,
            "table_id": self.table_id,
        }


@dataclass(frozen=True)
class RepairTarget:
    """Where and how a table is committed."""

    path: str
    database: str
    client: CoordinatorClient | None = None
    topic_prefix: str | None = None
    rules: Sequence[tables.TableRule] = ()
    lease_ms: int = 30_000
    lease_wait_ms: int = 30_000


def repair(
    reader: SourceReader, st: SourceTable, keys: pa.Table, target: RepairTarget, shard: str | None
) -> Repair:
    """Upsert the source's rows of ``keys`` and delete the keys the source lacks, in one commit."""
    prefix = target.topic_prefix or shard
    table_id = f"{prefix}.{st.schema}.{st.table}" if prefix else None
    if target.client is not None and table_id is None:
        raise RepairError(
            f"{st.name}: repairing through the coordinator needs the table id <topic prefix>.<schema>.<table>: "
            "give --topic-prefix (the lake table has no db_shard_source_partition to take it from)"
        )
    settings = tables.settings_for(target.rules, table_id or f"{target.database}.{st.schema}.{st.table}")
    lsn = reader.repair_point()
    rows = reader.read_rows(st, keys)  # read after the repair point (see repair_point)
    hudi = open_table(target.path)
    if hudi is None:
        tables.open_or_create(target.path, tables.hudi_name(st.table), target.database, st.keys, settings)
        hudi = HudiTable.open(target.path)
    schema = hudi.schema()
    others = (
        [] if schema is None else [n for n in schema.names if n not in st.columns and n not in WRITER_COLUMNS]
    )
    lake = read_hashed(hudi, st.fields, st.keys, only_keys=keys, keep_rows=True, extra_columns=others).rows
    assert lake is not None
    upserts = with_event_columns(_with_lake_columns(rows, lake, st.keys, others), lsn, prefix)
    in_source = np.isin(row_hashes(lake, st.keys), row_hashes(rows, st.keys)) if rows.num_rows else None
    gone = lake if in_source is None else lake.filter(pa.array(~in_source))
    moved = _moved(lake, rows, st.keys, hudi.partition_fields, in_source)
    deletes = _as_deletes(with_event_columns(pa.concat_tables([gone, moved]), lsn, prefix))
    data = pa.concat_tables([upserts, deletes], promote_options="default")
    if data.num_rows == 0:
        return Repair(None, 0, 0, lsn, "none", table_id)
    extra = {REPAIR_KEY: json.dumps({"upserted": upserts.num_rows, "deleted": deletes.num_rows, "lsn": lsn})}
    started = time.monotonic()
    with _commit_protocol(target, table_id, hudi) as (protocol, via):
        table = HudiTable.open(target.path, commit_protocol=protocol)
        result = table.write(data, "upsert", dict(settings.options), extra_metadata=extra)
    done = Repair(result.instant_time, upserts.num_rows, deletes.num_rows, lsn, via, table_id)
    log_event(
        log,
        logging.INFO,
        "repair committed",
        table=st.name,
        seconds=round(time.monotonic() - started, 3),
        **done.as_json(),
    )
    return done


def _moved(
    lake: pa.Table,
    rows: pa.Table,
    keys: Sequence[str],
    partition_fields: Sequence[str],
    in_source: np.ndarray | None,
) -> pa.Table:
    """The stored rows of keys the source now holds in another partition: deleted where they are,
    in the repair's commit, while the source's row is written into its own partition (what the
    writer's global index does with a partition-moving update). An upsert alone would leave the old
    copy, and the key twice in the table."""
    if in_source is None or not partition_fields or not set(partition_fields) <= set(lake.column_names):
        return lake.slice(0, 0)
    placed = [*keys, *partition_fields]
    same_place = np.isin(row_hashes(lake, placed), row_hashes(rows, placed))
    return lake.filter(pa.array(in_source & ~same_place))


def _with_lake_columns(
    rows: pa.Table, lake: pa.Table, keys: Sequence[str], others: Sequence[str]
) -> pa.Table:
    """``rows`` plus the lake's value of each column in ``others`` (null where the lake lacks the key)."""
    if not others:
        return rows
    lake_keys = row_hashes(lake, keys)
    order = np.argsort(lake_keys, kind="stable")
    row_keys = row_hashes(rows, keys)
    pos = np.searchsorted(lake_keys[order], row_keys)
    pos = np.minimum(pos, max(len(order) - 1, 0))
    found = (lake_keys[order][pos] == row_keys) if len(order) else np.zeros(len(row_keys), dtype=bool)
    take = pa.array(np.where(found, order[pos] if len(order) else 0, 0), mask=~found)
    for name in others:
        rows = rows.append_column(lake.schema.field(name), lake.column(name).take(take))
    return rows


def _as_deletes(rows: pa.Table) -> pa.Table:
    n = rows.num_rows
    rows = rows.set_column(rows.schema.get_field_index(OP_COL), OP_COL, pa.array(["d"] * n, pa.string()))
    return rows.set_column(
        rows.schema.get_field_index(DELETED_COL), DELETED_COL, pa.array([True] * n, pa.bool_())
    )


@contextlib.contextmanager
def _commit_protocol(
    target: RepairTarget, table_id: str | None, hudi: HudiTable
) -> Iterator[tuple[GrpcCommitProtocol | None, str]]:
    client = target.client
    if client is None:
        yield None, "table"
        return
    assert table_id is not None
    nbcc = TableConfig.CONCURRENCY_MODE.get(hudi.props) == NBCC_MODE
    # idempotent; a registered table keeps its mode
    client.register_table(table_id, target.path, mode="NON_BLOCKING" if nbcc else "OPTIMISTIC")
    protocol = GrpcCommitProtocol(client, table_id, Storage(target.path))
    try:
        if nbcc:
            yield protocol, "coordinator"
            return
        with hold_lease(
            client,
            table_id,
            WRITER_LOCK,
            protocol.writer_id,
            lease_ms=target.lease_ms,
            wait_ms=target.lease_wait_ms,
        ) as lease:
            protocol.fence = (WRITER_LOCK, lease.fencing_token)
            yield protocol, "coordinator"
    finally:
        protocol.close()
