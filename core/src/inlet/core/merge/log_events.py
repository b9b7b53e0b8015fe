"""The merge rules of :mod:`inlet.core.merge.records` applied to whole columns (Arrow compute and numpy): the log records of a file slice become one table of *events* in write order (a sequence number each), and each key's events reduce to its current version in closed form (:class:`MergedLogs`).

Event time: let ``k`` be the key's last always-winning delete; without one, the winner is the
event with the largest (ordering value, sequence number); after one, the delete block entries
that directly follow it are void, and the winner is the largest (ordering value, sequence number)
from the first record (or ``_hoodie_is_deleted`` record) after it on, the base record being
shadowed. Commit time: the last event wins. The base record of a key then meets the key's version
with one vectorised comparison. A key takes the record-by-record path (:class:`RecordMerger`)
only when its log records hold a partial-update placeholder (filling is order-dependent), or an
ordering value the reader cannot compare in Arrow exactly as Python does (NaN, a delete's
ordering value of another kind than the ordering column's, or an ordering column of an
unsupported type); other keys of the slice stay vectorised.

Memory: the current version of every key written by the slice's counted log blocks as Arrow
columns (keys on the record-by-record path as Python objects), plus the events read since the
last reduction (a reduction runs when they reach the larger of :data:`REDUCE_ROWS` and the number
of kept versions).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from inlet.core.config import MergeMode
from inlet.core.log.reader import (
    is_default_ordering_value,
)
from inlet.core.merge import dedupe as merging
from inlet.core.merge.records import (
    Ints,
    KeyVersion,
    Mask,
    MergeConfig,
    RecordMerger,
    SliceStats,
    rows_table,
    table_keys,
)

REDUCE_ROWS = 1 << 18  # pending log events that trigger a reduction (at the least)


# Columns an event table carries besides the read's columns. Events are kept in write order.
RECORD, DATA_DELETE, BLOCK_DELETE = 0, 1, 2  # a data record, a _hoodie_is_deleted record, a delete entry
_KEY = "__inlet_key"
_SEQ = "__inlet_seq"  # write order: 2 per event (a stand-in delete takes the odd number before)
_KIND = "__inlet_kind"
_CTD = "__inlet_ctd"  # a delete with Hudi's default ordering value: it wins whatever the ordering
_SLOW = "__inlet_slow"  # the key needs the record-by-record merge
_FIRST = "__inlet_first"  # sequence number of the key's first write (inserts come out in that order)
_META = (_KEY, _SEQ, _KIND, _CTD, _SLOW, _FIRST)
_META_TYPES = (pa.string(), pa.int64(), pa.int8(), pa.bool_(), pa.bool_(), pa.int64())


def _comparable(typ: pa.DataType) -> bool:
    """Ordering types whose Arrow order is Python's order of their values."""
    t = pa.types
    return bool(
        t.is_integer(typ)
        or t.is_float32(typ)
        or t.is_float64(typ)
        or t.is_decimal(typ)
        or t.is_string(typ)
        or t.is_large_string(typ)
        or t.is_binary(typ)
        or t.is_large_binary(typ)
        or t.is_fixed_size_binary(typ)
        or t.is_boolean(typ)
        or t.is_date(typ)
        or t.is_timestamp(typ)
        or t.is_time(typ)
    )


def _natural(typ: pa.DataType) -> Callable[[Any], bool]:
    """Whether a Python value is of the kind an Arrow column of ``typ`` yields (see
    :func:`inlet.core.log_reader.same_ordering_kind`)."""
    t = pa.types
    if t.is_integer(typ):
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if t.is_floating(typ):
        return lambda v: isinstance(v, float)
    if t.is_decimal(typ):
        return lambda v: isinstance(v, decimal.Decimal)
    if t.is_string(typ) or t.is_large_string(typ):
        return lambda v: isinstance(v, str)
    if t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ):
        return lambda v: isinstance(v, bytes)
    if t.is_boolean(typ):
        return lambda v: isinstance(v, bool)
    if t.is_date(typ):
        return lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if t.is_timestamp(typ):
        aware = typ.tz is not None
        return lambda v: isinstance(v, dt.datetime) and (v.tzinfo is not None) == aware
    if t.is_time(typ):
        return lambda v: isinstance(v, dt.time)
    return lambda v: False


