"""Record merging by the table's merge mode.

- ``EVENT_TIME_ORDERING``: the record with the larger ordering-field value wins; on equal values
  the later write wins (later in the batch, or the incoming record over the stored one).
- ``COMMIT_TIME_ORDERING``: the later write always wins.

Deletes issued by the ``delete`` operation win regardless of ordering; records flagged
``_hoodie_is_deleted`` are ordinary records that carry their ordering value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import MergeMode

KEY = "_hoodie_record_key"
PARTITION = "_hoodie_partition_path"
POSITION = "__inlet_pos"


def dedupe(table: pa.Table, mode: MergeMode, ordering_field: str | None) -> pa.Table:
    """Keep one record per (record key, partition path): the winner under ``mode``, winners in
    arrival order. Only the key, partition and ordering columns are sorted; the records are taken
    once (not at all when no key repeats)."""
    if table.num_rows <= 1:
        return table
    columns = {KEY: table.column(KEY), PARTITION: table.column(PARTITION)}
    # a null ordering value sorts first, so any non-null value beats it
    sort_keys = [(KEY, "ascending", "at_start"), (PARTITION, "ascending", "at_start")]
    if mode is MergeMode.EVENT_TIME_ORDERING and ordering_field:
        columns[POSITION + "_ordering"] = table.column(ordering_field)
        sort_keys.append((POSITION + "_ordering", "ascending", "at_start"))
    columns[POSITION] = pa.array(np.arange(table.num_rows, dtype=np.int64))
    sort_keys.append((POSITION, "ascending", "at_start"))
    order = pc.sort_indices(pa.table(columns), sort_keys=sort_keys)
    keys = table.column(KEY).take(order).combine_chunks()
    parts = table.column(PARTITION).take(order).combine_chunks()
    n = table.num_rows
    # a row is the winner of its group if the next row has a different (key, partition)
    same_next = pc.and_(
        pc.equal(keys.slice(0, n - 1), keys.slice(1)),
        pc.equal(parts.slice(0, n - 1), parts.slice(1)),
    )
    if not pc.any(same_next).as_py():
        return table  # every (key, partition) is unique
    keep = pa.concat_arrays([pc.invert(same_next), pa.array([True])])
    # winners in arrival order (stable output for callers): their positions, ascending
    winners = np.sort(np.asarray(order.filter(keep).to_numpy()))
    return table.take(pa.array(winners))


def incoming_wins(
    mode: MergeMode, stored: pa.Array | pa.ChunkedArray | None, incoming: pa.Array | pa.ChunkedArray | None
) -> np.ndarray:
    """Element-wise: does the incoming record replace the stored one (same key)?"""
    if mode is MergeMode.COMMIT_TIME_ORDERING or stored is None or incoming is None:
        n = len(incoming) if incoming is not None else (len(stored) if stored is not None else 0)
        return np.ones(n, dtype=bool)
    if not stored.type.equals(incoming.type):
        try:
            stored = stored.cast(incoming.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            incoming = incoming.cast(stored.type)
    ge = pc.greater_equal(incoming, stored)
    # a null ordering value sorts first: incoming null loses unless stored is null too
    ge = pc.if_else(pc.is_null(incoming), pc.is_null(stored), ge)
    ge = pc.fill_null(ge, True)  # stored null, incoming not null -> incoming wins
    return np.asarray(ge.to_numpy(zero_copy_only=False), dtype=bool)
