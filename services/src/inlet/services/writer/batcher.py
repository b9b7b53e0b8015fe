"""One table's buffered records and where a batch may be cut.

Entries are kept in arrival order (per partition that is offset order), so any prefix of the
buffer is a prefix of every partition: a batch is a prefix, and its checkpoint is, per partition,
the offset after its last entry there.

A commit never holds part of a source transaction: a prefix may end only where every transaction
with a change in it is complete, i.e. its END arrived and this worker has seen ``table_event_count``
of its changes. Two exceptions, both logged: a transaction larger than a batch (the buffer reached
``max_records`` with no complete cut) and a hold longer than ``max_hold_s`` (several workers share
a table's partitions, so one worker never sees all of a transaction's changes).

The CDC consumer relays a transaction's END as soon as it reads it from Debezium's transaction
topic, which is often before it has read (and relayed) the transaction's changes from the table's
topic: in a change topic the END may come first. A committed prefix can therefore end between a
transaction's END and its changes (or, after a forced cut, in the middle of its changes); what the
prefix knew of the transactions it left unfinished (the END's count, the changes already taken) is
carried into the rest of the buffer, so those changes complete once they arrive instead of waiting
for the hold to expire. Only committed prefixes are carried (a re-read from the checkpoint never
counts a record twice); at most ``MAX_CARRIED`` transactions are remembered.
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


@dataclass
class Cut:
    count: int  # entries in the batch (a prefix)
    reason: str  # "all", "complete", "oversized_transaction", "hold_expired"


@dataclass
class TableBuffer:
    entries: list[Entry] = field(default_factory=list)
    bytes: int = 0
    records: int = 0
    first_at: float | None = None
    # transactions a committed prefix left unfinished: changes taken so far, and the END's count
    carried_seen: dict[str, int] = field(default_factory=dict)
    carried_end: dict[str, int] = field(default_factory=dict)

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

    def drop_prefix(self, count: int) -> None:
        """Drop the committed first ``count`` entries, carrying what they told of unfinished transactions."""
        seen, ended = self._tally(count)
        carried_seen: dict[str, int] = {}
        carried_end: dict[str, int] = {}
        for tx in (*seen, *ended):
            if tx in ended and seen.get(tx, 0) >= ended[tx]:
                continue  # complete: nothing of it can follow
            if tx in seen:
                carried_seen[tx] = seen[tx]
            if tx in ended:
                carried_end[tx] = ended[tx]
        self.carried_seen = dict(list(carried_seen.items())[-MAX_CARRIED:])
        self.carried_end = dict(list(carried_end.items())[-MAX_CARRIED:])
        rest = self.entries[count:]
        self.clear()
        for e in rest:
            self.add(e)

    def _tally(self, upto: int | None = None) -> tuple[dict[str, int], dict[str, int]]:
        """(changes seen, END count) per transaction over the carried state and the first ``upto`` entries."""
        seen = dict(self.carried_seen)
        ended = dict(self.carried_end)
        for e in self.entries[: upto if upto is not None else len(self.entries)]:
            if e.change is not None and e.tx_id:
                seen[e.tx_id] = seen.get(e.tx_id, 0) + 1
            elif e.change is None and e.tx_id:
                ended[e.tx_id] = e.tx_count
        return seen, ended

    def age_s(self) -> float:
        return 0.0 if self.first_at is None else time.monotonic() - self.first_at

    def due(self, max_records: int, max_bytes: int, interval_s: float) -> bool:
        if self.records == 0:
            return False
        return self.records >= max_records or self.bytes >= max_bytes or self.age_s() >= interval_s

    def complete_prefix(self) -> int:
        """Length of the longest prefix in which every transaction touched is complete."""
        seen = dict(self.carried_seen)
        ended = dict(self.carried_end)
        open_txs: set[str] = set()
        best = 0
        for i, e in enumerate(self.entries):
            if e.change is not None and e.tx_id:
                seen[e.tx_id] = seen.get(e.tx_id, 0) + 1
                open_txs.add(e.tx_id)
            elif e.change is None and e.tx_id:
                ended[e.tx_id] = e.tx_count
            for tx in list(open_txs):
                if tx in ended and seen.get(tx, 0) >= ended[tx]:
                    open_txs.discard(tx)
            if not open_txs:
                best = i + 1
        return best

    def open_transactions(self, upto: int | None = None) -> list[str]:
        seen, ended = self._tally(upto)
        in_buffer = {e.tx_id for e in self.entries[:upto] if e.change is not None and e.tx_id}
        seen = {tx: n for tx, n in seen.items() if tx in in_buffer}
        return sorted(tx for tx, n in seen.items() if tx not in ended or n < ended[tx])

    def cut(self, max_records: int, max_hold_s: float) -> Cut | None:
        """Where to cut now that the buffer is due (None: hold the cut for now)."""
        n = self.complete_prefix()
        if n == len(self.entries):
            return Cut(n, "all")
        if n > 0 and any(e.change is not None for e in self.entries[:n]):
            return Cut(n, "complete")
        if self.records >= max_records:
            return Cut(len(self.entries), "oversized_transaction")
        if self.age_s() >= max_hold_s:
            return Cut(len(self.entries), "hold_expired")
        return None