def _exact_array(values: list[Any], typ: pa.DataType) -> tuple[pa.Array, list[bool]]:
    """``values`` as an Arrow array of ``typ``, and which of them it holds exactly (of the column's
    kind, not NaN, not rounded); the others (and None) are null in the array."""
    natural = _natural(typ)
    wanted = [v if v is not None and natural(v) else None for v in values]
    try:
        arr = pa.array(wanted, typ)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        fits = []
        for v in wanted:
            try:
                pa.array([v], typ)
                fits.append(v)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                fits.append(None)
        wanted = fits
        arr = pa.array(wanted, typ)
    back = arr.to_pylist()
    exact = [w is not None and b == w for w, b in zip(wanted, back, strict=True)]
    if not all(e or w is None for e, w in zip(exact, wanted, strict=True)):
        arr = pa.array([b if e else None for b, e in zip(back, exact, strict=True)], typ)
    return arr, exact


def marker_mask(col: pa.Array | pa.ChunkedArray, marker: str) -> pa.Array | pa.ChunkedArray | None:
    """Where a string or bytes column holds the partial-update placeholder (None: no such column)."""
    typ = col.type
    if pa.types.is_dictionary(typ):
        col = col.cast(typ.value_type)
        typ = typ.value_type
    t = pa.types
    if t.is_string(typ) or t.is_large_string(typ):
        value: str | bytes = marker
    elif t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ):
        value = marker.encode()
        if t.is_fixed_size_binary(typ) and typ.byte_width != len(value):
            return None
    else:
        return None
    return pc.fill_null(pc.equal(col, pa.scalar(value, typ)), False)


def numpy_bool(arr: pa.Array | pa.ChunkedArray) -> Mask:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


class _EventBuilder:
    """Turns decoded log records and delete entries into event tables (the read's columns plus
    :data:`_META`), numbering them in write order."""

    def __init__(self, config: MergeConfig, schema: pa.Schema) -> None:
        self.config = config
        self.schema = schema
        field = config.ordering_field
        self.ordering = field if field is not None and field in schema.names else None
        self.ordering_type = schema.field(field).type if self.ordering is not None else None
        # an event-time merge over an ordering column Arrow cannot order like Python: row by row
        self.all_slow = (
            config.event_time and self.ordering_type is not None and not _comparable(self.ordering_type)
        )
        marker = config.unavailable_value
        self.marker = marker
        self.marker_columns = (
            [f.name for f in schema if marker_mask(pa.nulls(0, f.type), marker) is not None]
            if marker is not None
            else []
        )
        self.seq = 0
        self.originals: dict[int, Any] = {}  # delete entries' ordering values no column holds exactly
        self.event_schema = pa.schema(
            list(schema) + [pa.field(n, t) for n, t in zip(_META, _META_TYPES, strict=True)]
        )

    def _numbers(self, n: int) -> Ints:
        seq = np.arange(self.seq, self.seq + 2 * n, 2, dtype=np.int64)
        self.seq += 2 * n
        return seq

    def _default_ordering(self, table: pa.Table) -> Mask:
        """Where a record's ordering value is Hudi's default (null, or integer 0)."""
        if self.ordering is None:
            return np.ones(table.num_rows, dtype=bool)
        col = table.column(self.ordering)
        default = pc.is_null(col)
        if self.ordering_type is not None and pa.types.is_integer(self.ordering_type):
            default = pc.or_(default, pc.fill_null(pc.equal(col, 0), False))
        return numpy_bool(default)

    def records(self, table: pa.Table, keys: pa.Array, deleted: Mask) -> pa.Table:
        """Events of data records (``table`` cast to the read's schema; ``deleted``: the
        ``_hoodie_is_deleted`` flag)."""
        n = table.num_rows
        seq = self._numbers(n)
        kind = np.where(deleted, DATA_DELETE, RECORD).astype(np.int8)
        ctd = deleted & self._default_ordering(table)
        slow = np.zeros(n, dtype=bool)
        if self.all_slow:
            slow[:] = True
        if self.marker is not None:
            for name in self.marker_columns:
                mask = marker_mask(table.column(name), self.marker)
                if mask is not None:
                    slow |= numpy_bool(mask) & ~deleted
        typ = self.ordering_type
        if (
            self.config.event_time
            and self.ordering is not None
            and typ is not None
            and pa.types.is_floating(typ)
        ):
            slow |= numpy_bool(pc.is_nan(table.column(self.ordering)))
        meta = [keys, pa.array(seq), pa.array(kind), pa.array(ctd), pa.array(slow), pa.array(seq)]
        return pa.Table.from_arrays([*table.columns, *meta], schema=self.event_schema)

    def deletes(self, keys: list[str], orderings: list[Any]) -> pa.Table:
        """Events of a delete block's entries."""
        n = len(keys)
        seq = self._numbers(n)
        ctd = np.fromiter((is_default_ordering_value(v) for v in orderings), dtype=bool, count=n)
        if self.ordering is not None and self.ordering_type is not None:
            values, exact = _exact_array(orderings, self.ordering_type)
            inexact = np.fromiter((not e for e in exact), dtype=bool, count=n)
        else:
            values = None
            inexact = np.ones(n, dtype=bool)
        # a real ordering value the ordering column cannot hold exactly: row by row (an always-winning
        # delete's value, e.g. the integer 0 against a timestamp column, never takes part in a comparison)
        slow = inexact & ~ctd
        if self.all_slow:
            slow[:] = True
        for i in np.flatnonzero(slow):
            self.originals[int(seq[i])] = orderings[i]
        cols = [
            values if values is not None and f.name == self.ordering else pa.nulls(n, f.type)
            for f in self.schema
        ]
        kind = np.full(n, BLOCK_DELETE, dtype=np.int8)
        meta = [pa.array(keys, pa.string()), pa.array(seq), pa.array(kind), pa.array(ctd), pa.array(slow)]
        return pa.Table.from_arrays([*cols, *meta, pa.array(seq)], schema=self.event_schema)

    def empty(self) -> pa.Table:
        return self.event_schema.empty_table()


