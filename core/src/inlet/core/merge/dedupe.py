"""Record merging by the table's merge mode.

- ``EVENT_TIME_ORDERING``: the record with the larger ordering-field value wins; on equal values
  the later write wins (later in the batch, or the incoming record over the stored one).
- ``COMMIT_TIME_ORDERING``: the later write always wins.

Deletes issued by the ``delete`` operation win regardless of ordering; records flagged
``_hoodie_is_deleted`` are ordinary records that carry their ordering value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import MergeMode
from inlet.core.schema import MetaField

KEY: str = MetaField.RECORD_KEY.value
PARTITION: str = MetaField.PARTITION_PATH.value
POSITION = "__inlet_pos"


def group_winners(
    groups: Sequence[pa.Array | pa.ChunkedArray], ordering: pa.Array | pa.ChunkedArray | None
) -> np.ndarray:
    """Row positions (ascending) of the winner of each group of rows with equal ``groups`` values:
    the row with the largest ``ordering`` value (a null sorts first, so any value beats it), ties
    going to the later row; without ``ordering`` the last row of the group.

    Only the group, ordering and position columns are sorted (one multi-key sort)."""
    n = len(groups[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    sort_keys = []
    for i, g in enumerate(groups):
        columns[f"{POSITION}_g{i}"] = g
        sort_keys.append((f"{POSITION}_g{i}", "ascending", "at_start"))
    if ordering is not None:
        columns[POSITION + "_ordering"] = ordering
        sort_keys.append((POSITION + "_ordering", "ascending", "at_start"))
    columns[POSITION] = pa.array(np.arange(n, dtype=np.int64))
    sort_keys.append((POSITION, "ascending", "at_start"))
    order = pc.sort_indices(pa.table(columns), sort_keys=sort_keys)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    # a row is the winner of its group if the next row belongs to another group
    same_next = None
    for g in groups:
        sorted_g = g.take(order)
        if isinstance(sorted_g, pa.ChunkedArray):
            sorted_g = sorted_g.combine_chunks()
        a, b = sorted_g.slice(0, n - 1), sorted_g.slice(1)
        eq = pc.fill_null(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b)))  # nulls: one group
        same_next = eq if same_next is None else pc.and_(same_next, eq)
    assert same_next is not None
    keep = pa.concat_arrays([pc.invert(same_next), pa.array([True])])
    return np.sort(np.asarray(order.filter(keep).to_numpy()))


def dedupe(table: pa.Table, mode: MergeMode, ordering_field: str | None) -> pa.Table:
    """Keep one record per (record key, partition path): the winner under ``mode``, winners in
    arrival order. Only the key, partition and ordering columns are sorted; the records are taken
    once (not at all when no key repeats)."""
    if table.num_rows <= 1:
        return table
    ordering = (
        table.column(ordering_field) if mode is MergeMode.EVENT_TIME_ORDERING and ordering_field else None
    )
    winners = group_winners([table.column(KEY), table.column(PARTITION)], ordering)
    if len(winners) == table.num_rows:
        return table  # every (key, partition) is unique
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
