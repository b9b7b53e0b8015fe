"""One table's buffered records and where a batch may be cut.

Entries are kept in arrival order (per partition that is offset order). A batch takes a prefix of
each partition's entries (not of the arrival order: the consumer fetches partitions in chunks, so a
transaction spread over several partitions is rarely whole at any point of the arrival order), and
its checkpoint is, per partition, the offset after its last entry there.

A commit never holds part of a source transaction. The CDC consumer relays a transaction's END
to each partition of the table's topic that holds some of its changes, after them, with every
partition's count (``partition_event_counts``): a batch may take a transaction once, in each of
*this worker's* partitions named there, its prefix holds that many of its changes. The END copies
themselves need not be in the batch (an END follows its changes after some changes of later
transactions, so a prefix ending at an END would always hold part of a later transaction); any
END in the buffer counts. An END without counts (a consumer from before per-partition ENDs, sent to
every partition, possibly ahead of the changes) completes the transaction once ``table_event_count``
of its changes are in the batch. A batch is the largest prefix of each partition in which every
transaction is complete. Two exceptions, both logged: a transaction larger than a batch (the buffer
reached ``max_records`` with no complete cut) and a hold longer than ``max_hold_s`` (an END that
never comes).

A forced cut can end inside a transaction; what the batch took of the transactions it left
unfinished (their changes per partition, their ENDs) is carried into the rest of the buffer, so
they complete once the rest arrives instead of waiting for the hold to expire. Only committed
batches are carried (a re-read from the checkpoint never counts a record twice); at most
``MAX_CARRIED`` transactions are remembered.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inlet.services.writer.rows import Change

MAX_CARRIED = 100_000


@dataclass
class Entry:
    partition: int
    offset: int
    size: int
    change: Change | None = None  # None: a transaction END (or another non-data record)
    tx_id: str | None = None  # for a change: its transaction; for an END: the transaction ended
    tx_count: int = 0  # END: table_event_count
    tx_parts: dict[int, int] | None = None  # END relayed per partition: partition -> its changes


@dataclass
class Cut:
    taken: list[bool]  # per buffered entry: in the batch (a prefix of each partition)
    reason: str  # "all", "complete", "oversized_transaction", "hold_expired"

    @property
    def count(self) -> int:
        return sum(self.taken)


@dataclass
class _Transactions:
    """What is known of transactions: their changes (in all, and per partition) and their ENDs."""

    seen: dict[str, int] = field(default_factory=dict)
    seen_parts: dict[str, dict[int, int]] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)  # table-wide END: table_event_count
    parts: dict[str, dict[int, int]] = field(default_factory=dict)  # per-partition END: the counts

    def copy(self) -> _Transactions:
        return _Transactions(
            dict(self.seen),
            {t: dict(c) for t, c in self.seen_parts.items()},
            dict(self.ended),
            dict(self.parts),
        )

    def add_change(self, e: Entry) -> None:
        tx = e.tx_id
        if tx and e.change is not None:
            self.seen[tx] = self.seen.get(tx, 0) + 1
            by_part = self.seen_parts.setdefault(tx, {})
            by_part[e.partition] = by_part.get(e.partition, 0) + 1

    def add_end(self, e: Entry) -> None:
        tx = e.tx_id
        if tx and e.change is None:
            if e.tx_parts:
                self.parts[tx] = e.tx_parts
            else:
                self.ended[tx] = e.tx_count

    def complete(self, tx: str, assigned: set[int] | None) -> bool:
        """All the transaction's changes (in this worker's partitions) are among those counted."""
        if tx in self.ended and self.seen.get(tx, 0) >= self.ended[tx]:
            return True
        counts = self.parts.get(tx)
        if counts is None:
            return False
        seen = self.seen_parts.get(tx, {})
        return all(seen.get(p, 0) >= n for p, n in counts.items() if assigned is None or p in assigned)

    def unfinished(self, assigned: set[int] | None) -> _Transactions:
        """Only the transactions not complete (what a batch carries): changes counted, or an END
        whose changes are still to come."""
        known = dict.fromkeys([*self.seen, *self.ended, *self.parts])
        keep = [tx for tx in known if not self.complete(tx, assigned)][-MAX_CARRIED:]
        return _Transactions(
            {t: self.seen[t] for t in keep if t in self.seen},
            {t: self.seen_parts[t] for t in keep if t in self.seen_parts},
            {t: self.ended[t] for t in keep if t in self.ended},
            {t: self.parts[t] for t in keep if t in self.parts},
        )


@dataclass
class TableBuffer:
    entries: list[Entry] = field(default_factory=list)
    bytes: int = 0
    records: int = 0
    first_at: float | None = None
    # transactions a committed prefix left unfinished
    carried: _Transactions = field(default_factory=_Transactions)
    # this worker's partitions of the table (None: all): a per-partition END names the others too
    assigned: set[int] | None = None

    def add(self, entry: Entry) -> None:
        if not self.entries:
            self.first_at = time.monotonic()
        self.entries.append(entry)
        self.bytes += entry.size
        if entry.change is not None:
            self.records += 1

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0
        self.records = 0
        self.first_at = None

    def taken(self, cut: Cut) -> list[Entry]:
        return [e for e, t in zip(self.entries, cut.taken, strict=True) if t]

    def drop(self, cut: Cut) -> None:
        """Drop the committed entries, carrying what they told of unfinished transactions (the
        ENDs left in the buffer are read again with the rest)."""
        self.carried = self._tally(cut.taken).unfinished(self.assigned)
        rest = [e for e, t in zip(self.entries, cut.taken, strict=True) if not t]
        self.clear()
        for e in rest:
            self.add(e)

    def _tally(self, taken: list[bool] | None = None) -> _Transactions:
        """The carried state, the ``taken`` changes (None: all) and every END in the buffer: an END
        tells which changes a transaction has, wherever it is; the changes must be taken."""
        txs = self.carried.copy()
        for i, e in enumerate(self.entries):
            if e.change is None:
                txs.add_end(e)
            elif taken is None or taken[i]:
                txs.add_change(e)
        return txs

    def age_s(self) -> float:
        return 0.0 if self.first_at is None else time.monotonic() - self.first_at

    def due(self, max_records: int, max_bytes: int, interval_s: float) -> bool:
        if self.records == 0:
            return False
        return self.records >= max_records or self.bytes >= max_bytes or self.age_s() >= interval_s

    def complete_cut(self) -> list[bool]:
        """The largest prefix of each partition's entries in which every transaction touched is
        complete: start from everything, and while some transaction is open, cut each partition
        back to before that transaction's first change there (which may open others)."""
        by_part: dict[int, list[int]] = {}
        for i, e in enumerate(self.entries):
            by_part.setdefault(e.partition, []).append(i)
        limit = {p: len(ix) for p, ix in by_part.items()}
        while True:
            taken = [False] * len(self.entries)
            for p, ix in by_part.items():
                for i in ix[: limit[p]]:
                    taken[i] = True
            txs = self._tally(taken)
            open_txs = {
                e.tx_id
                for e, t in zip(self.entries, taken, strict=True)
                if t and e.change is not None and e.tx_id and not txs.complete(e.tx_id, self.assigned)
            }
            if not open_txs:
                return taken
            for p, ix in by_part.items():
                for k, i in enumerate(ix[: limit[p]]):
                    e = self.entries[i]
                    if e.change is not None and e.tx_id in open_txs:
                        limit[p] = k
                        break

    def open_transactions(self, taken: list[bool] | None = None) -> list[str]:
        txs = self._tally(taken)
        in_buffer = {
            e.tx_id
            for i, e in enumerate(self.entries)
            if (taken is None or taken[i]) and e.change is not None and e.tx_id
        }
        return sorted(tx for tx in in_buffer if not txs.complete(tx, self.assigned))

    def cut(self, max_records: int, max_hold_s: float) -> Cut | None:
        """Where to cut now that the buffer is due (None: hold the cut for now)."""
        taken = self.complete_cut()
        if all(taken):
            return Cut(taken, "all")
        if any(t and e.change is not None for e, t in zip(self.entries, taken, strict=True)):
            return Cut(taken, "complete")
        everything = [True] * len(self.entries)
        if self.records >= max_records:
            return Cut(everything, "oversized_transaction")
        if self.age_s() >= max_hold_s:
            return Cut(everything, "hold_expired")
        return None