def _group(keys: pa.Array | pa.ChunkedArray) -> tuple[Ints, Ints, Ints, Ints]:
    """Group events by key: (order, group of each sorted event, group starts, group sizes). Events
    are in write order, so the stable sort leaves each key's events in write order."""
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    codes = np.asarray(pc.dictionary_encode(arr).indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(codes, kind="stable").astype(np.int64)
    sorted_codes = codes[order]
    n = len(codes)
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]).astype(np.int64)
    sizes = np.diff(np.r_[starts, n]).astype(np.int64)
    gid = np.repeat(np.arange(len(starts), dtype=np.int64), sizes)
    return order, gid, starts, sizes


def _reduce(events: pa.Table, config: MergeConfig, ordering: str | None) -> tuple[pa.Table, Mask]:
    """Each key's current version: (the winning event of every key, in write order, and whether
    it shadows the base record, i.e. an always-winning delete came before it). Winners that are
    delete entries become ``_hoodie_is_deleted`` records (the same state; see the module
    docstring for the rules)."""
    n = events.num_rows
    if n == 0:
        return events, np.zeros(0, dtype=bool)
    order, gid, starts, sizes = _group(events.column(_KEY))
    kind = np.asarray(events.column(_KIND).to_numpy(), dtype=np.int8)[order]
    ctd = np.asarray(events.column(_CTD).to_numpy(zero_copy_only=False), dtype=bool)[order]
    pos = np.arange(n, dtype=np.int64)
    last_ctd = np.maximum.reduceat(np.where(ctd, pos, -1), starts)
    if config.event_time:
        k = last_ctd[gid]
        # the first record after the last always-winning delete (delete entries there are void)
        after = np.where((kind != BLOCK_DELETE) & (pos > k), pos, n)
        m = np.minimum.reduceat(after, starts)[gid]
        low = np.where(k < 0, starts[gid], np.where(m < n, m, k))
        active = (pos >= low) & ((k < 0) | (m < n) | (pos == k))  # no record after k: k stays
        rows = order[active]
        ordering_col = events.column(ordering).take(pa.array(rows)) if ordering is not None else None
        winners = rows[merging.group_winners([pa.array(gid[active])], ordering_col)]
        shadow = last_ctd >= 0
    else:
        winners = order[starts + sizes - 1]
        # a delete entry resets the shadow; an always-winning delete at or after the last one sets it
        last_entry = np.maximum.reduceat(np.where(kind == BLOCK_DELETE, pos, -1), starts)
        shadow = (last_ctd >= 0) & (last_ctd >= last_entry)
    first = np.minimum.reduceat(np.asarray(events.column(_FIRST).to_numpy())[order], starts)
    by_write = np.argsort(winners, kind="stable")
    winners, shadow, first = winners[by_write], shadow[by_write], first[by_write]
    won = events.take(pa.array(winners))
    kinds = won.column(_KIND)
    won = won.set_column(
        won.schema.get_field_index(_KIND),
        _KIND,
        pc.if_else(pc.equal(kinds, BLOCK_DELETE), pa.scalar(DATA_DELETE, pa.int8()), kinds),
    )
    won = won.set_column(won.schema.get_field_index(_FIRST), _FIRST, pa.array(first))
    return won, shadow


