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
    """Keep one record per (record key, partition path): the winner under ``mode``."""
    if table.num_rows <= 1:
        return table
    t = table.append_column(POSITION, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    # a null ordering value sorts first, so any non-null value beats it
    sort_keys = [(KEY, "ascending", "at_start"), (PARTITION, "ascending", "at_start")]
    if mode is MergeMode.EVENT_TIME_ORDERING and ordering_field:
        sort_keys.append((ordering_field, "ascending", "at_start"))
    sort_keys.append((POSITION, "ascending", "at_start"))
    idx = pc.sort_indices(t, sort_keys=sort_keys)
    t = t.take(idx)
    keys = t.column(KEY).combine_chunks()
    parts = t.column(PARTITION).combine_chunks()
    n = t.num_rows
    # a row is the winner of its group if the next row has a different (key, partition)
    same_next = pc.and_(
        pc.equal(keys.slice(0, n - 1), keys.slice(1)),
        pc.equal(parts.slice(0, n - 1), parts.slice(1)),
    )
    last = pc.invert(same_next)
    keep = pa.concat_arrays([last, pa.array([True])])
    winners = t.filter(keep)
    # restore arrival order among winners (stable output for callers)
    winners = winners.take(pc.sort_indices(winners, sort_keys=[(POSITION, "ascending")]))
    return winners.drop_columns([POSITION])


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