def _as_events(won: pa.Table, shadow: Mask, schema: pa.Schema) -> pa.Table:
    """Current versions as an equivalent event sequence: a shadowing version (not itself an
    always-winning delete) is preceded by a stand-in always-winning delete."""
    need = shadow & ~np.asarray(won.column(_CTD).to_numpy(zero_copy_only=False), dtype=bool)
    if not need.any():
        return won
    lead = won.filter(pa.array(need))
    n = lead.num_rows
    seq = pc.subtract(lead.column(_SEQ), 1)
    cols = [pa.nulls(n, f.type) for f in schema] + [
        lead.column(_KEY),
        seq,
        pa.array(np.full(n, BLOCK_DELETE, dtype=np.int8)),
        pa.array(np.ones(n, dtype=bool)),
        pa.array(np.zeros(n, dtype=bool)),
        lead.column(_FIRST),
    ]
    both = pa.concat_tables([pa.Table.from_arrays(cols, schema=won.schema), won])
    return both.take(pc.sort_indices(both.column(_SEQ)))


class MergedLogs:
    """The merged log records of one file slice: the current version of every key the counted
    log blocks wrote (vectorised; keys that need it on :class:`RecordMerger`)."""

    def __init__(self, config: MergeConfig, schema: pa.Schema) -> None:
        self.config = config
        self.schema = schema
        self._events = _EventBuilder(config, schema)
        self._state = self._events.empty()  # current versions as events, in write order
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.slow = RecordMerger(config)
        self._slow_first: dict[str, int] = {}
        # after finish(): the vectorised keys' versions and flags, and the lookup of all keys
        self._won = self._events.empty()
        self._shadow: Mask = np.zeros(0, dtype=bool)
        self._keys = pa.array([], pa.string())
        self._slow_keys: list[str] = []
        self._consumed: Mask = np.zeros(0, dtype=bool)
        self._is_record: Mask = np.zeros(0, dtype=bool)
        self._left = 0

    # ------------------------------------------------------------------ collecting

    def add(self, events: pa.Table) -> None:
        if events.num_rows == 0:
            return
        self._pending.append(events)
        self._pending_rows += events.num_rows
        if self._pending_rows >= max(REDUCE_ROWS, self._state.num_rows):
            won, shadow = self._reduce()
            self._state = _as_events(won, shadow, self.schema)

    def add_records(self, table: pa.Table, keys: pa.Array, deleted: Mask) -> None:
        self.add(self._events.records(table, keys, deleted))

    def add_deletes(self, keys: list[str], orderings: list[Any]) -> None:
        self.add(self._events.deletes(keys, orderings))

    def _reduce(self) -> tuple[pa.Table, Mask]:
        events = pa.concat_tables([self._state, *self._pending]).combine_chunks()
        self._pending, self._pending_rows = [], 0
        keys = events.column(_KEY)
        slow = events.column(_SLOW)
        slow_keys = pc.unique(keys.filter(slow))
        if isinstance(slow_keys, pa.ChunkedArray):
            slow_keys = slow_keys.combine_chunks()
        if self.slow.entries:
            slow_keys = pa.concat_arrays([slow_keys, pa.array(list(self.slow.entries), pa.string())])
        if len(slow_keys):
            to_slow = pc.is_in(keys, value_set=slow_keys)
            self._replay(events.filter(to_slow))
            events = events.filter(pc.invert(to_slow))
        return _reduce(events, self.config, self._events.ordering)

    def _replay(self, events: pa.Table) -> None:
        """Feed events (in write order) to the record-by-record merger."""
        names = self.schema.names
        ordering = self._events.ordering
        originals = self._events.originals
        for ev in events.to_pylist():
            key = ev[_KEY]
            first = self._slow_first.get(key)
            if first is None or ev[_FIRST] < first:
                self._slow_first[key] = ev[_FIRST]
            if ev[_KIND] == BLOCK_DELETE:
                value = originals.pop(ev[_SEQ], ev[ordering] if ordering is not None else None)
                self.slow.add_delete(key, value)
            else:
                self.slow.add_record(key, {c: ev[c] for c in names}, ev[_KIND] == DATA_DELETE)

    def finish(self) -> None:
        """Reduce what is pending; afterwards the versions can be merged with base records."""
        self._won, self._shadow = self._reduce()
        self._state = self._events.empty()
        self._slow_keys = list(self.slow.entries)
        self._keys = pa.concat_arrays(
            [self._won.column(_KEY).combine_chunks(), pa.array(self._slow_keys, pa.string())]
        )
        self._consumed = np.zeros(len(self._keys), dtype=bool)
        self._left = len(self._keys)
        self._is_record = np.asarray(self._won.column(_KIND).to_numpy(), dtype=np.int8) == RECORD

    # ------------------------------------------------------------------ results

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def entries(self) -> dict[str, KeyVersion]:
        """Each key's version as :class:`RecordMerger` entries (for inspection; slow)."""
        out: dict[str, KeyVersion] = {}
        ordering = self._events.ordering
        names = self.schema.names
        for ev, shadow in zip(self._won.to_pylist(), self._shadow.tolist(), strict=True):
            row = {c: ev[c] for c in names} if ev[_KIND] == RECORD else None
            out[ev[_KEY]] = KeyVersion(row, ev[ordering] if ordering is not None else None, shadow)
        out.update(self.slow.entries)
        return out

    def merge_base(self, table: pa.Table, stats: SliceStats | None) -> Iterator[pa.Table]:
        """The merged records of one batch of base records (``table``, of the read's schema):
        untouched records first, then the merged ones in base order. A key's version is consumed
        by its first base record (as in Hudi's reader): a duplicate base record passes through."""
        if self._left == 0:
            yield table
            return
        keys = table_keys(table, self.config)
        idx = pc.index_in(keys, value_set=self._keys)
        touched = pc.is_valid(idx)
        untouched = table.filter(pc.invert(touched))
        if untouched.num_rows:
            yield untouched
        hit = table.filter(touched)
        h = hit.num_rows
        if h == 0:
            return
        at = np.asarray(idx.filter(touched).to_numpy(zero_copy_only=False), dtype=np.int64)
        uniq, first_at = np.unique(at, return_index=True)
        fresh = ~self._consumed[uniq]
        merge_at, merge_idx = first_at[fresh], uniq[fresh]
        self._consumed[uniq] = True
        self._left -= int(fresh.sum())

        use_log = np.zeros(h, dtype=bool)  # the log version replaces the base record
        fill = np.zeros(h, dtype=bool)  # the base record wins over a log record: fill its placeholders
        deleted = np.zeros(h, dtype=bool)
        version = np.full(h, -1, dtype=np.int64)
        n_vec = self._won.num_rows
        vec = merge_idx < n_vec
        rows_at, ver = merge_at[vec], merge_idx[vec]
        version[rows_at] = ver
        is_record = self._is_record[ver]
        if self.config.event_time:
            wins = self._shadow[ver].copy()
            open_ = np.flatnonzero(~wins)
            if len(open_):
                wins[open_] = self._log_wins(hit, rows_at[open_], ver[open_])
        else:
            wins = np.ones(len(ver), dtype=bool)
        use_log[rows_at] = wins & is_record
        deleted[rows_at] = wins & ~is_record
        fill[rows_at] = ~wins & is_record

        slow_at = merge_at[~vec]
        slow_rows: list[dict[str, Any]] = []
        slow_pos = np.full(h, -1, dtype=np.int64)
        if len(slow_at):
            for i, row in zip(slow_at.tolist(), hit.take(pa.array(slow_at)).to_pylist(), strict=True):
                out = self.slow.merge_base(self._slow_keys[int(at[i]) - n_vec], row)
                if out is None:
                    deleted[i] = True
                else:
                    slow_pos[i] = len(slow_rows)
                    slow_rows.append(out)
        if stats is not None:
            merged = len(merge_at)
            stats.deleted += int(deleted.sum())
            stats.updated += merged - int(deleted.sum())

        cols = list(hit.columns)
        if use_log.any() or fill.any():
            logs = self._won.take(pa.array(version, mask=version < 0))
            use = pa.array(use_log)
            for i, name in enumerate(self.schema.names):
                col = pc.if_else(use, logs.column(name), cols[i])
                if fill.any() and name in self._events.marker_columns and self.config.unavailable_value:
                    mask = marker_mask(cols[i], self.config.unavailable_value)
                    if mask is not None:
                        col = pc.if_else(pc.and_(pa.array(fill), mask), logs.column(name), col)
                cols[i] = col
        if slow_rows:
            done = rows_table(slow_rows, self.schema).take(pa.array(slow_pos, mask=slow_pos < 0))
            is_slow = pa.array(slow_pos >= 0)
            cols = [pc.if_else(is_slow, done.column(i), c) for i, c in enumerate(cols)]
        out_table = pa.Table.from_arrays(cols, schema=self.schema)
        if deleted.any():
            out_table = out_table.filter(pa.array(~deleted))
        if out_table.num_rows:
            yield out_table

    def _log_wins(self, hit: pa.Table, rows_at: Ints, ver: Ints) -> Mask:
        """Event time: does the log version win over the base record (ties to the log)?"""
        ordering = self._events.ordering
        if ordering is None:
            return np.ones(len(ver), dtype=bool)  # null against null: the later write
        base = hit.column(ordering).take(pa.array(rows_at))
        log = self._won.column(ordering).take(pa.array(ver))
        wins = merging.incoming_wins(MergeMode.EVENT_TIME_ORDERING, base, log)
        if pa.types.is_floating(base.type):  # NaN compares equal to anything: the later write
            nan = pc.or_(pc.fill_null(pc.is_nan(base), False), pc.fill_null(pc.is_nan(log), False))
            both = pc.and_(pc.is_valid(base), pc.is_valid(log))
            wins |= numpy_bool(pc.and_(nan, both))
        return wins

    def remaining(self) -> pa.Table:
        """Records the logs hold for keys no base record had (inserts), in first-write order."""
        n_vec = self._won.num_rows
        keep = self._is_record & ~self._consumed[:n_vec]
        vec = self._won.filter(pa.array(keep))
        firsts = [np.asarray(vec.column(_FIRST).to_numpy(), dtype=np.int64)]
        parts = [vec.select(self.schema.names)]
        rows = []
        slow_first = []
        for key, entry in self.slow.entries.items():
            if entry.row is not None:
                rows.append(entry.row)
                slow_first.append(self._slow_first[key])
        if rows:
            parts.append(rows_table(rows, self.schema))
            firsts.append(np.asarray(slow_first, dtype=np.int64))
        out = pa.concat_tables(parts)
        if len(parts) > 1:
            out = out.take(pa.array(np.argsort(np.concatenate(firsts), kind="stable")))
        elif len(firsts[0]) > 1 and np.any(np.diff(firsts[0]) < 0):
            out = out.take(pa.array(np.argsort(firsts[0], kind="stable")))
        return out
